"""The engine-port methods of :class:`~phronomy_fsm.store.postgres.store.PostgresStore`
besides commits: reads, the inbox, workers and leases, claims, machines.

Mixed into the store class, whose ``_reading(operation, fn)`` and
``_writing(operation, fn, execution_id=...)`` run ``fn(cursor)`` on a pooled
connection (a write in one transaction whose lock waits end after the store's
``lock_timeout_seconds`` with a LockTimeoutError naming ``execution_id``), retrying a
broken connection. Every time a lease depends on is the
server's (``phronomy_now_ms()``). Semantics as on SQLite
(:mod:`phronomy_fsm.store._durable`; ``docs/semantics.md`` "Signals", "Leases and
fencing"); claims take rows with ``FOR UPDATE SKIP LOCKED``, so workers racing for
runnable executions never wait on each other and never take the same one.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime
from typing import Any

from phronomy_fsm.durable.claims import Claimable, RunnableSpecs, SpecKeys, spec_keys
from phronomy_fsm.durable.codec import epoch_ms_to_datetime
from phronomy_fsm.durable.records import (
    BarrierLogRecord,
    DurableCommit,
    ExecutionRecord,
    Fence,
    JournalEntry,
    MachineRecord,
    SignalPoll,
    SignalRecord,
    WorkerRecord,
    from_json,
    to_json,
)
from phronomy_fsm.errors import (
    ExecutionFinishedError,
    NotFoundError,
    SignalRefusedError,
    StorageError,
)
from phronomy_fsm.store.postgres._commit import (
    INSERT_SIGNAL,
    SIGNALS_CHANNEL,
    WORK_CHANNEL,
    check_fence,
    lock_inboxes,
)
from phronomy_fsm.store.postgres.schema import NOW_MS
from phronomy_fsm.store.refusals import reused_signal_id_refusal
from phronomy_fsm.table import COMMITTED, CONFLICT, NOT_COMMITTED

_SIGNAL_COLUMNS = "seq, body, consumed_revision, outcome"
_SIGNAL_COLUMNS_OF_S = "s.seq, s.body, s.consumed_revision, s.outcome"
#: The text of a ``txid_snapshot``: ``xmin:xmax:xip,xip,...``.
_SNAPSHOT = re.compile(r"\d+:\d+:(\d+(,\d+)*)?")
_LIVE_OWNER = (
    "EXISTS (SELECT 1 FROM workers w WHERE w.worker_id = e.owner_id"
    f" AND w.lease_expires_epoch_ms >= {NOW_MS})"
)
#: The rank of an execution in a claim (lower first), without and with ``new_first``
#: (as the SQLite store's ``CLAIM_ORDER``; ``docs/scale-out.md``, "Running workers").
_WAITING_ONLY = " AND e.status = 'waiting'"
_CLAIM_ORDER = {
    False: "CASE WHEN e.status = 'waiting' THEN 1 ELSE 0 END",
    True: "CASE WHEN e.status = 'waiting' THEN 2 WHEN e.fence = 0 THEN 0 ELSE 1 END",
}
_MY_LEASE = (
    "EXISTS (SELECT 1 FROM workers me WHERE me.worker_id = %(worker)s"
    f" AND me.lease_expires_epoch_ms >= {NOW_MS})"
)

#: An execution's spec version (text), read from its stored record.
_SPEC_VERSION = "(e.body::jsonb ->> 'spec_version')"
#: True for an execution ``e`` whose spec the claim's SpecKeys run (``runs_params``);
#: one statement text whatever the keys, and the record is parsed only for a row the
#: cheaper terms did not match and only when some migration is declared.
_RUNS = (
    "(e.machine = ANY(%(any_spec)s) OR e.machine || '/' || e.spec_sha256 = ANY(%(shas)s)"
    f" OR (%(by_version)s AND (e.machine || '/' || {_SPEC_VERSION} = ANY(%(versions)s)"
    f" OR e.machine || '/' || {_SPEC_VERSION} || '/' || e.spec_sha256 = ANY(%(pairs)s))))"
)


def runs_params(keys: SpecKeys) -> dict[str, Any]:
    """The parameters of :data:`_RUNS` (and ``machines``, the indexed filter)."""
    return {
        "machines": list(keys.machines),
        "any_spec": list(keys.any_spec),
        "shas": list(keys.shas),
        "by_version": keys.needs_version,
        "versions": list(keys.versions),
        "pairs": list(keys.pairs),
    }


def _signal_from_row(row: tuple[Any, ...]) -> SignalRecord:
    seq, body, consumed, outcome = row
    record: SignalRecord = from_json(SignalRecord, body)
    return record.__class__(
        signal_id=record.signal_id,
        execution_id=record.execution_id,
        kind=record.kind,
        created_at=record.created_at,
        event=record.event,
        payload=record.payload,
        expected_revision=record.expected_revision,
        sender=record.sender,
        seq=int(seq),
        consumed_revision=consumed,
        outcome=outcome,
    )


def _row_filters(
    machine: str | None, status: str | None, exclusive_key: str | None
) -> tuple[list[str], list[Any]]:
    """WHERE clauses and parameters of the execution-row filters that are given."""
    where: list[str] = []
    params: list[Any] = []
    for column, value in (
        ("machine", machine),
        ("status", None if status is None else _value(status)),
        ("exclusive_key", exclusive_key),
    ):
        if value is not None:
            where.append(f"{column} = %s")
            params.append(value)
    return where, params


def _value(status: Any) -> str | None:
    return None if status is None else str(getattr(status, "value", status))


class PostgresReads:
    """The reads and maintenance writes of the PostgreSQL store (module docstring)."""

    path: str

    def _reading(self, operation: str, fn: Callable[[Any], Any]) -> Any:  # from the store
        raise NotImplementedError

    def _writing(  # from the store
        self, operation: str, fn: Callable[[Any], Any], *, execution_id: str | None = None
    ) -> Any:
        raise NotImplementedError

    def _fetchall(self, operation: str, sql: str, params: Any = ()) -> list[tuple[Any, ...]]:
        def run(cur: Any) -> list[tuple[Any, ...]]:
            cur.execute(sql, params)
            return list(cur.fetchall())

        return self._reading(operation, run)  # type: ignore[no-any-return]

    def server_time_ms(self) -> int:
        """The server's clock in epoch milliseconds (what leases are measured on)."""
        return int(self._fetchall("server_time", f"SELECT {NOW_MS}")[0][0])

    # ------------------------------------------------------------------ executions

    def load_record(self, execution_id: str) -> ExecutionRecord:
        """The stored execution.

        Raises: NotFoundError, SerializationError, StorageError."""
        rows = self._fetchall(
            "load_record", "SELECT body FROM executions WHERE execution_id = %s", (execution_id,)
        )
        if not rows:
            raise NotFoundError(
                f"execution {execution_id} does not exist", execution_id=execution_id
            )
        return from_json(ExecutionRecord, rows[0][0])  # type: ignore[no-any-return]

    def list_records(
        self,
        *,
        machine: str | None = None,
        status: str | None = None,
        state: str | None = None,
        exclusive_key: str | None = None,
        parent_execution_id: str | None = None,
        active: bool | None = None,
        owner_id: str | None = None,
        limit: int | None = None,
        offset: int = 0,
    ) -> list[ExecutionRecord]:
        """Executions matching every given filter, oldest first.
        Raises SerializationError, StorageError."""
        where = ["TRUE"]
        params: list[Any] = []
        for column, value in (
            ("machine", machine),
            ("status", _value(status)),
            ("state", state),
            ("exclusive_key", exclusive_key),
            ("parent_execution_id", parent_execution_id),
            ("owner_id", owner_id),
        ):
            if value is not None:
                where.append(f"{column} = %s")
                params.append(value)
        if active is not None:
            where.append("active = %s")
            params.append(bool(active))
        sql = (
            "SELECT body FROM executions WHERE "
            + " AND ".join(where)
            + " ORDER BY created_epoch_ms, execution_id LIMIT %s OFFSET %s"
        )
        params += [limit, int(offset)]
        rows = self._fetchall("list_records", sql, params)
        return [from_json(ExecutionRecord, body) for (body,) in rows]

    def execution_rows(
        self,
        *,
        machine: str | None = None,
        status: str | None = None,
        exclusive_key: str | None = None,
        limit: int | None = None,
        offset: int = 0,
    ) -> list[dict[str, Any]]:
        """Column summaries of every execution (id, machine, state, status, revision,
        exclusive_key, parent, owner, times in epoch ms, active), oldest first; only
        those matching every filter given."""
        where, params = _row_filters(machine, status, exclusive_key)
        sql = (
            "SELECT execution_id, machine, state, status, revision, exclusive_key,"
            " parent_execution_id, owner_id, created_epoch_ms, updated_epoch_ms,"
            " deadline_epoch_ms, active::int AS active FROM executions"
        )
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY created_epoch_ms, execution_id LIMIT %s OFFSET %s"
        params += [limit, int(offset)]

        def run(cur: Any) -> list[dict[str, Any]]:
            cur.execute(sql, params)
            names = [d.name for d in cur.description]
            return [dict(zip(names, row)) for row in cur.fetchall()]

        return self._reading("execution_rows", run)  # type: ignore[no-any-return]

    def count_by_status(
        self, *, machine: str | None = None, exclusive_key: str | None = None
    ) -> dict[str, int]:
        """``{status: count}`` of every execution (of ``machine``, with
        ``exclusive_key``, when given)."""
        where, params = _row_filters(machine, None, exclusive_key)
        sql = "SELECT status, count(*) FROM executions"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " GROUP BY status"
        return {s: int(n) for s, n in self._fetchall("count_by_status", sql, params)}

    def barrier_log(self, execution_id: str) -> list[BarrierLogRecord]:
        """The barrier log of one execution by revision (empty when unknown)."""
        rows = self._fetchall(
            "barrier_log",
            "SELECT execution_id, revision, barrier, committed_epoch_ms, digest, status, state"
            " FROM barriers WHERE execution_id = %s ORDER BY revision",
            (execution_id,),
        )
        return [
            BarrierLogRecord(eid, int(rev), b, epoch_ms_to_datetime(ms), dig, status, state)
            for eid, rev, b, ms, dig, status, state in rows
        ]

    def kept_records(self, execution_id: str) -> dict[int, ExecutionRecord | None]:
        """revision -> the execution record that commit wrote (``None`` when the store
        did not keep it then), as the SQLite store's."""
        rows = self._fetchall(
            "kept_records",
            "SELECT revision, body FROM barriers WHERE execution_id = %s ORDER BY revision",
            (execution_id,),
        )
        return {
            int(rev): None if body is None else from_json(ExecutionRecord, body)
            for rev, body in rows
        }

    def keeps_commit_bodies(self) -> bool:
        """Whether commits keep the record they write, as the SQLite store's."""
        rows = self._fetchall(
            "keeps_commit_bodies",
            "SELECT value FROM phronomy_meta WHERE key = 'keep_commit_bodies'",
        )
        return bool(rows) and rows[0][0] == "on"

    def set_keep_commit_bodies(self, keep: bool) -> None:
        """Turn keeping commit bodies on or off, as the SQLite store's."""

        def run(cur: Any) -> None:
            cur.execute(
                "INSERT INTO phronomy_meta(key, value) VALUES ('keep_commit_bodies', %s)"
                " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                ("on" if keep else "off",),
            )

        self._writing("set_keep_commit_bodies", run)

    def barrier_owners(self, execution_id: str) -> list[tuple[int, str, str | None, int | None]]:
        """``(revision, barrier, worker_id, fence)`` of each commit of one execution:
        which worker, under which fencing token, made it (PostgreSQL only)."""
        rows = self._fetchall(
            "barrier_owners",
            "SELECT revision, barrier, worker_id, fence FROM barriers WHERE execution_id = %s"
            " ORDER BY revision",
            (execution_id,),
        )
        return [(int(r), b, w, None if f is None else int(f)) for r, b, w, f in rows]

    def reconcile(self, commit: DurableCommit) -> str:
        """Read back after OutcomeUnknownError: :data:`COMMITTED` when the stored
        execution is at the intended revision with the intended body,
        :data:`NOT_COMMITTED` when absent (a creating commit) or still at the expected
        revision, :data:`CONFLICT` otherwise. Retries while the server is unreachable
        (up to the store's ``reconnect_seconds``).

        Raises: StorageError (the caller fails closed)."""
        intended = to_json(commit.execution)
        rows = self._fetchall(
            "reconcile",
            "SELECT revision, body FROM executions WHERE execution_id = %s",
            (commit.execution.execution_id,),
        )
        if not rows:
            return NOT_COMMITTED if commit.expected_revision is None else CONFLICT
        revision, body = rows[0]
        if revision == commit.execution.revision and body == intended:
            return COMMITTED
        if commit.expected_revision is not None and revision == commit.expected_revision:
            return NOT_COMMITTED
        return CONFLICT

    def journal_entries(self, execution_id: str) -> list[JournalEntry]:
        """The application records of one execution, in commit order."""
        rows = self._fetchall(
            "journal_entries",
            "SELECT body FROM execution_journal WHERE execution_id = %s"
            " ORDER BY revision, position",
            (execution_id,),
        )
        return [from_json(JournalEntry, body) for (body,) in rows]

    def journal_for_key(
        self,
        exclusive_key: str,
        *,
        statuses: tuple[str, ...] = ("completed",),
        kinds: tuple[str, ...] | None = None,
    ) -> list[tuple[str, JournalEntry]]:
        """``(execution_id, entry)`` of the journal entries of every execution with
        ``exclusive_key`` whose status is one of ``statuses``, in execution order
        (creation time, then id) and commit order within each. ``kinds`` filters the
        entries' kinds."""
        sql = (
            "SELECT j.execution_id, j.body FROM execution_journal j JOIN executions e"
            " ON e.execution_id = j.execution_id WHERE e.exclusive_key = %s"
            " AND e.status = ANY(%s)"
        )
        params: list[Any] = [exclusive_key, list(statuses)]
        if kinds is not None:
            sql += " AND j.kind = ANY(%s)"
            params.append(list(kinds))
        sql += " ORDER BY e.created_epoch_ms, e.execution_id, j.revision, j.position"
        rows = self._fetchall("journal_for_key", sql, tuple(params))
        return [(eid, from_json(JournalEntry, body)) for eid, body in rows]

    # ------------------------------------------------------------------ signals

    def send_signal(self, signal: SignalRecord) -> SignalRecord:
        """Write ``signal`` to its execution's inbox in one transaction that checks
        the execution (exists, active, at ``expected_revision`` when given) and
        notifies ``phronomy_signals``. A signal id stored before — even concurrently,
        by another process — is checked first: the same signal sent again
        (execution, kind, event and payload; ``docs/semantics.md``, "Signals")
        returns the stored one and writes nothing, any other signal with that id is
        refused.

        Concurrency: senders to one execution queue on its inbox lock (so its signals
        commit in sequence order); senders to different executions never wait on each
        other. A wait for a lock another transaction holds on the execution (its inbox
        lock, or its row: a commit moving it, a transaction left open on it) ends after
        the store's ``lock_timeout_seconds``.

        Raises: NotFoundError, ExecutionFinishedError, SignalRefusedError
        (``stale_revision``, ``signal_id_reused``), SerializationError;
        LockTimeoutError (a busy StorageError: nothing was sent, a retry with the same
        signal id is safe); StorageError."""
        body = to_json(signal)

        def stored_one(cur: Any) -> SignalRecord | None:
            """The stored signal with this id, if it is this signal sent again;
            raises the refusal when it is another."""
            cur.execute(
                f"SELECT {_SIGNAL_COLUMNS} FROM signals WHERE signal_id = %s", (signal.signal_id,)
            )
            row = cur.fetchone()
            if row is None:
                return None
            stored = _signal_from_row(row)
            refusal = reused_signal_id_refusal(stored, signal)
            if refusal is not None:
                raise refusal
            return stored

        def run(cur: Any) -> SignalRecord:
            # the execution's inbox lock before anything else, then its row: the lock
            # order of _commit.lock_inboxes, which a commit sending signals keeps too
            lock_inboxes(cur, [signal.execution_id])
            existing = stored_one(cur)
            if existing is not None:
                return existing
            cur.execute(
                "SELECT revision, active, status FROM executions WHERE execution_id = %s FOR SHARE",
                (signal.execution_id,),
            )
            row = cur.fetchone()
            if row is None:
                raise NotFoundError(
                    f"execution {signal.execution_id} does not exist; nothing was sent",
                    execution_id=signal.execution_id,
                )
            revision, active, status = row
            if not active:
                raise ExecutionFinishedError(
                    f"execution {signal.execution_id} has finished ({status}); nothing was sent",
                    execution_id=signal.execution_id,
                    status=status,
                )
            if signal.expected_revision is not None and revision != signal.expected_revision:
                raise SignalRefusedError(
                    f"execution {signal.execution_id} is at revision {revision}, not "
                    f"{signal.expected_revision}; read it again (nothing was sent)",
                    execution_id=signal.execution_id,
                    reason="stale_revision",
                    stored_revision=revision,
                )
            cur.execute(
                INSERT_SIGNAL,
                (signal.signal_id, signal.execution_id, signal.kind.value, signal.event, body),
            )
            got = cur.fetchone()
            if got is None:  # the same id was sent concurrently and committed first
                existing = stored_one(cur)
                if existing is None:  # removed as soon as committed (compaction)
                    raise StorageError(
                        f"signal {signal.signal_id} was stored concurrently and is gone; "
                        "nothing was sent: send it again",
                        path=self.path,
                    )
                return existing
            cur.execute("SELECT pg_notify(%s, %s)", (SIGNALS_CHANNEL, signal.execution_id))
            return _signal_from_row((got[0], body, None, None))

        return self._writing(  # type: ignore[no-any-return]
            "send_signal", run, execution_id=signal.execution_id
        )

    def close_signals(
        self, execution_id: str, seqs: list[int], outcome: str, *, fence: Fence
    ) -> int:
        """Consume pending signals of ``execution_id`` without applying them
        (``outcome`` says why) as its owner holding ``fence``; returns how many were
        still pending. Fenced as a commit is, in the same transaction, which holds
        the execution's row so that no claim moves the fencing token meanwhile
        (``docs/semantics.md``, "Leases and fencing").

        Raises: NotFoundError; LeaseLostError (``fence`` is not the stored owner and
        token, or the owner's lease has passed: nothing was written, the worker drops
        its copy); LockTimeoutError, StorageError (nothing was written)."""
        if not seqs:
            return 0

        def run(cur: Any) -> int:
            # only while the fence still holds: a stale copy must not close the new
            # owner's signals. The execution's row, then its signals: a commit's order
            revision = check_fence(cur, execution_id, fence)
            cur.execute(
                "UPDATE signals SET consumed_revision = %s, outcome = %s WHERE execution_id = %s"
                " AND consumed_revision IS NULL AND seq = ANY(%s)",
                (revision, outcome, execution_id, [int(s) for s in seqs]),
            )
            return int(cur.rowcount)

        return self._writing(  # type: ignore[no-any-return]
            "close_signals", run, execution_id=execution_id
        )

    def pending_signals(self, execution_id: str) -> list[SignalRecord]:
        """The execution's unconsumed signals, in the order they were sent."""
        rows = self._fetchall(
            "pending_signals",
            f"SELECT {_SIGNAL_COLUMNS} FROM signals WHERE execution_id = %s"
            " AND consumed_revision IS NULL ORDER BY seq",
            (execution_id,),
        )
        return [_signal_from_row(r) for r in rows]

    def list_signals(self, execution_id: str) -> list[SignalRecord]:
        """Every signal of one execution (consumed or not), in order."""
        rows = self._fetchall(
            "list_signals",
            f"SELECT {_SIGNAL_COLUMNS} FROM signals WHERE execution_id = %s ORDER BY seq",
            (execution_id,),
        )
        return [_signal_from_row(r) for r in rows]

    def signal_cursor(self) -> str:
        """Where a poller of the whole inbox starts (:meth:`signals_since`): the
        server's current snapshot (``txid_current_snapshot()`` as text). Every signal
        committed before it is behind it; a signal of a transaction still open is not.

        Raises: StorageError."""
        return str(self._fetchall("signal_cursor", "SELECT txid_current_snapshot()::text")[0][0])

    def signals_since(self, cursor: str) -> SignalPoll:
        """The unconsumed signals (any execution) that became visible since ``cursor``,
        in sequence order, and the cursor to pass next time.

        A cursor is a snapshot, and a signal is new to it when the transaction that
        added it (the row's ``xact_id``) is not visible in it: it committed after the
        snapshot was taken, whatever its sequence number. Sequence numbers are taken
        when a row is inserted, not when it commits, so a signal may become visible
        after one with a higher number (transactions signalling different executions
        do not wait on each other): a poller that remembered the highest number seen
        would miss it; this one returns each signal exactly once. The rows and the
        next cursor come from one statement, so they share its snapshot. Transactions
        left open hold the snapshot's ``xmin`` back, so the scan (an index range from
        it) covers the unconsumed signals added since the oldest open transaction.

        Raises:
            ValueError: ``cursor`` is not a snapshot from :meth:`signal_cursor` or
                :meth:`signals_since`.
            StorageError, SerializationError.
        """
        if not _SNAPSHOT.fullmatch(cursor):
            raise ValueError(f"not a signal cursor of a PostgreSQL store: {cursor!r}")
        rows = self._fetchall(
            "signals_since",
            "WITH now AS (SELECT txid_current_snapshot() AS snapshot),"
            " prev AS (SELECT %(cursor)s::txid_snapshot AS snapshot)"
            f" SELECT now.snapshot::text, {_SIGNAL_COLUMNS_OF_S} FROM now"
            " LEFT JOIN signals s ON s.consumed_revision IS NULL"
            " AND s.xact_id >= (SELECT txid_snapshot_xmin(snapshot) FROM prev)"
            " AND NOT txid_visible_in_snapshot(s.xact_id, (SELECT snapshot FROM prev))"
            " ORDER BY s.seq",
            {"cursor": cursor},
        )
        signals = tuple(_signal_from_row(row[1:]) for row in rows if row[1] is not None)
        return SignalPoll(signals=signals, cursor=str(rows[0][0]))

    # ------------------------------------------------------------------ workers

    def register_worker(self, worker: WorkerRecord, lease_seconds: float) -> None:
        """Insert or replace a worker row; its lease runs ``lease_seconds`` from now on
        the server's clock."""
        body = to_json(worker)
        ms = int(lease_seconds * 1000)

        def run(cur: Any) -> None:
            cur.execute(
                # the server's clock read once: the lease is exactly lease_seconds long
                "INSERT INTO workers(worker_id, body, heartbeat_epoch_ms, lease_expires_epoch_ms)"
                f" SELECT %s, %s, now_ms, now_ms + %s FROM (SELECT {NOW_MS} AS now_ms) AS clock"
                " ON CONFLICT (worker_id) DO UPDATE"
                " SET body = excluded.body, heartbeat_epoch_ms = excluded.heartbeat_epoch_ms,"
                " lease_expires_epoch_ms = excluded.lease_expires_epoch_ms",
                (worker.worker_id, body, ms),
            )

        self._writing("register_worker", run)

    def renew_lease(self, worker_id: str, lease_seconds: float) -> bool:
        """Heartbeat (server clock); False when the worker row is gone."""
        ms = int(lease_seconds * 1000)

        def run(cur: Any) -> bool:
            cur.execute(
                "UPDATE workers SET heartbeat_epoch_ms = clock.now_ms,"
                " lease_expires_epoch_ms = clock.now_ms + %s"
                f" FROM (SELECT {NOW_MS} AS now_ms) AS clock WHERE worker_id = %s",
                (ms, worker_id),
            )
            return bool(cur.rowcount == 1)

        return self._writing("renew_lease", run)  # type: ignore[no-any-return]

    def store_time(self) -> datetime:
        """Now on the database server's clock (aware UTC, milliseconds;
        ``docs/semantics.md``, "One clock"). Raises StorageError."""
        rows = self._fetchall("store_time", f"SELECT {NOW_MS}")
        return epoch_ms_to_datetime(int(rows[0][0]))

    def retire_worker(self, worker_id: str) -> None:
        """End a worker's lease now (its executions become claimable; workers are
        told through ``phronomy_work``)."""

        def run(cur: Any) -> None:
            cur.execute(
                "UPDATE workers SET lease_expires_epoch_ms = 0 WHERE worker_id = %s", (worker_id,)
            )
            cur.execute("SELECT pg_notify(%s, %s)", (WORK_CHANNEL, ""))

        self._writing("retire_worker", run)

    def list_workers(self) -> list[tuple[WorkerRecord, int, int]]:
        """Every worker row: ``(record, heartbeat_epoch_ms, lease_expires_epoch_ms)``."""
        rows = self._fetchall(
            "list_workers",
            "SELECT body, heartbeat_epoch_ms, lease_expires_epoch_ms FROM workers"
            " ORDER BY worker_id",
        )
        return [(from_json(WorkerRecord, body), int(hb), int(exp)) for body, hb, exp in rows]

    def execution_owner(self, execution_id: str) -> tuple[str | None, int, int | None]:
        """``(owner worker id, fencing token, owner's lease expiry epoch ms)``.
        Raises NotFoundError."""
        rows = self._fetchall(
            "execution_owner",
            "SELECT e.owner_id, e.fence, w.lease_expires_epoch_ms FROM executions e"
            " LEFT JOIN workers w ON w.worker_id = e.owner_id WHERE e.execution_id = %s",
            (execution_id,),
        )
        if not rows:
            raise NotFoundError(
                f"execution {execution_id} does not exist", execution_id=execution_id
            )
        owner, fence, expires = rows[0]
        return owner, int(fence), None if expires is None else int(expires)

    def execution_fences(self, execution_ids: list[str]) -> dict[str, tuple[str | None, int, bool]]:
        """``{execution_id: (owner, fencing token, active)}`` of the given executions
        (absent ones are left out)."""
        if not execution_ids:
            return {}
        rows = self._fetchall(
            "execution_fences",
            "SELECT execution_id, owner_id, fence, active FROM executions"
            " WHERE execution_id = ANY(%s)",
            (list(execution_ids),),
        )
        return {eid: (owner, int(fence), bool(active)) for eid, owner, fence, active in rows}

    def owned_executions(self, worker_id: str, machines: tuple[str, ...]) -> dict[str, int]:
        """``{execution_id: fencing token}`` of the active executions of ``machines``
        that ``worker_id`` owns (``docs/scale-out.md``, "Stranded claims")."""
        if not machines:
            return {}
        rows = self._fetchall(
            "owned_executions",
            "SELECT execution_id, fence FROM executions WHERE active AND owner_id = %s"
            " AND machine = ANY(%s)",
            (worker_id, list(machines)),
        )
        return {eid: int(fence) for eid, fence in rows}

    def claim_execution(
        self, execution_id: str, worker_id: str, *, runs: RunnableSpecs | None = None
    ) -> int | None:
        """Take an active execution whose owner is none, ``worker_id`` itself, or a
        worker whose lease has passed (server clock) — and, with ``runs``, whose spec
        that machine runs (``docs/scale-out.md``, "Rolling upgrades"); the fencing
        token rises by one. Returns the new token, or ``None``."""
        params = runs_params(spec_keys(() if runs is None else (runs,)))
        params |= {"worker": worker_id, "id": execution_id, "any": runs is None}

        def run(cur: Any) -> int | None:
            cur.execute(
                "UPDATE executions e SET owner_id = %(worker)s, fence = fence + 1"
                " WHERE execution_id = %(id)s AND active AND (owner_id IS NULL"
                f" OR owner_id = %(worker)s OR NOT {_LIVE_OWNER}) AND (%(any)s OR {_RUNS})"
                f" AND {_MY_LEASE} RETURNING fence",
                params,
            )
            row = cur.fetchone()
            return None if row is None else int(row[0])

        return self._writing(  # type: ignore[no-any-return]
            "claim_execution", run, execution_id=execution_id
        )

    def claim_executions(
        self,
        machines: tuple[Claimable, ...],
        worker_id: str,
        *,
        limit: int,
        new_first: bool = False,
        waiting_only: bool = False,
    ) -> list[tuple[str, str, int]]:
        """Claim up to ``limit`` runnable executions (active, with no live owner) that
        ``machines`` run — a name: every spec of it; a
        :class:`~phronomy_fsm.durable.claims.RunnableSpecs`: the specs it runs — for
        ``worker_id`` in one statement (``FOR UPDATE SKIP LOCKED``: racing workers
        take disjoint sets and never wait on each other; rows of specs it does not
        run are never locked), in claim order (the SQLite store's ``CLAIM_ORDER``:
        those that were running before those that wait; with ``new_first``,
        executions nobody ever claimed before both), oldest first within;
        ``waiting_only``: only executions that wait. Returns ``[(execution_id, machine, new
        fencing token)]``; empty when ``worker_id``'s own lease is not valid."""
        if not machines or limit <= 0:
            return []
        params = runs_params(spec_keys(machines)) | {"worker": worker_id, "limit": int(limit)}

        def run(cur: Any) -> list[tuple[str, str, int]]:
            cur.execute(
                "WITH c AS (SELECT execution_id FROM executions e WHERE active"
                f" AND machine = ANY(%(machines)s) AND (owner_id IS NULL OR NOT {_LIVE_OWNER})"
                f" AND {_RUNS}{_WAITING_ONLY if waiting_only else ''} ORDER BY {_CLAIM_ORDER[new_first]}, created_epoch_ms, execution_id"
                " LIMIT %(limit)s"
                " FOR UPDATE SKIP LOCKED)"
                " UPDATE executions x SET owner_id = %(worker)s, fence = x.fence + 1 FROM c"
                f" WHERE x.execution_id = c.execution_id AND {_MY_LEASE}"
                " RETURNING x.execution_id, x.machine, x.fence, x.created_epoch_ms",
                params,
            )
            rows = sorted(cur.fetchall(), key=lambda r: (r[3], r[0]))
            return [(eid, machine, int(fence)) for eid, machine, fence, _ in rows]

        return self._writing("claim_executions", run)  # type: ignore[no-any-return]

    def claimable_executions(
        self, machines: tuple[Claimable, ...], *, limit: int = 1000
    ) -> list[tuple[str, str]]:
        """``(execution_id, machine)`` of active executions with no live owner that
        ``machines`` run (names or RunnableSpecs, as :meth:`claim_executions`),
        oldest first."""
        if not machines:
            return []
        rows = self._fetchall(
            "claimable_executions",
            "SELECT execution_id, machine FROM executions e WHERE active"
            f" AND machine = ANY(%(machines)s) AND (owner_id IS NULL OR NOT {_LIVE_OWNER})"
            f" AND {_RUNS} ORDER BY created_epoch_ms, execution_id LIMIT %(limit)s",
            runs_params(spec_keys(machines)) | {"limit": int(limit)},
        )
        return [(eid, machine) for eid, machine in rows]

    def other_spec_executions(
        self, specs: tuple[RunnableSpecs, ...], *, limit: int = 1000
    ) -> list[tuple[str, str, int, str]]:
        """``(execution_id, machine, spec_version, spec_sha256)`` of the active
        executions of the machines of ``specs`` with no live owner whose spec none of
        ``specs`` runs: what a worker with these specs leaves for another, oldest
        first (``docs/scale-out.md``, "Rolling upgrades")."""
        if not specs:
            return []
        rows = self._fetchall(
            "other_spec_executions",
            f"SELECT execution_id, machine, {_SPEC_VERSION}::bigint, spec_sha256"
            " FROM executions e WHERE active AND machine = ANY(%(machines)s)"
            f" AND (owner_id IS NULL OR NOT {_LIVE_OWNER}) AND NOT {_RUNS}"
            " ORDER BY created_epoch_ms, execution_id LIMIT %(limit)s",
            runs_params(spec_keys(specs)) | {"limit": int(limit)},
        )
        return [(eid, machine, int(version), sha) for eid, machine, version, sha in rows]

    # ------------------------------------------------------------------ agents

    def register_agent(self, agent_id: str) -> bool:
        """Record agent ``agent_id``; False when it exists already (nothing written)."""

        def run(cur: Any) -> bool:
            cur.execute(
                "INSERT INTO agents(agent_id, created_epoch_ms, body)"
                f" VALUES (%s, {NOW_MS}, '{{}}') ON CONFLICT DO NOTHING RETURNING agent_id",
                (agent_id,),
            )
            return cur.fetchone() is not None

        return bool(self._writing("register_agent", run))

    def agent_exists(self, agent_id: str) -> bool:
        """True when agent ``agent_id`` was registered."""
        return bool(
            self._fetchall("agent_exists", "SELECT 1 FROM agents WHERE agent_id = %s", (agent_id,))
        )

    def agent_ids(self) -> list[str]:
        """Every registered agent id, sorted."""
        return [r[0] for r in self._fetchall("agent_ids", "SELECT agent_id FROM agents ORDER BY 1")]

    # ------------------------------------------------------------------ machines

    def register_machine(self, record: MachineRecord) -> None:
        """Keep a machine's compiled table (once per spec sha256; idempotent)."""
        from phronomy_fsm.durable.codec import datetime_to_epoch_ms

        body = to_json(record)

        def run(cur: Any) -> None:
            cur.execute(
                "INSERT INTO machines(machine, spec_sha256, body, registered_epoch_ms)"
                " VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING",
                (
                    record.machine,
                    record.spec_sha256,
                    body,
                    datetime_to_epoch_ms(record.registered_at),
                ),
            )

        self._writing("register_machine", run)

    def load_machine(self, machine: str, spec_sha256: str | None = None) -> MachineRecord:
        """The registered table of ``machine`` (that spec sha256, or the latest).
        Raises NotFoundError."""
        sql = "SELECT body FROM machines WHERE machine = %s"
        params: list[Any] = [machine]
        if spec_sha256 is not None:
            sql += " AND spec_sha256 = %s"
            params.append(spec_sha256)
        sql += " ORDER BY registered_epoch_ms DESC LIMIT 1"
        rows = self._fetchall("load_machine", sql, params)
        if not rows:
            raise NotFoundError(
                f"machine {machine!r} was never registered in {self.path} by a runtime",
                machine=machine,
            )
        return from_json(MachineRecord, rows[0][0])  # type: ignore[no-any-return]


__all__ = ["PostgresReads"]
