"""The Anthropic Messages provider, over httpx.

This module owns one job: turn an :class:`~phronomy_fsm.agent.types.LLMRequest` into a
``POST {base_url}/messages`` of the Anthropic Messages API and its answer (a JSON body,
or server-sent events when streaming) back into an
:class:`~phronomy_fsm.agent.types.LLMResponse`. Sending, timeouts, cancellation and the
mapping of failures to :class:`~phronomy_fsm.errors.LLMError` (its ``reason`` codes and
``retryable``) are :class:`~phronomy_fsm.agent.http_provider.HTTPProvider`'s, shared with
the OpenAI-compatible provider; like it, this provider never retries on its own
(``docs/agent.md``, "The Anthropic provider").

Wire format (``anthropic-version: 2023-06-01``):

* the agent's conversation is kept in the OpenAI chat shape
  (:class:`~phronomy_fsm.agent.types.Message`); here ``system`` messages become the
  top-level ``system`` field, an assistant's tool calls become ``tool_use`` content
  blocks (the arguments parsed into ``input``), and tool messages become ``tool_result``
  blocks of a ``user`` message (consecutive ones joined into one message, as the API
  requires alternating roles);
* tools are offered as ``{"name", "description", "input_schema"}``;
* the answer's ``text`` blocks are joined into the content, its ``tool_use`` blocks
  become tool calls (``input`` re-encoded as a JSON string), ``usage.input_tokens``
  (plus the cached ``cache_creation_input_tokens`` and ``cache_read_input_tokens``) /
  ``output_tokens`` the usage and ``stop_reason`` the finish reason (``end_turn``,
  ``tool_use``, ``max_tokens``...);
* streaming reads the events ``message_start``, ``content_block_start``,
  ``content_block_delta`` (``text_delta``, ``input_json_delta``), ``content_block_stop``,
  ``message_delta`` and ``message_stop`` (``ping`` is ignored; an ``error`` event is the
  call's ``api_error``); a stream that ends before ``message_stop`` is
  ``stream_incomplete`` (retryable).

HTTP 529 (``overloaded_error``) is retryable like every 5xx.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, ClassVar

import httpx

from phronomy_fsm.agent.http_provider import (
    HTTPProvider,
    api_error_message,
    bad_tool_call,
    excerpt,
    finish_tool_call,
    llm_error,
    sse_events,
)
from phronomy_fsm.agent.providers import TokenSink
from phronomy_fsm.agent.types import LLMRequest, LLMResponse, Message, ToolCall, Usage
from phronomy_fsm.errors import ConfigurationError, LLMError
from phronomy_fsm.runtime.cancellation import CancellationToken

DEFAULT_ANTHROPIC_BASE_URL = "https://api.anthropic.com/v1"
"""Used when neither ``base_url`` nor ``PHRONOMY_ANTHROPIC_BASE_URL`` is set (the root
*with* ``/v1``: requests go to ``{base_url}/messages``)."""

ANTHROPIC_VERSION = "2023-06-01"
"""The ``anthropic-version`` header sent with every request."""

ANTHROPIC_BASE_URL_VARIABLES = ("PHRONOMY_ANTHROPIC_BASE_URL",)
ANTHROPIC_API_KEY_VARIABLES = ("PHRONOMY_ANTHROPIC_API_KEY", "ANTHROPIC_API_KEY")
ANTHROPIC_MODEL_VARIABLES = ("PHRONOMY_ANTHROPIC_MODEL", "ANTHROPIC_MODEL")


class AnthropicProvider(HTTPProvider):
    """An LLM provider that speaks the Anthropic Messages API over HTTP (module
    docstring; ``docs/agent.md``, "The Anthropic provider").

    Args:
        base_url: the API root with its version, e.g. ``https://api.anthropic.com/v1``
            or the stub's ``http://127.0.0.1:PORT/v1``. Default:
            ``$PHRONOMY_ANTHROPIC_BASE_URL``, else :data:`DEFAULT_ANTHROPIC_BASE_URL`.
        api_key: sent as ``x-api-key``. Default: ``$PHRONOMY_ANTHROPIC_API_KEY``, else
            ``$ANTHROPIC_API_KEY``. May be absent only for a loopback ``base_url``.
        model: e.g. ``claude-sonnet-4-5``. Default: ``$PHRONOMY_ANTHROPIC_MODEL``, else
            ``$ANTHROPIC_MODEL``.
        max_tokens: the ``max_tokens`` of every request (the API requires it): the most
            tokens an answer may have; an answer cut there has finish reason
            ``max_tokens``.
        timeout_seconds, extra_headers, transport: as
            :class:`~phronomy_fsm.agent.openai.OpenAICompatibleProvider`.

    Raises:
        ConfigurationError: no model, no key for a non-loopback server, a bad
            ``base_url``, a non-positive ``timeout_seconds`` or ``max_tokens``.

    Concurrency: as the OpenAI-compatible provider: one pooled ``httpx.Client``;
    :meth:`complete` may run on several worker threads at once; :meth:`close` releases
    the connections.
    """

    #: The provider's name in traces (``gen_ai.provider.name``, ``docs/tracing.md``).
    provider_name: str = "anthropic"
    endpoint: ClassVar[str] = "/messages"
    default_base_url: ClassVar[str] = DEFAULT_ANTHROPIC_BASE_URL
    base_url_variables: ClassVar[tuple[str, ...]] = ANTHROPIC_BASE_URL_VARIABLES
    api_key_variables: ClassVar[tuple[str, ...]] = ANTHROPIC_API_KEY_VARIABLES
    model_variables: ClassVar[tuple[str, ...]] = ANTHROPIC_MODEL_VARIABLES

    def __init__(
        self,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        model: str | None = None,
        max_tokens: int = 4096,
        timeout_seconds: float = 60.0,
        extra_headers: Mapping[str, str] | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        if type(max_tokens) is not int or max_tokens < 1:
            raise ConfigurationError(f"max_tokens must be a positive int, not {max_tokens!r}")
        self.max_tokens = max_tokens
        super().__init__(
            base_url=base_url,
            api_key=api_key,
            model=model,
            timeout_seconds=timeout_seconds,
            extra_headers=extra_headers,
            transport=transport,
        )

    def auth_headers(self, api_key: str) -> dict[str, str]:
        """``x-api-key: <key>`` (the Messages API does not take a bearer token)."""
        return {"x-api-key": api_key}

    def protocol_headers(self) -> dict[str, str]:
        """``anthropic-version`` (:data:`ANTHROPIC_VERSION`)."""
        return {"anthropic-version": ANTHROPIC_VERSION}

    def build_body(self, request: LLMRequest) -> dict[str, Any]:
        """The Messages body for ``request``: ``model``, ``max_tokens``, ``system``
        (the system messages joined by blank lines, omitted when none), ``messages``
        (see :func:`to_anthropic_messages`), ``tools`` (omitted when none) and
        ``stream: true`` when ``request.stream``."""
        system, messages = to_anthropic_messages(request.messages)
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "messages": messages,
        }
        if system:
            body["system"] = system
        if request.tools:
            body["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.parameters}
                for t in request.tools
            ]
        if request.stream:
            body["stream"] = True
        return body

    def parse_body(self, call_id: str, raw: bytes | str) -> LLMResponse:
        """:func:`parse_message`."""
        return parse_message(call_id, raw)

    def read_stream(
        self,
        call_id: str,
        response: httpx.Response,
        on_token: TokenSink | None,
        cancellation: CancellationToken | None,
    ) -> LLMResponse:
        """Assemble the Messages stream events until ``message_stop`` (module
        docstring)."""
        assembler = _MessageStream(call_id)
        for event, data in sse_events(response.iter_lines(), cancellation):
            if assembler.event(event, data, on_token):
                return assembler.result()
        raise llm_error(
            call_id,
            f"LLM call {call_id}: the event stream ended without message_stop; the answer may be truncated",
            "stream_incomplete",
            retryable=True,
        )


def _tool_input(call: ToolCall) -> dict[str, Any]:
    """A tool call's arguments as the ``input`` object of a ``tool_use`` block. Arguments
    that are not a JSON object (the model wrote malformed JSON; the tool call was
    answered with that error) are sent as ``{"raw_arguments": text}``, so the
    conversation can still be sent."""
    try:
        parsed = call.parsed_arguments()
    except ValueError:
        parsed = None
    return parsed if isinstance(parsed, dict) else {"raw_arguments": call.arguments_json}


def to_anthropic_messages(
    messages: tuple[Message, ...] | list[Message],
) -> tuple[str, list[dict[str, Any]]]:
    """The ``(system, messages)`` of a Messages request for a conversation in the chat
    shape (module docstring): system texts joined by blank lines; user text as it is;
    an assistant message as ``text`` and ``tool_use`` blocks; a tool message as a
    ``tool_result`` block of a user message. Consecutive messages of one role are
    joined into one message (the API wants the roles to alternate)."""
    system: list[str] = []
    out: list[dict[str, Any]] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})

    for message in messages:
        if message.role == "system":
            if message.content:
                system.append(message.content)
        elif message.role == "tool":
            add(
                "user",
                [
                    {
                        "type": "tool_result",
                        "tool_use_id": message.tool_call_id or "",
                        "content": message.content or "",
                    }
                ],
            )
        elif message.role == "assistant":
            blocks: list[dict[str, Any]] = []
            if message.content:
                blocks.append({"type": "text", "text": message.content})
            for call in message.tool_calls:
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": call.id,
                        "name": call.name,
                        "input": _tool_input(call),
                    }
                )
            if blocks:
                add("assistant", blocks)
        else:
            add("user", [{"type": "text", "text": message.content or ""}])
    return "\n\n".join(system), out


def _count(data: Any, key: str) -> int | None:
    value = data.get(key) if isinstance(data, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _input_tokens(data: Any) -> int:
    """All the prompt's tokens: ``input_tokens`` plus the cached ones
    (``cache_creation_input_tokens``, ``cache_read_input_tokens``), which the API counts
    apart; missing or malformed counts are zero."""
    return sum(
        _count(data, key) or 0
        for key in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
    )


def _usage(data: Any) -> Usage:
    """``usage`` as a :class:`Usage`: prompt tokens as :func:`_input_tokens`,
    ``output_tokens`` the completion (usage is informational and never fails a call)."""
    return Usage(_input_tokens(data), _count(data, "output_tokens") or 0)


def _api_error(call_id: str, raw: str | bytes) -> LLMError:
    detail = api_error_message(raw.encode() if isinstance(raw, str) else raw) or "unknown error"
    return llm_error(
        call_id,
        f"LLM call {call_id}: the API answered an error: {detail}",
        "api_error",
        body_excerpt=excerpt(raw),
    )


def parse_message(call_id: str, raw: bytes | str) -> LLMResponse:
    """Parse a non-streamed Messages answer into an :class:`LLMResponse`.

    Reads ``content`` (a list of blocks: ``text`` blocks joined, ``tool_use`` blocks
    ``{"id", "name", "input": object}``; other block types ignored), ``usage``,
    ``model`` and ``stop_reason``.

    Raises:
        LLMError: ``not_json`` (the body is not JSON), ``api_error`` (``{"type":
            "error", ...}`` with status 200), ``bad_message`` (no ``content`` list, a
            block that is not an object, or text that is not a string),
            ``bad_tool_call`` (a ``tool_use`` without a name, or whose ``input`` is not
            an object).
    """
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise llm_error(
            call_id,
            f"LLM call {call_id}: the answer is not JSON ({exc})",
            "not_json",
            body_excerpt=excerpt(raw),
        ) from None
    if isinstance(data, dict) and (data.get("type") == "error" or "error" in data):
        raise _api_error(call_id, raw)
    blocks = data.get("content") if isinstance(data, dict) else None
    if not isinstance(blocks, list):
        raise llm_error(
            call_id,
            f"LLM call {call_id}: the answer has no content list",
            "bad_message",
            body_excerpt=excerpt(raw),
        )
    texts: list[str] = []
    calls: list[ToolCall] = []
    for block in blocks:
        if not isinstance(block, dict):
            raise llm_error(
                call_id,
                f"LLM call {call_id}: a content block is not an object",
                "bad_message",
                body_excerpt=excerpt(raw),
            )
        if block.get("type") == "text":
            text = block.get("text")
            if not isinstance(text, str):
                raise llm_error(
                    call_id,
                    f"LLM call {call_id}: a text block's text is {type(text).__name__}, not a string",
                    "bad_message",
                    body_excerpt=excerpt(raw),
                )
            texts.append(text)
        elif block.get("type") == "tool_use":
            calls.append(_tool_use(call_id, len(calls), block, block.get("input"), raw))
    model = data.get("model")
    stop = data.get("stop_reason")
    return LLMResponse(
        call_id,
        "".join(texts) if texts else None,
        tuple(calls),
        _usage(data.get("usage")),
        model if isinstance(model, str) and model else None,
        stop if isinstance(stop, str) and stop else None,
    )


def _tool_use(
    call_id: str, index: int, block: dict[str, Any], tool_input: Any, raw: Any
) -> ToolCall:
    """A ``tool_use`` block as a :class:`ToolCall` (``input`` must be an object)."""
    if not isinstance(tool_input, dict):
        kind = "missing" if tool_input is None else type(tool_input).__name__
        raise bad_tool_call(call_id, index, f"has an input that is {kind}, not an object", raw)
    return finish_tool_call(
        call_id, index, block.get("id"), block.get("name"), json.dumps(tool_input), raw
    )


class _MessageStream:
    """Assembles one streamed Messages answer (one per call)."""

    def __init__(self, call_id: str) -> None:
        self.call_id = call_id
        self.blocks: dict[int, dict[str, Any]] = {}
        self.input_tokens = 0
        self.output_tokens = 0
        self.model: str | None = None
        self.stop_reason: str | None = None
        self.started = False

    def _bad(self, problem: str, data: str) -> LLMError:
        return llm_error(
            self.call_id,
            f"LLM call {self.call_id}: malformed stream event: {problem}",
            "bad_chunk",
            body_excerpt=excerpt(data),
        )

    def event(self, event: str, data: str, on_token: TokenSink | None) -> bool:
        """Apply one server-sent event; True once ``message_stop`` arrived. Raises
        LLMError (``bad_chunk``, ``api_error``, ``bad_tool_call``)."""
        if event == "ping":
            return False
        try:
            item = json.loads(data)
        except (ValueError, RecursionError):
            raise self._bad("not JSON", data) from None
        if not isinstance(item, dict):
            raise self._bad("not a JSON object", data)
        kind = item.get("type") or event
        if kind == "error" or event == "error":
            detail = api_error_message(data.encode()) or "unknown error"
            raise llm_error(
                self.call_id,
                f"LLM call {self.call_id}: the API sent an error mid-stream: {detail}",
                "api_error",
                body_excerpt=excerpt(data),
            )
        if kind == "message_start":
            message = item.get("message")
            if not isinstance(message, dict):
                raise self._bad("message_start without a message object", data)
            self.started = True
            if isinstance(message.get("model"), str) and message["model"]:
                self.model = message["model"]
            usage = message.get("usage")
            self.input_tokens = _input_tokens(usage)
            self.output_tokens = _count(usage, "output_tokens") or 0
        elif kind == "content_block_start":
            block = item.get("content_block")
            index = self._index(item, data)
            if not isinstance(block, dict):
                raise self._bad("content_block_start without a content_block object", data)
            self.blocks[index] = {
                "type": block.get("type"),
                "text": [block["text"]] if isinstance(block.get("text"), str) else [],
                "id": block.get("id"),
                "name": block.get("name"),
                "input": block.get("input"),
                "json": [],
            }
        elif kind == "content_block_delta":
            self._delta(item, data, on_token)
        elif kind == "message_delta":
            delta = item.get("delta")
            if isinstance(delta, dict) and isinstance(delta.get("stop_reason"), str):
                self.stop_reason = delta["stop_reason"]
            output = _count(item.get("usage"), "output_tokens")
            if output is not None:  # cumulative: the last one counts
                self.output_tokens = output
        elif kind == "message_stop":
            if not self.started:
                raise self._bad("message_stop before message_start", data)
            return True
        return False  # content_block_stop and unknown event types change nothing

    def _index(self, item: dict[str, Any], data: str) -> int:
        index = item.get("index")
        if not isinstance(index, int) or isinstance(index, bool) or index < 0:
            raise self._bad(f"block index {index!r} is not a non-negative integer", data)
        return index

    def _delta(self, item: dict[str, Any], data: str, on_token: TokenSink | None) -> None:
        index = self._index(item, data)
        block = self.blocks.get(index)
        delta = item.get("delta")
        if block is None or not isinstance(delta, dict):
            raise self._bad(f"a delta for block {index}, which was not started", data)
        if delta.get("type") == "text_delta":
            text = delta.get("text")
            if not isinstance(text, str):
                raise self._bad(f"text_delta is {type(text).__name__}, not a string", data)
            block["text"].append(text)
            if text and on_token is not None:
                on_token(text)
        elif delta.get("type") == "input_json_delta":
            fragment = delta.get("partial_json")
            if not isinstance(fragment, str):
                raise self._bad("input_json_delta without a partial_json string", data)
            block["json"].append(fragment)

    def result(self) -> LLMResponse:
        """The assembled answer. Raises LLMError ``bad_tool_call`` for a tool input
        that is not a JSON object."""
        texts: list[str] = []
        calls: list[ToolCall] = []
        for index in sorted(self.blocks):
            block = self.blocks[index]
            if block["type"] == "text":
                texts.append("".join(block["text"]))
            elif block["type"] == "tool_use":
                raw = "".join(block["json"])
                if raw.strip():
                    try:
                        tool_input = json.loads(raw)
                    except (ValueError, RecursionError):
                        raise bad_tool_call(
                            self.call_id, len(calls), "has input JSON that does not parse", raw
                        ) from None
                else:
                    tool_input = block["input"] if block["input"] is not None else {}
                calls.append(_tool_use(self.call_id, len(calls), block, tool_input, raw))
        return LLMResponse(
            self.call_id,
            "".join(texts) if texts else None,
            tuple(calls),
            Usage(self.input_tokens, self.output_tokens),
            self.model,
            self.stop_reason,
        )


__all__ = [
    "ANTHROPIC_API_KEY_VARIABLES",
    "ANTHROPIC_BASE_URL_VARIABLES",
    "ANTHROPIC_MODEL_VARIABLES",
    "ANTHROPIC_VERSION",
    "DEFAULT_ANTHROPIC_BASE_URL",
    "AnthropicProvider",
    "parse_message",
    "to_anthropic_messages",
]
