"""Value types of the agent layer: messages, LLM requests and responses, tool calls,
events, decisions and results.

All are frozen attrs classes (immutable snapshots cross the worker boundary, reference
§0 rule 1). Messages follow the OpenAI chat shape so providers can send them as they are:
``role`` is ``system``, ``user``, ``assistant`` or ``tool``.
"""

from __future__ import annotations

import json
from typing import Any

import attrs

JSON = Any


@attrs.frozen
class ToolCall:
    """A tool call requested by the LLM: ``id`` (the provider's tool_call_id), the tool
    ``name`` and ``arguments_json`` exactly as the LLM produced it (it may be malformed;
    the tool invocation validates it)."""

    id: str
    name: str
    arguments_json: str

    def parsed_arguments(self) -> Any:
        """The arguments decoded from JSON. Raises ``ValueError`` if malformed."""
        return json.loads(self.arguments_json) if self.arguments_json.strip() else {}

    def to_json(self) -> dict[str, Any]:
        """OpenAI chat shape: ``{"id", "type": "function", "function": {...}}``."""
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments_json},
        }


@attrs.frozen
class Usage:
    """Token counts reported by the provider (0 when unknown)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        """prompt + completion."""
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
        )


@attrs.frozen
class Message:
    """One chat message. ``tool_calls`` only on assistant messages; ``tool_call_id`` and
    ``name`` only on tool messages."""

    role: str
    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None

    def to_json(self) -> dict[str, Any]:
        """OpenAI chat-completions message dict."""
        data: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            data["tool_calls"] = [c.to_json() for c in self.tool_calls]
        if self.tool_call_id is not None:
            data["tool_call_id"] = self.tool_call_id
        if self.name is not None and self.role == "tool":
            data["name"] = self.name
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Message:
        """Inverse of :meth:`to_json` (journal content). Raises ``KeyError``/``TypeError``
        on a malformed dict."""
        calls = tuple(
            ToolCall(c["id"], c["function"]["name"], c["function"].get("arguments", ""))
            for c in data.get("tool_calls") or ()
        )
        return cls(
            role=data["role"],
            content=data.get("content"),
            tool_calls=calls,
            tool_call_id=data.get("tool_call_id"),
            name=data.get("name"),
        )


@attrs.frozen
class ToolSpec:
    """What the LLM is told about a tool (OpenAI ``tools`` entry)."""

    name: str
    description: str
    parameters: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        """``{"type": "function", "function": {name, description, parameters}}``."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }


@attrs.frozen
class LLMRequest:
    """One provider call: the messages, the tools offered, and the durable
    ``llm_call_id`` (also the idempotency key a provider may forward)."""

    llm_call_id: str
    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()
    stream: bool = False


@attrs.frozen
class LLMResponse:
    """What the provider answered: text and/or tool calls, usage and the
    ``llm_call_id`` it answers (stale answers are dropped by id, reference §1.5)."""

    llm_call_id: str
    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = Usage()
    model: str | None = None

    def message(self) -> Message:
        """The assistant message this response adds to the conversation."""
        return Message("assistant", self.content, self.tool_calls)


@attrs.frozen
class TokenChunk:
    """A streamed token of LLM call ``llm_call_id``."""

    llm_call_id: str
    content: str


@attrs.frozen
class ApprovalDecision:
    """An approve/reject call for approval request ``request_id`` of an execution.

    ``approved`` applies to every item when ``decisions`` is None; ``decisions``
    (tool invocation id → bool), when given, decides items one by one and must name
    every item of the request (a rejected item becomes a rejected tool result the LLM
    sees, and the execution continues). ``Agent.approve`` refuses a mapping that
    leaves an item out (issue 11 item 1).
    """

    execution_id: str
    request_id: str
    approved: bool
    decisions: dict[str, bool] | None = None


@attrs.frozen
class AbortReason:
    """Why an execution is being cancelled: ``kind`` is ``cancelled``, ``timeout`` or
    ``callback_failed``; ``error`` is what the caller's task fails with."""

    kind: str
    error: BaseException

    @property
    def status(self) -> str:
        """The durable terminal status: ``cancelled`` for an explicit cancel, ``failed``
        for a timeout or a raising listener (reference §2.2 failure mapping)."""
        return "cancelled" if self.kind == "cancelled" else "failed"


@attrs.frozen
class Resolution:
    """An operator's answer to a recovery subject (reference §6.6).

    ``subject`` is ``{"type": "llm_call", "llm_call_id": ...}`` or ``{"type":
    "tool_invocation", "tool_invocation_id": ...}``; ``outcome`` is ``succeeded``,
    ``failed`` or ``not_performed``; ``result`` is required for ``succeeded`` (an LLM
    response dict or a tool result), ``error`` for ``failed``.
    """

    execution_id: str
    expected_revision: int
    subject: dict[str, Any]
    outcome: str
    result: Any = None
    error: str | None = None


@attrs.frozen
class AgentEvent:
    """An event delivered to the agent's listener (reference §8.3): ``type`` is one of
    ``token``, ``tool_call``, ``tool_result``, ``approval_required``, ``done``,
    ``handoff``, ``error``, ``timeout``, ``cancelled``, ``recovery_resolution_required``;
    ``payload`` is a JSON-like dict; ``execution_id`` names the execution."""

    type: str
    execution_id: str
    payload: dict[str, Any] = attrs.field(factory=dict)


@attrs.frozen
class AgentResult:
    """The outcome of one execution as its caller sees it.

    ``status`` is the durable terminal status (``completed``, ``rejected``,
    ``handed_off``); failures, blocks and cancellations are raised instead.
    ``handoff`` holds ``{"target_agent_id", "target_execution_id", ...}`` for a handoff.
    """

    agent_id: str
    execution_id: str
    status: str
    output: str | None
    revision: int
    usage: Usage = Usage()
    handoff: dict[str, Any] | None = None

    @property
    def rejected(self) -> bool:
        """True when a tool call was rejected (status ``rejected``)."""
        return self.status == "rejected"
