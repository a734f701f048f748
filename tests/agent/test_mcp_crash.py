"""A SIGKILL in the middle of an MCP tool call (docs/agent.md, "MCP tools"): the
application process is killed while the MCP server holds the call — its effect done,
its answer not sent. A new process loads the agent, connects to the server anew, and
recovery follows the tool's effect kind, from the server's annotations: an idempotent
tool is called again under the same idempotency key (the server replays its first
result); an at-most-once tool is not sent again but parked for an operator, whose answer
completes the execution.

Real components: SQLite files, the application as a subprocess killed with SIGKILL,
the MCP server of :mod:`phronomy_fsm.testing.mcp_server` over stdio.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from phronomy_fsm.agent import Agent, AgentRuntime, AgentStatus, Reply, ScriptedProvider
from phronomy_fsm.agent.mcp import McpServer
from phronomy_fsm.store import SqliteBarrierStore
from phronomy_fsm.testing.deadlines import wait_until

from .conftest import Events

pytest.importorskip("mcp")

EXECUTION_ID = "x-mcp"

#: The application: one agent whose LLM asks for one MCP tool call; it then waits to be
#: killed (the server holds the call).
APP = """
import sys, threading
from phronomy_fsm.agent import Agent, AgentRuntime, Reply, ScriptedProvider
from phronomy_fsm.agent.mcp import McpServer
from phronomy_fsm.store import SqliteBarrierStore

db, ledger, hold, tool, execution_id = sys.argv[1:6]
server = McpServer.stdio(
    sys.executable,
    ["-m", "phronomy_fsm.testing.mcp_server", "--ledger", ledger, "--hold", hold],
)
runtime = AgentRuntime(SqliteBarrierStore(db), own_store=True, lease_seconds=2.0)
agent = Agent.create(
    "a",
    runtime=runtime,
    provider=ScriptedProvider([Reply(tool_calls=((tool, {"item": "desk"}),)), Reply("done")]),
    mcp_servers=[server],
)
agent.invoke_async("go", execution_id=execution_id)
threading.Event().wait()
"""


def _calls(ledger: Path, tool: str) -> list[dict[str, Any]]:
    lines = ledger.read_text().splitlines() if ledger.exists() else []
    return [e for e in map(json.loads, lines) if e["tool"] == tool]


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state in ("Z", "X")  # exited, perhaps not reaped yet by its new parent


def _kill_during_the_call(tmp_path: Path, tool: str) -> tuple[Path, Path]:
    """Run the application until the server holds the call, then SIGKILL it."""
    db, ledger, hold = tmp_path / "agents.db", tmp_path / "calls.jsonl", tmp_path / "hold"
    hold.mkdir()
    script = tmp_path / "app.py"
    script.write_text(APP)
    app = subprocess.Popen(
        [sys.executable, str(script), str(db), str(ledger), str(hold), tool, EXECUTION_ID]
    )
    marker = hold / f"held-{tool}"
    try:

        def held() -> bool:
            assert app.poll() is None, "the application exited before the call was held"
            return marker.exists() and bool(marker.read_text())

        wait_until(held, 60, "the MCP server holds the call")
    finally:
        app.send_signal(signal.SIGKILL)
        app.wait(timeout=10)
    assert app.returncode == -signal.SIGKILL
    server = int(marker.read_text())
    try:  # the server ends with its connection; it is ours to stop if it does not
        wait_until(lambda: _gone(server), 20, "the held MCP server exits")
    finally:
        if not _gone(server):
            os.kill(server, signal.SIGKILL)
    return db, ledger


def _load(runtime: AgentRuntime, ledger: Path, events: Events) -> Agent:
    server = McpServer.stdio(
        sys.executable, ["-m", "phronomy_fsm.testing.mcp_server", "--ledger", str(ledger)]
    )
    return Agent.load(
        "a",
        runtime=runtime,
        provider=ScriptedProvider([Reply(tool_calls=(("x", {}),)), Reply("done")]),
        mcp_servers=[server],
        on_event=events,
    )


def test_an_idempotent_mcp_call_killed_midway_is_called_again_under_its_key(
    tmp_path: Path,
) -> None:
    db, ledger = _kill_during_the_call(tmp_path, "open_ticket")
    (first,) = _calls(ledger, "open_ticket")  # the effect happened; its answer was lost
    store = SqliteBarrierStore(db)
    runtime = AgentRuntime(store, lease_seconds=2.0)
    try:
        agent = _load(runtime, ledger, Events())
        result = agent.wait(EXECUTION_ID, wait_seconds=60)
        assert result.status is AgentStatus.COMPLETED and result.output == "done"
        calls = _calls(ledger, "open_ticket")
        assert [(c["key"], c["replayed"]) for c in calls] == [
            (first["key"], False),
            (first["key"], True),  # same key: the server recognised the repeat
        ]
        (entry,) = store.load_record(EXECUTION_ID).context["tool_log"]
        assert entry["status"] == "completed" and entry["result"] == first["result"]
    finally:
        runtime.close(timeout_seconds=5)
        store.close()


def test_an_at_most_once_mcp_call_killed_midway_waits_for_an_operator(tmp_path: Path) -> None:
    db, ledger = _kill_during_the_call(tmp_path, "charge")
    (first,) = _calls(ledger, "charge")
    store = SqliteBarrierStore(db)
    runtime = AgentRuntime(store, lease_seconds=2.0)
    events = Events()
    try:
        agent = _load(runtime, ledger, events)
        parked = events.wait_for("recovery_resolution_required", timeout=60)
        assert parked.subject["type"] == "tool_invocation"
        assert parked.subject["tool_name"] == "charge"
        assert parked.execution_id == first["key"]  # the tool call's execution is its key
        assert _calls(ledger, "charge") == [first]  # not sent again
        result = agent.resolve(
            parked.execution_id,
            expected_revision=parked.revision,
            outcome="succeeded",
            result=first["result"],
            wait_seconds=60,
        )
        assert result.status is AgentStatus.COMPLETED and result.output == "done"
        assert _calls(ledger, "charge") == [first]
        (entry,) = store.load_record(EXECUTION_ID).context["tool_log"]
        assert entry["status"] == "completed" and entry["result"] == first["result"]
    finally:
        runtime.close(timeout_seconds=5)
        store.close()
