"""An agent execution parked for approval under ``agent_session`` version 3 continues
under today's version, where the wait is called ``suspended`` (issue 23), and one parked
under version 4 continues under version 5, which added the re-ask of invalid structured
output and the budget states (issue 24); the migrations are declared in
``fsm_specs/agent_session.yaml``, applied as ``docs/spec-format.md`` "Migrations" says.

The old execution is written by the engine itself running the old table (lowered from
``tests/fixtures/specs/agent_session_v3.yaml`` or ``_v4.yaml``, byte for byte the spec
that shipped), on a SQLite file; the store is then opened by today's agent runtime,
which recovers the execution through the migration and runs it to completion on
approval.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from phronomy_fsm.codegen import lower

from phronomy_fsm.agent import Agent, AgentRuntime, ApprovalRequired, Reply, ScriptedProvider
from phronomy_fsm.durable.records import DurablePoint, ExecutionStatus
from phronomy_fsm.errors import NotFoundError
from phronomy_fsm.generated import agent_session
from phronomy_fsm.spec.validate import check_spec_file
from phronomy_fsm.store import SqliteBarrierStore
from phronomy_fsm.table import MachineTable
from phronomy_fsm.testing.deadlines import scaled_seconds

from .conftest import Events, barrier_names, make_tool

SPECS = Path(__file__).resolve().parents[1] / "fixtures" / "specs"


def _version_3_table() -> MachineTable:
    return _old_table(3)


def _old_table(version: int = 3) -> MachineTable:
    result = check_spec_file(SPECS / f"agent_session_v{version}.yaml")
    assert result.ok and result.spec is not None, [i.render() for i in result.issues]
    return lower(result.spec)


def _wait_for_waiting(store: SqliteBarrierStore, execution_id: str) -> Any:
    deadline = time.monotonic() + scaled_seconds(15)
    while time.monotonic() < deadline:
        try:
            record = store.load_record(execution_id)
        except NotFoundError:  # not started yet
            record = None
        if record is not None and record.status is ExecutionStatus.WAITING:
            return record
        time.sleep(0.02)  # polling the store another process would read; not a sync
    raise AssertionError(f"{execution_id} did not come to wait")


def test_the_declared_migration_renames_the_approval_wait() -> None:
    old = _version_3_table()
    assert (old.version, agent_session.TABLE.version) == (3, 5)
    assert "awaiting_approval" in {s.name for s in old.states}
    assert "awaiting_approval" not in {s.name for s in agent_session.TABLE.states}
    table = agent_session.TABLE
    assert table.migrated_state(3, old.spec_sha256, "awaiting_approval") == "suspended"
    assert table.migrated_state(2, "any sha256", "awaiting_approval") == "suspended"
    assert table.migrated_state(3, old.spec_sha256, "calling_llm") == "calling_llm"
    # no migration covers version 1 (its executions are parked, never renamed)
    assert table.migrated_state(1, "x" * 64, "awaiting_approval") == "awaiting_approval"
    # version 4 had every state of 5 but three: nothing is renamed
    v4 = _old_table(4)
    assert {s.name for s in v4.states} == {s.name for s in table.states} - {
        "preparing_output_retry",
        "checking_budget",
        "budget_exhausted",
    }
    assert table.migrated_state(4, v4.spec_sha256, "suspended") == "suspended"


def test_version_5_keeps_every_state_of_4() -> None:
    old = _old_table(4)
    assert old.version == 4
    assert {s.name for s in old.states} <= {s.name for s in agent_session.TABLE.states}
    assert agent_session.TABLE.migrated_state(4, old.spec_sha256, "suspended") == "suspended"


@pytest.mark.parametrize(("version", "wait_state"), [(3, "awaiting_approval"), (4, "suspended")])
def test_an_execution_waiting_under_an_old_version_is_approved_to_completion_today(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: int, wait_state: str
) -> None:
    db = tmp_path / "agents.db"
    log: list[Any] = []
    refund = make_tool("refund", requires_approval=True, log=log)
    old = _old_table(version)

    # 1. yesterday's code: the engine runs the old table, the execution comes to
    #    wait for approval (pinned to the old version and its sha256)
    with monkeypatch.context() as patch:
        patch.setattr(agent_session, "TABLE", old)
        store = SqliteBarrierStore(db)
        runtime = AgentRuntime(store, max_workers=4, own_store=True)
        try:
            agent = Agent.create(
                "a",
                provider=ScriptedProvider([Reply(tool_calls=(("refund", {"q": "A1"}),))]),
                runtime=runtime,
                tools=[refund],
            )
            agent.invoke_async("refund A1", execution_id="ex-1")
            stored = _wait_for_waiting(store, "ex-1")
        finally:
            runtime.close(timeout_seconds=5)
    assert (stored.state, stored.point, stored.spec_version, stored.spec_sha256) == (
        wait_state,
        DurablePoint.WAIT,
        version,
        old.spec_sha256,
    )
    request_id = stored.context["approval"]["request_id"]
    assert log == []

    # 2. today's code: the runtime recovers it through the migration and announces the
    #    pending approval again; the store keeps the old name until its next commit,
    #    and the approval check reads it by today's name
    events = Events()
    store = SqliteBarrierStore(db)
    runtime = AgentRuntime(store, max_workers=4, own_store=True)
    try:
        agent = Agent.load(
            "a",
            provider=ScriptedProvider([Reply(content="refunded")]),
            runtime=runtime,
            tools=[refund],
            on_event=events,
        )
        announced = events.wait_for("approval_required")
        assert isinstance(announced, ApprovalRequired)
        assert (announced.execution_id, announced.request_id) == ("ex-1", request_id)
        assert [i.tool_name for i in announced.items] == ["refund"]
        before = store.load_record("ex-1")
        assert (before.state, before.spec_version) == (wait_state, version)
        result = agent.approve("ex-1", approval_request_id=request_id, wait_seconds=20)
        assert (result.status, result.output) == ("completed", "refunded")
        assert len(log) == 1  # the tool ran once, after the upgrade
        done = store.load_record("ex-1")
        assert (done.status, done.state, done.spec_version, done.spec_sha256) == (
            ExecutionStatus.COMPLETED,
            "completed",
            agent_session.TABLE.version,
            agent_session.SPEC_SHA256,
        )
        assert barrier_names(store, "ex-1") == [
            "@start",
            "initial_preparation",
            "@wait",
            "tool_dispatch",
            "provider_dispatch",
            "@final",
        ]
    finally:
        runtime.close(timeout_seconds=5)
