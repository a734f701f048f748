"""An approval is bound to the exact arguments approved (docs/agent.md, "Approval"):
the request records, per call, the sha256 of the canonical JSON of its arguments; the
decision carries the hashes it approves; a call whose arguments hash otherwise when it
would run is refused — its result is an ApprovedArgumentsError and the tool never runs.

Real components: SQLite files, the runtime's loop and worker threads; the tampering is
an UPDATE of the stored execution in the SQLite file between two runtimes.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from phronomy_fsm.agent import Agent, AgentRuntime, AgentStatus, Reply, ScriptedProvider
from phronomy_fsm.agent.tools import arguments_sha256
from phronomy_fsm.errors import ApprovalError
from phronomy_fsm.store import SqliteBarrierStore

from .conftest import Events, make_tool


def _provider() -> ScriptedProvider:
    return ScriptedProvider(
        [Reply(tool_calls=(("refund", {"q": "order-1"}),)), Reply(content="done")]
    )


def _tamper(db: Path, execution_id: str, arguments: Any) -> None:
    """Change the stored arguments of the execution's first tool call, as a bug or an
    attacker with write access to the store would."""
    con = sqlite3.connect(db)
    try:
        changed = con.execute(
            "UPDATE executions SET body = json_set(body, '$.context.tools[0].arguments', "
            "json(?)) WHERE execution_id = ?",
            (json.dumps(arguments), execution_id),
        ).rowcount
        con.commit()
    finally:
        con.close()
    assert changed == 1


def test_the_request_and_the_decision_carry_the_hash_of_the_arguments(
    store: Any, runtime: Any, events: Events
) -> None:
    log: list[Any] = []
    agent = Agent.create(
        "a",
        runtime=runtime,
        provider=_provider(),
        tools=[make_tool("refund", requires_approval=True, log=log)],
        on_event=events,
    )
    agent.invoke_async("refund order 1")
    event = events.wait_for("approval_required")
    (item,) = event.items
    expected = arguments_sha256({"q": "order-1"})
    assert item.arguments_sha256 == expected
    stored = store.load_record(event.execution_id).context
    assert stored["approval"]["arguments_sha256"] == {item.tool_invocation_id: expected}
    # a decider who saw other arguments is refused, and nothing is written
    with pytest.raises(ApprovalError, match="not the ones you saw") as refused:
        agent.approve(
            event.execution_id,
            approval_request_id=event.request_id,
            arguments_sha256={item.tool_invocation_id: arguments_sha256({"q": "other"})},
        )
    assert refused.value.reason == "arguments_changed"
    assert store.pending_signals(event.execution_id) == []
    result = agent.approve(
        event.execution_id,
        approval_request_id=event.request_id,
        arguments_sha256={item.tool_invocation_id: expected},
        wait_seconds=10,
    )
    assert result.status is AgentStatus.COMPLETED
    assert [a for a, _ in log] == [{"q": "order-1"}]
    audit = store.load_record(event.execution_id).context["audit"]
    decided = next(a for a in audit if a["kind"] == "approval_decided")
    assert decided["data"]["arguments_sha256"] == {item.tool_invocation_id: expected}


def test_arguments_changed_after_the_request_are_refused_and_the_tool_never_runs(
    tmp_path: Path,
) -> None:
    db = tmp_path / "agents.db"
    log: list[Any] = []
    events = Events()
    first_store = SqliteBarrierStore(db)
    first = AgentRuntime(first_store)
    try:
        agent = Agent.create(
            "a",
            runtime=first,
            provider=_provider(),
            tools=[make_tool("refund", requires_approval=True, log=log)],
            on_event=events,
        )
        agent.invoke_async("refund order 1")
        event = events.wait_for("approval_required")
    finally:
        first.close(timeout_seconds=5)
        first_store.close()
    execution_id, request_id = event.execution_id, event.request_id
    _tamper(db, execution_id, {"q": "order-666"})

    store = SqliteBarrierStore(db)
    runtime = AgentRuntime(store)
    try:
        agent = Agent.load(
            "a",
            runtime=runtime,
            provider=_provider(),
            tools=[make_tool("refund", requires_approval=True, log=log)],
        )
        assert store.load_record(execution_id).context["tools"][0]["arguments"] == {
            "q": "order-666"
        }
        # the person approves the request as asked (the hash of order-1) ...
        final = agent.approve(execution_id, approval_request_id=request_id, wait_seconds=10)
        # ... and the changed arguments never reach the tool
        assert log == []
        assert final.status is AgentStatus.COMPLETED  # the LLM saw the refusal and answered
        (entry,) = store.load_record(execution_id).context["tool_log"]
        assert entry["status"] == "failed"
        assert "ApprovedArgumentsError" in entry["error"]
        assert arguments_sha256({"q": "order-1"}) in entry["error"]
        assert arguments_sha256({"q": "order-666"}) in entry["error"]
    finally:
        runtime.close(timeout_seconds=5)
        store.close()
