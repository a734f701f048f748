"""The durable engine's statements on SQLite: generic commits, signals, leases, machines.

Owns the SQL of the engine's store port (:class:`phronomy_fsm.durable.ports.ExecutionStore`)
for :class:`~phronomy_fsm.store.sqlite.SqliteBarrierStore`:

- :class:`PreparedDurable` / :func:`apply_durable`: one
  :class:`~phronomy_fsm.durable.records.DurableCommit` inside an open transaction —
  the execution's compare-and-set (revision, owner and fencing token, the owner's
  lease still valid), consumed signals, child executions, signals sent, journal
  entries — classified into the store taxonomy when refused;
- :class:`SqliteDurable`, mixed into the store class: reads of executions, the barrier
  log, the inbox and the journal; sending a signal; workers and their leases; claims
  of executions; the registry of machines.

It never begins, commits or rolls back a barrier's transaction (the store's group
commit does); the maintenance writes here use the store's ``_write_transaction``.
Semantics: ``docs/semantics.md`` ("Leases and fencing", "Signals"); schema:
``docs/store.md``.
"""

from __future__ import annotations

import hashlib
import sqlite3
from datetime import datetime
from typing import Any

from phronomy_fsm.durable.codec import datetime_to_epoch_ms, epoch_ms_to_datetime
from phronomy_fsm.durable.records import (
    BarrierLogRecord,
    DurableCommit,
    DurableReceipt,
    ExecutionRecord,
    JournalEntry,
    MachineRecord,
    SignalRecord,
    WorkerRecord,
    from_json,
    to_json,
)
from phronomy_fsm.errors import (
    AgentBusyError,
    ConflictError,
    ExecutionFinishedError,
    LeaseLostError,
    NotFoundError,
    PhronomyError,
    SignalRefusedError,
)
from phronomy_fsm.store.base import COMMITTED, CONFLICT, NOT_COMMITTED
from phronomy_fsm.store.schema import BARRIER_CHAIN

_LEASE_OK = (
    "EXISTS (SELECT 1 FROM workers w WHERE w.worker_id = ? AND w.lease_expires_epoch_ms >= ?)"
)

INSERT_DURABLE = (
    "INSERT INTO executions(execution_id, machine, exclusive_key, parent_execution_id,"
    " revision, status, state, active, spec_sha256, body, created_epoch_ms,"
    " updated_epoch_ms, deadline_epoch_ms, owner_id, fence, last_barrier, last_digest)"
    " SELECT ?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?"
)
UPDATE_DURABLE = (
    "UPDATE executions SET revision=?, status=?, state=?, active=?, body=?,"
    " updated_epoch_ms=?, deadline_epoch_ms=?, last_barrier=?, last_digest=?"
    " WHERE execution_id=? AND revision=? AND machine=? AND active=1"
)
_FENCED = f" AND owner_id=? AND fence=? AND {_LEASE_OK}"

INSERT_SIGNAL = (
    "INSERT INTO signals(signal_id, execution_id, kind, event, body, created_epoch_ms)"
    " VALUES (?,?,?,?,?,?)"
)


def _epoch(value: datetime | None) -> int | None:
    return None if value is None else datetime_to_epoch_ms(value)


class PreparedDurable:
    """A :class:`DurableCommit` with every body encoded, built before the write lock.

    Raises SerializationError from the encoder (naming the field)."""

    __slots__ = ("body", "children", "commit", "digest", "future", "journal", "signals")

    def __init__(self, commit: DurableCommit) -> None:
        self.commit = commit
        self.body = to_json(commit.execution)
        self.digest = hashlib.sha256(self.body.encode("utf-8")).hexdigest()
        self.children = [(child, to_json(child)) for child in commit.children]
        self.signals = [(s, to_json(s)) for s in commit.send_signals]
        ex = commit.execution
        self.journal = [
            (
                ex.execution_id,
                ex.revision,
                i,
                e.kind,
                to_json(e.__class__(e.kind, e.data, ex.revision, i)),
            )
            for i, e in enumerate(commit.journal)
        ]
        self.future: Any = None


def _insert_execution(
    cur: sqlite3.Cursor,
    ex: ExecutionRecord,
    body: str,
    barrier: str,
    now_ms: int,
    owner: str | None,
    fence: int,
    lease_check: tuple[str, int] | None,
) -> int:
    params: list[Any] = [
        ex.execution_id,
        ex.machine,
        ex.exclusive_key,
        ex.parent_execution_id,
        ex.revision,
        ex.status.value,
        ex.state,
        1 if ex.is_active else 0,
        ex.spec_sha256,
        body,
        datetime_to_epoch_ms(ex.created_at),
        now_ms,
        _epoch(ex.deadline_at),
        owner,
        fence,
        barrier,
        hashlib.sha256(body.encode("utf-8")).hexdigest(),
    ]
    sql = INSERT_DURABLE
    if lease_check is not None:
        sql += f" WHERE {_LEASE_OK}"
        params += list(lease_check)
    cur.execute(sql, params)
    return cur.rowcount


def apply_durable(
    cur: sqlite3.Cursor, p: PreparedDurable, now_ms: int, committed_at: datetime
) -> DurableReceipt:
    """Run ``p``'s statements in the transaction open on ``cur``.

    Returns the receipt (valid once the transaction commits).

    Raises:
        NotFoundError, ConflictError, LeaseLostError, AgentBusyError: refused; earlier
            statements of this commit may have run, so the caller rolls back to a
            savepoint.
        sqlite3.Error: storage failures, for the caller to map.
    """
    commit = p.commit
    ex = commit.execution
    fence = commit.fence
    lease = None if fence is None else (fence.worker_id, now_ms)
    if commit.expected_revision is None:
        try:
            rows = _insert_execution(
                cur,
                ex,
                p.body,
                commit.barrier,
                now_ms,
                None if fence is None else fence.worker_id,
                0 if fence is None else fence.token,
                lease,
            )
        except sqlite3.IntegrityError:
            raise _classify_insert(cur, ex) from None
        if rows != 1:
            raise LeaseLostError(
                f"execution {ex.execution_id} not created: the lease of worker "
                f"{fence.worker_id if fence else '?'} has expired; renew it (restart the runtime)",
                execution_id=ex.execution_id,
            )
    else:
        sql = UPDATE_DURABLE
        params: list[Any] = [
            ex.revision,
            ex.status.value,
            ex.state,
            1 if ex.is_active else 0,
            p.body,
            now_ms,
            _epoch(ex.deadline_at),
            commit.barrier,
            p.digest,
            ex.execution_id,
            commit.expected_revision,
            ex.machine,
        ]
        if fence is not None:
            sql += _FENCED
            params += [fence.worker_id, fence.token, fence.worker_id, now_ms]
        try:
            cur.execute(sql, params)
        except sqlite3.IntegrityError:
            raise _classify_insert(cur, ex) from None
        if cur.rowcount != 1:
            raise _classify_update(cur, commit, now_ms)
    if commit.consume_signals:
        seqs = sorted(set(commit.consume_signals))
        marks = ",".join("?" * len(seqs))
        cur.execute(
            f"UPDATE signals SET consumed_revision=?, outcome=? WHERE execution_id=?"
            f" AND consumed_revision IS NULL AND seq IN ({marks})",
            [ex.revision, commit.consume_outcome, ex.execution_id, *seqs],
        )
        if cur.rowcount != len(seqs):
            raise ConflictError(
                f"execution {ex.execution_id}: signals {seqs} are not all pending any more "
                "(consumed by another commit?); reload and decide again",
                execution_id=ex.execution_id,
            )
    for child, body in p.children:
        try:
            _insert_execution(
                cur,
                child,
                body,
                "@start",
                now_ms,
                None if fence is None else fence.worker_id,
                1 if fence is not None else 0,
                None,
            )
        except sqlite3.IntegrityError:
            raise _classify_insert(cur, child) from None
    seqs_out: list[int] = []
    for signal, body in p.signals:
        try:
            cur.execute(
                INSERT_SIGNAL,
                (
                    signal.signal_id,
                    signal.execution_id,
                    signal.kind.value,
                    signal.event,
                    body,
                    now_ms,
                ),
            )
        except sqlite3.IntegrityError:
            raise ConflictError(
                f"signal {signal.signal_id} was sent already", signal_id=signal.signal_id
            ) from None
        seqs_out.append(int(cur.lastrowid or 0))
    if p.journal:
        cur.execute(
            "INSERT INTO execution_journal(execution_id, revision, position, kind, body) VALUES "
            + ",".join(["(?,?,?,?,?)"] * len(p.journal)),
            [v for row in p.journal for v in row],
        )
    return DurableReceipt(ex.execution_id, ex.revision, tuple(seqs_out), committed_at)


def _classify_insert(cur: sqlite3.Cursor, ex: ExecutionRecord) -> PhronomyError:
    """Why inserting ``ex`` violated a constraint: a duplicate id, or another active
    execution with its exclusive key."""
    if cur.execute("SELECT 1 FROM executions WHERE execution_id=?", (ex.execution_id,)).fetchone():
        return ConflictError(
            f"execution {ex.execution_id} already exists", execution_id=ex.execution_id
        )
    row = cur.execute(
        "SELECT execution_id FROM executions WHERE exclusive_key=? AND active=1",
        (ex.exclusive_key,),
    ).fetchone()
    if row is not None:
        return AgentBusyError(
            f"exclusive key {ex.exclusive_key!r} already has the active execution {row[0]}; "
            "wait for it to finish or cancel it",
            exclusive_key=ex.exclusive_key,
            execution_id=ex.execution_id,
            active_execution_id=row[0],
        )
    return ConflictError(
        f"execution {ex.execution_id}: revision {ex.revision} is already in the barrier log",
        execution_id=ex.execution_id,
    )


def _classify_update(cur: sqlite3.Cursor, commit: DurableCommit, now_ms: int) -> PhronomyError:
    """Why the compare-and-set matched no row."""
    ex = commit.execution
    row = cur.execute(
        "SELECT revision, machine, active, status, owner_id, fence FROM executions"
        " WHERE execution_id=?",
        (ex.execution_id,),
    ).fetchone()
    if row is None:
        return NotFoundError(
            f"execution {ex.execution_id} does not exist", execution_id=ex.execution_id
        )
    revision, machine, active, status, owner, token = row
    if machine != ex.machine:
        return ConflictError(
            f"execution {ex.execution_id} runs machine {machine}, not {ex.machine}",
            execution_id=ex.execution_id,
        )
    if not active:
        return ExecutionFinishedError(
            f"execution {ex.execution_id} has finished ({status}); nothing more is committed",
            execution_id=ex.execution_id,
            status=status,
        )
    if revision != commit.expected_revision:
        return ConflictError(
            f"execution {ex.execution_id} is at revision {revision}, not the expected "
            f"{commit.expected_revision}; reload it and decide again",
            execution_id=ex.execution_id,
            expected_revision=commit.expected_revision,
            stored_revision=revision,
        )
    fence = commit.fence
    if fence is not None and (owner != fence.worker_id or token != fence.token):
        return LeaseLostError(
            f"execution {ex.execution_id} is now owned by worker {owner} (fence {token}), not "
            f"{fence.worker_id} (fence {fence.token}); this worker must drop it",
            execution_id=ex.execution_id,
            owner_id=owner,
        )
    return LeaseLostError(
        f"execution {ex.execution_id}: the lease of worker "
        f"{fence.worker_id if fence else '?'} has expired; nothing was committed",
        execution_id=ex.execution_id,
    )


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
        seq=seq,
        consumed_revision=consumed,
        outcome=outcome,
    )


_SIGNAL_COLUMNS = "seq, body, consumed_revision, outcome"


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


class SqliteDurable:
    """The engine-port methods of the SQLite store (module docstring). Mixed into
    :class:`~phronomy_fsm.store.sqlite.SqliteBarrierStore`, whose ``_reading`` and
    ``_write_transaction`` it uses."""

    path: str

    def _reading(self, operation: str, *, snapshot: bool = False) -> Any:  # from the store
        raise NotImplementedError

    def _write_transaction(self, operation: str) -> Any:  # from the store
        raise NotImplementedError

    def _commit_time(self) -> tuple[int, datetime]:  # from the store
        raise NotImplementedError

    # ------------------------------------------------------------------ executions

    def load_record(self, execution_id: str) -> ExecutionRecord:
        """The stored execution of any machine run by the durable engine.

        Raises:
            NotFoundError: no such execution.
            SerializationError: the row is not an engine execution (an agent row of
                schema 3) or its body is damaged.
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
        """Executions matching every given filter, oldest first. Raises
        SerializationError, StorageError."""
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
        """Column summaries of every execution (engine and agent rows alike) matching
        every given filter (an agent row's exclusive key is its agent id): id,
        machine, state, status, revision, exclusive_key, parent, owner, times (epoch
        ms), oldest first. Raises StorageError."""
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
        """The barrier log of one execution by revision (empty when unknown)."""
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

    def reconcile_durable(self, commit: DurableCommit) -> str:
        """Read back after OutcomeUnknownError (``docs/semantics.md``, "Barrier
        outcomes"): :data:`COMMITTED` when the stored execution is at the intended
        revision with the intended body, :data:`NOT_COMMITTED` when it is absent (a
        creating commit) or still at the expected revision, :data:`CONFLICT` otherwise.

        Raises:
            StorageError: the read failed (the caller fails closed).
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
        """The application records of one execution, in commit order."""
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

    # ------------------------------------------------------------------ signals

    def send_signal(self, signal: SignalRecord) -> SignalRecord:
        """Write ``signal`` to its execution's inbox, in one transaction that checks
        the execution: it exists, is active, and (with ``expected_revision``) is at
        that revision. A signal id sent before returns the stored signal and writes
        nothing (a retried send is a no-op).

        Raises:
            NotFoundError: no such execution.
            ExecutionFinishedError: it has finished.
            SignalRefusedError: ``expected_revision`` is stale (``reason``).
            SerializationError, StorageError: nothing was written.
        """
        body = to_json(signal)
        now_ms, _ = self._commit_time()
        with self._write_transaction("send_signal") as cur:
            existing = cur.execute(
                f"SELECT {_SIGNAL_COLUMNS} FROM signals WHERE signal_id=?", (signal.signal_id,)
            ).fetchone()
            if existing is not None:
                return _signal_from_row(existing)
            row = cur.execute(
                "SELECT revision, active, status FROM executions WHERE execution_id=?",
                (signal.execution_id,),
            ).fetchone()
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
                (
                    signal.signal_id,
                    signal.execution_id,
                    signal.kind.value,
                    signal.event,
                    body,
                    now_ms,
                ),
            )
            seq = int(cur.lastrowid or 0)
        return _signal_from_row((seq, body, None, None))

    def close_signals(self, execution_id: str, seqs: list[int], outcome: str) -> int:
        """Mark pending signals of ``execution_id`` consumed without applying them
        (``outcome`` says why: ``rejected: ...``, ``dropped: ...``); returns how many
        were still pending. The execution's revision does not move."""
        if not seqs:
            return 0
        marks = ",".join("?" * len(seqs))
        with self._write_transaction("close_signals") as cur:
            cur.execute(
                f"UPDATE signals SET consumed_revision = (SELECT revision FROM executions"
                f" WHERE execution_id = ?), outcome = ? WHERE execution_id = ?"
                f" AND consumed_revision IS NULL AND seq IN ({marks})",
                [execution_id, outcome, execution_id, *seqs],
            )
            return int(cur.rowcount)

    def pending_signals(self, execution_id: str) -> list[SignalRecord]:
        """The execution's unconsumed signals, in the order they were sent."""
        with self._reading("pending_signals") as conn:
            rows = conn.execute(
                f"SELECT {_SIGNAL_COLUMNS} FROM signals WHERE execution_id=?"
                " AND consumed_revision IS NULL ORDER BY seq",
                (execution_id,),
            ).fetchall()
        return [_signal_from_row(r) for r in rows]

    def list_signals(self, execution_id: str) -> list[SignalRecord]:
        """Every signal of one execution (consumed or not), in order."""
        with self._reading("list_signals") as conn:
            rows = conn.execute(
                f"SELECT {_SIGNAL_COLUMNS} FROM signals WHERE execution_id=? ORDER BY seq",
                (execution_id,),
            ).fetchall()
        return [_signal_from_row(r) for r in rows]

    def signals_after(self, seq: int, *, limit: int = 1000) -> list[SignalRecord]:
        """Unconsumed signals with a sequence number above ``seq`` (any execution), in
        order: what a polling owner has not seen yet."""
        with self._reading("signals_after") as conn:
            rows = conn.execute(
                f"SELECT {_SIGNAL_COLUMNS} FROM signals WHERE seq > ?"
                " AND consumed_revision IS NULL ORDER BY seq LIMIT ?",
                (int(seq), int(limit)),
            ).fetchall()
        return [_signal_from_row(r) for r in rows]

    def last_signal_seq(self) -> int:
        """The highest signal sequence number written so far (0 when none)."""
        with self._reading("last_signal_seq") as conn:
            row = conn.execute("SELECT max(seq) FROM signals").fetchone()
        return int(row[0] or 0)

    # ------------------------------------------------------------------ workers

    def register_worker(self, worker: WorkerRecord, lease_seconds: float) -> None:
        """Insert (or replace) the row of a live worker; its lease runs for
        ``lease_seconds`` from now on the store's clock (the database's time is the
        one every worker's lease is measured against)."""
        now_ms, _ = self._commit_time()
        with self._write_transaction("register_worker") as cur:
            cur.execute(
                "INSERT INTO workers(worker_id, body, heartbeat_epoch_ms, lease_expires_epoch_ms)"
                " VALUES (?,?,?,?) ON CONFLICT(worker_id) DO UPDATE SET body=excluded.body,"
                " heartbeat_epoch_ms=excluded.heartbeat_epoch_ms,"
                " lease_expires_epoch_ms=excluded.lease_expires_epoch_ms",
                (worker.worker_id, to_json(worker), now_ms, now_ms + int(lease_seconds * 1000)),
            )

    def renew_lease(self, worker_id: str, lease_seconds: float) -> bool:
        """Heartbeat: the worker's lease now runs ``lease_seconds`` from now (store
        clock). Returns False when the worker row is gone (retired, or removed by an
        operator): the worker must register again."""
        now_ms, _ = self._commit_time()
        with self._write_transaction("renew_lease") as cur:
            cur.execute(
                "UPDATE workers SET heartbeat_epoch_ms=?, lease_expires_epoch_ms=? WHERE worker_id=?",
                (now_ms, now_ms + int(lease_seconds * 1000), worker_id),
            )
            return cur.rowcount == 1

    def retire_worker(self, worker_id: str) -> None:
        """End a worker's lease at once (its executions become claimable)."""
        with self._write_transaction("retire_worker") as cur:
            cur.execute(
                "UPDATE workers SET lease_expires_epoch_ms=0 WHERE worker_id=?", (worker_id,)
            )

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

    def claim_execution(self, execution_id: str, worker_id: str) -> int | None:
        """Make ``worker_id`` the owner of an active execution whose owner is none,
        itself, or a worker whose lease has passed; the fencing token rises by one.
        Returns the new token, or ``None`` when a live worker owns it, it is not
        active, or ``worker_id``'s own lease is not valid."""
        now_ms, _ = self._commit_time()
        with self._write_transaction("claim_execution") as cur:
            row = cur.execute(
                "UPDATE executions SET owner_id=?, fence=fence+1 WHERE execution_id=? AND active=1"
                " AND (owner_id IS NULL OR owner_id=? OR NOT EXISTS (SELECT 1 FROM workers o"
                " WHERE o.worker_id = executions.owner_id AND o.lease_expires_epoch_ms >= ?))"
                f" AND {_LEASE_OK} RETURNING fence",
                (worker_id, execution_id, worker_id, now_ms, worker_id, now_ms),
            ).fetchone()
        return None if row is None else int(row[0])

    def claimable_executions(
        self, machines: tuple[str, ...], *, limit: int = 1000
    ) -> list[tuple[str, str]]:
        """``(execution_id, machine)`` of active executions of ``machines`` with no
        live owner (none, or a worker whose lease has passed), oldest first."""
        if not machines:
            return []
        now_ms, _ = self._commit_time()
        marks = ",".join("?" * len(machines))
        with self._reading("claimable_executions") as conn:
            rows = conn.execute(
                f"SELECT execution_id, machine FROM executions e WHERE active=1 AND machine IN ({marks})"
                " AND (owner_id IS NULL OR NOT EXISTS (SELECT 1 FROM workers w"
                " WHERE w.worker_id = e.owner_id AND w.lease_expires_epoch_ms >= ?))"
                " ORDER BY created_epoch_ms, execution_id LIMIT ?",
                (*machines, now_ms, int(limit)),
            ).fetchall()
        return [(eid, machine) for eid, machine in rows]

    def claim_executions(
        self, machines: tuple[str, ...], worker_id: str, *, limit: int
    ) -> list[tuple[str, str, int]]:
        """Claim up to ``limit`` active executions of ``machines`` with no live owner
        for ``worker_id`` in one write transaction (writers are serialised, so racing
        workers take disjoint sets); ``[(execution_id, machine, new fencing token)]``,
        oldest first; empty when ``worker_id``'s own lease is not valid."""
        if not machines or limit <= 0:
            return []
        now_ms, _ = self._commit_time()
        marks = ",".join("?" * len(machines))
        claimed: list[tuple[str, str, int]] = []
        with self._write_transaction("claim_executions") as cur:
            rows = cur.execute(
                f"SELECT execution_id, machine FROM executions e WHERE active=1"
                f" AND machine IN ({marks}) AND (owner_id IS NULL OR NOT EXISTS (SELECT 1"
                " FROM workers w WHERE w.worker_id = e.owner_id AND w.lease_expires_epoch_ms >= ?))"
                f" AND {_LEASE_OK} ORDER BY created_epoch_ms, execution_id LIMIT ?",
                (*machines, now_ms, worker_id, now_ms, int(limit)),
            ).fetchall()
            for eid, machine in rows:
                (fence,) = cur.execute(
                    "UPDATE executions SET owner_id=?, fence=fence+1 WHERE execution_id=?"
                    " RETURNING fence",
                    (worker_id, eid),
                ).fetchone()
                claimed.append((eid, machine, int(fence)))
        return claimed

    # ------------------------------------------------------------------ agents

    def register_agent(self, agent_id: str) -> bool:
        """Record agent ``agent_id``; False when it exists already (nothing written).
        Raises StorageError."""
        now_ms, _ = self._commit_time()
        with self._write_transaction("register_agent") as cur:
            row = cur.execute(
                "INSERT INTO agents(agent_id, created_epoch_ms, body) VALUES (?, ?, '{}')"
                " ON CONFLICT(agent_id) DO NOTHING RETURNING agent_id",
                (agent_id, now_ms),
            ).fetchone()
        return row is not None

    def agent_exists(self, agent_id: str) -> bool:
        """True when agent ``agent_id`` was registered. Raises StorageError."""
        with self._reading("agent_exists") as conn:
            row = conn.execute("SELECT 1 FROM agents WHERE agent_id = ?", (agent_id,)).fetchone()
        return row is not None

    def agent_ids(self) -> list[str]:
        """Every registered agent id, sorted. Raises StorageError."""
        with self._reading("agent_ids") as conn:
            return [r[0] for r in conn.execute("SELECT agent_id FROM agents ORDER BY agent_id")]

    # ------------------------------------------------------------------ machines

    def register_machine(self, record: MachineRecord) -> None:
        """Keep a machine's compiled table (once per spec sha256; idempotent)."""
        with self._write_transaction("register_machine") as cur:
            cur.execute(
                "INSERT INTO machines(machine, spec_sha256, body, registered_epoch_ms)"
                " VALUES (?,?,?,?) ON CONFLICT DO NOTHING",
                (
                    record.machine,
                    record.spec_sha256,
                    to_json(record),
                    datetime_to_epoch_ms(record.registered_at),
                ),
            )

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


__all__ = ["PreparedDurable", "SqliteDurable", "apply_durable"]
