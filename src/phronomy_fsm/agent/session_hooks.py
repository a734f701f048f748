"""The hooks of the ``agent_session`` machine: what one agent execution does at each step.

:class:`AgentSessionHooks` implements the generated
:class:`phronomy_fsm.generated.agent_session.Hooks` Protocol (mypy checks it). Every
method runs on the dispatcher's loop thread with the execution's
:class:`~phronomy_fsm.agent.context.SessionContext`: guards read it, actions change it,
offload hooks snapshot what their work needs (the work runs on the offload pool) and
barrier hooks make the next LLM call or the tool calls durable before they happen. The
agent's configuration (provider, tools, filters) is looked up by ``ctx.agent_id`` in
the :class:`~phronomy_fsm.agent.directory.AgentDirectory`.

Determinism: the code between a barrier and the effect after it is re-run by recovery
(``docs/semantics.md``, "Recovery"), so it derives everything from the context — the
LLM call id is fixed by the barrier that announces the call, a tool call's id from the
LLM answer. Random ids are drawn only in barrier hooks and in steps no effect follows
before the next commit. The rules are in ``docs/agent.md``.
"""

from __future__ import annotations

import logging
from typing import Any

import attrs

from phronomy_fsm.agent.context import (
    ApprovalRequestState,
    Outcome,
    SessionContext,
    ToolCallContext,
    ToolCallState,
    ToolCallStatus,
)
from phronomy_fsm.agent.directory import AgentDirectory
from phronomy_fsm.agent.events import Token, ToolCalled, ToolResulted
from phronomy_fsm.agent.ids import handoff_target_execution_id, new_id, tool_invocation_id
from phronomy_fsm.agent.providers import check_response
from phronomy_fsm.agent.tools import Authorization, ToolCallView, normalize_authorization
from phronomy_fsm.agent.types import LLMRequest, LLMResponse, Message, TokenChunk, Usage
from phronomy_fsm.durable.records import EffectKind, ExecutionStatus
from phronomy_fsm.durable.types import BarrierRecords, ChildStart
from phronomy_fsm.errors import (
    ApprovalPolicyError,
    Cancelled,
    ConfigurationError,
    ContentBlockedError,
    LLMError,
)
from phronomy_fsm.generated import agent_session, tool_call
from phronomy_fsm.runtime.session import OffloadContext
from phronomy_fsm.table import Settled

log = logging.getLogger("phronomy_fsm.agent")

State = agent_session.State


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
class ToolDecision:
    """What ``authorize_tools`` decided for one pending call: ``authorization`` (or
    ``None`` when the call is invalid: ``error`` says why), the validated arguments,
    and why a person must approve it."""

    tool_invocation_id: str
    authorization: Authorization | None
    arguments: Any = None
    error: str | None = None
    reason: str | None = None


def _error_text(error: BaseException) -> str:
    """``Type: message``, safe to store (a lone surrogate kept as its escape)."""
    text = f"{type(error).__name__}: {error}"
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def tool_message_text(call: ToolCallState) -> str:
    """The text the LLM sees for a settled tool call: the result, or why there is none."""
    if call.content is not None:
        return call.content
    if call.status is ToolCallStatus.REJECTED:
        return f"The call to {call.tool_name} was rejected and did not run."
    return f"Error: {call.error or 'the tool failed'}"


class AgentSessionHooks(agent_session.Hooks):
    """Implements ``agent_session.Hooks`` for every agent of a directory.

    Args:
        directory: where each execution's agent configuration and listener are found.
    """

    def __init__(self, directory: AgentDirectory) -> None:
        self.directory = directory

    # ------------------------------------------------------------------ input

    def filter_input(self, ctx: SessionContext, payload: Any) -> Any:
        """Offload (pure): run the input filters on the input; a filter raising
        ContentBlockedError blocks the execution."""
        config = self.directory.config(ctx.agent_id)
        filters, raw = config.input_filters, ctx.input
        if not filters:  # nothing to run outside: decided here
            return Settled(InputFilterResult(raw))

        def work(octx: OffloadContext) -> InputFilterResult:
            text = raw
            for flt in filters:
                if octx.cancellation is not None:
                    octx.cancellation.raise_if_cancelled()
                try:
                    text = flt(text)
                except ContentBlockedError as exc:
                    return InputFilterResult(raw, str(exc) or "blocked")
                if not isinstance(text, str):
                    raise TypeError(f"input filter {flt!r} returned {type(text).__name__}, not str")
            return InputFilterResult(text)

        return work

    def input_blocked(self, ctx: SessionContext, payload: InputFilterResult) -> bool:
        """An input filter blocked the input."""
        return payload.blocked_reason is not None

    def accept_input(self, ctx: SessionContext, payload: InputFilterResult) -> None:
        """The filtered input becomes the conversation's user message."""
        ctx.filtered_input = payload.text
        ctx.messages.append(Message("user", payload.text).to_json())

    # ------------------------------------------------------------------ LLM calls

    def _announce_call(self, ctx: SessionContext) -> None:
        ctx.pending_llm_call_id = new_id()
        ctx.llm_calls += 1
        ctx.tools = []

    def initial_preparation(self, ctx: SessionContext, payload: Any) -> BarrierRecords | None:
        """Barrier ``initial_preparation``: the first LLM call's id becomes durable
        with the filtered input, before the call is made."""
        self._announce_call(ctx)
        return None

    def provider_dispatch(self, ctx: SessionContext, payload: Any) -> BarrierRecords | None:
        """Barrier ``provider_dispatch``: the tool results and the next LLM call's id
        become durable before the call is made."""
        self._announce_call(ctx)
        ctx.approval = None
        return None

    def call_llm(self, ctx: SessionContext, payload: Any) -> Any:
        """Offload (``at_most_once``, or ``idempotent`` when the agent's
        ``llm_resend`` is ``resend``): the LLM call named by the durable pending id,
        with the agent's head and history, this execution's conversation and the
        tools. Streamed tokens come back as ``llm_stream_chunk`` events."""
        config = self.directory.config(ctx.agent_id)
        call_id = ctx.pending_llm_call_id
        if call_id is None:
            raise LLMError("no LLM call was announced (the context has no pending call id)")
        messages = self.directory.base_messages(ctx.agent_id)
        messages.extend(Message.from_json(m) for m in ctx.messages)
        request = LLMRequest(call_id, tuple(messages), config.tool_specs, ctx.mode == "stream")
        provider = config.provider

        def work(octx: OffloadContext) -> LLMResponse:
            token = octx.cancellation
            if token is not None:
                token.raise_if_cancelled()

            def on_token(text: str) -> None:
                octx.emit(agent_session.Event.LLM_STREAM_CHUNK.value, TokenChunk(call_id, text))

            try:
                response = provider.complete(
                    request, on_token=on_token if request.stream else None, cancellation=token
                )
            except (LLMError, Cancelled):
                raise
            except Exception as exc:
                raise LLMError(
                    f"provider failed: {type(exc).__name__}: {exc}", llm_call_id=call_id
                ) from exc
            if not isinstance(response, LLMResponse) or response.llm_call_id != call_id:
                raise LLMError(
                    f"provider answered {getattr(response, 'llm_call_id', response)!r} for "
                    f"call {call_id}",
                    llm_call_id=call_id,
                )
            check_response(response)
            return response

        return work

    def deliver_token(self, ctx: SessionContext, payload: TokenChunk) -> None:
        """A streamed token of the current call → a :class:`Token` event. Only the
        provider's stream posts them, in process; anything else (a durable signal sent
        by hand carries JSON, not a :class:`TokenChunk`) is ignored."""
        if not isinstance(payload, TokenChunk):
            log.warning(
                "execution %s: ignored an %s event that is not a streamed token",
                ctx.execution_id,
                agent_session.Event.LLM_STREAM_CHUNK.value,
            )
            return
        if payload.llm_call_id == ctx.pending_llm_call_id:
            self.directory.emit(
                ctx.agent_id, Token(ctx.execution_id, payload.content, payload.llm_call_id)
            )

    def record_llm_response(self, ctx: SessionContext, payload: Any) -> None:
        """Record the answer (an :class:`LLMResponse`, or the JSON an operator supplied
        for a call that may not have answered): it joins the conversation; its tool
        calls become the current batch, or it is a handoff."""
        call_id = ctx.pending_llm_call_id or ""
        response = (
            payload if isinstance(payload, LLMResponse) else LLMResponse.from_json(call_id, payload)
        )
        config = self.directory.config(ctx.agent_id)
        ctx.messages.append(response.message().to_json())
        ctx.usage = {
            "prompt_tokens": ctx.usage.get("prompt_tokens", 0) + response.usage.prompt_tokens,
            "completion_tokens": ctx.usage.get("completion_tokens", 0)
            + response.usage.completion_tokens,
        }
        ctx.llm_responses.append(
            {
                "llm_call_id": call_id,
                "model": response.model,
                "usage": {
                    "prompt_tokens": response.usage.prompt_tokens,
                    "completion_tokens": response.usage.completion_tokens,
                },
                "finish_reason": response.finish_reason,
                "tool_call_count": len(response.tool_calls),
            }
        )
        ctx.answer = response.content
        ctx.finish_reason = response.finish_reason
        ctx.pending_llm_call_id = None
        ctx.handoff = ctx.handoff_error = None
        ctx.tools = []
        handoff_calls = [c for c in response.tool_calls if c.name in config.handoffs]
        if handoff_calls:
            if len(response.tool_calls) > 1:
                ctx.handoff_error = "a handoff must be the only tool call of a response"
                ctx.error_type = "LLMError"
                ctx.error = ctx.handoff_error
                return
            call = handoff_calls[0]
            target = config.handoffs[call.name]
            try:
                arguments = call.parsed_arguments()
            except ValueError:
                arguments = {"raw": call.arguments_json}
            message = arguments.get("message") if isinstance(arguments, dict) else None
            ctx.handoff = {
                "target_agent_id": target,
                "target_execution_id": handoff_target_execution_id(ctx.execution_id, target),
                "tool_call_id": call.id,
                "arguments": arguments,
                "llm_call_id": call_id,
                "message": message if isinstance(message, str) and message else ctx.filtered_input,
            }
            return
        execution_id = ctx.execution_id
        for call in response.tool_calls:
            ctx.tools.append(
                ToolCallState(
                    tool_invocation_id=tool_invocation_id(
                        execution_id, call_id, call.id, call.name
                    ),
                    tool_call_id=call.id,
                    tool_name=call.name,
                    arguments_json=call.arguments_json,
                    llm_call_id=call_id,
                )
            )
            self.directory.emit(
                ctx.agent_id,
                ToolCalled(execution_id, call.id, call.name, call.arguments_json, call_id),
            )

    def handoff_invalid(self, ctx: SessionContext, payload: Any) -> bool:
        """A handoff call was mixed with other calls, or several handoffs were asked."""
        return ctx.handoff_error is not None

    def handoff_requested(self, ctx: SessionContext, payload: Any) -> bool:
        """The answer is exactly one call of a configured handoff tool."""
        return ctx.handoff is not None

    def tool_calls_pending(self, ctx: SessionContext, payload: Any) -> bool:
        """The answer asks for tools."""
        return bool(ctx.tools)

    # ------------------------------------------------------------------ tools

    def authorize_tools(self, ctx: SessionContext, payload: Any) -> Any:
        """Offload (pure): validate each pending call's arguments against its tool's
        JSON schema here, then ask the approval policy (or the tool's
        ``requires_approval``) off the loop.

        A policy answer that is not a decision becomes the call's error, which the LLM
        sees; a policy that raises — anything — fails the work with
        :class:`~phronomy_fsm.errors.ApprovalPolicyError`, and the execution ends
        ``failed`` (``tools_authorization_failed``; ``docs/agent.md``, "Approval")."""
        config = self.directory.config(ctx.agent_id)
        decisions: list[ToolDecision] = []
        views: list[tuple[ToolCallView, str]] = []
        for call in ctx.tools:
            if call.status is not ToolCallStatus.PENDING:
                continue
            tool = config.tools.get(call.tool_name)
            if tool is None:
                known = ", ".join(sorted(config.tools)) or "none"
                decisions.append(
                    ToolDecision(
                        call.tool_invocation_id,
                        None,
                        error=f"unknown tool {call.tool_name!r}; available tools: {known}",
                    )
                )
                continue
            arguments, error = tool.validate(call.arguments_json)
            if error is not None:
                decisions.append(ToolDecision(call.tool_invocation_id, None, error=error))
                continue
            view = ToolCallView(
                tool_name=tool.name,
                arguments=arguments,
                tool_call_id=call.tool_call_id,
                tool_invocation_id=call.tool_invocation_id,
                execution_id=ctx.execution_id,
                requires_approval=tool.requires_approval,
            )
            reason = (
                "the tool requires approval"
                if tool.requires_approval
                else "the approval policy requires it"
            )
            views.append((view, reason))
        policy = config.approval_policy

        def decide(view: ToolCallView, reason: str) -> ToolDecision:
            if policy is None:
                verdict = (
                    Authorization.REQUIRE_APPROVAL
                    if view.requires_approval
                    else Authorization.ALLOW
                )
            else:
                try:
                    answer = policy(view)
                except BaseException as exc:  # Cancelled, SystemExit too: see below
                    # The policy is the application's code, not this execution's cancel
                    # (that never raises into a policy): whatever it raises ends the
                    # execution failed, saying so, instead of escaping the offload as a
                    # bare Cancelled that fails it with no error text.
                    raise ApprovalPolicyError(
                        f"the approval policy raised deciding the call to tool "
                        f"{view.tool_name!r} ({view.tool_invocation_id}): {_error_text(exc)}",
                        execution_id=view.execution_id,
                        tool_name=view.tool_name,
                        tool_invocation_id=view.tool_invocation_id,
                    ) from exc
                try:
                    verdict = normalize_authorization(answer)
                except ConfigurationError as exc:  # not a decision: the call fails, the LLM is told
                    return ToolDecision(
                        view.tool_invocation_id, None, error=f"the approval policy failed: {exc}"
                    )
            return ToolDecision(view.tool_invocation_id, verdict, view.arguments, reason=reason)

        if policy is None:  # decided here: no round trip to the pool
            return Settled(tuple(decisions) + tuple(decide(v, r) for v, r in views))

        def work() -> tuple[ToolDecision, ...]:
            return tuple(decisions) + tuple(decide(v, r) for v, r in views)

        return work

    def record_authorization(self, ctx: SessionContext, payload: tuple[ToolDecision, ...]) -> None:
        """Apply each call's decision: invalid (its error is its result), authorized,
        awaiting approval, or rejected by the policy."""
        for decision in payload:
            call = ctx.tool(decision.tool_invocation_id)
            if call is None:
                continue
            if decision.authorization is None:
                call.status = ToolCallStatus.INVALID
                call.error = decision.error
                continue
            call.arguments = decision.arguments
            if decision.authorization is Authorization.ALLOW:
                call.status = ToolCallStatus.AUTHORIZED
            elif decision.authorization is Authorization.REQUIRE_APPROVAL:
                call.status = ToolCallStatus.AWAITING_APPROVAL
                call.reason = decision.reason
            else:
                call.status = ToolCallStatus.REJECTED
                call.rejected_by = "policy"

    def tools_rejected(self, ctx: SessionContext, payload: Any) -> bool:
        """A call was denied by the policy, or a person rejected the whole request."""
        return any(
            c.status is ToolCallStatus.REJECTED and c.rejected_by in ("policy", "person")
            for c in ctx.tools
        )

    def approval_needed(self, ctx: SessionContext, payload: Any) -> bool:
        """Some call waits for a person's decision."""
        return any(c.status is ToolCallStatus.AWAITING_APPROVAL for c in ctx.tools)

    def tools_to_run(self, ctx: SessionContext, payload: Any) -> bool:
        """Some call is authorized to run."""
        return any(c.status is ToolCallStatus.AUTHORIZED for c in ctx.tools)

    def request_approval(self, ctx: SessionContext, payload: Any) -> None:
        """Open the approval request for the calls awaiting a person (the same
        request when it is already open for them). The ``approval_required`` event
        follows once the wait is committed."""
        items = [
            c.tool_invocation_id for c in ctx.tools if c.status is ToolCallStatus.AWAITING_APPROVAL
        ]
        current = ctx.approval
        if current is not None and not current.decided and current.items == items:
            return
        ctx.approval = ApprovalRequestState(new_id(), items)
        ctx.audit.append(
            {
                "kind": "approval_required",
                "data": {"approval_request_id": ctx.approval.request_id, "items": items},
                "at": len(ctx.messages),  # where the transcript places it
            }
        )

    def apply_decision(self, ctx: SessionContext, payload: Any) -> None:
        """A person's decision (the ``approval_decided`` signal: ``{"request_id",
        "approved", "decisions"}``, checked by whoever sent it): each awaiting call is
        authorized or rejected — all of them by ``approved``, or one by one by
        ``decisions``. A decision for another request changes nothing (the request
        is asked again)."""
        data = payload if isinstance(payload, dict) else {}
        request = ctx.approval
        if request is None or data.get("request_id") != request.request_id:
            log.warning(
                "execution %s: approval decision for request %r ignored (pending: %r)",
                ctx.execution_id,
                data.get("request_id"),
                None if request is None else request.request_id,
            )
            return
        raw = data.get("decisions")
        decisions: dict[str, Any] = raw if isinstance(raw, dict) else {}
        whole = not isinstance(raw, dict)
        approved = bool(data.get("approved"))
        for call in ctx.tools:
            if call.status is not ToolCallStatus.AWAITING_APPROVAL:
                continue
            ok = approved if whole else bool(decisions.get(call.tool_invocation_id, False))
            if ok:
                call.status = ToolCallStatus.AUTHORIZED
            else:
                call.status = ToolCallStatus.REJECTED
                call.rejected_by = "person" if whole else "person_item"
        request.decided = True
        request.decisions = (
            {i: approved for i in request.items}
            if whole
            else {i: bool(decisions.get(i, False)) for i in request.items}
        )
        ctx.audit.append(
            {
                "kind": "approval_decided",
                "data": {
                    "approval_request_id": request.request_id,
                    "approved": approved if whole else None,
                    "decisions": request.decisions,
                    "by": data.get("by"),
                },
                "at": len(ctx.messages),  # where the transcript places it
            }
        )

    def tool_dispatch(self, ctx: SessionContext, payload: Any) -> BarrierRecords | None:
        """Barrier ``tool_dispatch``: each authorized call becomes a ``tool_call``
        child execution (id: its tool invocation id), committed with this barrier
        before any of them runs; each tells this execution ``tool_finished``."""
        children = []
        execution_id = ctx.execution_id
        for call in ctx.tools:
            if call.status is not ToolCallStatus.AUTHORIZED:
                continue
            call.status = ToolCallStatus.RUNNING
            children.append(
                ChildStart(
                    tool_call.MACHINE,
                    ToolCallContext(
                        agent_id=ctx.agent_id,
                        parent_execution_id=execution_id,
                        tool_invocation_id=call.tool_invocation_id,
                        tool_call_id=call.tool_call_id,
                        tool_name=call.tool_name,
                        arguments=call.arguments,
                        llm_call_id=call.llm_call_id,
                    ),
                    execution_id=call.tool_invocation_id,
                    notify_event=agent_session.Event.TOOL_FINISHED.value,
                    labels={"agent_id": ctx.agent_id, "tool": call.tool_name},
                )
            )
        return BarrierRecords(children=tuple(children))

    def last_tool(self, ctx: SessionContext, payload: dict[str, Any]) -> bool:
        """The finished call is the last one still running."""
        done = payload.get("child_execution_id")
        return not any(
            c.status is ToolCallStatus.RUNNING and c.tool_invocation_id != done for c in ctx.tools
        )

    def record_tool_result(self, ctx: SessionContext, payload: dict[str, Any]) -> None:
        """A ``tool_call`` child finished: its result or error becomes the call's."""
        call = ctx.tool(str(payload.get("child_execution_id")))
        if call is None:
            return
        raw = payload.get("context")
        child: dict[str, Any] = raw if isinstance(raw, dict) else {}
        status = payload.get("status")
        if status == ExecutionStatus.COMPLETED:
            call.status = ToolCallStatus.COMPLETED
            call.result = child.get("result")
            call.content = child.get("content")
            call.original_bytes = child.get("original_bytes")
        else:
            call.status = ToolCallStatus.FAILED
            call.error = child.get("error") or f"the tool call ended {status}"
            call.original_bytes = child.get("original_bytes")

    def record_tool_messages(self, ctx: SessionContext, payload: Any) -> None:
        """Entry of ``recording_tool_results``: one tool message per call joins the
        conversation; :class:`ToolResulted` events."""
        execution_id = ctx.execution_id
        for call in ctx.tools:
            text = tool_message_text(call)
            ctx.messages.append(
                Message("tool", text, tool_call_id=call.tool_call_id, name=call.tool_name).to_json()
            )
            status = "failed" if call.status is ToolCallStatus.INVALID else call.status.value
            entry: dict[str, Any] = {
                "tool_invocation_id": call.tool_invocation_id,
                "tool_call_id": call.tool_call_id,
                "tool_name": call.tool_name,
                "status": status,
                "result": call.result,
                "error": call.error,
            }
            if call.original_bytes is not None:
                entry["original_bytes"] = call.original_bytes
            ctx.tool_log.append(entry)
            self.directory.emit(
                ctx.agent_id,
                ToolResulted(
                    execution_id,
                    call.tool_call_id,
                    call.tool_name,
                    call.tool_invocation_id,
                    status,
                    text,
                ),
            )

    def iteration_limit_reached(self, ctx: SessionContext, payload: Any) -> bool:
        """The agent's ``max_iterations`` LLM calls were made."""
        return ctx.llm_calls >= self.directory.config(ctx.agent_id).max_iterations

    # ------------------------------------------------------------------ output

    def filter_output(self, ctx: SessionContext, payload: Any) -> Any:
        """Offload (pure): run the output filters on the final answer."""
        filters = self.directory.config(ctx.agent_id).output_filters
        text = ctx.answer
        if not filters:
            return Settled(OutputFilterResult(text))

        def work() -> OutputFilterResult:
            current = text
            for flt in filters:
                try:
                    current = flt(current or "")
                except ContentBlockedError as exc:
                    return OutputFilterResult(text, str(exc) or "blocked")
            return OutputFilterResult(current)

        return work

    def output_blocked(self, ctx: SessionContext, payload: OutputFilterResult) -> bool:
        """An output filter blocked the answer."""
        return payload.blocked_reason is not None

    # ------------------------------------------------------------------ endings

    def mark_completed(self, ctx: SessionContext, payload: OutputFilterResult) -> None:
        """End ``completed`` with the filtered answer."""
        ctx.output = payload.text
        ctx.outcome = Outcome.COMPLETED

    def mark_rejected(self, ctx: SessionContext, payload: Any) -> None:
        """End ``rejected``: a tool call was rejected (an answer, not an error)."""
        ctx.outcome = Outcome.REJECTED

    def mark_handed_off(self, ctx: SessionContext, payload: Any) -> None:
        """End ``handed_off`` (the target starts once this is committed)."""
        ctx.outcome = Outcome.HANDED_OFF

    def mark_blocked(self, ctx: SessionContext, payload: Any) -> None:
        """End ``blocked`` by a filter."""
        reason = getattr(payload, "blocked_reason", None) or "blocked by a filter"
        ctx.outcome = Outcome.BLOCKED
        ctx.blocked_reason = reason
        ctx.error_type, ctx.error = "ContentBlockedError", reason

    def mark_failed(self, ctx: SessionContext, payload: Any) -> None:
        """End ``failed``, keeping the first error seen (the exception of the failed
        step, or why the execution cannot go on)."""
        ctx.outcome = Outcome.FAILED
        if isinstance(payload, BaseException):
            self.directory.note_error(ctx.execution_id, payload)
            if ctx.error is None:
                ctx.error_type, ctx.error = type(payload).__name__, str(payload)
            return
        if ctx.error is None:
            if ctx.llm_calls >= self.directory.config(ctx.agent_id).max_iterations:
                ctx.error_type, ctx.error = "ExecutionFailedError", "max_iterations reached"
            else:
                ctx.error_type, ctx.error = "ExecutionFailedError", "execution failed"

    # ------------------------------------------------------------------ policies

    def effect_policy(self, ctx: SessionContext, effect: str, declared: EffectKind) -> EffectKind:
        """The ``Machine.effect_policy`` of ``agent_session``: the LLM call follows
        the agent's ``llm_resend``; an agent this process has not loaded keeps the
        declared kind."""
        if effect != "call_llm":
            return declared
        config = self.directory.find(ctx.agent_id)
        return declared if config is None else config.llm_effect()


def usage_of(ctx: SessionContext) -> Usage:
    """The token counts of ``ctx`` so far."""
    return Usage(ctx.usage.get("prompt_tokens", 0), ctx.usage.get("completion_tokens", 0))


__all__ = [
    "AgentSessionHooks",
    "InputFilterResult",
    "OutputFilterResult",
    "ToolDecision",
    "tool_message_text",
    "usage_of",
]
