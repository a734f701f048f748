"""The Agent API's forms and its misuse: asyncio, threads, load/create rules, a store
that is not a database, a restart between suspension and approval (issue 5 item 1,
"Bad input and misuse"; reference §8.1)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from phronomy_fsm.agent import Agent, AgentRuntime, Reply, ScriptedProvider
from phronomy_fsm.errors import (
    AgentClosedError,
    ConfigurationError,
    NotFoundError,
    StorageError,
    StoreError,
    WrongThreadError,
)
from phronomy_fsm.store import SqliteBarrierStore
from phronomy_fsm.store.records import ExecutionStatus

from .conftest import Events, make_tool


def test_invoke_async_can_be_awaited(store: Any, runtime: Any) -> None:
    agent = Agent.create(
        "a", store=store, provider=ScriptedProvider([Reply(content="async!")]), runtime=runtime
    )

    async def main() -> str:
        results = await asyncio.gather(agent.invoke_async("one"))
        return results[0].output

    assert asyncio.run(main()) == "async!"


def test_invocations_from_many_threads_on_many_agents(store: Any, runtime: Any) -> None:
    agents = [
        Agent.create(
            f"a{i}",
            store=store,
            provider=ScriptedProvider([Reply(content=f"hi {i}")]),
            runtime=runtime,
        )
        for i in range(8)
    ]
    outputs: dict[int, list[str]] = {}

    def work(i: int) -> None:
        outputs[i] = [agents[i].invoke(f"go {n}", wait_seconds=20).output for n in range(3)]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert outputs == {i: [f"hi {i}"] * 3 for i in range(8)}
    assert len(store.list_executions(status="completed")) == 24


def test_blocking_calls_are_refused_on_the_loop_thread(store: Any, runtime: Any) -> None:
    agent = Agent.create(
        "a", store=store, provider=ScriptedProvider([Reply(content="x")]), runtime=runtime
    )
    outcome = runtime.dispatcher.call(lambda: agent.invoke("nested", wait_seconds=1))
    with pytest.raises(WrongThreadError):
        outcome.result(10)


def test_load_rules(store: Any, runtime: Any, events: Events) -> None:
    provider = ScriptedProvider([Reply(content="x")])
    with pytest.raises(NotFoundError):
        Agent.load("ghost", store=store, provider=provider, runtime=runtime)
    agent = Agent.create("a", store=store, provider=provider, runtime=runtime, on_event=events)
    assert (
        Agent.load("a", store=store, provider=provider, runtime=runtime) is agent
    )  # the live owner
    with pytest.raises(ConfigurationError, match="already live"):
        Agent.load("a", store=store, provider=provider, runtime=runtime, on_event=lambda e: None)
    with pytest.raises(ConfigurationError):
        Agent.create(
            "b", store=store, provider=provider, runtime=runtime, listener_error_policy="shout"
        )
    with pytest.raises(ConfigurationError):
        Agent.create(
            "c", store=store, provider=provider, runtime=runtime, tools=[make_tool(), make_tool()]
        )
    with pytest.raises(ConfigurationError):
        Agent.create("", store=store, provider=provider, runtime=runtime)
    silent = Agent.create("d", store=store, provider=provider, runtime=runtime)
    with pytest.raises(ConfigurationError, match="listener"):
        silent.stream_async("no listener")
    agent.close()
    with pytest.raises(AgentClosedError):
        agent.invoke("closed", wait_seconds=5)


def test_a_store_file_that_is_not_a_database_is_refused_unchanged(
    tmp_path: Path, runtime: Any
) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("hello, I am not SQLite" * 50)
    before = path.read_bytes()
    with pytest.raises(StoreError):
        Agent.create(
            "a", store=str(path), provider=ScriptedProvider([Reply(content="x")]), runtime=runtime
        )
    assert path.read_bytes() == before
    with pytest.raises((StorageError, StoreError)):
        SqliteBarrierStore(path)


def test_restart_between_suspension_and_approval(tmp_path: Path, events: Events) -> None:
    db = tmp_path / "restart.db"
    log: list[Any] = []

    def build(runtime: Any, listener: Any) -> Agent:
        return Agent.load(
            "a",
            store=SqliteBarrierStore(db),
            provider=ScriptedProvider(
                [Reply(tool_calls=(("refund", {"q": "1"}),)), Reply(content="refunded")]
            ),
            runtime=runtime,
            tools=[make_tool("refund", requires_approval=True, log=log)],
            on_event=listener,
        )

    first = AgentRuntime()
    store = SqliteBarrierStore(db)
    Agent.create(
        "a", store=store, provider=ScriptedProvider([Reply(content="unused")]), runtime=first
    ).close()
    agent = build(first, events)
    task = agent.invoke_async("refund")
    event = events.wait_for("approval_required")
    first.close()  # the process "ends"; the caller's task is process-local
    assert not task.done() or task.status != "completed"

    second = AgentRuntime()
    again = Events()
    try:
        reloaded = build(second, again)
        announced = again.wait_for("approval_required")
        assert announced.payload["request"]["id"] == event.payload["request"]["id"]
        result = reloaded.approve(
            event.execution_id,
            approval_request_id=announced.payload["request"]["id"],
            wait_seconds=10,
        )
        assert result.output == "refunded" and len(log) == 1
        assert reloaded.recovered is not None and reloaded.recovered.result(5) == result
        assert (
            SqliteBarrierStore(db).load_execution(event.execution_id).status
            is ExecutionStatus.COMPLETED
        )
    finally:
        second.close()


def test_load_without_a_listener_refuses_an_execution_that_needs_one(
    tmp_path: Path, events: Events
) -> None:
    db = tmp_path / "l.db"
    rt = AgentRuntime()
    try:
        agent = Agent.create(
            "a",
            store=SqliteBarrierStore(db),
            provider=ScriptedProvider([Reply(tool_calls=(("refund", {"q": "1"}),))]),
            runtime=rt,
            tools=[make_tool("refund", requires_approval=True)],
            on_event=events,
        )
        agent.invoke_async("refund")
        events.wait_for("approval_required")
    finally:
        rt.close()
    rt2 = AgentRuntime()
    try:
        with pytest.raises(ConfigurationError, match="on_event"):
            Agent.load(
                "a",
                store=SqliteBarrierStore(db),
                provider=ScriptedProvider([Reply(content="x")]),
                runtime=rt2,
                tools=[make_tool("refund")],
            )
        # nothing was left live: a later load with a listener works
        reloaded = Agent.load(
            "a",
            store=SqliteBarrierStore(db),
            provider=ScriptedProvider([Reply(content="x")]),
            runtime=rt2,
            tools=[make_tool("refund")],
            on_event=Events(),
        )
        assert reloaded.active_execution()["state"] == "suspended"
    finally:
        rt2.close()


def test_misconfigured_agents_are_refused_with_what_to_do(store: Any, runtime: Any) -> None:
    with pytest.raises(ConfigurationError, match="complete"):
        Agent.create("x", store=store, provider=None, runtime=runtime)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="Tool objects"):
        Agent.create(
            "y",
            store=store,
            provider=ScriptedProvider([Reply(content="x")]),
            runtime=runtime,
            tools=[print],
        )  # type: ignore[list-item]
    with pytest.raises(ConfigurationError, match="at least one step"):
        ScriptedProvider([])
    assert store.list_agents() == []


@pytest.mark.parametrize("answer", ["requires_approval", None, 42])
def test_a_policy_answer_that_is_not_a_decision_reaches_the_llm_as_the_tool_error(
    store: Any, runtime: Any, answer: Any
) -> None:
    log: list[Any] = []
    provider = ScriptedProvider([Reply(tool_calls=(("lookup", {"q": "x"}),)), Reply(content="ok")])
    agent = Agent.create(
        "a",
        store=store,
        provider=provider,
        runtime=runtime,
        tools=[make_tool(log=log)],
        approval_policy=lambda view: answer,
    )
    assert agent.invoke("go", wait_seconds=10).status == "completed"
    assert log == []  # never ran
    tool_text = next(m.content for m in provider.requests[1].messages if m.role == "tool")
    assert "approval policy returned" in tool_text and "require_approval" in tool_text
