"""Callers are never left waiting on an execution this process no longer runs, and a
cancel that returned True takes effect (issue 11 items 6 and 7):

- closing the runtime (or the agent) while an execution is suspended, waits for an
  operator or is still running fails the caller's task with ExecutionDetachedError,
  which names the execution and says how to continue it; the execution itself lives
  on in the store and continues after a load;
- ``cancel()`` during the approval-decision barrier is not forgotten when that commit
  does not happen; ``cancel()`` during the operator-resolution barrier ends the
  execution as cancelled once the operator's answer is durable.

Real components: a SQLite file store (faults by FaultInjectingStore; one barrier held
back by the test to cancel while it is in flight), the runtime's loop and workers.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Any

import pytest

from phronomy_fsm.agent import Agent, AgentRuntime, Reply, ScriptedProvider
from phronomy_fsm.errors import (
    AgentClosedError,
    Cancelled,
    ExecutionDetachedError,
    StorageError,
)
from phronomy_fsm.store import Fault, FaultInjectingStore, FaultKind, SqliteBarrierStore
from phronomy_fsm.store.records import BarrierCommit, CommitReceipt, ExecutionStatus

from .conftest import Events, assert_stored_conversation_is_legal, make_tool


def _provider() -> ScriptedProvider:
    return ScriptedProvider([Reply(tool_calls=(("refund", {"q": "x"}),)), Reply(content="done")])


def _approval_agent(store: Any, runtime: AgentRuntime, events: Events, log: list[Any]) -> Agent:
    return Agent.create(
        "a",
        store=store,
        runtime=runtime,
        provider=_provider(),
        tools=[make_tool("refund", requires_approval=True, log=log)],
        on_event=events,
    )


# ------------------------------------------------------------------- closing (item 6)


def test_closing_the_runtime_fails_a_suspended_callers_task_with_how_to_continue(
    store: SqliteBarrierStore, events: Events
) -> None:
    runtime = AgentRuntime(max_workers=2)
    log: list[Any] = []
    agent = _approval_agent(store, runtime, events, log)
    task = agent.invoke_async("refund")
    request = events.wait_for("approval_required").payload["request"]
    runtime.close(timeout_seconds=5)
    with pytest.raises(ExecutionDetachedError) as detached:
        task.result(10)
    error = detached.value
    assert error.execution_id == request["execution_id"] and error.agent_id == "a"
    message = str(error)
    assert request["execution_id"] in message and request["id"] in message
    assert "approve" in message and "Agent.load" in message and "lives on" in message
    assert store.load_execution(request["execution_id"]).status is ExecutionStatus.SUSPENDED
    fresh = AgentRuntime(max_workers=2)
    try:
        again = Agent.load(
            "a",
            store=store,
            runtime=fresh,
            provider=_provider(),
            tools=[make_tool("refund", requires_approval=True, log=log)],
            on_event=events,
        )
        result = again.approve(request["execution_id"], approval_request_id=request["id"])
        assert result.output == "done" and len(log) == 1
    finally:
        fresh.close(timeout_seconds=5)


def test_closing_the_runtime_fails_the_task_of_an_execution_waiting_for_an_operator(
    store: SqliteBarrierStore, events: Events, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = AgentRuntime(max_workers=2)
    faulty = FaultInjectingStore(store, [Fault(FaultKind.LOST_RESPONSE, barrier="tool_dispatch")])
    monkeypatch.setattr(
        store, "reconcile", lambda c: (_ for _ in ()).throw(StorageError("read-back failed"))
    )
    agent = Agent.create(
        "a",
        store=faulty,
        runtime=runtime,
        provider=_provider(),
        tools=[make_tool("refund")],
        on_event=events,
    )
    task = agent.invoke_async("refund")
    request = events.wait_for("recovery_resolution_required").payload
    runtime.close(timeout_seconds=5)
    with pytest.raises(ExecutionDetachedError, match="resolve") as detached:
        task.result(10)
    assert request["execution_id"] in str(detached.value)
    assert store.load_execution(request["execution_id"]).is_active


def test_closing_the_agent_fails_a_suspended_callers_task_then_a_load_continues(
    store: SqliteBarrierStore, runtime: AgentRuntime, events: Events
) -> None:
    log: list[Any] = []
    agent = _approval_agent(store, runtime, events, log)
    task = agent.invoke_async("refund")
    request = events.wait_for("approval_required").payload["request"]
    agent.close()
    with pytest.raises(ExecutionDetachedError, match="approve"):
        task.result(10)
    with pytest.raises(AgentClosedError):
        agent.approve(request["execution_id"], approval_request_id=request["id"])
    again = Agent.load(
        "a",
        store=store,
        runtime=runtime,
        provider=_provider(),
        tools=[make_tool("refund", requires_approval=True, log=log)],
        on_event=events,
    )
    assert (
        again.approve(request["execution_id"], approval_request_id=request["id"]).output == "done"
    )


def test_closing_the_runtime_while_a_tool_still_runs_fails_the_task(
    store: SqliteBarrierStore, events: Events
) -> None:
    runtime = AgentRuntime(max_workers=2)
    started, finish = threading.Event(), threading.Event()

    def slow(arguments: Any, context: Any) -> Any:
        started.set()
        finish.wait(30)
        return {"ok": True}

    agent = Agent.create(
        "a",
        store=store,
        runtime=runtime,
        provider=_provider(),
        tools=[make_tool("refund", fn=slow)],
        on_event=events,
    )
    task = agent.invoke_async("refund")
    assert started.wait(10)
    closer = threading.Thread(target=runtime.close, kwargs={"timeout_seconds": 0.5})
    closer.start()
    try:
        with pytest.raises(ExecutionDetachedError, match="running") as detached:
            task.result(30)
        assert "recover" in str(detached.value)
    finally:
        finish.set()
        closer.join(30)


# ------------------------------------------------------------------- cancel (item 7)


class HeldStore(FaultInjectingStore):
    """Holds back the group commits of one barrier until the test releases them (then
    the faults added to it apply as usual): a way to cancel while that barrier is in
    flight, with no timing involved."""

    def __init__(self, inner: Any, barrier: str) -> None:
        super().__init__(inner)
        self.barrier = barrier
        self.held = threading.Event()
        self.release = threading.Event()

    def submit(self, commit: BarrierCommit) -> Future[CommitReceipt]:
        if commit.barrier != self.barrier or self.release.is_set():
            return super().submit(commit)
        outer: Future[CommitReceipt] = Future()

        def later() -> None:
            self.held.set()
            self.release.wait(30)
            inner = FaultInjectingStore.submit(self, commit)

            def settle(done: Future[CommitReceipt]) -> None:
                error = done.exception()
                if error is not None:
                    outer.set_exception(error)
                else:
                    outer.set_result(done.result())

            inner.add_done_callback(settle)

        threading.Thread(target=later, daemon=True).start()
        return outer


def test_a_cancel_during_an_approval_decision_that_does_not_commit_takes_effect(
    store: SqliteBarrierStore, runtime: AgentRuntime, events: Events
) -> None:
    held = HeldStore(store, "approval_decision")
    held.add(FaultKind.FAIL_BEFORE, barrier="approval_decision")
    log: list[Any] = []
    agent = _approval_agent(held, runtime, events, log)
    task = agent.invoke_async("refund")
    request = events.wait_for("approval_required").payload["request"]
    approving = agent.approve_async(request["execution_id"], approval_request_id=request["id"])
    assert held.held.wait(10)
    assert agent.cancel() is True
    held.release.set()
    with pytest.raises(StorageError):
        approving.result(10)  # the decision did not commit
    with pytest.raises(Cancelled):
        task.result(10)  # ... and the cancel that returned True took effect
    assert store.load_execution(request["execution_id"]).status is ExecutionStatus.CANCELLED
    assert log == [] and agent.cancel() is False
    assert events.types()[-1] == "cancelled"


def _parked(
    held: HeldStore,
    store: SqliteBarrierStore,
    runtime: AgentRuntime,
    events: Events,
    barrier: str = "tool_dispatch",
) -> tuple[Agent, ScriptedProvider, Any, dict[str, Any]]:
    """An execution parked in recovery_required because ``barrier``'s response was lost
    and could not be read back: about its tool call (``tool_dispatch``) or about its
    follow-up LLM call (``provider_dispatch``)."""
    held.add(FaultKind.LOST_RESPONSE, barrier=barrier)
    original = store.reconcile
    store.reconcile = lambda c: (_ for _ in ()).throw(StorageError("read-back failed"))  # type: ignore[method-assign]
    provider = _provider()
    agent = Agent.create(
        "a",
        store=held,
        runtime=runtime,
        provider=provider,
        tools=[make_tool("refund")],
        on_event=events,
    )
    task = agent.invoke_async("refund")
    request = events.wait_for("recovery_resolution_required").payload
    store.reconcile = original  # type: ignore[method-assign]
    return agent, provider, task, request


ANSWERS = {"tool_invocation": {"refunded": True}, "llm_call": {"content": "all done"}}


def _answer(agent: Agent, request: dict[str, Any]) -> Any:
    return agent.resolve_async(
        request["execution_id"],
        expected_revision=request["execution_revision"],
        subject=request["subject"],
        outcome="succeeded",
        result=ANSWERS[request["subject"]["type"]],
    )


@pytest.mark.parametrize("barrier", ["tool_dispatch", "provider_dispatch"])
def test_a_cancel_during_a_resolution_ends_the_execution_once_the_answer_is_durable(
    store: SqliteBarrierStore, runtime: AgentRuntime, events: Events, barrier: str
) -> None:
    """With the LLM's final answer supplied by the operator nothing else would stop
    the execution: it would complete although cancel() returned True."""
    held = HeldStore(store, "recovery_resolution")
    agent, provider, task, request = _parked(held, store, runtime, events, barrier)
    resolving = _answer(agent, request)
    assert held.held.wait(10)
    assert agent.cancel() is True
    held.release.set()
    with pytest.raises(Cancelled):
        task.result(10)
    with pytest.raises(Cancelled):
        resolving.result(10)
    stored = store.load_execution(request["execution_id"])
    assert stored.status is ExecutionStatus.CANCELLED and stored.output is None
    assert len(provider.requests) == 1  # no LLM call after the operator's answer
    kept = [
        r.content
        for r in store.read_journal("a", execution_id=request["execution_id"])
        if r.kind in ("tool_result", "assistant_message")
    ]
    assert ANSWERS[request["subject"]["type"]] in [
        kept[-1].get("result"),
        {"content": kept[-1].get("content")},
    ]  # the operator's answer is durable
    assert agent.cancel() is False
    assert_stored_conversation_is_legal(store, "a")


def test_a_cancel_during_a_resolution_that_does_not_commit_waits_for_the_answer(
    store: SqliteBarrierStore, runtime: AgentRuntime, events: Events
) -> None:
    held = HeldStore(store, "recovery_resolution")
    held.add(FaultKind.FAIL_BEFORE, barrier="recovery_resolution", nth=1)
    # about the follow-up LLM call: its answer would complete the execution at once
    agent, provider, task, request = _parked(held, store, runtime, events, "provider_dispatch")
    resolving = _answer(agent, request)
    assert held.held.wait(10)
    assert agent.cancel() is True
    held.release.set()
    with pytest.raises(StorageError):
        resolving.result(10)
    again = events.wait_for("recovery_resolution_required", count=2).payload
    assert again["facts"]["cancel_requested"] == "cancelled" and not task.done()
    with pytest.raises(Cancelled):
        _answer(agent, again).result(10)
    with pytest.raises(Cancelled):
        task.result(10)
    assert store.load_execution(request["execution_id"]).status is ExecutionStatus.CANCELLED
    assert len(provider.requests) == 1
