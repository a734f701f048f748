"""Barrier failures during real executions: lost responses are reconciled, known
failures end the execution durably, unprovable outcomes fail closed and wait for an
operator (reference §4.4, §5.3, §6.6; issue 5 item 2, issue 6 item 3). After each, the
stored conversation is legal — every tool call answered exactly once, roles in order —
and the same agent's next execution succeeds against a provider that refuses an
illegal conversation, as OpenAI-compatible APIs do (issue 11 item 4)."""

from __future__ import annotations

from typing import Any

import pytest

from phronomy_fsm.agent import Agent, Reply, ScriptedProvider
from phronomy_fsm.errors import (
    AgentBusyError,
    ConflictError,
    RecoveryResolutionError,
    StorageError,
    StoreError,
)
from phronomy_fsm.store import Fault, FaultInjectingStore, FaultKind
from phronomy_fsm.store.records import ExecutionStatus

from .conftest import Events, StrictProvider, assert_stored_conversation_is_legal, make_tool
from .test_agent_flows import assert_revisions_consistent, barrier_names


def tool_agent(
    store: Any, runtime: Any, events: Events, log: list[Any], answer: str = "done"
) -> tuple[Agent, StrictProvider]:
    provider = StrictProvider([Reply(tool_calls=(("lookup", {"q": "x"}),)), Reply(content=answer)])
    agent = Agent.create(
        "a",
        store=store,
        provider=provider,
        runtime=runtime,
        tools=[make_tool(log=log)],
        on_event=events,
    )
    return agent, provider


def conversation_survives(store: Any, agent: Agent, provider: Any) -> None:
    """The stored conversation is legal and a next invoke of the same agent, whose
    request carries it, succeeds against a provider that refuses illegal ones."""
    assert_stored_conversation_is_legal(store, agent.agent_id)
    if isinstance(provider, StrictProvider):
        provider.inner.script[:] = [Reply(content="next answer")]
    result = agent.invoke("next question", wait_seconds=10)
    assert result.status == "completed"
    assert_stored_conversation_is_legal(store, agent.agent_id)


@pytest.mark.parametrize(
    "barrier",
    ["admission", "initial_preparation", "tool_dispatch", "provider_dispatch", "terminal_commit"],
)
def test_a_lost_response_is_reconciled_as_committed(
    store: Any, runtime: Any, events: Events, barrier: str
) -> None:
    faulty = FaultInjectingStore(store, [Fault(FaultKind.LOST_RESPONSE, barrier=barrier)])
    log: list[Any] = []
    agent, provider = tool_agent(faulty, runtime, events, log)
    result = agent.invoke("go", wait_seconds=10)
    assert result.status == "completed" and len(log) == 1
    assert faulty.faults[0].fired == 1
    assert (
        barrier_names(store, result.execution_id).count(barrier) == 1
    )  # committed once, not twice
    assert_revisions_consistent(store, result.execution_id)
    conversation_survives(store, agent, provider)


@pytest.mark.parametrize(
    "kind", [FaultKind.FAIL_BEFORE, FaultKind.IO_ERROR, FaultKind.DISK_FULL, FaultKind.COMMIT_FAILS]
)
def test_a_known_failure_before_a_tool_runs_ends_the_execution_failed(
    store: Any, runtime: Any, events: Events, kind: FaultKind
) -> None:
    faulty = FaultInjectingStore(store, [Fault(kind, barrier="tool_dispatch")])
    log: list[Any] = []
    agent, provider = tool_agent(faulty, runtime, events, log)
    with pytest.raises(
        StoreError
    ):  # StorageError, or OutcomeUnknownError reconciled to not_committed
        agent.invoke("go", wait_seconds=10)
    assert log == []  # the tool never ran: its barrier did not commit
    execution = store.list_executions(agent_id="a")[0]
    assert execution.status is ExecutionStatus.FAILED
    assert "tool_dispatch" not in barrier_names(store, execution.execution_id)
    assert_revisions_consistent(store, execution.execution_id)
    # the agent is free again
    assert agent.invoke("again", wait_seconds=10).status == "completed"
    conversation_survives(store, agent, provider)


def test_admission_failure_leaves_nothing_durable_and_frees_the_agent(
    store: Any, runtime: Any, events: Events
) -> None:
    faulty = FaultInjectingStore(store, [Fault(FaultKind.FAIL_BEFORE, barrier="admission")])
    agent, provider = tool_agent(faulty, runtime, events, [])
    with pytest.raises(StorageError):
        agent.invoke("go", wait_seconds=10)
    assert store.list_executions(agent_id="a") == [] and provider.requests == []
    assert events.types() == ["error"]
    assert agent.invoke("again", wait_seconds=10).status == "completed"


def test_an_unprovable_tool_barrier_fails_closed_until_an_operator_answers(
    store: Any, runtime: Any, events: Events, monkeypatch: Any
) -> None:
    faulty = FaultInjectingStore(store, [Fault(FaultKind.LOST_RESPONSE, barrier="tool_dispatch")])
    monkeypatch.setattr(
        store, "reconcile", lambda commit: (_ for _ in ()).throw(StorageError("read-back failed"))
    )
    log: list[Any] = []
    agent, provider = tool_agent(faulty, runtime, events, log)
    task = agent.invoke_async("go")
    event = events.wait_for("recovery_resolution_required")
    payload = event.payload
    assert payload["subject"]["type"] == "tool_invocation" and payload["allowed_outcomes"] == [
        "succeeded",
        "failed",
        "not_performed",
    ]
    assert log == [] and not task.done()
    with pytest.raises(AgentBusyError):
        agent.invoke("another", wait_seconds=5)
    assert agent.cancel() is False  # an operator must decide; cancel cannot skip that
    with pytest.raises(ConflictError):
        agent.resolve(
            event.execution_id,
            expected_revision=payload["execution_revision"] - 1,
            subject=payload["subject"],
            outcome="not_performed",
            wait_seconds=5,
        )
    with pytest.raises(RecoveryResolutionError, match="needs a result"):
        agent.resolve(
            event.execution_id,
            expected_revision=payload["execution_revision"],
            subject=payload["subject"],
            outcome="succeeded",
            wait_seconds=5,
        )
    monkeypatch.undo()
    with pytest.raises(RecoveryResolutionError, match="not performed"):
        agent.resolve(
            event.execution_id,
            expected_revision=payload["execution_revision"],
            subject=payload["subject"],
            outcome="not_performed",
            wait_seconds=10,
        )
    with pytest.raises(RecoveryResolutionError):
        task.result(5)
    stored = store.load_execution(event.execution_id)
    assert stored.status is ExecutionStatus.FAILED and log == []  # never re-sent
    assert barrier_names(store, event.execution_id)[-2:] == [
        "recovery_resolution",
        "terminal_commit",
    ]
    assert len(provider.requests) == 1
    conversation_survives(store, agent, provider)


def test_an_unprovable_provider_barrier_resolved_with_the_llm_answer(
    store: Any, runtime: Any, events: Events, monkeypatch: Any
) -> None:
    faulty = FaultInjectingStore(
        store, [Fault(FaultKind.LOST_RESPONSE, barrier="provider_dispatch")]
    )
    monkeypatch.setattr(
        store, "reconcile", lambda commit: (_ for _ in ()).throw(StorageError("read-back failed"))
    )
    log: list[Any] = []
    agent, provider = tool_agent(faulty, runtime, events, log, answer="the scripted answer")
    task = agent.invoke_async("go")
    event = events.wait_for("recovery_resolution_required")
    monkeypatch.undo()
    subject = event.payload["subject"]
    assert subject["type"] == "llm_call"
    result = agent.resolve(
        event.execution_id,
        expected_revision=event.payload["execution_revision"],
        subject=subject,
        outcome="succeeded",
        result={"content": "answer supplied by the operator"},
        wait_seconds=10,
    )
    assert result.output == "answer supplied by the operator" and task.result(5) == result
    assert len(provider.requests) == 1  # the unknown call was never re-sent
    assert len(log) == 1
    stored = store.load_execution(event.execution_id)
    assert stored.status is ExecutionStatus.COMPLETED
    assert_revisions_consistent(store, event.execution_id)
    conversation_survives(store, agent, provider)


def test_a_terminal_commit_that_cannot_be_proven_keeps_the_caller_waiting(
    store: Any, runtime: Any, events: Events, monkeypatch: Any
) -> None:
    faulty = FaultInjectingStore(store, [Fault(FaultKind.COMMIT_FAILS, barrier="terminal_commit")])
    monkeypatch.setattr(
        store, "reconcile", lambda commit: (_ for _ in ()).throw(StorageError("read-back failed"))
    )
    agent = Agent.create(
        "a",
        store=faulty,
        provider=ScriptedProvider([Reply(content="hello")]),
        runtime=runtime,
        on_event=events,
    )
    task = agent.invoke_async("hi")
    request = events.wait_for("recovery_resolution_required").payload
    assert not task.done() and "done" not in events.types()  # nobody is told "completed"
    assert store.list_executions(agent_id="a")[0].is_active
    monkeypatch.undo()
    # the store still shows the LLM call as possibly made: the operator answers with it
    assert request["subject"]["type"] == "llm_call"
    result = agent.resolve(
        request["execution_id"],
        expected_revision=request["execution_revision"],
        subject=request["subject"],
        outcome="succeeded",
        result="hello",
        wait_seconds=10,
    )
    assert result.output == "hello" and task.result(5) == result
    conversation_survives(store, agent, None)
