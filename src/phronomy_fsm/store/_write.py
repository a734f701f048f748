"""The statements of one barrier commit on SQLite (reference §5.2; issue 4 items 1, 4).

Owns: turning a :class:`BarrierCommit` into encoded parameters *before* the write lock
is taken (:class:`PreparedBarrier`), running its compare-and-set statements inside an
open transaction (:func:`apply_barrier`), and classifying a refused write into the
taxonomy (NotFoundError, ConflictError, AgentBusyError, InvalidStatusTransitionError)
by reading the row back inside the same transaction. It never begins, commits or
rolls back: the caller owns the transaction.

The barrier-log row is written by the ``executions_log_*`` triggers from the
``last_barrier``/``last_digest`` columns set by the same INSERT or UPDATE, so a
revision can never be committed without its log row, and a plain barrier is one
statement (one round trip, no savepoint needed).
"""

from __future__ import annotations

import functools
import hashlib
import sqlite3
from concurrent.futures import Future
from datetime import datetime
from typing import Any

from phronomy_fsm.errors import (
    AgentBusyError,
    ConflictError,
    InvalidStatusTransitionError,
    NotFoundError,
    PhronomyError,
)
from phronomy_fsm.store._durable import apply_durable
from phronomy_fsm.store.records import (
    ACTIVE_STATUSES,
    ALLOWED_STATUS_CHANGES,
    BarrierCommit,
    CommitReceipt,
    ExecutionRecord,
    datetime_to_epoch_ms,
    to_json,
)

INSERT_EXECUTION = (
    "INSERT INTO executions(machine, execution_id, exclusive_key, revision, status, state, active,"
    " spec_sha256, body, created_epoch_ms, updated_epoch_ms, last_barrier, last_digest)"
    " VALUES ('agent_session',?,?,?,?,?,?,?,?,?,?,?,?)"
)
UPDATE_AGENT = (
    "UPDATE agents SET revision=?, lifecycle=?, journal_head=?, body=?, updated_epoch_ms=?"
    " WHERE agent_id=? AND revision=? AND journal_head=?"
)
INSERT_JOURNAL = (
    "INSERT INTO journal(agent_id, sequence, record_id, execution_id, kind, body)"
    " VALUES (?,?,?,?,?,?)"
)
#: Most journal rows per INSERT statement (6 parameters each; SQLite allows 32,766).
JOURNAL_ROWS_PER_STATEMENT = 1000


def insert_journal(cur: sqlite3.Cursor, rows: list[tuple[Any, ...]]) -> None:
    """Append ``rows`` (``agent_id, sequence, record_id, execution_id, kind, body``)
    with one multi-row INSERT per :data:`JOURNAL_ROWS_PER_STATEMENT` rows.

    One statement, not ``executemany``: every SQLite call gives up the GIL and must win
    it back, which costs the writer thread most when the event loop is busy (see
    :func:`apply_batch`). Raises sqlite3.IntegrityError for a duplicate sequence or
    record id (nothing of that statement is written)."""
    for start in range(0, len(rows), JOURNAL_ROWS_PER_STATEMENT):
        chunk = rows[start : start + JOURNAL_ROWS_PER_STATEMENT]
        cur.execute(_insert_journal_sql(len(chunk)), [value for row in chunk for value in row])


def _values(width: int, rows: int) -> str:
    """``rows`` parenthesised groups of ``width`` placeholders, comma-separated."""
    group = "(" + ",".join("?" * width) + ")"
    return ",".join([group] * rows)


@functools.cache
def _insert_journal_sql(rows: int) -> str:
    return INSERT_JOURNAL.replace("(?,?,?,?,?,?)", _values(6, rows))


def _update_sql(new_status: Any) -> str:
    """The CAS update for a move to ``new_status``: the stored status must be one that
    may precede it (reference §2.2), so a forbidden change writes nothing.

    ``active`` is written (as the ``?`` after ``state``, the agent's phase) only when ``new_status`` is
    terminal: before an active status the stored ``active`` is already 1, and leaving
    it out of the SET list spares a write of the partial index on every barrier.
    """
    sources = sorted(
        s.value for s, allowed in ALLOWED_STATUS_CHANGES.items() if new_status in allowed
    )
    status_list = ",".join(f"'{s}'" for s in sources)
    active = "" if new_status in ACTIVE_STATUSES else " active=?,"
    return (
        f"UPDATE executions SET revision=?, status=?, state=?,{active} body=?,"
        " updated_epoch_ms=?, last_barrier=?, last_digest=?"
        f" WHERE execution_id=? AND revision=? AND exclusive_key=? AND status IN ({status_list})"
    )


UPDATE_EXECUTION = {status: _update_sql(status) for status in ALLOWED_STATUS_CHANGES}


class PreparedBarrier:
    """A barrier commit with everything encoded (canonical JSON, digest, parameters).

    Built on the caller's thread, before the write lock. ``future`` is set for the
    group-commit path. Raises SerializationError from the encoder.
    """

    __slots__ = (
        "agent_params",
        "commit",
        "execution_params",
        "future",
        "journal_rows",
        "sequences",
        "updating",
    )

    def __init__(self, commit: BarrierCommit) -> None:
        self.commit = commit
        ex = commit.execution
        body = to_json(ex)
        digest = hashlib.sha256(body.encode("utf-8")).hexdigest()
        status = ex.status
        active = 1 if status in ACTIVE_STATUSES else 0
        self.updating = commit.expected_revision is not None
        # The commit time (updated_epoch_ms) is the last parameter of the prefix and is
        # appended at write time: params = prefix + (now_ms,) + suffix.
        if self.updating:
            self.execution_params: tuple[tuple[Any, ...], tuple[Any, ...]] = (
                (ex.revision, status.value, ex.phase, body)
                if active
                else (ex.revision, status.value, ex.phase, 0, body),
                (commit.barrier, digest, ex.execution_id, commit.expected_revision, ex.agent_id),
            )
        else:
            self.execution_params = (
                (
                    ex.execution_id,
                    ex.agent_id,
                    ex.revision,
                    status.value,
                    ex.phase,
                    active,
                    ex.spec_sha256,
                    body,
                    datetime_to_epoch_ms(ex.created_at),
                ),
                (commit.barrier, digest),
            )
        agent = commit.agent
        self.sequences: tuple[int, ...] = ()
        self.journal_rows: list[tuple[Any, ...]] = []
        self.agent_params: tuple[tuple[Any, ...], tuple[Any, ...]] | None = None
        if agent is not None:
            base = agent.journal_head - len(commit.journal)
            self.agent_params = (
                (agent.revision, agent.lifecycle.value, agent.journal_head, to_json(agent)),
                (agent.agent_id, agent.revision - 1, base),
            )
            if commit.journal:
                self.sequences = tuple(range(base + 1, agent.journal_head + 1))
                for seq, record in zip(self.sequences, commit.journal):
                    self.journal_rows.append(
                        (
                            record.agent_id,
                            seq,
                            record.record_id,
                            record.execution_id,
                            record.kind,
                            to_json(record, sequence=seq),
                        )
                    )
        self.future: Future[CommitReceipt] | None = None


def apply_barrier(
    cur: sqlite3.Cursor, p: PreparedBarrier, now_ms: int, committed_at: datetime
) -> CommitReceipt:
    """Run ``p``'s statements in the transaction open on ``cur`` (reference §5.1 CAS).

    Returns the receipt (valid only once the transaction commits).

    Raises:
        NotFoundError, ConflictError, AgentBusyError, InvalidStatusTransitionError: the
            write was refused; the statement that failed wrote nothing, but earlier
            statements of this barrier did: roll back to a savepoint or the transaction.
        sqlite3.Error: storage failures, for the caller to map.
    """
    commit = p.commit
    ex = commit.execution
    prefix, suffix = p.execution_params
    if p.updating:
        try:
            cur.execute(UPDATE_EXECUTION[ex.status], prefix + (now_ms,) + suffix)
        except sqlite3.IntegrityError:
            raise ConflictError(
                f"execution {ex.execution_id}: revision {ex.revision} is already in the barrier log",
                execution_id=ex.execution_id,
                revision=ex.revision,
            ) from None
        if cur.rowcount != 1:
            raise classify_update(cur, commit)
    else:
        if cur.execute("SELECT 1 FROM agents WHERE agent_id=?", (ex.agent_id,)).fetchone() is None:
            raise NotFoundError(
                f"agent {ex.agent_id} does not exist; create it before its executions",
                agent_id=ex.agent_id,
                execution_id=ex.execution_id,
            )
        try:
            cur.execute(INSERT_EXECUTION, prefix + (now_ms,) + suffix)
        except sqlite3.IntegrityError:
            raise classify_insert(cur, ex) from None
    if p.agent_params is not None:
        head, tail = p.agent_params
        cur.execute(UPDATE_AGENT, head + (now_ms,) + tail)
        if cur.rowcount != 1:
            raise classify_agent(cur, commit)
        if p.journal_rows:
            try:
                insert_journal(cur, p.journal_rows)
            except sqlite3.IntegrityError as exc:
                raise ConflictError(
                    f"journal append for agent {ex.agent_id} rejected: a record id is duplicated ({exc})",
                    agent_id=ex.agent_id,
                    execution_id=ex.execution_id,
                ) from None
    return CommitReceipt(ex.execution_id, ex.revision, p.sequences, committed_at)


def classify_insert(cur: sqlite3.Cursor, ex: ExecutionRecord) -> PhronomyError:
    """Why creating ``ex`` violated a constraint: duplicate id → ConflictError (checked
    first, reference §5.2), an active execution of the agent → AgentBusyError."""
    if cur.execute("SELECT 1 FROM executions WHERE execution_id=?", (ex.execution_id,)).fetchone():
        return ConflictError(
            f"execution {ex.execution_id} already exists",
            execution_id=ex.execution_id,
            agent_id=ex.agent_id,
        )
    row = cur.execute(
        "SELECT execution_id FROM executions WHERE exclusive_key=? AND active=1", (ex.agent_id,)
    ).fetchone()
    if row is not None:
        return AgentBusyError(
            f"agent {ex.agent_id} already has the active execution {row[0]}; "
            "wait for it, approve or resolve it, or cancel it",
            agent_id=ex.agent_id,
            execution_id=ex.execution_id,
            active_execution_id=row[0],
        )
    return ConflictError(
        f"execution {ex.execution_id}: revision {ex.revision} is already in the barrier log",
        execution_id=ex.execution_id,
    )


def classify_update(cur: sqlite3.Cursor, commit: BarrierCommit) -> PhronomyError:
    """Why the CAS update matched no row: missing → NotFoundError; other agent, or
    another revision → ConflictError; else the status change is forbidden →
    InvalidStatusTransitionError."""
    ex = commit.execution
    row = cur.execute(
        "SELECT revision, exclusive_key, status FROM executions WHERE execution_id=?",
        (ex.execution_id,),
    ).fetchone()
    if row is None:
        return NotFoundError(
            f"execution {ex.execution_id} does not exist", execution_id=ex.execution_id
        )
    revision, agent_id, status = row
    if agent_id != ex.agent_id:
        return ConflictError(
            f"execution {ex.execution_id} belongs to agent {agent_id}, not {ex.agent_id}",
            execution_id=ex.execution_id,
            stored_agent_id=agent_id,
        )
    if revision != commit.expected_revision:
        return ConflictError(
            f"execution {ex.execution_id} is at revision {revision}, not the expected "
            f"{commit.expected_revision}; reload it and decide again",
            execution_id=ex.execution_id,
            expected_revision=commit.expected_revision,
            stored_revision=revision,
        )
    return InvalidStatusTransitionError(
        f"execution {ex.execution_id}: stored status {status} cannot become {ex.status.value} "
        "(reference §2.2); nothing was written",
        execution_id=ex.execution_id,
        current=status,
        requested=ex.status.value,
    )


def classify_agent(cur: sqlite3.Cursor, commit: BarrierCommit) -> PhronomyError:
    """Why the agent-root CAS matched no row: NotFoundError or ConflictError (stored
    revision or journal head differ)."""
    agent = commit.agent
    assert agent is not None
    row = cur.execute(
        "SELECT revision, journal_head FROM agents WHERE agent_id=?", (agent.agent_id,)
    ).fetchone()
    if row is None:
        return NotFoundError(f"agent {agent.agent_id} does not exist", agent_id=agent.agent_id)
    revision, head = row
    expected_head = agent.journal_head - len(commit.journal)
    return ConflictError(
        f"agent {agent.agent_id} is at revision {revision} with journal head {head}, expected "
        f"revision {agent.revision - 1} and head {expected_head}; reload it and decide again",
        agent_id=agent.agent_id,
        expected_revision=agent.revision - 1,
        stored_revision=revision,
        expected_journal_head=expected_head,
        stored_journal_head=head,
    )


# ---------------------------------------------------------------- group commit

#: Allowed ``old>new`` status pairs (reference §2.2), for the multi-row update.
_ALLOWED_PAIRS = ",".join(
    f"'{old.value}>{new.value}'"
    for old, allowed in ALLOWED_STATUS_CHANGES.items()
    for new in sorted(allowed)
)


@functools.cache
def bulk_update_sql(rows: int) -> str:
    """One ``UPDATE ... FROM (VALUES ...)`` that applies ``rows`` plain barriers (each
    with the same CAS and status rule as :data:`UPDATE_EXECUTION`). Parameters: the
    commit time, then per row ``execution_id, revision, status, phase, body, barrier,
    digest, expected_revision, agent_id``. Only for barriers that leave the execution
    active (``active`` is not written; see :func:`_update_sql`)."""
    return (
        "UPDATE executions SET revision=v.column2, status=v.column3, state=v.column4,"
        " body=v.column5, updated_epoch_ms=?, last_barrier=v.column6,"
        f" last_digest=v.column7 FROM (VALUES {_values(9, rows)}) AS v"
        " WHERE executions.execution_id=v.column1 AND executions.revision=v.column8"
        " AND executions.exclusive_key=v.column9"
        f" AND (executions.status || '>' || v.column3) IN ({_ALLOWED_PAIRS})"
    )


@functools.cache
def bulk_agent_sql(rows: int) -> str:
    """One ``UPDATE ... FROM (VALUES ...)`` that applies ``rows`` agent-root
    compare-and-sets (as :data:`UPDATE_AGENT`). Parameters: the commit time, then per
    row ``agent_id, revision, lifecycle, journal_head, body, expected_revision,
    expected_journal_head``."""
    return (
        "UPDATE agents SET revision=v.column2, lifecycle=v.column3,"
        " journal_head=v.column4, body=v.column5, updated_epoch_ms=?"
        f" FROM (VALUES {_values(7, rows)}) AS v"
        " WHERE agents.agent_id=v.column1 AND agents.revision=v.column6"
        " AND agents.journal_head=v.column7"
    )


def _bulk_row(p: PreparedBarrier) -> tuple[Any, ...]:
    (revision, status, phase, body), (barrier, digest, execution_id, expected, agent) = (
        p.execution_params
    )
    return (execution_id, revision, status, phase, body, barrier, digest, expected, agent)


def _bulk_agent_row(p: PreparedBarrier) -> tuple[Any, ...]:
    assert p.agent_params is not None
    (revision, lifecycle, head, body), (agent_id, expected, base) = p.agent_params
    return (agent_id, revision, lifecycle, head, body, expected, base)


def _run_end(batch: list[PreparedBarrier], i: int) -> int:
    """The end of the run of barriers starting at ``i`` that can be applied together:
    updates that leave their execution active, each of a distinct execution and a
    distinct agent (so no statement of the run depends on another's effect)."""
    executions: set[str] = set()
    agents: set[str] = set()
    j = i
    while j < len(batch):
        q = batch[j]
        if type(q) is not PreparedBarrier:
            break
        ex = q.commit.execution
        if not (q.updating and ex.is_active):
            break
        if ex.execution_id in executions or ex.agent_id in agents:
            break
        executions.add(ex.execution_id)
        agents.add(ex.agent_id)
        j += 1
    return j


def _apply_run(cur: sqlite3.Cursor, run: list[PreparedBarrier], now_ms: int) -> bool:
    """Apply ``run`` with one statement per table (executions, agents, journal) inside
    the savepoint ``run``. Returns whether every barrier applied; if not, the savepoint
    has been rolled back and nothing of the run is written."""
    cur.execute("SAVEPOINT run")
    params: list[Any] = [now_ms]
    for q in run:
        params.extend(_bulk_row(q))
    cur.execute(bulk_update_sql(len(run)), params)
    applied = cur.rowcount == len(run)
    rooted = [q for q in run if q.agent_params is not None]
    if applied and rooted:
        params = [now_ms]
        for q in rooted:
            params.extend(_bulk_agent_row(q))
        cur.execute(bulk_agent_sql(len(rooted)), params)
        applied = cur.rowcount == len(rooted)
    rows = [row for q in rooted for row in q.journal_rows]
    if applied and rows:
        try:
            insert_journal(cur, rows)
        except sqlite3.IntegrityError:
            applied = False
    if not applied:
        cur.execute("ROLLBACK TO run")
    cur.execute("RELEASE run")
    return applied


def apply_batch(
    cur: sqlite3.Cursor,
    batch: list[PreparedBarrier],
    now_ms: int,
    committed_at: datetime,
    hook: Any,
) -> tuple[list[Any], list[int]]:
    """Apply a group-commit batch, in order, inside the open transaction.

    Runs of barriers that leave their execution active (distinct executions and
    agents, see :func:`_run_end`) are applied optimistically, one multi-row statement
    per table — the executions, the agent roots, the journal records — inside a
    savepoint: a handful of SQLite calls for the whole run instead of several per
    barrier, each of which gives up and must win back the GIL (measured: with 64 busy
    agents the writer waited about 220 µs per barrier for it). If any of them is
    refused, the savepoint is rolled back and the run replayed one barrier at a time
    to find who failed. Other barriers run one by one, a multi-statement barrier
    inside its own savepoint, so a refused barrier fails only itself. ``hook`` (the
    fault seam) disables the multi-row path.

    Returns:
        ``(results, ok)``: per barrier a CommitReceipt or the typed refusal, and the
        indexes of the receipts (valid once the transaction commits).

    Raises:
        sqlite3.Error and anything ``hook`` raises: the whole batch must be rolled back.
    """
    results: list[Any] = [None] * len(batch)
    ok: list[int] = []
    i = 0
    count = len(batch)
    while i < count:
        j = _run_end(batch, i) if hook is None else i
        if j - i > 1 and _apply_run(cur, batch[i:j], now_ms):
            for k in range(i, j):
                q = batch[k]
                ex = q.commit.execution
                results[k] = CommitReceipt(ex.execution_id, ex.revision, q.sequences, committed_at)
                ok.append(k)
            i = j
            continue
        j = max(j, i + 1)
        for k in range(i, j):
            p = batch[k]
            # a barrier with an agent root (and journal), or an engine commit, is
            # several statements: it needs a savepoint; one statement is atomic alone
            durable = type(p) is not PreparedBarrier
            savepoint = durable or p.agent_params is not None
            if savepoint:
                cur.execute("SAVEPOINT barrier")
            try:
                if hook is not None:
                    hook("write", (p.commit,))
                if durable:
                    results[k] = apply_durable(cur, p, now_ms, committed_at)  # type: ignore[arg-type]
                else:
                    results[k] = apply_barrier(cur, p, now_ms, committed_at)
                ok.append(k)
            except PhronomyError as exc:
                if savepoint:
                    cur.execute("ROLLBACK TO barrier")
                results[k] = exc
            if savepoint:
                cur.execute("RELEASE barrier")
        i = j
    return results, ok
