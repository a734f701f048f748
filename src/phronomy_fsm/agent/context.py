"""The durable contexts of the agent's machines: what each commit of an execution stores.

:class:`SessionContext` is the context of one ``agent_session`` execution: the input,
this execution's part of the conversation, the pending LLM call, the current tool calls
(:class:`ToolCallState`) with the approval request, and how it ends.
:class:`ToolCallContext` is the context of one ``tool_call`` child execution. Both are
attrs classes the durable engine encodes as canonical JSON at every commit
(``docs/semantics.md``, "The context"), so everything in them is JSON-compatible: ids,
strings, numbers, lists and dicts — no live objects. The agent's live configuration
(its provider, tools, filters, listener) is looked up by ``agent_id`` in the agent
runtime, never stored.

Guards and actions of the machines read and change these objects on the dispatcher's
loop thread (``agent/session_hooks.py``, ``agent/tool_hooks.py``); offloaded work gets
snapshots. What each field means for recovery is in ``docs/agent.md``.
"""

from __future__ import annotations

import enum
from typing import Any

import attrs

JSON = Any


class ToolCallStatus(enum.StrEnum):
    """Where one tool call of the current LLM answer stands.

    ``pending`` (not authorized yet), ``invalid`` (unknown tool or bad arguments: the
    error is its result), ``awaiting_approval``, ``authorized`` (to run), ``running``
    (its child execution started), ``completed``, ``failed`` (raised, or answered failed
    by an operator), ``rejected`` (denied by the policy, or by a person)."""

    PENDING = "pending"
    INVALID = "invalid"
    AWAITING_APPROVAL = "awaiting_approval"
    AUTHORIZED = "authorized"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    REJECTED = "rejected"


#: Statuses of a call that will not change any more in this batch.
SETTLED = frozenset(
    {
        ToolCallStatus.INVALID,
        ToolCallStatus.COMPLETED,
        ToolCallStatus.FAILED,
        ToolCallStatus.REJECTED,
    }
)


class Outcome(enum.StrEnum):
    """How an agent execution ends (the final state of ``agent_session``)."""

    COMPLETED = "completed"
    REJECTED = "rejected"
    BLOCKED = "blocked"
    HANDED_OFF = "handed_off"
    FAILED = "failed"
    CANCELLED = "cancelled"


@attrs.define
class ToolCallState:
    """One tool call of the current LLM answer.

    ``tool_invocation_id`` is its semantic id (stable across restarts: derived from the
    execution, the LLM call, the provider's tool-call id and the tool name); it is the
    child execution's id and the tool's idempotency key. ``arguments`` are the parsed
    arguments once validated; ``content`` is the text the LLM sees for its result;
    ``rejected_by`` is ``policy``, ``person`` (the whole request) or ``person_item``.
    ``arguments_sha256`` is the sha256 of the canonical JSON of ``arguments`` once
    authorized; ``approved_arguments_sha256`` the hash a person's decision approved
    (``docs/agent.md``, "Approval"): the call runs only with arguments of that hash.
    """

    tool_invocation_id: str
    tool_call_id: str
    tool_name: str
    arguments_json: str
    llm_call_id: str
    status: ToolCallStatus = ToolCallStatus.PENDING
    arguments: JSON = None
    reason: str | None = None
    result: JSON = None
    content: str | None = None
    error: str | None = None
    original_bytes: int | None = None
    rejected_by: str | None = None
    arguments_sha256: str | None = None
    approved_arguments_sha256: str | None = None


@attrs.define
class ApprovalRequestState:
    """A pending approval request: its id, the calls a person must decide and, per
    call, the sha256 of the canonical JSON of the arguments asked about
    (``docs/agent.md``, "Approval")."""

    request_id: str
    items: list[str]  # tool_invocation_ids
    decided: bool = False
    decisions: dict[str, bool] | None = None
    arguments_sha256: dict[str, str] = attrs.Factory(dict)


@attrs.define
class SessionContext:
    """The context of one ``agent_session`` execution (module docstring).

    Attributes:
        agent_id: the agent (its configuration is looked up by it).
        execution_id: this execution's id.
        input: the input as received (JSON: a string for most agents).
        mode: ``invoke`` or ``stream``.
        filtered_input: the text sent to the LLM after the input filters.
        messages: this execution's conversation so far, as OpenAI chat messages (the
            system prompt and earlier executions' history are not stored here).
        pending_llm_call_id: the LLM call announced by the last barrier.
        llm_calls: LLM calls announced so far.
        llm_responses: the journal facts of each LLM answer (call id, model, usage,
            finish reason) in order.
        answer: the text of the last LLM answer (the final answer once it has no
            tool calls).
        finish_reason: the last LLM answer's finish reason, when the provider gave one.
        tools: the tool calls of the current LLM answer.
        tool_log: every settled tool call of the execution, in order (status, result,
            error text, sizes) — journaled at the end.
        approval: the pending (or last) approval request.
        audit: approval requests and decisions, in order — journaled at the end.
        outcome / output / error / error_type / blocked_reason: how it ended.
        handoff: ``{target_agent_id, target_execution_id, tool_call_id, arguments,
            llm_call_id, message}`` for a handoff.
        usage: token counts so far (``prompt_tokens``, ``completion_tokens``).
        output_retries: answers refused as structured output and re-asked so far.
        parsed_output: the final answer parsed as JSON, for an agent with an
            ``output_type`` (``AgentResult.parsed`` is it converted to the type).
        tool_calls_started: tool calls started so far (child executions committed).
        budget: the execution's budget, ``{"limits", "prices", "on_exhausted"}``
            (``agent/budget.py``), set from its agent's configuration with the input and
            changed only by extensions; None: no limits.
        budget_request: the pending (or last) budget request while it waits in
            ``budget_exhausted``: ``{"request_id", "limit", "spent", "allowed",
            "call", "calls", "decided"}`` (``docs/agent.md``, "Budgets").
    """

    agent_id: str
    execution_id: str
    input: JSON = None
    mode: str = "invoke"
    filtered_input: str | None = None
    messages: list[dict[str, JSON]] = attrs.Factory(list)
    pending_llm_call_id: str | None = None
    llm_calls: int = 0
    llm_responses: list[dict[str, JSON]] = attrs.Factory(list)
    answer: str | None = None
    finish_reason: str | None = None
    tools: list[ToolCallState] = attrs.Factory(list)
    tool_log: list[dict[str, JSON]] = attrs.Factory(list)
    approval: ApprovalRequestState | None = None
    audit: list[dict[str, JSON]] = attrs.Factory(list)
    outcome: Outcome | None = None
    output: str | None = None
    error: str | None = None
    error_type: str | None = None
    blocked_reason: str | None = None
    handoff: dict[str, JSON] | None = None
    handoff_error: str | None = None
    usage: dict[str, int] = attrs.Factory(lambda: {"prompt_tokens": 0, "completion_tokens": 0})
    output_retries: int = 0
    parsed_output: JSON = None
    tool_calls_started: int = 0
    budget: dict[str, JSON] | None = None
    budget_request: dict[str, JSON] | None = None

    def tool(self, tool_invocation_id: str) -> ToolCallState | None:
        """The tool call with this id in the current batch, or None."""
        for call in self.tools:
            if call.tool_invocation_id == tool_invocation_id:
                return call
        return None


@attrs.define
class ToolCallContext:
    """The context of one ``tool_call`` child execution.

    ``agent_id`` finds the agent's tools; ``arguments`` were validated by the parent;
    ``result`` is the tool's JSON result (or the kept text when it was longer than the
    agent's ``max_tool_result_bytes``), ``content`` the text the LLM sees, ``error`` why
    it failed. ``approved_arguments_sha256`` is the hash of the arguments a person
    approved (None when no person had to): arguments of another hash are refused
    (``docs/agent.md``, "Approval")."""

    agent_id: str
    parent_execution_id: str
    tool_invocation_id: str
    tool_call_id: str
    tool_name: str
    arguments: JSON
    llm_call_id: str
    result: JSON = None
    content: str | None = None
    error: str | None = None
    error_type: str | None = None
    original_bytes: int | None = None
    approved_arguments_sha256: str | None = None


__all__ = [
    "SETTLED",
    "ApprovalRequestState",
    "Outcome",
    "SessionContext",
    "ToolCallContext",
    "ToolCallState",
    "ToolCallStatus",
]
