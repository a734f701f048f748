"""Stores written by the agent layer before it ran on the durable engine (schema
versions 3 and 4) are brought to version 5 by ``phronomy-fsm store migrate``, and each
kind of agent execution is converted as ``docs/store.md`` "Upgrading to version 5"
says — read back from the store, against the rows the old code wrote:

- ``store-v3-demo-suspended.db`` (made by the schema-3 code's ``phronomy-fsm demo``):
  an execution suspended for approval waits again, in ``suspended``, with the
  same approval request and tool calls; approving it with today's agent runs the
  refund once, under the old tool invocation id;
- ``store-v4-finished.db`` (``tests/fixtures/make_legacy_stores.py``): finished
  executions keep their outcome, and their journal becomes their journal entries — the
  conversation of the completed one stays the agent's history;
- ``store-v4-active-llm.db`` (same script; the process was killed during an LLM call):
  an execution between barriers is parked in ``recovery_required`` about the
  execution as a whole, and ``failed`` is the only answer an operator can give.

In every store the barrier log, the agents and the conversation are kept.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from phronomy_fsm import operator
from phronomy_fsm.agent import Agent, Reply, ScriptedProvider
from phronomy_fsm.agent.context import Outcome, SessionContext, ToolCallStatus
from phronomy_fsm.agent.journal import MESSAGE_KINDS, history
from phronomy_fsm.cli import main
from phronomy_fsm.demo import demo_options, ledger_path
from phronomy_fsm.durable.context import ContextCodec
from phronomy_fsm.durable.records import DurablePoint, ExecutionStatus
from phronomy_fsm.errors import ExecutionFailedError, ResolutionError
from phronomy_fsm.generated import agent_session
from phronomy_fsm.store import SCHEMA_VERSION, SqliteBarrierStore

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
EXECUTION = "5d09b1e3f315cae0110bb337edddeb19"
REQUEST = "61f7af941a496dd8579f442ea1089254"
CODEC = ContextCodec(SessionContext, agent_session.MACHINE)


def _copy(tmp_path: Path, name: str) -> Path:
    db = tmp_path / name
    shutil.copyfile(FIXTURES / name, db)
    return db


def _old_rows(db: Path) -> dict[str, Any]:
    """What the old code wrote: agents, executions (body decoded), the barrier log and
    the journal (content decoded), read raw."""
    with sqlite3.connect(db) as old:
        key = "agent_id" if "agent_id" in _columns(old, "executions") else "exclusive_key"
        state = "phase" if "phase" in _columns(old, "barriers") else "state"
        return {
            "agents": [a for (a,) in old.execute("SELECT agent_id FROM agents ORDER BY agent_id")],
            "executions": {
                eid: {"agent_id": agent, "revision": rev, "body": json.loads(body)}
                for eid, agent, rev, body in old.execute(
                    f"SELECT execution_id, {key}, revision, body FROM executions"
                )
            },
            "barriers": sorted(
                old.execute(
                    f"SELECT execution_id, revision, barrier, committed_epoch_ms, digest, status,"
                    f" {state} FROM barriers"
                ).fetchall()
            ),
            "journal": [
                json.loads(body)
                for (body,) in old.execute("SELECT body FROM journal ORDER BY agent_id, sequence")
            ],
        }


def _columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}


def _migrate(db: Path, version: int) -> None:
    runner = CliRunner()
    refused = runner.invoke(main, ["executions", "list", "--db", str(db)])
    assert refused.exit_code == 1 and "store migrate" in refused.stderr  # reads refuse it
    result = runner.invoke(main, ["store", "migrate", "--db", str(db)])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"schema version {version} -> {SCHEMA_VERSION}"


def _journal_of(old: dict[str, Any], execution_id: str) -> list[dict[str, Any]]:
    return [r for r in old["journal"] if r["execution_id"] == execution_id]


def _assert_kept(store: SqliteBarrierStore, db: Path, old: dict[str, Any]) -> None:
    """The agents, every execution at its revision, and every barrier-log row."""
    assert store.agent_ids() == old["agents"]
    records = {r.execution_id: r for r in store.list_records()}
    assert set(records) == set(old["executions"])
    for eid, row in old["executions"].items():
        record = records[eid]
        assert (record.machine, record.exclusive_key, record.revision) == (
            agent_session.MACHINE,
            row["agent_id"],
            row["revision"],
        )
        assert record.labels["agent_id"] == row["agent_id"]
        assert record.spec_sha256 == agent_session.SPEC_SHA256
        assert record.created_at.isoformat() == row["body"]["created_at"]
    logged = sorted(
        (b.execution_id, b.revision, b.barrier, _ms(b.committed_at), b.digest, b.status, b.state)
        for eid in old["executions"]
        for b in store.barrier_log(eid)
    )
    assert logged == old["barriers"]
    with sqlite3.connect(db) as new:
        tables = {r[0] for r in new.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert "journal" not in tables and "agent_owners" not in tables


def _ms(when: Any) -> int:
    return int(when.timestamp() * 1000)


def _messages(records: list[dict[str, Any]]) -> list[Any]:
    return [r["content"] for r in records if r["kind"] in MESSAGE_KINDS]


def test_a_suspended_execution_waits_for_the_same_approval_and_finishes_once(
    tmp_path: Path,
) -> None:
    db = _copy(tmp_path, "store-v3-demo-suspended.db")
    old = _old_rows(db)
    body = old["executions"][EXECUTION]["body"]
    records = _journal_of(old, EXECUTION)
    _migrate(db, 3)
    with SqliteBarrierStore(db, read_only=True) as store:
        _assert_kept(store, db, old)
        record = store.load_record(EXECUTION)
        assert (record.status, record.state, record.point) == (
            ExecutionStatus.WAITING,
            agent_session.State.SUSPENDED.value,
            DurablePoint.WAIT,
        )
        assert record.recovery is None
        ctx = CODEC.decode(record.context)
        assert store.journal_entries(EXECUTION) == []  # the context holds it until the end
    assert (ctx.agent_id, ctx.execution_id, ctx.input) == ("support-demo", EXECUTION, body["input"])
    assert ctx.approval is not None
    assert (ctx.approval.request_id, ctx.approval.decided) == (REQUEST, False)
    (entry,) = body["tool_batch"]
    assert ctx.approval.items == [entry["tool_invocation_id"]]
    (call,) = ctx.tools
    assert (call.tool_invocation_id, call.tool_call_id, call.tool_name, call.llm_call_id) == (
        entry["tool_invocation_id"],
        entry["tool_call_id"],
        entry["tool_name"],
        entry["llm_call_id"],
    )
    assert call.status is ToolCallStatus.AWAITING_APPROVAL and call.arguments == entry["arguments"]
    assert call.reason == body["approval_request"]["items"][0]["reason"]
    assert ctx.messages == _messages(records)
    assert [m["role"] for m in ctx.messages] == ["user", "assistant", "tool", "assistant"]
    assert [r["llm_call_id"] for r in ctx.llm_responses] == [
        r["llm_call_id"] for r in records if r["kind"] == "llm_call_recorded"
    ]
    assert [(t["tool_name"], t["result"]) for t in ctx.tool_log] == [
        (r["content"]["tool_name"], r["content"]["result"])
        for r in records
        if r["kind"] == "tool_result"
    ]
    required = {"approval_request_id": REQUEST, "items": [entry["tool_invocation_id"]]}
    assert ctx.audit == [{"kind": "approval_required", "data": required}]
    assert ctx.llm_calls == body["llm_call_count"] and ctx.outcome is None

    agent = Agent.load("support-demo", store=db, **demo_options(db))
    try:
        assert agent.active_execution().state == "suspended"
        result = agent.approve(EXECUTION, approval_request_id=REQUEST, wait_seconds=60)
        assert result.status == "completed" and "refunded $25.00" in result.output
    finally:
        agent.close()
        agent.runtime.close()
    refunds = [json.loads(line) for line in ledger_path(db).read_text().splitlines()]
    assert [(r["order_id"], r["idempotency_key"]) for r in refunds] == [
        ("A1001", entry["tool_invocation_id"])
    ]  # the refund ran once, under the old tool invocation id
    with SqliteBarrierStore(db, read_only=True) as store:
        done = store.load_record(EXECUTION)
        assert (done.status, done.state) == (ExecutionStatus.COMPLETED, "completed")
        assert done.revision > record.revision
        kinds = [e.kind for e in store.journal_entries(EXECUTION)]
        assert kinds[:2] == ["input_received", "user_message"] and "approval_decided" in kinds
        assert kinds.count("approval_required") == 1  # the same request, not a new one
        assert [m.role for m in history(store, "support-demo")] == [
            "user",
            "assistant",
            "tool",
            "assistant",
            "tool",
            "assistant",
        ]


def test_finished_executions_keep_their_outcome_and_journal(tmp_path: Path) -> None:
    db = _copy(tmp_path, "store-v4-finished.db")
    old = _old_rows(db)
    _migrate(db, 4)
    expected = {  # old status -> (status, state, outcome, joins the history)
        "completed": (ExecutionStatus.COMPLETED, "completed", Outcome.COMPLETED, True),
        "failed": (ExecutionStatus.FAILED, "failed", Outcome.FAILED, False),
        "cancelled": (ExecutionStatus.CANCELLED, "failed", None, False),
    }
    with SqliteBarrierStore(db, read_only=True) as store:
        _assert_kept(store, db, old)
        for eid, row in old["executions"].items():
            body = row["body"]
            status, state, outcome, joins = expected[body["status"]]
            record = store.load_record(eid)
            assert (record.status, record.state, record.point) == (
                status,
                state,
                DurablePoint.FINAL,
            )
            ctx = CODEC.decode(record.context)
            assert ctx.outcome is outcome and ctx.output == body["output"]
            records = _journal_of(old, eid)
            entries = store.journal_entries(eid)
            assert [e.kind for e in entries] == [r["kind"] for r in records]
            assert [(e.revision, e.position) for e in entries] == [
                (0, i) for i in range(len(records))
            ]
            messages = [e for e in entries if e.kind in MESSAGE_KINDS]
            assert [e.data["message"] for e in messages] == _messages(records)
            assert {e.data["context"] for e in messages} == {joins}
            if body["status"] == "failed":
                assert record.error is not None
                assert (record.error.type, record.error.message) == (
                    body["error"]["type"],
                    body["error"]["message"],
                )
            if body["status"] == "completed":
                assert ctx.approval is not None and ctx.approval.decided
                assert ctx.approval.decisions == {ctx.approval.items[0]: True}
        roles = [m.role for m in history(store, "support-demo")]
        assert roles == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
        assert history(store, "flaky") == []
    # a new execution of the agent continues the converted conversation
    provider = ScriptedProvider([Reply(content="Anything else?")])
    agent = Agent.load("support-demo", store=db, provider=provider)
    try:
        assert agent.invoke("Thanks!", wait_seconds=60).output == "Anything else?"
    finally:
        agent.close()
        agent.runtime.close()
    sent = [m.content for m in provider.requests[0].messages]
    assert sent[0] == "Hi, order A1001 arrived broken. Can I get my $25.00 back?"
    assert sent[-1] == "Thanks!"


def test_an_active_execution_is_parked_for_an_operator_who_can_only_fail_it(
    tmp_path: Path,
) -> None:
    db = _copy(tmp_path, "store-v4-active-llm.db")
    old = _old_rows(db)
    body = old["executions"]["ex-stuck"]["body"]
    assert (body["status"], body["phase"]) == ("active", "calling_llm")
    records = _journal_of(old, "ex-stuck")
    _migrate(db, 4)
    with SqliteBarrierStore(db) as store:
        _assert_kept(store, db, old)
        record = store.load_record("ex-stuck")
        assert (record.status, record.state, record.point) == (
            ExecutionStatus.RECOVERY_REQUIRED,
            agent_session.State.RECOVERY_REQUIRED.value,
            DurablePoint.WAIT,
        )
        assert record.recovery is not None and record.recovery.subject is None
        assert record.recovery.allowed_outcomes == ("failed",)
        assert "calling_llm" in record.recovery.reason
        ctx = CODEC.decode(record.context)
        assert ctx.messages == _messages(records) and ctx.llm_calls == 2
        assert [t["tool_name"] for t in ctx.tool_log] == ["lookup"]
        assert store.journal_entries("ex-stuck") == []
        for outcome, extra in (
            ("succeeded", {"result": {"content": "made up"}}),
            ("not_performed", {}),
            ("retry", {}),
        ):
            with pytest.raises(ResolutionError, match="not allowed"):
                operator.resolve_execution(
                    store, "ex-stuck", expected_revision=record.revision, outcome=outcome, **extra
                )
        assert store.list_signals("ex-stuck") == []  # nothing was written
        listed = operator.list_executions(store)
        assert [(e.execution_id, e.needs_operator) for e in listed.executions] == [
            ("ex-stuck", True)
        ]
    agent = Agent.load("stuck", store=db, provider=ScriptedProvider([Reply(content="late")]))
    try:
        with pytest.raises(ExecutionFailedError, match="the old process stopped"):
            agent.resolve(
                "ex-stuck",
                expected_revision=record.revision,
                outcome="failed",
                error="the old process stopped during an LLM call",
                wait_seconds=60,
            )
    finally:
        agent.close()
        agent.runtime.close()
    with SqliteBarrierStore(db, read_only=True) as store:
        ended = store.load_record("ex-stuck")
        assert ended.status is ExecutionStatus.FAILED and ended.revision > record.revision
        assert CODEC.decode(ended.context).messages == ctx.messages  # still there
        # ended by the operator's answer: its transcript is journaled with that commit,
        # outside the agent's history (it did not complete)
        kinds = [e.kind for e in store.journal_entries("ex-stuck")]
        assert kinds[0] == "input_received" and kinds[-1] == "execution_resolved_failed"
        assert kinds.count("user_message") == 1
        messages = [e for e in store.journal_entries("ex-stuck") if e.kind.endswith("_message")]
        assert messages and not any(e.data["context"] for e in messages)
