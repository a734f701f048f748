"""Outcome unknown and storage failures at every write kind (issue 4 items 5-7).

For each write kind (create, execution update, agent-root save, journal append) and
both write paths (``commit`` and group-commit ``submit``): a lost response after the
commit reconciles to ``committed`` with the data stored; a failing COMMIT and a
failure before the write reconcile to ``not_committed`` with the store unchanged.
Storage failures are StorageError, never ConflictError.
"""

from __future__ import annotations

import pickle
import sqlite3
import time
from typing import Any

import pytest

from phronomy_fsm.errors import ConflictError, OutcomeUnknownError, StorageError
from phronomy_fsm.store import (
    COMMITTED,
    CONFLICT,
    NOT_COMMITTED,
    BarrierCommit,
    ExecutionStatus,
    FaultInjectingStore,
    FaultKind,
)

from .helpers import T0, admission, new_execution, step, step_with_journal

WRITE_KINDS = ["create", "update", "agent_save", "journal_append"]


def _commit_of(kind: str, store: Any) -> BarrierCommit:
    """A barrier of ``kind`` against a store that holds agent a1 with ex-1 at revision 0."""
    agent = store.load_agent("a1")
    ex = store.load_execution("ex-1")
    if kind == "create":
        done = ex.advance(now=T0, status=ExecutionStatus.CANCELLED, phase="cancelled")
        store.commit(BarrierCommit("terminal", done, 0))
        return BarrierCommit(
            "admission", new_execution("a1", "ex-2"), None, agent=agent.advance(now=T0)
        )
    if kind == "update":
        return step(ex)
    if kind == "agent_save":
        return BarrierCommit("provider_barrier", step(ex).execution, 0, agent=agent.advance(now=T0))
    return step_with_journal(ex, agent, count=2)


def _snapshot(store: Any) -> tuple[Any, ...]:
    return (
        store.list_executions(),
        store.list_agents(),
        store.read_journal("a1"),
        [store.barrier_history(e.execution_id) for e in store.list_executions()],
    )


def _run(store: Any, path: str, commit: BarrierCommit) -> Any:
    if path == "commit":
        return store.commit(commit)
    return store.submit(commit).result(timeout=30)


def _assert_committed(store: Any, commit: BarrierCommit) -> None:
    assert store.load_execution(commit.execution.execution_id) == commit.execution
    if commit.agent is not None:
        assert store.load_agent("a1") == commit.agent
    ids = {r.record_id for r in store.read_journal("a1")}
    assert {r.record_id for r in commit.journal} <= ids
    assert (
        store.barrier_history(commit.execution.execution_id)[-1].revision
        == commit.execution.revision
    )


@pytest.fixture
def faulty(store_factory):
    inner = store_factory(busy_timeout_seconds=0.2)
    admission(inner, "a1", "ex-1")
    return FaultInjectingStore(inner)


@pytest.mark.parametrize("path", ["commit", "submit"])
@pytest.mark.parametrize("kind", WRITE_KINDS)
def test_lost_response_reconciles_to_committed(faulty, kind, path):
    commit = _commit_of(kind, faulty)
    faulty.add(FaultKind.LOST_RESPONSE, barrier=commit.barrier)
    with pytest.raises(OutcomeUnknownError) as info:
        _run(faulty, path, commit)
    assert info.value.intended is commit
    assert faulty.reconcile(commit) == COMMITTED
    _assert_committed(faulty, commit)


@pytest.mark.parametrize("path", ["commit", "submit"])
@pytest.mark.parametrize("kind", WRITE_KINDS)
def test_failing_commit_statement_reconciles_to_not_committed(faulty, kind, path):
    commit = _commit_of(kind, faulty)
    before = _snapshot(faulty)
    faulty.add(FaultKind.COMMIT_FAILS, barrier=commit.barrier)
    with pytest.raises(OutcomeUnknownError) as info:
        _run(faulty, path, commit)
    assert info.value.intended is commit
    assert isinstance(info.value.__cause__, sqlite3.OperationalError)
    assert faulty.reconcile(commit) == NOT_COMMITTED
    assert _snapshot(faulty) == before
    _run(faulty, path, commit)  # the same commit may be retried after not_committed
    _assert_committed(faulty, commit)


@pytest.mark.parametrize("path", ["commit", "submit"])
@pytest.mark.parametrize("kind", WRITE_KINDS)
@pytest.mark.parametrize("fault", [FaultKind.FAIL_BEFORE, FaultKind.IO_ERROR, FaultKind.DISK_FULL])
def test_failure_before_commit_is_a_storage_error_and_writes_nothing(faulty, kind, path, fault):
    commit = _commit_of(kind, faulty)
    before = _snapshot(faulty)
    faulty.add(fault, barrier=commit.barrier)
    with pytest.raises(StorageError) as info:
        _run(faulty, path, commit)
    assert not isinstance(info.value, (OutcomeUnknownError, ConflictError))
    expected = {FaultKind.IO_ERROR: "disk I/O error", FaultKind.DISK_FULL: "disk is full"}.get(
        fault, "injected"
    )
    assert expected in str(info.value)
    assert faulty.reconcile(commit) == NOT_COMMITTED
    assert _snapshot(faulty) == before


@pytest.mark.parametrize("path", ["commit", "submit"])
def test_lock_contention_is_a_storage_error_after_the_busy_timeout(faulty, path):
    commit = _commit_of("update", faulty)
    before = _snapshot(faulty)
    faulty.add(FaultKind.LOCK_CONTENTION)
    started = time.monotonic()
    with pytest.raises(StorageError) as info:
        _run(faulty, path, commit)
    assert time.monotonic() - started >= 0.15  # it really waited for the busy timeout
    assert info.value.busy is True and not isinstance(info.value, ConflictError)
    assert "locked" in str(info.value)
    assert _snapshot(faulty) == before
    assert faulty.commit(commit).revision == 1  # the lock is released afterwards


def test_a_foreign_write_lock_is_a_storage_error_not_a_conflict(store_factory, tmp_path):
    store = store_factory("locked.db", busy_timeout_seconds=0.1)
    _, ex = admission(store, "a1", "ex-1")
    holder = sqlite3.connect(tmp_path / "locked.db", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(StorageError) as info:
            store.commit(step(ex))
        assert info.value.sqlite_error.startswith("SQLITE_BUSY")
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert store.load_execution("ex-1") == ex


def test_real_disk_full_is_a_storage_error_and_rolls_back(store_factory):
    store = store_factory("full.db")
    _, ex = admission(store, "a1", "ex-1")
    with store._write_lock:
        cur = store._writer_cursor()
        pages = cur.execute("PRAGMA page_count").fetchone()[0]
        cur.execute(f"PRAGMA max_page_count = {pages}")
    big = ex.advance(now=T0, status=ExecutionStatus.ACTIVE, input={"blob": "x" * (2 * 1024 * 1024)})
    with pytest.raises(StorageError, match="full") as info:
        store.commit(BarrierCommit("provider_barrier", big, 0))
    assert info.value.sqlite_error == "SQLITE_FULL"
    assert store.load_execution("ex-1") == ex
    assert store.reconcile(BarrierCommit("provider_barrier", big, 0)) == NOT_COMMITTED


def test_lost_response_then_another_writer_reconciles_to_conflict(faulty):
    ex = faulty.load_execution("ex-1")
    commit = step(ex)
    faulty.add(FaultKind.LOST_RESPONSE)
    with pytest.raises(OutcomeUnknownError):
        faulty.commit(commit)
    faulty.commit(step(commit.execution))  # someone else moved on
    assert faulty.reconcile(commit) == CONFLICT


def test_fault_selection_by_nth_and_predicate(faulty):
    ex = faulty.load_execution("ex-1")
    fault = faulty.add(
        FaultKind.FAIL_BEFORE, nth=2, predicate=lambda c: c.barrier == "provider_barrier"
    )
    c1 = step(ex)
    faulty.commit(c1)
    c2 = step(c1.execution)
    with pytest.raises(StorageError):
        faulty.commit(c2)
    faulty.commit(c2)  # third match: does not fire again
    assert (fault.matched, fault.fired) == (3, 1)
    assert [k for k, _ in faulty.injected] == [FaultKind.FAIL_BEFORE]


def test_outcome_unknown_pickles_with_its_intended_commit(faulty):
    commit = step(faulty.load_execution("ex-1"))
    faulty.add(FaultKind.COMMIT_FAILS)
    with pytest.raises(OutcomeUnknownError) as info:
        faulty.commit(commit)
    copy = pickle.loads(pickle.dumps(info.value))
    assert (
        type(copy) is OutcomeUnknownError
        and copy.intended == commit
        and str(copy) == str(info.value)
    )


def test_store_keeps_working_after_an_outcome_unknown(faulty):
    commit = step(faulty.load_execution("ex-1"))
    faulty.add(FaultKind.COMMIT_FAILS)
    with pytest.raises(OutcomeUnknownError):
        faulty.commit(commit)
    # the writer connection was reset; the next commit opens a fresh one
    assert faulty.commit(commit).revision == 1
    assert faulty.inner._writer.execute("PRAGMA synchronous").fetchone()[0] == 2
