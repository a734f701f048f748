"""The console's event-stream endpoint: ``GET /execution/events`` as Server-Sent Events.

Streams an agent execution's events (:class:`~phronomy_fsm.agent.streams.ExecutionEvents`,
``docs/agent.md``, "Event streams") over HTTP, read through the console's read-only
store connection, so a browser's ``EventSource`` or any HTTP client can follow an
execution run by any process and resume where it left off (``docs/console.md``, "Event
streams"). Each event is one SSE message::

    id: <cursor>
    event: <journal kind>
    data: {"execution_id", "cursor", "kind", "data"}

The position to resume from is the ``Last-Event-ID`` header (what ``EventSource``
sends when it reconnects), else the ``after`` query parameter, else 0 (every event).
The response ends after the terminal ``execution_<outcome>`` event.

Must not: write to the store.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse

from phronomy_fsm.agent.streams import ExecutionEvents, read_events
from phronomy_fsm.errors import PhronomyError

from .pages import status_for

if TYPE_CHECKING:
    from .app import Console

#: Seconds between two store reads while the execution produces nothing new.
POLL_SECONDS = 0.25
#: What a client's ``EventSource`` waits before it reconnects (SSE ``retry``, ms).
RETRY_MILLISECONDS = 1000


def _cursor(request: Request) -> int | None:
    """``Last-Event-ID``, else ``?after=``, else 0; None when it is not an int ≥ 0."""
    raw = request.headers.get("last-event-id") or request.query_params.get("after") or "0"
    try:
        cursor = int(raw.strip())
    except ValueError:
        return None
    return cursor if cursor >= 0 else None


def format_event(event_id: int, kind: str, data: object) -> bytes:
    """One SSE message (``id``, ``event``, one ``data`` line of compact JSON)."""
    return f"id: {event_id}\nevent: {kind}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


async def execution_events(console: Console, request: Request) -> Response:
    """``GET /execution/events?id=ID[&after=N]`` (module docstring).

    Answers 400 (plain text) for a missing id or a cursor that is not an int ≥ 0,
    404 for no such agent execution, 503 when the store fails; else 200
    ``text/event-stream`` that stays open until the execution's terminal event or
    until the client disconnects."""
    execution_id = request.query_params.get("id", "")
    if not execution_id:
        return PlainTextResponse("no execution id given (/execution/events?id=ID)\n", 400)
    after = _cursor(request)
    if after is None:
        return PlainTextResponse(
            "the cursor (Last-Event-ID or ?after=) must be an int >= 0, the id of the "
            "last event received\n",
            400,
        )
    reader = console.stores.reader
    try:  # refuse an unknown execution with a status, before the stream starts
        await run_in_threadpool(read_events, reader, execution_id)
    except PhronomyError as exc:
        return PlainTextResponse(f"{exc}\n", status_for(exc))
    events = ExecutionEvents(reader, execution_id, after=after, poll_seconds=POLL_SECONDS)

    async def body() -> AsyncIterator[bytes]:
        yield f"retry: {RETRY_MILLISECONDS}\n\n".encode()
        try:
            async for event in events:
                yield format_event(event.cursor, event.kind, event.to_dict())
        except PhronomyError as exc:  # the store failed mid-stream: say so, then end
            yield f"event: stream_error\ndata: {json.dumps(str(exc))}\n\n".encode()

    return StreamingResponse(
        body(),
        media_type="text/event-stream",
        headers={"cache-control": "no-store", "x-accel-buffering": "no"},
    )


__all__ = ["POLL_SECONDS", "RETRY_MILLISECONDS", "execution_events", "format_event"]
