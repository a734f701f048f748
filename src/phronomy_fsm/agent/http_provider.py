"""What the HTTP LLM providers share: configuration, sending, cancellation, error mapping.

This module owns the parts of an HTTP provider that do not depend on the wire format:
reading the base URL, API key and model from arguments or the environment; one pooled
``httpx.Client`` per provider; sending one ``POST`` with the durable ``llm_call_id`` as
``Idempotency-Key`` and ``X-Request-Id``; ending a blocked exchange at once when the
execution is cancelled; mapping every httpx failure and HTTP status to an
:class:`~phronomy_fsm.errors.LLMError` with stable attributes; parsing server-sent events.
The wire formats live in :mod:`phronomy_fsm.agent.openai` (chat completions) and
:mod:`phronomy_fsm.agent.anthropic` (Messages), each a subclass of :class:`HTTPProvider`
that builds the body and reads the answer.

No provider retries on its own: whether a call whose outcome is unknown is sent again is
the agent's re-send policy (``docs/agent.md``, "Re-send policies").

Every failure is an :class:`~phronomy_fsm.errors.LLMError` with these attributes (so a
caller can branch on data, not on message text):

* ``llm_call_id`` — the request's durable id;
* ``reason`` — a stable code: ``http_status``, ``timeout``, ``connection``,
  ``transport``, ``not_json``, ``api_error``, ``no_choices``, ``bad_message``,
  ``bad_tool_call``, ``bad_chunk``, ``stream_incomplete``;
* ``retryable`` — a *new* call may succeed (HTTP 408/429/5xx — Anthropic's 529
  "overloaded" included —, timeouts, connection failures). It never means the failed
  call had no effect: the server may have run and billed it;
* ``timed_out`` — an httpx timeout (connect, read, write or pool) fired;
* ``status_code`` — the HTTP status, or ``None`` when there was no HTTP answer;
* ``body_excerpt`` — at most 300 characters of the offending body or chunk, or ``None``.

No httpx or json exception escapes :meth:`HTTPProvider.complete`.
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
from typing import Any, ClassVar, Self

import attrs
import httpx

from phronomy_fsm.agent.providers import TokenSink
from phronomy_fsm.agent.types import LLMRequest, LLMResponse, ToolCall
from phronomy_fsm.errors import ConfigurationError, LLMError
from phronomy_fsm.runtime.cancellation import CancellationToken

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


def excerpt(text: str | bytes | None) -> str | None:
    """At most :data:`EXCERPT_CHARS` characters of ``text`` on one line."""
    if text is None:
        return None
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    flat = " ".join(text.split())
    return flat if len(flat) <= EXCERPT_CHARS else flat[: EXCERPT_CHARS - 3] + "..."


class HTTPProvider:
    """Base of the HTTP providers: configuration, the pooled client, :meth:`complete`.

    A subclass sets the class attributes below and implements :meth:`build_body`,
    :meth:`parse_body` and :meth:`read_stream` (and :meth:`auth_headers` when the API
    does not take ``Authorization: Bearer``).

    Args:
        base_url: the API root (e.g. ``https://api.openai.com/v1``); requests go to
            ``{base_url}{endpoint}``. Default: the first of :attr:`base_url_variables`
            that is set, else :attr:`default_base_url`.
        api_key: default: the first of :attr:`api_key_variables` that is set. May be
            absent only for a loopback ``base_url`` (see :func:`is_loopback_url`).
        model: the model sent with every request; default: the first of
            :attr:`model_variables` that is set.
        timeout_seconds: the httpx timeout, in seconds, applied separately to
            connecting, to each read, to each write and to waiting for a pooled
            connection. A stream that keeps producing events is never cut off; a server
            silent for this long fails the call with ``timed_out=True``.
        extra_headers: more headers for every request (a gateway's routing or tenant
            headers). They cannot replace ``Idempotency-Key`` or ``X-Request-Id``.
        transport: an ``httpx.BaseTransport`` to send through; default: httpx's.

    Raises:
        ConfigurationError: no model, no API key for a non-loopback server, a
            ``base_url`` that is not an ``http``/``https`` URL, or a non-positive
            ``timeout_seconds`` (the message names the variable to set).

    Concurrency: one ``httpx.Client`` (a thread-safe pool) is created here and reused
    by every call; :meth:`complete` may run on several worker threads at once. Call
    :meth:`close` (or use ``with``) to release its connections.
    """

    #: The provider's name in traces (``gen_ai.provider.name``, ``docs/tracing.md``).
    provider_name: str = "http"
    #: The path after ``base_url`` that requests are posted to.
    endpoint: ClassVar[str] = ""
    default_base_url: ClassVar[str] = ""
    base_url_variables: ClassVar[tuple[str, ...]] = ()
    api_key_variables: ClassVar[tuple[str, ...]] = ()
    model_variables: ClassVar[tuple[str, ...]] = ()

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
        base_url = (base_url or _from_env(self.base_url_variables) or self.default_base_url).rstrip(
            "/"
        )
        base_variable = self.base_url_variables[0] if self.base_url_variables else "base_url"
        if urllib.parse.urlsplit(base_url).scheme not in ("http", "https"):
            raise ConfigurationError(
                f"base_url {base_url!r} is not an http(s) URL; pass base_url= or set {base_variable}",
                base_url=base_url,
            )
        model = model or _from_env(self.model_variables)
        if not model:
            raise ConfigurationError(
                "no LLM model configured: pass model= or set "
                + " (or ".join(self.model_variables)
                + ")" * (len(self.model_variables) - 1)
            )
        api_key = api_key or _from_env(self.api_key_variables)
        if not api_key and not is_loopback_url(base_url):
            raise ConfigurationError(
                f"no API key for {base_url}: pass api_key= or set "
                + " (or ".join(self.api_key_variables)
                + ")" * (len(self.api_key_variables) - 1)
                + "; a key may be omitted only for a server on localhost",
                base_url=base_url,
            )
        if not timeout_seconds > 0:
            raise ConfigurationError(f"timeout_seconds must be positive, not {timeout_seconds!r}")
        self.base_url = base_url
        self.model = model
        self.timeout_seconds = float(timeout_seconds)
        self.url = f"{base_url}{self.endpoint}"
        headers = {"Accept": "application/json"}
        headers.update(extra_headers or {})
        if api_key:
            headers.update(self.auth_headers(api_key))
        headers.update(self.protocol_headers())
        self._has_key = bool(api_key)
        self._client = httpx.Client(
            headers=headers,
            timeout=httpx.Timeout(self.timeout_seconds),
            transport=transport,
            follow_redirects=False,
        )

    def __repr__(self) -> str:
        key = "set" if self._has_key else "none"
        return f"<{type(self).__name__} {self.url} model={self.model!r} api_key={key}>"

    def close(self) -> None:
        """Close the pooled connections. Calls after this fail with an LLMError
        (``reason="transport"``). Idempotent."""
        self._client.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ------------------------------------------------------------ wire format

    def auth_headers(self, api_key: str) -> dict[str, str]:
        """The headers carrying ``api_key``: ``Authorization: Bearer <key>``."""
        return {"Authorization": f"Bearer {api_key}"}

    def protocol_headers(self) -> dict[str, str]:
        """Headers the API requires on every request besides the key (none here)."""
        return {}

    def build_body(self, request: LLMRequest) -> dict[str, Any]:
        """The JSON body for ``request`` (the subclass's wire format)."""
        raise NotImplementedError

    def parse_body(self, call_id: str, raw: bytes | str) -> LLMResponse:
        """Parse a non-streamed answer body. Raises LLMError."""
        raise NotImplementedError

    def read_stream(
        self,
        call_id: str,
        response: httpx.Response,
        on_token: TokenSink | None,
        cancellation: CancellationToken | None,
    ) -> LLMResponse:
        """Read a streamed answer (server-sent events) to its end. Raises LLMError,
        Cancelled, and what httpx raises while reading (mapped by :meth:`complete`)."""
        raise NotImplementedError

    # ------------------------------------------------------------------- call

    def complete(
        self,
        request: LLMRequest,
        *,
        on_token: TokenSink | None = None,
        cancellation: CancellationToken | None = None,
    ) -> LLMResponse:
        """Run one LLM call (the :class:`~phronomy_fsm.agent.providers.Provider`
        protocol).

        Sends ``Idempotency-Key`` and ``X-Request-Id`` equal to ``request.llm_call_id``
        so a gateway may deduplicate a repeated call. When ``request.stream`` the answer
        is read as server-sent events and ``on_token`` receives each text delta, in
        order, on this thread; a server that ignores ``stream`` and answers with one JSON
        body is accepted (``on_token`` then receives the whole content once).

        Args:
            request: messages, tools, ``stream`` and the durable ``llm_call_id``.
            on_token: called with each text delta when streaming. What it raises
                propagates unchanged.
            cancellation: checked before sending, between stream lines and after the
                answer arrived; cancelling it while the exchange or a read is blocked
                waiting for the server shuts the socket, so the call ends at once with
                Cancelled.

        Returns:
            An :class:`LLMResponse` with ``llm_call_id == request.llm_call_id``, the
            content (``None`` when the model sent none), the tool calls (arguments as a
            JSON string; an id is derived from the ``llm_call_id`` when the server sent
            none), the usage (zeros when not reported) and the model the server
            reported (else the configured one).

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
            raise llm_error(
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
            raise llm_error(
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
                result = self.read_stream(call_id, response, on_token, cancellation)
            else:
                response.read()
                result = self.parse_body(call_id, response.content)
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
            return llm_error(
                call_id,
                f"{where} timed out ({type(exc).__name__}, timeout_seconds={self.timeout_seconds:g}); "
                "the server may still have run it; a new call is the agent's decision",
                "timeout",
                retryable=True,
                timed_out=True,
            )
        if isinstance(exc, httpx.ConnectError):
            return llm_error(
                call_id,
                f"{where} could not connect: {exc}; check the base URL and that the server is running",
                "connection",
                retryable=True,
            )
        return llm_error(
            call_id,
            f"{where} failed in transport: {type(exc).__name__}: {exc}",
            "transport",
            retryable=isinstance(exc, httpx.TransportError),
        )


# ------------------------------------------------------------------- errors


def llm_error(
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
    API's own message when the body is an error object with ``error.message`` (OpenAI's
    ``{"error": {...}}`` and Anthropic's ``{"type": "error", "error": {...}}`` both)."""
    status = response.status_code
    try:
        raw = response.content
    except httpx.ResponseNotRead:
        raw = b""
    detail = api_error_message(raw)
    retryable = status in RETRYABLE_STATUS_CODES or status >= 500
    advice = (
        "retryable: a new call may succeed"
        if retryable
        else "not retryable: fix the request or configuration"
    )
    body_excerpt = excerpt(raw)
    text = f"LLM call {call_id} to {url} failed with HTTP {status}"
    if detail:
        text += f": {detail}"
    elif body_excerpt:
        text += f": {body_excerpt}"
    return llm_error(
        call_id,
        f"{text} ({advice})",
        "http_status",
        retryable=retryable,
        status_code=status,
        body_excerpt=body_excerpt,
    )


def api_error_message(raw: bytes) -> str | None:
    """``error.message`` (or a string ``error``) of a JSON error body, else None."""
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return excerpt(error["message"])
    if isinstance(error, str):
        return excerpt(error)
    return None


def tool_call_id_for(call_id: str, index: int) -> str:
    """A deterministic id for a tool call the server sent without one."""
    digest = hashlib.sha256(call_id.encode()).hexdigest()[:10]
    return f"call_{digest}_{index}"


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


def bad_tool_call(call_id: str, index: int, problem: str, raw: Any) -> LLMError:
    return llm_error(
        call_id,
        f"LLM call {call_id}: tool call {index} {problem}",
        "bad_tool_call",
        body_excerpt=excerpt(
            raw if isinstance(raw, (str, bytes)) else json.dumps(raw, default=str)
        ),
    )


def finish_tool_call(
    call_id: str, index: int, ident: Any, name: Any, arguments: Any, raw: Any
) -> ToolCall:
    """Validate one tool call's parts and build the :class:`ToolCall`."""
    if not isinstance(name, str) or not name:
        raise bad_tool_call(call_id, index, "has no function name", raw)
    if not isinstance(arguments, str):
        kind = "missing" if arguments is None else type(arguments).__name__
        raise bad_tool_call(
            call_id, index, f"({name}) has arguments that are {kind}, not a JSON string", raw
        )
    if not isinstance(ident, str) or not ident:
        ident = tool_call_id_for(call_id, index)
    return ToolCall(ident, name, arguments)


def sse_events(
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
