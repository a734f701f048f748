"""Application mistakes that must stay local to one call (found by the adversarial
trial): each one fails only its own execution or tool call with a typed error, other
agents on the same runtime and store keep working, and the store reads back intact.

Real components: a SQLite file store and the runtime's real loop and worker threads.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

import attrs
import pytest

from phronomy_fsm.agent import Agent, AgentRuntime, Reply, ScriptedProvider, Tool
from phronomy_fsm.agent.types import LLMResponse, Usage
from phronomy_fsm.errors import (
    ApprovalError,
    ConfigurationError,
    InvalidInputError,
    LLMError,
    SerializationError,
)
from phronomy_fsm.store import SqliteBarrierStore
from phronomy_fsm.store.records import to_json

from .conftest import Events


def _tool_then_done(name: str) -> ScriptedProvider:
    return ScriptedProvider([Reply(tool_calls=((name, {}),)), Reply(content="done")])


def _assert_store_consistent(store: SqliteBarrierStore) -> None:
    """Every execution reads back, its barrier revisions are contiguous and end at the
    execution's revision, and the journal sequences of each agent have no gaps."""
    for agent in store.list_agents():
        sequences = [r.sequence for r in store.read_journal(agent.agent_id)]
        assert sequences == list(range(1, len(sequences) + 1))
    for execution in store.list_executions():
        revisions = [b.revision for b in store.barrier_history(execution.execution_id)]
        assert revisions == list(range(revisions[0], execution.revision + 1))


def _tool_results(store: SqliteBarrierStore, agent_id: str) -> list[tuple[str, str]]:
    """(status, text the LLM saw) of each tool call, from the journal."""
    journal = store.read_journal(agent_id)
    statuses = [r.content["status"] for r in journal if r.kind == "tool_result"]
    texts = [r.content["content"] for r in journal if r.kind == "tool_message"]
    return list(zip(statuses, texts, strict=True))


@pytest.mark.parametrize("raised", [SystemExit(3), KeyboardInterrupt()])
def test_a_tool_raising_systemexit_fails_only_that_call(
    store: SqliteBarrierStore, raised: BaseException
) -> None:
    runtime = AgentRuntime(max_workers=2)
    try:

        def bad(arguments: Any, context: Any) -> Any:
            raise raised

        agents = [
            Agent.create(
                f"a{i}",
                store=store,
                runtime=runtime,
                provider=_tool_then_done("bad"),
                tools=[Tool("bad", bad)],
            )
            for i in range(4)  # twice the pool: the queue must keep draining
        ]
        tasks = [a.invoke_async("go") for a in agents]
        for task in tasks:
            assert task.result(20).output == "done"
        innocent = Agent.create(
            "innocent", store=store, runtime=runtime, provider=ScriptedProvider([Reply("hi")])
        )
        assert innocent.invoke("hi", wait_seconds=20).output == "hi"
        assert runtime.pool.metrics()["workers"] >= 1
        status, text = _tool_results(store, "a0")[0]
        assert status == "failed" and type(raised).__name__ in text
    finally:
        runtime.close(timeout_seconds=5)
    _assert_store_consistent(store)


def test_a_listener_raising_systemexit_does_not_end_the_loop(
    store: SqliteBarrierStore, runtime: AgentRuntime
) -> None:
    def listener(event: Any) -> None:
        raise SystemExit(1)

    loud = Agent.create(
        "loud",
        store=store,
        runtime=runtime,
        provider=ScriptedProvider([Reply("x")]),
        on_event=listener,
    )
    loud.invoke_async("go")
    other = Agent.create(
        "other", store=store, runtime=runtime, provider=ScriptedProvider([Reply("y")])
    )
    assert other.invoke("hi", wait_seconds=20).output == "y"
    assert runtime.dispatcher.lifecycle == "running"


@pytest.mark.parametrize("bad", [math.inf, 1e10, math.nan, -1, 0, "1", True])
def test_out_of_range_timeouts_are_refused_before_anything_runs(
    store: SqliteBarrierStore, runtime: AgentRuntime, bad: Any
) -> None:
    agent = Agent.create(
        "a", store=store, runtime=runtime, provider=ScriptedProvider([Reply("ok")])
    )
    with pytest.raises(InvalidInputError, match="timeout_seconds"):
        agent.invoke_async("hi", timeout_seconds=bad)
    with pytest.raises(ConfigurationError, match="timeout_seconds"):
        Agent.create(
            "b",
            store=store,
            runtime=runtime,
            provider=ScriptedProvider([Reply("unused")]),
            timeout_seconds=bad,
        )
    assert store.list_executions() == []
    assert [a.agent_id for a in store.list_agents()] == ["a"]  # "b" was never written
    # the loop is alive and the largest accepted timeout works
    assert agent.invoke("hi", timeout_seconds=1e9, wait_seconds=20).output == "ok"


def test_a_structure_containing_itself_fails_that_tool_not_the_store(
    store: SqliteBarrierStore, runtime: AgentRuntime
) -> None:
    loop: list[Any] = []
    loop.append(loop)
    a = Agent.create(
        "a",
        store=store,
        runtime=runtime,
        provider=_tool_then_done("t"),
        tools=[Tool("t", lambda args, ctx: loop)],
    )
    b = Agent.create("b", store=store, runtime=runtime, provider=ScriptedProvider([Reply("hi")]))
    task = a.invoke_async("go")
    assert b.invoke("hi", wait_seconds=20).output == "hi"
    assert task.result(20).output == "done"
    status, text = _tool_results(store, "a")[0]
    assert status == "failed" and "containing itself" in text
    _assert_store_consistent(store)


@pytest.mark.parametrize(
    "value",
    [{1, 2}, math.nan, math.inf, b"bytes", 2**70, {1: "int key"}, object(), "\ud800"],
    ids=["set", "nan", "inf", "bytes", "bigint", "int-key", "object", "surrogate"],
)
def test_unstorable_tool_results_become_the_tool_error(
    store: SqliteBarrierStore, runtime: AgentRuntime, value: Any
) -> None:
    events = Events()
    agent = Agent.create(
        "a",
        store=store,
        runtime=runtime,
        provider=_tool_then_done("t"),
        tools=[Tool("t", lambda args, ctx: value)],
        on_event=events,
    )
    assert agent.invoke("go", wait_seconds=20).output == "done"  # the LLM saw the error
    status, text = _tool_results(store, "a")[0]
    assert status == "failed" and "cannot be recorded" in text
    assert [e.payload["status"] for e in events.events if e.type == "tool_result"] == ["failed"]
    _assert_store_consistent(store)


class _Answer:
    """A provider returning a fixed (malformed) response for every call."""

    def __init__(self, **fields: Any) -> None:
        self.fields = fields

    def complete(self, request: Any, *, on_token: Any = None, cancellation: Any = None) -> Any:
        return LLMResponse(request.llm_call_id, **self.fields)


@pytest.mark.parametrize(
    "fields",
    [
        {"content": {"not": "text"}},
        {"content": "\ud800"},
        {"content": "ok", "usage": Usage(10**30, 0)},
        {"content": "ok", "usage": Usage(-1, 0)},
    ],
    ids=["dict-content", "surrogate", "huge-usage", "negative-usage"],
)
def test_malformed_provider_answers_fail_the_execution_durably(
    store: SqliteBarrierStore, runtime: AgentRuntime, fields: dict[str, Any]
) -> None:
    agent = Agent.create("a", store=store, runtime=runtime, provider=_Answer(**fields))
    with pytest.raises(LLMError, match="malformed"):
        agent.invoke("hi", wait_seconds=20)
    [execution] = store.list_executions()
    assert execution.status.value == "failed"  # terminal, not parked for an operator
    with pytest.raises(LLMError):  # the agent is idle again, not busy forever
        agent.invoke("again", wait_seconds=20)
    _assert_store_consistent(store)


@pytest.mark.parametrize(
    "arguments", ['{"q": 1267650600228229401496703205376}', '{"q": "\\ud800"}']
)
def test_unstorable_tool_arguments_are_told_to_the_llm(
    store: SqliteBarrierStore, runtime: AgentRuntime, arguments: str
) -> None:
    calls: list[Any] = []
    provider = ScriptedProvider([Reply(tool_calls=(("t", arguments),)), Reply(content="done")])
    agent = Agent.create(
        "a",
        store=store,
        runtime=runtime,
        provider=provider,
        tools=[Tool("t", lambda args, ctx: calls.append(args))],
    )
    assert agent.invoke("go", wait_seconds=20).output == "done"
    assert calls == []  # never ran
    tool_text = next(m.content for m in provider.requests[1].messages if m.role == "tool")
    assert "invalid arguments for tool 't'" in tool_text
    _assert_store_consistent(store)


@pytest.mark.parametrize("bad", [123, "", "has space", "a" * 129, "tab\tid", None])
def test_execution_ids_are_checked_before_admission(
    store: SqliteBarrierStore, runtime: AgentRuntime, bad: Any
) -> None:
    agent = Agent.create(
        "a", store=store, runtime=runtime, provider=ScriptedProvider([Reply("ok")])
    )
    if bad is None:  # the default: a random id
        assert agent.invoke("hi", execution_id=bad, wait_seconds=20).status == "completed"
        return
    with pytest.raises(InvalidInputError, match="execution_id"):
        agent.invoke_async("hi", execution_id=bad)
    assert store.list_executions() == []
    agent.close()
    # the store still loads (an int id written once used to break every later read)
    reloaded = Agent.load(
        "a", store=store, runtime=runtime, provider=ScriptedProvider([Reply("x")])
    )
    assert (
        reloaded.invoke("hi", execution_id="order-42:retry.1", wait_seconds=20).status
        == "completed"
    )


def test_the_store_refuses_a_record_with_a_non_string_id(store: SqliteBarrierStore) -> None:
    agent = store.create_agent("a", now=datetime.now(UTC))
    with pytest.raises(SerializationError, match="agent_id must be str"):
        to_json(attrs.evolve(agent, agent_id=7))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"execution_id": 1, "approval_request_id": "r"}, "must be strings"),
        ({"execution_id": "e", "approval_request_id": "r", "approved": "yes"}, "True or False"),
        (
            {"execution_id": "e", "approval_request_id": "r", "decisions": {"c1": "yes"}},
            "decisions",
        ),
        ({"execution_id": "e", "approval_request_id": "r", "decisions": [1]}, "decisions"),
    ],
)
def test_approval_arguments_of_the_wrong_type_are_refused(
    store: SqliteBarrierStore, runtime: AgentRuntime, kwargs: dict[str, Any], match: str
) -> None:
    agent = Agent.create(
        "a", store=store, runtime=runtime, provider=ScriptedProvider([Reply("unused")])
    )
    execution_id = kwargs.pop("execution_id")
    with pytest.raises(ApprovalError, match=match):
        agent.approve_async(execution_id, **kwargs)


def test_a_path_like_store_is_accepted(tmp_path: Any, runtime: AgentRuntime) -> None:
    agent = Agent.create(
        "a", store=tmp_path / "p.db", runtime=runtime, provider=ScriptedProvider([Reply("ok")])
    )
    assert agent.invoke("hi", wait_seconds=20).output == "ok"
    assert (tmp_path / "p.db").exists()


def test_a_passing_database_lock_mid_run_is_ridden_out(
    tmp_path: Any, runtime: AgentRuntime
) -> None:
    """Another process holds the write lock past the busy timeout while the tool's
    result is being made durable: the barrier is retried, not parked for an operator."""
    import sqlite3
    import threading

    path = tmp_path / "locked.db"
    store = SqliteBarrierStore(path, busy_timeout_seconds=0.2)
    released = threading.Event()

    def lock_the_database(arguments: Any, context: Any) -> Any:
        other = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")

        def release() -> None:
            other.execute("ROLLBACK")
            other.close()
            released.set()

        threading.Timer(1.5, release).start()
        return "locked for 1.5 s"

    try:
        agent = Agent.create(
            "a",
            store=store,
            runtime=runtime,
            provider=_tool_then_done("lock"),
            tools=[Tool("lock", lock_the_database)],
        )
        result = agent.invoke("go", wait_seconds=30)
        assert released.is_set()  # the lock really outlived several busy timeouts
        assert result.status == "completed" and result.output == "done"
        _assert_store_consistent(store)
    finally:
        store.close()


def test_runtime_close_lets_an_llm_answer_in_flight_land(store: SqliteBarrierStore) -> None:
    """close() waits for the execution to come to rest: the answer that is on its way
    is applied and committed, and the caller's task settles."""
    import time

    runtime = AgentRuntime()
    provider = ScriptedProvider(
        [Reply(tool_calls=(("t", {}),), delay_seconds=0.3), Reply(content="late but kept")]
    )
    agent = Agent.create(
        "a", store=store, runtime=runtime, provider=provider, tools=[Tool("t", lambda a, c: 1)]
    )
    task = agent.invoke_async("hi")
    deadline = time.monotonic() + 10
    while not provider.requests and time.monotonic() < deadline:  # the call is in flight
        time.sleep(0.005)
    runtime.close(timeout_seconds=10)
    assert task.result(1).output == "late but kept"
    [execution] = store.list_executions()
    assert execution.status.value == "completed"
    assert store.agent_owner("a") is None  # and the claim is released


def test_agents_opened_from_one_path_share_a_store_closed_with_the_last(
    tmp_path: Any, runtime: AgentRuntime
) -> None:
    import os
    import threading
    import time

    path = tmp_path / "shared.db"

    def settle() -> tuple[int, int]:
        """(open file descriptors, threads) once releases queued on the pool ran."""
        time.sleep(0.2)
        return len(os.listdir("/proc/self/fd")), threading.active_count()

    a = Agent.create("a", store=path, runtime=runtime, provider=ScriptedProvider([Reply("a")]))
    b = Agent.create("b", store=str(path), runtime=runtime, provider=ScriptedProvider([Reply("b")]))
    assert a.store is b.store  # one writer connection for the file
    assert Agent.load("a", store=path, runtime=runtime, provider=a.provider) is a
    a.invoke("hi", wait_seconds=20)
    a.close()
    assert not a.store._closed  # b still uses it
    b.close()
    deadline = time.monotonic() + 10
    while not b.store._closed and time.monotonic() < deadline:
        time.sleep(0.01)
    assert b.store._closed
    baseline = settle()
    for i in range(30):  # create, run and close again and again: nothing accumulates
        agent = Agent.create(
            f"c{i}", store=path, runtime=runtime, provider=ScriptedProvider([Reply("c")])
        )
        agent.invoke("hi", wait_seconds=20)
        agent.close()
    fds, threads = settle()
    assert fds <= baseline[0] + 3 and threads <= baseline[1] + 3, (baseline, fds, threads)
    reopened = SqliteBarrierStore(path)
    try:
        assert len(reopened.list_agents()) == 32
        assert all(e.status.value == "completed" for e in reopened.list_executions())
    finally:
        reopened.close()
