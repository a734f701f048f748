"""The console's Server-Sent Events endpoint ``GET /execution/events`` (issue 24 item 5,
``docs/console.md``, "Event streams"), read with httpx from a real uvicorn server on
127.0.0.1 while an agent runtime in this process runs the execution on the same store
(a SQLite file, and a PostgreSQL database): the client disconnects midway, reconnects with ``Last-Event-ID`` and has the whole
journal exactly once; ``?after=`` resumes too; bad requests get a status, not a stream."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx

from phronomy_fsm.agent import Agent, AgentRuntime, Reply, ScriptedProvider, Tool
from phronomy_fsm.agent.journal import MESSAGE_KINDS
from phronomy_fsm.store.open import open_store
from phronomy_fsm.testing.deadlines import scaled_seconds, wait_until


def _sse(lines: Iterator[str]) -> Iterator[dict[str, str]]:
    """SSE messages of ``lines`` as ``{"id", "event", "data"}`` (fields present)."""
    message: dict[str, str] = {}
    for line in lines:
        if not line:
            if message:
                yield message
            message = {}
            continue
        field, _, value = line.partition(":")
        if field in ("id", "event", "data"):
            message[field] = value.removeprefix(" ")


def _journal(store: Any, execution_id: str) -> list[dict[str, Any]]:
    out = []
    for n, entry in enumerate(store.journal_entries(execution_id), start=1):
        data = entry.data
        if entry.kind in MESSAGE_KINDS:
            data = {k: v for k, v in data.items() if k != "context"}
        out.append({"execution_id": execution_id, "cursor": n, "kind": entry.kind, "data": data})
    return out


def test_sse_stream_resumes_with_last_event_id_and_gives_the_journal_once(
    target: str, serve: Any
) -> None:
    store = open_store(target)
    runtime = AgentRuntime(store)
    ran: list[Any] = []
    refund = Tool(
        "refund",
        lambda arguments, context: ran.append(arguments) or {"refunded": True},
        "Refund an order.",
        {"type": "object", "properties": {"order": {"type": "string"}}},
        requires_approval=True,
    )
    try:
        agent = Agent.create(
            "shop",
            runtime=runtime,
            tools=[refund],
            provider=ScriptedProvider(
                [
                    Reply(content="Refunding.", tool_calls=(("refund", {"order": "A1"}),)),
                    Reply(content="Refunded A1."),
                ]
            ),
        )
        execution_id = agent.submit("Refund A1", execution_id="shop-exec")
        timeout = httpx.Timeout(scaled_seconds(20))
        with (
            serve(target) as served,
            httpx.Client(base_url=served.url, timeout=timeout) as client,
        ):
            first: list[dict[str, str]] = []
            with client.stream("GET", "/execution/events", params={"id": execution_id}) as response:
                assert response.status_code == 200
                assert response.headers["content-type"].startswith("text/event-stream")
                for message in _sse(response.iter_lines()):
                    first.append(message)
                    if message["event"] == "approval_required":
                        break  # disconnect midway: the execution waits for a person
            assert ran == []
            last_id = first[-1]["id"]
            request_id = json.loads(first[-1]["data"])["data"]["approval_request_id"]
            agent.approve(
                execution_id, approval_request_id=request_id, wait_seconds=scaled_seconds(20)
            )
            wait_until(lambda: ran, 10, "the approved refund to run")

            second: list[dict[str, str]] = []
            with client.stream(
                "GET",
                "/execution/events",
                params={"id": execution_id},
                headers={"Last-Event-ID": last_id},
            ) as response:
                assert response.status_code == 200
                second = list(_sse(response.iter_lines()))  # ends after the terminal event

            # ?after= resumes the same way (no header): the last two events
            journal = _journal(store, execution_id)
            tail = client.get(
                "/execution/events", params={"id": execution_id, "after": len(journal) - 2}
            )
            refused = [
                client.get("/execution/events", params={"id": execution_id, "after": "-1"}),
                client.get("/execution/events", params={"id": "no-such"}),
                client.get("/execution/events"),
            ]
    finally:
        runtime.close(timeout_seconds=5)
        store.close()

    got = [json.loads(m["data"]) for m in first + second]
    assert got == journal  # the two connections: every entry once, in order
    assert [int(m["id"]) for m in first + second] == list(range(1, len(journal) + 1))
    assert [m["event"] for m in first + second] == [e["kind"] for e in journal]
    assert second[-1]["event"] == "execution_completed"
    assert [json.loads(m["data"]) for m in _sse(tail.text.splitlines())] == journal[-2:]
    assert [r.status_code for r in refused] == [400, 404, 400]
