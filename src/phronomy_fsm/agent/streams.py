"""Event streams a client can reconnect to: an agent execution's events from the store.

This module owns :class:`ExecutionEvents` (what ``Agent.events`` returns) and
:func:`read_events`; the rules are in ``docs/agent.md``, "Event streams". The events of
an execution are its journal entries (:mod:`phronomy_fsm.agent.journal`), numbered from
1 in journal order — the number is the event's **cursor**:

* while the execution runs, its journal is not written yet; the entries are derived
  from its last committed context with :func:`~phronomy_fsm.agent.journal.transcript`,
  which yields, at every revision, a prefix of what the final journal will hold;
* once it has finished, they are the journal itself, committed in the same
  transaction as the final status, so a reader never sees a finished execution without
  them; the last one is the ``execution_<outcome>`` entry.

So whoever reads — this process or another one opening the same store — at whatever
moment, the event with cursor *n* is always the same entry, and a client that
reconnects with ``after=<last cursor>`` gets exactly the events it has not seen. Message
entries are given without their ``context`` flag (whether the message joins the
agent's history is known only at the end). Streamed tokens are not events here: they
are never durable (``Agent.stream`` delivers them).

Reading polls the store every ``poll_seconds``; a store that notifies (PostgreSQL
``LISTEN/NOTIFY``, :class:`~phronomy_fsm.durable.ports.NotifyingStore`: a signal sent,
work made runnable) wakes the reader early — commits themselves are found by polling.
Nothing here writes.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import attrs

from phronomy_fsm.agent.journal import MESSAGE_KINDS, transcript
from phronomy_fsm.durable.codec import json_data
from phronomy_fsm.durable.ports import ExecutionStore, NotifyingStore
from phronomy_fsm.durable.records import JournalEntry
from phronomy_fsm.errors import InvalidInputError, NotFoundError
from phronomy_fsm.generated import agent_session

#: Default seconds between two reads of the store while an execution runs.
DEFAULT_POLL_SECONDS = 0.1


@attrs.frozen
class StoredEvent:
    """One event of an execution's stream.

    Attributes:
        execution_id: the agent execution.
        cursor: its 1-based position in the execution's journal: strictly increasing,
            the same in every process; pass the last one seen as ``after`` to resume.
        kind: the journal kind (``input_received``, ``user_message``,
            ``llm_call_recorded``, ``assistant_message``, ``tool_result``,
            ``tool_message``, ``approval_required``, ``approval_decided``,
            ``final_output``, ``execution_<outcome>``; their data is described in
            :mod:`phronomy_fsm.agent.journal`).
        data: the entry's JSON data (message entries without ``context``).
    """

    execution_id: str
    cursor: int
    kind: str
    data: Any

    @property
    def terminal(self) -> bool:
        """True for the last event of an execution (``execution_<outcome>``)."""
        return self.kind.startswith("execution_")

    def to_dict(self) -> dict[str, Any]:
        """``{"execution_id", "cursor", "kind", "data"}`` (JSON)."""
        return {
            "execution_id": self.execution_id,
            "cursor": self.cursor,
            "kind": self.kind,
            "data": self.data,
        }


def _public(entry: JournalEntry) -> Any:
    """The entry's data as streamed: a message entry's ``context`` flag removed."""
    data = entry.data
    if entry.kind in MESSAGE_KINDS and isinstance(data, dict):
        return {k: v for k, v in data.items() if k != "context"}
    return data


def read_events(store: ExecutionStore, execution_id: str) -> tuple[list[StoredEvent], bool]:
    """The events of ``execution_id`` as of now, and whether it has finished (then
    the list is complete). One consistent store read for a running execution (its
    record), two for a finished one (record, then journal: committed together).

    Raises:
        NotFoundError: no such execution, or it is not an agent execution.
        StorageError: the store failed.

    Concurrency: any thread; blocking.
    """
    record = store.load_record(execution_id)
    if record.machine != agent_session.MACHINE:
        raise NotFoundError(
            f"execution {execution_id} is a {record.machine} execution, not an agent "
            "execution; only agent executions have event streams",
            execution_id=execution_id,
        )
    finished = not record.is_active
    if finished:
        entries = store.journal_entries(execution_id)
    else:
        ctx = json_data(record.context)
        ctx = ctx if isinstance(ctx, dict) else {}
        entries = transcript(
            ctx.get("input"),
            list(ctx.get("messages") or ()),
            list(ctx.get("llm_responses") or ()),
            list(ctx.get("tool_log") or ()),
            list(ctx.get("audit") or ()),
            joins=False,
            handed_off=False,
        )
    events = [
        StoredEvent(execution_id, n, entry.kind, _public(entry))
        for n, entry in enumerate(entries, start=1)
    ]
    return events, finished


def check_cursor(after: Any) -> int:
    """``after`` as a cursor: an int ≥ 0 (0: from the first event).

    Raises:
        InvalidInputError: it is not (bool, negative, not an int).
    """
    if type(after) is not int or after < 0:
        raise InvalidInputError(
            f"after must be an event cursor (an int >= 0, 0 for the start), got {after!r}"
        )
    return after


class ExecutionEvents:
    """The events of one agent execution after a cursor, first those already durable,
    then live ones as they are committed, ending after the terminal event
    (``docs/agent.md``, "Event streams"). Iterate it with ``for`` or ``async for``
    (each iteration reads from ``after`` again; the object holds no position).

    Args:
        store: a store holding the execution (any process's connection to it).
        execution_id: the agent execution.
        after: the cursor of the last event already seen; 0 for all.
        poll_seconds: seconds between reads while nothing new arrives.
        wait_seconds: the longest this iteration may wait for the next event; past
            it the iteration raises TimeoutError (``None``: no limit).

    Raises (on creation):
        InvalidInputError: a bad ``after`` or ``poll_seconds``.

    Raises (while iterating):
        NotFoundError: no such agent execution. StorageError. TimeoutError.

    Concurrency: the sync iterator blocks its thread between reads; the async one
    reads on worker threads (``asyncio.to_thread``) and sleeps in the event loop.
    :meth:`close` (any thread) ends a blocked iteration at its next wake-up.
    """

    def __init__(
        self,
        store: ExecutionStore,
        execution_id: str,
        *,
        after: int = 0,
        poll_seconds: float = DEFAULT_POLL_SECONDS,
        wait_seconds: float | None = None,
    ) -> None:
        self.store = store
        self.execution_id = execution_id
        self.after = check_cursor(after)
        if not (isinstance(poll_seconds, int | float) and 0 < poll_seconds <= 60):
            raise InvalidInputError(f"poll_seconds must be in (0, 60], got {poll_seconds!r}")
        self.poll_seconds = float(poll_seconds)
        self.wait_seconds = wait_seconds
        self._wake = threading.Event()
        self._closed = False

    def close(self) -> None:
        """End the iteration at its next wake-up (it stops without an error)."""
        self._closed = True
        self._wake.set()

    def _listen(self) -> Callable[[], None]:
        """Wake on the store's notifications when it sends any; returns the remover."""
        if isinstance(self.store, NotifyingStore):
            return self.store.add_listener(lambda _channel, _payload: self._wake.set())
        return lambda: None

    def __iter__(self) -> Iterator[StoredEvent]:
        cursor = self.after
        remove = self._listen()
        try:
            progress = time.monotonic()
            while not self._closed:
                self._wake.clear()
                events, finished = read_events(self.store, self.execution_id)
                fresh = events[cursor:]
                for event in fresh:
                    yield event
                    cursor = event.cursor
                if finished:
                    return
                progress = time.monotonic() if fresh else progress
                self._check_idle(time.monotonic() - progress)
                self._wake.wait(self.poll_seconds)
        finally:
            remove()

    def __aiter__(self) -> AsyncIterator[StoredEvent]:
        return self._events()

    async def _events(self) -> AsyncIterator[StoredEvent]:
        cursor = self.after
        remove = self._listen()
        try:
            progress = time.monotonic()
            while not self._closed:
                self._wake.clear()
                events, finished = await asyncio.to_thread(
                    read_events, self.store, self.execution_id
                )
                fresh = events[cursor:]
                for event in fresh:
                    yield event
                    cursor = event.cursor
                if finished:
                    return
                progress = time.monotonic() if fresh else progress
                self._check_idle(time.monotonic() - progress)
                await asyncio.sleep(self.poll_seconds)
        finally:
            remove()

    def _check_idle(self, idle_seconds: float) -> None:
        limit = math.inf if self.wait_seconds is None else self.wait_seconds
        if idle_seconds > limit:
            raise TimeoutError(
                f"no new event of execution {self.execution_id} for {limit:g} s; "
                "iterate again with after=<last cursor> to go on waiting"
            )


__all__ = ["DEFAULT_POLL_SECONDS", "ExecutionEvents", "StoredEvent", "check_cursor", "read_events"]
