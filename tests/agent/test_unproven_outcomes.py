"""After a barrier whose outcome could not be proven (lost response, failed read-back),
the agent acts on what the store actually holds (issue 11 items 4, 5, 10d, 10f):

- the conversation it journals afterwards has every message once, so the agent's
  next execution is not refused by the LLM;
- a suspension that did commit waits for approval, a terminal commit that did commit
  is delivered, an admission that did not commit fails the caller, a continuation the
  store allows goes on — none leaves a request nobody can answer or a caller waiting;
- an operator's LLM answer that hands off is a handoff; an operator's failure text is
  kept when a restart finishes the execution;
- resolving an execution that already finished says so.

Real components: a SQLite file store (faults injected by FaultInjectingStore, read-back
failures by making the store's ``reconcile`` raise), the runtime's loop and workers.
"""

from __future__ import annotations

from typing import Any

import pytest

from phronomy_fsm.agent import Agent, AgentRuntime, Reply, ScriptedProvider
from phronomy_fsm.agent.recovery import resolution_commit
from phronomy_fsm.agent.types import Resolution
from phronomy_fsm.errors import OutcomeUnknownError, RecoveryResolutionError, StorageError
from phronomy_fsm.store import Fault, FaultInjectingStore, FaultKind, SqliteBarrierStore
from phronomy_fsm.store.records import ExecutionStatus

from .conftest import Events, StrictProvider, assert_stored_conversation_is_legal, make_tool


def _readback_fails(monkeypatch: pytest.MonkeyPatch, store: SqliteBarrierStore) -> None:
    def refuse(commit: Any) -> str:
        raise StorageError("read-back failed (injected)")

    monkeypatch.setattr(store, "reconcile", refuse)


def _tool_agent(
    store: Any, runtime: Any, events: Events, *, approval: bool = False, **options: Any
) -> tuple[Agent, StrictProvider]:
    provider = StrictProvider(
        [Reply(tool_calls=(("lookup", {"q": "x"}),)), Reply(content="answer")]
    )
    agent = Agent.create(
        "a",
        store=store,
        runtime=runtime,
        provider=provider,
        tools=[make_tool(requires_approval=approval)],
        on_event=events,
        **options,
    )
    return agent, provider


def _second_invoke_succeeds(agent: Agent, provider: StrictProvider) -> None:
    provider.inner.script[:] = [Reply(content="second answer")]
    result = agent.invoke("and now?", wait_seconds=10)
    assert result.output == "second answer"
    assert provider.requests[-1].messages[-1].content == "and now?"


@pytest.mark.parametrize(
    ("barrier", "subject_type", "answer"),
    [
        ("tool_dispatch", "tool_invocation", {"ok": True, "ran": "by the operator"}),
        ("provider_dispatch", "llm_call", {"content": "answer from the operator"}),
    ],
)
def test_an_operator_answer_after_an_unproven_barrier_journals_each_message_once(
    store: SqliteBarrierStore,
    runtime: AgentRuntime,
    events: Events,
    monkeypatch: pytest.MonkeyPatch,
    barrier: str,
    subject_type: str,
    answer: Any,
) -> None:
    faulty = FaultInjectingStore(store, [Fault(FaultKind.LOST_RESPONSE, barrier=barrier)])
    _readback_fails(monkeypatch, store)
    agent, provider = _tool_agent(faulty, runtime, events)
    task = agent.invoke_async("go")
    request = events.wait_for("recovery_resolution_required").payload
    monkeypatch.undo()
    assert request["subject"]["type"] == subject_type and request["allowed_outcomes"]
    result = agent.resolve(
        request["execution_id"],
        expected_revision=request["execution_revision"],
        subject=request["subject"],
        outcome="succeeded",
        result=answer,
        wait_seconds=10,
    )
    assert result.status == "completed" and task.result(5) == result
    assert_stored_conversation_is_legal(store, "a")
    _second_invoke_succeeds(agent, provider)
    assert_stored_conversation_is_legal(store, "a")


def test_a_suspension_that_committed_waits_for_approval(
    store: SqliteBarrierStore,
    runtime: AgentRuntime,
    events: Events,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    faulty = FaultInjectingStore(store, [Fault(FaultKind.LOST_RESPONSE, barrier="suspension")])
    _readback_fails(monkeypatch, store)
    agent, provider = _tool_agent(faulty, runtime, events, approval=True)
    task = agent.invoke_async("go")
    request = events.wait_for("approval_required").payload["request"]
    monkeypatch.undo()
    assert "recovery_resolution_required" not in events.types()
    assert store.load_execution(request["execution_id"]).status is ExecutionStatus.SUSPENDED
    result = agent.approve(request["execution_id"], approval_request_id=request["id"])
    assert result.output == "answer" and task.result(5) == result
    assert_stored_conversation_is_legal(store, "a")
    _second_invoke_succeeds(agent, provider)


def test_a_terminal_commit_that_committed_is_delivered(
    store: SqliteBarrierStore,
    runtime: AgentRuntime,
    events: Events,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    faulty = FaultInjectingStore(store, [Fault(FaultKind.LOST_RESPONSE, barrier="terminal_commit")])
    _readback_fails(monkeypatch, store)
    agent, provider = _tool_agent(faulty, runtime, events)
    result = agent.invoke("go", wait_seconds=10)
    monkeypatch.undo()
    assert result.status == "completed" and result.output == "answer"
    assert events.types()[-1] == "done"
    assert "recovery_resolution_required" not in events.types()
    assert store.load_execution(result.execution_id).status is ExecutionStatus.COMPLETED
    assert_stored_conversation_is_legal(store, "a")
    _second_invoke_succeeds(agent, provider)


def test_an_admission_that_did_not_commit_fails_the_caller_and_frees_the_agent(
    store: SqliteBarrierStore,
    runtime: AgentRuntime,
    events: Events,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    faulty = FaultInjectingStore(store, [Fault(FaultKind.COMMIT_FAILS, barrier="admission")])
    _readback_fails(monkeypatch, store)
    agent, provider = _tool_agent(faulty, runtime, events)
    with pytest.raises(OutcomeUnknownError):
        agent.invoke("go", wait_seconds=10)
    monkeypatch.undo()
    assert store.list_executions(agent_id="a") == [] and provider.requests == []
    assert "recovery_resolution_required" not in events.types()
    assert agent.invoke("again", wait_seconds=10).status == "completed"


@pytest.mark.parametrize("barrier", ["admission", "approval_decision"])
def test_a_commit_the_store_shows_continues_like_a_restart_would(
    store: SqliteBarrierStore,
    runtime: AgentRuntime,
    events: Events,
    monkeypatch: pytest.MonkeyPatch,
    barrier: str,
) -> None:
    faulty = FaultInjectingStore(store, [Fault(FaultKind.LOST_RESPONSE, barrier=barrier)])
    agent, provider = _tool_agent(faulty, runtime, events, approval=True)
    if barrier == "admission":
        _readback_fails(monkeypatch, store)
    task = agent.invoke_async("go")
    request = events.wait_for("approval_required").payload["request"]
    if barrier == "approval_decision":
        _readback_fails(monkeypatch, store)
    approved = agent.approve_async(request["execution_id"], approval_request_id=request["id"])
    result = task.result(10)
    monkeypatch.undo()
    assert result.output == "answer" and approved.result(5) == result
    assert "recovery_resolution_required" not in events.types()
    assert_stored_conversation_is_legal(store, "a")
    _second_invoke_succeeds(agent, provider)


def test_an_operator_answer_that_hands_off_is_a_handoff(
    store: SqliteBarrierStore,
    runtime: AgentRuntime,
    events: Events,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    faulty = FaultInjectingStore(
        store,
        [Fault(FaultKind.LOST_RESPONSE, barrier="initial_preparation", predicate=_of_agent("a"))],
    )
    billing_events = Events()
    Agent.create(
        "billing",
        store=faulty,  # the same store object: the runtime starts the target itself
        runtime=runtime,
        provider=ScriptedProvider([Reply("billing")]),
        on_event=billing_events,
    )
    _readback_fails(monkeypatch, store)
    agent = Agent.create(
        "a",
        store=faulty,
        runtime=runtime,
        provider=ScriptedProvider([Reply(content="never asked")]),
        handoffs={"transfer_to_billing": "billing"},
        on_event=events,
    )
    task = agent.invoke_async("an invoice question")
    request = events.wait_for("recovery_resolution_required").payload
    monkeypatch.undo()
    result = agent.resolve(
        request["execution_id"],
        expected_revision=request["execution_revision"],
        subject=request["subject"],
        outcome="succeeded",
        result={"tool_calls": [{"name": "transfer_to_billing", "arguments": {"message": "inv"}}]},
        wait_seconds=10,
    )
    assert result.status == "handed_off" and task.result(5) == result
    assert result.handoff is not None and result.handoff["target_agent_id"] == "billing"
    assert store.load_execution(result.execution_id).status is ExecutionStatus.HANDED_OFF
    assert events.types()[-1] == "handoff"
    started = billing_events.wait_for("done")  # the target runs under its deterministic id
    assert started.execution_id == result.handoff["target_execution_id"]
    assert store.load_execution(started.execution_id).input == "inv"


def _of_agent(agent_id: str) -> Any:
    return lambda commit: commit.execution.agent_id == agent_id


def _parked_by_an_unproven_first_call(
    tmp_path: Any, events: Events, **options: Any
) -> tuple[str, dict[str, Any]]:
    """An execution parked in recovery_required about its first LLM call; the runtime
    that ran it is closed. Returns the store path and the resolution request."""
    path = str(tmp_path / "restart.db")
    store = SqliteBarrierStore(path)
    runtime = AgentRuntime(max_workers=2)
    faulty = FaultInjectingStore(
        store, [Fault(FaultKind.LOST_RESPONSE, barrier="initial_preparation")]
    )
    store.reconcile = lambda commit: (_ for _ in ()).throw(StorageError("read-back failed"))  # type: ignore[method-assign]
    Agent.create(
        "a",
        store=faulty,
        runtime=runtime,
        provider=ScriptedProvider([Reply(content="never asked")]),
        on_event=events,
        **options,
    ).invoke_async("an invoice question")
    request = events.wait_for("recovery_resolution_required").payload
    runtime.close(timeout_seconds=5)
    store.close()
    return path, request


def _commit_resolution(path: str, request: dict[str, Any], **answer: Any) -> None:
    """What an operator's `resolve` process commits before it is killed: only the
    resolution barrier (the restart then finishes the execution)."""
    with SqliteBarrierStore(path) as store:
        execution = store.load_execution(request["execution_id"])
        commit = resolution_commit(
            execution,
            store.load_agent("a"),
            Resolution(
                request["execution_id"],
                request["execution_revision"],
                request["subject"],
                **answer,
            ),
            execution.updated_at,
        )
        store.commit(commit)


def test_a_handoff_answered_by_an_operator_is_a_handoff_after_a_restart(
    tmp_path: Any, events: Events
) -> None:
    handoffs = {"transfer_to_billing": "billing"}
    path, request = _parked_by_an_unproven_first_call(tmp_path, events, handoffs=handoffs)
    _commit_resolution(
        path,
        request,
        outcome="succeeded",
        result={"tool_calls": [{"name": "transfer_to_billing", "arguments": {"message": "inv"}}]},
    )
    runtime = AgentRuntime(max_workers=2)
    try:
        agent = Agent.load(
            "a",
            store=path,
            runtime=runtime,
            provider=ScriptedProvider([Reply(content="never asked")]),
            handoffs=handoffs,
            on_event=events,
        )
        assert agent.recovered is not None
        result = agent.recovered.result(10)
        assert result.status == "handed_off"
        assert result.handoff is not None and result.handoff["target_agent_id"] == "billing"
    finally:
        runtime.close(timeout_seconds=5)


def test_an_operator_failure_text_is_kept_after_a_restart(tmp_path: Any, events: Events) -> None:
    path, request = _parked_by_an_unproven_first_call(tmp_path, events)
    _commit_resolution(path, request, outcome="failed", error="the provider billed it twice")
    runtime = AgentRuntime(max_workers=2)
    try:
        agent = Agent.load(
            "a",
            store=path,
            runtime=runtime,
            provider=ScriptedProvider([Reply(content="never asked")]),
            on_event=events,
        )
        assert agent.recovered is not None
        with pytest.raises(RecoveryResolutionError, match="billed it twice"):
            agent.recovered.result(10)
    finally:
        runtime.close(timeout_seconds=5)
    with SqliteBarrierStore(path) as store:
        stored = store.load_execution(request["execution_id"])
    assert stored.status is ExecutionStatus.FAILED
    assert stored.error is not None and "billed it twice" in stored.error.message


def test_resolving_an_execution_that_already_finished_says_so(
    store: SqliteBarrierStore,
    runtime: AgentRuntime,
    events: Events,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    faulty = FaultInjectingStore(store, [Fault(FaultKind.LOST_RESPONSE, barrier="tool_dispatch")])
    _readback_fails(monkeypatch, store)
    agent, _ = _tool_agent(faulty, runtime, events)
    agent.invoke_async("go")
    request = events.wait_for("recovery_resolution_required").payload
    monkeypatch.undo()
    answer = {
        "expected_revision": request["execution_revision"],
        "subject": request["subject"],
        "outcome": "not_performed",
        "wait_seconds": 10,
    }
    with pytest.raises(RecoveryResolutionError, match="not performed"):
        agent.resolve(request["execution_id"], **answer)  # ends it as failed
    with pytest.raises(RecoveryResolutionError, match="already finished") as again:
        agent.resolve(request["execution_id"], **answer)
    assert "failed" in str(again.value) and "in this process" not in str(again.value)
