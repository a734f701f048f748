"""Value types of the agent layer: messages, LLM requests and responses, tool calls.

All are frozen attrs classes: immutable snapshots cross from the loop thread to the
workers that call the LLM and the tools. Messages follow the OpenAI chat shape so providers can send them as they are:
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
    """What the provider answered: text and/or tool calls, usage, the model, the
    ``finish_reason`` when the provider gave one (``stop``, ``tool_calls``,
    ``length``...), and the ``llm_call_id`` it answers (an answer to another call is
    refused)."""

    llm_call_id: str
    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = Usage()
    model: str | None = None
    finish_reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The JSON form an operator supplies for an LLM call that may or may not have
        answered (``resolve --outcome succeeded --result``): ``{"content",
        "tool_calls": [{"id", "name", "arguments"}], "model", "finish_reason",
        "usage": {"prompt_tokens", "completion_tokens"}}``."""
        return {
            "content": self.content,
            "tool_calls": [
                {"id": c.id, "name": c.name, "arguments": c.arguments_json} for c in self.tool_calls
            ],
            "model": self.model,
            "finish_reason": self.finish_reason,
            "usage": {
                "prompt_tokens": self.usage.prompt_tokens,
                "completion_tokens": self.usage.completion_tokens,
            },
        }

    @classmethod
    def from_json(cls, llm_call_id: str, data: Any) -> LLMResponse:
        """The response an operator supplied as JSON (the shape of :meth:`to_json`;
        ``tool_calls`` entries may also be in the OpenAI ``{"id", "function": {"name",
        "arguments"}}`` form, ``arguments`` a JSON string or an object).

        Raises:
            ValueError: ``data`` is not such an object (the message says what is wrong).
        """
        if not isinstance(data, dict):
            raise ValueError(  # noqa: TRY004 - one error type for every bad answer
                'an LLM answer must be a JSON object like {"content": "...", "tool_calls": []}'
            )
        content = data.get("content")
        if content is not None and not isinstance(content, str):
            raise ValueError("the LLM answer's content must be a string or null")
        calls = []
        for index, raw in enumerate(data.get("tool_calls") or ()):
            if not isinstance(raw, dict):
                raise ValueError(f"tool_calls[{index}] must be an object")  # noqa: TRY004
            nested = raw.get("function")
            function: dict[str, Any] = nested if isinstance(nested, dict) else raw
            name, arguments = function.get("name"), function.get("arguments", "{}")
            if not isinstance(name, str) or not name:
                raise ValueError(f"tool_calls[{index}] has no name")
            if not isinstance(arguments, str):
                arguments = json.dumps(arguments, sort_keys=True)
            raw_id = raw.get("id")
            ident = raw_id if isinstance(raw_id, str) and raw_id else f"call_{index}"
            calls.append(ToolCall(ident, name, arguments))
        raw_usage = data.get("usage")
        usage: dict[str, Any] = raw_usage if isinstance(raw_usage, dict) else {}
        return cls(
            llm_call_id,
            content,
            tuple(calls),
            Usage(int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)),
            data.get("model") if isinstance(data.get("model"), str) else None,
            data.get("finish_reason") if isinstance(data.get("finish_reason"), str) else None,
        )

    def message(self) -> Message:
        """The assistant message this response adds to the conversation."""
        return Message("assistant", self.content, self.tool_calls)


@attrs.frozen
class TokenChunk:
    """A streamed token of LLM call ``llm_call_id``."""

    llm_call_id: str
    content: str


__all__ = ["LLMRequest", "LLMResponse", "Message", "TokenChunk", "ToolCall", "ToolSpec", "Usage"]
