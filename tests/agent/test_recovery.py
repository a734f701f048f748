"""Recovery of agent executions after their process stopped mid-effect, and the
re-send policies (docs/agent.md, "Recovery" and "Re-send policies").

A runtime is closed (with a short grace period) while an LLM call or a tool is in
flight — what a crash leaves in the store: the barrier that announced the effect is
committed, its outcome is not. A second runtime on the same SQLite file loads the agent:
an ``at_most_once`` effect parks the execution for an operator (never re-sent), an
``idempotent`` one is sent again with the same key, and an operator's answer decides
what happens next. Everything is read back from the store.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from phronomy_fsm.agent import (
    Agent,
    AgentRuntime,
    AgentStatus,
    LLMRequest,
    RecoveryRequired,
    Reply,
    ScriptedProvider,
)
from phronomy_fsm.agent.approvals import send_resolution
from phronomy_fsm.agent.ids import handoff_target_execution_id
from phronomy_fsm.agent.types import LLMResponse, ToolCall
from phronomy_fsm.durable.records import ExecutionStatus
from phronomy_fsm.errors import (
    AgentClosedError,
    EffectFailedError,
    EffectNotPerformedError,
    ExecutionFailedError,
    ExecutionFinishedError,
    NotFoundError,
    ResolutionError,
)
from phronomy_fsm.store import SqliteBarrierStore
from phronomy_fsm.testing.deadlines import scaled_seconds

from .conftest import Events, assert_stored_conversations_are_legal, make_tool


class StuckProvider:
    """Answers from a script, but blocks the first call (ignoring cancellation, like a
    process that is about to die) until ``release`` is set. Records every call id."""

    def __init__(self, script: list[Any]) -> None:
        self.inner = ScriptedProvider(script)
        self.started = threading.Event()
        self.release = threading.Event()
        self.call_ids: list[str] = []

    def complete(self, request: LLMRequest, **kwargs: Any) -> LLMResponse:
        self.call_ids.append(request.llm_call_id)
        if len(self.call_ids) == 1:
            self.started.set()
            self.release.wait(30)
        return self.inner.complete(request, **kwargs)


def crash_during(runtime: AgentRuntime, started: threading.Event) -> None:
    """Close ``runtime`` once ``started`` is set, as a crash would leave the store."""
    assert started.wait(10)
    runtime.close(timeout_seconds=0.2)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "agents.db"


def wait_for_status(store: Any, execution_id: str, status: ExecutionStatus) -> Any:
    record = None
    deadline = time.monotonic() + scaled_seconds(10)
    while time.monotonic() < deadline:
        try:
            record = store.load_record(execution_id)
        except NotFoundError:  # not started yet
            record = None
        if record is not None and record.status is status:
            return record
        threading.Event().wait(0.01)
    raise AssertionError(f"{execution_id} never reached {status}: {record}")


def start_and_crash_in_llm_call(db: Path, **options: Any) -> tuple[str, StuckProvider]:
    store = SqliteBarrierStore(db)
    runtime = AgentRuntime(store)
    provider = StuckProvider([Reply(content="first answer")])
    agent = Agent.create("a", provider=provider, runtime=runtime, **options)
    task = agent.invoke_async("hello")
    crash_during(runtime, provider.started)
    with pytest.raises(AgentClosedError):
        task.result(5)
    provider.release.set()
    store.close()
    return provider.call_ids[0], provider


def test_an_llm_call_in_flight_parks_the_execution_for_an_operator(db: Path) -> None:
    call_id, _ = start_and_crash_in_llm_call(db)
    store = SqliteBarrierStore(db)
    runtime = AgentRuntime(store)
    events = Events()
    try:
        provider = ScriptedProvider([Reply(content="never asked")])
        agent = Agent.load("a", provider=provider, runtime=runtime, on_event=events)
        event = events.wait_for("recovery_resolution_required")
        assert isinstance(event, RecoveryRequired)
        assert event.subject["type"] == "llm_call" and event.subject["llm_call_id"] == call_id
        assert set(event.allowed_outcomes) >= {"succeeded", "failed", "not_performed", "retry"}
        record = wait_for_status(store, event.execution_id, ExecutionStatus.RECOVERY_REQUIRED)
        assert record.recovery.subject.effect == "call_llm" and provider.requests == []
        # the operator hands back the answer the call got (from the provider's records)
        answer = LLMResponse(call_id, "the recorded answer").to_json()
        result = agent.resolve(
            event.execution_id,
            expected_revision=record.revision,
            outcome="succeeded",
            result=answer,
            wait_seconds=10,
        )
        assert (result.status, result.output) == (AgentStatus.COMPLETED, "the recorded answer")
        assert provider.requests == []  # nothing was sent again
        assert_stored_conversations_are_legal(store, "a")
        assert agent.invoke("next", wait_seconds=10).output == "never asked"
    finally:
        runtime.close()
        store.close()


@pytest.mark.parametrize("outcome", ["not_performed", "failed"])
def test_an_llm_call_answered_not_performed_or_failed_ends_failed(db: Path, outcome: str) -> None:
    start_and_crash_in_llm_call(db)
    store = SqliteBarrierStore(db)
    runtime = AgentRuntime(store)
    events = Events()
    try:
        provider = ScriptedProvider([Reply(content="later")])
        agent = Agent.load("a", provider=provider, runtime=runtime, on_event=events)
        event = events.wait_for("recovery_resolution_required")
        expected = EffectFailedError if outcome == "failed" else EffectNotPerformedError
        with pytest.raises(expected) as failed:
            agent.resolve(
                event.execution_id,
                expected_revision=event.revision,
                outcome=outcome,
                error="the gateway says it failed" if outcome == "failed" else None,
                wait_seconds=10,
            )
        if outcome == "failed":
            assert "the gateway says it failed" in str(failed.value)
        record = store.load_record(event.execution_id)
        assert (record.status, record.state) == (ExecutionStatus.FAILED, "failed")
        assert provider.requests == []
        # the agent is free again
        assert agent.invoke("again", wait_seconds=10).output == "later"
    finally:
        runtime.close()
        store.close()


def test_a_retry_sends_the_llm_call_again_with_the_same_id(db: Path) -> None:
    call_id, _ = start_and_crash_in_llm_call(db)
    store = SqliteBarrierStore(db)
    runtime = AgentRuntime(store)
    events = Events()
    try:
        provider = ScriptedProvider([Reply(content="second try")])
        agent = Agent.load("a", provider=provider, runtime=runtime, on_event=events)
        event = events.wait_for("recovery_resolution_required")
        result = agent.resolve(
            event.execution_id, expected_revision=event.revision, outcome="retry", wait_seconds=10
        )
        assert result.output == "second try"
        assert [r.llm_call_id for r in provider.requests] == [call_id]
    finally:
        runtime.close()
        store.close()


def test_llm_resend_sends_the_call_again_without_an_operator(db: Path) -> None:
    call_id, _ = start_and_crash_in_llm_call(db, llm_resend="resend")
    store = SqliteBarrierStore(db)
    runtime = AgentRuntime(store)
    events = Events()
    try:
        provider = ScriptedProvider([Reply(content="resent")])
        Agent.load("a", provider=provider, runtime=runtime, on_event=events, llm_resend="resend")
        done = events.wait_for("done")
        assert done.output == "resent"
        assert [r.llm_call_id for r in provider.requests] == [call_id]  # same id: same key
        assert "recovery_resolution_required" not in events.types()
    finally:
        runtime.close()
        store.close()


def _start_and_crash_in_tool(db: Path, effect: str) -> tuple[list[Any], str]:
    store = SqliteBarrierStore(db)
    runtime = AgentRuntime(store)
    started, release = threading.Event(), threading.Event()
    calls: list[Any] = []

    def stuck(arguments: Any, context: Any) -> Any:
        calls.append((context.idempotency_key, context.attempt))
        started.set()
        release.wait(30)
        return {"done": True}

    provider = ScriptedProvider([Reply(tool_calls=(("act", {"q": "x"}),)), Reply(content="ok")])
    agent = Agent.create(
        "a", provider=provider, runtime=runtime, tools=[make_tool("act", fn=stuck, effect=effect)]
    )
    task = agent.invoke_async("act")
    crash_during(runtime, started)
    release.set()
    with pytest.raises(AgentClosedError):
        task.result(5)
    store.close()
    return calls, calls[0][0]


def test_an_at_most_once_tool_in_flight_parks_its_call_for_an_operator(db: Path) -> None:
    calls, key = _start_and_crash_in_tool(db, "at_most_once")
    store = SqliteBarrierStore(db)
    runtime = AgentRuntime(store)
    events = Events()
    again: list[Any] = []
    try:
        agent = Agent.load(
            "a",
            provider=ScriptedProvider(
                [Reply(tool_calls=(("act", {"q": "x"}),)), Reply(content="ok")]
            ),
            runtime=runtime,
            tools=[make_tool("act", log=again)],
            on_event=events,
        )
        event = events.wait_for("recovery_resolution_required")
        assert event.execution_id == key  # the tool call's own execution
        assert event.subject["type"] == "tool_invocation"
        assert (event.subject["tool_name"], event.subject["arguments"]) == ("act", {"q": "x"})
        assert event.parent_execution_id is not None
        # the agent's execution waits only for a child that waits for an operator:
        # nothing moves, so the runtime rests (recover and close do not wait it out)
        assert runtime.durable.is_live(event.parent_execution_id)
        assert runtime.durable.wait_at_rest(10)
        assert runtime.dispatcher.call(runtime.durable.engine.at_rest).result(5)
        result = agent.resolve(
            key,
            expected_revision=event.revision,
            outcome="succeeded",
            result={"done": True, "by": "operator"},
            wait_seconds=10,
        )
        assert result.status is AgentStatus.COMPLETED and again == []
        tool_results = [
            e.data for e in store.journal_entries(result.execution_id) if e.kind == "tool_result"
        ]
        assert tool_results[0]["result"] == {"done": True, "by": "operator"}
        assert len(calls) == 1
    finally:
        runtime.close()
        store.close()


def test_an_idempotent_tool_in_flight_runs_again_with_the_same_key(db: Path) -> None:
    _calls, key = _start_and_crash_in_tool(db, "idempotent")
    store = SqliteBarrierStore(db)
    runtime = AgentRuntime(store)
    events = Events()
    again: list[Any] = []

    def act(arguments: Any, context: Any) -> Any:
        again.append((context.idempotency_key, context.attempt))
        return {"done": True}

    try:
        Agent.load(
            "a",
            provider=ScriptedProvider(
                [Reply(tool_calls=(("act", {"q": "x"}),)), Reply(content="ok")]
            ),
            runtime=runtime,
            tools=[make_tool("act", fn=act, effect="idempotent")],
            on_event=events,
        )
        assert events.wait_for("done").output == "ok"
        assert [k for k, _ in again] == [key] and again[0][1] == 1
        assert "recovery_resolution_required" not in events.types()
    finally:
        runtime.close()
        store.close()


def test_bad_resolutions_are_refused_and_write_nothing(db: Path) -> None:
    start_and_crash_in_llm_call(db)
    store = SqliteBarrierStore(db)
    runtime = AgentRuntime(store)
    events = Events()
    try:
        agent = Agent.load(
            "a", provider=ScriptedProvider([Reply(content="x")]), runtime=runtime, on_event=events
        )
        event = events.wait_for("recovery_resolution_required")
        wait_for_status(store, event.execution_id, ExecutionStatus.RECOVERY_REQUIRED)
        before = store.list_signals(event.execution_id)
        with pytest.raises(ResolutionError, match="LLM call must be its answer"):
            agent.resolve(
                event.execution_id,
                expected_revision=event.revision,
                outcome="succeeded",
                result="just text",
            )
        with pytest.raises(ResolutionError, match="revision"):
            agent.resolve(event.execution_id, expected_revision=0, outcome="not_performed")
        with pytest.raises(ResolutionError):
            agent.resolve(event.execution_id, expected_revision=event.revision, outcome="maybe")
        with pytest.raises(NotFoundError):
            agent.resolve("nope", expected_revision=1, outcome="failed")
        assert store.list_signals(event.execution_id) == before
        assert store.load_record(event.execution_id).status is ExecutionStatus.RECOVERY_REQUIRED
    finally:
        runtime.close()
        store.close()


def test_resolving_an_execution_that_finished_says_so(store: Any, runtime: Any) -> None:
    agent = Agent.create("a", provider=ScriptedProvider([Reply(content="x")]), runtime=runtime)
    result = agent.invoke("hi", wait_seconds=10)
    with pytest.raises(ExecutionFinishedError, match="already finished"):
        agent.resolve(result.execution_id, expected_revision=result.revision, outcome="failed")


def test_an_operator_answer_with_a_handoff_call_hands_off_like_an_llm_answer(db: Path) -> None:
    """The operator's ``succeeded`` answer for a parked LLM call is recorded as the
    call's answer: one that is exactly one handoff call ends the execution
    ``handed_off`` and starts the target's execution under its derived id, with the
    call's message — as the same answer from the LLM would (docs/agent.md, "Recovery"
    and "Handoffs")."""
    handoffs = {"to_billing": "billing"}
    call_id, _ = start_and_crash_in_llm_call(db, handoffs=handoffs)
    store = SqliteBarrierStore(db)
    runtime = AgentRuntime(store)
    events = Events()
    try:
        billing_provider = ScriptedProvider([Reply(content="billing here")])
        Agent.create("billing", provider=billing_provider, runtime=runtime)
        provider = ScriptedProvider([Reply(content="never asked")])
        agent = Agent.load(
            "a", provider=provider, runtime=runtime, on_event=events, handoffs=handoffs
        )
        event = events.wait_for("recovery_resolution_required")
        assert event.subject["llm_call_id"] == call_id
        call = ToolCall("call-h", "to_billing", json.dumps({"message": "invoice question"}))
        answer = LLMResponse(call_id, None, (call,)).to_json()
        result = agent.resolve(
            event.execution_id,
            expected_revision=event.revision,
            outcome="succeeded",
            result=answer,
            wait_seconds=10,
        )
        target_id = handoff_target_execution_id(event.execution_id, "billing")
        assert result.status is AgentStatus.HANDED_OFF
        assert result.handoff == {
            "target_agent_id": "billing",
            "target_execution_id": target_id,
            "tool_call_id": "call-h",
            "arguments": {"message": "invoice question"},
            "llm_call_id": call_id,
            "message": "invoice question",
        }
        handed_off = events.wait_for("handoff")
        assert handed_off.handoff == result.handoff
        record = store.load_record(event.execution_id)
        assert (record.status, record.state) == (ExecutionStatus.COMPLETED, "handed_off")
        # the target's execution ran, under its derived id, on the call's message
        done = wait_for_status(store, target_id, ExecutionStatus.COMPLETED)
        assert done.exclusive_key == "billing" and done.context["output"] == "billing here"
        assert billing_provider.requests[0].messages[-1].content == "invoice question"
        assert [r.execution_id for r in store.list_records(exclusive_key="billing")] == [target_id]
        assert provider.requests == []  # the LLM call was not sent again
        # the handoff call is not part of the history (it has no tool result)
        assert [m.role for m in agent.history()] == ["user"]
        assert_stored_conversations_are_legal(store, "a")
    finally:
        runtime.close()
        store.close()


def test_an_operators_failed_answer_keeps_its_error_text_across_restarts(db: Path) -> None:
    """The ``failed`` answer is written to the parked execution's inbox while no runtime
    runs it (as from another process); a new runtime applies it when the agent is
    loaded; after yet another restart the stored execution still says the operator's
    words, and so does the error a caller reading it from the store gets."""
    text = "the gateway's log shows the call failed: ticket OPS-4711"
    start_and_crash_in_llm_call(db)
    store = SqliteBarrierStore(db)
    runtime = AgentRuntime(store)  # parks the execution, then stops
    events = Events()
    Agent.load("a", provider=ScriptedProvider([Reply("x")]), runtime=runtime, on_event=events)
    event = events.wait_for("recovery_resolution_required")
    parked = wait_for_status(store, event.execution_id, ExecutionStatus.RECOVERY_REQUIRED)
    runtime.close()
    # answered with no runtime running it: the answer waits in the inbox
    send_resolution(
        store, event.execution_id, expected_revision=parked.revision, outcome="failed", error=text
    )
    assert store.load_record(event.execution_id).revision == parked.revision  # not applied
    store.close()

    for restart in range(2):  # the first applies it, the second only reads it back
        store = SqliteBarrierStore(db)
        runtime = AgentRuntime(store)
        try:
            provider = ScriptedProvider([Reply(content="later")])
            agent = Agent.load("a", provider=provider, runtime=runtime)
            # applied here: the effect's own error (or the stored one, should it have
            # finished before the wait began); read back: the stored one
            expected: Any = (
                (EffectFailedError, ExecutionFailedError) if restart == 0 else ExecutionFailedError
            )
            with pytest.raises(expected) as failed:
                agent.wait(event.execution_id, wait_seconds=10)
            assert text in str(failed.value)
            record = store.load_record(event.execution_id)
            assert (record.status, record.state) == (ExecutionStatus.FAILED, "failed")
            assert text in record.context["error"]
            ended = [
                e.data
                for e in store.journal_entries(event.execution_id)
                if e.kind == "execution_failed"
            ]
            assert len(ended) == 1 and text in json.dumps(ended[0]), ended
            assert provider.requests == []
        finally:
            runtime.close()
            store.close()
