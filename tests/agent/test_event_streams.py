"""Event streams a client can reconnect to (issue 24 item 5, ``docs/agent.md``, "Event
streams"): another process reads an execution's events from the store while this one
runs it, disconnects midway, reconnects with its cursor, and gets the whole journal
exactly once; cursors are the journal positions; reading a finished execution after a
cursor gives the rest; bad cursors and foreign ids are refused.

Real components: a SQLite file, the agent runtime's threads, a reader subprocess.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from phronomy_fsm.agent import Agent, Reply, ScriptedProvider
from phronomy_fsm.agent.journal import MESSAGE_KINDS
from phronomy_fsm.errors import InvalidInputError, NotFoundError
from phronomy_fsm.testing.deadlines import scaled_seconds, wait_until

from .conftest import Events, make_tool

READER = r"""
import json, sys
from phronomy_fsm.agent.streams import ExecutionEvents
from phronomy_fsm.store.open import open_store

path, execution_id = sys.argv[1], sys.argv[2]

def emit(*parts):
    print(*parts, flush=True)

# first connection: read until the approval request, then disconnect
store = open_store(path, read_only=True)
cursor = 0
for event in ExecutionEvents(store, execution_id, poll_seconds=0.02, wait_seconds=60):
    emit("EVENT", json.dumps(event.to_dict()))
    cursor = event.cursor
    if event.kind == "approval_required":
        break
store.close()
emit("DISCONNECTED", cursor)
sys.stdin.readline()  # the parent says: reconnect
store = open_store(path, read_only=True)
emit("RECONNECTED")
for event in ExecutionEvents(store, execution_id, after=cursor, poll_seconds=0.02, wait_seconds=60):
    emit("EVENT", json.dumps(event.to_dict()))
store.close()
emit("END")
"""


def _approval_agent(runtime: Any, events: Events, log: list[Any]) -> Agent:
    return Agent.create(
        "a",
        runtime=runtime,
        provider=ScriptedProvider(
            [
                Reply(content="Let me refund it.", tool_calls=(("refund", {"q": "A1"}),)),
                Reply(content="Refunded."),
            ]
        ),
        tools=[make_tool("refund", requires_approval=True, log=log)],
        on_event=events,
    )


def _journal(store: Any, execution_id: str) -> list[dict[str, Any]]:
    """The execution's journal as its stream must give it (cursor = position)."""
    out = []
    for n, entry in enumerate(store.journal_entries(execution_id), start=1):
        data = entry.data
        if entry.kind in MESSAGE_KINDS:
            data = {k: v for k, v in data.items() if k != "context"}
        out.append({"execution_id": execution_id, "cursor": n, "kind": entry.kind, "data": data})
    return out


def _read_line(process: subprocess.Popen[str], prefix: str) -> list[str]:
    """Lines of the reader up to (and including) the one starting with ``prefix``."""
    lines = []
    while True:
        line = process.stdout.readline() if process.stdout else ""
        assert line, (
            f"the reader ended before {prefix}: {process.stderr.read() if process.stderr else ''}"
        )
        lines.append(line.rstrip("\n"))
        if line.startswith(prefix):
            return lines


def test_another_process_reads_disconnects_and_resumes_with_exactly_the_journal(
    tmp_path: Path, store: Any, runtime: Any, events: Events
) -> None:
    log: list[Any] = []
    agent = _approval_agent(runtime, events, log)
    execution_id = agent.submit("Refund order A1", execution_id="exec-1")
    reader = subprocess.Popen(
        [sys.executable, "-c", READER, str(tmp_path / "agents.db"), execution_id],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        first = _read_line(reader, "DISCONNECTED")
        cursor = int(first[-1].split()[1])
        approval = events.wait_for("approval_required")
        assert log == []  # midway: nothing ran yet, the execution waits for a person
        assert reader.stdin is not None
        reader.stdin.write("go\n")
        reader.stdin.flush()
        _read_line(reader, "RECONNECTED")
        # decided only now: what follows reaches the reader live, after it reconnected
        agent.approve(
            execution_id,
            approval_request_id=approval.request_id,
            wait_seconds=scaled_seconds(20),
        )
        second = _read_line(reader, "END")
        assert reader.wait(scaled_seconds(20)) == 0
    finally:
        if reader.poll() is None:
            reader.kill()
            reader.wait()

    before = [json.loads(line.split(" ", 1)[1]) for line in first if line.startswith("EVENT")]
    after = [json.loads(line.split(" ", 1)[1]) for line in second if line.startswith("EVENT")]
    assert before[-1]["cursor"] == cursor and before[-1]["kind"] == "approval_required"
    assert after and after[0]["cursor"] == cursor + 1
    # the two connections together: the whole journal, each entry once, in order
    assert before + after == _journal(store, execution_id)
    kinds = [e["kind"] for e in before + after]
    assert (
        kinds.index("approval_required")
        < kinds.index("approval_decided")
        < kinds.index("tool_result")
    )
    assert kinds[-2:] == ["final_output", "execution_completed"]


def test_a_finished_execution_streams_the_rest_after_a_cursor_sync_and_async(
    store: Any, runtime: Any
) -> None:
    agent = Agent.create(
        "b", runtime=runtime, provider=ScriptedProvider([Reply(content="hello there")])
    )
    result = agent.invoke("hi", wait_seconds=scaled_seconds(10))
    journal = _journal(store, result.execution_id)

    everything = [e.to_dict() for e in agent.events(result.execution_id)]
    assert everything == journal
    rest = [e.to_dict() for e in agent.events(result.execution_id, after=2)]
    assert rest == journal[2:]

    async def read_async() -> list[dict[str, Any]]:
        return [e.to_dict() async for e in agent.events(result.execution_id, after=3)]

    assert asyncio.run(read_async()) == journal[3:]
    assert list(agent.events(result.execution_id, after=len(journal))) == []
    assert journal[-1]["kind"] == "execution_completed"


def test_live_events_arrive_while_the_execution_runs_and_end_after_the_terminal_one(
    store: Any, runtime: Any, events: Events
) -> None:
    log: list[Any] = []
    agent = _approval_agent(runtime, events, log)
    execution_id = agent.submit("Refund order A1")
    seen: list[Any] = []
    stream = agent.events(execution_id, poll_seconds=0.02, wait_seconds=scaled_seconds(30))
    iterator = iter(stream)
    while not seen or seen[-1].kind != "approval_required":
        seen.append(next(iterator))
    approval = events.wait_for("approval_required")
    agent.approve(execution_id, approval_request_id=approval.request_id)
    seen.extend(iterator)  # ends by itself after the terminal event
    assert seen[-1].terminal and seen[-1].kind == "execution_completed"
    assert [e.to_dict() for e in seen] == _journal(store, execution_id)
    wait_until(lambda: log, 5, "the approved tool to have run")


def test_bad_cursors_and_foreign_ids_are_refused(store: Any, runtime: Any) -> None:
    agent = Agent.create("c", runtime=runtime, provider=ScriptedProvider([Reply(content="x")]))
    other = Agent.create("d", runtime=runtime, provider=ScriptedProvider([Reply(content="y")]))
    result = other.invoke("hi", wait_seconds=scaled_seconds(10))
    for bad in (-1, True, "3", 1.5):
        with pytest.raises(InvalidInputError, match="cursor"):
            agent.events(result.execution_id, after=bad)
    with pytest.raises(NotFoundError):
        agent.events(result.execution_id)  # another agent's execution
    with pytest.raises(NotFoundError):
        agent.events("no-such-execution")


def test_a_reader_waiting_past_wait_seconds_gets_timeout_error_and_can_resume(
    store: Any, runtime: Any, events: Events
) -> None:
    agent = _approval_agent(runtime, events, [])
    execution_id = agent.submit("Refund order A1")
    approval = events.wait_for("approval_required")
    seen: list[Any] = []
    with pytest.raises(TimeoutError, match="after=<last cursor>"):
        # the execution waits for a person: nothing new comes (extend keeps what arrived)
        seen.extend(agent.events(execution_id, poll_seconds=0.02, wait_seconds=0.2))
    assert seen[-1].kind == "approval_required"
    agent.approve(execution_id, approval_request_id=approval.request_id)
    rest = list(agent.events(execution_id, after=seen[-1].cursor, poll_seconds=0.02))
    assert [e.cursor for e in seen + rest] == list(range(1, len(seen + rest) + 1))
    assert rest[-1].kind == "execution_completed"
