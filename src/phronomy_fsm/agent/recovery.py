"""Recovery after a crash, and operator resolution (reference §6; issue 6).

On :meth:`Agent.load <phronomy_fsm.agent.agent.Agent.load>` the agent's active execution
is classified from its durable phase (:func:`classify`, reference §6.2) into:

- ``suspended`` — it waits for approval again (approve works after a restart);
- ``continue`` — a restart-safe continuation: a resumed ``agent_session`` starts at a
  state and fires one event (reference §6.5): replay of the preparing phase, the
  committed approval decision (approved or rejected), or an operator resolution already
  committed (provider output, tools completed, failed);
- ``resolution_required`` — an external effect may or may not have happened (an LLM call
  named by the pending id, authorised tools of the durable batch): the execution is
  parked in ``recovery_required`` and a ``recovery_resolution_required`` event names the
  subject, the allowed outcomes and the facts. Nothing is re-sent blindly: only an
  operator's :func:`resolution <resolution_commit>` moves it on, and ``not_performed``
  ends it as failed (reference §6.6).

Executions pinned to another agent_session spec (by sha256) follow the spec's declared
migrations or are parked with reason ``spec_changed`` (issue 6 item 4).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import TYPE_CHECKING, Any

import attrs

from phronomy_fsm.agent import durable
from phronomy_fsm.agent.invocation import Invocation, ToolInvocation
from phronomy_fsm.agent.tools import tool_result_text
from phronomy_fsm.agent.types import LLMResponse, Message, Resolution, ToolCall, Usage
from phronomy_fsm.errors import (
    ConfigurationError,
    ConflictError,
    NotFoundError,
    RecoveryResolutionError,
)
from phronomy_fsm.generated import agent_session
from phronomy_fsm.store.records import (
    AgentRecord,
    BarrierCommit,
    ErrorInfo,
    ExecutionRecord,
    ExecutionStatus,
    RecoveryDescriptor,
    RecoverySubject,
)
from phronomy_fsm.table import BarrierOutcome

if TYPE_CHECKING:
    from phronomy_fsm.agent.agent import Agent
    from phronomy_fsm.runtime.tasks import Task
    from phronomy_fsm.store.base import BarrierStore

OUTCOMES = ("succeeded", "failed", "not_performed")
#: Tool batch statuses whose effect may have started once the tool barrier committed.
MAYBE_STARTED = frozenset({"authorized", "running", "queued"})

SUSPENDED = "suspended"
CONTINUE = "continue"
RESOLUTION_REQUIRED = "resolution_required"


@attrs.frozen
class Classification:
    """What to do with an active execution found in the store.

    ``kind`` is ``suspended``, ``continue`` or ``resolution_required``. For ``continue``,
    ``state``/``event`` say where the resumed session starts and what it fires. For
    ``resolution_required``, ``subject`` is the first unresolved subject and
    ``allowed_outcomes`` what an operator may answer.
    """

    kind: str
    reason: str
    state: str | None = None
    event: str | None = None
    subject: dict[str, Any] | None = None
    allowed_outcomes: tuple[str, ...] = ()
    facts: dict[str, Any] = attrs.field(factory=dict)


def _rename(execution: ExecutionRecord) -> tuple[ExecutionRecord, str | None]:
    """Map the phase of an execution pinned to another spec through the migrations of
    the current spec; return the (possibly renamed) record and a problem, if any."""
    if execution.spec_sha256 == agent_session.SPEC_SHA256:
        return execution, None
    for migration in agent_session.TABLE.migrations:
        if migration.from_version != execution.spec_version:
            continue
        if migration.from_sha256 is not None and migration.from_sha256 != execution.spec_sha256:
            continue
        renames = dict(migration.rename_states)
        return attrs.evolve(execution, phase=renames.get(execution.phase, execution.phase)), None
    return execution, (
        f"the execution started under agent_session spec version {execution.spec_version} "
        f"(sha256 {execution.spec_sha256[:12]}...), this code runs version {agent_session.SPEC_VERSION} "
        f"(sha256 {agent_session.SPEC_SHA256[:12]}...) and declares no migration for it"
    )


def pin_to_current_spec(execution: ExecutionRecord) -> ExecutionRecord:
    """The execution as the current spec sees it: when it was started under another
    agent_session spec and a declared migration covers it, its phase is renamed and it
    is re-pinned to this spec (the next barrier commits the new pin). Otherwise it is
    returned unchanged (and :func:`classify` parks it with reason ``spec_changed``)."""
    renamed, problem = _rename(execution)
    if problem is not None or renamed is execution:
        return execution
    return attrs.evolve(
        renamed, spec_version=agent_session.SPEC_VERSION, spec_sha256=agent_session.SPEC_SHA256
    )


def _tool_subject(entry: Any) -> dict[str, Any]:
    return {
        "type": "tool_invocation",
        "tool_invocation_id": entry.tool_invocation_id,
        "tool_call_id": entry.tool_call_id,
        "tool_name": entry.tool_name,
        "llm_call_id": entry.llm_call_id,
        "arguments": entry.arguments,
    }


def classify(execution: ExecutionRecord) -> Classification:
    """Classify an active execution from its durable phase (reference §6.2, first
    match wins; see the module docstring). Pure; never raises for a valid record."""
    execution, problem = _rename(execution)
    facts: dict[str, Any] = {"phase": execution.phase, "status": execution.status.value}
    if problem is not None:
        return Classification(
            RESOLUTION_REQUIRED,
            f"spec_changed: {problem}",
            subject={"type": "execution", "execution_id": execution.execution_id},
            allowed_outcomes=("failed", "not_performed"),
            facts=facts,
        )
    phase = execution.phase
    if execution.status is ExecutionStatus.SUSPENDED and phase == "approval":
        request = execution.approval_request
        facts["approval_request_id"] = request.request_id if request else None
        return Classification(SUSPENDED, "waiting for approval", facts=facts)
    if execution.status is ExecutionStatus.PREPARING and phase == "preparing":
        if execution.metadata.get("preparation_replayable") is True:
            return Classification(
                CONTINUE,
                "initial_preparation",
                state="admitting",
                event="admission_committed",
                facts=facts,
            )
        return Classification(
            RESOLUTION_REQUIRED,
            "preparation is not replayable",
            subject={"type": "execution", "execution_id": execution.execution_id},
            allowed_outcomes=("failed", "not_performed"),
            facts=facts,
        )
    if phase == "resuming" and execution.approval_request is not None:
        approved = execution.approval_request.approved
        reason = "approval_committed" if approved else "approval_rejection_committed"
        return Classification(
            CONTINUE, reason, state="resuming", event="approval_committed", facts=facts
        )
    if phase in (
        "recovery_provider_completed",
        "recovery_tools_completed",
        "recovery_resolved_failed",
    ):
        return Classification(
            CONTINUE, phase, state="resolving", event="resolution_committed", facts=facts
        )
    if phase == "calling_llm" and execution.pending_llm_call_id is not None:
        facts["llm_call_count"] = execution.llm_call_count
        return Classification(
            RESOLUTION_REQUIRED,
            "the LLM call named by the pending id may or may not have happened",
            subject={"type": "llm_call", "llm_call_id": execution.pending_llm_call_id},
            allowed_outcomes=OUTCOMES,
            facts=facts,
        )
    if phase in ("dispatching_tools", "recovery_tools"):
        resolved = set()
        if execution.recovery is not None:
            resolved = {
                s.tool_invocation_id for s in execution.recovery.subjects if s.state == "resolved"
            }
        pending = [
            e
            for e in execution.tool_batch
            if e.status in MAYBE_STARTED and e.tool_invocation_id not in resolved
        ]
        if pending:
            facts["unresolved_tools"] = [e.tool_invocation_id for e in pending]
            return Classification(
                RESOLUTION_REQUIRED,
                "authorised tool calls may or may not have run",
                subject=_tool_subject(pending[0]),
                allowed_outcomes=OUTCOMES,
                facts=facts,
            )
        return Classification(
            CONTINUE,
            "tools_completed",
            state="resolving",
            event="resolution_committed",
            facts=facts,
        )
    return Classification(
        RESOLUTION_REQUIRED,
        f"not at a restart-safe point (status {execution.status.value}, phase {phase})",
        subject={"type": "execution", "execution_id": execution.execution_id},
        allowed_outcomes=("failed", "not_performed"),
        facts=facts,
    )


def announce_payload(
    execution: ExecutionRecord, classification: Classification, cause: BaseException | None = None
) -> dict[str, Any]:
    """The ``recovery_resolution_required`` event payload (reference §8.3)."""
    facts = dict(classification.facts)
    if cause is not None:
        facts["cause"] = f"{type(cause).__name__}: {cause}"
    return {
        "execution_id": execution.execution_id,
        "execution_revision": execution.revision,
        "reason": classification.reason,
        "subject": classification.subject,
        "allowed_outcomes": list(classification.allowed_outcomes),
        "facts": facts,
    }


# ------------------------------------------------------------------- loading


def load_history(
    store: BarrierStore, agent_id: str
) -> tuple[list[Message], ExecutionRecord | None]:
    """The conversation of the agent's completed executions, and its active execution.

    Raises ConflictError when the store holds more than one active execution for the
    agent (reference §6.1 step 1)."""
    executions = store.list_executions(agent_id=agent_id)
    finished = {
        e.execution_id
        for e in executions
        if e.status in (ExecutionStatus.COMPLETED, ExecutionStatus.HANDED_OFF)
    }
    active = [e for e in executions if e.is_active]
    if len(active) > 1:
        raise ConflictError(
            f"agent {agent_id!r} has {len(active)} active executions ({', '.join(e.execution_id for e in active)}); "
            "the store is inconsistent",
            agent_id=agent_id,
        )
    history = [
        Message.from_json(r.content)
        for r in store.read_journal(agent_id)
        if r.kind in durable.MESSAGE_KINDS and r.context_candidate and r.execution_id in finished
    ]
    return history, (active[0] if active else None)


def restore_invocation(agent: Agent, execution: ExecutionRecord, records: list[Any]) -> Invocation:
    """Rebuild the live context of a durable execution from its record and journal."""
    ctx = Invocation(agent, execution.execution_id, execution.input, execution.invocation_mode)
    rebuild_from_store(ctx, execution, records)
    return ctx


def rebuild_from_store(ctx: Invocation, execution: ExecutionRecord, records: list[Any]) -> None:
    """Make ``ctx``'s conversation and tool batch exactly what the store holds: the
    durable ``execution`` and the execution's journal ``records`` (reference §6.4).

    The messages become the agent's base messages plus the journaled context
    messages; the tool invocations those of the durable batch (journaled or not as
    the journal says); facts that were never journaled are dropped — an answer or a
    result the store does not hold is exactly what an operator is asked about. Used
    on load, and in a live process after a barrier whose outcome could not be
    proven, so that nothing is journaled twice (issue 11 item 4). Also derived from
    the record: a handoff in an operator-supplied LLM answer (phase
    ``recovery_provider_completed``) and an operator's failure text (phase
    ``recovery_resolved_failed``; issue 11 item 10d). Waiters, the cancellation
    request and the event sink of ``ctx`` are kept. Loop thread (or before ``ctx``
    is live)."""
    agent = ctx.agent
    ctx.execution = execution
    ctx.messages = agent.base_messages()
    ctx.base_len = len(ctx.messages)
    ctx.llm_facts = []
    ctx.last_response = None
    ctx.handoff = ctx.handoff_error = None
    ctx.approval_decision = ctx.resolution = None
    ctx.outcome = ctx.output = None
    ctx.error = None
    last_assistant: Message | None = None
    for record in records:
        if record.kind in durable.MESSAGE_KINDS and record.context_candidate:
            message = Message.from_json(record.content)
            ctx.messages.append(message)
            if message.role == "assistant":
                last_assistant = message
            if message.role == "user":
                ctx.filtered_input = message.content
    ctx.llm_calls = execution.llm_call_count
    ctx.approval_request = execution.approval_request
    if last_assistant is not None:
        llm_call_id = (
            next(
                (r.llm_call_id for r in reversed(records) if r.kind == durable.ASSISTANT_MESSAGE),
                "",
            )
            or ""
        )
        ctx.last_response = LLMResponse(
            llm_call_id, last_assistant.content, last_assistant.tool_calls, Usage()
        )
    ctx.children = []
    for entry in execution.tool_batch:
        arguments_json = (
            entry.arguments
            if isinstance(entry.arguments, str)
            else json.dumps(entry.arguments, sort_keys=True)
        )
        child = ToolInvocation(
            ctx,
            entry.tool_invocation_id,
            ToolCall(entry.tool_call_id, entry.tool_name, arguments_json),
            entry.llm_call_id,
            agent.tools.get(entry.tool_name),
        )
        child.arguments = None if isinstance(entry.arguments, str) else entry.arguments
        child.status = entry.status
        child.result = entry.result
        child.error = entry.error
        if entry.status == "completed" and entry.result is not None:
            child.content = tool_result_text(entry.result)
        child.journaled = any(
            r.kind == durable.TOOL_MESSAGE and r.tool_invocation_id == entry.tool_invocation_id
            for r in records
        )
        if entry.status == "rejected":
            child.rejected_by = (
                "person" if execution.metadata.get("approval_global", True) else "person_item"
            )
        ctx.children.append(child)
    phase = _rename(execution)[0].phase
    if phase == "recovery_provider_completed" and ctx.last_response is not None:
        ctx.decide_handoff(ctx.last_response)  # the operator's answer may hand off
    elif phase == "recovery_resolved_failed":
        ctx.error = resolution_failure(execution)


def resolution_failure(execution: ExecutionRecord) -> RecoveryResolutionError:
    """The error an execution resolved as ``failed`` or ``not_performed`` ends with:
    the operator's text (or the not-performed reason) from its recovery descriptor,
    the same in the process that committed the resolution and after a restart."""
    recovery = execution.recovery
    failure = recovery.failure if recovery is not None else None
    return RecoveryResolutionError(
        failure.message if failure else "resolved as failed",
        execution_id=execution.execution_id,
    )


#: Where the admission slot of a continued execution starts: the state whose events
#: the resumed session's next step posts (the rest continue from ``executing``).
_SLOT_FOR_CONTINUATION = {"admitting": "admitting", "resuming": "resuming"}


def admission_slot_for(classification: Classification) -> str:
    """The ``execution_admission`` state the agent's slot must be in for an execution
    classified as ``classification`` (suspended, waiting for an operator, or
    continuing from ``classification.state``)."""
    if classification.kind == SUSPENDED:
        return "suspended"
    if classification.kind == RESOLUTION_REQUIRED:
        return "recovery_required"
    return _SLOT_FOR_CONTINUATION.get(classification.state or "", "executing")


def install_recovered(agent: Agent, execution: ExecutionRecord) -> None:
    """Install a durable active execution as the agent's live one (reference §6.4);
    blocks until installed. Raises ConfigurationError when the execution needs an
    operator or an approval and the agent has no listener (nothing is left live)."""
    execution = pin_to_current_spec(execution)
    classification = classify(execution)
    if classification.kind in (SUSPENDED, RESOLUTION_REQUIRED) and agent.on_event is None:
        raise ConfigurationError(
            f"execution {execution.execution_id} of agent {agent.agent_id!r} needs "
            f"{'an approval' if classification.kind == SUSPENDED else 'an operator resolution'}; "
            "load the agent with on_event so the request can be delivered"
        )
    records = agent.store.read_journal(agent.agent_id, execution_id=execution.execution_id)
    from phronomy_fsm.runtime.tasks import Task

    recovered: Task[Any] = Task(f"{agent.agent_id} recovered {execution.execution_id}")
    agent.recovered = recovered

    def install() -> None:
        ctx = restore_invocation(agent, execution, records)
        ctx.waiters.append(recovered)
        agent._current = ctx
        agent._live[ctx.execution_id] = ctx
        runtime = agent.runtime
        if classification.kind == SUSPENDED:
            runtime.start_admission(agent, at_state="suspended")
            ctx.state = "suspended"
            runtime.announce_approval(ctx)
        elif classification.kind == RESOLUTION_REQUIRED:
            runtime.start_admission(agent, at_state="recovery_required")
            ctx.state = "recovery_required"
            ctx.recovery_announcement = announce_payload(execution, classification)
            runtime.emit(ctx, "recovery_resolution_required", ctx.recovery_announcement)
        else:
            # the slot starts where the resumed session's next step expects it
            runtime.start_admission(agent, at_state=admission_slot_for(classification))
            outcome = BarrierOutcome("committed", execution.revision)
            runtime.start_execution(
                ctx, at_state=classification.state, event=classification.event, payload=outcome
            )
        deadline_at = execution.metadata.get("deadline_at")
        if isinstance(deadline_at, str):  # the deadline survives the crash (admission)
            ctx.deadline_at = datetime.fromisoformat(deadline_at)
            runtime.arm_deadline(ctx, (ctx.deadline_at - runtime.now()).total_seconds())

    agent.runtime.dispatcher.call(install).result(30)


# ---------------------------------------------------------------- resolution


def begin_resolution(agent: Agent, resolution: Resolution, task: Task[Any]) -> None:
    """Validate an operator resolution on the loop and start the resolving session
    (reference §6.6 steps 1-2). Refusals fail only ``task``; an execution that is not
    waiting for a resolution here is explained from its durable record
    (:func:`explain_not_resolvable`)."""
    ctx = agent._live.get(resolution.execution_id)
    if ctx is None:
        explain_not_resolvable(agent, resolution.execution_id, task)
        return
    if ctx.state != "recovery_required" or ctx.session_id is not None or ctx.execution is None:
        what = {
            "suspended": "is suspended for approval: approve or reject it",
            "resolving": "has a resolution being committed; wait for its outcome",
        }.get(ctx.state, f"is running (state {ctx.state}); wait for it, or cancel it")
        task.fail(
            RecoveryResolutionError(
                f"execution {resolution.execution_id} is not waiting for a resolution: it {what}",
                execution_id=resolution.execution_id,
            )
        )
        return
    if ctx.recovery_announcement is None:
        task.fail(
            RecoveryResolutionError(
                f"execution {resolution.execution_id}: its durable record is being read back; "
                "answer the recovery_resolution_required event that follows",
                execution_id=resolution.execution_id,
            )
        )
        return
    execution = ctx.execution
    if execution.revision != resolution.expected_revision:
        task.fail(
            ConflictError(
                f"execution {execution.execution_id} is at revision {execution.revision}, not "
                f"{resolution.expected_revision}; read it again",
                execution_id=execution.execution_id,
            )
        )
        return
    try:
        validate_resolution(execution, resolution)
    except RecoveryResolutionError as exc:
        task.fail(exc)
        return
    ctx.resolution = resolution
    ctx.resolvers.append(task)
    agent.runtime.start_execution(
        ctx, at_state="recovery_required", event="resolution_requested", payload=resolution
    )


def explain_not_resolvable(agent: Agent, execution_id: str, task: Task[Any]) -> None:
    """Fail ``task`` with why ``execution_id`` has nothing to resolve through
    ``agent``, read from the store off the loop (issue 11 item 10f):
    RecoveryResolutionError saying it already finished, with its status and why, for a
    terminal execution (a second ``resolve``); NotFoundError for none;
    ExecutionRehydrationRequiredError for an active execution this process does not
    run (load the agent again). Loop thread."""
    from phronomy_fsm.errors import ExecutionRehydrationRequiredError

    store = agent.store

    def explain() -> BaseException:
        try:
            execution = store.load_execution(execution_id)
        except Exception as exc:  # noqa: BLE001 - not found or unreadable: say so
            return exc
        if not execution.is_active:
            why = f" ({execution.error.render()})" if execution.error is not None else ""
            return RecoveryResolutionError(
                f"execution {execution_id} already finished: status "
                f"{execution.status.value}{why}; there is nothing left to resolve",
                execution_id=execution_id,
                status=execution.status.value,
            )
        return ExecutionRehydrationRequiredError(
            f"execution {execution_id} ({execution.status.value}, phase {execution.phase}) "
            f"is not run by agent {agent.agent_id!r} in this process; load the agent again "
            "(Agent.load) to recover it, then resolve what it announces",
            execution_id=execution_id,
        )

    try:
        op = agent.runtime.pool.submit(explain, name="resolution-readback", on_full="raise")
    except Exception as exc:  # noqa: BLE001 - the pool is full or closed
        task.fail(exc)
        return
    op.add_settled_callback(lambda o: task.fail(o.value if o.error is None else o.error))


def validate_resolution(execution: ExecutionRecord, resolution: Resolution) -> Classification:
    """Check subject, outcome and material against the execution's classification.

    Raises RecoveryResolutionError naming what to fix."""
    classification = classify(execution)
    if classification.kind != RESOLUTION_REQUIRED or classification.subject is None:
        raise RecoveryResolutionError(
            f"execution {execution.execution_id} needs no resolution ({classification.reason})",
            execution_id=execution.execution_id,
        )
    expected = classification.subject
    key = {
        "llm_call": "llm_call_id",
        "tool_invocation": "tool_invocation_id",
        "execution": "execution_id",
    }[expected["type"]]
    if (
        resolution.subject.get("type") != expected["type"]
        or resolution.subject.get(key) != expected[key]
    ):
        raise RecoveryResolutionError(
            f"subject {resolution.subject!r} is not the one to resolve; expected type {expected['type']!r} with "
            f"{key} {expected[key]!r}",
            execution_id=execution.execution_id,
        )
    if resolution.outcome not in classification.allowed_outcomes:
        raise RecoveryResolutionError(
            f"outcome {resolution.outcome!r} is not allowed here; allowed: {', '.join(classification.allowed_outcomes)}",
            execution_id=execution.execution_id,
        )
    if resolution.outcome == "succeeded" and resolution.result is None:
        raise RecoveryResolutionError(
            "outcome 'succeeded' needs a result", execution_id=execution.execution_id
        )
    if (
        resolution.outcome == "succeeded"
        and expected["type"] == "llm_call"
        and not isinstance(resolution.result, (dict, str))
    ):
        raise RecoveryResolutionError(
            "an LLM result is the response text, or {'content': ..., 'tool_calls': [{'name', 'arguments'}]}",
            execution_id=execution.execution_id,
        )
    if resolution.outcome == "failed" and not resolution.error:
        raise RecoveryResolutionError(
            "outcome 'failed' needs an error message", execution_id=execution.execution_id
        )
    if resolution.outcome != "succeeded" and resolution.result is not None:
        raise RecoveryResolutionError(
            f"outcome {resolution.outcome!r} takes no result", execution_id=execution.execution_id
        )
    if resolution.outcome != "failed" and resolution.error is not None:
        raise RecoveryResolutionError(
            f"outcome {resolution.outcome!r} takes no error", execution_id=execution.execution_id
        )
    return classification


def _llm_response_from(result: Any, llm_call_id: str) -> LLMResponse:
    if isinstance(result, str):
        return LLMResponse(llm_call_id, result)
    calls = []
    for i, call in enumerate(result.get("tool_calls") or ()):
        arguments = call.get("arguments", {})
        calls.append(
            ToolCall(
                call.get("id") or f"call_resolved_{i}",
                call["name"],
                arguments if isinstance(arguments, str) else json.dumps(arguments, sort_keys=True),
            )
        )
    return LLMResponse(llm_call_id, result.get("content"), tuple(calls))


def resolution_commit(
    execution: ExecutionRecord, root: AgentRecord, resolution: Resolution, now: Any
) -> BarrierCommit:
    """The resolution barrier (reference §6.6 worker table): one transaction.

    Raises RecoveryResolutionError for a resolution that does not fit (re-checked here
    because the durable record is authoritative)."""
    classification = validate_resolution(execution, resolution)
    subject = classification.subject or {}
    agent_id = execution.agent_id
    records = [
        durable.audit_record(
            agent_id,
            execution.execution_id,
            durable.RECOVERY_RESOLVED,
            now,
            {
                "subject": resolution.subject,
                "outcome": resolution.outcome,
                "error": resolution.error,
            },
        )
    ]
    previous = list(execution.recovery.subjects) if execution.recovery is not None else []
    changes: dict[str, Any] = {}
    metadata = dict(execution.metadata)
    failure: ErrorInfo | None = None
    if resolution.outcome in ("failed", "not_performed"):
        phase = "recovery_resolved_failed"
        # the subject's own id: a tool subject also carries the llm_call_id that asked
        # for it, so the key is chosen by type
        key = "tool_invocation_id" if subject.get("type") == "tool_invocation" else "llm_call_id"
        what = subject.get(key) or execution.execution_id
        failure = (
            ErrorInfo(
                "RecoveryResolutionError",
                f"{subject.get('type')} {what} not performed; no automatic redispatch",
            )
            if resolution.outcome == "not_performed"
            else ErrorInfo("ResolvedFailure", resolution.error or "failed")
        )
        changes["pending_llm_call_id"] = None
    elif subject["type"] == "llm_call":
        response = _llm_response_from(resolution.result, subject["llm_call_id"])
        records += durable.llm_records(
            agent_id, execution.execution_id, [durable.LLMFact(response, now, now)], now
        )
        phase = "recovery_provider_completed"
        changes["pending_llm_call_id"] = None
        metadata["resolved_llm_call_id"] = subject["llm_call_id"]
    else:
        tool_id = subject["tool_invocation_id"]
        entry = next(e for e in execution.tool_batch if e.tool_invocation_id == tool_id)

        tool_fact = durable.ToolFact(
            tool_id,
            entry.tool_call_id,
            entry.tool_name,
            entry.llm_call_id,
            "completed",
            tool_result_text(resolution.result),
            resolution.result,
        )
        records += durable.tool_records(agent_id, execution.execution_id, [tool_fact], now)
        batch = tuple(
            attrs.evolve(e, status="completed", result=resolution.result)
            if e.tool_invocation_id == tool_id
            else e
            for e in execution.tool_batch
        )
        changes["tool_batch"] = batch
        remaining = [e for e in batch if e.status in MAYBE_STARTED]
        phase = "recovery_tools" if remaining else "recovery_tools_completed"
    resolved = RecoverySubject(
        type=subject.get("type", "execution"),
        llm_call_id=subject.get("llm_call_id"),
        tool_invocation_id=subject.get("tool_invocation_id"),
        tool_call_id=subject.get("tool_call_id"),
        tool_name=subject.get("tool_name"),
        arguments=subject.get("arguments"),
        state="resolved",
        outcome=resolution.outcome,
        result=resolution.result,
    )
    descriptor = RecoveryDescriptor(
        reason=classification.reason,
        subjects=tuple(previous) + (resolved,),
        allowed_outcomes=classification.allowed_outcomes,
        resolution_outcome=resolution.outcome,
        failure=failure,
    )
    status = (
        ExecutionStatus.ACTIVE
        if execution.status is not ExecutionStatus.PREPARING
        else ExecutionStatus.PREPARING
    )
    updated = execution.advance(
        now=now, status=status, phase=phase, recovery=descriptor, metadata=metadata, **changes
    )
    return durable.make_commit(
        "recovery_resolution", updated, execution.revision, root, records, now
    )


def apply_resolution(ctx: Invocation, commit: BarrierCommit) -> None:
    """After a committed resolution, bring the live context in line with it: the
    supplied LLM response, the resolved tool results, or the failure to end with."""
    execution = commit.execution
    ctx.resolution = None
    if execution.phase == "recovery_resolved_failed":
        ctx.error = resolution_failure(execution)
        return
    for record in commit.journal:
        if record.kind == durable.ASSISTANT_MESSAGE:
            message = Message.from_json(record.content)
            ctx.messages.append(message)
            ctx.last_response = LLMResponse(
                record.llm_call_id or "", message.content, message.tool_calls, Usage()
            )
            ctx.decide_handoff(ctx.last_response)  # an operator's answer may hand off
    for entry in execution.tool_batch:
        for child in ctx.children:
            if (
                child.tool_invocation_id == entry.tool_invocation_id
                and entry.status == "completed"
                and child.status != "completed"
            ):
                child.status = "completed"
                child.result = entry.result
                child.content = tool_result_text(entry.result)
                child.journaled = True


@attrs.frozen
class PendingHandoff:
    """A committed handoff whose target execution was never admitted (reference §4.6:
    the source's terminal commit names a deterministic target id; a crash between the
    acknowledgement and the target's admission leaves only that record).

    ``text`` is the input the target starts with: the handoff call's ``message``
    argument, else the source execution's user message."""

    source_execution_id: str
    target_agent_id: str
    target_execution_id: str
    text: str


def pending_handoffs(
    store: BarrierStore, target_agent_id: str | None = None
) -> list[PendingHandoff]:
    """Handed-off executions (of any agent) whose target execution does not exist,
    oldest first; only those targeting ``target_agent_id`` when given.

    Cost: one scan of the ``handed_off`` executions plus one lookup per candidate
    (compaction removes old ones). Raises StorageError, SerializationError."""
    found = []
    for source in store.list_executions(status=ExecutionStatus.HANDED_OFF.value):
        handoff = source.metadata.get("handoff")
        if not isinstance(handoff, dict):
            continue
        target, target_id = handoff.get("target_agent_id"), handoff.get("target_execution_id")
        if not isinstance(target, str) or not isinstance(target_id, str):
            continue
        if target_agent_id is not None and target != target_agent_id:
            continue
        try:
            store.load_execution(target_id)
            continue  # admitted already (whatever became of it)
        except NotFoundError:
            pass
        arguments = handoff.get("arguments")
        message = arguments.get("message") if isinstance(arguments, dict) else None
        if not isinstance(message, str) or not message.strip():
            message = next(
                (
                    str(r.content.get("content"))
                    for r in store.read_journal(source.agent_id, execution_id=source.execution_id)
                    if r.kind == durable.USER_MESSAGE and isinstance(r.content, dict)
                ),
                "",
            )
        if message.strip():
            found.append(PendingHandoff(source.execution_id, target, target_id, message))
    return found
