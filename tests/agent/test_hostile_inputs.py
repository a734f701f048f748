"""Application mistakes that must stay local to one call (found by the adversarial
trial): each one fails only its own execution or tool call with a typed error, other
agents on the same runtime and store keep working, and the store reads back intact.

Real components: a SQLite file store and the runtime's real loop and worker threads.
(docs/agent.md, "Bad input".)
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from phronomy_fsm.agent import Agent, AgentRuntime, Reply, ScriptedProvider, Tool
from phronomy_fsm.agent.types import LLMResponse, Usage
from phronomy_fsm.errors import (
    ApprovalError,
    ConfigurationError,
    InvalidInputError,
    LLMError,
)
from phronomy_fsm.store import SqliteBarrierStore

from .conftest import Events


def _tool_then_done(name: str) -> ScriptedProvider:
    return ScriptedProvider([Reply(tool_calls=((name, {}),)), Reply(content="done")])


def _assert_store_consistent(store: SqliteBarrierStore) -> None:
    """Every execution reads back and its barrier log is gapless from revision 0 to
    the execution's revision."""
    for record in store.list_records():
        revisions = [b.revision for b in store.barrier_log(record.execution_id)]
        assert revisions == list(range(record.revision + 1)), record.execution_id


def _tool_results(store: SqliteBarrierStore, agent_id: str) -> list[tuple[str, str]]:
    """(status, text the LLM saw) of each tool call, from the journal."""
    out = []
    for record in store.list_records(machine="agent_session", exclusive_key=agent_id):
        journal = store.journal_entries(record.execution_id)
        statuses = [e.data["status"] for e in journal if e.kind == "tool_result"]
        texts = [e.data["message"]["content"] for e in journal if e.kind == "tool_message"]
        out += list(zip(statuses, texts, strict=True))
    return out


@pytest.mark.parametrize("raised", [SystemExit(3), KeyboardInterrupt()])
def test_a_tool_raising_systemexit_fails_only_that_call(
    store: SqliteBarrierStore, raised: BaseException
) -> None:
    runtime = AgentRuntime(store, max_workers=2)
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
        assert runtime.durable.pool.metrics()["workers"] >= 1
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
    task = loud.invoke_async("go")
    other = Agent.create(
        "other", store=store, runtime=runtime, provider=ScriptedProvider([Reply("y")])
    )
    assert other.invoke("hi", wait_seconds=20).output == "y"
    assert runtime.dispatcher.lifecycle == "running"
    # the raising agent's own caller is settled too (the default policy "report": the
    # execution goes on, its terminal event's raise is only logged)
    assert task.result(20).output == "x"
    assert store.load_record(task.result(0).execution_id).status.value == "completed"


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
    assert store.list_records() == []
    assert store.agent_ids() == ["a"]  # "b" was never written
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
    assert status == "failed" and "contains itself" in text
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
    assert [e.status for e in events.events if e.type == "tool_result"] == ["failed"]
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
    [execution] = store.list_records()
    assert execution.status.value == "failed"  # finished, not parked for an operator
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
    assert store.list_records() == []
    agent.close()
    # the store still loads (an int id written once used to break every later read)
    reloaded = Agent.load(
        "a", store=store, runtime=runtime, provider=ScriptedProvider([Reply("x")])
    )
    assert (
        reloaded.invoke("hi", execution_id="order-42:retry.1", wait_seconds=20).status
        == "completed"
    )


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


def test_a_path_like_store_is_accepted(tmp_path: Any) -> None:
    agent = Agent.create("a", store=tmp_path / "p.db", provider=ScriptedProvider([Reply("ok")]))
    try:
        assert agent.invoke("hi", wait_seconds=20).output == "ok"
        assert (tmp_path / "p.db").exists()
    finally:
        agent.runtime.close()


def test_a_passing_database_lock_mid_run_is_ridden_out(tmp_path: Any) -> None:
    """Another process holds the write lock past the busy timeout while the tool's
    result is being made durable: the barrier is retried, not parked for an operator."""
    import sqlite3
    import threading

    path = tmp_path / "locked.db"
    store = SqliteBarrierStore(path, busy_timeout_seconds=0.2)
    runtime = AgentRuntime(store)
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
        runtime.close()
        store.close()


def test_runtime_close_lets_an_llm_answer_in_flight_land(store: SqliteBarrierStore) -> None:
    """close() waits for the execution to come to rest: the answer that is on its way
    is applied and committed, and the caller's task settles."""
    import time

    runtime = AgentRuntime(store)
    provider = ScriptedProvider(
        [Reply(tool_calls=(("t", {}),), delay_seconds=0.3), Reply(content="late but kept")]
    )
    agent = Agent.create("a", runtime=runtime, provider=provider, tools=[Tool("t", lambda a, c: 1)])
    task = agent.invoke_async("hi")
    deadline = time.monotonic() + 10
    while not provider.requests and time.monotonic() < deadline:  # the call is in flight
        time.sleep(0.005)
    runtime.close(timeout_seconds=10)
    assert task.result(1).output == "late but kept"
    [execution] = store.list_records(machine="agent_session")
    assert execution.status.value == "completed"
    assert store.list_workers() == [] or all(w[2] <= 0 for w in store.list_workers())


def test_agents_opened_from_one_path_share_a_runtime_and_release_it(tmp_path: Any) -> None:
    import os
    import threading
    import time

    path = tmp_path / "shared.db"

    def settle() -> tuple[int, int]:
        """(open file descriptors, threads) once background work settled."""
        time.sleep(0.3)
        return len(os.listdir("/proc/self/fd")), threading.active_count()

    a = Agent.create("a", store=path, provider=ScriptedProvider([Reply("a")]))
    b = Agent.create("b", store=str(path), provider=ScriptedProvider([Reply("b")]))
    assert a.store is b.store and a.runtime is b.runtime  # one writer for the file
    assert Agent.load("a", store=path, provider=a.config.provider) is a
    a.invoke("hi", wait_seconds=20)
    a.runtime.close()
    baseline = settle()
    for i in range(20):  # open, run and close again and again: nothing accumulates
        agent = Agent.create(f"c{i}", store=path, provider=ScriptedProvider([Reply("c")]))
        agent.invoke("hi", wait_seconds=20)
        agent.runtime.close()
    fds, threads = settle()
    assert fds <= baseline[0] + 3 and threads <= baseline[1] + 3, (baseline, fds, threads)
    reopened = SqliteBarrierStore(path)
    try:
        assert len(reopened.agent_ids()) == 22
        assert all(r.status.value == "completed" for r in reopened.list_records())
    finally:
        reopened.close()
