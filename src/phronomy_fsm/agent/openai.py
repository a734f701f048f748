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

Every failure is an :class:`~phronomy_fsm.errors.LLMError` with these attributes (so a
caller can branch on data, not on message text):

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

import hashlib
import ipaddress
import json
import os
import socket
import threading
import urllib.parse
from collections.abc import Iterator, Mapping
from typing import Any, Self

import attrs
import httpx

from phronomy_fsm.agent.providers import TokenSink
from phronomy_fsm.agent.types import LLMRequest, LLMResponse, ToolCall, Usage
from phronomy_fsm.errors import ConfigurationError, LLMError
from phronomy_fsm.runtime.cancellation import CancellationToken

DEFAULT_BASE_URL = "https://api.openai.com/v1"
"""Used when neither ``base_url`` nor ``PHRONOMY_LLM_BASE_URL`` / ``OPENAI_BASE_URL`` is set."""

BASE_URL_VARIABLES = ("PHRONOMY_LLM_BASE_URL", "OPENAI_BASE_URL")
API_KEY_VARIABLES = ("PHRONOMY_LLM_API_KEY", "OPENAI_API_KEY")
MODEL_VARIABLES = ("PHRONOMY_LLM_MODEL", "OPENAI_MODEL")

RETRYABLE_STATUS_CODES = frozenset({408, 429})
"""Besides every 5xx: the statuses after which a new call may succeed (the same set the
official OpenAI Python SDK retries, minus 409, which is not transient in general)."""

EXCERPT_CHARS = 300

_HTTPX_ERRORS = (httpx.HTTPError, httpx.StreamError, httpx.InvalidURL)
"""Every exception httpx raises on purpose (``StreamError`` and ``InvalidURL`` do not
derive from ``HTTPError``)."""


def _from_env(names: tuple[str, ...]) -> str | None:
    """The first non-empty value among the environment variables ``names``."""
    for name in names:
        value = os.environ.get(name, "").strip()
        if value:
            return value
    return None


def is_loopback_url(url: str) -> bool:
    """True when ``url``'s host is ``localhost`` (or ``*.localhost``) or a loopback IP
    address (``127.0.0.0/8``, ``::1``). Such a server may be used without an API key."""
    host = (urllib.parse.urlsplit(url).hostname or "").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _excerpt(text: str | bytes | None) -> str | None:
    """At most :data:`EXCERPT_CHARS` characters of ``text`` on one line."""
    if text is None:
        return None
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    flat = " ".join(text.split())
    return flat if len(flat) <= EXCERPT_CHARS else flat[: EXCERPT_CHARS - 3] + "..."


class OpenAICompatibleProvider:
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

    Concurrency: one ``httpx.Client`` (a thread-safe connection pool) is created here and
    reused by every call; :meth:`complete` may run on several worker threads at once.
    Call :meth:`close` (or use ``with``) to release its connections.
    """

    #: The provider's name in traces (``gen_ai.provider.name``, ``docs/tracing.md``): the
    #: OpenAI API; set it on an instance that talks to another vendor's compatible API.
    provider_name: str = "openai"

    def __init__(
        self,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        model: str | None = None,
        timeout_seconds: float = 60.0,
        extra_headers: Mapping[str, str] | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        base_url = (base_url or _from_env(BASE_URL_VARIABLES) or DEFAULT_BASE_URL).rstrip("/")
        if urllib.parse.urlsplit(base_url).scheme not in ("http", "https"):
            raise ConfigurationError(
                f"base_url {base_url!r} is not an http(s) URL; pass base_url= or set PHRONOMY_LLM_BASE_URL",
                base_url=base_url,
            )
        model = model or _from_env(MODEL_VARIABLES)
        if not model:
            raise ConfigurationError(
                "no LLM model configured: pass model= or set PHRONOMY_LLM_MODEL (or OPENAI_MODEL)"
            )
        api_key = api_key or _from_env(API_KEY_VARIABLES)
        if not api_key and not is_loopback_url(base_url):
            raise ConfigurationError(
                f"no API key for {base_url}: pass api_key= or set PHRONOMY_LLM_API_KEY (or OPENAI_API_KEY); "
                "a key may be omitted only for a server on localhost",
                base_url=base_url,
            )
        if not timeout_seconds > 0:
            raise ConfigurationError(f"timeout_seconds must be positive, not {timeout_seconds!r}")
        self.base_url = base_url
        self.model = model
        self.timeout_seconds = float(timeout_seconds)
        self.url = f"{base_url}/chat/completions"
        headers = {"Accept": "application/json"}
        headers.update(extra_headers or {})
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        self._has_key = bool(api_key)
        self._client = httpx.Client(
            headers=headers,
            timeout=httpx.Timeout(self.timeout_seconds),
            transport=transport,
            follow_redirects=False,
        )

    def __repr__(self) -> str:
        key = "set" if self._has_key else "none"
        return f"<OpenAICompatibleProvider {self.url} model={self.model!r} api_key={key}>"

    def close(self) -> None:
        """Close the pooled connections. Calls after this fail with an LLMError
        (``reason="transport"``). Idempotent."""
        self._client.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ------------------------------------------------------------------ request

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

    def complete(
        self,
        request: LLMRequest,
        *,
        on_token: TokenSink | None = None,
        cancellation: CancellationToken | None = None,
    ) -> LLMResponse:
        """Run one chat completion (the :class:`~phronomy_fsm.agent.providers.Provider`
        protocol).

        Sends ``Idempotency-Key`` and ``X-Request-Id`` equal to ``request.llm_call_id``
        so a gateway may deduplicate a repeated call. When ``request.stream`` the answer
        is read as server-sent events and ``on_token`` receives each content delta, in
        order, on this thread; a server that ignores ``stream`` and answers with one JSON
        body is accepted (``on_token`` then receives the whole content once).

        Args:
            request: messages, tools, ``stream`` and the durable ``llm_call_id``.
            on_token: called with each content delta when streaming. What it raises
                propagates unchanged.
            cancellation: checked before sending, between stream lines and after the
                answer arrived; cancelling it while a read is blocked waiting for the
                server closes the response, so the call ends at once with Cancelled.

        Returns:
            An :class:`LLMResponse` with ``llm_call_id == request.llm_call_id``, the
            content (``None`` when the model sent none), the tool calls (arguments
            exactly as the model produced them; an id is derived from the
            ``llm_call_id`` when the server sent none), the usage (zeros when not
            reported) and the model name the server reported (else the configured one).

        Raises:
            LLMError: every HTTP, transport, timeout or protocol failure (see the module
                docstring for its attributes). Never retried here.
            Cancelled: the token was cancelled; reading stops and the connection is
                closed.

        Concurrency: any thread; blocking. Several calls may run at once.
        """
        if cancellation is not None:
            cancellation.raise_if_cancelled()
        call_id = request.llm_call_id
        if self._client.is_closed:
            raise _error(
                call_id, f"LLM call {call_id}: the provider for {self.url} was closed", "transport"
            )
        headers = {"Idempotency-Key": call_id, "X-Request-Id": call_id}
        if request.stream:
            headers["Accept"] = "text/event-stream"
        try:
            http_request = self._client.build_request(
                "POST", self.url, json=self.build_body(request), headers=headers
            )
            response = self._send(http_request, cancellation)
        except _HTTPX_ERRORS as exc:
            raise self._transport_error(call_id, exc) from exc
        except (TypeError, ValueError) as exc:  # a message or tool schema that is not JSON
            raise _error(
                call_id,
                f"request for LLM call {call_id} could not be encoded: {exc}",
                "bad_message",
            ) from exc
        if cancellation is not None:  # a cancel shuts the socket: a blocked read ends
            cancellation.on_cancel(lambda _error: _interrupt(response))
        try:
            if cancellation is not None:
                cancellation.raise_if_cancelled()
            if response.status_code >= 300:  # redirects are not followed: a wrong base URL
                _read_quietly(response)
                raise _status_error(call_id, self.url, response)
            content_type = response.headers.get("content-type", "")
            if request.stream and content_type.startswith("text/event-stream"):
                result = _StreamAssembler(call_id).run(response, on_token, cancellation)
            else:
                response.read()
                result = parse_completion(call_id, response.content)
                if request.stream and on_token is not None and result.content:
                    on_token(result.content)
        except _HTTPX_ERRORS as exc:
            if cancellation is not None:
                cancellation.raise_if_cancelled()  # the read ended because of the cancel
            raise self._transport_error(call_id, exc) from exc
        except LLMError:
            if cancellation is not None:
                cancellation.raise_if_cancelled()  # e.g. a stream cut short by the cancel
            raise
        finally:
            response.close()
        if cancellation is not None:
            cancellation.raise_if_cancelled()
        if result.model is None:
            result = attrs.evolve(result, model=self.model)
        return result

    def _send(
        self, http_request: httpx.Request, cancellation: CancellationToken | None
    ) -> httpx.Response:
        """Send ``http_request`` and return the response once its headers arrived. With
        a cancellation token the exchange runs on a helper thread, so a cancel ends the
        wait at once (raising Cancelled) even while the server has not answered: the
        socket of a connection opened for it is shut down, and a response that arrives
        after the cancel is closed unread.

        Raises: what ``httpx.Client.send`` raises; Cancelled."""
        if cancellation is None:
            return self._client.send(http_request, stream=True)
        lock = threading.Lock()
        done = threading.Event()
        outcome: dict[str, Any] = {}
        sockets: list[Any] = []

        def trace(event: str, info: dict[str, Any]) -> None:
            if event == "connection.connect_tcp.complete":
                stream = info.get("return_value")
                sock = stream.get_extra_info("socket") if stream is not None else None
                if sock is not None:
                    sockets.append(sock)

        http_request.extensions["trace"] = trace

        def exchange() -> None:
            try:
                response = self._client.send(http_request, stream=True)
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting caller
                with lock:
                    outcome.setdefault("error", exc)
                done.set()
                return
            with lock:
                abandoned = "abandoned" in outcome
                outcome.setdefault("response", response)
            if abandoned:
                response.close()
            done.set()

        def cancelled(_error: BaseException) -> None:
            for sock in sockets:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            done.set()

        threading.Thread(target=exchange, name="phronomy-llm-send", daemon=True).start()
        cancellation.on_cancel(cancelled)
        done.wait()
        with lock:
            if "response" not in outcome and "error" not in outcome:
                outcome["abandoned"] = True
                raise cancellation.error()
        if "error" in outcome:
            cancellation.raise_if_cancelled()
            raise outcome["error"]
        return outcome["response"]  # type: ignore[no-any-return]

    def _transport_error(self, call_id: str, exc: Exception) -> LLMError:
        """Map an httpx exception (no HTTP answer, or the body broke off) to LLMError."""
        where = f"LLM call {call_id} to {self.url}"
        if isinstance(exc, httpx.TimeoutException):
            return _error(
                call_id,
                f"{where} timed out ({type(exc).__name__}, timeout_seconds={self.timeout_seconds:g}); "
                "the server may still have run it; a new call is the agent's decision",
                "timeout",
                retryable=True,
                timed_out=True,
            )
        if isinstance(exc, httpx.ConnectError):
            return _error(
                call_id,
                f"{where} could not connect: {exc}; check the base URL and that the server is running",
                "connection",
                retryable=True,
            )
        return _error(
            call_id,
            f"{where} failed in transport: {type(exc).__name__}: {exc}",
            "transport",
            retryable=isinstance(exc, httpx.TransportError),
        )


# ------------------------------------------------------------------- errors


def _error(
    call_id: str,
    message: str,
    reason: str,
    *,
    retryable: bool = False,
    timed_out: bool = False,
    status_code: int | None = None,
    body_excerpt: str | None = None,
) -> LLMError:
    """An LLMError carrying every attribute the module docstring lists."""
    return LLMError(
        message,
        llm_call_id=call_id,
        reason=reason,
        retryable=retryable,
        timed_out=timed_out,
        status_code=status_code,
        body_excerpt=body_excerpt,
    )


def _read_quietly(response: httpx.Response) -> None:
    """Read an error response's body; a body that breaks off leaves what arrived."""
    try:
        response.read()
    except httpx.HTTPError:
        pass


def _status_error(call_id: str, url: str, response: httpx.Response) -> LLMError:
    """The LLMError for an HTTP status >= 300 (redirects are not followed), with the
    API's own message when the body is an OpenAI error object
    (``{"error": {"message": ...}}``)."""
    status = response.status_code
    try:
        raw = response.content
    except httpx.ResponseNotRead:
        raw = b""
    detail = _api_error_message(raw)
    retryable = status in RETRYABLE_STATUS_CODES or status >= 500
    advice = (
        "retryable: a new call may succeed"
        if retryable
        else "not retryable: fix the request or configuration"
    )
    excerpt = _excerpt(raw)
    text = f"LLM call {call_id} to {url} failed with HTTP {status}"
    if detail:
        text += f": {detail}"
    elif excerpt:
        text += f": {excerpt}"
    return _error(
        call_id,
        f"{text} ({advice})",
        "http_status",
        retryable=retryable,
        status_code=status,
        body_excerpt=excerpt,
    )


def _api_error_message(raw: bytes) -> str | None:
    """``error.message`` (or a string ``error``) of a JSON error body, else None."""
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return _excerpt(error["message"])
    if isinstance(error, str):
        return _excerpt(error)
    return None


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


def _tool_call_id(call_id: str, index: int) -> str:
    """A deterministic id for a tool call the server sent without one."""
    digest = hashlib.sha256(call_id.encode()).hexdigest()[:10]
    return f"call_{digest}_{index}"


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
        raise _error(
            call_id,
            f"LLM call {call_id}: the answer is not JSON ({exc})",
            "not_json",
            body_excerpt=_excerpt(raw),
        ) from None
    if isinstance(data, dict) and data.get("error") is not None and "choices" not in data:
        detail = (
            _api_error_message(raw.encode() if isinstance(raw, str) else raw) or "unknown error"
        )
        raise _error(
            call_id,
            f"LLM call {call_id}: the API answered an error: {detail}",
            "api_error",
            body_excerpt=_excerpt(raw),
        )
    choices = data.get("choices") if isinstance(data, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise _error(
            call_id,
            f"LLM call {call_id}: the answer has no choices",
            "no_choices",
            body_excerpt=_excerpt(raw),
        )
    message = choices[0].get("message")
    if not isinstance(message, dict):
        raise _error(
            call_id,
            f"LLM call {call_id}: choices[0] has no message object",
            "bad_message",
            body_excerpt=_excerpt(raw),
        )
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        raise _error(
            call_id,
            f"LLM call {call_id}: message content is {type(content).__name__}, not a string",
            "bad_message",
            body_excerpt=_excerpt(raw),
        )
    raw_calls = message.get("tool_calls") or []
    if not isinstance(raw_calls, list):
        raise _error(
            call_id,
            f"LLM call {call_id}: tool_calls is not a list",
            "bad_tool_call",
            body_excerpt=_excerpt(raw),
        )
    calls = []
    for i, item in enumerate(raw_calls):
        function = item.get("function") if isinstance(item, dict) else None
        if not isinstance(function, dict):
            raise _bad_tool_call(call_id, i, "has no function object", raw)
        ident = item.get("id")
        calls.append(
            _finish_tool_call(
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


def _interrupt(response: httpx.Response) -> None:
    """Shut the socket of ``response`` down from another thread (a cancel), so a read
    blocked on it returns at once (closing it would not wake the reader, and the
    connection pool's locks belong to the reading thread). Best effort: a response
    without a reachable socket is left to its timeout."""
    stream = response.extensions.get("network_stream")
    sock = stream.get_extra_info("socket") if stream is not None else None
    if sock is None:
        return
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:  # already closed or not connected: nothing is blocked on it
        pass


def _bad_tool_call(call_id: str, index: int, problem: str, raw: Any) -> LLMError:
    return _error(
        call_id,
        f"LLM call {call_id}: tool call {index} {problem}",
        "bad_tool_call",
        body_excerpt=_excerpt(
            raw if isinstance(raw, (str, bytes)) else json.dumps(raw, default=str)
        ),
    )


def _finish_tool_call(
    call_id: str, index: int, ident: Any, name: Any, arguments: Any, raw: Any
) -> ToolCall:
    """Validate one tool call's parts and build the :class:`ToolCall`."""
    if not isinstance(name, str) or not name:
        raise _bad_tool_call(call_id, index, "has no function name", raw)
    if not isinstance(arguments, str):
        kind = "missing" if arguments is None else type(arguments).__name__
        raise _bad_tool_call(
            call_id, index, f"({name}) has arguments that are {kind}, not a JSON string", raw
        )
    if not isinstance(ident, str) or not ident:
        ident = _tool_call_id(call_id, index)
    return ToolCall(ident, name, arguments)


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
        """Read events until ``data: [DONE]``; see :meth:`OpenAICompatibleProvider.complete`."""
        done = False
        for event, data in _sse_events(response.iter_lines(), cancellation):
            if data.strip() == "[DONE]":
                done = True
                break
            self._chunk(event, data, on_token)
        if not done:
            raise _error(
                self.call_id,
                f"LLM call {self.call_id}: the event stream ended without data: [DONE]; the answer may be truncated",
                "stream_incomplete",
                retryable=True,
            )
        if not self.saw_choice:
            raise _error(
                self.call_id,
                f"LLM call {self.call_id}: the event stream carried no choices",
                "no_choices",
            )
        calls = tuple(
            _finish_tool_call(self.call_id, i, c["id"], c["name"], "".join(c["arguments"]), c)
            for i, c in enumerate(self.calls[k] for k in sorted(self.calls))
        )
        content = "".join(self.content) if self.saw_content else None
        return LLMResponse(self.call_id, content, calls, self.usage, self.model, self.finish_reason)

    def _bad(self, problem: str, data: str) -> LLMError:
        return _error(
            self.call_id,
            f"LLM call {self.call_id}: malformed stream chunk: {problem}",
            "bad_chunk",
            body_excerpt=_excerpt(data),
        )

    def _chunk(self, event: str, data: str, on_token: TokenSink | None) -> None:
        try:
            chunk = json.loads(data)
        except (ValueError, RecursionError):
            raise self._bad("not JSON", data) from None
        if not isinstance(chunk, dict):
            raise self._bad("not a JSON object", data)
        if event == "error" or chunk.get("error") is not None:
            detail = _api_error_message(data.encode()) or "unknown error"
            raise _error(
                self.call_id,
                f"LLM call {self.call_id}: the API sent an error mid-stream: {detail}",
                "api_error",
                body_excerpt=_excerpt(data),
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
                raise _error(
                    self.call_id,
                    f"LLM call {self.call_id}: tool call {index} has arguments that are "
                    f"{type(fragment).__name__}, not a JSON string",
                    "bad_tool_call",
                    body_excerpt=_excerpt(data),
                )
            call["arguments"].append(fragment)


def _sse_events(
    lines: Iterator[str], cancellation: CancellationToken | None
) -> Iterator[tuple[str, str]]:
    """Server-sent events of ``lines`` as ``(event type, data)`` pairs (WHATWG HTML
    "server-sent events" parsing: ``data`` lines of one event are joined with newlines,
    a blank line dispatches, ``:`` comments and ``id``/``retry`` fields are ignored). An
    event not yet dispatched when the lines end is still yielded (lenient: some servers
    omit the last blank line). The cancellation token is checked before each line.

    Raises:
        Cancelled: the token was cancelled.
    """
    event = ""
    data: list[str] = []
    for line in lines:
        if cancellation is not None:
            cancellation.raise_if_cancelled()
        if not line:
            if data:
                yield event or "message", "\n".join(data)
            event, data = "", []
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "data":
            data.append(value)
        elif field == "event":
            event = value
    if data:
        yield event or "message", "\n".join(data)
