"""The BarrierStore conformance suite (issue 4 "Tests"; reference §5.1 CAS rules).

Runs against every backend of ``store_factory`` and through three write paths
(``commit``, group-commit ``submit``, and the fault wrapper with no faults).
"""

from __future__ import annotations

import hashlib

import attrs
import pytest

from phronomy_fsm.errors import (
    AgentBusyError,
    ConflictError,
    InvalidStatusTransitionError,
    NotFoundError,
    StorageError,
)
from phronomy_fsm.store import (
    COMMITTED,
    CONFLICT,
    NOT_COMMITTED,
    AgentLifecycle,
    BarrierCommit,
    ExecutionStatus,
)
from phronomy_fsm.store.records import to_json

from .helpers import T0, admission, finish, journal, new_execution, step, step_with_journal


def test_create_and_load_agent(store):
    agent = store.create_agent("a1", metadata={"team": "x"}, now=T0)
    assert (agent.revision, agent.lifecycle, agent.journal_head) == (0, AgentLifecycle.IDLE, 0)
    assert store.load_agent("a1") == agent
    assert [a.agent_id for a in store.list_agents()] == ["a1"]


def test_duplicate_agent_is_a_conflict(store):
    store.create_agent("a1")
    with pytest.raises(ConflictError):
        store.create_agent("a1")


def test_missing_agent_and_execution_are_not_found(store):
    with pytest.raises(NotFoundError):
        store.load_agent("nobody")
    with pytest.raises(NotFoundError):
        store.load_execution("nothing")
    assert store.barrier_history("nothing") == []
    assert store.read_journal("nobody") == []


def test_admission_commit_round_trips_and_logs_the_barrier(store):
    agent, ex = admission(store, "a1", "ex-1")
    assert ex.revision == 0 and ex.status is ExecutionStatus.PREPARING
    assert agent.revision == 1 and agent.lifecycle is AgentLifecycle.ACTIVE
    history = store.barrier_history("ex-1")
    assert [(b.revision, b.barrier, b.status, b.phase) for b in history] == [
        (0, "admission", "preparing", "preparing")
    ]
    assert history[0].digest == hashlib.sha256(to_json(ex).encode()).hexdigest()
    assert history[0].committed_at.tzinfo is not None


def test_update_raises_revision_by_one_and_returns_a_receipt(store):
    _, ex = admission(store, "a1", "ex-1")
    c1 = step(ex)
    receipt = store.commit(c1)
    assert (receipt.execution_id, receipt.revision, receipt.journal_sequences) == ("ex-1", 1, ())
    assert store.load_execution("ex-1") == c1.execution
    c2 = step(c1.execution, "tool_barrier", phase="dispatching_tools")
    assert store.commit(c2).revision == 2
    assert [b.barrier for b in store.barrier_history("ex-1")] == [
        "admission",
        "provider_barrier",
        "tool_barrier",
    ]
    receipt3 = store.commit(step(c2.execution))
    assert store.barrier_history("ex-1")[-1].committed_at == receipt3.committed_at


def test_stale_revision_is_a_conflict_and_writes_nothing(store):
    _, ex = admission(store, "a1", "ex-1")
    first = step(ex)
    store.commit(first)
    stale = step(ex, phase="other")  # also based on revision 0
    with pytest.raises(ConflictError) as info:
        store.commit(stale)
    assert info.value.stored_revision == 1 and info.value.expected_revision == 0
    assert store.load_execution("ex-1") == first.execution
    assert len(store.barrier_history("ex-1")) == 2


def test_update_of_a_missing_execution_is_not_found(store):
    store.create_agent("a1")
    ghost = new_execution("a1", "ghost")
    with pytest.raises(NotFoundError):
        store.commit(step(ghost))
    assert store.barrier_history("ghost") == []


def test_creating_for_an_unknown_agent_is_not_found(store):
    with pytest.raises(NotFoundError):
        store.commit(BarrierCommit("admission", new_execution("nobody", "ex-x"), None))
    with pytest.raises(NotFoundError):
        store.load_execution("ex-x")


def test_second_active_execution_is_agent_busy(store):
    admission(store, "a1", "ex-1")
    with pytest.raises(AgentBusyError) as info:
        store.commit(BarrierCommit("admission", new_execution("a1", "ex-2"), None))
    assert info.value.active_execution_id == "ex-1"
    with pytest.raises(NotFoundError):
        store.load_execution("ex-2")


def test_duplicate_execution_id_is_a_conflict_not_busy(store):
    agent, ex = admission(store, "a1", "ex-1")
    store.commit(finish(ex, agent))
    with pytest.raises(ConflictError) as info:
        store.commit(BarrierCommit("admission", new_execution("a1", "ex-1"), None))
    assert not isinstance(info.value, AgentBusyError)


def test_after_a_terminal_commit_the_agent_admits_again(store):
    agent, ex = admission(store, "a1", "ex-1")
    store.commit(finish(ex, agent))
    assert store.active_executions("a1") == []
    store.commit(BarrierCommit("admission", new_execution("a1", "ex-2"), None))
    assert [e.execution_id for e in store.active_executions("a1")] == ["ex-2"]


def test_journal_append_assigns_sequences_and_moves_the_head(store):
    agent, ex = admission(store, "a1", "ex-1")
    c = step_with_journal(ex, agent, count=3)
    receipt = store.commit(c)
    assert receipt.journal_sequences == (1, 2, 3)
    stored_agent = store.load_agent("a1")
    assert (stored_agent.revision, stored_agent.journal_head) == (2, 3)
    records = store.read_journal("a1")
    assert [r.sequence for r in records] == [1, 2, 3]
    assert [r.record_id for r in records] == [r.record_id for r in c.journal]
    assert [r.content for r in records] == [{"n": 0}, {"n": 1}, {"n": 2}]
    assert [r.sequence for r in store.read_journal("a1", after=1, limit=1)] == [2]
    c2 = step_with_journal(c.execution, stored_agent, count=2)
    assert store.commit(c2).journal_sequences == (4, 5)
    assert len(store.read_journal("a1", execution_id="ex-1")) == 5
    assert store.read_journal("a1", execution_id="other") == []


def test_journal_head_mismatch_is_a_conflict_and_nothing_is_written(store):
    agent, ex = admission(store, "a1", "ex-1")
    good = step_with_journal(ex, agent, count=1)
    # The root claims the head moves by 2 while only one record is appended.
    bad = attrs.evolve(good, agent=attrs.evolve(good.agent, journal_head=2))
    with pytest.raises(ConflictError) as info:
        store.commit(bad)
    assert info.value.stored_journal_head == 0
    assert store.load_execution("ex-1") == ex
    assert store.load_agent("a1") == agent
    assert store.read_journal("a1") == []
    assert len(store.barrier_history("ex-1")) == 1


def test_stale_agent_revision_is_a_conflict_and_rolls_back_the_execution(store):
    agent, ex = admission(store, "a1", "ex-1")
    stale_root = attrs.evolve(agent, revision=agent.revision)  # stored is 1, needs 2
    c = BarrierCommit("provider_barrier", step(ex).execution, 0, agent=stale_root)
    with pytest.raises(ConflictError):
        store.commit(c)
    assert store.load_execution("ex-1") == ex
    assert store.load_agent("a1").revision == 1


def test_duplicate_journal_record_id_is_a_conflict(store):
    agent, ex = admission(store, "a1", "ex-1")
    c = step_with_journal(ex, agent, count=1)
    store.commit(c)
    agent2 = store.load_agent("a1")
    again = BarrierCommit(
        "terminal",
        step(c.execution).execution,
        1,
        agent=agent2.advance(journal_head=2),
        journal=(journal("a1", "ex-1", record_id=c.journal[0].record_id),),
    )
    with pytest.raises(ConflictError):
        store.commit(again)
    assert store.load_execution("ex-1").revision == 1
    assert store.load_agent("a1") == agent2
    # duplicates inside one batch are rejected too
    twin = journal("a1", "ex-1", record_id="same")
    within = BarrierCommit(
        "terminal",
        step(c.execution).execution,
        1,
        agent=agent2.advance(journal_head=3),
        journal=(twin, twin),
    )
    with pytest.raises(ConflictError):
        store.commit(within)
    assert len(store.read_journal("a1")) == 1


def test_status_machine_is_enforced_by_the_store(store):
    agent, ex = admission(store, "a1", "ex-1")
    done = finish(ex, agent)
    store.commit(done)
    # Bypass ExecutionRecord.advance(): completed -> active must still be refused.
    revived = attrs.evolve(
        done.execution, revision=done.execution.revision + 1, status=ExecutionStatus.ACTIVE
    )
    with pytest.raises(InvalidStatusTransitionError):
        store.commit(BarrierCommit("provider_barrier", revived, done.execution.revision))
    assert store.load_execution("ex-1") == done.execution
    assert store.active_executions() == []


def test_list_executions_filters_and_orders(store):
    for i, agent_id in enumerate(["a1", "a2", "a3"]):
        store.create_agent(agent_id)
        ex = new_execution(agent_id, f"ex-{i}", created_at=T0.replace(second=i))
        store.commit(BarrierCommit("admission", ex, None))
    a2 = store.load_agent("a2")
    ex1 = store.load_execution("ex-1")
    store.commit(finish(ex1, a2))
    assert [e.execution_id for e in store.list_executions()] == ["ex-0", "ex-1", "ex-2"]
    assert [e.execution_id for e in store.list_executions(status="cancelled")] == ["ex-1"]
    assert [e.execution_id for e in store.list_executions(agent_id="a3")] == ["ex-2"]
    assert [e.execution_id for e in store.list_executions(active=True)] == ["ex-0", "ex-2"]
    assert [e.execution_id for e in store.list_executions(limit=1, offset=1)] == ["ex-1"]
    assert [e.execution_id for e in store.active_executions()] == ["ex-0", "ex-2"]


def test_reconcile_dispositions(store):
    _agent, ex = admission(store, "a1", "ex-1")
    c1 = step(ex)
    assert store.reconcile(c1) == NOT_COMMITTED  # still at expected revision
    store.commit(c1)
    assert store.reconcile(c1) == COMMITTED
    other = step(ex, phase="something_else")  # same revision, different payload
    assert store.reconcile(other) == CONFLICT
    store.commit(step(c1.execution))
    assert store.reconcile(c1) == CONFLICT  # moved on: not provable
    creating = BarrierCommit("admission", new_execution("a1", "ex-new"), None)
    assert store.reconcile(creating) == NOT_COMMITTED


def test_closed_store_raises_storage_error(store_factory):
    s = store_factory("closed.db")
    admission(s, "a1", "ex-1")
    s.close()
    s.close()  # idempotent
    with pytest.raises(StorageError):
        s.load_execution("ex-1")
    with pytest.raises(StorageError):
        s.commit(step(new_execution("a1", "ex-1")))
    with pytest.raises(StorageError):
        s.submit(step(new_execution("a1", "ex-1"))).result(timeout=10)
