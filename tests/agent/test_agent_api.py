"""The Agent API's forms and its misuse: asyncio, threads, load/create rules, a store
that is not a database, a restart between the approval request and the approval
(docs/agent.md, "Agents")."""

from __future__ import annotations

import asyncio
import shlex
import threading
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from phronomy_fsm.agent import Agent, AgentRuntime, AgentStatus, Reply, ScriptedProvider
from phronomy_fsm.cli import main
from phronomy_fsm.durable.records import ExecutionStatus
from phronomy_fsm.errors import (
    AgentClosedError,
    AgentExistsError,
    ApprovalPolicyError,
    Cancelled,
    ConfigurationError,
    EffectNotPerformedError,
    ExecutionDetachedError,
    NotFoundError,
    StoreError,
    WrongThreadError,
)
from phronomy_fsm.store import SqliteBarrierStore
from phronomy_fsm.testing.deadlines import wait_until

from .conftest import Events, LostResponses, make_tool


def test_invoke_async_can_be_awaited(store: Any, runtime: Any) -> None:
    agent = Agent.create("a", provider=ScriptedProvider([Reply(content="async!")]), runtime=runtime)

    async def main() -> str:
        results = await asyncio.gather(agent.invoke_async("one"))
        return results[0].output

    assert asyncio.run(main()) == "async!"


def test_create_and_load_can_be_awaited(tmp_path: Path) -> None:
    db = tmp_path / "a.db"

    async def main() -> tuple[str | None, str]:
        agent = await Agent.create_async(
            "a", store=db, provider=ScriptedProvider([Reply(content="hi")])
        )
        result = await agent.invoke_async("x")
        loaded = await Agent.load_async("a", store=db, provider=ScriptedProvider([Reply("y")]))
        agent.runtime.close()
        return result.output, loaded.agent_id

    assert asyncio.run(main()) == ("hi", "a")


def test_invocations_from_many_threads_on_many_agents(store: Any, runtime: Any) -> None:
    agents = [
        Agent.create(
            f"a{i}", provider=ScriptedProvider([Reply(content=f"hi {i}")]), runtime=runtime
        )
        for i in range(8)
    ]
    outputs: dict[int, list[str | None]] = {}

    def work(i: int) -> None:
        outputs[i] = [agents[i].invoke(f"go {n}", wait_seconds=30).output for n in range(3)]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert outputs == {i: [f"hi {i}"] * 3 for i in range(8)}
    assert len(store.list_records(machine="agent_session", status="completed")) == 24


def test_blocking_calls_are_refused_on_the_loop_thread(store: Any, runtime: Any) -> None:
    agent = Agent.create("a", provider=ScriptedProvider([Reply(content="x")]), runtime=runtime)
    outcome = runtime.dispatcher.call(lambda: agent.invoke("nested", wait_seconds=1))
    with pytest.raises(WrongThreadError):
        outcome.result(10)


def test_load_rules(store: Any, runtime: Any, events: Events) -> None:
    provider = ScriptedProvider([Reply(content="x")])
    with pytest.raises(NotFoundError, match="Agent.create"):
        Agent.load("ghost", provider=provider, runtime=runtime)
    agent = Agent.create("a", provider=provider, runtime=runtime, on_event=events)
    assert Agent.load("a", provider=provider, runtime=runtime) is agent  # the one loaded here
    with pytest.raises(ConfigurationError, match="another listener"):
        Agent.load("a", provider=provider, runtime=runtime, on_event=lambda e: None)
    with pytest.raises(AgentExistsError, match="Agent.load"):
        Agent.create("a", provider=provider, runtime=runtime)
    with pytest.raises(ConfigurationError, match="listener_error_policy"):
        Agent.create("b", provider=provider, runtime=runtime, listener_error_policy="shout")
    with pytest.raises(ConfigurationError, match="unique"):
        Agent.create("c", provider=provider, runtime=runtime, tools=[make_tool(), make_tool()])
    with pytest.raises(ConfigurationError, match="agent_id"):
        Agent.create("", provider=provider, runtime=runtime)
    with pytest.raises(ConfigurationError, match="unknown agent option"):
        Agent.create("e", provider=provider, runtime=runtime, max_iteration=3)
    with pytest.raises(ConfigurationError, match="llm_resend"):
        Agent.create("f", provider=provider, runtime=runtime, llm_resend="sometimes")
    assert store.agent_ids() == ["a"]  # nothing else was written
    silent = Agent.create("d", provider=provider, runtime=runtime)
    with pytest.raises(ConfigurationError, match="listener"):
        silent.stream_async("no listener")
    agent.close()
    with pytest.raises(AgentClosedError, match="load it again"):
        agent.invoke("closed", wait_seconds=5)
    reloaded = Agent.load("a", provider=provider, runtime=runtime)
    assert reloaded is not agent and reloaded.invoke("again", wait_seconds=10).output == "x"


def test_a_store_file_that_is_not_a_database_is_refused_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("hello, I am not SQLite" * 50)
    before = path.read_bytes()
    with pytest.raises(StoreError):
        Agent.create("a", store=str(path), provider=ScriptedProvider([Reply(content="x")]))
    assert path.read_bytes() == before


def test_load_from_a_missing_path_creates_nothing(tmp_path: Path) -> None:
    path = tmp_path / "typo.db"
    with pytest.raises(NotFoundError, match="does not exist"):
        Agent.load("a", store=path, provider=ScriptedProvider([Reply(content="x")]))
    assert not path.exists()
    path.write_bytes(b"")
    with pytest.raises(NotFoundError, match="empty"):
        Agent.load("a", store=path, provider=ScriptedProvider([Reply(content="x")]))
    assert path.read_bytes() == b""


def test_agents_opened_from_one_path_share_a_runtime(tmp_path: Path) -> None:
    db = tmp_path / "shared.db"
    one = Agent.create("one", store=db, provider=ScriptedProvider([Reply(content="1")]))
    two = Agent.create("two", store=str(db), provider=ScriptedProvider([Reply(content="2")]))
    try:
        assert one.runtime is two.runtime
        assert one.invoke("x", wait_seconds=10).output == "1"
        assert two.invoke("x", wait_seconds=10).output == "2"
    finally:
        one.runtime.close()
    # closed: the next use opens a fresh runtime on the file
    again = Agent.load("one", store=db, provider=ScriptedProvider([Reply(content="3")]))
    try:
        assert again.runtime is not one.runtime
        assert [m.content for m in again.history()] == ["x", "1"]
    finally:
        again.runtime.close()


def test_restart_between_approval_request_and_approval(tmp_path: Path, events: Events) -> None:
    db = tmp_path / "restart.db"
    log: list[Any] = []

    def build(runtime: Any, listener: Any) -> Agent:
        return Agent.load(
            "a",
            provider=ScriptedProvider(
                [Reply(tool_calls=(("refund", {"q": "1"}),)), Reply(content="refunded")]
            ),
            runtime=runtime,
            tools=[make_tool("refund", requires_approval=True, log=log)],
            on_event=listener,
        )

    store = SqliteBarrierStore(db)
    first = AgentRuntime(store)
    Agent.create("a", provider=ScriptedProvider([Reply(content="unused")]), runtime=first).close()
    agent = build(first, events)
    task = agent.invoke_async("refund")
    event = events.wait_for("approval_required")
    first.close()  # the process "ends"; the caller's task is process-local
    with pytest.raises(ExecutionDetachedError, match="lives on in the store") as detached:
        task.result(5)
    # it says how to continue: the exact approve command of the pending request
    command = f"phronomy-fsm approve {event.execution_id} --request {event.request_id} --db {db}"
    assert f"`{command}`" in str(detached.value), str(detached.value)

    second = AgentRuntime(store)
    again = Events()
    try:
        reloaded = build(second, again)
        announced = again.wait_for("approval_required")  # announced again on load
        assert announced.request_id == event.request_id
        result = reloaded.approve(
            event.execution_id, approval_request_id=announced.request_id, wait_seconds=10
        )
        assert result.output == "refunded" and len(log) == 1
        assert store.load_record(event.execution_id).status is ExecutionStatus.COMPLETED
    finally:
        second.close()
        store.close()


def test_an_approval_from_another_process_is_applied_by_the_owner(
    tmp_path: Path, events: Events
) -> None:
    """Approving writes to the execution's inbox: any runtime on the store may send it;
    the runtime running the execution applies it."""
    db = tmp_path / "two.db"
    owner_store, other_store = SqliteBarrierStore(db), SqliteBarrierStore(db)
    owner, other = AgentRuntime(owner_store), AgentRuntime(other_store)
    try:
        tools = [make_tool("refund", requires_approval=True)]
        agent = Agent.create(
            "a",
            provider=ScriptedProvider(
                [Reply(tool_calls=(("refund", {"q": "1"}),)), Reply(content="done")]
            ),
            runtime=owner,
            tools=tools,
            on_event=events,
        )
        task = agent.invoke_async("refund")
        event = events.wait_for("approval_required")
        remote = Agent.load(
            "a", provider=ScriptedProvider([Reply(content="x")]), runtime=other, tools=tools
        )
        assert not other.durable.is_live(event.execution_id)  # the owner keeps running it
        assert (
            remote.approve(
                event.execution_id, approval_request_id=event.request_id, wait_seconds=10
            ).status
            is AgentStatus.COMPLETED
        )
        assert task.result(10).output == "done"
    finally:
        other.close()
        owner.close()
        owner_store.close()
        other_store.close()


def test_misconfigured_agents_are_refused_with_what_to_do(store: Any, runtime: Any) -> None:
    with pytest.raises(ConfigurationError, match="complete"):
        Agent.create("x", provider=None, runtime=runtime)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="Tool objects"):
        Agent.create(
            "y",
            provider=ScriptedProvider([Reply(content="x")]),
            runtime=runtime,
            tools=[print],  # type: ignore[list-item]
        )
    with pytest.raises(ConfigurationError, match="at least one step"):
        ScriptedProvider([])
    with pytest.raises(ConfigurationError, match="store"):
        Agent.create("z", provider=ScriptedProvider([Reply(content="x")]))
    assert store.agent_ids() == []


@pytest.mark.parametrize("answer", ["requires_approval", None, 42])
def test_a_policy_answer_that_is_not_a_decision_reaches_the_llm_as_the_tool_error(
    store: Any, runtime: Any, answer: Any
) -> None:
    log: list[Any] = []
    provider = ScriptedProvider([Reply(tool_calls=(("lookup", {"q": "x"}),)), Reply(content="ok")])
    agent = Agent.create(
        "a",
        provider=provider,
        runtime=runtime,
        tools=[make_tool(log=log)],
        approval_policy=lambda view: answer,
    )
    assert agent.invoke("go", wait_seconds=10).status is AgentStatus.COMPLETED
    assert log == []  # never ran
    tool_text = next(m.content for m in provider.requests[1].messages if m.role == "tool")
    assert "approval policy returned" in tool_text and "require_approval" in tool_text


@pytest.mark.parametrize(
    "raised",
    [Cancelled("policy deadline"), ValueError("boom"), SystemExit(3)],
    ids=lambda e: type(e).__name__,
)
def test_a_raising_approval_policy_fails_the_execution_naming_the_policy(
    store: Any, runtime: Any, events: Events, raised: BaseException
) -> None:
    """Whatever the policy raises — ``Cancelled`` and ``SystemExit`` included — ends the
    execution ``failed`` (``tools_authorization_failed``) with an error naming the
    policy, the call and the exception; the caller gets that error, not a raised
    ``Cancelled`` (issue 21)."""
    log: list[Any] = []

    def policy(view: Any) -> Any:
        raise raised

    provider = ScriptedProvider([Reply(tool_calls=(("lookup", {"q": "x"}),)), Reply(content="ok")])
    agent = Agent.create(
        "a",
        provider=provider,
        runtime=runtime,
        tools=[make_tool(log=log)],
        approval_policy=policy,
        on_event=events,
    )
    with pytest.raises(ApprovalPolicyError) as info:
        agent.invoke("go", execution_id="e-1", wait_seconds=10)
    text = f"{type(raised).__name__}: {raised}"
    assert "approval policy" in str(info.value) and "lookup" in str(info.value)
    assert text in str(info.value) and info.value.__cause__ is raised
    assert info.value.execution_id == "e-1" and info.value.tool_name == "lookup"
    assert log == [] and len(provider.requests) == 1  # nothing ran, the LLM was not asked
    record = store.load_record("e-1")
    assert (record.status, record.state) == (ExecutionStatus.FAILED, "failed")
    assert record.context["error_type"] == "ApprovalPolicyError"
    assert text in record.context["error"]
    failed = events.wait_for("error")
    assert failed.error.startswith("ApprovalPolicyError: ") and text in failed.error


def test_invoke_async_can_be_chained_from_a_done_callback(store: Any, runtime: Any) -> None:
    """A task's callbacks run on the loop thread: starting the next execution there
    must not block it (the start is committed asynchronously)."""
    agent = Agent.create("a", provider=ScriptedProvider([Reply(content="x")]), runtime=runtime)
    finished = threading.Event()
    outputs: list[Any] = []

    def chain(left: int) -> None:
        task = agent.invoke_async("go")

        def next_run(done: Any) -> None:
            outputs.append(done.future.result().output)
            if left > 1:
                chain(left - 1)
            else:
                finished.set()

        task.add_done_callback(next_run)

    chain(5)
    assert finished.wait(20)
    assert outputs == ["x"] * 5
    assert len(store.list_records(machine="agent_session", status="completed")) == 5


@pytest.mark.parametrize("parks", ["llm_call", "tool_call"])
def test_closing_the_runtime_while_an_execution_waits_for_an_operator_says_how_to_resolve_it(
    tmp_path: Path, parks: str
) -> None:
    """``AgentRuntime.close()`` while the execution (or its tool call) is parked for an
    operator — a lost commit response read back in vain — fails the pending ``invoke``
    with ExecutionDetachedError naming the exact ``phronomy-fsm resolve`` command
    (docs/agent.md, "Closing"); that command, with an outcome filled in, is accepted,
    and loading the agent again applies it."""
    db = tmp_path / "close.db"
    store = SqliteBarrierStore(db)
    barrier = "initial_preparation" if parks == "llm_call" else "tool_dispatch"
    LostResponses(store, ((barrier, True),))
    runtime = AgentRuntime(store)
    events = Events()
    log: list[Any] = []
    tools = [make_tool("act", log=log)]
    script = [Reply(tool_calls=(("act", {"q": "x"}),)), Reply(content="done")]
    agent = Agent.create(
        "a", provider=ScriptedProvider(script), runtime=runtime, tools=tools, on_event=events
    )
    task = agent.invoke_async("go")
    event = events.wait_for("recovery_resolution_required")
    parked = store.load_record(event.execution_id)
    assert parked.status is ExecutionStatus.RECOVERY_REQUIRED
    assert event.subject["type"] == ("llm_call" if parks == "llm_call" else "tool_invocation")
    assert not task.future.done()  # the caller waits for the operator
    runtime.close()
    with pytest.raises(ExecutionDetachedError) as detached:
        task.result(5)
    message = str(detached.value)
    session_id = detached.value.execution_id
    assert session_id == (event.parent_execution_id or event.execution_id)
    assert "lives on in the store" in message and "Agent.load" in message
    command = (
        f"phronomy-fsm resolve {event.execution_id} --db {store.path} "
        f"--expected-revision {parked.revision} --outcome"
    )
    assert command in message, message
    store.close()

    # the command works: an operator pastes it with an outcome, a new runtime applies it
    line = message[message.index(command) :].split("`")[0]
    words = shlex.split(line)[1:]
    words[words.index("--outcome") + 1] = "not_performed"
    cli = CliRunner().invoke(main, [*words, "--wait-seconds", "0"])
    assert cli.exit_code == 0, cli.output
    store = SqliteBarrierStore(db)
    again = AgentRuntime(store)
    try:
        reloaded = Agent.load("a", provider=ScriptedProvider(script), runtime=again, tools=tools)
        if parks == "llm_call":  # an LLM call not performed fails the execution
            # the same error whether the wait sees it end or reads it ended from the
            # store (under load the execution may finish before the wait begins)
            wait_until(lambda: not store.load_record(session_id).is_active, 10, "the failed end")
            with pytest.raises(EffectNotPerformedError):
                reloaded.wait(session_id, wait_seconds=10)
        else:  # a tool call not performed is the error the LLM sees
            assert reloaded.wait(session_id, wait_seconds=10).output == "done"
        assert log == []
    finally:
        again.close()
        store.close()
