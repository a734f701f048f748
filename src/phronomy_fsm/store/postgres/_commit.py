"""One engine commit on PostgreSQL: the statements of a
:class:`~phronomy_fsm.durable.records.DurableCommit` inside an open transaction, and
the classification of a refusal into the store taxonomy.

The execution's compare-and-set and its barrier-log row are **one statement** (a
data-modifying CTE): the UPDATE matches only the expected revision, machine, an active
row, and — with a fence — the owner, the fencing token and an owner's lease still
valid on the server's clock; the INSERT into ``barriers`` takes the updated row. A
refused compare-and-set therefore writes nothing and raises no SQL error; the row is
then read (in the same transaction) to say why. Later parts (consumed signals,
children, signals sent, journal) run after it; the caller wraps a commit that shares
its transaction with others in a savepoint, so a refusal there undoes only it.

It never begins, commits or rolls back (the store's group commit does), and it takes
no inbox lock: the transaction takes those first (:func:`lock_inboxes`, whose comment
holds the lock-order argument). The same fence check guards an owner's writes that are
not commits (:func:`check_fence`: closing signals). Semantics: ``docs/semantics.md``
("Commits", "Leases and fencing").
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

from phronomy_fsm.durable.codec import datetime_to_epoch_ms, epoch_ms_to_datetime
from phronomy_fsm.durable.records import (
    DurableCommit,
    DurableReceipt,
    ExecutionRecord,
    Fence,
    SignalKind,
    SignalRecord,
    from_json,
    to_json,
)
from phronomy_fsm.errors import (
    AgentBusyError,
    ConflictError,
    LeaseLostError,
    PhronomyError,
)
from phronomy_fsm.store.postgres.schema import INBOX_LOCK_SEED, NOW_MS
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

_LEASE_OK = (
    "EXISTS (SELECT 1 FROM workers w WHERE w.worker_id = %(worker)s"
    f" AND w.lease_expires_epoch_ms >= {NOW_MS})"
)
_LOG_COLUMNS = (
    "execution_id, revision, last_barrier, updated_epoch_ms, last_digest, status, state,"
    " owner_id, fence, body"
)
#: The barrier-log row of the commit, with the record it wrote while the store keeps
#: commit bodies (``phronomy_meta.keep_commit_bodies``;
#: ``docs/store.md``, "Kept commits").
_LOG_INSERT = (
    "INSERT INTO barriers(execution_id, revision, barrier, committed_epoch_ms, digest, status,"
    " state, worker_id, fence, body) SELECT execution_id, revision, last_barrier,"
    " updated_epoch_ms, last_digest, status, state, owner_id, fence, CASE WHEN EXISTS"
    " (SELECT 1 FROM phronomy_meta WHERE key = 'keep_commit_bodies' AND value = 'on')"
    " THEN body END FROM c RETURNING committed_epoch_ms"
)

INSERT_EXECUTION = (
    "WITH c AS (INSERT INTO executions(execution_id, machine, exclusive_key,"
    " parent_execution_id, revision, status, state, active, spec_sha256, body,"
    " created_epoch_ms, updated_epoch_ms, deadline_epoch_ms, owner_id, fence, last_barrier,"
    " last_digest) SELECT %(id)s, %(machine)s, %(key)s, %(parent)s, %(revision)s, %(status)s,"
    f" %(state)s, %(active)s, %(sha)s, %(body)s, %(created)s, {NOW_MS}, %(deadline)s,"
    " %(worker)s, %(fence)s, %(barrier)s, %(digest)s {where}"
    f" ON CONFLICT DO NOTHING RETURNING {_LOG_COLUMNS}) {_LOG_INSERT}"
)

UPDATE_EXECUTION = (
    "WITH c AS (UPDATE executions SET revision = %(revision)s, status = %(status)s,"
    " state = %(state)s, active = %(active)s, body = %(body)s, spec_sha256 = %(sha)s,"
    f" updated_epoch_ms = {NOW_MS}, deadline_epoch_ms = %(deadline)s,"
    " last_barrier = %(barrier)s, last_digest = %(digest)s"
    " WHERE execution_id = %(id)s AND revision = %(expected)s AND machine = %(machine)s"
    f" AND active {{fenced}} RETURNING {_LOG_COLUMNS}) {_LOG_INSERT}"
)
_FENCED = f"AND owner_id = %(worker)s AND fence = %(fence)s AND {_LEASE_OK}"

INSERT_SIGNAL = (
    "INSERT INTO signals(signal_id, execution_id, kind, event, body, created_epoch_ms)"
    f" VALUES (%s, %s, %s, %s, %s, {NOW_MS}) ON CONFLICT (signal_id) DO NOTHING RETURNING seq"
)

# Lock order. Every transaction that adds signals — a sender (send_signal) or a group
# commit whose commits send signals — takes the inbox lock of each execution it signals
# as its very first locks: a transaction-scoped advisory lock keyed on
# hashtextextended(execution_id, INBOX_LOCK_SEED), all of them in one statement, in
# ascending key order. Only then does it touch a table (reads, the execution FOR SHARE,
# the rows it updates, inserts or consumes). No transaction takes an inbox lock after
# any other lock (the only other advisory lock, the migration's, is likewise taken first
# by transactions that take no inbox lock). Hence a transaction waiting for an inbox
# lock holds nothing but inbox locks with smaller keys, and a transaction holding a row
# or table lock never waits for an inbox lock: a chain of waits that enters the inbox
# locks climbs through strictly larger keys, or leaves them for row and table waits and
# never comes back, so it cannot close into a cycle: senders and batches cannot
# deadlock. (Taking the lock after a row is what deadlocked them before commit fec4c90:
# a sender held an execution's row FOR SHARE and waited for the signal lock, which a
# batch held while it waited to update that row; tests/engine_port/
# test_postgres_lock_order.py.) Senders to different executions take
# different keys and never wait on each other; senders to one execution queue on its
# key, so its signals commit in the order of their sequence numbers (its inbox order).
# Two ids whose 64-bit hashes collide merely share a queue.
LOCK_INBOXES = (
    "SELECT count(pg_advisory_xact_lock(k)) FROM (SELECT DISTINCT"
    " hashtextextended(id, %s) AS k FROM unnest(%s::text[]) AS ids(id) ORDER BY k) AS keys"
)


def lock_inboxes(cur: Any, execution_ids: Iterable[str]) -> None:
    """Take the inbox locks of ``execution_ids`` in the transaction open on ``cur``, in
    ascending key order (the lock order above); call it before the transaction takes
    any other lock (before its first statement on a table). The locks are released
    when the transaction ends.

    Raises:
        psycopg.Error: for the caller to map (``LockNotAvailable`` once a wait passes
            the transaction's ``lock_timeout``).
    """
    ids = sorted(set(execution_ids))
    if ids:
        # the sorted subquery is not flattened (DISTINCT, ORDER BY): the aggregate
        # takes the locks row by row in key order
        cur.execute(LOCK_INBOXES, (INBOX_LOCK_SEED, ids))


def signal_targets(commits: Iterable[PreparedCommit]) -> set[str]:
    """The executions the signals of ``commits`` go to (whose inbox locks a
    transaction applying them takes first)."""
    return {signal.execution_id for p in commits for signal, _ in p.signals}


#: Notification channels (``LISTEN``): a signal was added (payload: execution id), or
#: an execution became runnable by any worker (payload: machine).
SIGNALS_CHANNEL = "phronomy_signals"
WORK_CHANNEL = "phronomy_work"


def _epoch(value: Any) -> int | None:
    return None if value is None else datetime_to_epoch_ms(value)


class PreparedCommit:
    """A :class:`DurableCommit` with every body encoded, built before the transaction.

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

    @property
    def simple(self) -> bool:
        """True when the commit is one statement (nothing to undo after it)."""
        c = self.commit
        return not (
            c.consume_signals
            or c.children
            or c.send_signals
            or c.journal
            or finishes(c)
            or ends_unless_cancelled(c)
        )


def _execution_params(
    ex: ExecutionRecord, body: str, barrier: str, worker: str | None, fence: int
) -> dict[str, Any]:
    return {
        "id": ex.execution_id,
        "machine": ex.machine,
        "key": ex.exclusive_key,
        "parent": ex.parent_execution_id,
        "revision": ex.revision,
        "status": ex.status.value,
        "state": ex.state,
        "active": ex.is_active,
        "sha": ex.spec_sha256,
        "body": body,
        "created": datetime_to_epoch_ms(ex.created_at),
        "deadline": _epoch(ex.deadline_at),
        "worker": worker,
        "fence": fence,
        "barrier": barrier,
        "digest": hashlib.sha256(body.encode("utf-8")).hexdigest(),
    }


def apply_commit(cur: Any, p: PreparedCommit) -> tuple[DurableReceipt, list[str]]:
    """Run ``p``'s statements in the transaction open on ``cur``.

    Returns:
        The receipt (valid once the transaction commits) and the notifications to
        send with the transaction (``[(channel, payload)]`` flattened as
        ``"channel\\0payload"`` strings).

    Raises:
        NotFoundError, ConflictError, LeaseLostError, AgentBusyError,
        ExecutionFinishedError: refused; later statements of this commit may have run
            (the caller rolls back to its savepoint, or the whole transaction).
        psycopg.Error: storage failures, for the caller to map.
    """
    commit = p.commit
    ex = commit.execution
    fence = commit.fence
    notes: list[str] = []
    if commit.expected_revision is None:
        params = _execution_params(
            ex,
            p.body,
            commit.barrier,
            None if fence is None else fence.worker_id,
            0 if fence is None else fence.token,
        )
        sql = INSERT_EXECUTION.format(where="" if fence is None else f"WHERE {_LEASE_OK}")
        cur.execute(sql, params)
        row = cur.fetchone()
        if row is None:
            raise _classify_insert(cur, ex, fence is not None)
        if fence is None:
            notes.append(f"{WORK_CHANNEL}\0{ex.machine}")
    else:
        params = _execution_params(
            ex,
            p.body,
            commit.barrier,
            None if fence is None else fence.worker_id,
            0 if fence is None else fence.token,
        )
        params["expected"] = commit.expected_revision
        cur.execute(UPDATE_EXECUTION.format(fenced=_FENCED if fence is not None else ""), params)
        row = cur.fetchone()
        if row is None:
            raise _classify_update(cur, commit)
        if ends_unless_cancelled(commit):
            # the UPDATE holds the execution's row: a cancel sent meanwhile (its insert
            # reads the row FOR SHARE) is either committed and seen here, or waits and
            # then finds the execution finished
            cur.execute(
                "SELECT seq FROM signals WHERE execution_id = %s AND kind = %s"
                " AND consumed_revision IS NULL ORDER BY seq",
                (ex.execution_id, SignalKind.CANCEL.value),
            )
            taken = set(commit.consume_signals)
            pending = [int(seq) for (seq,) in cur.fetchall() if int(seq) not in taken]
            if pending:
                raise cancel_pending_error(ex.execution_id, pending)
    committed_ms = int(row[0])
    if commit.consume_signals:
        seqs = sorted(set(commit.consume_signals))
        cur.execute(
            "UPDATE signals SET consumed_revision = %s, outcome = %s WHERE execution_id = %s"
            " AND consumed_revision IS NULL AND seq = ANY(%s)",
            (ex.revision, commit.consume_outcome, ex.execution_id, seqs),
        )
        if cur.rowcount != len(seqs):
            raise ConflictError(
                f"execution {ex.execution_id}: signals {seqs} are not all pending any more "
                "(consumed by another commit?); reload and decide again",
                execution_id=ex.execution_id,
            )
    if finishes(commit):  # nothing reads a finished execution's inbox again
        cur.execute(
            "UPDATE signals SET consumed_revision = %s, outcome = %s WHERE execution_id = %s"
            " AND consumed_revision IS NULL",
            (ex.revision, finished_outcome(ex.state), ex.execution_id),
        )
    for child, body in p.children:
        params = _execution_params(
            child,
            body,
            "@start",
            None if fence is None else fence.worker_id,
            1 if fence is not None else 0,
        )
        cur.execute(INSERT_EXECUTION.format(where=""), params)
        if cur.fetchone() is None:
            raise _classify_insert(cur, child, False)
        if fence is None:
            notes.append(f"{WORK_CHANNEL}\0{child.machine}")
    seqs_out: list[int] = []
    for signal, body in p.signals:
        cur.execute(
            INSERT_SIGNAL,
            (signal.signal_id, signal.execution_id, signal.kind.value, signal.event, body),
        )
        got = cur.fetchone()
        if got is None:
            cur.execute("SELECT body FROM signals WHERE signal_id = %s", (signal.signal_id,))
            row = cur.fetchone()
            stored = None if row is None else from_json(SignalRecord, row[0])
            raise signal_sent_already_error(stored, signal)
        seqs_out.append(int(got[0]))
        notes.append(f"{SIGNALS_CHANNEL}\0{signal.execution_id}")
    if p.journal:
        columns = list(zip(*p.journal))
        cur.execute(
            "INSERT INTO execution_journal(execution_id, revision, position, kind, body)"
            " SELECT * FROM unnest(%s::text[], %s::bigint[], %s::int[], %s::text[], %s::text[])",
            [list(c) for c in columns],
        )
    receipt = DurableReceipt(
        ex.execution_id, ex.revision, tuple(seqs_out), epoch_ms_to_datetime(committed_ms)
    )
    return receipt, notes


def check_fence(cur: Any, execution_id: str, fence: Fence) -> int:
    """Check, in the transaction open on ``cur``, that ``fence`` still holds
    ``execution_id`` — the stored owner and fencing token are the fence's and the
    owner's lease has not passed (server time): the fence check of a commit
    (``_FENCED``), for an owner's write that is not a commit (closing signals) — and
    hold the execution's row ``FOR SHARE`` until the transaction ends, so no claim
    moves the token before the write commits. Returns the execution's revision.

    Raises:
        NotFoundError: no such execution.
        LeaseLostError: another owner or token, or the lease has passed (nothing may
            be written).
        psycopg.Error: for the caller to map.
    """
    cur.execute(
        f"SELECT revision FROM executions WHERE execution_id = %(id)s {_FENCED} FOR SHARE",
        {"id": execution_id, "worker": fence.worker_id, "fence": fence.token},
    )
    row = cur.fetchone()
    if row is None:
        cur.execute(
            f"SELECT {FENCE_COLUMNS} FROM executions WHERE execution_id = %s", (execution_id,)
        )
        raise inbox_write_refusal(execution_id, fence, cur.fetchone())
    return int(row[0])


def _classify_insert(cur: Any, ex: ExecutionRecord, fenced: bool) -> PhronomyError:
    """Why inserting ``ex`` wrote nothing: a duplicate id, another active execution
    with its exclusive key, or (fenced) the worker's lease has passed."""
    cur.execute("SELECT 1 FROM executions WHERE execution_id = %s", (ex.execution_id,))
    if cur.fetchone() is not None:
        return ConflictError(
            f"execution {ex.execution_id} already exists", execution_id=ex.execution_id
        )
    if ex.exclusive_key is not None:
        cur.execute(
            "SELECT execution_id FROM executions WHERE exclusive_key = %s AND active",
            (ex.exclusive_key,),
        )
        row = cur.fetchone()
        if row is not None:
            return AgentBusyError(
                f"exclusive key {ex.exclusive_key!r} already has the active execution {row[0]}; "
                "wait for it to finish or cancel it",
                exclusive_key=ex.exclusive_key,
                execution_id=ex.execution_id,
                active_execution_id=row[0],
            )
    if fenced:
        return LeaseLostError(
            f"execution {ex.execution_id} not created: this worker's lease has expired; "
            "renew it (restart the runtime)",
            execution_id=ex.execution_id,
        )
    return ConflictError(
        f"execution {ex.execution_id}: it was created concurrently; reload it",
        execution_id=ex.execution_id,
    )


def _classify_update(cur: Any, commit: DurableCommit) -> PhronomyError:
    """Why the compare-and-set matched no row (:func:`~phronomy_fsm.store.refusals.update_refusal`
    of the execution's row read back)."""
    cur.execute(
        f"SELECT {REFUSAL_COLUMNS} FROM executions WHERE execution_id = %s",
        (commit.execution.execution_id,),
    )
    return update_refusal(commit, cur.fetchone())


__all__ = [
    "INSERT_SIGNAL",
    "LOCK_INBOXES",
    "SIGNALS_CHANNEL",
    "WORK_CHANNEL",
    "PreparedCommit",
    "apply_commit",
    "check_fence",
    "lock_inboxes",
    "signal_targets",
]
