"""Reads of the SQLite store: executions, the barrier log, journal, inbox, workers.

Owns the reader side of :class:`~phronomy_fsm.store.sqlite.SqliteBarrierStore`: one
``query_only`` connection per thread (WAL readers never block the writer), snapshot
reads across several statements, decoding of stored bodies, and the read-back that
reconciles a commit whose outcome is unknown (``docs/semantics.md``, "Barrier
outcomes"). It never writes. Mixed into the store class, which provides ``path``,
``_uri``, ``_closed``, ``_connect``, ``_local``, ``_readers``, ``_readers_lock`` and
``_commit_time``. Every method raises StorageError when the read fails (the store is
closed, the file is unreadable) and SerializationError when a stored body cannot be
decoded; schema: ``docs/store.md``.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from phronomy_fsm.durable.claims import Claimable, RunnableSpecs, SpecKeys, spec_keys
from phronomy_fsm.durable.codec import epoch_ms_to_datetime
from phronomy_fsm.durable.records import (
    BarrierLogRecord,
    DurableCommit,
    ExecutionRecord,
    JournalEntry,
    MachineRecord,
    SignalPoll,
    SignalRecord,
    WorkerRecord,
    from_json,
    to_json,
)
from phronomy_fsm.errors import NotFoundError, StorageError
from phronomy_fsm.store._sqlerrors import storage_error
from phronomy_fsm.store.schema import BARRIER_CHAIN, KEEP_COMMITS
from phronomy_fsm.table import COMMITTED, CONFLICT, NOT_COMMITTED

#: The columns :func:`signal_from_row` reads, in order.
SIGNAL_COLUMNS = "seq, body, consumed_revision, outcome"


def signal_from_row(row: tuple[Any, ...]) -> SignalRecord:
    """The :class:`SignalRecord` of a ``signals`` row (:data:`SIGNAL_COLUMNS`): the
    stored body with the store's sequence number and consumption."""
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
        seq=seq,
        consumed_revision=consumed,
        outcome=outcome,
    )


def _row_filters(
    machine: str | None, status: Any, exclusive_key: str | None
) -> tuple[list[str], list[Any]]:
    """The WHERE terms and parameters of the column filters of the executions table."""
    where: list[str] = []
    params: list[Any] = []
    for column, value in (
        ("machine", machine),
        ("status", None if status is None else str(getattr(status, "value", status))),
        ("exclusive_key", exclusive_key),
    ):
        if value is not None:
            where.append(f"{column} = ?")
            params.append(value)
    return where, params


#: An execution's spec version, read from its stored record (SQL of ``executions``).
SPEC_VERSION = "json_extract(body, '$.spec_version')"
#: An execution's owner is none or a worker whose lease has passed (one ``?``: now).
NO_LIVE_OWNER = (
    "(owner_id IS NULL OR NOT EXISTS (SELECT 1 FROM workers w"
    " WHERE w.worker_id = executions.owner_id AND w.lease_expires_epoch_ms >= ?))"
)


def runs_sql(keys: SpecKeys) -> tuple[str, list[Any]]:
    """A WHERE term on ``executions`` true for a row whose spec ``keys`` run, and its
    parameters (``docs/scale-out.md``, "Rolling upgrades"; the rule is
    :class:`~phronomy_fsm.durable.claims.SpecKeys`'). The spec version is read from
    the record only for a row no cheaper term matched."""
    terms: list[str] = []
    params: list[Any] = []

    def among(expression: str, values: tuple[str, ...]) -> None:
        if values:
            terms.append(f"{expression} IN ({','.join('?' * len(values))})")
            params.extend(values)

    among("machine", keys.any_spec)
    among("machine || '/' || spec_sha256", keys.shas)
    among(f"machine || '/' || {SPEC_VERSION}", keys.versions)
    among(f"machine || '/' || {SPEC_VERSION} || '/' || spec_sha256", keys.pairs)
    return ("(" + " OR ".join(terms) + ")" if terms else "0"), params


def machines_sql(keys: SpecKeys) -> tuple[str, list[Any]]:
    """``machine IN (...)`` of every machine ``keys`` name (the indexed filter)."""
    return f"machine IN ({','.join('?' * len(keys.machines))})", list(keys.machines)


class SqliteReads:
    """The read methods of the SQLite store (module docstring)."""

    path: str
    _uri: str
    _closed: bool
    _local: threading.local
    _readers: list[tuple[sqlite3.Connection, threading.RLock]]
    _readers_lock: threading.Lock

    def _connect(self, uri: str) -> sqlite3.Connection:  # provided by the store
        raise NotImplementedError

    def _commit_time(self) -> tuple[int, datetime]:  # provided by the store
        raise NotImplementedError

    def _reader(self) -> tuple[sqlite3.Connection, threading.RLock]:
        """This thread's reader connection and the lock held while it is in use
        (:meth:`close` takes it before closing the connection: closing a connection
        another thread is stepping crashes the interpreter)."""
        pair = getattr(self._local, "reader", None)
        if pair is None:
            if self._closed:
                raise StorageError(f"the store {self.path} is closed", path=self.path)
            conn = self._connect(self._uri)
            conn.execute("PRAGMA query_only=1")
            pair = self._local.reader = (conn, threading.RLock())
            with self._readers_lock:
                self._readers.append(pair)
        return pair  # type: ignore[no-any-return]

    @contextmanager
    def _reading(self, operation: str, *, snapshot: bool = False) -> Iterator[sqlite3.Connection]:
        """A reader connection; sqlite3 errors become StorageError. ``snapshot`` wraps
        the block in one read transaction (a consistent view across statements)."""
        if self._closed:
            raise StorageError(f"the store {self.path} is closed", path=self.path)
        try:
            conn, in_use = self._reader()
            with in_use:
                if snapshot:
                    conn.execute("BEGIN")
                try:
                    yield conn
                finally:
                    if snapshot and conn.in_transaction:
                        conn.execute("COMMIT")
        except sqlite3.Error as exc:
            raise storage_error(exc, operation=operation, path=self.path) from exc

    # ------------------------------------------------------------------ executions

    def load_record(self, execution_id: str) -> ExecutionRecord:
        """The stored execution ``execution_id`` (of any machine).

        Raises:
            NotFoundError: no such execution.
            SerializationError: its body is damaged.
            StorageError: the read failed.
        """
        with self._reading("load_record") as conn:
            row = conn.execute(
                "SELECT body FROM executions WHERE execution_id=?", (execution_id,)
            ).fetchone()
        if row is None:
            raise NotFoundError(
                f"execution {execution_id} does not exist", execution_id=execution_id
            )
        return from_json(ExecutionRecord, row[0])  # type: ignore[no-any-return]

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
        """Executions matching every given filter (``None``: any), oldest first
        (creation time, then id); ``status`` is an
        :class:`~phronomy_fsm.durable.records.ExecutionStatus` or its value;
        ``limit=None`` means all. Raises SerializationError, StorageError."""
        where = ["TRUE"]
        params: list[Any] = []
        for column, value in (
            ("machine", machine),
            ("status", None if status is None else str(getattr(status, "value", status))),
            ("state", state),
            ("exclusive_key", exclusive_key),
            ("parent_execution_id", parent_execution_id),
            ("owner_id", owner_id),
        ):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        if active is not None:
            where.append("active = ?")
            params.append(1 if active else 0)
        sql = (
            "SELECT body FROM executions WHERE "
            + " AND ".join(f"({w})" for w in where)
            + " ORDER BY created_epoch_ms, execution_id LIMIT ? OFFSET ?"
        )
        params += [-1 if limit is None else int(limit), int(offset)]
        with self._reading("list_records") as conn:
            rows = conn.execute(sql, params).fetchall()
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
        """Column summaries of the executions matching every given filter, without
        decoding their bodies: dicts with ``execution_id, machine, state, status,
        revision, exclusive_key, parent_execution_id, owner_id, created_epoch_ms,
        updated_epoch_ms, deadline_epoch_ms, active`` (0/1), oldest first (an agent
        execution's exclusive key is its agent id). Raises StorageError."""
        where, params = _row_filters(machine, status, exclusive_key)
        sql = (
            "SELECT execution_id, machine, state, status, revision, exclusive_key,"
            " parent_execution_id, owner_id, created_epoch_ms, updated_epoch_ms,"
            " deadline_epoch_ms, active FROM executions"
        )
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY created_epoch_ms, execution_id LIMIT ? OFFSET ?"
        params += [-1 if limit is None else int(limit), int(offset)]
        with self._reading("execution_rows") as conn:
            cur = conn.execute(sql, params)
            names = [d[0] for d in cur.description]
            return [dict(zip(names, row)) for row in cur.fetchall()]

    def count_by_status(
        self, *, machine: str | None = None, exclusive_key: str | None = None
    ) -> dict[str, int]:
        """``{status: count}`` of every execution (of ``machine``, with
        ``exclusive_key``, when given). Raises StorageError."""
        where, params = _row_filters(machine, None, exclusive_key)
        sql = "SELECT status, count(*) FROM executions"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " GROUP BY status"
        with self._reading("count_by_status") as conn:
            return {status: count for status, count in conn.execute(sql, params)}

    def barrier_log(self, execution_id: str) -> list[BarrierLogRecord]:
        """The barrier log of one execution by revision (empty when unknown), found by
        walking its chain back from ``executions.last_barrier_seq``
        (:data:`~phronomy_fsm.store.schema.BARRIER_CHAIN`). Raises StorageError."""
        with self._reading("barrier_log") as conn:
            rows = conn.execute(
                f"{BARRIER_CHAIN} SELECT execution_id, revision, barrier, committed_epoch_ms,"
                " digest, status, state FROM barriers WHERE seq IN (SELECT seq FROM chain)"
                " ORDER BY revision",
                (execution_id,),
            ).fetchall()
        return [
            BarrierLogRecord(eid, rev, barrier, epoch_ms_to_datetime(ms), dig, status, state)
            for eid, rev, barrier, ms, dig, status, state in rows
        ]

    def kept_records(self, execution_id: str) -> dict[int, ExecutionRecord | None]:
        """revision -> the execution record that commit wrote, for every commit of one
        execution (empty when unknown); ``None`` for a commit made while the store did
        not keep commit bodies (``docs/store.md``, "Kept commits"). Raises
        StorageError, SerializationError."""
        with self._reading("kept_records") as conn:
            rows = conn.execute(
                f"{BARRIER_CHAIN} SELECT revision, body FROM barriers"
                " WHERE seq IN (SELECT seq FROM chain) ORDER BY revision",
                (execution_id,),
            ).fetchall()
        return {
            int(rev): None if body is None else from_json(ExecutionRecord, body)
            for rev, body in rows
        }

    def keeps_commit_bodies(self) -> bool:
        """Whether commits keep the record they write (the store's retention setting,
        ``docs/store.md``, "Kept commits"). Raises StorageError."""
        with self._reading("keeps_commit_bodies") as conn:
            row = conn.execute(f"SELECT value FROM meta WHERE key = '{KEEP_COMMITS}'").fetchone()
        return row is not None and row[0] == "on"

    def reconcile(self, commit: DurableCommit) -> str:
        """Read back after OutcomeUnknownError (``docs/semantics.md``, "Barrier
        outcomes"): :data:`~phronomy_fsm.table.COMMITTED` when the stored execution is
        at the intended revision with the byte-identical canonical JSON,
        :data:`~phronomy_fsm.table.NOT_COMMITTED` when it is absent (a creating
        commit) or still at the expected revision,
        :data:`~phronomy_fsm.table.CONFLICT` otherwise (fail closed).

        Raises:
            StorageError: the read failed (the caller fails closed).
            SerializationError: ``commit`` cannot be encoded.
        """
        intended = to_json(commit.execution)
        with self._reading("reconcile") as conn:
            row = conn.execute(
                "SELECT revision, body FROM executions WHERE execution_id=?",
                (commit.execution.execution_id,),
            ).fetchone()
        if row is None:
            return NOT_COMMITTED if commit.expected_revision is None else CONFLICT
        revision, body = row
        if revision == commit.execution.revision and body == intended:
            return COMMITTED
        if commit.expected_revision is not None and revision == commit.expected_revision:
            return NOT_COMMITTED
        return CONFLICT

    def journal_entries(self, execution_id: str) -> list[JournalEntry]:
        """The journal entries of one execution (what its barrier hooks added), in
        commit order; empty when unknown. Raises SerializationError, StorageError."""
        with self._reading("journal_entries") as conn:
            rows = conn.execute(
                "SELECT body FROM execution_journal WHERE execution_id=?"
                " ORDER BY revision, position",
                (execution_id,),
            ).fetchall()
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
        (creation time, then id) and commit order within each — an agent's
        conversation history across its executions. ``kinds`` filters entry kinds."""
        marks = ",".join("?" * len(statuses))
        sql = (
            "SELECT j.execution_id, j.body FROM execution_journal j JOIN executions e"
            " ON e.execution_id = j.execution_id WHERE e.exclusive_key = ?"
            f" AND e.status IN ({marks})"
        )
        params: list[Any] = [exclusive_key, *statuses]
        if kinds is not None:
            sql += f" AND j.kind IN ({','.join('?' * len(kinds))})"
            params += list(kinds)
        sql += " ORDER BY e.created_epoch_ms, e.execution_id, j.revision, j.position"
        with self._reading("journal_for_key") as conn:
            rows = conn.execute(sql, params).fetchall()
        return [(eid, from_json(JournalEntry, body)) for eid, body in rows]

    # ------------------------------------------------------------------ inbox

    def pending_signals(self, execution_id: str) -> list[SignalRecord]:
        """The execution's unconsumed signals, in the order they were sent."""
        with self._reading("pending_signals") as conn:
            rows = conn.execute(
                f"SELECT {SIGNAL_COLUMNS} FROM signals WHERE execution_id=?"
                " AND consumed_revision IS NULL ORDER BY seq",
                (execution_id,),
            ).fetchall()
        return [signal_from_row(r) for r in rows]

    def list_signals(self, execution_id: str) -> list[SignalRecord]:
        """Every signal of one execution (consumed or not), in order."""
        with self._reading("list_signals") as conn:
            rows = conn.execute(
                f"SELECT {SIGNAL_COLUMNS} FROM signals WHERE execution_id=? ORDER BY seq",
                (execution_id,),
            ).fetchall()
        return [signal_from_row(r) for r in rows]

    def signal_cursor(self) -> str:
        """Where a poller of the whole inbox starts (:meth:`signals_since`): the highest
        sequence number written so far, as text (``"0"`` when none). Raises
        StorageError."""
        with self._reading("signal_cursor") as conn:
            row = conn.execute("SELECT max(seq) FROM signals").fetchone()
        return str(int(row[0] or 0))

    def signals_since(self, cursor: str) -> SignalPoll:
        """The unconsumed signals (any execution) with a sequence number above the
        cursor's, in order, and the highest number written as the next cursor. One
        writer at a time commits here, so numbers become visible in increasing order
        and this misses none (the PostgreSQL store, whose writers do not wait on each
        other, uses snapshots for the same promise).

        Raises: ValueError (not a cursor of this store), SerializationError,
        StorageError."""
        if not cursor.isdigit():
            raise ValueError(f"not a signal cursor of a SQLite store: {cursor!r}")
        with self._reading("signals_since", snapshot=True) as conn:  # one view for both
            (high,) = conn.execute("SELECT max(seq) FROM signals").fetchone()
            rows = conn.execute(
                f"SELECT {SIGNAL_COLUMNS} FROM signals WHERE seq > ?"
                " AND consumed_revision IS NULL ORDER BY seq",
                (int(cursor),),
            ).fetchall()
        signals = tuple(signal_from_row(r) for r in rows)
        return SignalPoll(signals=signals, cursor=str(max(int(cursor), int(high or 0))))

    # ------------------------------------------------------------------ workers

    def list_workers(self) -> list[tuple[WorkerRecord, int, int]]:
        """Every worker row: ``(record, heartbeat_epoch_ms, lease_expires_epoch_ms)``."""
        with self._reading("list_workers") as conn:
            rows = conn.execute(
                "SELECT body, heartbeat_epoch_ms, lease_expires_epoch_ms FROM workers"
                " ORDER BY worker_id"
            ).fetchall()
        return [(from_json(WorkerRecord, body), hb, exp) for body, hb, exp in rows]

    def execution_owner(self, execution_id: str) -> tuple[str | None, int, int | None]:
        """``(owner worker id, fencing token, owner's lease expiry in epoch ms)``.

        Raises NotFoundError."""
        with self._reading("execution_owner") as conn:
            row = conn.execute(
                "SELECT e.owner_id, e.fence, w.lease_expires_epoch_ms FROM executions e"
                " LEFT JOIN workers w ON w.worker_id = e.owner_id WHERE e.execution_id=?",
                (execution_id,),
            ).fetchone()
        if row is None:
            raise NotFoundError(
                f"execution {execution_id} does not exist", execution_id=execution_id
            )
        return row[0], int(row[1]), row[2]

    def execution_fences(self, execution_ids: list[str]) -> dict[str, tuple[str | None, int, bool]]:
        """``{execution_id: (owner worker, fencing token, active)}`` of the given
        executions (absent ones are left out): how a worker checks it still owns what
        it runs."""
        out: dict[str, tuple[str | None, int, bool]] = {}
        with self._reading("execution_fences") as conn:
            for start in range(0, len(execution_ids), 500):
                chunk = execution_ids[start : start + 500]
                marks = ",".join("?" * len(chunk))
                for eid, owner, fence, active in conn.execute(
                    f"SELECT execution_id, owner_id, fence, active FROM executions"
                    f" WHERE execution_id IN ({marks})",
                    chunk,
                ):
                    out[eid] = (owner, int(fence), bool(active))
        return out

    def owned_executions(self, worker_id: str, machines: tuple[str, ...]) -> dict[str, int]:
        """``{execution_id: fencing token}`` of the active executions of ``machines``
        that ``worker_id`` owns: what a worker compares with what it runs, to find a
        claim whose answer it never got (``docs/scale-out.md``, "Stranded claims")."""
        if not machines:
            return {}
        marks = ",".join("?" * len(machines))
        with self._reading("owned_executions") as conn:
            rows = conn.execute(
                "SELECT execution_id, fence FROM executions WHERE active=1 AND owner_id=?"
                f" AND machine IN ({marks})",
                (worker_id, *machines),
            ).fetchall()
        return {eid: int(fence) for eid, fence in rows}

    def claimable_executions(
        self, machines: tuple[Claimable, ...], *, limit: int = 1000
    ) -> list[tuple[str, str]]:
        """``(execution_id, machine)`` of active executions with no live owner (none,
        or a worker whose lease has passed) that ``machines`` run, oldest first: a
        machine's name runs every spec of it, its
        :class:`~phronomy_fsm.durable.claims.RunnableSpecs` only those
        (``docs/scale-out.md``, "Rolling upgrades")."""
        if not machines:
            return []
        keys = spec_keys(machines)
        now_ms, _ = self._commit_time()
        among, names = machines_sql(keys)
        runs, params = runs_sql(keys)
        with self._reading("claimable_executions") as conn:
            rows = conn.execute(
                f"SELECT execution_id, machine FROM executions WHERE active=1 AND {among}"
                f" AND {NO_LIVE_OWNER} AND {runs}"
                " ORDER BY created_epoch_ms, execution_id LIMIT ?",
                (*names, now_ms, *params, int(limit)),
            ).fetchall()
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
        keys = spec_keys(specs)
        now_ms, _ = self._commit_time()
        among, names = machines_sql(keys)
        runs, params = runs_sql(keys)
        with self._reading("other_spec_executions") as conn:
            rows = conn.execute(
                f"SELECT execution_id, machine, {SPEC_VERSION}, spec_sha256 FROM executions"
                f" WHERE active=1 AND {among} AND {NO_LIVE_OWNER} AND NOT {runs}"
                " ORDER BY created_epoch_ms, execution_id LIMIT ?",
                (*names, now_ms, *params, int(limit)),
            ).fetchall()
        return [(eid, machine, int(version), sha) for eid, machine, version, sha in rows]

    # ------------------------------------------------------------------ agents and machines

    def agent_exists(self, agent_id: str) -> bool:
        """True when agent ``agent_id`` was registered. Raises StorageError."""
        with self._reading("agent_exists") as conn:
            row = conn.execute("SELECT 1 FROM agents WHERE agent_id = ?", (agent_id,)).fetchone()
        return row is not None

    def agent_ids(self) -> list[str]:
        """Every registered agent id, sorted. Raises StorageError."""
        with self._reading("agent_ids") as conn:
            return [r[0] for r in conn.execute("SELECT agent_id FROM agents ORDER BY agent_id")]

    def load_machine(self, machine: str, spec_sha256: str | None = None) -> MachineRecord:
        """The registered table of ``machine`` (that spec sha256, or the latest).

        Raises NotFoundError."""
        sql = "SELECT body FROM machines WHERE machine=?"
        params: list[Any] = [machine]
        if spec_sha256 is not None:
            sql += " AND spec_sha256=?"
            params.append(spec_sha256)
        sql += " ORDER BY registered_epoch_ms DESC LIMIT 1"
        with self._reading("load_machine") as conn:
            row = conn.execute(sql, params).fetchone()
        if row is None:
            raise NotFoundError(
                f"machine {machine!r} was never registered in {self.path} by a runtime",
                machine=machine,
            )
        return from_json(MachineRecord, row[0])  # type: ignore[no-any-return]


__all__ = [
    "NO_LIVE_OWNER",
    "SIGNAL_COLUMNS",
    "SPEC_VERSION",
    "SqliteReads",
    "machines_sql",
    "runs_sql",
    "signal_from_row",
]
