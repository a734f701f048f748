"""Group commit: batching, one outcome per commit, and no "committed" before the
COMMIT statement returned."""

from __future__ import annotations

import threading
from concurrent.futures import CancelledError
from typing import Any

import pytest

from phronomy_fsm.durable.records import DurableCommit, ExecutionStatus, Fence, WorkerRecord
from phronomy_fsm.errors import ConflictError, OutcomeUnknownError, StorageError
from phronomy_fsm.store import FaultInjectingStore, FaultKind
from phronomy_fsm.store._files import MARK_QUERY
from phronomy_fsm.table import NOT_COMMITTED

from .helpers import T0, admit, create, finish, journal, new_execution, signal, step


def _executions(store: Any, count: int) -> list[Any]:
    return [admit(store, f"ex-{i}", f"key-{i}") for i in range(count)]


def _full_batch_store(store_factory: Any, size: int, **options: Any) -> Any:
    """A store whose writer flushes only full batches of ``size`` (or on close)."""
    return store_factory(group_max_batch=size, group_window_seconds=30.0, **options)


def _outcomes(futures: list[Any]) -> list[Any]:
    out: list[Any] = []
    for future in futures:
        try:
            out.append(future.result(timeout=60).revision)
        except Exception as exc:  # noqa: BLE001 - the test compares the error types
            out.append(type(exc).__name__)
    return out


def test_64_threads_each_get_their_own_outcome(store_factory):
    store = store_factory()
    executions = _executions(store, 64)
    per_thread = 15
    gate = threading.Barrier(64)
    outcomes: dict[str, list[Any]] = {}
    errors: list[BaseException] = []

    def drive(ex: Any) -> None:
        gate.wait()
        mine = outcomes.setdefault(ex.execution_id, [])
        try:
            for _ in range(per_thread):
                commit = step(ex)
                receipt = store.submit(commit).result(timeout=60)
                mine.append((receipt.execution_id, receipt.revision))
                ex = commit.execution
            # a stale commit of this thread fails for this thread only
            stale = store.submit(DurableCommit("b", commit.execution, commit.expected_revision))
            with pytest.raises(ConflictError):
                stale.result(timeout=60)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    batches_before = store._group.batches
    threads = [threading.Thread(target=drive, args=(ex,)) for ex in executions]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    for ex in executions:
        assert outcomes[ex.execution_id] == [(ex.execution_id, r) for r in range(1, per_thread + 1)]
        assert store.load_record(ex.execution_id).revision == per_thread
        assert [b.revision for b in store.barrier_log(ex.execution_id)] == list(
            range(per_thread + 1)
        )
    flushed = store._group.batches - batches_before
    assert flushed < 64 * (per_thread + 1)  # commits really shared transactions


def test_one_conflict_in_a_batch_fails_only_itself(store_factory):
    store = _full_batch_store(store_factory, 8)
    executions = _executions(store, 8)
    direct = step(executions[3], state="moved_on")
    store.commit(direct)  # outside the batch: execution 3 is now at revision 1
    commits = [step(ex) for ex in executions]  # commits[3] still expects revision 0
    batches_before = store._group.batches
    futures = [store.submit(c) for c in commits]
    assert _outcomes(futures) == [1, 1, 1, "ConflictError", 1, 1, 1, 1]
    assert store._group.batches == batches_before + 1  # all eight in one transaction
    for i, c in enumerate(commits):
        expected = direct.execution if i == 3 else c.execution
        assert store.load_record(c.execution.execution_id) == expected


def test_a_refused_commit_with_several_statements_leaves_nothing_of_it(store_factory):
    """A commit that moves its execution, adds journal entries and consumes a signal
    that is no longer pending is refused whole (its savepoint is rolled back), while
    the commits around it in the batch are written."""
    store = _full_batch_store(store_factory, 3)
    a, b, c = _executions(store, 3)
    sent = store.send_signal(signal(b.execution_id, "s-1"))
    store.register_worker(WorkerRecord("w", "host", 1, "w", T0, T0, T0), 60)
    owner = Fence("w", store.claim_execution(b.execution_id, "w"))
    store.close_signals(b.execution_id, [sent.seq], "dropped: test", fence=owner)
    commits = [
        step(a, journal=journal(2)),
        step(b, journal=journal(2), consume_signals=(sent.seq,)),
        step(c, journal=journal(1), send_signals=(signal(a.execution_id, "s-2"),)),
    ]
    assert _outcomes([store.submit(x) for x in commits]) == [1, "ConflictError", 1]
    assert store.load_record(b.execution_id) == b
    assert store.journal_entries(b.execution_id) == []
    assert len(store.barrier_log(b.execution_id)) == 1
    assert len(store.journal_entries(a.execution_id)) == 2
    assert [s.signal_id for s in store.pending_signals(a.execution_id)] == ["s-2"]


def test_a_failing_commit_gives_every_caller_of_the_batch_outcome_unknown(store_factory):
    inner = _full_batch_store(store_factory, 6)
    executions = _executions(inner, 6)
    faulty = FaultInjectingStore(inner)
    commits = [step(ex) for ex in executions]
    faulty.add(FaultKind.COMMIT_FAILS, predicate=lambda c: c is commits[2])
    futures = [faulty.submit(c) for c in commits]
    for c, f in zip(commits, futures):
        with pytest.raises(OutcomeUnknownError) as info:
            f.result(timeout=60)
        assert info.value.intended is c
        assert faulty.reconcile(c) == NOT_COMMITTED
        assert faulty.load_record(c.execution.execution_id).revision == 0


def test_no_future_resolves_before_the_commit_statement(store_factory):
    store = _full_batch_store(store_factory, 5)
    commits = [step(ex) for ex in _executions(store, 5)]
    futures: list[Any] = []
    seen: list[tuple[str, list[bool]]] = []

    def hook(point: str, batch: tuple[Any, ...]) -> None:
        if point in ("commit", "committed") and len(batch) == 5:
            seen.append((point, [f.done() for f in futures]))

    store.install_fault_hook(hook)
    futures.extend(store.submit(c) for c in commits)
    assert [f.result(timeout=60).revision for f in futures] == [1] * 5
    assert seen == [("commit", [False] * 5), ("committed", [False] * 5)]


def test_a_storage_failure_in_a_batch_fails_all_of_it_without_writing(store_factory):
    inner = _full_batch_store(store_factory, 4)
    executions = _executions(inner, 4)
    faulty = FaultInjectingStore(inner)
    commits = [step(ex) for ex in executions]
    faulty.add(FaultKind.IO_ERROR, predicate=lambda c: c is commits[1])
    for f in [faulty.submit(c) for c in commits]:
        with pytest.raises(StorageError) as info:
            f.result(timeout=60)
        assert not isinstance(info.value, (OutcomeUnknownError, ConflictError))
    assert all(faulty.load_record(ex.execution_id).revision == 0 for ex in executions)


def test_cancelled_before_pickup_is_never_written_and_close_flushes(store_factory):
    store = store_factory(group_max_batch=64, group_window_seconds=30.0)
    a, b = _executions(store, 2)
    keep = store.submit(step(a))
    drop = store.submit(step(b))
    assert drop.cancel()  # the writer is still waiting for the batch to fill
    store.close()  # wakes the writer: flushes what is queued, then stops
    assert keep.result(timeout=60).revision == 1
    with pytest.raises(CancelledError):
        drop.result()
    reopened = store_factory()
    assert reopened.load_record(a.execution_id).revision == 1
    assert reopened.load_record(b.execution_id).revision == 0


def test_a_serialization_error_comes_back_in_the_future(store_factory):
    store = store_factory()
    (ex,) = _executions(store, 1)
    with pytest.raises(Exception) as info:
        store.submit(step(ex, context={"bad": {1, 2}})).result(timeout=10)
    assert type(info.value).__name__ == "SerializationError"
    assert store.load_record(ex.execution_id).revision == 0


def test_creates_in_one_batch_for_one_key_give_exactly_one_winner(store_factory):
    store = _full_batch_store(store_factory, 3)
    creates = [create(f"ex-{i}", exclusive_key="solo") for i in range(3)]
    assert _outcomes([store.submit(c) for c in creates]) == [0, "AgentBusyError", "AgentBusyError"]
    assert [e.execution_id for e in store.list_records(exclusive_key="solo", active=True)] == [
        "ex-0"
    ]


def test_a_mixed_batch_keeps_submission_order(store_factory):
    """Plain updates, a final commit with journal entries that frees an exclusive key,
    and a creation that needs that key, in one batch: applied in submission order, so
    the creation after the final commit wins and a commit chained on an earlier one of
    the same batch sees it."""
    store = _full_batch_store(store_factory, 6)
    first = admit(store, "ex-first", "solo")
    others = _executions(store, 2)
    commits = [
        step(others[0]),
        step(others[1]),
        finish(first, ExecutionStatus.CANCELLED),
        create("ex-second", exclusive_key="solo"),
        step(step(others[0]).execution),  # chained on the first commit of this batch
        step(others[1], state="late"),  # also based on revision 0 of others[1]: stale
    ]
    assert _outcomes([store.submit(c) for c in commits]) == [1, 1, 1, 0, 2, "ConflictError"]
    assert [e.execution_id for e in store.list_records(exclusive_key="solo", active=True)] == [
        "ex-second"
    ]
    assert store.load_record("ex-first").status is ExecutionStatus.CANCELLED
    assert len(store.journal_entries("ex-first")) == 1


def _kinds(statements: list[str]) -> list[str]:
    """The distinct statement kinds, in order (the trace repeats a statement for its
    trigger steps). The commit mark's read after each COMMIT (``store/_files.py``;
    tests/store/test_commit_mark.py) is left out: it is outside the transaction."""

    def kind(sql: str) -> str:
        words = sql.replace("(", " ").split()
        return " ".join(words[:3] if words[0] == "INSERT" else words[:2])

    return list(dict.fromkeys(kind(sql) for sql in statements if sql != MARK_QUERY))


def test_a_batch_of_plain_moves_is_one_statement_and_its_own_transaction(store_factory):
    """Commits that only move their own execution are committed by one multi-row
    UPDATE run outside any transaction (SQLite commits it by itself: BEGIN, the
    statement and COMMIT in one call); a batch with a commit of several statements
    takes the transaction path, that commit in a savepoint of its own and the other
    commits in one multi-row UPDATE inside a savepoint."""
    store = _full_batch_store(store_factory, 4)
    executions = _executions(store, 4)
    statements: list[str] = []
    store._writer.set_trace_callback(statements.append)
    plain = [f.result(timeout=60) for f in [store.submit(step(ex)) for ex in executions]]
    assert [r.revision for r in plain] == [1] * 4
    assert _kinds(statements) == ["UPDATE executions"]
    assert not store._writer.in_transaction
    statements.clear()
    moved = [store.load_record(ex.execution_id) for ex in executions]
    commits = [step(moved[0], journal=journal(1)), *(step(ex) for ex in moved[1:])]
    receipts = [f.result(timeout=60) for f in [store.submit(c) for c in commits]]
    assert [r.revision for r in receipts] == [2] * 4
    assert _kinds(statements) == [
        "BEGIN IMMEDIATE",
        "SELECT value",  # the schema version is still this code's (docs/store.md "Schema")
        "SAVEPOINT barrier",
        "UPDATE executions",
        "INSERT INTO execution_journal",
        "RELEASE barrier",
        "SAVEPOINT run",
        "RELEASE run",
        "COMMIT",
    ]
    assert len(store.journal_entries(moved[0].execution_id)) == 1
    assert all(store.barrier_log(ex.execution_id)[-1].revision == 2 for ex in executions)


def test_a_refused_move_writes_nothing_of_the_statement_then_fails_alone(store_factory):
    """A stale commit or a missing execution makes the one statement write nothing
    (the refused row aborts it; a missing one matches none); the batch is then applied
    commit by commit in one transaction, and only the refused commits fail."""
    store = _full_batch_store(store_factory, 4)
    a, b, c = _executions(store, 3)
    store.commit(step(b, state="moved_on"))  # b is now at revision 1
    statements: list[str] = []
    store._writer.set_trace_callback(statements.append)
    ghost = step(new_execution("ghost"))  # never created
    outcomes = _outcomes([store.submit(x) for x in (step(a), step(b), ghost, step(c))])
    assert outcomes == [1, "ConflictError", "NotFoundError", 1]
    assert _kinds(statements) == [
        "UPDATE executions",  # the one statement, refused whole
        "BEGIN IMMEDIATE",
        "SELECT value",  # the schema version
        "SELECT revision,",  # why each refused compare-and-set failed
        "COMMIT",
    ]
    assert "SAVEPOINT run" not in statements
    assert [len(store.barrier_log(x.execution_id)) for x in (a, b, c)] == [2, 2, 2]
    assert store.load_record(b.execution_id).state == "moved_on"


def test_one_statement_failures_are_typed_for_every_commit_of_it(store_factory, monkeypatch):
    """On the one-statement path a busy database writes nothing (StorageError,
    busy); any other failure may have happened after the statement's COMMIT, so every
    commit of the batch gets OutcomeUnknownError and the writer connection is
    replaced."""
    import sqlite3

    from phronomy_fsm.store import sqlite as sqlite_module

    store = _full_batch_store(store_factory, 2, busy_timeout_seconds=0.05)
    executions = _executions(store, 2)
    holder = sqlite3.connect(store.path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        futures = [store.submit(step(ex)) for ex in executions]
        for f in futures:
            with pytest.raises(StorageError) as info:
                f.result(timeout=60)
            assert info.value.busy and not isinstance(info.value, OutcomeUnknownError)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert [store.load_record(ex.execution_id).revision for ex in executions] == [0, 0]

    def io_error(*_: Any) -> bool:
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(sqlite_module, "apply_run_autocommit", io_error)
    writer = store._writer
    commits = [step(ex) for ex in executions]
    for c, f in zip(commits, [store.submit(c) for c in commits]):
        with pytest.raises(OutcomeUnknownError) as unknown:
            f.result(timeout=60)
        assert unknown.value.intended is c
        assert store.reconcile(c) == NOT_COMMITTED
    assert store._writer is not writer


def test_fenced_commits_in_one_batch_are_checked_one_by_one(store_factory):
    """In a multi-row run each commit keeps its own fence check: the one whose token
    moved on fails alone with LeaseLostError; once the worker's lease has passed,
    every commit it makes is refused and nothing is written."""
    from phronomy_fsm.durable.records import Fence, WorkerRecord

    store = _full_batch_store(store_factory, 4)
    store.register_worker(WorkerRecord("w1", "h", 1, "w1", T0, T0, T0), 600)
    fence = Fence("w1", 1)
    for i in range(4):
        store.commit(create(f"f-{i}", fence=fence))
    current = [store.load_record(f"f-{i}") for i in range(4)]
    assert store.claim_execution("f-2", "w1") == 2  # its token moved on
    futures = [store.submit(step(ex, fence=fence)) for ex in current]
    assert _outcomes(futures) == [1, 1, "LeaseLostError", 1]
    assert store.load_record("f-2") == current[2]
    store.retire_worker("w1")
    moved = [store.load_record(f"f-{i}") for i in range(4)]
    fences = [fence, fence, Fence("w1", 2), fence]
    futures = [store.submit(step(ex, fence=f)) for ex, f in zip(moved, fences)]
    assert _outcomes(futures) == ["LeaseLostError"] * 4
    assert [store.load_record(ex.execution_id) for ex in moved] == moved


@pytest.mark.parametrize("size", [0, 1001])
def test_a_batch_size_out_of_range_is_refused_up_front(store_factory, size):
    with pytest.raises(ValueError, match="group_max_batch must be between 1 and 1000"):
        store_factory(group_max_batch=size)


def test_the_largest_batch_commits_in_one_transaction(store_factory):
    store = _full_batch_store(store_factory, 1000)
    executions = [admit(store, f"ex-{i}") for i in range(1000)]
    batches = store._group.batches
    futures = [store.submit(step(ex)) for ex in executions]
    assert {f.result(timeout=120).revision for f in futures} == {1}
    assert store._group.batches == batches + 1


def test_a_fault_plan_sees_each_commits_during_point_before_the_one_statement(store_factory):
    """The crash harness's plans run on the one-statement path too: every commit's
    ``barrier:<name>:during`` is hit before the statement (a kill there leaves nothing
    written, as inside the transaction of the other path)."""
    from phronomy_fsm.runtime.faults import FaultPlan

    reached: list[str] = []
    store = _full_batch_store(store_factory, 3, faults=FaultPlan(None, trace=reached.append))
    executions = _executions(store, 3)
    reached.clear()
    statements: list[str] = []
    store._writer.set_trace_callback(statements.append)
    commits = [step(ex, barrier=f"b{i}") for i, ex in enumerate(executions)]
    assert _outcomes([store.submit(c) for c in commits]) == [1, 1, 1]
    assert reached == ["barrier:b0:during", "barrier:b1:during", "barrier:b2:during"]
    assert _kinds(statements) == ["UPDATE executions"]
