"""When an agent's store claim is released inside one process (docs/operations.md
"Who owns an agent"): ``Agent.close`` waits for running executions, ``AgentRuntime.close``
releases its agents, a closed agent that gave its claim up refuses approvals, and
several runtimes of one process share the claim. Cross-process behaviour is in
``tests/integration/test_agent_ownership.py``."""

from __future__ import annotations

import threading
import time
from typing import Any

from phronomy_fsm.agent import Agent, AgentRuntime, Reply, ScriptedProvider
from phronomy_fsm.errors import AgentClosedError
from phronomy_fsm.store.ownership import current_process

from .conftest import Events, make_tool


def wait_until(condition: Any, timeout_seconds: float = 10.0) -> None:
    """Wait for a release that runs on the runtime's pool after a session ended."""
    end = time.monotonic() + timeout_seconds
    while not condition():
        assert time.monotonic() < end, "condition not met in time"
        time.sleep(0.01)


def test_close_keeps_the_claim_while_an_execution_runs(store: Any, events: Events) -> None:
    # two workers: the tool blocks one; anything else queued runs on the other, in order
    runtime = AgentRuntime(max_workers=2)
    gate, started = threading.Event(), threading.Event()

    def slow(arguments: Any, context: Any) -> Any:
        started.set()
        gate.wait(30)
        return {"ok": True}

    provider = ScriptedProvider([Reply(tool_calls=(("lookup", {"q": "x"}),)), Reply(content="ok")])
    agent = Agent.create(
        "a",
        store=store,
        provider=provider,
        runtime=runtime,
        on_event=events,
        tools=[make_tool(fn=slow)],
    )
    try:
        task = agent.invoke_async("go")
        assert started.wait(10)
        agent.close()
        runtime.dispatcher.call(lambda: None).result(10)  # close's release check has run
        probe = threading.Event()
        runtime.pool.submit(probe.set)
        assert probe.wait(10)  # time for a release wrongly started by close to land
        owner = store.agent_owner("a")
        assert owner is not None and owner.process == current_process()
        gate.set()
        assert task.result(10).status == "completed"
        wait_until(lambda: store.agent_owner("a") is None)
    finally:
        gate.set()
        runtime.close(timeout_seconds=5)


def test_close_of_an_idle_agent_releases_even_when_every_worker_is_busy(
    store: Any, events: Events
) -> None:
    # the release must not queue behind another agent's long tool call
    runtime = AgentRuntime(max_workers=1)
    gate, started = threading.Event(), threading.Event()

    def slow(arguments: Any, context: Any) -> Any:
        started.set()
        gate.wait(30)
        return {"ok": True}

    busy = Agent.create(
        "busy",
        store=store,
        provider=ScriptedProvider(
            [Reply(tool_calls=(("lookup", {"q": "x"}),)), Reply(content="ok")]
        ),
        runtime=runtime,
        on_event=events,
        tools=[make_tool(fn=slow)],
    )
    idle = Agent.create(
        "idle",
        store=store,
        provider=ScriptedProvider([Reply(content="unused")]),
        runtime=runtime,
        on_event=Events(),
    )
    try:
        task = busy.invoke_async("go")
        assert started.wait(10)
        assert store.agent_owner("idle") is not None
        idle.close()
        assert store.agent_owner("idle") is None  # released before close returned
        assert store.agent_owner("busy") is not None
        gate.set()
        assert task.result(10).status == "completed"
    finally:
        gate.set()
        runtime.close(timeout_seconds=5)


def test_close_releases_a_suspended_agent_and_the_closed_object_refuses_to_approve(
    store: Any, runtime: AgentRuntime, events: Events
) -> None:
    provider = ScriptedProvider(
        [Reply(tool_calls=(("refund", {"q": "1"}),)), Reply(content="refunded")]
    )
    options = {"provider": provider, "tools": [make_tool("refund", requires_approval=True)]}
    agent = Agent.create("a", store=store, runtime=runtime, on_event=events, **options)
    agent.invoke_async("refund please")
    request = events.wait_for("approval_required").payload["request"]
    wait_until(lambda: store.load_execution(request["execution_id"]).status.value == "suspended")
    wait_until(lambda: all(ctx.session_id is None for ctx in agent._live.values()))
    agent.close()
    assert store.agent_owner("a") is None  # released before close returned
    refused = agent.approve_async(request["execution_id"], approval_request_id=request["id"])
    assert isinstance(refused.error(10), AgentClosedError)
    assert store.load_execution(request["execution_id"]).status.value == "suspended"
    again = Agent.load("a", store=store, runtime=runtime, on_event=Events(), **options)
    assert again is not agent and store.agent_owner("a") is not None
    result = again.approve(
        request["execution_id"], approval_request_id=request["id"], wait_seconds=10
    )
    assert result.status == "completed"


def test_runtime_close_releases_its_agents_and_runtimes_of_one_process_share_a_claim(
    store: Any,
) -> None:
    first, second = AgentRuntime(max_workers=2), AgentRuntime(max_workers=2)
    provider = ScriptedProvider([Reply(content="x")])
    Agent.create("a", store=store, provider=provider, runtime=first)
    Agent.load("a", store=store, provider=provider, runtime=second)  # same process: re-entered
    assert store.agent_owner("a").holds == 2  # type: ignore[union-attr]
    first.close(timeout_seconds=5)
    assert store.agent_owner("a").holds == 1  # type: ignore[union-attr]
    second.close(timeout_seconds=5)
    assert store.agent_owner("a") is None
