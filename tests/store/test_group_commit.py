"""Group commit (issue 4 item 8): batching, per-barrier outcomes, and no "committed"
before the COMMIT returned."""

from __future__ import annotations

import threading
from concurrent.futures import CancelledError
from typing import Any

import pytest

from phronomy_fsm.errors import ConflictError, OutcomeUnknownError, StorageError
from phronomy_fsm.store import NOT_COMMITTED, BarrierCommit, FaultInjectingStore, FaultKind

from .helpers import admission, new_execution, step


def _agents(store: Any, count: int) -> list[Any]:
    return [admission(store, f"agent-{i}", f"ex-{i}")[1] for i in range(count)]


def test_64_threads_each_get_their_own_outcome(store_factory):
    store = store_factory()
    executions = _agents(store, 64)
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
            # a stale barrier of this thread fails for this thread only
            stale = store.submit(
                BarrierCommit("provider_barrier", commit.execution, commit.expected_revision)
            )
            with pytest.raises(ConflictError):
                stale.result(timeout=60)
        except BaseException as exc:  # noqa: BLE001 - nothing may escape this boundary untyped  # reported below
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
        assert store.load_execution(ex.execution_id).revision == per_thread
        assert [b.revision for b in store.barrier_history(ex.execution_id)] == list(
            range(per_thread + 1)
        )
    flushed = store._group.batches - batches_before
    assert flushed < 64 * (per_thread + 1)  # barriers really shared transactions


def _full_batch_store(store_factory: Any, size: int, **options: Any) -> Any:
    """A store whose writer flushes only full batches of ``size`` (or on close)."""
    return store_factory(group_max_batch=size, group_window_seconds=30.0, **options)


def test_one_conflict_in_a_batch_fails_only_itself(store_factory):
    store = _full_batch_store(store_factory, 8)
    executions = _agents(store, 8)
    direct = step(executions[3], phase="moved_on")
    store.commit(direct)  # outside the batch: execution 3 is now at revision 1
    commits = [step(ex) for ex in executions]  # commits[3] still expects revision 0
    batches_before = store._group.batches
    futures = [store.submit(c) for c in commits]
    results = []
    for f in futures:
        try:
            results.append(f.result(timeout=60))
        except ConflictError as exc:
            results.append(exc)
    assert store._group.batches == batches_before + 1  # all eight in one transaction
    assert isinstance(results[3], ConflictError)
    for i, c in enumerate(commits):
        if i == 3:
            assert store.load_execution(c.execution.execution_id) == direct.execution
        else:
            assert results[i].revision == 1
            assert store.load_execution(c.execution.execution_id) == c.execution


def test_failing_commit_gives_every_caller_of_the_batch_outcome_unknown(store_factory):
    inner = _full_batch_store(store_factory, 6)
    executions = _agents(inner, 6)
    faulty = FaultInjectingStore(inner)
    commits = [step(ex) for ex in executions]
    faulty.add(FaultKind.COMMIT_FAILS, predicate=lambda c: c is commits[2])
    futures = [faulty.submit(c) for c in commits]
    for c, f in zip(commits, futures):
        with pytest.raises(OutcomeUnknownError) as info:
            f.result(timeout=60)
        assert info.value.intended is c
        assert faulty.reconcile(c) == NOT_COMMITTED
        assert faulty.load_execution(c.execution.execution_id).revision == 0


def test_no_future_resolves_before_the_commit_statement(store_factory):
    store = _full_batch_store(store_factory, 5)
    executions = _agents(store, 5)
    commits = [step(ex) for ex in executions]
    futures: list[Any] = []
    seen: list[tuple[str, list[bool]]] = []

    def hook(point: str, batch: tuple[Any, ...]) -> None:
        if point in ("commit", "committed") and len(batch) == 5:
            seen.append((point, [f.done() for f in futures]))

    store.install_fault_hook(hook)
    futures.extend(store.submit(c) for c in commits)
    assert [f.result(timeout=60).revision for f in futures] == [1] * 5
    assert seen == [("commit", [False] * 5), ("committed", [False] * 5)]


def test_storage_failure_in_a_batch_fails_all_of_it_without_writing(store_factory):
    inner = _full_batch_store(store_factory, 4)
    executions = _agents(inner, 4)
    faulty = FaultInjectingStore(inner)
    commits = [step(ex) for ex in executions]
    faulty.add(FaultKind.IO_ERROR, predicate=lambda c: c is commits[1])
    futures = [faulty.submit(c) for c in commits]
    for f in futures:
        with pytest.raises(StorageError) as info:
            f.result(timeout=60)
        assert not isinstance(info.value, (OutcomeUnknownError, ConflictError))
    assert all(faulty.load_execution(ex.execution_id).revision == 0 for ex in executions)


def test_cancelled_before_pickup_is_never_written_and_close_flushes(store_factory):
    store = store_factory(group_max_batch=64, group_window_seconds=30.0)
    a, b = _agents(store, 2)
    keep = store.submit(step(a))
    drop = store.submit(step(b))
    assert drop.cancel()  # the writer is still waiting for the batch to fill
    store.close()  # wakes the writer: flushes what is queued, then stops
    assert keep.result(timeout=60).revision == 1
    with pytest.raises(CancelledError):
        drop.result()
    reopened = store_factory()
    assert reopened.load_execution(a.execution_id).revision == 1
    assert reopened.load_execution(b.execution_id).revision == 0


def test_serialization_error_comes_back_in_the_future(store_factory):
    store = store_factory()
    (ex,) = _agents(store, 1)
    bad = step(ex, metadata={"bad": {1, 2}})
    with pytest.raises(Exception) as info:
        store.submit(bad).result(timeout=10)
    assert type(info.value).__name__ == "SerializationError"
    assert store.load_execution(ex.execution_id).revision == 0


def test_creates_in_one_batch_for_one_agent_give_exactly_one_winner(store_factory):
    store = _full_batch_store(store_factory, 3)
    store.create_agent("solo")
    creates = [BarrierCommit("admission", new_execution("solo", f"ex-{i}"), None) for i in range(3)]
    results = []
    for f in [store.submit(c) for c in creates]:
        try:
            results.append(f.result(timeout=60).execution_id)
        except Exception as exc:  # noqa: BLE001 - nothing may escape this boundary untyped
            results.append(type(exc).__name__)
    assert results == ["ex-0", "AgentBusyError", "AgentBusyError"]
    assert [e.execution_id for e in store.active_executions("solo")] == ["ex-0"]


def test_mixed_batch_keeps_submission_order(store_factory):
    """Plain updates (multi-row path), a terminal barrier with agent root and journal
    (savepoint path) and a creation that needs the freed agent slot, in one batch:
    applied in submission order, so the creation after the terminal barrier wins and a
    barrier chained on an earlier one of the same batch sees it."""
    from .helpers import finish

    store = _full_batch_store(store_factory, 6)
    agent, ex = admission(store, "solo", "ex-first")
    others = _agents(store, 2)
    commits = [
        step(others[0]),
        step(others[1]),
        finish(ex, agent),
        BarrierCommit("admission", new_execution("solo", "ex-second"), None),
        step(step(others[0]).execution),  # chained on the first barrier of this batch
        step(others[1], phase="late"),  # also based on revision 0 of others[1]: stale
    ]
    futures = [store.submit(c) for c in commits]
    outcomes = []
    for f in futures:
        try:
            outcomes.append(f.result(timeout=60).revision)
        except Exception as exc:  # noqa: BLE001 - nothing may escape this boundary untyped
            outcomes.append(type(exc).__name__)
    assert outcomes == [1, 1, 1, 0, 2, "ConflictError"]
    assert [e.execution_id for e in store.active_executions("solo")] == ["ex-second"]
    assert store.load_execution("ex-first").status.value == "cancelled"
    assert len(store.read_journal("solo")) == 1


def test_a_run_with_agent_roots_and_journals_fails_only_the_refused_barrier(store_factory):
    """Barriers that carry an agent root and journal records are applied as one run
    (one statement per table); an agent whose root moved meanwhile, and a journal
    record id used twice, are each refused alone, and nothing of theirs is written."""
    from .helpers import journal, step_with_journal

    store = _full_batch_store(store_factory, 6)
    pairs = [admission(store, f"agent-{i}", f"ex-{i}") for i in range(6)]
    commits = [step_with_journal(ex, agent, count=2) for agent, ex in pairs]
    # agent 2's root moves outside the batch: its barrier expects the old revision
    agent2 = pairs[2][0]
    store.commit(step_with_journal(pairs[2][1], agent2, count=1, barrier="outside", phase="moved"))
    # barrier 4 reuses a record id that agent 4 already has in its journal
    taken = journal("agent-4", "ex-4", record_id="rec-taken")
    agent4, ex4 = pairs[4]
    first = step_with_journal(ex4, agent4, count=0)
    store.commit(
        BarrierCommit(
            first.barrier,
            first.execution,
            first.expected_revision,
            agent=agent4.advance(journal_head=1),
            journal=(taken,),
        )
    )
    ex4 = store.load_execution("ex-4")
    agent4 = store.load_agent("agent-4")
    nxt = step_with_journal(ex4, agent4, count=1)
    commits[4] = BarrierCommit(
        nxt.barrier,
        nxt.execution,
        nxt.expected_revision,
        agent=nxt.agent,
        journal=(journal("agent-4", "ex-4", record_id="rec-taken", content={"again": True}),),
    )
    futures = [store.submit(c) for c in commits]
    outcomes: list[Any] = []
    for f in futures:
        try:
            outcomes.append(f.result(timeout=60))
        except ConflictError as exc:
            outcomes.append(exc)
    assert [type(o).__name__ for o in outcomes] == [
        "CommitReceipt",
        "CommitReceipt",
        "ConflictError",
        "CommitReceipt",
        "ConflictError",
        "CommitReceipt",
    ]
    for i in (0, 1, 3, 5):
        assert outcomes[i].journal_sequences == (1, 2)
        assert store.load_execution(f"ex-{i}") == commits[i].execution
        assert store.load_agent(f"agent-{i}") == commits[i].agent
        assert [r.record_id for r in store.read_journal(f"agent-{i}")] == [
            r.record_id for r in commits[i].journal
        ]
    # the refused ones: execution, root and journal exactly as before the batch
    assert store.load_execution("ex-2").phase == "moved"
    assert [r.content for r in store.read_journal("agent-2")] == [{"n": 0}]
    assert store.load_execution("ex-4") == ex4
    assert store.load_agent("agent-4") == agent4
    assert [r.record_id for r in store.read_journal("agent-4")] == ["rec-taken"]


def test_barriers_with_roots_and_journals_share_one_statement_per_table(store_factory, monkeypatch):
    from phronomy_fsm.store import _write

    from .helpers import step_with_journal

    runs: list[tuple[int, bool]] = []
    original = _write._apply_run

    def spy(cur: Any, run: list[Any], now_ms: int) -> bool:
        applied = original(cur, run, now_ms)
        runs.append((len(run), applied))
        return applied

    monkeypatch.setattr(_write, "_apply_run", spy)
    store = _full_batch_store(store_factory, 6)
    pairs = [admission(store, f"agent-{i}", f"ex-{i}") for i in range(6)]
    statements: list[str] = []
    store._writer.set_trace_callback(statements.append)
    commits = [step_with_journal(ex, agent, count=3) for agent, ex in pairs]
    receipts = [f.result(timeout=60) for f in [store.submit(c) for c in commits]]
    assert [r.journal_sequences for r in receipts] == [(1, 2, 3)] * 6
    assert runs == [(6, True)]

    # (the trace repeats a statement for its trigger steps and executemany rows)
    def kind(sql: str) -> str:
        words = sql.replace("(", " ").split()
        return " ".join(words[:3] if words[0] == "INSERT" else words[:2])

    assert list(dict.fromkeys(map(kind, statements))) == [
        "BEGIN IMMEDIATE",
        "SAVEPOINT run",
        "UPDATE executions",
        "UPDATE agents",
        "INSERT INTO journal",
        "RELEASE run",
        "COMMIT",
    ]
    assert all(len(store.read_journal(f"agent-{i}")) == 3 for i in range(6))


@pytest.mark.parametrize("size", [0, 1001])
def test_a_batch_size_sqlite_cannot_bind_is_refused_up_front(store_factory, size):
    with pytest.raises(ValueError, match="group_max_batch must be between 1 and 1000"):
        store_factory(group_max_batch=size)


def test_the_largest_batch_commits_in_one_transaction(store_factory):
    """1,000 barriers (the most a batch may hold) bind 9,001 parameters in one
    multi-row UPDATE, within SQLite's default limit."""
    store = _full_batch_store(store_factory, 1000)
    executions = _agents(store, 1000)
    batches = store._group.batches
    futures = [store.submit(step(ex)) for ex in executions]
    assert {f.result(timeout=120).revision for f in futures} == {1}
    assert store._group.batches == batches + 1
