"""A scripted LLM server on a loopback address, speaking OpenAI chat completions and
Anthropic Messages.

For tests and demos of :class:`phronomy_fsm.agent.openai.OpenAICompatibleProvider` —
the library's own tests and those of applications built on it (``docs/getting-started.md``,
"A local stub of the API"): standard library only (``http.server``, ``threading``), so
it runs anywhere Python does, and it binds loopback addresses only (it is a test
double, not a server to expose). It answers ``POST .../chat/completions`` (any prefix, e.g. ``/v1``) with the next
*step* of a script, as one JSON body or — when the request says ``"stream": true`` — as
server-sent events shaped like OpenAI's (content split into several deltas, each tool
call's arguments split across chunks, a finish chunk, a usage chunk when
``stream_options.include_usage`` is set, then ``data: [DONE]``). It answers
``POST .../messages`` with the same steps in the Anthropic Messages shape, JSON or
streamed (:mod:`phronomy_fsm.testing._stub_anthropic` says how each key reads there), for
:class:`phronomy_fsm.agent.anthropic.AnthropicProvider`. ``GET .../models`` lists the
stub's model.

A step is a dict; every key is optional:

``content`` (str)
    the assistant text.
``tool_calls`` (list)
    ``{"name": str, "arguments": dict | str, "id": str}``; dict arguments are encoded
    as JSON, a string is sent verbatim (to script malformed JSON); ``id`` defaults to
    ``call_<request number>_<i>``.
``usage`` (dict | None)
    ``{"prompt_tokens", "completion_tokens"}``; default 10 and 5; ``None`` omits it.
``model`` (str)
    the model name to report; default: the request's ``model``.
``status`` (int) / ``body`` (str) / ``content_type`` (str)
    answer this HTTP status with this raw body (default for a status >= 400: an
    OpenAI-style ``{"error": {...}}`` object).
``delay_seconds`` (float)
    wait before answering (the response headers are late: a client read timeout fires).
``chunk_delay_seconds`` (float)
    wait between stream chunks (for cancellation mid-stream).
``stream_break`` (true | "abort")
    streaming only: ``true`` ends the body cleanly after the first content chunk,
    without ``data: [DONE]``; ``"abort"`` drops the connection mid-body instead.
``interleave_tool_calls`` (bool)
    streaming only: send the argument fragments of several tool calls alternately.
``malformed`` (str)
    ``"not_json"`` (a non-JSON body, or a non-JSON ``data:`` line when streaming),
    ``"no_choices"`` (a JSON body, or chunks, without choices), ``"bad_tool_call"`` (a
    tool call without a function name), ``"tool_args_object"`` (tool-call arguments
    sent as a JSON object, not a string).

The step for the n-th request (0-based) is ``script[n]``; a step may also be a callable
``(body: dict, n: int) -> dict``, and ``script`` itself may be one callable. Past the
end of a list the server answers HTTP 500 ``stub script exhausted``. With no script at
all it echoes the last user message (``"echo: ..."``).

Importable::

    from phronomy_fsm.testing import StubLLMServer

    with StubLLMServer(script=[{"content": "hi"}]) as server:
        provider = OpenAICompatibleProvider(base_url=server.base_url, model="m")
        ...
        server.requests[0].body["messages"], server.requests[0].headers["idempotency-key"]

Runnable::

    python -m phronomy_fsm.testing.stub_llm [--host 127.0.0.1] [--port 0] [--script steps.json]

where ``steps.json`` holds a JSON list of steps. Once it listens it prints its base URL
(``http://127.0.0.1:PORT/v1``) alone on the first line of stdout, then serves until
SIGINT or SIGTERM (exit status 0; 1 for an unreadable script, 2 for bad arguments).
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import signal
import socket
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

from phronomy_fsm.testing import _stub_anthropic as _anthropic
from phronomy_fsm.testing._stub_text import split_fixed, split_words

Step = dict[str, Any]
StepSource = Callable[[dict[str, Any], int], Step]
Script = Sequence["Step | StepSource"] | StepSource


@dataclass
class ReceivedRequest:
    """One request the stub received.

    Attributes:
        index: 0-based arrival order among LLM requests (both dialects: one script).
        path: the request path, e.g. ``/v1/chat/completions``.
        headers: header names in lower case → value.
        body: the decoded JSON body (``None`` if it was not JSON).
        outcome: ``pending`` while answering, then ``answered``,
            ``client_disconnected`` (writing failed: the client went away),
            ``aborted`` (the step dropped the connection) or ``stopped`` (the server
            was closed while the step waited).
        done: set once the answer is finished, whatever the outcome.
    """

    index: int
    path: str
    headers: dict[str, str]
    body: Any
    outcome: str = "pending"
    done: threading.Event = field(default_factory=threading.Event, repr=False)


def is_loopback_host(host: str) -> bool:
    """Tell whether ``host`` is ``localhost`` or a loopback IP address (``127.0.0.0/8``, ``::1``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class ClientGone(Exception):
    """Writing to the client failed."""


class Stopped(Exception):
    """The server was closed while a step waited."""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def setup(self) -> None:
        super().setup()
        self.server.stub.track(self.connection, True)

    def finish(self) -> None:
        self.server.stub.track(self.connection, False)
        try:
            super().finish()
        except OSError:
            pass

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.verbose:
            sys.stderr.write("stub: " + (format % args) + "\n")

    # ----------------------------------------------------------------- routing

    def do_GET(self) -> None:
        if self.path.rstrip("/").endswith("/models"):
            self.send_json(
                200, {"object": "list", "data": [{"id": self.server.model, "object": "model"}]}
            )
        else:
            self.send_json(
                404, {"error": {"message": f"no route {self.path}", "type": "not_found"}}
            )

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        path = self.path.split("?", 1)[0].rstrip("/")
        anthropic = path.endswith("/messages")
        if not anthropic and not path.endswith("/chat/completions"):
            self.send_json(
                404, {"error": {"message": f"no route {self.path}", "type": "not_found"}}
            )
            return
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        record = self.server.stub.record(
            self.path, {k.lower(): v for k, v in self.headers.items()}, body
        )
        try:
            if not isinstance(body, dict):
                self.send_json(
                    400,
                    {
                        "error": {
                            "message": "request body is not a JSON object",
                            "type": "invalid_request_error",
                        }
                    },
                )
            elif anthropic:
                _anthropic.answer(self, record, body)
            else:
                self._answer(record, body)
            if record.outcome == "pending":
                record.outcome = "answered"
        except ClientGone:
            record.outcome = "client_disconnected"
            self.close_connection = True
        except Stopped:
            record.outcome = "stopped"
            self.close_connection = True
        finally:
            record.done.set()

    # ------------------------------------------------------------------ answer

    def _answer(self, record: ReceivedRequest, body: dict[str, Any]) -> None:
        step = self.server.stub.step_for(body, record.index)
        self.wait(step.get("delay_seconds", 0))
        if "status" in step or "body" in step:
            status = int(step.get("status", 200))
            raw = step.get("body")
            if raw is None:
                kind = (
                    "rate_limit_error"
                    if status == 429
                    else "server_error"
                    if status >= 500
                    else "invalid_request_error"
                )
                raw = json.dumps(
                    {"error": {"message": f"stub error {status}", "type": kind, "code": None}}
                )
            self.send_raw(status, raw.encode(), step.get("content_type", "application/json"))
            return
        model = step.get("model") or body.get("model") or self.server.model
        if body.get("stream"):
            self._stream(record, body, step, model)
        else:
            self._send_completion(record, step, model)

    def _tool_calls(self, record: ReceivedRequest, step: Step) -> list[dict[str, Any]]:
        calls = []
        for i, call in enumerate(step.get("tool_calls") or ()):
            args = call.get("arguments", {})
            arguments: Any = args if isinstance(args, str) else json.dumps(args, sort_keys=True)
            if step.get("malformed") == "tool_args_object":
                arguments = args if not isinstance(args, str) else {"raw": args}
            function: dict[str, Any] = {"name": call["name"], "arguments": arguments}
            if step.get("malformed") == "bad_tool_call":
                del function["name"]
            calls.append(
                {
                    "id": call.get("id") or f"call_{record.index}_{i}",
                    "type": "function",
                    "function": function,
                }
            )
        return calls

    def usage(self, step: Step) -> dict[str, int] | None:
        if "usage" in step:
            return step["usage"]
        return {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}

    def _send_completion(self, record: ReceivedRequest, step: Step, model: str) -> None:
        malformed = step.get("malformed")
        if malformed == "not_json":
            self.send_raw(200, b"<html><body>502 Bad Gateway (not JSON)</body></html>", "text/html")
            return
        content = step.get("content")
        if content is None and "tool_calls" not in step and "content" not in step:
            content = self.server.stub.echo(record)
        message: dict[str, Any] = {"role": "assistant", "content": content}
        calls = self._tool_calls(record, step)
        if calls:
            message["tool_calls"] = calls
        data: dict[str, Any] = {
            "id": f"chatcmpl-stub-{record.index}",
            "object": "chat.completion",
            "created": 0,
            "model": model,
            "choices": [
                {"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}
            ],
        }
        if malformed == "no_choices":
            del data["choices"]
        usage = self.usage(step)
        if usage is not None:
            data["usage"] = usage
        self.send_json(200, data)

    def _stream(
        self, record: ReceivedRequest, body: dict[str, Any], step: Step, model: str
    ) -> None:
        malformed = step.get("malformed")
        base = {
            "id": f"chatcmpl-stub-{record.index}",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": model,
        }

        def chunk(delta: dict[str, Any] | None, finish: str | None = None) -> str:
            data: dict[str, Any] = dict(base)
            if malformed != "no_choices":
                data["choices"] = [{"index": 0, "delta": delta or {}, "finish_reason": finish}]
            return json.dumps(data)

        content = step.get("content")
        if content is None and "tool_calls" not in step and "content" not in step:
            content = self.server.stub.echo(record)
        events = [chunk({"role": "assistant", "content": ""})]
        for piece in split_words(content or ""):
            events.append(chunk({"content": piece}))
        if malformed == "not_json":
            events.insert(2, "{not json")
        calls = self._tool_calls(record, step)
        fragments: list[list[dict[str, Any]]] = []
        for i, call in enumerate(calls):
            args = call["function"].get("arguments", "")
            first_fn = {k: v for k, v in call["function"].items() if k != "arguments"}
            first_fn["arguments"] = ""
            own = [{"index": i, "id": call["id"], "type": "function", "function": first_fn}]
            if isinstance(args, str):
                own += [{"index": i, "function": {"arguments": part}} for part in split_fixed(args)]
            else:
                own.append({"index": i, "function": {"arguments": args}})
            fragments.append(own)
        if step.get("interleave_tool_calls"):
            longest = max((len(f) for f in fragments), default=0)
            ordered = [f[j] for j in range(longest) for f in fragments if j < len(f)]
        else:
            ordered = [d for f in fragments for d in f]
        events += [chunk({"tool_calls": [d]}) for d in ordered]
        events.append(chunk({}, "tool_calls" if calls else "stop"))
        usage = self.usage(step)
        if usage is not None and (body.get("stream_options") or {}).get("include_usage"):
            events.append(json.dumps({**base, "choices": [], "usage": usage}))
        events.append("[DONE]")
        breaking = step.get("stream_break")
        if breaking:
            events = events[:2]

        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        delay = step.get("chunk_delay_seconds", 0)
        for n, data in enumerate(events):
            if n and delay:
                self.wait(delay)
            self.write_chunk(f"data: {data}\n\n".encode())
        if breaking == "abort":
            record.outcome = "aborted"
            self.close_connection = True
            try:
                self.wfile.flush()
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return
        self.write(b"0\r\n\r\n")

    # ------------------------------------------------------------------- I/O

    def wait(self, seconds: float) -> None:
        if seconds and self.server.stub.stopping.wait(seconds):
            raise Stopped()

    def write(self, data: bytes) -> None:
        try:
            self.wfile.write(data)
            self.wfile.flush()
        except OSError as exc:
            raise ClientGone() from exc

    def write_chunk(self, data: bytes) -> None:
        self.write(b"%x\r\n%s\r\n" % (len(data), data))

    def send_raw(self, status: int, raw: bytes, content_type: str) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
        except OSError as exc:
            raise ClientGone() from exc
        self.write(raw)

    def send_json(self, status: int, data: Any) -> None:
        self.send_raw(status, json.dumps(data).encode(), "application/json")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    stub: StubLLMServer
    model: str
    verbose: bool

    def handle_error(self, request: Any, client_address: Any) -> None:
        if self.verbose:
            super().handle_error(request, client_address)


class _Server6(_Server):
    address_family = socket.AF_INET6


class StubLLMServer:
    """A scripted LLM server on ``host:port``, answering chat completions and Anthropic
    Messages (see the module docstring).

    Args:
        script: a list of steps (dicts or callables ``(body, n) -> dict``), or one
            callable; ``None`` echoes the last user message.
        port: the TCP port; ``0`` picks a free one.
        host: the loopback address to bind (``127.0.0.1`` by default, ``::1`` or
            ``localhost``).
        model: the model name reported when neither the step nor the request names one.
        verbose: log requests and handler errors to stderr.

    Attributes:
        base_url: ``http://host:port/v1``.
        requests: :class:`ReceivedRequest` records in arrival order.

    Raises:
        ValueError: ``host`` is not a loopback address.
        OSError: the address cannot be bound (the port is taken).

    The server starts serving on construction (a daemon thread) and stops on
    :meth:`close` or at the end of a ``with`` block. Concurrency: requests are handled on
    one thread each; ``requests`` is appended under a lock.
    """

    def __init__(
        self,
        script: Script | None = None,
        *,
        port: int = 0,
        host: str = "127.0.0.1",
        model: str = "stub-model",
        verbose: bool = False,
    ) -> None:
        if not is_loopback_host(host):
            raise ValueError(
                f"the stub LLM server binds loopback addresses only, not {host!r} "
                "(127.0.0.1, ::1 or localhost)"
            )
        self.script = script
        self.requests: list[ReceivedRequest] = []
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self._connections: set[socket.socket] = set()
        server_class = _Server6 if ":" in host else _Server
        self._server = server_class((host, port), _Handler)
        self._server.stub = self
        self._server.model = model
        self._server.verbose = verbose
        self.host = host
        self.port: int = self._server.server_port
        shown = f"[{host}]" if ":" in host else host
        self.base_url = f"http://{shown}:{self.port}/v1"
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.02,), name="stub-llm-server", daemon=True
        )
        self._thread.start()
        self._closed = False

    def track(self, connection: socket.socket, live: bool) -> None:
        """Remember (``live``) or forget an open client connection."""
        with self._lock:
            if live:
                self._connections.add(connection)
            else:
                self._connections.discard(connection)

    def record(self, path: str, headers: dict[str, str], body: Any) -> ReceivedRequest:
        """Append and return the record of a new chat-completions request."""
        with self._lock:
            record = ReceivedRequest(len(self.requests), path, headers, body)
            self.requests.append(record)
        return record

    def step_for(self, body: dict[str, Any], index: int) -> Step:
        """The step answering request ``index`` (see the module docstring)."""
        script = self.script
        if script is None:
            return {}
        if callable(script):
            return script(body, index)
        if index >= len(script):
            return {
                "status": 500,
                "body": json.dumps(
                    {
                        "error": {
                            "message": f"stub script exhausted after {len(script)} steps",
                            "type": "server_error",
                        }
                    }
                ),
            }
        step = script[index]
        return step(body, index) if callable(step) else step

    def echo(self, record: ReceivedRequest) -> str:
        """``"echo: <last user message>"`` for a request without scripted content."""
        messages = record.body.get("messages") if isinstance(record.body, dict) else None
        for message in reversed(messages or []):
            if isinstance(message, dict) and message.get("role") == "user":
                return f"echo: {message.get('content')}"
        return "echo"

    def close(self) -> None:
        """Stop serving, wake waiting steps, drop open client connections (kept-alive
        ones included, as a dead server would) and close the socket. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self.stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
        with self._lock:
            connections = list(self._connections)
        for connection in connections:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def main(argv: Sequence[str] | None = None) -> int:
    """Serve a script file until SIGINT or SIGTERM (``python -m phronomy_fsm.testing.stub_llm``).

    Prints the base URL on the first line of stdout once the server listens.

    Returns:
        The exit status: 0 after a signal, 1 when the script cannot be read; bad
        arguments (a non-loopback ``--host``) exit 2 through argparse.
    """
    parser = argparse.ArgumentParser(
        prog="python -m phronomy_fsm.testing.stub_llm",
        description="A scripted LLM server (OpenAI chat completions and Anthropic "
        "Messages) on a loopback address, for tests. Prints its base URL on stdout when "
        "ready.",
    )
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="loopback address to bind: 127.0.0.1 (default), ::1 or localhost",
    )
    parser.add_argument(
        "--port", type=int, default=0, help="TCP port; 0 (the default) picks a free one"
    )
    parser.add_argument(
        "--script", help="JSON file holding a list of steps; default: echo the last user message"
    )
    parser.add_argument("--model", default="stub-model", help="model name to report")
    parser.add_argument("--verbose", action="store_true", help="log requests to stderr")
    args = parser.parse_args(argv)
    if not is_loopback_host(args.host):
        parser.error(f"--host {args.host}: only loopback addresses (127.0.0.1, ::1, localhost)")
    script = None
    if args.script:
        try:
            with open(args.script, encoding="utf-8") as handle:
                script = json.load(handle)
        except (OSError, ValueError) as exc:
            print(f"stub: cannot read script {args.script}: {exc}", file=sys.stderr)
            return 1
        if not isinstance(script, list) or not all(isinstance(s, dict) for s in script):
            print(f"stub: {args.script} must hold a JSON list of step objects", file=sys.stderr)
            return 1
    server = StubLLMServer(
        script, port=args.port, host=args.host, model=args.model, verbose=args.verbose
    )
    signal.signal(signal.SIGTERM, lambda _signum, _frame: server.stopping.set())
    print(server.base_url, flush=True)
    try:
        server.stopping.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
    return 0


__all__ = ["ReceivedRequest", "StubLLMServer", "is_loopback_host", "main"]


if __name__ == "__main__":
    sys.exit(main())
