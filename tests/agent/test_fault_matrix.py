"""The in-process fault matrix of the agent (issue 14 item 8): every commit of an agent
execution and of its tool calls × how a lost commit response is read back × what an
operator answers.

For each commit — the spec's ``initial_preparation``, ``tool_dispatch`` and
``provider_dispatch`` barriers, the engine's commits of an agent execution: ``@start``,
``@wait`` (approval), ``@final``, ``@cancel``, ``@recovery`` (parking) and
``@resolution`` (an operator's answer), and the ``@final`` of a ``tool_call`` child
execution (the commit that carries its ``tool_finished`` signal to the agent's
execution), after the tool ran or after an operator answered for it — the store's
COMMIT succeeds but its response is lost (the store's fault seam raises after COMMIT
returned), and then either

- ``readback_ok``: reading the execution back finds the intended record (the barrier
  counts as committed: nothing is asked of anyone), or
- ``readback_failing``: the read-back fails, and so do the next reads for a while (the
  outcome is unknown: the engine fails closed, forgets its live copy and recovers the
  execution from the store once it can read it — as a restart would).

The agent runs on a real SQLite store with its own runtime. Where the execution (or one
of its tool calls) parks in ``recovery_required``, the operator answers ``succeeded``
(with an LLM answer or a tool result of its own), ``failed`` or ``not_performed`` through
``Agent.resolve``; where nothing can park the answer axis is collapsed (one run). The
test then reads the stored conversation back — the execution's context and its journal —
checks what each answer must have produced, that no tool ran twice, that the journal
holds the conversation exactly once and that the agent's history is it, that the
``RecoveryRequired`` events delivered are exactly the parks the store recorded; and
finally that a second ``invoke`` of the same agent completes with that history.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

from phronomy_fsm.agent import (
    Agent,
    AgentEvent,
    AgentRuntime,
    ApprovalRequired,
    LLMRequest,
    RecoveryRequired,
    Reply,
    ScriptedProvider,
    Tool,
)
from phronomy_fsm.agent.journal import MESSAGE_KINDS, history
from phronomy_fsm.durable.codec import json_data
from phronomy_fsm.durable.records import ExecutionRecord, ExecutionStatus
from phronomy_fsm.errors import Cancelled, PhronomyError
from phronomy_fsm.store.open import open_store

from .conftest import LostResponses, assert_stored_conversations_are_legal

pytestmark = pytest.mark.timeout(60)

AGENT = "fm-agent"
SYSTEM = "You are the fault matrix's agent."
AGAIN = "and once more"
#: The LLM answer and the tool result an operator supplies with ``succeeded``.
OPERATOR_ANSWER = {"content": "the operator's answer", "tool_calls": []}
OPERATOR_RESULT = {"from": "the operator"}
OPERATOR_ERROR = "the operator says it failed"

READBACKS = ("readback_ok", "readback_failing")
ANSWERS = ("succeeded", "failed", "not_performed")


@attrs.frozen
class Setup:
    """How one commit is reached: the ``commit`` whose response is lost (a barrier of
    the agent's execution, or ``tool_call:<barrier>`` of its tool call), the ``flow``
    (``plain``: one LLM answer; ``tool``: a tool call, then the answer; ``approval``: a
    tool a person must approve, then the answer; ``cancel``: that, and the caller
    cancels while it waits), the faults before the one under test (a lost response read
    back in vain at ``initial_preparation`` parks the first LLM call: the way to
    ``@recovery`` and ``@resolution``; at ``tool_dispatch`` it parks the tool call: the
    way to a tool call's ``@final`` after an operator's answer), and the effect the
    operator is asked about when the read-back fails (``None``: recovery resumes the
    execution without asking)."""

    commit: str
    flow: str
    before: tuple[str, ...] = ()
    parks: str | None = None

    def parked(self, readback: str) -> bool:
        """Whether the execution (or its tool call) parks for an operator."""
        return self.parks is not None and (readback == "readback_failing" or bool(self.before))


SETUPS = {
    "initial_preparation": Setup("initial_preparation", "plain", parks="call_llm"),
    "tool_dispatch": Setup("tool_dispatch", "tool", parks="execute_tool"),
    "provider_dispatch": Setup("provider_dispatch", "tool", parks="call_llm"),
    # read back in vain, a start used to fail its caller and leave the execution
    # committed under this worker, run by nobody, the agent busy until a restart
    "@start": Setup("@start", "plain"),
    "@wait": Setup("@wait", "approval"),
    "@final": Setup("@final", "plain"),
    "@cancel": Setup("@cancel", "cancel"),
    "@recovery": Setup("@recovery", "plain", before=("initial_preparation",), parks="call_llm"),
    "@resolution": Setup("@resolution", "plain", before=("initial_preparation",), parks="call_llm"),
    # the tool call's @final carries tool_finished to the agent's execution: after the
    # tool ran (nothing parks: the finished tool call is read back), and after an
    # operator answered for the tool call a lost tool_dispatch response parked
    "tool_call:@final": Setup("tool_call:@final", "tool"),
    "tool_call:@final-answered": Setup(
        "tool_call:@final", "tool", before=("tool_dispatch",), parks="execute_tool"
    ),
}


def matrix() -> Iterator[Any]:
    """The cases: every setup × read-back, × the operator's answers where something
    parks (``None`` where nothing can: those runs would all be the same)."""
    for name, setup in SETUPS.items():
        for readback in READBACKS:
            if setup.parked(readback):
                for answer in ANSWERS:
                    yield pytest.param(name, readback, answer, id=f"{name}-{readback}-{answer}")
            else:
                yield pytest.param(name, readback, None, id=f"{name}-{readback}")


def script(flow: str) -> ScriptedProvider:
    """The LLM of a flow; an input of :data:`AGAIN` gets a plain answer."""

    def step(index: int) -> Any:
        def answer(request: LLMRequest, _index: int) -> Reply:
            last = next(m.content for m in reversed(request.messages) if m.role == "user")
            if last == AGAIN:
                return Reply("answered again")
            if flow == "plain" or index == 1:
                return Reply(f"the {flow} answer")
            tool = "charge" if flow == "tool" else "send_email"
            return Reply(tool_calls=((tool, {"item": "book"}),))

        return answer

    return ScriptedProvider([step(0), step(1)])


@attrs.define
class Case:
    """One agent on a faulty store, what its tools did and the events it delivered."""

    agent: Agent
    runtime: AgentRuntime
    provider: ScriptedProvider
    fault: LostResponses
    tool_calls: list[str]
    events: list[AgentEvent]

    def announced(self, kind: type[AgentEvent], execution_id: str) -> list[Any]:
        """The events of type ``kind`` about ``execution_id`` so far."""
        return [
            e for e in list(self.events) if isinstance(e, kind) and e.execution_id == execution_id
        ]

    @property
    def store(self) -> Any:
        return self.runtime.store


@pytest.fixture
def make_case(tmp_path: Path) -> Iterator[Any]:
    opened: list[AgentRuntime] = []

    def make(name: str, readback: str) -> Case:
        store = open_store(str(tmp_path / "agents.db"))
        setup = SETUPS[name]
        plan = tuple((b, True) for b in setup.before)
        fault = LostResponses(store, (*plan, (setup.commit, readback == "readback_failing")))
        runtime = AgentRuntime(store, own_store=True, lease_seconds=5.0)
        opened.append(runtime)
        calls: list[str] = []

        def run(arguments: Any, context: Any) -> Any:
            calls.append(context.idempotency_key)
            return {"done": arguments["item"]}

        schema = {"type": "object", "properties": {"item": {"type": "string"}}}
        provider = script(setup.flow)
        events: list[AgentEvent] = []
        agent = Agent.create(
            AGENT,
            provider=provider,
            runtime=runtime,
            system_prompt=SYSTEM,
            on_event=events.append,
            tools=[
                Tool("charge", run, "Charge.", schema),
                Tool("send_email", run, "Send.", schema, requires_approval=True),
            ],
        )
        return Case(agent, runtime, provider, fault, calls, events)

    yield make
    for runtime in opened:
        runtime.close(timeout_seconds=5)


def wait_until(predicate: Any, timeout_seconds: float = 20.0) -> Any:
    """Poll ``predicate`` (no event to wait on: the store is the truth) until it returns
    something true."""
    deadline = time.monotonic() + timeout_seconds
    while True:
        try:
            value = predicate()
        except PhronomyError:
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {predicate.__doc__ or predicate}")
        time.sleep(0.02)


def at_rest(case: Case, execution_id: str) -> ExecutionRecord | None:
    """The first of the execution and its tool calls that waits for someone, or the
    execution once it finished; None while it moves."""
    store = case.store
    record = store.load_record(execution_id)
    for child in store.list_records(parent_execution_id=execution_id):
        if child.status is ExecutionStatus.RECOVERY_REQUIRED:
            return child  # type: ignore[no-any-return]
    if record.is_finished or record.status in (
        ExecutionStatus.RECOVERY_REQUIRED,
        ExecutionStatus.WAITING,
    ):
        return record  # type: ignore[no-any-return]
    return None


def drive(
    case: Case, execution_id: str, answer: str | None, *, cancel: bool
) -> tuple[ExecutionRecord, list[str]]:
    """Drive the execution to its end as a person (approving; or the caller cancelling,
    with ``cancel``) and an operator (answering ``answer``; ``None``: nothing may park);
    returns its final record and the effects the operator answered for."""
    answered: list[str] = []
    while True:
        record = wait_until(lambda: at_rest(case, execution_id))
        if record.is_finished and record.execution_id == execution_id:
            return record, answered
        if record.status is ExecutionStatus.WAITING:  # the person is told, then acts
            request = wait_until(lambda: case.announced(ApprovalRequired, execution_id))
            if cancel:
                assert case.agent.cancel(execution_id)
            else:
                case.agent.approve_async(execution_id, approval_request_id=request[-1].request_id)
        else:  # the operator is told, then answers
            assert record.recovery is not None and record.recovery.subject is not None
            assert answer is not None, f"{record.execution_id} parked: {record.recovery}"
            eid = record.execution_id
            told = wait_until(lambda eid=eid: case.announced(RecoveryRequired, eid))
            assert told[-1].revision == record.revision
            effect = record.recovery.subject.effect
            answered.append(effect)
            result = OPERATOR_ANSWER if effect == "call_llm" else OPERATOR_RESULT
            case.agent.resolve_async(
                record.execution_id,
                expected_revision=record.revision,
                outcome=answer,
                result=result if answer == "succeeded" else None,
                error=OPERATOR_ERROR if answer == "failed" else None,
            )
        wait_until(lambda r=record: case.store.load_record(r.execution_id).revision > r.revision)


def expected_conversation(name: str, parked: bool, answer: str | None) -> tuple[str, list[Any]]:
    """The outcome and the conversation (``(role, content)``; a tool call as its
    name) the execution must end with."""
    user = ("user", "go")
    setup = SETUPS[name]
    if setup.flow == "plain":
        if not parked:
            return "completed", [user, ("assistant", "the plain answer")]
        if answer == "succeeded":
            return "completed", [user, ("assistant", OPERATOR_ANSWER["content"])]
        return "failed", [user]
    tool = "charge" if setup.flow == "tool" else "send_email"
    called = ("assistant", tool)
    if setup.flow == "cancel":
        return "cancelled", [user, called]
    answer_msg = ("assistant", f"the {setup.flow} answer")
    if not parked:
        return "completed", [user, called, ("tool", '{"done": "book"}'), answer_msg]
    assert answer is not None
    if setup.parks == "execute_tool":
        content = {
            "succeeded": '{"from": "the operator"}',
            "failed": f"Error: EffectFailedError: {OPERATOR_ERROR}",
            "not_performed": "Error: EffectNotPerformedError: execute_tool was not performed "
            "(operator resolution); it is not sent again",
        }[answer]
        return "completed", [user, called, ("tool", content), answer_msg]
    done = [user, called, ("tool", '{"done": "book"}')]
    if answer == "succeeded":
        return "completed", [*done, ("assistant", OPERATOR_ANSWER["content"])]
    return "failed", done


def shape(message: dict[str, Any]) -> tuple[str, Any]:
    if message.get("tool_calls"):
        return (message["role"], message["tool_calls"][0]["function"]["name"])
    return (message["role"], message["content"])


def parks_recorded(store: Any, execution_id: str) -> list[tuple[str, int]]:
    """``(execution id, revision)`` of every commit that parked the execution or one of
    its tool calls in ``recovery_required``, from their barrier logs: what really
    parked."""
    ids = [execution_id] + [
        r.execution_id for r in store.list_records(parent_execution_id=execution_id)
    ]
    return sorted(
        (b.execution_id, b.revision)
        for eid in ids
        for b in store.barrier_log(eid)
        if b.status == ExecutionStatus.RECOVERY_REQUIRED.value
    )


def assert_told_exactly_the_parks(case: Case, execution_id: str, parks: str | None) -> None:
    """The ``RecoveryRequired`` events delivered are exactly the parks the store
    recorded (one per park, none when nothing parked), each with a subject in the
    agent's terms for the effect that parked and the outcomes an operator may give."""
    recorded = parks_recorded(case.store, execution_id)
    assert len(recorded) == (0 if parks is None else 1), recorded
    told = [e for e in list(case.events) if isinstance(e, RecoveryRequired)]
    assert sorted((e.execution_id, e.revision) for e in told) == recorded, told
    for event in told:
        assert event.subject and event.allowed_outcomes, event
        assert set(event.allowed_outcomes) >= set(ANSWERS), event
        if parks == "call_llm":
            assert event.execution_id == execution_id
            assert event.subject["type"] == "llm_call" and event.subject["llm_call_id"]
        else:
            assert event.parent_execution_id == execution_id
            assert event.subject["type"] == "tool_invocation"
            assert event.subject["tool_invocation_id"] == event.execution_id
            assert (event.subject["tool_name"], event.subject["arguments"]) == (
                "charge",
                {"item": "book"},
            )


@pytest.mark.parametrize(("name", "readback", "answer"), list(matrix()))
def test_a_lost_commit_response_at_every_barrier(
    make_case: Any, name: str, readback: str, answer: str | None
) -> None:
    setup = SETUPS[name]
    case = make_case(name, readback)
    task = case.agent.invoke_async("go", execution_id="fm-1")
    record, answered = drive(case, "fm-1", answer, cancel=setup.flow == "cancel")
    assert case.fault.fired == [*setup.before, setup.commit]
    parked = setup.parked(readback)
    assert answered == ([setup.parks] if parked else [])
    assert_told_exactly_the_parks(case, "fm-1", setup.parks if parked else None)

    # the conversation as stored: the context, the journal, the history
    outcome, conversation = expected_conversation(name, parked, answer)
    ctx = json_data(record.context)
    assert record.status.value == ("completed" if outcome == "completed" else outcome)
    assert ctx["outcome"] == (None if outcome == "cancelled" else outcome), ctx
    assert [shape(m) for m in ctx["messages"]] == conversation
    journal = case.store.journal_entries("fm-1")
    assert [e.kind for e in journal].count("input_received") == 1
    end = "execution_ended" if outcome == "cancelled" else f"execution_{outcome}"
    assert [e.kind for e in journal if e.kind.startswith("execution_")] == [end]
    assert [e.data["message"] for e in journal if e.kind in MESSAGE_KINDS] == ctx["messages"]
    in_history = ctx["messages"] if outcome == "completed" else []
    assert [m.to_json() for m in history(case.store, AGENT)] == in_history
    # no tool ran twice; a tool the operator answered for did not run again
    assert len(case.tool_calls) == len(set(case.tool_calls))
    ran = setup.flow in ("tool", "approval") and not (parked and setup.parks == "execute_tool")
    assert len(case.tool_calls) == (1 if ran else 0)
    # the caller of invoke learns how it ended
    if outcome == "completed":
        assert task.result(10).output == conversation[-1][1]
    else:
        with pytest.raises((PhronomyError, Cancelled)):
            task.result(10)

    # a second invoke of the same agent completes, with that history
    again = case.agent.invoke(AGAIN, wait_seconds=20)
    assert again.output == "answered again"
    sent = [m.to_json() for m in case.provider.requests[-1].messages]
    assert sent == [
        {"role": "system", "content": SYSTEM},
        *in_history,
        {"role": "user", "content": AGAIN},
    ]
    assert_told_exactly_the_parks(case, "fm-1", setup.parks if parked else None)
    assert_stored_conversations_are_legal(case.store, AGENT)


@pytest.mark.parametrize("barrier", ["initial_preparation", "tool_dispatch"])
def test_a_parked_execution_that_is_cancelled_journals_its_conversation(
    make_case: Any, barrier: str
) -> None:
    """Parked by a lost response read back in vain, the execution (or its tool call) is
    cancelled instead of answered: its ``@cancel`` commit still journals its transcript
    (the crash matrix found it missing: a deadline passing while it was parked)."""
    case = make_case(barrier, "readback_failing")
    case.agent.invoke_async("go", execution_id="fm-1")
    parked = wait_until(lambda: at_rest(case, "fm-1"))
    assert parked.status is ExecutionStatus.RECOVERY_REQUIRED
    assert case.agent.cancel("fm-1")
    record = wait_until(lambda: (r := case.store.load_record("fm-1")).is_finished and r)
    assert record.status is ExecutionStatus.CANCELLED
    ctx = json_data(record.context)
    journal = case.store.journal_entries("fm-1")
    assert [e.kind for e in journal].count("input_received") == 1
    assert [e.kind for e in journal if e.kind.startswith("execution_")] == ["execution_ended"]
    assert [e.data["message"] for e in journal if e.kind in MESSAGE_KINDS] == ctx["messages"]
    assert [m["role"] for m in ctx["messages"]] == (
        ["user"] if barrier == "initial_preparation" else ["user", "assistant"]
    )
    assert case.agent.invoke(AGAIN, wait_seconds=20).output == "answered again"
