"""The in-process fault matrix of the agent (issue 14 item 8): every barrier of
``agent_session`` × how a lost commit response is read back × what an operator answers.

For each barrier — the spec's ``initial_preparation``, ``tool_dispatch`` and
``provider_dispatch``, and the engine's commits of an agent execution: ``@wait``
(approval), ``@final``, ``@cancel``, ``@recovery`` (parking) and ``@resolution`` (an
operator's answer) — the store's COMMIT succeeds but its response is lost (the store's
fault seam raises after COMMIT returned), and then either

- ``readback_ok``: reading the execution back finds the intended record (the barrier
  counts as committed: nothing is asked of anyone), or
- ``readback_failing``: the read-back fails, and so do the next reads for a while (the
  outcome is unknown: the engine fails closed, forgets its live copy and recovers the
  execution from the store once it can read it — as a restart would).

The agent runs on a real SQLite store with its own runtime. Where the execution (or one
of its tool calls) parks in ``recovery_required``, the operator answers ``succeeded``
(with an LLM answer or a tool result of its own), ``failed`` or ``not_performed`` through
``Agent.resolve``. The test then reads the stored conversation back — the execution's
context and its journal — checks what each answer must have produced, that no tool ran
twice, that the journal holds the conversation exactly once and that the agent's history
is it; and finally that a second ``invoke`` of the same agent completes with that history.
"""

from __future__ import annotations

import threading
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
from phronomy_fsm.errors import Cancelled, PhronomyError, StorageError
from phronomy_fsm.store.open import open_store

pytestmark = pytest.mark.timeout(60)

AGENT = "fm-agent"
SYSTEM = "You are the fault matrix's agent."
AGAIN = "and once more"
#: The LLM answer and the tool result an operator supplies with ``succeeded``.
OPERATOR_ANSWER = {"content": "the operator's answer", "tool_calls": []}
OPERATOR_RESULT = {"from": "the operator"}
OPERATOR_ERROR = "the operator says it failed"
#: Reads that fail after the lost response, in ``readback_failing``.
FAILING_READS = 3

BARRIERS = (
    "initial_preparation",
    "tool_dispatch",
    "provider_dispatch",
    "@wait",
    "@final",
    "@cancel",
    "@recovery",
    "@resolution",
)
READBACKS = ("readback_ok", "readback_failing")
ANSWERS = ("succeeded", "failed", "not_performed")


@attrs.frozen
class Setup:
    """How one barrier is reached: the ``flow`` (``plain``: one LLM answer; ``tool``: a
    tool call, then the answer; ``approval``: a tool a person must approve, then the
    answer; ``cancel``: that, and the caller cancels while it waits), the faults before
    the one under test (a lost response read back in vain at ``initial_preparation``
    parks the first LLM call: the way to ``@recovery`` and ``@resolution``), and the
    effect the operator is asked about when the read-back fails (``None``: recovery
    resumes the execution without asking)."""

    flow: str
    before: tuple[str, ...] = ()
    parks: str | None = None


SETUPS = {
    "initial_preparation": Setup("plain", parks="call_llm"),
    "tool_dispatch": Setup("tool", parks="execute_tool"),
    "provider_dispatch": Setup("tool", parks="call_llm"),
    "@wait": Setup("approval"),
    "@final": Setup("plain"),
    "@cancel": Setup("cancel"),
    "@recovery": Setup("plain", before=("initial_preparation",), parks="call_llm"),
    "@resolution": Setup("plain", before=("initial_preparation",), parks="call_llm"),
}


class LostResponses:
    """The faults: for each ``(barrier, failing)`` of ``plan``, in order, the next commit
    of that barrier by an agent execution is written but its response is lost; when
    ``failing``, reading it back fails too, and so do the next :data:`FAILING_READS`
    reads of an execution."""

    def __init__(self, store: Any, plan: tuple[tuple[str, bool], ...]) -> None:
        self.store = store
        self.plan = list(plan)
        self.fired: list[str] = []
        self._unreadable: set[int] = set()
        self._reads_to_fail = 0
        self._lock = threading.Lock()
        self._reconcile = store.reconcile
        self._load_record = store.load_record
        store.install_fault_hook(self.hook)
        store.reconcile = self.reconcile
        store.load_record = self.load_record

    def hook(self, point: str, commits: tuple[Any, ...]) -> None:
        if point != "committed":
            return
        with self._lock:
            if not self.plan:
                return
            barrier, failing = self.plan[0]
            commit = next(
                (
                    c
                    for c in commits
                    if c.barrier == barrier and c.execution.machine == "agent_session"
                ),
                None,
            )
            if commit is None:
                return
            self.plan.pop(0)
            self.fired.append(barrier)
            if failing:
                self._unreadable.add(id(commit))
                self._reads_to_fail = FAILING_READS
        raise ConnectionResetError("injected: the COMMIT response was lost")

    def reconcile(self, commit: Any) -> str:
        if id(commit) in self._unreadable:
            raise StorageError("injected: the read-back failed")
        return self._reconcile(commit)  # type: ignore[no-any-return]

    def load_record(self, execution_id: str) -> ExecutionRecord:
        with self._lock:
            failing = self._reads_to_fail > 0
            self._reads_to_fail -= failing
        if failing:
            raise StorageError(f"injected: reading {execution_id} failed")
        return self._load_record(execution_id)  # type: ignore[no-any-return]


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

    def make(barrier: str, readback: str) -> Case:
        store = open_store(str(tmp_path / "agents.db"))
        setup = SETUPS[barrier]
        plan = tuple((b, True) for b in setup.before)
        fault = LostResponses(store, (*plan, (barrier, readback == "readback_failing")))
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
    case: Case, execution_id: str, answer: str, *, cancel: bool
) -> tuple[ExecutionRecord, list[str]]:
    """Drive the execution to its end as a person (approving; or the caller cancelling,
    with ``cancel``) and an operator (answering ``answer``); returns its final record and
    the effects the operator answered for."""
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


def expected_conversation(barrier: str, parked: bool, answer: str) -> tuple[str, list[Any]]:
    """The outcome and the conversation (``(role, content)``; a tool call as its
    name) the execution must end with."""
    user = ("user", "go")
    setup = SETUPS[barrier]
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


@pytest.mark.parametrize("answer", ANSWERS)
@pytest.mark.parametrize("readback", READBACKS)
@pytest.mark.parametrize("barrier", BARRIERS)
def test_a_lost_commit_response_at_every_barrier(
    make_case: Any, barrier: str, readback: str, answer: str
) -> None:
    setup = SETUPS[barrier]
    case = make_case(barrier, readback)
    task = case.agent.invoke_async("go", execution_id="fm-1")
    record, answered = drive(case, "fm-1", answer, cancel=setup.flow == "cancel")
    assert case.fault.fired == [*setup.before, barrier]
    parked = setup.parks is not None and (readback == "readback_failing" or bool(setup.before))
    assert answered == ([setup.parks] if parked else [])

    # the conversation as stored: the context, the journal, the history
    outcome, conversation = expected_conversation(barrier, parked, answer)
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
