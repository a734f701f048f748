"""The OpenAI-compatible chat-completions provider, over httpx.

This module owns one job: turn an :class:`~phronomy_fsm.agent.types.LLMRequest` into a
``POST {base_url}/chat/completions`` and the answer (a JSON body, or server-sent events
when streaming) back into an :class:`~phronomy_fsm.agent.types.LLMResponse`. It knows
nothing of executions, barriers or the store; it never retries on its own: whether a
call whose outcome is unknown is sent again is the agent's re-send policy
(``docs/agent.md``, "Re-send policies"), never the provider's.

Wire format: the OpenAI chat-completions API (``messages``, ``tools``, ``tool_calls``,
``stream`` with ``stream_options.include_usage``, ``data: ...`` / ``data: [DONE]``
server-sent events). Any server that speaks it works: OpenAI, vLLM, llama.cpp's server,
Ollama's ``/v1`` endpoint, LiteLLM and similar gateways, and the loopback stub
:mod:`phronomy_fsm.testing.stub_llm` used by the tests.

Sending, cancellation and the error mapping are shared with the Anthropic provider in
:mod:`phronomy_fsm.agent.http_provider`. Every failure is an
:class:`~phronomy_fsm.errors.LLMError` with these attributes (so a caller can branch on
data, not on message text):

* ``llm_call_id`` — the request's durable id;
* ``reason`` — a stable code: ``http_status``, ``timeout``, ``connection``,
  ``transport``, ``not_json``, ``api_error``, ``no_choices``, ``bad_message``,
  ``bad_tool_call``, ``bad_chunk``, ``stream_incomplete``;
* ``retryable`` — a *new* call may succeed (HTTP 408/429/5xx, timeouts, connection
  failures). It never means the failed call had no effect: the server may have run and
  billed it;
* ``timed_out`` — an httpx timeout (connect, read, write or pool) fired;
* ``status_code`` — the HTTP status, or ``None`` when there was no HTTP answer;
* ``body_excerpt`` — at most 300 characters of the offending body or chunk, or ``None``.

No httpx or json exception escapes :meth:`OpenAICompatibleProvider.complete`.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

import httpx

from phronomy_fsm.agent.http_provider import (
    EXCERPT_CHARS,
    RETRYABLE_STATUS_CODES,
    HTTPProvider,
    api_error_message,
    bad_tool_call,
    excerpt,
    finish_tool_call,
    is_loopback_url,
    llm_error,
    sse_events,
)
from phronomy_fsm.agent.providers import TokenSink
from phronomy_fsm.agent.types import LLMRequest, LLMResponse, Usage
from phronomy_fsm.errors import LLMError
from phronomy_fsm.runtime.cancellation import CancellationToken

DEFAULT_BASE_URL = "https://api.openai.com/v1"
"""Used when neither ``base_url`` nor ``PHRONOMY_LLM_BASE_URL`` / ``OPENAI_BASE_URL`` is set."""

BASE_URL_VARIABLES = ("PHRONOMY_LLM_BASE_URL", "OPENAI_BASE_URL")
API_KEY_VARIABLES = ("PHRONOMY_LLM_API_KEY", "OPENAI_API_KEY")
MODEL_VARIABLES = ("PHRONOMY_LLM_MODEL", "OPENAI_MODEL")


class OpenAICompatibleProvider(HTTPProvider):
    """An LLM provider that speaks the OpenAI chat-completions API over HTTP.

    Args:
        base_url: the API root, e.g. ``https://api.openai.com/v1`` or
            ``http://127.0.0.1:8000/v1``; requests go to ``{base_url}/chat/completions``.
            Default: ``$PHRONOMY_LLM_BASE_URL``, else ``$OPENAI_BASE_URL``, else
            :data:`DEFAULT_BASE_URL`.
        api_key: sent as ``Authorization: Bearer <key>``. Default:
            ``$PHRONOMY_LLM_API_KEY``, else ``$OPENAI_API_KEY``. May be absent only for
            a loopback ``base_url`` (see :func:`is_loopback_url`).
        model: the model name sent with every request. Default: ``$PHRONOMY_LLM_MODEL``,
            else ``$OPENAI_MODEL``.
        timeout_seconds: the httpx timeout, in seconds, applied separately to connecting,
            to each read, to each write and to waiting for a pooled connection. A stream
            that keeps producing chunks is therefore never cut off; a server silent for
            this long fails the call with ``timed_out=True``.
        extra_headers: more headers for every request (a gateway's routing or tenant
            headers). They cannot replace ``Idempotency-Key`` or ``X-Request-Id``.
        transport: an ``httpx.BaseTransport`` to send through (custom TLS, proxies, or
            ``httpx.MockTransport``); default: httpx's HTTP transport.

    Raises:
        ConfigurationError: no model (set ``PHRONOMY_LLM_MODEL``), no API key for a
            non-loopback server (set ``PHRONOMY_LLM_API_KEY``), a ``base_url`` that is
            not an ``http``/``https`` URL, or a non-positive ``timeout_seconds``.

    Sending, cancellation, timeouts and the error mapping are
    :class:`~phronomy_fsm.agent.http_provider.HTTPProvider`'s (shared with the Anthropic
    provider). Concurrency: one ``httpx.Client`` (a thread-safe connection pool) is
    created here and reused by every call; :meth:`complete` may run on several worker
    threads at once. Call :meth:`close` (or use ``with``) to release its connections.
    """

    #: The provider's name in traces (``gen_ai.provider.name``, ``docs/tracing.md``): the
    #: OpenAI API; set it on an instance that talks to another vendor's compatible API.
    provider_name: str = "openai"
    endpoint: ClassVar[str] = "/chat/completions"
    default_base_url: ClassVar[str] = DEFAULT_BASE_URL
    base_url_variables: ClassVar[tuple[str, ...]] = BASE_URL_VARIABLES
    api_key_variables: ClassVar[tuple[str, ...]] = API_KEY_VARIABLES
    model_variables: ClassVar[tuple[str, ...]] = MODEL_VARIABLES

    def build_body(self, request: LLMRequest) -> dict[str, Any]:
        """The JSON body for ``request``: ``model``, ``messages`` (``Message.to_json``),
        ``tools`` (``ToolSpec.to_json``, omitted when there are none) and, when
        ``request.stream``, ``stream: true`` with ``stream_options.include_usage``."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [m.to_json() for m in request.messages],
        }
        if request.tools:
            body["tools"] = [t.to_json() for t in request.tools]
        if request.stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        return body

    def parse_body(self, call_id: str, raw: bytes | str) -> LLMResponse:
        """:func:`parse_completion`."""
        return parse_completion(call_id, raw)

    def read_stream(
        self,
        call_id: str,
        response: httpx.Response,
        on_token: TokenSink | None,
        cancellation: CancellationToken | None,
    ) -> LLMResponse:
        """Assemble chat-completion chunks until ``data: [DONE]`` (see
        :meth:`complete`)."""
        return _StreamAssembler(call_id).run(response, on_token, cancellation)


# ------------------------------------------------------------------ parsing


def _usage(data: Any) -> Usage:
    """Token counts of a ``usage`` object; a missing or malformed one counts zero (usage
    is informational and never fails a call)."""
    if not isinstance(data, dict):
        return Usage()

    def count(key: str) -> int:
        value = data.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0

    return Usage(count("prompt_tokens"), count("completion_tokens"))


def parse_completion(call_id: str, raw: bytes | str) -> LLMResponse:
    """Parse a non-streamed chat-completions body into an :class:`LLMResponse`.

    Reads ``choices[0].message.content`` (a string or null), ``...tool_calls`` (each
    ``{"id", "type": "function", "function": {"name", "arguments"}}``, arguments a
    string kept verbatim), ``usage`` and ``model``. ``model`` is ``None`` when absent.

    Raises:
        LLMError: ``not_json`` (the body is not JSON), ``api_error`` (a JSON error
            object with status 200), ``no_choices`` (no non-empty ``choices`` list),
            ``bad_message`` (``message`` missing or its content not a string),
            ``bad_tool_call`` (a tool call without a function name, or whose arguments
            are not a string).
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
    if isinstance(data, dict) and data.get("error") is not None and "choices" not in data:
        detail = api_error_message(raw.encode() if isinstance(raw, str) else raw) or "unknown error"
        raise llm_error(
            call_id,
            f"LLM call {call_id}: the API answered an error: {detail}",
            "api_error",
            body_excerpt=excerpt(raw),
        )
    choices = data.get("choices") if isinstance(data, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise llm_error(
            call_id,
            f"LLM call {call_id}: the answer has no choices",
            "no_choices",
            body_excerpt=excerpt(raw),
        )
    message = choices[0].get("message")
    if not isinstance(message, dict):
        raise llm_error(
            call_id,
            f"LLM call {call_id}: choices[0] has no message object",
            "bad_message",
            body_excerpt=excerpt(raw),
        )
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        raise llm_error(
            call_id,
            f"LLM call {call_id}: message content is {type(content).__name__}, not a string",
            "bad_message",
            body_excerpt=excerpt(raw),
        )
    raw_calls = message.get("tool_calls") or []
    if not isinstance(raw_calls, list):
        raise llm_error(
            call_id,
            f"LLM call {call_id}: tool_calls is not a list",
            "bad_tool_call",
            body_excerpt=excerpt(raw),
        )
    calls = []
    for i, item in enumerate(raw_calls):
        function = item.get("function") if isinstance(item, dict) else None
        if not isinstance(function, dict):
            raise bad_tool_call(call_id, i, "has no function object", raw)
        ident = item.get("id")
        calls.append(
            finish_tool_call(
                call_id, i, ident, function.get("name"), function.get("arguments"), raw
            )
        )
    model = data.get("model")
    finish = choices[0].get("finish_reason")
    return LLMResponse(
        call_id,
        content,
        tuple(calls),
        _usage(data.get("usage")),
        model if isinstance(model, str) and model else None,
        finish if isinstance(finish, str) and finish else None,
    )


class _StreamAssembler:
    """Assembles one streamed answer from server-sent events (one per call)."""

    def __init__(self, call_id: str) -> None:
        self.call_id = call_id
        self.content: list[str] = []
        self.saw_content = False
        self.saw_choice = False
        self.calls: dict[int, dict[str, Any]] = {}
        self.last_index: int | None = None
        self.usage = Usage()
        self.model: str | None = None
        self.finish_reason: str | None = None

    def run(
        self,
        response: httpx.Response,
        on_token: TokenSink | None,
        cancellation: CancellationToken | None,
    ) -> LLMResponse:
        """Read events until ``data: [DONE]``; see :meth:`HTTPProvider.complete`."""
        done = False
        for event, data in sse_events(response.iter_lines(), cancellation):
            if data.strip() == "[DONE]":
                done = True
                break
            self._chunk(event, data, on_token)
        if not done:
            raise llm_error(
                self.call_id,
                f"LLM call {self.call_id}: the event stream ended without data: [DONE]; the answer may be truncated",
                "stream_incomplete",
                retryable=True,
            )
        if not self.saw_choice:
            raise llm_error(
                self.call_id,
                f"LLM call {self.call_id}: the event stream carried no choices",
                "no_choices",
            )
        calls = tuple(
            finish_tool_call(self.call_id, i, c["id"], c["name"], "".join(c["arguments"]), c)
            for i, c in enumerate(self.calls[k] for k in sorted(self.calls))
        )
        content = "".join(self.content) if self.saw_content else None
        return LLMResponse(self.call_id, content, calls, self.usage, self.model, self.finish_reason)

    def _bad(self, problem: str, data: str) -> LLMError:
        return llm_error(
            self.call_id,
            f"LLM call {self.call_id}: malformed stream chunk: {problem}",
            "bad_chunk",
            body_excerpt=excerpt(data),
        )

    def _chunk(self, event: str, data: str, on_token: TokenSink | None) -> None:
        try:
            chunk = json.loads(data)
        except (ValueError, RecursionError):
            raise self._bad("not JSON", data) from None
        if not isinstance(chunk, dict):
            raise self._bad("not a JSON object", data)
        if event == "error" or chunk.get("error") is not None:
            detail = api_error_message(data.encode()) or "unknown error"
            raise llm_error(
                self.call_id,
                f"LLM call {self.call_id}: the API sent an error mid-stream: {detail}",
                "api_error",
                body_excerpt=excerpt(data),
            )
        if self.model is None and isinstance(chunk.get("model"), str) and chunk["model"]:
            self.model = chunk["model"]
        if isinstance(chunk.get("usage"), dict):
            self.usage = _usage(chunk["usage"])
        choices = chunk.get("choices")
        if choices is None:
            return
        if not isinstance(choices, list):
            raise self._bad("choices is not a list", data)
        for choice in choices:
            if not isinstance(choice, dict):
                raise self._bad("a choice is not an object", data)
            if choice.get("index", 0) != 0:
                continue  # only one answer is requested; ignore others defensively
            self.saw_choice = True
            finish = choice.get("finish_reason")
            if isinstance(finish, str) and finish:
                self.finish_reason = finish
            delta = choice.get("delta") or {}
            if not isinstance(delta, dict):
                raise self._bad("delta is not an object", data)
            text = delta.get("content")
            if text is not None:
                if not isinstance(text, str):
                    raise self._bad(f"content delta is {type(text).__name__}, not a string", data)
                self.saw_content = True
                if text:
                    self.content.append(text)
                    if on_token is not None:
                        on_token(text)
            tool_deltas = delta.get("tool_calls")
            if tool_deltas is not None:
                if not isinstance(tool_deltas, list):
                    raise self._bad("tool_calls delta is not a list", data)
                for tool_delta in tool_deltas:
                    self._tool_delta(tool_delta, data)

    def _tool_delta(self, tool_delta: Any, data: str) -> None:
        """Merge one tool-call delta: ``id`` and ``function.name`` arrive in the first
        delta of an ``index``; ``function.arguments`` fragments are concatenated. A delta
        without ``index`` (some servers) opens a new call when it brings a new id, else
        continues the last one."""
        if not isinstance(tool_delta, dict):
            raise self._bad("a tool_calls delta is not an object", data)
        ident = tool_delta.get("id")
        index = tool_delta.get("index")
        if index is None:
            last = self.calls.get(self.last_index) if self.last_index is not None else None
            if last is None or (
                isinstance(ident, str) and ident and last["id"] and ident != last["id"]
            ):
                index = max(self.calls, default=-1) + 1
            else:
                index = self.last_index
        if not isinstance(index, int) or isinstance(index, bool) or index < 0:
            raise self._bad(f"tool call index {index!r} is not a non-negative integer", data)
        self.last_index = index
        call = self.calls.setdefault(index, {"id": None, "name": None, "arguments": []})
        if isinstance(ident, str) and ident and not call["id"]:
            call["id"] = ident
        function = tool_delta.get("function") or {}
        if not isinstance(function, dict):
            raise self._bad("a tool call's function is not an object", data)
        name = function.get("name")
        if isinstance(name, str) and name and not call["name"]:
            call["name"] = name
        fragment = function.get("arguments")
        if fragment is not None:
            if not isinstance(fragment, str):
                raise llm_error(
                    self.call_id,
                    f"LLM call {self.call_id}: tool call {index} has arguments that are "
                    f"{type(fragment).__name__}, not a JSON string",
                    "bad_tool_call",
                    body_excerpt=excerpt(data),
                )
            call["arguments"].append(fragment)


__all__ = [
    "API_KEY_VARIABLES",
    "BASE_URL_VARIABLES",
    "DEFAULT_BASE_URL",
    "EXCERPT_CHARS",
    "MODEL_VARIABLES",
    "RETRYABLE_STATUS_CODES",
    "OpenAICompatibleProvider",
    "is_loopback_url",
    "parse_completion",
]
