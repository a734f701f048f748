"""Agent executions end to end on a real SQLite store (issue 5; reference §4, §8)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from phronomy_fsm.agent import Agent, Reply, ScriptedProvider
from phronomy_fsm.agent.durable import MESSAGE_KINDS
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
from phronomy_fsm.store.records import ExecutionStatus

from .conftest import Events, make_tool


def barrier_names(store: Any, execution_id: str) -> list[str]:
    return [b.barrier for b in store.barrier_history(execution_id)]


def assert_revisions_consistent(store: Any, execution_id: str) -> None:
    """The barrier log has one row per revision 0..n and the record is at n."""
    history = store.barrier_history(execution_id)
    execution = store.load_execution(execution_id)
    assert [b.revision for b in history] == list(range(execution.revision + 1))
    assert history[-1].status == execution.status.value


def test_plain_answer_commits_admission_preparation_and_terminal(
    store: Any, runtime: Any, events: Events
) -> None:
    provider = ScriptedProvider([Reply(content="Hello there.")])
    agent = Agent.create("a", store=store, provider=provider, runtime=runtime, on_event=events)
    result = agent.invoke("hi", wait_seconds=10)
    assert (result.status, result.output, result.revision) == ("completed", "Hello there.", 2)
    assert barrier_names(store, result.execution_id) == [
        "admission",
        "initial_preparation",
        "terminal_commit",
    ]
    assert_revisions_consistent(store, result.execution_id)
    stored = store.load_execution(result.execution_id)
    assert stored.status is ExecutionStatus.COMPLETED and stored.output == "Hello there."
    assert events.types() == ["done"]
    kinds = [r.kind for r in store.read_journal("a")]
    assert kinds == [
        "input_received",
        "user_message",
        "llm_call_recorded",
        "assistant_message",
        "final_output",
        "execution_completed",
    ]
    assert store.load_agent("a").lifecycle.value == "idle"


def test_tool_cycle_commits_a_barrier_before_each_effect(
    store: Any, runtime: Any, events: Events
) -> None:
    log: list[Any] = []
    provider = ScriptedProvider(
        [Reply(tool_calls=(("lookup", {"q": "x"}),)), Reply(content="found x")]
    )
    agent = Agent.create(
        "a",
        store=store,
        provider=provider,
        runtime=runtime,
        tools=[make_tool(log=log)],
        on_event=events,
    )
    result = agent.invoke("find x", wait_seconds=10)
    assert result.output == "found x"
    assert barrier_names(store, result.execution_id) == [
        "admission",
        "initial_preparation",
        "tool_dispatch",
        "provider_dispatch",
        "terminal_commit",
    ]
    assert len(log) == 1 and log[0][0] == {"q": "x"}
    # the idempotency key is the durable tool invocation id
    tool_records = [r for r in store.read_journal("a") if r.kind == "tool_result"]
    assert tool_records[0].tool_invocation_id == log[0][1]
    # the follow-up LLM request contained the tool result
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
    agent = Agent.create(
        "a", store=store, provider=provider, runtime=runtime, tools=[make_tool(log=log)]
    )
    result = agent.invoke("three", wait_seconds=10)
    assert sorted(a["q"] for a, _ in log) == ["a", "b", "c"]
    assert len({key for _, key in log}) == 3
    tool_messages = [m for m in provider.requests[1].messages if m.role == "tool"]
    assert len(tool_messages) == 3
    assert result.status == "completed"


def test_second_invocation_sees_the_first_conversation(store: Any, runtime: Any) -> None:
    provider = ScriptedProvider([Reply(content="answer")])
    agent = Agent.create(
        "a", store=store, provider=provider, runtime=runtime, system_prompt="be brief"
    )
    agent.invoke("one", wait_seconds=10)
    agent.invoke("two", wait_seconds=10)
    roles = [(m.role, m.content) for m in provider.requests[1].messages]
    assert roles == [
        ("system", "be brief"),
        ("user", "one"),
        ("assistant", "answer"),
        ("user", "two"),
    ]


def test_approval_suspends_durably_then_approve_completes_both_tasks(
    store: Any, runtime: Any, events: Events
) -> None:
    log: list[Any] = []
    provider = ScriptedProvider(
        [Reply(tool_calls=(("refund", {"q": "A1"}),)), Reply(content="refunded")]
    )
    agent = Agent.create(
        "a",
        store=store,
        provider=provider,
        runtime=runtime,
        tools=[make_tool("refund", requires_approval=True, log=log)],
        on_event=events,
    )
    task = agent.invoke_async("refund A1")
    event = events.wait_for("approval_required")
    request = event.payload["request"]
    stored = store.load_execution(event.execution_id)
    assert stored.status is ExecutionStatus.SUSPENDED and stored.phase == "approval"
    assert stored.approval_request.request_id == request["id"]
    assert log == [] and not task.done()
    assert store.load_agent("a").lifecycle.value == "suspended"
    result = agent.approve(event.execution_id, approval_request_id=request["id"], wait_seconds=10)
    assert result.output == "refunded" and task.result(5) == result
    assert len(log) == 1
    assert barrier_names(store, result.execution_id) == [
        "admission",
        "initial_preparation",
        "suspension",
        "approval_decision",
        "tool_dispatch",
        "provider_dispatch",
        "terminal_commit",
    ]
    decided = [r for r in store.read_journal("a") if r.kind == "approval_decided"]
    assert decided[0].content["approved"] is True


def test_rejection_ends_rejected_without_running_the_tool(
    store: Any, runtime: Any, events: Events
) -> None:
    log: list[Any] = []
    provider = ScriptedProvider(
        [Reply(tool_calls=(("refund", {"q": "A1"}),)), Reply(content="never")]
    )
    agent = Agent.create(
        "a",
        store=store,
        provider=provider,
        runtime=runtime,
        tools=[make_tool("refund", requires_approval=True, log=log)],
        on_event=events,
    )
    task = agent.invoke_async("refund A1")
    event = events.wait_for("approval_required")
    result = agent.approve(
        event.execution_id,
        approval_request_id=event.payload["request"]["id"],
        approved=False,
        wait_seconds=10,
    )
    assert result.status == "rejected" and result.rejected and task.result(5).status == "rejected"
    assert log == []
    assert store.load_execution(result.execution_id).status is ExecutionStatus.REJECTED
    assert len(provider.requests) == 1


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
        store=store,
        provider=provider,
        runtime=runtime,
        tools=[make_tool("refund", requires_approval=True, log=log)],
        on_event=events,
    )
    agent.invoke_async("two refunds")
    event = events.wait_for("approval_required")
    items = event.payload["request"]["items"]
    keep = next(i["tool_invocation_id"] for i in items if i["arguments"] == {"q": "keep"})
    drop = next(i["tool_invocation_id"] for i in items if i["arguments"] == {"q": "drop"})
    result = agent.approve(
        event.execution_id,
        approval_request_id=event.payload["request"]["id"],
        decisions={keep: True, drop: False},
        wait_seconds=10,
    )
    assert result.status == "completed" and [a for a, _ in log] == [{"q": "keep"}]
    tool_texts = [m.content for m in provider.requests[1].messages if m.role == "tool"]
    assert any("rejected" in text for text in tool_texts) and any(
        '"ok": true' in text for text in tool_texts
    )


def test_bad_approvals_fail_only_the_approve_call(store: Any, runtime: Any, events: Events) -> None:
    provider = ScriptedProvider(
        [Reply(tool_calls=(("refund", {"q": "A1"}),)), Reply(content="done")]
    )
    agent = Agent.create(
        "a",
        store=store,
        provider=provider,
        runtime=runtime,
        tools=[make_tool("refund", requires_approval=True)],
        on_event=events,
    )
    task = agent.invoke_async("refund")
    event = events.wait_for("approval_required")
    with pytest.raises(ApprovalError, match="does not match"):
        agent.approve(event.execution_id, approval_request_id="wrong", wait_seconds=5)
    with pytest.raises(ApprovalError, match="unknown tool invocations"):
        agent.approve(
            event.execution_id,
            approval_request_id=event.payload["request"]["id"],
            decisions={"x": True},
            wait_seconds=5,
        )
    assert not task.done()
    before = store.load_execution(event.execution_id)
    assert before.status is ExecutionStatus.SUSPENDED and before.approval_request.approved is None
    # two approvals at once: one wins, the other is refused
    first = agent.approve_async(
        event.execution_id, approval_request_id=event.payload["request"]["id"]
    )
    second = agent.approve_async(
        event.execution_id, approval_request_id=event.payload["request"]["id"]
    )
    assert first.result(10).status == "completed"
    with pytest.raises(ApprovalError):
        second.result(10)
    with pytest.raises(ApprovalError):  # no longer live at all
        agent.approve(
            event.execution_id, approval_request_id=event.payload["request"]["id"], wait_seconds=5
        )


def test_policy_can_deny_or_require_approval(store: Any, runtime: Any, events: Events) -> None:
    decisions = {"danger": "deny", "normal": "allow"}
    log: list[Any] = []
    provider = ScriptedProvider(
        [Reply(tool_calls=(("lookup", {"q": "danger"}),)), Reply(content="x")]
    )
    agent = Agent.create(
        "a",
        store=store,
        provider=provider,
        runtime=runtime,
        tools=[make_tool(log=log)],
        approval_policy=lambda view: decisions[view.arguments["q"]],
        on_event=events,
    )
    result = agent.invoke("do it", wait_seconds=10)
    assert result.status == "rejected" and log == []


def test_invalid_arguments_unknown_tools_and_raising_tools_reach_the_llm(
    store: Any, runtime: Any
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
        "a",
        store=store,
        provider=provider,
        runtime=runtime,
        tools=[make_tool(), make_tool("explode", fn=boom)],
    )
    result = agent.invoke("try", wait_seconds=10)
    assert result.output == "I could not do it"
    texts = [m.content for m in provider.requests[1].messages if m.role == "tool"]
    assert any("invalid arguments for tool 'lookup'" in t and "q" in t for t in texts)
    assert any("unknown tool 'nope'" in t for t in texts)
    assert any("RuntimeError: database down" in t for t in texts)
    assert any("not JSON" in t for t in texts)
    stored = [r for r in store.read_journal("a") if r.kind == "tool_result"]
    assert sorted(r.content["status"] for r in stored) == ["failed", "failed", "failed", "failed"]


def test_busy_agent_refuses_a_second_invoke(store: Any, runtime: Any, events: Events) -> None:
    provider = ScriptedProvider([Reply(tool_calls=(("refund", {"q": "1"}),)), Reply(content="ok")])
    agent = Agent.create(
        "a",
        store=store,
        provider=provider,
        runtime=runtime,
        tools=[make_tool("refund", requires_approval=True)],
        on_event=events,
    )
    agent.invoke_async("first")
    events.wait_for("approval_required")
    with pytest.raises(AgentBusyError):
        agent.invoke("second", wait_seconds=5)
    assert len(store.list_executions(agent_id="a")) == 1


def test_cancel_waits_for_the_running_tool_then_commits_cancelled(
    store: Any, runtime: Any, events: Events
) -> None:
    started, release = threading.Event(), threading.Event()

    def slow(arguments: Any, context: Any) -> Any:
        started.set()
        release.wait(10)
        return "late"

    provider = ScriptedProvider([Reply(tool_calls=(("slow", {"q": "x"}),)), Reply(content="never")])
    agent = Agent.create(
        "a",
        store=store,
        provider=provider,
        runtime=runtime,
        tools=[make_tool("slow", fn=slow)],
        on_event=events,
    )
    task = agent.invoke_async("go")
    assert started.wait(10)
    assert agent.cancel() is True
    # quiescence: the tool still runs, so nothing is terminal and the agent stays busy
    with pytest.raises(AgentBusyError):
        agent.invoke("another", wait_seconds=5)
    execution_id = agent.active_execution()["execution_id"]
    assert store.load_execution(execution_id).is_active
    release.set()
    with pytest.raises(Cancelled):
        task.result(10)
    stored = store.load_execution(execution_id)
    assert stored.status is ExecutionStatus.CANCELLED
    assert "cancelled" in events.types()
    assert len(provider.requests) == 1  # the late tool result was dropped, no follow-up call
    assert_revisions_consistent(store, execution_id)


def test_cancel_of_a_suspended_execution(store: Any, runtime: Any, events: Events) -> None:
    provider = ScriptedProvider([Reply(tool_calls=(("refund", {"q": "1"}),))])
    agent = Agent.create(
        "a",
        store=store,
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
    assert store.load_execution(event.execution_id).status is ExecutionStatus.CANCELLED
    assert store.load_agent("a").lifecycle.value == "idle"


def test_timeout_fails_the_execution_after_quiescence(
    store: Any, runtime: Any, events: Events
) -> None:
    provider = ScriptedProvider([Reply(content="too late", delay_seconds=5)])
    agent = Agent.create("a", store=store, provider=provider, runtime=runtime, on_event=events)
    with pytest.raises(ExecutionTimeoutError):
        agent.invoke("hi", timeout_seconds=0.2, wait_seconds=10)
    execution = store.list_executions(agent_id="a")[0]
    assert (
        execution.status is ExecutionStatus.FAILED
        and execution.error.type == "ExecutionTimeoutError"
    )
    assert "timeout" in events.types()


def test_llm_failure_fails_the_execution_durably(store: Any, runtime: Any, events: Events) -> None:
    provider = ScriptedProvider([LLMError("provider down")])
    agent = Agent.create("a", store=store, provider=provider, runtime=runtime, on_event=events)
    with pytest.raises(LLMError, match="provider down"):
        agent.invoke("hi", wait_seconds=10)
    execution = store.list_executions(agent_id="a")[0]
    assert execution.status is ExecutionStatus.FAILED and execution.error.message == "provider down"
    assert events.types() == ["error"]
    assert store.load_agent("a").lifecycle.value == "idle"


def test_filters_can_block_input_and_output(store: Any, runtime: Any) -> None:
    def no_secrets(text: str) -> str:
        if "secret" in text:
            raise ContentBlockedError("contains a secret")
        return text.upper()

    provider = ScriptedProvider([Reply(content="the secret is 42")])
    agent = Agent.create(
        "a",
        store=store,
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
    statuses = [e.status for e in store.list_executions(agent_id="a")]
    assert statuses == [ExecutionStatus.BLOCKED, ExecutionStatus.BLOCKED]


def test_max_iterations_stops_a_tool_loop(store: Any, runtime: Any) -> None:
    provider = ScriptedProvider(
        [Reply(tool_calls=(("lookup", {"q": "again"}),))]
    )  # repeats forever
    agent = Agent.create(
        "a", store=store, provider=provider, runtime=runtime, tools=[make_tool()], max_iterations=3
    )
    with pytest.raises(ExecutionFailedError, match="max_iterations"):
        agent.invoke("loop", wait_seconds=10)
    assert len(provider.requests) == 3


def test_listener_failure_mid_run_fails_the_execution(store: Any, runtime: Any) -> None:
    def listener(event: Any) -> None:
        if event.type == "tool_call":
            raise ValueError("listener bug")

    provider = ScriptedProvider([Reply(tool_calls=(("lookup", {"q": "x"}),)), Reply(content="ok")])
    agent = Agent.create(
        "a", store=store, provider=provider, runtime=runtime, tools=[make_tool()], on_event=listener
    )
    with pytest.raises(StreamCallbackError):
        agent.invoke("hi", wait_seconds=10)
    assert store.list_executions(agent_id="a")[0].status is ExecutionStatus.FAILED


@pytest.mark.parametrize("policy", ["report", "fail_task"])
def test_terminal_listener_failure_follows_the_policy(
    store: Any, runtime: Any, policy: str
) -> None:
    def listener(event: Any) -> None:
        if event.type == "done":
            raise ValueError("done handler bug")

    agent = Agent.create(
        "a",
        store=store,
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
    assert store.list_executions(agent_id="a")[0].status is ExecutionStatus.COMPLETED


def test_stream_yields_tokens_then_done(store: Any, runtime: Any) -> None:
    agent = Agent.create(
        "a",
        store=store,
        provider=ScriptedProvider([Reply(content="one two three")]),
        runtime=runtime,
    )
    stream = agent.stream("count")
    events = list(stream)
    tokens = [e.payload["content"] for e in events if e.type == "token"]
    assert "".join(tokens) == "one two three" and len(tokens) == 3
    assert events[-1].type == "done"
    assert stream.result(5).output == "one two three"


def test_bad_input_and_configuration_are_typed_errors(store: Any, runtime: Any) -> None:
    agent = Agent.create(
        "a", store=store, provider=ScriptedProvider([Reply(content="x")]), runtime=runtime
    )
    for bad in (42, None, b"bytes", ["list"], "   "):
        with pytest.raises(InvalidInputError):
            agent.invoke(bad, wait_seconds=5)  # type: ignore[arg-type]
    assert store.list_executions(agent_id="a") == []
    with pytest.raises(AgentExistsError):
        Agent.create(
            "a", store=store, provider=ScriptedProvider([Reply(content="x")]), runtime=runtime
        )


def _hand_off_to_billing(store: Any, runtime: Any, message: str = "invoice question") -> Any:
    """Create agent "front", whose LLM hands off to "billing" with ``message``, and run
    it; returns its (handed_off) result."""
    front = Agent.create(
        "front",
        store=store,
        provider=ScriptedProvider([Reply(tool_calls=(("to_billing", {"message": message}),))]),
        runtime=runtime,
        handoffs={"to_billing": "billing"},
    )
    return front.invoke("I have an invoice question", wait_seconds=10)


def test_handoff_ends_handed_off_and_starts_the_target_under_a_deterministic_id(
    store: Any, runtime: Any
) -> None:
    billing = Agent.create(
        "billing",
        store=store,
        provider=ScriptedProvider([Reply(content="billing here")]),
        runtime=runtime,
    )
    result = _hand_off_to_billing(store, runtime)
    assert result.status == "handed_off"
    target_id = result.handoff["target_execution_id"]
    assert target_id.startswith("handoff-target-")
    from phronomy_fsm.agent.durable import handoff_target_execution_id

    assert target_id == handoff_target_execution_id(result.execution_id, "billing")
    for _ in range(500):
        executions = store.list_executions(agent_id="billing")
        if executions and executions[0].is_terminal:
            break
        threading.Event().wait(0.01)
    assert executions[0].execution_id == target_id and executions[0].output == "billing here"
    assert billing.agent_id == "billing"


def test_store_is_consistent_after_every_flow(store: Any, runtime: Any) -> None:
    """Every journal message belongs to an execution and every execution's barrier log
    is gapless (reading the store back after the flows above on one agent)."""
    provider = ScriptedProvider([Reply(tool_calls=(("lookup", {"q": "x"}),)), Reply(content="ok")])
    agent = Agent.create("a", store=store, provider=provider, runtime=runtime, tools=[make_tool()])
    ids = [agent.invoke(f"run {i}", wait_seconds=10).execution_id for i in range(3)]
    journal = store.read_journal("a")
    assert [r.sequence for r in journal] == list(range(1, len(journal) + 1))
    assert store.load_agent("a").journal_head == len(journal)
    assert {r.execution_id for r in journal} == set(ids)
    for execution_id in ids:
        assert_revisions_consistent(store, execution_id)
    messages = [r for r in journal if r.kind in MESSAGE_KINDS]
    assert all(r.context_candidate for r in messages)


def _wait_terminal(store: Any, execution_id: str) -> Any:
    for _ in range(1000):
        try:
            execution = store.load_execution(execution_id)
        except Exception:  # noqa: BLE001 - not admitted yet
            execution = None
        if execution is not None and execution.is_terminal:
            return execution
        threading.Event().wait(0.01)
    raise AssertionError(f"{execution_id} did not end")


def test_an_acknowledged_handoff_never_admitted_is_started_when_the_target_loads(
    store: Any, runtime: Any
) -> None:
    """As after a crash between the handoff commit and the target's admission: the
    target agent is not live when the handoff is acknowledged; loading it (here, or
    after a restart) starts the handoff under its deterministic id, exactly once."""
    billing = Agent.create(
        "billing", store=store, provider=ScriptedProvider([Reply("unused")]), runtime=runtime
    )
    billing.close()  # not live: nobody starts the target at the handoff
    result = _hand_off_to_billing(store, runtime)
    target_id = result.handoff["target_execution_id"]
    threading.Event().wait(0.2)
    assert [e.execution_id for e in store.list_executions(agent_id="billing")] == []
    provider = ScriptedProvider([Reply("billing here")])
    loaded = Agent.load("billing", store=store, provider=provider, runtime=runtime)
    done = _wait_terminal(store, target_id)
    assert done.output == "billing here" and done.agent_id == "billing"
    assert provider.requests[0].messages[-1].content == "invoice question"
    loaded.close()
    # loading again does not start it a second time
    Agent.load("billing", store=store, provider=ScriptedProvider([Reply("x")]), runtime=runtime)
    threading.Event().wait(0.2)
    assert [e.execution_id for e in store.list_executions(agent_id="billing")] == [target_id]


def test_a_handoff_to_a_busy_target_waits_for_its_current_execution(
    store: Any, runtime: Any
) -> None:
    billing = Agent.create(
        "billing",
        store=store,
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
    target_id = _hand_off_to_billing(store, runtime, "queued").handoff["target_execution_id"]
    assert busy.result(10).output == "first"
    assert _wait_terminal(store, target_id).output == "second: queued"
