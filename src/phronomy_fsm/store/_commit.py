"""The statements of one engine commit on SQLite, and of a group-commit batch.

Owns: turning a :class:`~phronomy_fsm.durable.records.DurableCommit` into encoded
bodies *before* the write lock is taken (:class:`PreparedDurable`); running its
statements inside an open transaction (:func:`apply_durable`): the execution's
compare-and-set (revision, machine, still active; with a fence also the owner, the
fencing token and the owner's lease), consumed signals, child executions, signals
sent, journal entries; classifying a refused write into the store taxonomy by reading
the row back in the same transaction; the fence check an owner's other writes make
(:func:`check_fence`: closing signals); and applying a batch of commits in order, each
failing alone (:func:`apply_batch`). It never begins, commits or rolls back the
transaction: :class:`~phronomy_fsm.store.sqlite.SqliteBarrierStore` does.

The barrier-log row is written by the ``executions_log_*`` triggers from the
``last_barrier``/``last_digest`` columns set by the same INSERT or UPDATE
(``schema.py``), so a revision is never committed without its log row. Semantics:
``docs/semantics.md`` ("Barrier outcomes", "Leases and fencing", "Signals"); schema
and taxonomy: ``docs/store.md``.
"""

from __future__ import annotations

import functools
import hashlib
import sqlite3
from datetime import datetime
from typing import Any

from phronomy_fsm.durable.codec import datetime_to_epoch_ms
from phronomy_fsm.durable.records import (
    DurableCommit,
    DurableReceipt,
    ExecutionRecord,
    Fence,
    SignalKind,
    to_json,
    to_json_bytes,
)
from phronomy_fsm.errors import (
    AgentBusyError,
    ConflictError,
    LeaseLostError,
    PhronomyError,
)
from phronomy_fsm.store._reads import SIGNAL_COLUMNS, signal_from_row
from phronomy_fsm.store.refusals import (
    FENCE_COLUMNS,
    REFUSAL_COLUMNS,
    cancel_pending_error,
    ends_unless_cancelled,
    finished_outcome,
    finishes,
    inbox_write_refusal,
    signal_sent_already_error,
    update_refusal,
)
from phronomy_fsm.store.schema import SCHEMA_VERSION, STORED_VERSION

#: The owner's lease is still valid (two ``?``: the worker id, the commit time in ms).
LEASE_OK = (
    "EXISTS (SELECT 1 FROM workers w WHERE w.worker_id = ? AND w.lease_expires_epoch_ms >= ?)"
)

INSERT_EXECUTION = (
    "INSERT INTO executions(execution_id, machine, exclusive_key, parent_execution_id,"
    " revision, status, state, active, spec_sha256, body, created_epoch_ms,"
    " updated_epoch_ms, deadline_epoch_ms, owner_id, fence, last_barrier, last_digest)"
    " SELECT ?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?"
)
#: ``spec_sha256`` moves too: a commit of an execution a migration covered pins it to
#: the spec that ran it, and claims match on that column (docs/scale-out.md).
UPDATE_EXECUTION = (
    "UPDATE executions SET revision=?, status=?, state=?, active=?, body=?, spec_sha256=?,"
    " updated_epoch_ms=?, deadline_epoch_ms=?, last_barrier=?, last_digest=?"
    " WHERE execution_id=? AND revision=? AND machine=? AND active=1"
)
#: Appended to :data:`UPDATE_EXECUTION` for a fenced commit (four ``?``: worker id,
#: token, worker id, commit time).
FENCED = f" AND owner_id=? AND fence=? AND {LEASE_OK}"
UPDATE_EXECUTION_FENCED = UPDATE_EXECUTION + FENCED

INSERT_SIGNAL = (
    "INSERT INTO signals(signal_id, execution_id, kind, event, body, created_epoch_ms)"
    " VALUES (?,?,?,?,?,?)"
)

#: Most journal rows per INSERT statement (5 parameters each; SQLite allows 32,766).
JOURNAL_ROWS_PER_STATEMENT = 1000


def _epoch(value: datetime | None) -> int | None:
    return None if value is None else datetime_to_epoch_ms(value)


@functools.cache
def _insert_journal_sql(rows: int) -> str:
    return (
        "INSERT INTO execution_journal(execution_id, revision, position, kind, body) VALUES "
        + ",".join(["(?,?,?,?,?)"] * rows)
    )


class PreparedDurable:
    """A :class:`DurableCommit` with every body encoded and its parameters built before
    the write lock is taken (on the caller's thread for ``commit()`` and ``submit()``).

    Attributes:
        commit: the commit.
        body / digest: the execution's canonical JSON and its sha256 (hex).
        children / signals: ``(record, canonical JSON)`` of each child and signal sent.
        journal: the ``execution_journal`` rows
            ``(execution_id, revision, position, kind, body)``.
        is_one_statement: True when the commit is a single UPDATE (nothing but the
            execution moves): atomic on its own, so a batch needs no savepoint around
            it, and a run of them shares one multi-row statement.
        future: the group-commit future (``None`` on the direct path).

    Raises:
        SerializationError: a record is not storable (the message names the field).
    """

    __slots__ = (
        "body",
        "children",
        "commit",
        "digest",
        "future",
        "is_one_statement",
        "journal",
        "signals",
    )

    def __init__(self, commit: DurableCommit) -> None:
        self.commit = commit
        ex = commit.execution
        raw = to_json_bytes(ex)
        self.body = raw.decode("utf-8")
        self.digest = hashlib.sha256(raw).hexdigest()
        self.future: Any = None
        if commit.children or commit.send_signals or commit.journal:
            self.children = [(child, to_json(child)) for child in commit.children]
            self.signals = [(s, to_json(s)) for s in commit.send_signals]
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
            self.is_one_statement = False
        else:
            self.children = self.signals = self.journal = _NONE
            self.is_one_statement = (
                commit.expected_revision is not None
                and not commit.consume_signals
                and not finishes(commit)
                and not ends_unless_cancelled(commit)
            )


#: The shared empty list of a commit that adds no child, signal or journal entry
#: (never mutated).
_NONE: list[Any] = []


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
    sql = INSERT_EXECUTION
    if lease_check is not None:
        sql += f" WHERE {LEASE_OK}"
        params += list(lease_check)
    cur.execute(sql, params)
    return cur.rowcount


def apply_durable(
    cur: sqlite3.Cursor, p: PreparedDurable, now_ms: int, committed_at: datetime
) -> DurableReceipt:
    """Run ``p``'s statements in the transaction open on ``cur``.

    Args:
        cur: a cursor of the writer connection, inside ``BEGIN IMMEDIATE``.
        p: the prepared commit.
        now_ms / committed_at: the commit time (epoch ms, and as a UTC datetime).

    Returns:
        The receipt (valid once the transaction commits).

    Raises:
        NotFoundError, ConflictError, LeaseLostError, AgentBusyError,
            ExecutionFinishedError: refused; statements of this commit that ran
            before the refused one stay in the transaction, so the caller rolls back
            to a savepoint (or the whole transaction).
        sqlite3.Error: storage failures, for the caller to map.
    """
    commit = p.commit
    ex = commit.execution
    fence = commit.fence
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
                None if fence is None else (fence.worker_id, now_ms),
            )
        except sqlite3.IntegrityError:
            raise classify_insert(cur, ex) from None
        if rows != 1:
            raise LeaseLostError(
                f"execution {ex.execution_id} not created: the lease of worker "
                f"{fence.worker_id if fence else '?'} has expired; renew it (restart the runtime)",
                execution_id=ex.execution_id,
            )
    else:
        sql = UPDATE_EXECUTION
        params: list[Any] = [
            ex.revision,
            ex.status.value,
            ex.state,
            1 if ex.is_active else 0,
            p.body,
            ex.spec_sha256,
            now_ms,
            _epoch(ex.deadline_at),
            commit.barrier,
            p.digest,
            ex.execution_id,
            commit.expected_revision,
            ex.machine,
        ]
        if fence is not None:
            sql = UPDATE_EXECUTION_FENCED
            params += [fence.worker_id, fence.token, fence.worker_id, now_ms]
        try:
            cur.execute(sql, params)
        except sqlite3.IntegrityError:
            raise classify_insert(cur, ex) from None
        if cur.rowcount != 1:
            raise classify_update(cur, commit, now_ms)
        if ends_unless_cancelled(commit):
            taken = set(commit.consume_signals)
            pending = [
                seq
                for (seq,) in cur.execute(
                    "SELECT seq FROM signals WHERE execution_id=? AND kind=?"
                    " AND consumed_revision IS NULL ORDER BY seq",
                    (ex.execution_id, SignalKind.CANCEL.value),
                )
                if seq not in taken
            ]
            if pending:
                raise cancel_pending_error(ex.execution_id, pending)
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
    if finishes(commit):  # nothing reads a finished execution's inbox again
        cur.execute(
            "UPDATE signals SET consumed_revision=?, outcome=? WHERE execution_id=?"
            " AND consumed_revision IS NULL",
            (ex.revision, finished_outcome(ex.state), ex.execution_id),
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
            raise classify_insert(cur, child) from None
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
            row = cur.execute(
                f"SELECT {SIGNAL_COLUMNS} FROM signals WHERE signal_id=?", (signal.signal_id,)
            ).fetchone()
            stored = None if row is None else signal_from_row(row)
            raise signal_sent_already_error(stored, signal) from None
        seqs_out.append(int(cur.lastrowid or 0))
    for start in range(0, len(p.journal), JOURNAL_ROWS_PER_STATEMENT):
        chunk = p.journal[start : start + JOURNAL_ROWS_PER_STATEMENT]
        cur.execute(_insert_journal_sql(len(chunk)), [v for row in chunk for v in row])
    return DurableReceipt(ex.execution_id, ex.revision, tuple(seqs_out), committed_at)


def check_fence(cur: sqlite3.Cursor, execution_id: str, fence: Fence, now_ms: int) -> int:
    """Check, in the transaction open on ``cur``, that ``fence`` still holds
    ``execution_id``: the stored owner and fencing token are the fence's and the
    owner's lease has not passed at ``now_ms`` — the fence check of a commit
    (:data:`FENCED`), for an owner's write that is not a commit (closing signals).
    Returns the execution's revision.

    Raises:
        NotFoundError: no such execution.
        LeaseLostError: another owner or token, or the lease has passed (nothing may
            be written).
    """
    row = cur.execute(
        f"SELECT revision FROM executions WHERE execution_id=?{FENCED}",
        (execution_id, fence.worker_id, fence.token, fence.worker_id, now_ms),
    ).fetchone()
    if row is None:
        stored = cur.execute(
            f"SELECT {FENCE_COLUMNS} FROM executions WHERE execution_id=?", (execution_id,)
        ).fetchone()
        raise inbox_write_refusal(execution_id, fence, stored)
    return int(row[0])


def classify_insert(cur: sqlite3.Cursor, ex: ExecutionRecord) -> PhronomyError:
    """Why inserting ``ex`` violated a constraint: a duplicate id (ConflictError,
    checked first), another active execution with its exclusive key (AgentBusyError),
    else a revision already in the barrier log (ConflictError)."""
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


def classify_update(cur: sqlite3.Cursor, commit: DurableCommit, now_ms: int) -> PhronomyError:
    """Why the compare-and-set matched no row (:func:`~phronomy_fsm.store.refusals.update_refusal`
    of the execution's row read back)."""
    row = cur.execute(
        f"SELECT {REFUSAL_COLUMNS} FROM executions WHERE execution_id=?",
        (commit.execution.execution_id,),
    ).fetchone()
    return update_refusal(commit, row)


def _values(width: int, rows: int) -> str:
    """``rows`` parenthesised groups of ``width`` placeholders, comma-separated."""
    group = "(" + ",".join("?" * width) + ")"
    return ",".join([group] * rows)


#: Parameters per row of :func:`bulk_update_sql`.
BULK_WIDTH = 14


@functools.cache
def bulk_update_sql(rows: int) -> str:
    """One ``UPDATE ... FROM (VALUES ...)`` applying ``rows`` one-statement commits,
    each with the compare-and-set of :data:`UPDATE_EXECUTION` (plus :data:`FENCED`
    when its fence column is not NULL). Parameters: the commit time twice (the
    ``updated_epoch_ms`` written, the lease check), then per row :func:`bulk_row`."""
    return (
        "UPDATE executions SET revision=v.column2, status=v.column3, state=v.column4,"
        " active=v.column5, body=v.column6, updated_epoch_ms=?1, deadline_epoch_ms=v.column7,"
        " last_barrier=v.column8, last_digest=v.column9, spec_sha256=v.column14"
        f" FROM (VALUES {_values(BULK_WIDTH, rows)}) AS v"
        " WHERE executions.execution_id=v.column1 AND executions.revision=v.column10"
        " AND executions.machine=v.column11 AND executions.active=1"
        " AND (v.column12 IS NULL OR (executions.owner_id=v.column12"
        " AND executions.fence=v.column13 AND EXISTS (SELECT 1 FROM workers w"
        " WHERE w.worker_id=v.column12 AND w.lease_expires_epoch_ms >= ?1)))"
    )


def bulk_row(p: PreparedDurable) -> tuple[Any, ...]:
    """The :func:`bulk_update_sql` parameters of one one-statement commit:
    ``execution_id, revision, status, state, active, body, deadline_epoch_ms, barrier,
    digest, expected_revision, machine, fence worker (or NULL), fence token,
    spec_sha256``."""
    commit = p.commit
    ex = commit.execution
    fence = commit.fence
    return (
        ex.execution_id,
        ex.revision,
        ex.status.value,
        ex.state,
        1 if ex.is_active else 0,
        p.body,
        _epoch(ex.deadline_at),
        commit.barrier,
        p.digest,
        commit.expected_revision,
        ex.machine,
        None if fence is None else fence.worker_id,
        0 if fence is None else fence.token,
        ex.spec_sha256,
    )


def _run_end(batch: list[PreparedDurable], i: int) -> int:
    """The end of the run of commits starting at ``i`` that one multi-row statement
    can apply: one-statement commits of distinct executions (so no row of the run
    depends on another's effect)."""
    seen: set[str] = set()
    j = i
    while j < len(batch):
        p = batch[j]
        eid = p.commit.execution.execution_id
        if not p.is_one_statement or eid in seen:
            break
        seen.add(eid)
        j += 1
    return j


def _apply_run(cur: sqlite3.Cursor, run: list[PreparedDurable], now_ms: int) -> bool:
    """Apply ``run`` with one statement inside the savepoint ``run``. Returns whether
    every commit applied; if not, the savepoint was rolled back and nothing of the run
    is written."""
    cur.execute("SAVEPOINT run")
    params: list[Any] = [now_ms]
    for p in run:
        params.extend(bulk_row(p))
    cur.execute(bulk_update_sql(len(run)), params)
    applied = cur.rowcount == len(run)
    if not applied:
        cur.execute("ROLLBACK TO run")
    cur.execute("RELEASE run")
    return applied


@functools.cache
def autocommit_update_sql(rows: int) -> str:
    """One ``UPDATE ... FROM (VALUES ...)`` that applies ``rows`` one-statement commits
    of distinct executions **all or nothing**, so it can run as its own transaction
    (SQLite's autocommit: the statement takes the write lock, writes, and commits —
    with the fsync at ``synchronous=FULL`` — in one call).

    Each row keeps the compare-and-set and fence check of :func:`bulk_update_sql`,
    but a row that fails it sets ``revision`` to NULL, which the column's NOT NULL
    constraint refuses: the statement aborts and nothing of it is written. A missing
    execution cannot fail its row (it has none), so the statement also counts the
    executions named and updates nothing unless all of them exist, and nothing when
    the stored schema version is not this code's (newer code migrated the file: the
    transaction path, run next, refuses with SchemaVersionError). Parameters: the
    commit time, then per row :func:`bulk_row`, then every row's execution id again.
    """
    marks = ",".join("?" * rows)
    return (
        "UPDATE executions SET revision=CASE WHEN executions.revision=v.column10"
        " AND executions.machine=v.column11 AND executions.active=1"
        " AND (v.column12 IS NULL OR (executions.owner_id=v.column12"
        " AND executions.fence=v.column13 AND EXISTS (SELECT 1 FROM workers w"
        " WHERE w.worker_id=v.column12 AND w.lease_expires_epoch_ms >= ?1)))"
        " THEN v.column2 END,"
        " status=v.column3, state=v.column4, active=v.column5, body=v.column6,"
        " updated_epoch_ms=?1, deadline_epoch_ms=v.column7, last_barrier=v.column8,"
        " last_digest=v.column9, spec_sha256=v.column14"
        f" FROM (VALUES {_values(BULK_WIDTH, rows)}) AS v"
        " WHERE executions.execution_id=v.column1"
        f" AND (SELECT count(*) FROM executions e WHERE e.execution_id IN ({marks})) = {rows}"
        # a store newer code migrated matches nothing: the transaction path then says why
        f" AND ({STORED_VERSION}) = '{SCHEMA_VERSION}'"
    )


def is_single_run(batch: list[PreparedDurable]) -> bool:
    """True when every commit of ``batch`` is a one-statement commit of its own
    execution (no two of the same execution): :func:`apply_run_autocommit` can apply
    the whole batch."""
    return _run_end(batch, 0) == len(batch)


def apply_run_autocommit(cur: sqlite3.Cursor, run: list[PreparedDurable], now_ms: int) -> bool:
    """Apply ``run`` (see :func:`is_single_run`) as one statement **outside** any
    transaction: the statement is its own transaction, committed (and at FULL
    fsynced) before this returns True. False means a commit of the run was refused
    (a compare-and-set or fence check failed, an execution does not exist, or the
    schema version is no longer this code's) and
    **nothing** was written: apply the run in a transaction to say which.

    Raises:
        sqlite3.Error: any other failure. The statement includes its COMMIT, so
            except for ``SQLITE_BUSY`` (the write lock was never taken) the caller
            cannot tell whether it committed.
    """
    params: list[Any] = [now_ms]
    for p in run:
        params.extend(bulk_row(p))
    for p in run:
        params.append(p.commit.execution.execution_id)
    try:
        cur.execute(autocommit_update_sql(len(run)), params)
    except sqlite3.IntegrityError:
        return False  # a refused row aborted the statement (and its transaction)
    if cur.rowcount == len(run):
        return True
    if cur.rowcount == 0:
        return False  # an execution named does not exist: nothing matched
    raise sqlite3.DatabaseError(  # impossible by construction: fail as outcome unknown
        f"the one-statement batch updated {cur.rowcount} of {len(run)} executions"
    )


def apply_batch(
    cur: sqlite3.Cursor,
    batch: list[PreparedDurable],
    now_ms: int,
    committed_at: datetime,
    hook: Any,
    *,
    bulk: bool = True,
) -> tuple[list[Any], list[int]]:
    """Apply a group-commit batch, in submission order, inside the open transaction.

    Runs of one-statement commits of distinct executions (:func:`_run_end`) are
    applied optimistically by one multi-row UPDATE inside a savepoint — one SQLite
    call for the whole run instead of one per commit, each of which gives up the GIL
    and must win it back while the event loop is busy (``docs/store.md``,
    "Performance"). If any of them is refused, the savepoint is rolled back and the
    run replayed one commit at a time to find which. Other commits run one by one: a
    commit of several statements inside its own savepoint, so a refused commit fails
    only itself; a one-statement commit is atomic alone. ``hook`` (the store's fault
    seam) is called with ``("write", (commit,))`` before each commit's statements and
    disables the multi-row path; so does ``bulk=False`` (used after
    :func:`apply_run_autocommit` was refused: one of the run is known to fail).

    Returns:
        ``(results, ok)``: per commit a DurableReceipt or the typed refusal, and the
        indexes of the receipts (valid once the transaction commits).

    Raises:
        sqlite3.Error and anything ``hook`` raises: the whole batch must be rolled back.
    """
    results: list[Any] = [None] * len(batch)
    ok: list[int] = []
    i = 0
    count = len(batch)
    while i < count:
        j = _run_end(batch, i) if hook is None and bulk else i
        if j - i > 1 and _apply_run(cur, batch[i:j], now_ms):
            for k in range(i, j):
                ex = batch[k].commit.execution
                results[k] = DurableReceipt(ex.execution_id, ex.revision, (), committed_at)
                ok.append(k)
            i = j
            continue
        for k in range(i, max(j, i + 1)):
            p = batch[k]
            savepoint = not p.is_one_statement
            if savepoint:
                cur.execute("SAVEPOINT barrier")
            try:
                if hook is not None:
                    hook("write", (p.commit,))
                results[k] = apply_durable(cur, p, now_ms, committed_at)
                ok.append(k)
            except PhronomyError as exc:
                if savepoint:
                    cur.execute("ROLLBACK TO barrier")
                results[k] = exc
            if savepoint:
                cur.execute("RELEASE barrier")
        i = max(j, i + 1)
    return results, ok


__all__ = [
    "BULK_WIDTH",
    "PreparedDurable",
    "apply_batch",
    "apply_durable",
    "apply_run_autocommit",
    "autocommit_update_sql",
    "bulk_row",
    "bulk_update_sql",
    "check_fence",
    "classify_insert",
    "classify_update",
    "is_single_run",
]
