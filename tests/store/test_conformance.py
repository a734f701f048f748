"""The compare-and-set rules of a commit, through every write path of the SQLite store.

Each test runs three ways (``store`` in ``conftest.py``): ``commit()`` on the caller's
thread, group commit (``submit().result()``), and through a ``FaultInjectingStore``
with no faults armed. The same rules on every backend, through the engine port, are
``tests/engine_port/test_conformance.py``.
"""

from __future__ import annotations

import hashlib

import pytest

from phronomy_fsm.durable.records import ExecutionStatus, JournalEntry, to_json
from phronomy_fsm.errors import (
    AgentBusyError,
    ConflictError,
    ExecutionFinishedError,
    NotFoundError,
    StorageError,
)
from phronomy_fsm.table import COMMITTED, CONFLICT, NOT_COMMITTED

from .helpers import T0, admit, create, finish, journal, new_execution, signal, step


def test_missing_execution_is_not_found(store):
    with pytest.raises(NotFoundError):
        store.load_record("nothing")
    assert store.barrier_log("nothing") == []
    assert store.journal_entries("nothing") == []
    assert store.list_signals("nothing") == []


def test_a_create_round_trips_and_logs_the_barrier(store):
    receipt = store.commit(create("ex-1", exclusive_key="k"))
    assert (receipt.execution_id, receipt.revision, receipt.signal_seqs) == ("ex-1", 0, ())
    ex = store.load_record("ex-1")
    assert ex == new_execution("ex-1", exclusive_key="k")
    (logged,) = store.barrier_log("ex-1")
    assert (logged.revision, logged.barrier, logged.status, logged.state) == (
        0,
        "@start",
        "running",
        "s0",
    )
    assert logged.digest == hashlib.sha256(to_json(ex).encode()).hexdigest()
    assert logged.committed_at == receipt.committed_at
    assert logged.committed_at.utcoffset().total_seconds() == 0


def test_each_commit_raises_the_revision_by_one(store):
    ex = admit(store, "ex-1")
    c1 = step(ex, "charge")
    assert store.commit(c1).revision == 1
    assert store.load_record("ex-1") == c1.execution
    c2 = step(c1.execution, "ship")
    receipt = store.commit(c2)
    assert [b.barrier for b in store.barrier_log("ex-1")] == ["@start", "charge", "ship"]
    assert store.barrier_log("ex-1")[-1].committed_at == receipt.committed_at


def test_a_stale_revision_is_a_conflict_and_writes_nothing(store):
    ex = admit(store, "ex-1")
    first = step(ex)
    store.commit(first)
    stale = step(ex, state="elsewhere")  # also based on revision 0
    with pytest.raises(ConflictError) as info:
        store.commit(stale)
    assert (info.value.stored_revision, info.value.expected_revision) == (1, 0)
    assert store.load_record("ex-1") == first.execution
    assert len(store.barrier_log("ex-1")) == 2


def test_an_update_of_a_missing_execution_is_not_found(store):
    with pytest.raises(NotFoundError):
        store.commit(step(new_execution("ghost")))
    assert store.barrier_log("ghost") == []


def test_a_second_active_execution_of_a_key_is_busy(store):
    admit(store, "ex-1", "k")
    with pytest.raises(AgentBusyError) as info:
        store.commit(create("ex-2", exclusive_key="k"))
    assert info.value.active_execution_id == "ex-1"
    with pytest.raises(NotFoundError):
        store.load_record("ex-2")


def test_a_duplicate_execution_id_is_a_conflict_not_busy(store):
    ex = admit(store, "ex-1", "k")
    store.commit(finish(ex))
    with pytest.raises(ConflictError) as info:
        store.commit(create("ex-1", exclusive_key="k"))
    assert not isinstance(info.value, AgentBusyError)


def test_after_its_final_commit_the_key_admits_again(store):
    ex = admit(store, "ex-1", "k")
    store.commit(finish(ex))
    assert store.list_records(exclusive_key="k", active=True) == []
    store.commit(create("ex-2", exclusive_key="k"))
    assert [e.execution_id for e in store.list_records(exclusive_key="k", active=True)] == ["ex-2"]


def test_a_finished_execution_takes_no_commit(store):
    ex = admit(store, "ex-1")
    done = finish(ex, ExecutionStatus.FAILED)
    store.commit(done)
    revived = step(done.execution, status=ExecutionStatus.RUNNING)
    with pytest.raises(ExecutionFinishedError):
        store.commit(revived)
    assert store.load_record("ex-1") == done.execution
    assert store.list_records(active=True) == []


def test_journal_entries_are_numbered_by_revision_and_position(store):
    ex = admit(store, "ex-1")
    c1 = step(ex, journal=journal(3))
    store.commit(c1)
    store.commit(step(c1.execution, journal=(JournalEntry("other", [1, 2]),)))
    assert [(j.kind, j.data, j.revision, j.position) for j in store.journal_entries("ex-1")] == [
        ("note", {"n": 0}, 1, 0),
        ("note", {"n": 1}, 1, 1),
        ("note", {"n": 2}, 1, 2),
        ("other", [1, 2], 2, 0),
    ]


def test_a_commit_with_several_statements_is_all_or_nothing(store):
    """The execution moves, its signals are consumed, a child is created, a signal is
    sent and journal entries are added together; when one part is refused, none of
    them is written."""
    ex = admit(store, "parent")
    admit(store, "taken")
    sent = store.send_signal(signal("parent", "s-1"))
    child = new_execution("taken", parent_execution_id="parent")  # the id exists
    bad = step(
        ex,
        consume_signals=(sent.seq,),
        children=(child,),
        send_signals=(signal("parent", "note-1"),),
        journal=journal(2),
    )
    with pytest.raises(ConflictError):
        store.commit(bad)
    assert store.load_record("parent") == ex
    assert [s.signal_id for s in store.pending_signals("parent")] == ["s-1"]
    assert store.journal_entries("parent") == []
    assert len(store.barrier_log("parent")) == 1
    good = step(
        ex,
        consume_signals=(sent.seq,),
        children=(new_execution("kid", parent_execution_id="parent"),),
        send_signals=(signal("parent", "note-1"),),
        journal=journal(2),
    )
    receipt = store.commit(good)
    assert len(receipt.signal_seqs) == 1
    assert [s.signal_id for s in store.pending_signals("parent")] == ["note-1"]
    assert store.load_record("kid").parent_execution_id == "parent"
    assert len(store.journal_entries("parent")) == 2


def test_list_records_filters_and_orders(store):
    for i, key in enumerate(["a1", "a2", "a3"]):
        store.commit(create(f"ex-{i}", exclusive_key=key, created_at=T0.replace(second=i)))
    store.commit(finish(store.load_record("ex-1"), ExecutionStatus.CANCELLED))
    assert [e.execution_id for e in store.list_records()] == ["ex-0", "ex-1", "ex-2"]
    assert [e.execution_id for e in store.list_records(status="cancelled")] == ["ex-1"]
    assert [e.execution_id for e in store.list_records(exclusive_key="a3")] == ["ex-2"]
    assert [e.execution_id for e in store.list_records(active=True)] == ["ex-0", "ex-2"]
    assert [e.execution_id for e in store.list_records(limit=1, offset=1)] == ["ex-1"]
    assert [e.execution_id for e in store.list_records(state="done")] == ["ex-1"]
    assert store.count_by_status() == {"running": 2, "cancelled": 1}
    assert store.count_by_status(exclusive_key="a2") == {"cancelled": 1}


def test_reconcile_dispositions(store):
    ex = admit(store, "ex-1")
    c1 = step(ex)
    assert store.reconcile(c1) == NOT_COMMITTED  # still at the expected revision
    store.commit(c1)
    assert store.reconcile(c1) == COMMITTED
    assert store.reconcile(step(ex, state="something_else")) == CONFLICT  # same revision
    store.commit(step(c1.execution))
    assert store.reconcile(c1) == CONFLICT  # moved on: not provable
    assert store.reconcile(create("ex-new")) == NOT_COMMITTED


def test_a_closed_store_raises_storage_error(store_factory):
    s = store_factory("closed.db")
    ex = admit(s, "ex-1")
    s.close()
    s.close()  # idempotent
    with pytest.raises(StorageError):
        s.load_record("ex-1")
    with pytest.raises(StorageError):
        s.commit(step(ex))
    with pytest.raises(StorageError):
        s.submit(step(ex)).result(timeout=10)
    with pytest.raises(StorageError):
        s.send_signal(signal("ex-1", "late"))
