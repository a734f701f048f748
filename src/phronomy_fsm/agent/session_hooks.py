"""The hooks of the ``agent_session`` machine: guards, actions, offload hooks, barriers.

This is the agent coordinator of reference §4 expressed as the Protocol the generated
``phronomy_fsm.generated.agent_session.Hooks`` asks for. Guards read the
:class:`~phronomy_fsm.agent.invocation.Invocation` (and the event payload); actions change
it; offload hooks snapshot it into work for the pool (LLM calls, filters); barrier hooks
build one :class:`~phronomy_fsm.store.records.BarrierCommit` from it and return the
future of its durable outcome. Everything here runs on the dispatcher's loop thread.

Barrier contents follow reference §4.1-§4.6 (see :mod:`phronomy_fsm.agent.durable` for
the phases). :meth:`AgentSessionHooks.apply_barrier_outcome` applies a committed record to
live state before the FSM decides what follows (bound as the binding's
``on_barrier_outcome``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

from phronomy_fsm.agent import durable
from phronomy_fsm.agent.durable import LLMFact
from phronomy_fsm.agent.invocation import Invocation, ToolInvocation
from phronomy_fsm.agent.providers import check_response
from phronomy_fsm.agent.types import AbortReason, LLMRequest, LLMResponse, Message, TokenChunk
from phronomy_fsm.errors import Cancelled, ContentBlockedError, ExecutionFailedError, LLMError
from phronomy_fsm.generated import agent_session
from phronomy_fsm.store.records import (
    AgentLifecycle,
    ApprovalItem,
    BarrierCommit,
    ErrorInfo,
    ExecutionRecord,
    ExecutionStatus,
)
from phronomy_fsm.table import COMMITTED, BarrierOutcome, PendingBarrier, Settled

if TYPE_CHECKING:
    from phronomy_fsm.agent.runtime import AgentRuntime
    from phronomy_fsm.runtime.dispatcher import OffloadContext


@attrs.frozen
class InputFilterResult:
    """Output of the ``filter_input`` offload: the text to send, or why it is blocked."""

    text: str
    blocked_reason: str | None = None


@attrs.frozen
class OutputFilterResult:
    """Output of the ``filter_output`` offload: the final text, or why it is blocked."""

    text: str | None
    blocked_reason: str | None = None


@attrs.frozen
class PreparedCommit:
    """A barrier's commit plus the live facts it journals (acknowledged once committed,
    reference §1.5 ``acknowledge_runtime_snapshot``)."""

    commit: BarrierCommit
    llm_facts: tuple[LLMFact, ...] = ()
    tool_children: tuple[ToolInvocation, ...] = ()


def _payload_error(payload: Any) -> BaseException | None:
    if isinstance(payload, BaseException):
        return payload
    if isinstance(payload, BarrierOutcome):
        return payload.error
    return None


TERMINAL_STATUS = {
    "completed": ExecutionStatus.COMPLETED,
    "rejected": ExecutionStatus.REJECTED,
    "blocked": ExecutionStatus.BLOCKED,
    "handed_off": ExecutionStatus.HANDED_OFF,
    "failed": ExecutionStatus.FAILED,
    "cancelled": ExecutionStatus.CANCELLED,
}


class AgentSessionHooks:
    """Implements ``agent_session.Hooks`` for every agent of one
    :class:`~phronomy_fsm.agent.runtime.AgentRuntime`."""

    def __init__(self, runtime: AgentRuntime) -> None:
        self.runtime = runtime

    # ------------------------------------------------------------------ guards

    def cancel_pending(self, ctx: Invocation, payload: Any) -> bool:
        """A cancel, timeout or listener failure arrived while a barrier was in flight."""
        return ctx.abort is not None

    def input_blocked(self, ctx: Invocation, payload: InputFilterResult) -> bool:
        """An input filter blocked the input."""
        return payload.blocked_reason is not None

    def handoff_invalid(self, ctx: Invocation, payload: Any) -> bool:
        """A handoff call was mixed with other calls, or several handoffs were asked."""
        return ctx.handoff_error is not None

    def handoff_requested(self, ctx: Invocation, payload: Any) -> bool:
        """The response is exactly one call of a configured handoff tool."""
        return ctx.handoff is not None

    def tool_calls_pending(self, ctx: Invocation, payload: Any) -> bool:
        """The response asks for tools."""
        return ctx.last_response is not None and bool(ctx.last_response.tool_calls)

    def tool_batch_rejected(self, ctx: Invocation, payload: Any) -> bool:
        """A tool call was rejected by policy or by a person rejecting the request."""
        return ctx.batch_rejected()

    def tool_batch_completed(self, ctx: Invocation, payload: Any) -> bool:
        """Every tool call of the batch is final."""
        return ctx.batch_completed()

    def approval_required(self, ctx: Invocation, payload: Any) -> bool:
        """Some tool call waits for a person."""
        return ctx.approval_required()

    def ready_to_dispatch(self, ctx: Invocation, payload: Any) -> bool:
        """Every undecided tool call is authorised; make the batch durable."""
        return ctx.ready_to_dispatch()

    def iteration_limit_reached(self, ctx: Invocation, payload: Any) -> bool:
        """``max_iterations`` LLM calls were made."""
        return ctx.llm_calls >= ctx.agent.max_iterations

    def output_blocked(self, ctx: Invocation, payload: OutputFilterResult) -> bool:
        """An output filter blocked the answer."""
        return payload.blocked_reason is not None

    def outcome_completed(self, ctx: Invocation, payload: Any) -> bool:
        """The committed terminal outcome is ``completed``."""
        return ctx.outcome == "completed"

    def outcome_rejected(self, ctx: Invocation, payload: Any) -> bool:
        """The committed terminal outcome is ``rejected``."""
        return ctx.outcome == "rejected"

    def outcome_blocked(self, ctx: Invocation, payload: Any) -> bool:
        """The committed terminal outcome is ``blocked``."""
        return ctx.outcome == "blocked"

    def outcome_handed_off(self, ctx: Invocation, payload: Any) -> bool:
        """The committed terminal outcome is ``handed_off``."""
        return ctx.outcome == "handed_off"

    def outcome_cancelled(self, ctx: Invocation, payload: Any) -> bool:
        """The committed terminal outcome is ``cancelled``."""
        return ctx.outcome == "cancelled"

    def resolved_failed(self, ctx: Invocation, payload: Any) -> bool:
        """The committed resolution ends the execution as failed."""
        return ctx.execution is not None and ctx.execution.phase == "recovery_resolved_failed"

    def resolved_provider_output(self, ctx: Invocation, payload: Any) -> bool:
        """The committed resolution supplied the LLM response."""
        return ctx.execution is not None and ctx.execution.phase == "recovery_provider_completed"

    def resolved_tools_completed(self, ctx: Invocation, payload: Any) -> bool:
        """The committed resolution settled every tool subject."""
        return ctx.execution is not None and ctx.execution.phase == "recovery_tools_completed"

    # ----------------------------------------------------------------- actions

    def _mark(self, ctx: Invocation, outcome: str, error: BaseException | None = None) -> None:
        ctx.outcome = outcome
        if error is not None and ctx.error is None:
            ctx.error = error

    def mark_failed(self, ctx: Invocation, payload: Any) -> None:
        """End as failed, keeping the first error seen; a pending cancel, timeout or
        listener failure takes precedence (reference §4.6 error precedence)."""
        if ctx.abort is not None:
            self._mark(ctx, ctx.abort.status, ctx.abort.error)
            return
        error = _payload_error(payload) or ctx.error
        if error is None:
            reason = (
                "max_iterations reached"
                if ctx.llm_calls >= ctx.agent.max_iterations
                else "execution failed"
            )
            error = ExecutionFailedError(reason, execution_id=ctx.execution_id, status="failed")
        self._mark(ctx, "failed", error)

    def mark_blocked(self, ctx: Invocation, payload: Any) -> None:
        """End as blocked by a filter."""
        reason = getattr(payload, "blocked_reason", None) or "blocked by a filter"
        self._mark(
            ctx,
            "blocked",
            ContentBlockedError(reason, execution_id=ctx.execution_id, reason=reason),
        )

    def mark_completed(self, ctx: Invocation, payload: OutputFilterResult) -> None:
        """End as completed with the filtered answer."""
        ctx.output = payload.text
        self._mark(ctx, "completed")

    def mark_rejected(self, ctx: Invocation, payload: Any) -> None:
        """End as rejected (a tool call was rejected)."""
        self._mark(ctx, "rejected")

    def mark_handed_off(self, ctx: Invocation, payload: Any) -> None:
        """End as handed off."""
        self._mark(ctx, "handed_off")

    def mark_cancelled(self, ctx: Invocation, payload: Any) -> None:
        """End as cancelled (a suspended execution: nothing runs)."""
        reason = payload if isinstance(payload, AbortReason) else ctx.abort
        if reason is not None and reason.kind != "cancelled":
            self._mark(ctx, "failed", reason.error)
        else:
            self._mark(ctx, "cancelled", reason.error if reason else Cancelled("cancelled"))

    def mark_aborted(self, ctx: Invocation, payload: Any) -> None:
        """End as cancelled, or failed for a timeout or a raising listener."""
        reason = ctx.abort or AbortReason("cancelled", Cancelled("cancelled"))
        self._mark(ctx, reason.status, reason.error)

    def deliver_token(self, ctx: Invocation, payload: TokenChunk) -> None:
        """A streamed token of the current call → ``token`` event (reference §1.5)."""
        if ctx.execution is not None and payload.llm_call_id == ctx.execution.pending_llm_call_id:
            self.runtime.emit(
                ctx, "token", {"content": payload.content, "llm_call_id": payload.llm_call_id}
            )

    def record_llm_response(self, ctx: Invocation, payload: LLMResponse) -> None:
        """Record the response (the provenance fact for the next barrier) and decide
        handoffs (reference §1.5 ``accept_tool_calls!``)."""
        response = payload
        ctx.last_response = response
        ctx.llm_facts.append(
            LLMFact(response, ctx.llm_started_at or self.runtime.now(), self.runtime.now())
        )
        ctx.messages.append(response.message())
        ctx.usage = ctx.usage + response.usage
        ctx.decide_handoff(response)
        if ctx.handoff is None and ctx.handoff_error is None:
            for call in response.tool_calls:
                self.runtime.emit(
                    ctx,
                    "tool_call",
                    {
                        "tool_call_id": call.id,
                        "name": call.name,
                        "arguments": call.arguments_json,
                        "llm_call_id": response.llm_call_id,
                    },
                )

    def start_tools(self, ctx: Invocation, payload: Any) -> None:
        """One tool invocation (child session) per tool call (reference §1.2)."""
        response = ctx.last_response
        assert response is not None
        ctx.children = []
        for call in response.tool_calls:
            child = ToolInvocation(
                ctx,
                durable.tool_invocation_id(
                    ctx.execution_id, response.llm_call_id, call.id, call.name
                ),
                call,
                response.llm_call_id,
                ctx.agent.tools.get(call.name),
            )
            ctx.children.append(child)
        for child in ctx.children:
            self.runtime.start_child(child)

    def dispatch_tools(self, ctx: Invocation, payload: Any) -> None:
        """The batch is durable: run the authorised calls (resumed child sessions fired
        with ``dispatch``, reference §4.3)."""
        for child in ctx.children:
            if child.status == "authorized":
                self.runtime.resume_child(child, "authorized", "dispatch")

    def record_tool_results(self, ctx: Invocation, payload: Any) -> None:
        """Append one tool message per finished call; ``tool_result`` events."""
        for child in ctx.children:
            ctx.messages.append(
                Message(
                    "tool", child.message_text(), tool_call_id=child.call.id, name=child.call.name
                )
            )
            self.runtime.emit(
                ctx,
                "tool_result",
                {
                    "tool_call_id": child.call.id,
                    "tool_name": child.call.name,
                    "tool_invocation_id": child.tool_invocation_id,
                    "status": child.status,
                    "content": child.message_text(),
                },
            )

    def announce_approval_required(self, ctx: Invocation, payload: Any) -> None:
        """``approval_required`` with the durable request (reference §4.6 suspended)."""
        self.runtime.announce_approval(ctx)

    def record_approval_decision(self, ctx: Invocation, payload: Any) -> None:
        """The decision to commit (already validated by ``approve``)."""
        ctx.approval_decision = payload

    def apply_approval_decision(self, ctx: Invocation, payload: Any) -> None:
        """Resume each waiting tool call with approve/reject (reference §4.5 step 4)."""
        execution = ctx.execution
        assert execution is not None
        ctx.waiters.extend(ctx.approvers)
        ctx.approvers.clear()
        decisions: dict[str, bool] = execution.metadata.get("approval_decisions", {})
        whole = bool(execution.metadata.get("approval_global", True))
        human_rejection = whole and not any(decisions.values())
        for child in ctx.children:
            if child.status == "awaiting_approval":
                approved = decisions.get(child.tool_invocation_id, False)
                if not approved:
                    child.rejected_by = "person" if whole else "person_item"
                self.runtime.resume_child(
                    child, "awaiting_approval", "approve" if approved else "reject"
                )
            elif child.status == "authorized" and human_rejection:
                child.status = "cancelled"
        ctx.approval_decision = None

    def restore_suspension(self, ctx: Invocation, payload: Any) -> None:
        """The decision did not commit: fail that approve call, keep waiting."""
        error = _payload_error(payload) or ExecutionFailedError(
            "the approval decision did not commit"
        )
        self.runtime.fail_approvers(ctx, error)
        ctx.approval_decision = None

    def await_quiescence(self, ctx: Invocation, payload: Any) -> None:
        """Revoke authority of running calls and wait for them to finish physically
        (reference §7.5); then ``quiesced``."""
        self.runtime.cancel_children(ctx)
        self.runtime.post_when_quiescent(ctx)

    def announce_recovery_required(self, ctx: Invocation, payload: Any) -> None:
        """Fail closed: tell the operator what must be resolved (reference §6.4)."""
        self.runtime.announce_recovery(ctx, _payload_error(payload))

    def record_resolution(self, ctx: Invocation, payload: Any) -> None:
        """The operator's resolution to commit."""
        ctx.resolution = payload

    # ------------------------------------------------------------ offload hooks

    def filter_input(self, ctx: Invocation, payload: Any) -> Any:
        """Input filters off-loop (reference §4.1 steps 3-5)."""
        filters = tuple(ctx.agent.input_filters)
        raw = ctx.raw_input
        token = ctx.cancellation
        if not filters:  # nothing to run outside
            return Settled(InputFilterResult(raw))

        def work(octx: OffloadContext) -> InputFilterResult:
            token.raise_if_cancelled()
            text = raw
            for flt in filters:
                try:
                    text = flt(text)
                except ContentBlockedError as exc:
                    return InputFilterResult(raw, str(exc) or "blocked")
                if not isinstance(text, str):
                    raise TypeError(f"input filter {flt!r} returned {type(text).__name__}, not str")
            token.raise_if_cancelled()
            return InputFilterResult(text)

        return work

    def call_llm(self, ctx: Invocation, payload: Any) -> Any:
        """The LLM call named by the durable pending id (reference §1.6)."""
        execution = ctx.execution
        assert execution is not None and execution.pending_llm_call_id is not None
        agent = ctx.agent
        request = LLMRequest(
            llm_call_id=execution.pending_llm_call_id,
            messages=tuple(ctx.messages),
            tools=agent.tool_specs,
            stream=ctx.mode == "stream",
        )
        provider = agent.provider
        token = ctx.cancellation
        ctx.llm_calls += 1
        ctx.llm_started_at = self.runtime.now()

        def work(octx: OffloadContext) -> LLMResponse:
            token.raise_if_cancelled()

            def on_token(text: str) -> None:
                octx.emit("llm_stream_chunk", TokenChunk(request.llm_call_id, text))

            try:
                response = provider.complete(
                    request, on_token=on_token if request.stream else None, cancellation=token
                )
            except (LLMError, Cancelled):
                raise
            except Exception as exc:
                raise LLMError(
                    f"provider failed: {type(exc).__name__}: {exc}", llm_call_id=request.llm_call_id
                ) from exc
            if not isinstance(response, LLMResponse) or response.llm_call_id != request.llm_call_id:
                raise LLMError(
                    f"provider answered {getattr(response, 'llm_call_id', response)!r} for call {request.llm_call_id}",
                    llm_call_id=request.llm_call_id,
                )
            check_response(response)
            return response

        return work

    def filter_output(self, ctx: Invocation, payload: Any) -> Any:
        """Output filters off-loop on the final answer."""
        filters = tuple(ctx.agent.output_filters)
        text = ctx.last_response.content if ctx.last_response is not None else None
        if not filters:
            return Settled(OutputFilterResult(text))

        def work(octx: OffloadContext) -> OutputFilterResult:
            current = text
            for flt in filters:
                try:
                    current = flt(current or "")
                except ContentBlockedError as exc:
                    return OutputFilterResult(text, str(exc) or "blocked")
            return OutputFilterResult(current)

        return work

    # ----------------------------------------------------------------- barriers

    @staticmethod
    def _pending_records(
        ctx: Invocation, now: Any, *, context: bool = True
    ) -> tuple[list[Any], tuple[LLMFact, ...], tuple[ToolInvocation, ...]]:
        """Journal records for the facts not journaled yet (LLM responses, finished
        tool calls), and those facts — acknowledged once the barrier commits."""
        facts = tuple(ctx.llm_facts)
        finished = tuple(ctx.pending_tool_facts())
        agent_id = ctx.agent.agent_id
        records = durable.llm_records(agent_id, ctx.execution_id, facts, now, context=context)
        records += durable.tool_records(
            agent_id, ctx.execution_id, (c.fact() for c in finished), now, context=context
        )
        return records, facts, finished

    def _submit(self, ctx: Invocation, prepared: PreparedCommit) -> PendingBarrier:
        return self.runtime.submit_barrier(ctx.agent.store, prepared)

    def admission(self, ctx: Invocation, payload: Any) -> Any:
        """Create the execution at revision 0, status preparing (reference §4.1 step 2)."""
        agent = ctx.agent
        now = self.runtime.now()
        execution = ExecutionRecord(
            execution_id=ctx.execution_id,
            agent_id=agent.agent_id,
            revision=0,
            status=ExecutionStatus.PREPARING,
            phase="preparing",
            spec_version=agent_session.SPEC_VERSION,
            spec_sha256=agent_session.SPEC_SHA256,
            created_at=now,
            updated_at=now,
            input=ctx.raw_input,
            invocation_mode=ctx.mode,
            metadata={
                "recovery_contract_version": durable.RECOVERY_CONTRACT_VERSION,
                "preparation_replayable": agent.preparation_replayable,
                **(
                    {"deadline_at": ctx.deadline_at.isoformat()}
                    if ctx.deadline_at is not None
                    else {}
                ),
            },
        )
        records = durable.input_records(agent.agent_id, ctx.execution_id, ctx.raw_input, now)
        commit = durable.make_commit(
            "admission", execution, None, agent.root, records, now, AgentLifecycle.ACTIVE
        )
        return self._submit(ctx, PreparedCommit(commit))

    def initial_preparation(self, ctx: Invocation, payload: InputFilterResult) -> Any:
        """Active, phase calling_llm, the first pending LLM-call id (§4.1 step 6)."""
        ctx.filtered_input = payload.text
        ctx.messages.append(Message("user", payload.text))
        now = self.runtime.now()
        execution = ctx.execution
        assert execution is not None
        updated = execution.advance(
            now=now,
            status=ExecutionStatus.ACTIVE,
            phase="calling_llm",
            pending_llm_call_id=durable.new_id(),
            llm_call_count=1,
        )
        records = durable.user_message_records(
            ctx.agent.agent_id, ctx.execution_id, payload.text, now
        )
        commit = durable.make_commit(
            "initial_preparation", updated, execution.revision, ctx.agent.root, records, now
        )
        return self._submit(ctx, PreparedCommit(commit))

    def tool_dispatch(self, ctx: Invocation, payload: Any) -> Any:
        """The tool barrier: the LLM response and the authorised batch (§4.3)."""
        return self._dispatch_barrier(
            ctx,
            "tool_dispatch",
            phase="dispatching_tools",
            pending_llm_call_id=None,
            tool_batch=durable.batch_entries(ctx.children),
        )

    def provider_dispatch(self, ctx: Invocation, payload: Any) -> Any:
        """The provider barrier: tool results and a fresh pending LLM-call id (§4.2)."""
        assert ctx.execution is not None
        return self._dispatch_barrier(
            ctx,
            "provider_dispatch",
            phase="calling_llm",
            pending_llm_call_id=durable.new_id(),
            llm_call_count=ctx.execution.llm_call_count + 1,
            tool_batch=(),
        )

    def _dispatch_barrier(self, ctx: Invocation, barrier: str, **changes: Any) -> Any:
        """A barrier before an external effect: the execution advanced by ``changes``
        (clearing any recovery descriptor) with the journal records and LLM facts not
        yet durable, in one commit with the agent root (reference §4.2, §4.3)."""
        now = self.runtime.now()
        execution = ctx.execution
        assert execution is not None
        records, facts, finished = self._pending_records(ctx, now)
        updated = execution.advance(now=now, recovery=None, **changes)
        commit = durable.make_commit(
            barrier, updated, execution.revision, ctx.agent.root, records, now
        )
        return self._submit(ctx, PreparedCommit(commit, facts, finished))

    def suspension(self, ctx: Invocation, payload: Any) -> Any:
        """Durably suspended with the approval request (§4.6 suspended outcome)."""
        now = self.runtime.now()
        execution = ctx.execution
        assert execution is not None
        items = [
            ApprovalItem(
                c.tool_invocation_id,
                c.call.id,
                c.call.name,
                c.arguments,
                "the tool requires approval"
                if c.tool is not None and c.tool.requires_approval
                else "the approval policy requires it",
            )
            for c in ctx.children
            if c.status == "awaiting_approval"
        ]
        request = durable.approval_request_for(ctx.execution_id, items, now)
        records, facts, finished = self._pending_records(ctx, now)
        records.append(
            durable.audit_record(
                ctx.agent.agent_id,
                ctx.execution_id,
                durable.APPROVAL_REQUIRED,
                now,
                {
                    "approval_request_id": request.request_id,
                    "items": [i.tool_invocation_id for i in items],
                },
            )
        )
        updated = execution.advance(
            now=now,
            status=ExecutionStatus.SUSPENDED,
            phase="approval",
            pending_llm_call_id=None,
            approval_request=request,
            tool_batch=durable.batch_entries(ctx.children),
        )
        commit = durable.make_commit(
            "suspension",
            updated,
            execution.revision,
            ctx.agent.root,
            records,
            now,
            AgentLifecycle.SUSPENDED,
        )
        return self._submit(ctx, PreparedCommit(commit, facts, finished))

    def approval_decision(self, ctx: Invocation, payload: Any) -> Any:
        """The decision, merged into the request (§4.5)."""
        decision = ctx.approval_decision
        execution = ctx.execution
        assert decision is not None and execution is not None
        commit = durable.approval_decision_commit(
            execution,
            ctx.agent.root,
            request_id=decision.request_id,
            approved=decision.approved,
            decisions=decision.decisions,
            now=self.runtime.now(),
        )
        return self._submit(ctx, PreparedCommit(commit))

    def terminal_commit(self, ctx: Invocation, payload: Any) -> Any:
        """The terminal outcome (§4.6 completed / failed / handed_off outcomes)."""
        now = self.runtime.now()
        execution = ctx.execution
        assert execution is not None and ctx.outcome is not None
        agent_id = ctx.agent.agent_id
        outcome = ctx.outcome
        succeeded = outcome in ("completed", "rejected", "handed_off")
        records, facts, finished = self._pending_records(ctx, now, context=succeeded)
        metadata = dict(execution.metadata)
        changes: dict[str, Any] = {
            "status": TERMINAL_STATUS[outcome],
            "phase": outcome if outcome != "rejected" else "completed",
            "pending_llm_call_id": None,
            "terminal_reason": outcome,
            "recovery": None,
        }
        if outcome == "completed":
            records.append(
                durable.audit_record(
                    agent_id, ctx.execution_id, durable.FINAL_OUTPUT, now, {"text": ctx.output}
                )
            )
            changes["output"] = ctx.output
        elif outcome == "handed_off":
            metadata["handoff"] = ctx.handoff
        if not succeeded or outcome == "rejected":
            error = ctx.error
            if outcome == "rejected":
                changes["error"] = ErrorInfo("ToolRejected", "a tool call was rejected")
            else:
                changes["error"] = durable.error_info(error)
        records.append(
            durable.audit_record(
                agent_id,
                ctx.execution_id,
                f"execution_{outcome}",
                now,
                {
                    "status": outcome,
                    "error": changes["error"].render() if "error" in changes else None,
                },
            )
        )
        changes["metadata"] = metadata
        updated = execution.advance(now=now, **changes)
        commit = durable.make_commit(
            "terminal_commit",
            updated,
            execution.revision,
            ctx.agent.root,
            records,
            now,
            AgentLifecycle.IDLE,
        )
        return self._submit(ctx, PreparedCommit(commit, facts, finished))

    def recovery_resolution(self, ctx: Invocation, payload: Any) -> Any:
        """The operator's resolution, one transaction (reference §6.6)."""
        from phronomy_fsm.agent.recovery import resolution_commit

        assert ctx.resolution is not None and ctx.execution is not None
        prepared = resolution_commit(
            ctx.execution, ctx.agent.root, ctx.resolution, self.runtime.now()
        )
        return self._submit(ctx, PreparedCommit(prepared))

    # ----------------------------------------------------- barrier outcome hook

    def _settle_resolvers(self, ctx: Invocation, outcome: BarrierOutcome) -> None:
        """A committed resolution makes its resolve calls observers of the execution's
        outcome; any other outcome fails them (reference §6.6: conflict → ConflictError)."""
        resolvers, ctx.resolvers = ctx.resolvers, []
        if outcome.outcome == COMMITTED:
            ctx.waiters.extend(resolvers)
            return
        error = outcome.error or ExecutionFailedError(
            f"the resolution of execution {ctx.execution_id} did not commit ({outcome.outcome})",
            execution_id=ctx.execution_id,
        )
        for task in resolvers:
            task.fail(error)

    def apply_barrier_outcome(self, ctx: Invocation, state: str, outcome: BarrierOutcome) -> None:
        """Apply a committed barrier to live state (execution, agent root, acknowledged
        facts) before the FSM decides (reference §4.2 "replace the live execution and
        acknowledge the snapshot" — the committed state is real whatever follows)."""
        if state == "resolving":
            self._settle_resolvers(ctx, outcome)
            if outcome.outcome == COMMITTED and ctx.abort is not None and ctx.session_id:
                # cancel() during the resolution barrier returned True: the operator's
                # answer is durable; the execution then ends cancelled instead of
                # going on (queued ahead of the next state's own work; issue 11 item 7)
                self.runtime.dispatcher.post(ctx.session_id, "cancel_requested", ctx.abort)
        if outcome.outcome != COMMITTED or not isinstance(outcome.value, PreparedCommit):
            return
        prepared: PreparedCommit = outcome.value
        commit = prepared.commit
        ctx.execution = commit.execution
        if commit.agent is not None:
            ctx.agent.root = commit.agent
        if prepared.llm_facts:
            acknowledged = set(map(id, prepared.llm_facts))
            ctx.llm_facts = [f for f in ctx.llm_facts if id(f) not in acknowledged]
        for child in prepared.tool_children:
            child.journaled = True
        if commit.execution.approval_request is not None:
            ctx.approval_request = commit.execution.approval_request
        if commit.barrier == "recovery_resolution":
            from phronomy_fsm.agent.recovery import apply_resolution

            apply_resolution(ctx, commit)
