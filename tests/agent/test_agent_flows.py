"""Agent executions end to end on a real SQLite store, run by the durable engine
(docs/agent.md)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from phronomy_fsm.agent import (
    Agent,
    AgentRuntime,
    AgentStatus,
    ApprovalRequired,
    Done,
    Reply,
    ScriptedProvider,
    Token,
)
from phronomy_fsm.agent.ids import handoff_target_execution_id
from phronomy_fsm.durable.records import ExecutionStatus
from phronomy_fsm.errors import (
    AgentBusyError,
    AgentExistsError,
    ApprovalError,
    Cancelled,
    ContentBlockedError,
    ExecutionFailedError,
    ExecutionTimeoutError,
    InvalidInputError,
    LLMError,
    StreamCallbackError,
)

from .conftest import (
    Events,
    assert_stored_conversations_are_legal,
    barrier_names,
    journal_kinds,
    make_tool,
)


def assert_revisions_consistent(store: Any, execution_id: str) -> None:
    """The barrier log has one row per revision 0..n and the record is at n."""
    log = store.barrier_log(execution_id)
    record = store.load_record(execution_id)
    assert [b.revision for b in log] == list(range(record.revision + 1))


def sessions(store: Any, agent_id: str) -> list[Any]:
    return store.list_records(machine="agent_session", exclusive_key=agent_id)


def test_plain_answer_commits_start_preparation_and_final(
    store: Any, runtime: Any, events: Events
) -> None:
    provider = ScriptedProvider([Reply(content="Hello there.")])
    agent = Agent.create("a", provider=provider, runtime=runtime, on_event=events)
    result = agent.invoke("hi", wait_seconds=10)
    assert (result.status, result.output, result.revision) == (
        AgentStatus.COMPLETED,
        "Hello there.",
        2,
    )
    assert result.finish_reason == "stop"
    assert barrier_names(store, result.execution_id) == ["@start", "initial_preparation", "@final"]
    assert_revisions_consistent(store, result.execution_id)
    stored = store.load_record(result.execution_id)
    assert stored.status is ExecutionStatus.COMPLETED and stored.state == "completed"
    assert stored.context["output"] == "Hello there."
    assert events.types() == ["done"]
    assert isinstance(events.events[0], Done) and events.events[0].output == "Hello there."
    assert journal_kinds(store, result.execution_id) == [
        "input_received",
        "user_message",
        "llm_call_recorded",
        "assistant_message",
        "final_output",
        "execution_completed",
    ]
    assert store.agent_ids() == ["a"]


def test_tool_cycle_commits_a_barrier_before_each_effect(
    store: Any, runtime: Any, events: Events
) -> None:
    log: list[Any] = []
    provider = ScriptedProvider(
        [Reply(tool_calls=(("lookup", {"q": "x"}),)), Reply(content="found x")]
    )
    agent = Agent.create(
        "a", provider=provider, runtime=runtime, tools=[make_tool(log=log)], on_event=events
    )
    result = agent.invoke("find x", wait_seconds=10)
    assert result.output == "found x"
    assert barrier_names(store, result.execution_id) == [
        "@start",
        "initial_preparation",
        "tool_dispatch",
        "provider_dispatch",
        "@final",
    ]
    assert len(log) == 1 and log[0][0] == {"q": "x"}
    # the tool ran as a child execution whose id is the call's idempotency key, started
    # by the tool_dispatch commit
    child = store.load_record(log[0][1])
    assert (child.machine, child.parent_execution_id, child.status) == (
        "tool_call",
        result.execution_id,
        ExecutionStatus.COMPLETED,
    )
    assert child.labels["agent_id"] == "a"
    tool_results = [
        e for e in store.journal_entries(result.execution_id) if e.kind == "tool_result"
    ]
    assert tool_results[0].data["tool_invocation_id"] == log[0][1]
    assert tool_results[0].data["status"] == "completed"
    second = provider.requests[1]
    assert [m.role for m in second.messages] == ["user", "assistant", "tool"]
    assert '"ok": true' in second.messages[2].content
    assert events.types() == ["tool_call", "tool_result", "done"]
    assert_revisions_consistent(store, result.execution_id)


def test_parallel_tool_calls_each_run_once_with_their_own_key(store: Any, runtime: Any) -> None:
    log: list[Any] = []
    provider = ScriptedProvider(
        [
            Reply(
                tool_calls=(("lookup", {"q": "a"}), ("lookup", {"q": "b"}), ("lookup", {"q": "c"}))
            ),
            Reply(content="ok"),
        ]
    )
    agent = Agent.create("a", provider=provider, runtime=runtime, tools=[make_tool(log=log)])
    result = agent.invoke("three", wait_seconds=10)
    assert sorted(a["q"] for a, _ in log) == ["a", "b", "c"]
    assert len({key for _, key in log}) == 3
    tool_messages = [m for m in provider.requests[1].messages if m.role == "tool"]
    assert len(tool_messages) == 3
    assert result.status is AgentStatus.COMPLETED
    children = store.list_records(parent_execution_id=result.execution_id)
    assert sorted(c.execution_id for c in children) == sorted(key for _, key in log)


def test_second_invocation_sees_the_first_conversation(store: Any, runtime: Any) -> None:
    provider = ScriptedProvider([Reply(content="answer")])
    agent = Agent.create("a", provider=provider, runtime=runtime, system_prompt="be brief")
    agent.invoke("one", wait_seconds=10)
    agent.invoke("two", wait_seconds=10)
    roles = [(m.role, m.content) for m in provider.requests[1].messages]
    assert roles == [
        ("system", "be brief"),
        ("user", "one"),
        ("assistant", "answer"),
        ("user", "two"),
    ]
    assert [m.content for m in agent.history()] == ["one", "answer", "two", "answer"]


def test_approval_waits_durably_then_approve_completes_both_tasks(
    store: Any, runtime: Any, events: Events
) -> None:
    log: list[Any] = []
    provider = ScriptedProvider(
        [Reply(tool_calls=(("refund", {"q": "A1"}),)), Reply(content="refunded")]
    )
    agent = Agent.create(
        "a",
        provider=provider,
        runtime=runtime,
        tools=[make_tool("refund", requires_approval=True, log=log)],
        on_event=events,
    )
    task = agent.invoke_async("refund A1")
    event = events.wait_for("approval_required")
    assert isinstance(event, ApprovalRequired)
    assert [i.tool_name for i in event.items] == ["refund"]
    assert event.items[0].arguments == {"q": "A1"}
    assert event.items[0].reason == "the tool requires approval"
    stored = store.load_record(event.execution_id)
    assert stored.status is ExecutionStatus.WAITING and stored.state == "suspended"
    assert stored.context["approval"]["request_id"] == event.request_id
    assert log == [] and not task.done()
    result = agent.approve(
        event.execution_id, approval_request_id=event.request_id, wait_seconds=10
    )
    assert result.output == "refunded" and task.result(5) == result
    assert len(log) == 1
    assert barrier_names(store, result.execution_id) == [
        "@start",
        "initial_preparation",
        "@wait",
        "tool_dispatch",
        "provider_dispatch",
        "@final",
    ]
    decided = [
        e for e in store.journal_entries(result.execution_id) if e.kind == "approval_decided"
    ]
    assert decided[0].data["approved"] is True
    signals = store.list_signals(result.execution_id)
    assert [(s.event, s.outcome) for s in signals if s.event == "approval_decided"] == [
        ("approval_decided", "consumed")
    ]


def test_rejection_ends_rejected_without_running_the_tool(
    store: Any, runtime: Any, events: Events
) -> None:
    log: list[Any] = []
    provider = ScriptedProvider(
        [Reply(tool_calls=(("refund", {"q": "A1"}),)), Reply(content="never")]
    )
    agent = Agent.create(
        "a",
        provider=provider,
        runtime=runtime,
        tools=[make_tool("refund", requires_approval=True, log=log)],
        on_event=events,
    )
    task = agent.invoke_async("refund A1")
    event = events.wait_for("approval_required")
    result = agent.approve(
        event.execution_id, approval_request_id=event.request_id, approved=False, wait_seconds=10
    )
    assert result.status is AgentStatus.REJECTED and result.rejected
    assert task.result(5).status is AgentStatus.REJECTED
    assert log == []
    stored = store.load_record(result.execution_id)
    assert (stored.status, stored.state) == (ExecutionStatus.COMPLETED, "rejected")
    assert len(provider.requests) == 1
    assert store.list_records(parent_execution_id=result.execution_id) == []


def test_per_item_decisions_run_approved_calls_and_tell_the_llm_about_rejected_ones(
    store: Any, runtime: Any, events: Events
) -> None:
    log: list[Any] = []
    provider = ScriptedProvider(
        [
            Reply(tool_calls=(("refund", {"q": "keep"}), ("refund", {"q": "drop"}))),
            Reply(content="partially done"),
        ]
    )
    agent = Agent.create(
        "a",
        provider=provider,
        runtime=runtime,
        tools=[make_tool("refund", requires_approval=True, log=log)],
        on_event=events,
    )
    agent.invoke_async("two refunds")
    event = events.wait_for("approval_required")
    keep = next(i.tool_invocation_id for i in event.items if i.arguments == {"q": "keep"})
    drop = next(i.tool_invocation_id for i in event.items if i.arguments == {"q": "drop"})
    result = agent.approve(
        event.execution_id,
        approval_request_id=event.request_id,
        decisions={keep: True, drop: False},
        wait_seconds=10,
    )
    assert result.status is AgentStatus.COMPLETED and [a for a, _ in log] == [{"q": "keep"}]
    tool_texts = [m.content for m in provider.requests[1].messages if m.role == "tool"]
    assert any("rejected" in text for text in tool_texts)
    assert any('"ok": true' in text for text in tool_texts)


def test_bad_approvals_are_refused_and_change_nothing(
    store: Any, runtime: Any, events: Events
) -> None:
    provider = ScriptedProvider(
        [Reply(tool_calls=(("refund", {"q": "A1"}),)), Reply(content="done")]
    )
    agent = Agent.create(
        "a",
        provider=provider,
        runtime=runtime,
        tools=[make_tool("refund", requires_approval=True)],
        on_event=events,
    )
    task = agent.invoke_async("refund")
    event = events.wait_for("approval_required")
    before = store.load_record(event.execution_id)
    with pytest.raises(ApprovalError, match="does not match"):
        agent.approve(event.execution_id, approval_request_id="wrong", wait_seconds=5)
    with pytest.raises(ApprovalError, match="not in the request"):
        agent.approve(
            event.execution_id,
            approval_request_id=event.request_id,
            decisions={event.items[0].tool_invocation_id: True, "x": True},
            wait_seconds=5,
        )
    with pytest.raises(ApprovalError, match="no decision for"):
        agent.approve(
            event.execution_id, approval_request_id=event.request_id, decisions={}, wait_seconds=5
        )
    assert not task.done()
    after = store.load_record(event.execution_id)
    assert after.revision == before.revision and store.pending_signals(event.execution_id) == []
    result = agent.approve(
        event.execution_id, approval_request_id=event.request_id, wait_seconds=10
    )
    assert result.status is AgentStatus.COMPLETED
    with pytest.raises(ApprovalError, match="already decided"):
        agent.approve(event.execution_id, approval_request_id=event.request_id, wait_seconds=5)


def test_policy_can_deny_or_require_approval(store: Any, runtime: Any, events: Events) -> None:
    decisions = {"danger": "deny", "careful": "require_approval", "normal": "allow"}
    log: list[Any] = []
    provider = ScriptedProvider(
        [Reply(tool_calls=(("lookup", {"q": "danger"}),)), Reply(content="x")]
    )
    agent = Agent.create(
        "a",
        provider=provider,
        runtime=runtime,
        tools=[make_tool(log=log)],
        approval_policy=lambda view: decisions[view.arguments["q"]],
        on_event=events,
    )
    result = agent.invoke("do it", wait_seconds=10)
    assert result.status is AgentStatus.REJECTED and log == []
    calls = store.load_record(result.execution_id).context["tools"]
    assert [(c["status"], c["rejected_by"]) for c in calls] == [("rejected", "policy")]


def test_invalid_arguments_unknown_tools_and_raising_tools_reach_the_llm(
    store: Any, runtime: Any, caplog: Any
) -> None:
    def boom(arguments: Any, context: Any) -> Any:
        raise RuntimeError("database down")

    provider = ScriptedProvider(
        [
            Reply(
                tool_calls=(
                    ("lookup", {"wrong": 1}),
                    ("nope", {}),
                    ("explode", {"q": "x"}),
                    ("lookup", '{"q": '),
                )
            ),
            Reply(content="I could not do it"),
        ]
    )
    agent = Agent.create(
        "a", provider=provider, runtime=runtime, tools=[make_tool(), make_tool("explode", fn=boom)]
    )
    with caplog.at_level("WARNING", logger="phronomy_fsm.agent.tools"):
        result = agent.invoke("try", wait_seconds=10)
    assert result.output == "I could not do it"
    texts = [m.content for m in provider.requests[1].messages if m.role == "tool"]
    assert any("invalid arguments for tool 'lookup'" in t and "q" in t for t in texts)
    assert any("unknown tool 'nope'" in t for t in texts)
    assert any("RuntimeError: database down" in t for t in texts)
    assert any("not JSON" in t for t in texts)
    stored = [e.data for e in store.journal_entries(result.execution_id) if e.kind == "tool_result"]
    assert sorted(d["status"] for d in stored) == ["failed"] * 4
    raised = next(d for d in stored if d["tool_name"] == "explode")
    assert raised["error"] == "RuntimeError: database down"
    # the traceback of the raising tool is in the log
    record = next(r for r in caplog.records if "explode" in r.getMessage())
    assert record.exc_info is not None and "database down" in str(record.exc_info[1])


def test_busy_agent_refuses_a_second_invoke(store: Any, runtime: Any, events: Events) -> None:
    provider = ScriptedProvider([Reply(tool_calls=(("refund", {"q": "1"}),)), Reply(content="ok")])
    agent = Agent.create(
        "a",
        provider=provider,
        runtime=runtime,
        tools=[make_tool("refund", requires_approval=True)],
        on_event=events,
    )
    agent.invoke_async("first")
    event = events.wait_for("approval_required")
    with pytest.raises(AgentBusyError, match=event.execution_id):
        agent.invoke("second", wait_seconds=5)
    assert len(sessions(store, "a")) == 1


def test_cancel_waits_for_the_running_tool_then_commits_cancelled(
    store: Any, runtime: Any, events: Events
) -> None:
    started, release = threading.Event(), threading.Event()
    seen_cancel = threading.Event()

    def slow(arguments: Any, context: Any) -> Any:
        started.set()
        context.cancellation.on_cancel(lambda _e: seen_cancel.set())
        release.wait(10)
        return "late"

    provider = ScriptedProvider([Reply(tool_calls=(("slow", {"q": "x"}),)), Reply(content="never")])
    agent = Agent.create(
        "a", provider=provider, runtime=runtime, tools=[make_tool("slow", fn=slow)], on_event=events
    )
    task = agent.invoke_async("go")
    assert started.wait(10)
    execution_id = agent.active_execution().execution_id
    assert agent.cancel() is True
    assert seen_cancel.wait(5)  # the tool was told
    # nothing is final while the tool still runs: the agent stays busy
    with pytest.raises(AgentBusyError):
        agent.invoke("another", wait_seconds=5)
    assert store.load_record(execution_id).is_active
    release.set()
    with pytest.raises(Cancelled):
        task.result(10)
    stored = store.load_record(execution_id)
    assert stored.status is ExecutionStatus.CANCELLED
    assert "cancelled" in events.types()
    assert len(provider.requests) == 1  # the late result was dropped: no follow-up call
    child = store.list_records(parent_execution_id=execution_id)[0]
    assert child.status is ExecutionStatus.CANCELLED
    assert_revisions_consistent(store, execution_id)
    assert agent.cancel() is False  # nothing left to cancel


def test_cancel_of_an_execution_waiting_for_approval(
    store: Any, runtime: Any, events: Events
) -> None:
    provider = ScriptedProvider([Reply(tool_calls=(("refund", {"q": "1"}),))])
    agent = Agent.create(
        "a",
        provider=provider,
        runtime=runtime,
        tools=[make_tool("refund", requires_approval=True)],
        on_event=events,
    )
    task = agent.invoke_async("go")
    event = events.wait_for("approval_required")
    assert agent.cancel(event.execution_id)
    with pytest.raises(Cancelled):
        task.result(10)
    assert store.load_record(event.execution_id).status is ExecutionStatus.CANCELLED
    assert agent.active_execution() is None


def test_cancel_interrupts_a_blocked_llm_call(store: Any, runtime: Any) -> None:
    agent = Agent.create(
        "a", provider=ScriptedProvider([Reply(content="slow", delay_seconds=30)]), runtime=runtime
    )
    task = agent.invoke_async("hi")
    for _ in range(200):
        record = agent.active_execution()
        if record is not None and record.state == "preparing":
            break
        threading.Event().wait(0.01)
    threading.Event().wait(0.1)
    assert agent.cancel()
    with pytest.raises(Cancelled):
        task.result(5)  # well before the 30 s the call would take


def test_timeout_fails_the_execution_after_quiescence(
    store: Any, runtime: Any, events: Events
) -> None:
    provider = ScriptedProvider([Reply(content="too late", delay_seconds=5)])
    agent = Agent.create("a", provider=provider, runtime=runtime, on_event=events)
    with pytest.raises(ExecutionTimeoutError):
        agent.invoke("hi", timeout_seconds=0.2, wait_seconds=10)
    record = sessions(store, "a")[0]
    assert record.status is ExecutionStatus.FAILED
    assert record.error.type == "DeadlineExceededError"
    assert "timeout" in events.types()


def test_llm_failure_fails_the_execution_durably(store: Any, runtime: Any, events: Events) -> None:
    provider = ScriptedProvider([LLMError("provider down")])
    agent = Agent.create("a", provider=provider, runtime=runtime, on_event=events)
    with pytest.raises(LLMError, match="provider down"):
        agent.invoke("hi", wait_seconds=10)
    record = sessions(store, "a")[0]
    assert (record.status, record.state) == (ExecutionStatus.FAILED, "failed")
    assert (record.context["error_type"], record.context["error"]) == ("LLMError", "provider down")
    assert events.types() == ["error"]
    assert agent.active_execution() is None


def test_filters_can_block_input_and_output(store: Any, runtime: Any) -> None:
    def no_secrets(text: str) -> str:
        if "secret" in text:
            raise ContentBlockedError("contains a secret")
        return text.upper()

    provider = ScriptedProvider([Reply(content="the secret is 42")])
    agent = Agent.create(
        "a",
        provider=provider,
        runtime=runtime,
        input_filters=[no_secrets],
        output_filters=[no_secrets],
    )
    with pytest.raises(ContentBlockedError, match="secret"):
        agent.invoke("tell me the secret", wait_seconds=10)
    assert provider.requests == []
    with pytest.raises(ContentBlockedError):
        agent.invoke("tell me", wait_seconds=10)
    assert provider.requests[0].messages[-1].content == "TELL ME"
    states = [(r.status, r.state) for r in sessions(store, "a")]
    assert states == [(ExecutionStatus.FAILED, "blocked")] * 2


def test_max_iterations_stops_a_tool_loop(store: Any, runtime: Any) -> None:
    provider = ScriptedProvider([Reply(tool_calls=(("lookup", {"q": "again"}),))])  # forever
    agent = Agent.create(
        "a", provider=provider, runtime=runtime, tools=[make_tool()], max_iterations=3
    )
    with pytest.raises(ExecutionFailedError, match="max_iterations"):
        agent.invoke("loop", wait_seconds=10)
    assert len(provider.requests) == 3


def test_listener_failure_mid_run_fails_the_execution(store: Any, runtime: Any) -> None:
    def listener(event: Any) -> None:
        if event.type == "tool_call":
            raise ValueError("listener bug")

    provider = ScriptedProvider(
        [Reply(tool_calls=(("lookup", {"q": "x"}),)), Reply(content="ok", delay_seconds=1)]
    )
    agent = Agent.create(
        "a",
        provider=provider,
        runtime=runtime,
        tools=[make_tool()],
        on_event=listener,
        listener_error_policy="fail_task",
    )
    with pytest.raises(StreamCallbackError):
        agent.invoke("hi", wait_seconds=10)
    record = sessions(store, "a")[0]
    assert record.status is ExecutionStatus.FAILED and record.error.type == "StreamCallbackError"


def test_listener_failure_mid_run_is_reported_by_default(store: Any, runtime: Any) -> None:
    def listener(event: Any) -> None:
        if event.type == "tool_call":
            raise ValueError("listener bug")

    provider = ScriptedProvider([Reply(tool_calls=(("lookup", {"q": "x"}),)), Reply(content="ok")])
    agent = Agent.create(
        "a", provider=provider, runtime=runtime, tools=[make_tool()], on_event=listener
    )
    assert agent.invoke("hi", wait_seconds=10).output == "ok"


@pytest.mark.parametrize("policy", ["report", "fail_task"])
def test_terminal_listener_failure_follows_the_policy(
    store: Any, runtime: Any, policy: str
) -> None:
    def listener(event: Any) -> None:
        if event.type == "done":
            raise ValueError("done handler bug")

    agent = Agent.create(
        "a",
        provider=ScriptedProvider([Reply(content="ok")]),
        runtime=runtime,
        on_event=listener,
        listener_error_policy=policy,
    )
    if policy == "report":
        assert agent.invoke("hi", wait_seconds=10).output == "ok"
    else:
        with pytest.raises(StreamCallbackError):
            agent.invoke("hi", wait_seconds=10)
    # the execution itself completed durably either way
    assert sessions(store, "a")[0].status is ExecutionStatus.COMPLETED


def test_stream_yields_tokens_then_done(store: Any, runtime: Any) -> None:
    agent = Agent.create(
        "a", provider=ScriptedProvider([Reply(content="one two three")]), runtime=runtime
    )
    stream = agent.stream("count")
    seen = list(stream)
    tokens = [e.content for e in seen if isinstance(e, Token)]
    assert "".join(tokens) == "one two three" and len(tokens) == 3
    assert isinstance(seen[-1], Done) and seen[-1].terminal
    assert stream.result(5).output == "one two three"


def test_stream_can_be_iterated_with_async_for(store: Any, runtime: Any) -> None:
    import asyncio

    agent = Agent.create(
        "a", provider=ScriptedProvider([Reply(content="one two")]), runtime=runtime
    )

    async def consume() -> tuple[list[str], str | None]:
        stream = agent.stream("count")
        seen = [e.type.value async for e in stream]
        result = await stream.task
        return seen, result.output

    seen, output = asyncio.run(consume())
    assert seen == ["token", "token", "done"] and output == "one two"


def test_bad_input_is_a_typed_error_and_writes_nothing(store: Any, runtime: Any) -> None:
    agent = Agent.create("a", provider=ScriptedProvider([Reply(content="x")]), runtime=runtime)
    for bad in (42, None, b"bytes", ["list"], "   "):
        with pytest.raises(InvalidInputError):
            agent.invoke(bad, wait_seconds=5)  # type: ignore[arg-type]
    assert sessions(store, "a") == []
    with pytest.raises(AgentExistsError):
        Agent.create("a", provider=ScriptedProvider([Reply(content="x")]), runtime=runtime)


def _hand_off_to_billing(runtime: Any, message: str = "invoice question") -> Any:
    """Create agent "front", whose LLM hands off to "billing" with ``message``, and run
    it; returns its (handed_off) result."""
    front = Agent.create(
        "front",
        provider=ScriptedProvider([Reply(tool_calls=(("to_billing", {"message": message}),))]),
        runtime=runtime,
        handoffs={"to_billing": "billing"},
    )
    return front.invoke("I have an invoice question", wait_seconds=10)


def _wait_finished(store: Any, execution_id: str) -> Any:
    for _ in range(1000):
        try:
            record = store.load_record(execution_id)
        except Exception:  # noqa: BLE001 - not started yet
            record = None
        if record is not None and record.is_finished:
            return record
        threading.Event().wait(0.01)
    raise AssertionError(f"{execution_id} did not finish")


def test_handoff_ends_handed_off_and_starts_the_target_under_a_derived_id(
    store: Any, runtime: Any, events: Events
) -> None:
    Agent.create(
        "billing",
        provider=ScriptedProvider([Reply(content="billing here")]),
        runtime=runtime,
        on_event=events,
    )
    result = _hand_off_to_billing(runtime)
    assert result.status is AgentStatus.HANDED_OFF
    target_id = result.handoff["target_execution_id"]
    assert target_id == handoff_target_execution_id(result.execution_id, "billing")
    done = _wait_finished(store, target_id)
    assert done.context["output"] == "billing here" and done.exclusive_key == "billing"
    assert done.context["input"] == "invoice question"
    # the handoff call is not part of front's history (it has no tool result)
    front_history = [m.role for m in runtime.directory.live("front").history]
    assert front_history == ["user"]
    assert_stored_conversations_are_legal(store, "front")


def test_a_committed_handoff_never_started_is_started_when_the_target_loads(
    store: Any, runtime: Any
) -> None:
    """As after a crash between the handoff's commit and the target's start: the target
    agent is not loaded where the handoff commits; loading it starts the handoff under
    its derived id, exactly once."""
    other = AgentRuntime(store)
    Agent.create("billing", provider=ScriptedProvider([Reply("unused")]), runtime=other)
    other.close()
    result = _hand_off_to_billing(runtime)
    target_id = result.handoff["target_execution_id"]
    threading.Event().wait(0.2)
    assert sessions(store, "billing") == []
    provider = ScriptedProvider([Reply("billing here")])
    Agent.load("billing", provider=provider, runtime=runtime)
    done = _wait_finished(store, target_id)
    assert done.context["output"] == "billing here"
    assert provider.requests[0].messages[-1].content == "invoice question"
    # loading again elsewhere does not start it a second time
    third = AgentRuntime(store)
    try:
        Agent.load("billing", provider=ScriptedProvider([Reply("x")]), runtime=third)
        threading.Event().wait(0.2)
        assert [r.execution_id for r in sessions(store, "billing")] == [target_id]
    finally:
        third.close()


def test_a_handoff_to_a_busy_target_waits_for_its_current_execution(
    store: Any, runtime: Any
) -> None:
    billing = Agent.create(
        "billing",
        provider=ScriptedProvider(
            [
                lambda request, i: (
                    Reply("first", delay_seconds=0.3)
                    if request.messages[-1].content == "keep billing busy"
                    else Reply(f"second: {request.messages[-1].content}")
                )
            ]
        ),
        runtime=runtime,
    )
    busy = billing.invoke_async("keep billing busy")
    target_id = _hand_off_to_billing(runtime, "queued").handoff["target_execution_id"]
    assert busy.result(10).output == "first"
    assert _wait_finished(store, target_id).context["output"] == "second: queued"


def test_store_is_consistent_after_many_flows(store: Any, runtime: Any) -> None:
    """Each execution's barrier log is gapless, each finished execution journaled its
    conversation once, and the history is a legal conversation (read back)."""
    provider = ScriptedProvider([Reply(tool_calls=(("lookup", {"q": "x"}),)), Reply(content="ok")])
    agent = Agent.create("a", provider=provider, runtime=runtime, tools=[make_tool()])
    ids = [agent.invoke(f"run {i}", wait_seconds=10).execution_id for i in range(3)]
    for execution_id in ids:
        assert_revisions_consistent(store, execution_id)
    assert_stored_conversations_are_legal(store, "a")
    # the history read back from the store is what the live agent holds
    from phronomy_fsm.agent.journal import history

    assert history(store, "a") == agent.history()
