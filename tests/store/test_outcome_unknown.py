"""Outcome unknown and storage failures at every kind of commit (creating an
execution, moving it, adding journal entries, consuming and sending signals, creating
children), on both write paths (``commit`` and group-commit ``submit``): a lost
response after the commit reconciles to ``committed`` with the data stored; a failing
COMMIT and a failure before the write reconcile to ``not_committed`` with the store
unchanged. Storage failures are StorageError, never ConflictError.
"""

from __future__ import annotations

import pickle
import sqlite3
from typing import Any

import pytest

from phronomy_fsm.durable.records import DurableCommit
from phronomy_fsm.errors import ConflictError, DiskFullError, OutcomeUnknownError, StorageError
from phronomy_fsm.store import FaultInjectingStore, FaultKind
from phronomy_fsm.table import COMMITTED, CONFLICT, NOT_COMMITTED

from .helpers import admit, advance, create, finish, journal, new_execution, signal, step

WRITE_KINDS = ["create", "update", "journal", "signals", "children"]
IDS = ("ex-1", "ex-2", "child")


def _commit_of(kind: str, store: Any) -> DurableCommit:
    """A commit of ``kind`` against a store holding ex-1 (key k) at revision 0 with
    one pending signal."""
    ex = store.load_record("ex-1")
    if kind == "create":
        store.commit(finish(ex))
        return create("ex-2", exclusive_key="k")
    if kind == "update":
        return step(ex, "update")
    if kind == "journal":
        return step(ex, "journaled", journal=journal(2))
    if kind == "signals":
        (pending,) = store.pending_signals("ex-1")
        return step(
            ex, "inbox", consume_signals=(pending.seq,), send_signals=(signal("ex-1", "s-2"),)
        )
    child = new_execution("child", parent_execution_id="ex-1")
    return step(ex, "spawn", children=(child,))


def _snapshot(store: Any) -> tuple[Any, ...]:
    return (
        store.execution_rows(),
        [store.barrier_log(eid) for eid in IDS],
        [store.journal_entries(eid) for eid in IDS],
        [store.list_signals(eid) for eid in IDS],
    )


def _run(store: Any, path: str, commit: DurableCommit) -> Any:
    if path == "commit":
        return store.commit(commit)
    return store.submit(commit).result(timeout=30)


def _assert_committed(store: Any, commit: DurableCommit) -> None:
    ex = commit.execution
    assert store.load_record(ex.execution_id) == ex
    assert store.barrier_log(ex.execution_id)[-1].revision == ex.revision
    assert len(store.journal_entries(ex.execution_id)) == len(commit.journal)
    for child in commit.children:
        assert store.load_record(child.execution_id) == child
    pending = {s.signal_id for s in store.pending_signals("ex-1")}
    if commit.consume_signals:
        assert pending == {"s-2"}


@pytest.fixture
def faulty(store_factory):
    inner = store_factory(busy_timeout_seconds=0.2)
    admit(inner, "ex-1", "k")
    inner.send_signal(signal("ex-1", "s-1"))
    return FaultInjectingStore(inner)


@pytest.mark.parametrize("path", ["commit", "submit"])
@pytest.mark.parametrize("kind", WRITE_KINDS)
def test_a_lost_response_reconciles_to_committed(faulty, kind, path):
    commit = _commit_of(kind, faulty)
    faulty.add(FaultKind.LOST_RESPONSE, barrier=commit.barrier)
    with pytest.raises(OutcomeUnknownError) as info:
        _run(faulty, path, commit)
    assert info.value.intended is commit
    assert faulty.reconcile(commit) == COMMITTED
    _assert_committed(faulty, commit)


@pytest.mark.parametrize("path", ["commit", "submit"])
@pytest.mark.parametrize("kind", WRITE_KINDS)
def test_a_failing_commit_statement_reconciles_to_not_committed(faulty, kind, path):
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
def test_a_failure_before_commit_is_a_storage_error_and_writes_nothing(faulty, kind, path, fault):
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
    with pytest.raises(StorageError) as info:
        _run(faulty, path, commit)
    assert info.value.busy is True and not isinstance(info.value, ConflictError)
    assert "locked" in str(info.value)
    assert _snapshot(faulty) == before
    assert faulty.commit(commit).revision == 1  # the lock is released afterwards


def test_a_foreign_write_lock_is_a_storage_error_not_a_conflict(store_factory, tmp_path):
    store = store_factory("locked.db", busy_timeout_seconds=0.1)
    ex = admit(store, "ex-1")
    holder = sqlite3.connect(tmp_path / "locked.db", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(StorageError) as info:
            store.commit(step(ex))
        assert info.value.sqlite_error.startswith("SQLITE_BUSY")
        with pytest.raises(StorageError):
            store.send_signal(signal("ex-1", "s-1"))
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert store.load_record("ex-1") == ex


@pytest.mark.parametrize("path", ["commit", "submit"])
def test_a_real_full_database_is_a_disk_full_error_and_writes_nothing(store_factory, path):
    """SQLite's own SQLITE_FULL (the page limit reached for real): on the group commit's
    one-statement path too, whose statement includes its COMMIT, it is DiskFullError —
    nothing was written — and not OutcomeUnknownError (issue 21)."""
    store = store_factory("full.db")
    ex = admit(store, "ex-1")
    with store._write_lock:
        cur = store._writer_cursor()
        pages = cur.execute("PRAGMA page_count").fetchone()[0]
        cur.execute(f"PRAGMA max_page_count = {pages}")
    big = DurableCommit("b", advance(ex, context={"blob": "x" * (2 * 1024 * 1024)}), 0)
    with pytest.raises(DiskFullError, match="full; nothing was written") as info:
        _run(store, path, big)
    assert info.value.sqlite_error == "SQLITE_FULL" and not info.value.busy
    assert store.load_record("ex-1") == ex
    assert store.reconcile(big) == NOT_COMMITTED
    small = step(ex)
    assert _run(store, path, small).revision == 1  # the writer is still usable


def test_a_lost_response_then_another_writer_reconciles_to_conflict(faulty):
    commit = step(faulty.load_record("ex-1"))
    faulty.add(FaultKind.LOST_RESPONSE)
    with pytest.raises(OutcomeUnknownError):
        faulty.commit(commit)
    faulty.commit(step(commit.execution))  # someone else moved on
    assert faulty.reconcile(commit) == CONFLICT


def test_faults_are_selected_by_nth_and_predicate(faulty):
    ex = faulty.load_record("ex-1")
    fault = faulty.add(FaultKind.FAIL_BEFORE, nth=2, predicate=lambda c: c.barrier == "b")
    c1 = step(ex)
    faulty.commit(c1)
    c2 = step(c1.execution)
    with pytest.raises(StorageError):
        faulty.commit(c2)
    faulty.commit(c2)  # third match: does not fire again
    assert (fault.matched, fault.fired) == (3, 1)
    assert [k for k, _ in faulty.injected] == [FaultKind.FAIL_BEFORE]


def test_faults_never_fire_on_the_inbox_or_reads(faulty):
    faulty.add(FaultKind.FAIL_BEFORE, times=None)
    assert faulty.send_signal(signal("ex-1", "s-9")).seq > 0
    assert faulty.load_record("ex-1").revision == 0
    assert faulty.injected == []


def test_outcome_unknown_pickles_with_its_intended_commit(faulty):
    commit = step(faulty.load_record("ex-1"))
    faulty.add(FaultKind.COMMIT_FAILS)
    with pytest.raises(OutcomeUnknownError) as info:
        faulty.commit(commit)
    copy = pickle.loads(pickle.dumps(info.value))
    assert type(copy) is OutcomeUnknownError
    assert copy.intended == commit and str(copy) == str(info.value)


def test_the_store_keeps_working_after_an_outcome_unknown(faulty):
    commit = step(faulty.load_record("ex-1"))
    faulty.add(FaultKind.COMMIT_FAILS)
    with pytest.raises(OutcomeUnknownError):
        faulty.commit(commit)
    # the writer connection was reset; the next commit opens a fresh one
    assert faulty.commit(commit).revision == 1
    assert faulty.inner._writer.execute("PRAGMA synchronous").fetchone()[0] == 2
