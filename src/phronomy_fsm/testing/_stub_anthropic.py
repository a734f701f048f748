"""The stub LLM server's Anthropic Messages dialect (``POST .../messages``).

:mod:`phronomy_fsm.testing.stub_llm` routes a request whose path ends in ``/messages``
here and answers it with the same script steps as a chat-completions request, shaped as
the Messages API answers (``docs/agent.md``, "The Anthropic provider"): a JSON
``{"type": "message", "content": [text and tool_use blocks], "stop_reason", "usage":
{"input_tokens", "output_tokens"}}``, or — when the body says ``"stream": true`` — the
events ``message_start``, ``ping``, ``content_block_start`` / ``content_block_delta``
(``text_delta`` split at spaces, ``input_json_delta`` in 7-character fragments) /
``content_block_stop`` per block, ``message_delta`` and ``message_stop``. A step's
``status`` answers an Anthropic error object (``overloaded_error`` for 529,
``rate_limit_error`` for 429...). ``malformed`` means here: ``not_json`` (a non-JSON
body or event), ``no_choices`` (no ``content`` list; when streaming, no
``message_start``), ``bad_tool_call`` (a ``tool_use`` without a name) and
``tool_args_object`` (an ``input`` that is a string, not an object). A step's
``usage`` keeps the chat names (``prompt_tokens``, ``completion_tokens``), sent as
``input_tokens`` and ``output_tokens``.
"""

from __future__ import annotations

import json
import socket
from typing import TYPE_CHECKING, Any

from phronomy_fsm.testing._stub_text import split_fixed, split_words

if TYPE_CHECKING:
    from phronomy_fsm.testing.stub_llm import ReceivedRequest, _Handler

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


def _echo(body: dict[str, Any]) -> str:
    """``"echo: <last user text>"``, as the chat dialect's echo."""
    for message in reversed(body.get("messages") or []):
        if not isinstance(message, dict) or message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return f"echo: {content}"
        texts: list[str] = [
            b["text"]
            for b in content or []
            if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)
        ]
        if texts:
            return "echo: " + "".join(texts)
    return "echo"


def _tool_uses(record: ReceivedRequest, step: dict[str, Any]) -> list[dict[str, Any]]:
    """The step's tool calls as ``tool_use`` blocks; ``raw`` keeps the argument text
    (for the stream's ``input_json_delta`` fragments)."""
    blocks = []
    for i, call in enumerate(step.get("tool_calls") or ()):
        args = call.get("arguments", {})
        raw = args if isinstance(args, str) else json.dumps(args, sort_keys=True)
        try:
            tool_input: Any = json.loads(raw)
        except ValueError:
            tool_input = raw  # malformed JSON scripted as a string: sent as it is
        if step.get("malformed") == "tool_args_object":
            tool_input = raw
        block: dict[str, Any] = {
            "type": "tool_use",
            "id": call.get("id") or f"toolu_{record.index}_{i}",
            "name": call["name"],
            "input": tool_input,
            "raw": raw,
        }
        if step.get("malformed") == "bad_tool_call":
            del block["name"]
        blocks.append(block)
    return blocks


def _usage(handler: _Handler, step: dict[str, Any]) -> dict[str, int] | None:
    usage = handler.usage(step)
    if usage is None:
        return None
    return {
        "input_tokens": usage.get("prompt_tokens", 0),
        "output_tokens": usage.get("completion_tokens", 0),
    }


def answer(handler: _Handler, record: ReceivedRequest, body: dict[str, Any]) -> None:
    """Answer one Messages request with the next script step (module docstring).
    Raises what the handler's writes raise (the client went away, the server stopped)."""
    stub = handler.server.stub
    step = stub.step_for(body, record.index)
    handler.wait(step.get("delay_seconds", 0))
    if "status" in step or "body" in step:
        status = int(step.get("status", 200))
        raw = step.get("body")
        if raw is None:
            kind = ERROR_TYPES.get(
                status, "api_error" if status >= 500 else "invalid_request_error"
            )
            message = "Overloaded" if status == 529 else f"stub error {status}"
            raw = json.dumps({"type": "error", "error": {"type": kind, "message": message}})
        handler.send_raw(status, raw.encode(), step.get("content_type", "application/json"))
        return
    model = step.get("model") or body.get("model") or handler.server.model
    content = step.get("content")
    if content is None and "tool_calls" not in step and "content" not in step:
        content = _echo(body)
    tool_uses = _tool_uses(record, step)
    stop_reason = "tool_use" if tool_uses else "end_turn"
    usage = _usage(handler, step)
    if body.get("stream"):
        _stream(handler, record, step, model, content, tool_uses, stop_reason, usage)
        return
    if step.get("malformed") == "not_json":
        handler.send_raw(200, b"<html><body>502 Bad Gateway (not JSON)</body></html>", "text/html")
        return
    blocks: list[dict[str, Any]] = [{"type": "text", "text": content}] if content else []
    blocks += [{k: v for k, v in b.items() if k != "raw"} for b in tool_uses]
    data: dict[str, Any] = {
        "id": f"msg_stub_{record.index}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": blocks,
        "stop_reason": stop_reason,
        "stop_sequence": None,
    }
    if step.get("malformed") == "no_choices":
        del data["content"]
    if usage is not None:
        data["usage"] = usage
    handler.send_json(200, data)


def _stream(
    handler: _Handler,
    record: ReceivedRequest,
    step: dict[str, Any],
    model: str,
    content: str | None,
    tool_uses: list[dict[str, Any]],
    stop_reason: str,
    usage: dict[str, int] | None,
) -> None:
    """Send the answer as Messages stream events (module docstring)."""
    events: list[tuple[str, str]] = []

    def add(name: str, data: dict[str, Any]) -> None:
        events.append((name, json.dumps({"type": name, **data})))

    if step.get("malformed") != "no_choices":
        add(
            "message_start",
            {
                "message": {
                    "id": f"msg_stub_{record.index}",
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": [],
                    "stop_reason": None,
                    "usage": {
                        "input_tokens": (usage or {}).get("input_tokens", 0),
                        "output_tokens": 1,
                    },
                }
            },
        )
    add("ping", {})
    index = 0
    if content:
        add("content_block_start", {"index": index, "content_block": {"type": "text", "text": ""}})
        for piece in split_words(content):
            add(
                "content_block_delta",
                {"index": index, "delta": {"type": "text_delta", "text": piece}},
            )
        add("content_block_stop", {"index": index})
        index += 1
    for block in tool_uses:
        start = {k: v for k, v in block.items() if k not in ("raw", "input")}
        start["input"] = {}
        add("content_block_start", {"index": index, "content_block": start})
        if isinstance(block["input"], str) and step.get("malformed") == "tool_args_object":
            fragments = [json.dumps(block["input"])]
        else:
            fragments = split_fixed(block["raw"])
        for fragment in fragments:
            add(
                "content_block_delta",
                {"index": index, "delta": {"type": "input_json_delta", "partial_json": fragment}},
            )
        add("content_block_stop", {"index": index})
        index += 1
    delta_usage = {"output_tokens": usage["output_tokens"]} if usage is not None else {}
    add(
        "message_delta",
        {"delta": {"stop_reason": stop_reason, "stop_sequence": None}, "usage": delta_usage},
    )
    add("message_stop", {})
    if step.get("malformed") == "not_json":
        events.insert(2, ("content_block_delta", "{not json"))
    breaking = step.get("stream_break")
    if breaking:
        events = events[:4]

    handler.send_response(200)
    handler.send_header("Content-Type", "text/event-stream")
    handler.send_header("Cache-Control", "no-cache")
    handler.send_header("Transfer-Encoding", "chunked")
    handler.end_headers()
    delay = step.get("chunk_delay_seconds", 0)
    for n, (name, data) in enumerate(events):
        if n and delay:
            handler.wait(delay)
        handler.write_chunk(f"event: {name}\ndata: {data}\n\n".encode())
    if breaking == "abort":
        record.outcome = "aborted"
        handler.close_connection = True
        try:
            handler.wfile.flush()
            handler.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        return
    handler.write(b"0\r\n\r\n")
