"""Typed events an agent delivers to its listener, and how an execution ended.

Every event is a frozen attrs class with ``execution_id`` and a ``type`` (an
:class:`EventType`, a ``str`` enum, so ``event.type == "done"`` still reads naturally):

- :class:`Token` — a streamed token of the current LLM call;
- :class:`ToolCalled` — the LLM asked for a tool call;
- :class:`ToolResulted` — a tool call's result (or error) joined the conversation;
- :class:`ApprovalRequired` — the execution waits, durably, for a person's decision;
- :class:`BudgetExhausted` — the execution waits, durably, for a person to extend its
  budget (``docs/agent.md``, "Budgets");
- :class:`RecoveryRequired` — an effect may or may not have happened; an operator must
  answer (``phronomy-fsm resolve``);
- terminal: :class:`Done`, :class:`HandedOff`, :class:`Failed` (``kind``: ``error``,
  ``timeout``, ``blocked``), :class:`Cancelled`.

Listeners are called on the runtime's loop thread; an exception from one is handled by
the agent's ``listener_error_policy`` (``docs/agent.md``, "Events").
"""

from __future__ import annotations

import enum
from typing import Any, ClassVar

import attrs

from phronomy_fsm.agent.types import Usage


class EventType(enum.StrEnum):
    """The type of an :class:`AgentEvent` (its class says the same)."""

    TOKEN = "token"
    TOOL_CALL = "tool_call"
    TOOL_RESULT = "tool_result"
    APPROVAL_REQUIRED = "approval_required"
    BUDGET_EXHAUSTED = "budget_exhausted"
    RECOVERY_REQUIRED = "recovery_resolution_required"
    DONE = "done"
    HANDOFF = "handoff"
    ERROR = "error"
    TIMEOUT = "timeout"
    CANCELLED = "cancelled"


class AgentStatus(enum.StrEnum):
    """How an agent execution ended, as its caller sees it: ``completed``,
    ``rejected`` (a tool call was rejected; an answer, not an error) and
    ``handed_off`` return an :class:`AgentResult`; ``failed``, ``blocked`` and
    ``cancelled`` raise."""

    COMPLETED = "completed"
    REJECTED = "rejected"
    HANDED_OFF = "handed_off"
    FAILED = "failed"
    BLOCKED = "blocked"
    CANCELLED = "cancelled"


@attrs.frozen
class AgentEvent:
    """Base of every event: the execution it is about."""

    execution_id: str
    type: ClassVar[EventType]

    @property
    def terminal(self) -> bool:
        """True for the last event of an execution (done, handoff, error, timeout,
        cancelled)."""
        return self.type in _TERMINAL

    def to_dict(self) -> dict[str, Any]:
        """JSON form: the fields and ``type``."""
        data = attrs.asdict(self, recurse=True)
        data["type"] = self.type.value
        return data


@attrs.frozen
class Token(AgentEvent):
    """A streamed token of LLM call ``llm_call_id``."""

    type: ClassVar[EventType] = EventType.TOKEN
    content: str = ""
    llm_call_id: str = ""


@attrs.frozen
class ToolCalled(AgentEvent):
    """The LLM asked for tool ``name`` with ``arguments`` (as the LLM wrote them)."""

    type: ClassVar[EventType] = EventType.TOOL_CALL
    tool_call_id: str = ""
    name: str = ""
    arguments: str = ""
    llm_call_id: str = ""


@attrs.frozen
class ToolResulted(AgentEvent):
    """A tool call settled: ``status`` is ``completed``, ``failed``, ``invalid`` or
    ``rejected``; ``content`` is the text the LLM sees."""

    type: ClassVar[EventType] = EventType.TOOL_RESULT
    tool_call_id: str = ""
    tool_name: str = ""
    tool_invocation_id: str = ""
    status: str = ""
    content: str = ""


@attrs.frozen
class ApprovalItem:
    """One tool call waiting for a person: its id, the tool, the parsed arguments,
    why it needs approval and ``arguments_sha256``, the sha256 of the arguments'
    canonical JSON that an approval binds the call to (``docs/agent.md``,
    "Approval")."""

    tool_invocation_id: str
    tool_call_id: str
    tool_name: str
    arguments: Any
    reason: str = ""
    arguments_sha256: str = ""


@attrs.frozen
class ApprovalRequired(AgentEvent):
    """The execution is durably waiting for a decision on ``items`` (answer with
    ``Agent.approve(execution_id, approval_request_id=request_id, ...)`` or
    ``phronomy-fsm approve`` from any process)."""

    type: ClassVar[EventType] = EventType.APPROVAL_REQUIRED
    request_id: str = ""
    items: tuple[ApprovalItem, ...] = ()


@attrs.frozen
class BudgetExhausted(AgentEvent):
    """The execution is durably waiting in ``budget_exhausted``: its next call would
    pass ``limit`` (``spent`` of ``allowed`` spent; ``call`` is ``llm_call`` or
    ``tool_calls``). Answer with ``Agent.extend_budget(execution_id,
    request_id=request_id, ...)`` or ``phronomy-fsm extend-budget`` from any process
    (``docs/agent.md``, "Budgets")."""

    type: ClassVar[EventType] = EventType.BUDGET_EXHAUSTED
    request_id: str = ""
    limit: str = ""
    spent: int | float = 0
    allowed: int | float = 0
    call: str = ""


@attrs.frozen
class RecoveryRequired(AgentEvent):
    """An effect of ``execution_id`` (the agent's execution, or one of its tool calls'
    child executions — ``parent_execution_id`` then names the agent's) may or may not
    have happened: ``subject`` says which (``{"type": "llm_call", "llm_call_id"}`` or
    ``{"type": "tool_invocation", "tool_invocation_id", "tool_name", "arguments"}``, or
    ``{"type": "execution"}``), ``allowed_outcomes`` what may be answered, at
    ``revision`` (``docs/agent.md``, "Recovery")."""

    type: ClassVar[EventType] = EventType.RECOVERY_REQUIRED
    revision: int = 0
    reason: str = ""
    subject: dict[str, Any] = attrs.field(factory=dict)
    allowed_outcomes: tuple[str, ...] = ()
    parent_execution_id: str | None = None


@attrs.frozen
class Done(AgentEvent):
    """The execution completed (``status`` ``completed`` or ``rejected``)."""

    type: ClassVar[EventType] = EventType.DONE
    status: AgentStatus = AgentStatus.COMPLETED
    output: str | None = None
    revision: int = 0


@attrs.frozen
class HandedOff(AgentEvent):
    """The execution handed the conversation off (``handoff``: target agent and the
    deterministic target execution id)."""

    type: ClassVar[EventType] = EventType.HANDOFF
    handoff: dict[str, Any] = attrs.field(factory=dict)
    revision: int = 0


@attrs.frozen
class Failed(AgentEvent):
    """The execution failed: ``error`` is ``Type: message``; ``type`` is ``timeout``
    for a deadline, ``error`` otherwise (a blocked execution reports ``error`` with
    status ``blocked``)."""

    type: ClassVar[EventType] = EventType.ERROR
    status: AgentStatus = AgentStatus.FAILED
    error: str = ""


@attrs.frozen
class TimedOut(Failed):
    """The execution ran past its ``timeout_seconds``."""

    type: ClassVar[EventType] = EventType.TIMEOUT


@attrs.frozen
class Cancelled(AgentEvent):
    """The execution was cancelled."""

    type: ClassVar[EventType] = EventType.CANCELLED
    error: str = ""


_TERMINAL = frozenset(
    {EventType.DONE, EventType.HANDOFF, EventType.ERROR, EventType.TIMEOUT, EventType.CANCELLED}
)


@attrs.frozen
class AgentResult:
    """The outcome of one execution as its caller sees it.

    ``status`` is ``completed``, ``rejected`` or ``handed_off`` (failures, blocks and
    cancellations are raised instead); ``output`` the final answer; ``revision`` the
    execution's last revision; ``handoff`` ``{"target_agent_id",
    "target_execution_id", ...}`` for a handoff; ``finish_reason`` the last LLM
    answer's finish reason when the provider gave one; ``parsed`` the final answer
    converted to the agent's ``output_type`` (an instance of it; None for an agent
    without one: ``docs/agent.md``, "Structured output")."""

    agent_id: str
    execution_id: str
    status: AgentStatus
    output: str | None
    revision: int
    usage: Usage = attrs.field(factory=Usage)
    handoff: dict[str, Any] | None = None
    finish_reason: str | None = None
    parsed: Any = None

    @property
    def rejected(self) -> bool:
        """True when a tool call was rejected (status ``rejected``)."""
        return self.status is AgentStatus.REJECTED


__all__ = [
    "AgentEvent",
    "AgentResult",
    "AgentStatus",
    "ApprovalItem",
    "ApprovalRequired",
    "BudgetExhausted",
    "Cancelled",
    "Done",
    "EventType",
    "Failed",
    "HandedOff",
    "RecoveryRequired",
    "TimedOut",
    "Token",
    "ToolCalled",
    "ToolResulted",
]
