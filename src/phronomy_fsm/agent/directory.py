"""The live state of the agents a process has loaded: one owner, on the loop thread.

:class:`AgentDirectory` maps agent ids to :class:`LiveAgent` (configuration and
conversation history) and execution ids to their waiting callers (the tasks of
``invoke``/``approve``/``resolve`` and the sinks of ``stream``). The agent machines'
hooks ask it for an agent's configuration and history and give it the events they
produce; it is also a listener of the durable runtime's events
(:meth:`AgentDirectory.observe`), from which it tells callers and listeners how an
execution ended, announces approval requests once they are durable, and keeps each
agent's history current.

Threads: agents are added and removed under a lock from any thread; everything else —
history, callers, events — happens on the dispatcher's loop thread. Work that writes
to the store on behalf of the loop (starting a handoff's target, failing an execution
whose listener raised) goes to :class:`DirectoryActions`, which the agent runtime
implements off the loop.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import attrs

from phronomy_fsm.agent.config import AgentConfig, ListenerErrorPolicy
from phronomy_fsm.agent.context import Outcome
from phronomy_fsm.agent.events import (
    AgentEvent,
    AgentResult,
    AgentStatus,
    ApprovalItem,
    ApprovalRequired,
    BudgetExhausted,
    Cancelled,
    Done,
    Failed,
    HandedOff,
    RecoveryRequired,
    TimedOut,
)
from phronomy_fsm.agent.typed import describe
from phronomy_fsm.agent.types import Message, Usage
from phronomy_fsm.durable.codec import json_data
from phronomy_fsm.durable.records import ExecutionRecord, ExecutionStatus
from phronomy_fsm.durable.types import DurableEvent, DurableEventKind
from phronomy_fsm.errors import (
    HOOK_ERRORS,
    AgentNotLoadedError,
    BudgetExhaustedError,
    ContentBlockedError,
    EffectNotPerformedError,
    ExecutionDetachedError,
    ExecutionFailedError,
    ExecutionTimeoutError,
    OutputValidationError,
    StreamCallbackError,
)
from phronomy_fsm.errors import Cancelled as CancelledError
from phronomy_fsm.generated import agent_session, tool_call
from phronomy_fsm.runtime.tasks import Task

log = logging.getLogger("phronomy_fsm.agent")

SESSION = agent_session.MACHINE
TOOL_CALL = tool_call.MACHINE

Sink = Callable[[AgentEvent | None], None]


class DirectoryActions(Protocol):
    """Store work the directory asks for from the loop thread; implemented off the
    loop by :class:`~phronomy_fsm.agent.runtime.AgentRuntime`."""

    def start_handoff(self, source_execution_id: str, handoff: dict[str, Any]) -> None:
        """Start a handoff's target execution (under its derived id)."""
        ...

    def fail_execution(self, execution_id: str, reason: str) -> None:
        """End an execution ``failed`` with StreamCallbackError."""
        ...

    def agent_idle(self, agent_id: str) -> None:
        """``agent_id``'s execution finished: start a handoff waiting for it, if any."""
        ...


@attrs.define
class Caller:
    """Someone waiting for an execution: ``task`` settles with its
    :class:`AgentResult` or error; ``sink`` (``stream``) receives its events, then
    ``None``."""

    task: Task[AgentResult]
    sink: Sink | None = None


class LiveAgent:
    """One loaded agent: its configuration and its conversation history (loop thread
    after it was added)."""

    __slots__ = ("config", "history")

    def __init__(self, config: AgentConfig, history: list[Message]) -> None:
        self.config = config
        self.history = history


class AgentDirectory:
    """The loaded agents and the callers of their executions (module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._agents: dict[str, LiveAgent] = {}
        self._callers: dict[str, list[Caller]] = {}
        self._errors: dict[str, BaseException] = {}
        self.actions: DirectoryActions | None = None

    # ------------------------------------------------------------------ agents

    def add(self, config: AgentConfig, history: list[Message]) -> LiveAgent:
        """Make ``config.agent_id`` live with its ``history``; returns it. Raises
        KeyError when it is live already (any thread)."""
        with self._lock:
            if config.agent_id in self._agents:
                raise KeyError(config.agent_id)
            live = self._agents[config.agent_id] = LiveAgent(config, history)
            return live

    def remove(self, agent_id: str) -> None:
        """Forget ``agent_id`` (any thread). Its executions live on in the store."""
        with self._lock:
            self._agents.pop(agent_id, None)

    def live(self, agent_id: str) -> LiveAgent | None:
        """The live agent, or None."""
        return self._agents.get(agent_id)

    def find(self, agent_id: str) -> AgentConfig | None:
        """The configuration of a loaded agent, or None."""
        live = self._agents.get(agent_id)
        return None if live is None else live.config

    def config(self, agent_id: str) -> AgentConfig:
        """The configuration of a loaded agent.

        Raises:
            AgentNotLoadedError: this process has not created or loaded ``agent_id``
                (an execution of it can run only where it is loaded).
        """
        live = self._agents.get(agent_id)
        if live is None:
            raise AgentNotLoadedError(
                f"agent {agent_id!r} is not loaded in this process; load it "
                "(Agent.load) where its executions should run",
                agent_id=agent_id,
            )
        return live.config

    def base_messages(self, agent_id: str) -> list[Message]:
        """What every LLM call of ``agent_id`` starts with: its system prompt and its
        history (a new list)."""
        live = self._agents.get(agent_id)
        if live is None:
            raise AgentNotLoadedError(f"agent {agent_id!r} is not loaded", agent_id=agent_id)
        return live.config.head() + list(live.history)

    # ------------------------------------------------------------------ callers

    def add_caller(self, execution_id: str, caller: Caller) -> None:
        """Make ``caller`` wait for ``execution_id`` (loop thread)."""
        self._callers.setdefault(execution_id, []).append(caller)

    def drop_callers(self, execution_id: str, error: BaseException) -> None:
        """Fail everyone waiting for ``execution_id`` with ``error`` (loop thread)."""
        for caller in self._callers.pop(execution_id, ()):
            caller.task.fail(error)
            if caller.sink is not None:
                caller.sink(None)

    def drop_caller(self, execution_id: str, task: Task[AgentResult], error: BaseException) -> None:
        """Fail one caller's ``task`` of ``execution_id`` with ``error`` and stop it
        waiting (its request was refused). Loop thread."""
        callers = self._callers.get(execution_id, [])
        for caller in list(callers):
            if caller.task is task:
                callers.remove(caller)
                task.fail(error)
        if not callers:
            self._callers.pop(execution_id, None)

    def waited_for(self) -> list[str]:
        """The executions someone waits for (loop thread)."""
        return list(self._callers)

    def detach_all(self, why: str, hints: Mapping[str, str | None] | None = None) -> None:
        """Fail every caller with ExecutionDetachedError (the runtime closes; the
        executions live on in the store). ``hints``: by execution, how to continue one
        that waits for someone (:func:`~phronomy_fsm.agent.approvals.how_to_continue`:
        the exact ``phronomy-fsm resolve``/``approve`` command the error promises,
        ``docs/agent.md``, "Closing"). Loop thread."""
        for execution_id in list(self._callers):
            hint = (hints or {}).get(execution_id)
            self.drop_callers(
                execution_id,
                ExecutionDetachedError(
                    f"{why} before execution {execution_id} finished; it lives on in the "
                    + (
                        f"store and {hint}"
                        if hint
                        else "store: load its agent again (Agent.load) to continue it, or "
                        "use `phronomy-fsm executions show` to see where it stands"
                    ),
                    execution_id=execution_id,
                ),
            )

    def note_error(self, execution_id: str, error: BaseException) -> None:
        """Keep the exception an execution fails with, for its callers in this
        process (loop thread)."""
        self._errors.setdefault(execution_id, error)

    # ------------------------------------------------------------------ events

    def emit(self, agent_id: str, event: AgentEvent) -> BaseException | None:
        """Deliver ``event`` to the stream sinks of its execution and to the agent's
        listener; returns what the listener raised. A raising listener is logged; under
        ``listener_error_policy="fail_task"`` a non-terminal event's failure ends the
        execution ``failed`` (StreamCallbackError). Loop thread."""
        for caller in self._callers.get(event.execution_id, ()):
            if caller.sink is not None:
                caller.sink(event)
        live = self._agents.get(agent_id)
        listener = None if live is None else live.config.on_event
        if listener is None:
            return None
        try:
            listener(event)
        except HOOK_ERRORS as exc:
            log.exception("agent %s: the event listener raised on %s", agent_id, event.type.value)
            assert live is not None
            if (
                live.config.listener_error_policy is ListenerErrorPolicy.FAIL_TASK
                and not event.terminal
                and self.actions is not None
            ):
                self.actions.fail_execution(
                    event.execution_id,
                    f"the event listener raised on {event.type.value!r}: {exc!r}",
                )
            return exc
        return None

    def observe(self, event: DurableEvent) -> None:
        """The durable runtime's listener (loop thread): a finished agent execution is
        delivered; a committed wait for approval is announced; an execution parked
        for an operator is announced; one this process lost settles its callers."""
        kind = event.kind
        if kind is DurableEventKind.FINISHED and event.machine == SESSION:
            assert event.record is not None
            self._finished(event.record)
        elif kind is DurableEventKind.WAITING and event.machine == SESSION:
            assert event.record is not None
            self._waiting(event.record)
        elif kind is DurableEventKind.RECOVERY_REQUIRED and event.record is not None:
            self._parked(event.record)
        elif kind is DurableEventKind.RELEASED:
            self._errors.pop(event.execution_id, None)
            self.drop_callers(
                event.execution_id,
                ExecutionDetachedError(
                    f"execution {event.execution_id} left this process: "
                    f"{event.detail.get('reason', 'released')}",
                    execution_id=event.execution_id,
                ),
            )

    def announce(self, record: ExecutionRecord) -> None:
        """Announce a resumed execution that waits for someone: an approval request
        (:class:`ApprovalRequired`) or an operator (:class:`RecoveryRequired`), as
        when it first came to wait. Loop thread."""
        if record.status is ExecutionStatus.WAITING and record.machine == SESSION:
            self._waiting(record)
        elif record.status is ExecutionStatus.RECOVERY_REQUIRED:
            self._parked(record)

    def _waiting(self, record: ExecutionRecord) -> None:
        ctx = json_data(record.context)
        state = agent_session.TABLE.migrated_state(
            record.spec_version, record.spec_sha256, record.state
        )
        if not isinstance(ctx, dict):
            return
        if state == agent_session.State.BUDGET_EXHAUSTED:
            request = ctx.get("budget_request") or {}
            self.emit(
                str(ctx.get("agent_id")),
                BudgetExhausted(
                    record.execution_id,
                    str(request.get("request_id") or ""),
                    str(request.get("limit") or ""),
                    request.get("spent") or 0,
                    request.get("allowed") or 0,
                    str(request.get("call") or ""),
                ),
            )
            return
        if state != agent_session.State.SUSPENDED:
            return
        approval = ctx.get("approval") or {}
        tools = {t["tool_invocation_id"]: t for t in ctx.get("tools", [])}
        hashes = approval.get("arguments_sha256") or {}
        items = tuple(
            ApprovalItem(
                item,
                tools.get(item, {}).get("tool_call_id", ""),
                tools.get(item, {}).get("tool_name", ""),
                tools.get(item, {}).get("arguments"),
                tools.get(item, {}).get("reason") or "",
                str(hashes.get(item) or ""),
            )
            for item in approval.get("items", ())
        )
        self.emit(
            str(ctx.get("agent_id")),
            ApprovalRequired(record.execution_id, str(approval.get("request_id", "")), items),
        )

    def _parked(self, record: ExecutionRecord) -> None:
        info = record.recovery
        ctx = json_data(record.context)
        if info is None or not isinstance(ctx, dict) or "agent_id" not in ctx:
            return
        subject = recovery_subject(record)
        self.emit(
            str(ctx["agent_id"]),
            RecoveryRequired(
                record.execution_id,
                revision=record.revision,
                reason=info.reason,
                subject=subject,
                allowed_outcomes=tuple(str(getattr(o, "value", o)) for o in info.allowed_outcomes),
                parent_execution_id=record.parent_execution_id,
            ),
        )

    def settle_callers(self, record: ExecutionRecord) -> None:
        """Settle the callers of a finished ``agent_session`` execution read from the
        store (it finished before they asked; nothing else is told). Loop thread."""
        ctx = json_data(record.context)
        data = ctx if isinstance(ctx, dict) else {}
        result, error, _event = finished_outcome(record, data, None)
        result, error = self._parse_output(result, error, data)
        self._settle(record.execution_id, result, error)

    def _parse_output(
        self, result: AgentResult | None, error: BaseException | None, ctx: dict[str, Any]
    ) -> tuple[AgentResult | None, BaseException | None]:
        """``result`` with ``parsed``: the stored parsed answer converted to the
        agent's ``output_type`` (it was checked on a worker before the execution
        completed; should the type have changed since, the caller gets
        OutputValidationError instead)."""
        if result is None or result.status is not AgentStatus.COMPLETED:
            return result, error
        config = self.find(result.agent_id)
        if config is None or config.output is None:
            return result, error
        try:
            value = config.output.convert(ctx.get("parsed_output"))
        except Exception as exc:  # noqa: BLE001 - whatever the converter raises
            return None, OutputValidationError(
                f"execution {result.execution_id}'s answer does not convert to the "
                f"output_type of agent {result.agent_id!r} any more: {describe(exc)}",
                execution_id=result.execution_id,
                attempts=0,
                reason=describe(exc),
            )
        return attrs.evolve(result, parsed=value), error

    def _settle(
        self, execution_id: str, result: AgentResult | None, error: BaseException | None
    ) -> None:
        for caller in self._callers.pop(execution_id, ()):
            if result is not None:
                caller.task.complete(result)
            else:
                assert error is not None
                caller.task.fail(error)
            if caller.sink is not None:
                caller.sink(None)

    def _finished(self, record: ExecutionRecord) -> None:
        ctx = json_data(record.context)
        if not isinstance(ctx, dict):
            ctx = {}
        agent_id = str(ctx.get("agent_id", record.labels.get("agent_id", "")))
        execution_id = record.execution_id
        live_error = self._errors.pop(execution_id, None)
        result, error, terminal = finished_outcome(record, ctx, live_error)
        result, error = self._parse_output(result, error, ctx)
        listener_error = self.emit(agent_id, terminal)
        live = self._agents.get(agent_id)
        if (
            listener_error is not None
            and result is not None
            and live is not None
            and live.config.listener_error_policy is ListenerErrorPolicy.FAIL_TASK
        ):
            error = StreamCallbackError(
                f"the event listener raised on {terminal.type.value!r}: {listener_error!r}",
                execution_id=execution_id,
            )
            result = None
        if live is not None and result is not None and result.status in _IN_HISTORY:
            messages = ctx.get("messages", [])
            if result.status is AgentStatus.HANDED_OFF:
                messages = messages[:-1]  # the handoff call has no tool result
            live.history.extend(Message.from_json(m) for m in messages)
        self._settle(execution_id, result, error)
        if self.actions is not None:
            if result is not None and result.handoff is not None:
                self.actions.start_handoff(execution_id, result.handoff)
            self.actions.agent_idle(agent_id)


_IN_HISTORY = frozenset({AgentStatus.COMPLETED, AgentStatus.HANDED_OFF})


def recovery_subject(record: ExecutionRecord) -> dict[str, Any]:
    """What an operator must answer for an agent execution in ``recovery_required``,
    in the agent's terms: ``{"type": "llm_call", "llm_call_id", "effect_key"}`` for an
    LLM call, ``{"type": "tool_invocation", "tool_invocation_id", "tool_name",
    "arguments", "effect_key"}`` for a tool call (a ``tool_call`` child execution), or
    ``{"type": "execution"}`` when the execution as a whole cannot go on."""
    info = record.recovery
    ctx = json_data(record.context)
    ctx = ctx if isinstance(ctx, dict) else {}
    subject = None if info is None else info.subject
    if subject is None:
        return {"type": "execution"}
    if subject.effect == "call_llm":
        return {
            "type": "llm_call",
            "llm_call_id": ctx.get("pending_llm_call_id"),
            "effect_key": subject.key,
            "attempt": subject.attempt,
        }
    if subject.effect == "execute_tool":
        return {
            "type": "tool_invocation",
            "tool_invocation_id": ctx.get("tool_invocation_id", record.execution_id),
            "tool_name": ctx.get("tool_name"),
            "arguments": ctx.get("arguments"),
            "effect_key": subject.key,
            "attempt": subject.attempt,
        }
    return {"type": "effect", "effect": subject.effect, "effect_key": subject.key}


def finished_outcome(
    record: ExecutionRecord, ctx: dict[str, Any], live_error: BaseException | None
) -> tuple[AgentResult | None, BaseException | None, AgentEvent]:
    """How a finished ``agent_session`` execution ends for its caller: an
    :class:`AgentResult` (completed, rejected, handed off) or the error to raise
    (failed, blocked, cancelled, timed out), and its terminal event
    (``docs/agent.md``, "Outcomes")."""
    execution_id = record.execution_id
    outcome = ctx.get("outcome")
    usage_data = ctx.get("usage") or {}
    usage = Usage(
        int(usage_data.get("prompt_tokens", 0)), int(usage_data.get("completion_tokens", 0))
    )
    status = record.status
    if status is ExecutionStatus.COMPLETED and outcome in _SUCCESS:
        agent_status = _SUCCESS[outcome]
        handoff = ctx.get("handoff") if agent_status is AgentStatus.HANDED_OFF else None
        output = ctx.get("output") if agent_status is AgentStatus.COMPLETED else None
        result = AgentResult(
            agent_id=str(ctx.get("agent_id", "")),
            execution_id=execution_id,
            status=agent_status,
            output=output,
            revision=record.revision,
            usage=usage,
            handoff=handoff,
            finish_reason=ctx.get("finish_reason"),
        )
        event: AgentEvent = (
            HandedOff(execution_id, handoff or {}, record.revision)
            if handoff is not None
            else Done(execution_id, agent_status, output, record.revision)
        )
        return result, None, event
    info = record.error
    if status is ExecutionStatus.CANCELLED:
        reason = info.message if info is not None else "cancelled"
        return None, CancelledError(reason), Cancelled(execution_id, f"Cancelled: {reason}")
    error_type = info.type if info is not None else ctx.get("error_type")
    message = info.message if info is not None else ctx.get("error")
    if error_type == "DeadlineExceededError":
        error: BaseException = ExecutionTimeoutError(str(message), execution_id=execution_id)
        return (
            None,
            error,
            TimedOut(execution_id, AgentStatus.FAILED, f"ExecutionTimeoutError: {message}"),
        )
    if error_type == "StreamCallbackError":
        error = StreamCallbackError(str(message), execution_id=execution_id)
        return (
            None,
            error,
            Failed(execution_id, AgentStatus.FAILED, f"StreamCallbackError: {message}"),
        )
    if outcome == Outcome.BLOCKED.value:
        reason = str(ctx.get("blocked_reason") or message or "blocked")
        error = ContentBlockedError(reason, execution_id=execution_id, reason=reason)
        return (
            None,
            error,
            Failed(execution_id, AgentStatus.BLOCKED, f"ContentBlockedError: {reason}"),
        )
    if info is None and ctx.get("error") is not None:
        error_type, message = ctx.get("error_type"), ctx.get("error")
    if error_type == "OutputValidationError" and live_error is None:
        live_error = OutputValidationError(
            str(message),
            execution_id=execution_id,
            attempts=int(ctx.get("output_retries") or 0) + 1,
            reason=str(message),
        )
    if error_type == "EffectNotPerformedError" and live_error is None:
        # an operator's not_performed answer: the same error a live wait gets, also
        # when the wait reads the end from the store (it ended before the wait began)
        live_error = EffectNotPerformedError(str(message), execution_id=execution_id)
    if error_type == "BudgetExhaustedError":
        refused = ctx.get("budget_request") or {}
        error = BudgetExhaustedError(
            str(message),
            execution_id=execution_id,
            limit=refused.get("limit"),
            spent=refused.get("spent"),
            allowed=refused.get("allowed"),
        )
        return None, error, Failed(execution_id, AgentStatus.FAILED, f"{error_type}: {message}")
    error = live_error or ExecutionFailedError(
        f"{error_type or 'Error'}: {message or 'the execution failed'}",
        execution_id=execution_id,
        status="failed",
        error_type=error_type,
    )
    return None, error, Failed(execution_id, AgentStatus.FAILED, f"{error_type}: {message}")


_SUCCESS = {
    Outcome.COMPLETED.value: AgentStatus.COMPLETED,
    Outcome.REJECTED.value: AgentStatus.REJECTED,
    Outcome.HANDED_OFF.value: AgentStatus.HANDED_OFF,
}


__all__ = [
    "AgentDirectory",
    "Caller",
    "DirectoryActions",
    "LiveAgent",
    "finished_outcome",
    "recovery_subject",
]
