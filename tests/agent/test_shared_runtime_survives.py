"""A listener raising any ``BaseException`` ends at most its own execution, never the
runtime every agent shares; and if the runtime's loop does fail, callers are told
instead of waiting for ever (issue 11 item 3).

Real components: a SQLite file store, the runtime's loop and worker threads.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from phronomy_fsm.agent import Agent, AgentEvent, AgentRuntime, Reply, ScriptedProvider
from phronomy_fsm.errors import Cancelled, DispatcherStoppedError, StreamCallbackError
from phronomy_fsm.runtime.clock import SystemClock
from phronomy_fsm.store import SqliteBarrierStore
from phronomy_fsm.store.records import ExecutionStatus

from .conftest import Events, make_tool

RAISED = [
    pytest.param(lambda: Cancelled("listener"), id="Cancelled"),
    pytest.param(GeneratorExit, id="GeneratorExit"),
    pytest.param(type("Odd", (BaseException,), {}), id="bare-BaseException"),
]


def _raising_on(event_type: str, make: Any) -> Any:
    def listener(event: AgentEvent) -> None:
        if event.type == event_type:
            raise make()

    return listener


def _bystander(store: Any, runtime: AgentRuntime) -> Agent:
    return Agent.create(
        "bystander",
        store=store,
        runtime=runtime,
        provider=ScriptedProvider([Reply(content="still here")]),
    )


@pytest.mark.parametrize("make", RAISED)
def test_a_listener_raising_on_the_terminal_event_is_reported(
    store: SqliteBarrierStore, runtime: AgentRuntime, make: Any
) -> None:
    agent = Agent.create(
        "a",
        store=store,
        runtime=runtime,
        provider=ScriptedProvider([Reply(content="hello")]),
        on_event=_raising_on("done", make),
    )
    result = agent.invoke("hi", wait_seconds=10)  # the terminal event's error is reported
    assert result.status == "completed" and result.output == "hello"
    assert runtime.dispatcher.lifecycle == "running"
    assert _bystander(store, runtime).invoke("hi", wait_seconds=10).output == "still here"
    assert agent.invoke("again", wait_seconds=10).status == "completed"


@pytest.mark.parametrize("make", RAISED)
def test_a_listener_raising_mid_run_fails_only_its_execution(
    store: SqliteBarrierStore, runtime: AgentRuntime, make: Any
) -> None:
    agent = Agent.create(
        "a",
        store=store,
        runtime=runtime,
        provider=ScriptedProvider(
            [Reply(tool_calls=(("lookup", {"q": "x"}),)), Reply(content="done")]
        ),
        tools=[make_tool()],
        on_event=_raising_on("tool_call", make),
    )
    with pytest.raises(StreamCallbackError):
        agent.invoke("go", wait_seconds=10)
    execution = store.list_executions(agent_id="a")[0]
    assert execution.status is ExecutionStatus.FAILED
    assert runtime.dispatcher.lifecycle == "running"
    assert _bystander(store, runtime).invoke("hi", wait_seconds=10).output == "still here"


@pytest.mark.parametrize("make", RAISED)
def test_a_listener_raising_on_approval_required_leaves_the_execution_waiting(
    store: SqliteBarrierStore, runtime: AgentRuntime, make: Any
) -> None:
    seen: list[AgentEvent] = []
    ready = threading.Event()

    def listener(event: AgentEvent) -> None:
        seen.append(event)
        if event.type == "approval_required":
            ready.set()
            raise make()

    agent = Agent.create(
        "a",
        store=store,
        runtime=runtime,
        provider=ScriptedProvider(
            [Reply(tool_calls=(("refund", {"q": "x"}),)), Reply(content="refunded")]
        ),
        tools=[make_tool("refund", requires_approval=True)],
        on_event=listener,
    )
    task = agent.invoke_async("refund")
    assert ready.wait(10)
    request = next(e for e in seen if e.type == "approval_required").payload["request"]
    assert _bystander(store, runtime).invoke("hi", wait_seconds=10).output == "still here"
    result = agent.approve(request["execution_id"], approval_request_id=request["id"])
    assert result.output == "refunded" and task.result(10) == result


class BreakableClock(SystemClock):
    """The system clock, until told to raise from ``monotonic`` on the loop thread."""

    def __init__(self) -> None:
        self.broken = threading.Event()

    def monotonic(self) -> float:
        if self.broken.is_set() and threading.current_thread().name == "breakable-loop":
            raise Cancelled("the clock broke")
        return super().monotonic()


def test_when_the_runtime_loop_fails_every_caller_gets_an_error(tmp_path: Any) -> None:
    clock = BreakableClock()
    runtime = AgentRuntime(max_workers=2, clock=clock, name="breakable")
    store = SqliteBarrierStore(tmp_path / "agents.db")
    events = Events()
    try:
        agent = Agent.create(
            "a",
            store=store,
            runtime=runtime,
            provider=ScriptedProvider(
                [Reply(tool_calls=(("refund", {"q": "x"}),)), Reply(content="refunded")]
            ),
            tools=[make_tool("refund", requires_approval=True)],
            on_event=events,
        )
        suspended = agent.invoke_async("refund")
        events.wait_for("approval_required")
        clock.broken.set()
        runtime.dispatcher.call_soon(lambda: None)  # wakes the loop onto the broken clock
        with pytest.raises(DispatcherStoppedError, match="load the agent"):
            suspended.result(10)
        with pytest.raises(DispatcherStoppedError):
            agent.invoke("another", wait_seconds=10)
        with pytest.raises(DispatcherStoppedError):
            agent.cancel(wait_seconds=10)
        # the suspended execution is durable: a new runtime loads and approves it
        fresh = AgentRuntime(max_workers=2)
        try:
            again = Agent.load(
                "a",
                store=store,
                runtime=fresh,
                provider=ScriptedProvider(
                    [Reply(tool_calls=(("refund", {"q": "x"}),)), Reply(content="refunded")]
                ),
                tools=[make_tool("refund", requires_approval=True)],
                on_event=events,
            )
            request = events.wait_for("approval_required", count=2).payload["request"]
            result = again.approve(request["execution_id"], approval_request_id=request["id"])
            assert result.output == "refunded"
        finally:
            fresh.close(timeout_seconds=5)
    finally:
        runtime.close(timeout_seconds=2)
        store.close()
