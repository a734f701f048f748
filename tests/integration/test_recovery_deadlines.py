"""Recovery restores an execution's deadline (a crash-matrix finding: a recovered
execution used to run without one): it is recorded with the start (the engine's
``expires_at``) and re-armed with what is left of it (docs/agent.md, "Cancellation and
timeouts"). Real processes killed with SIGKILL at the library's crash points, a
real SQLite file."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from phronomy_fsm.agent import Agent, AgentRuntime, Reply, ScriptedProvider
from phronomy_fsm.errors import ExecutionTimeoutError
from phronomy_fsm.store import SqliteBarrierStore

CHILD = textwrap.dedent(
    """
    import sys
    from phronomy_fsm.agent import Agent, AgentRuntime, Reply, ScriptedProvider
    from phronomy_fsm.runtime.faults import FaultPlan
    from phronomy_fsm.store import SqliteBarrierStore
    faults = FaultPlan.parse(sys.argv[3])  # crash injection is passed in, never read from env
    runtime = AgentRuntime(SqliteBarrierStore(sys.argv[1], faults=faults), faults=faults,
                           own_store=True)
    agent = Agent.create("a", runtime=runtime, provider=ScriptedProvider([Reply("fast")]),
                         timeout_seconds=float(sys.argv[2]))
    agent.invoke("hi", wait_seconds=30)
    """
)


def _killed_child(db: Path, timeout_seconds: float, crash_at: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(db), str(timeout_seconds), crash_at],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr


def test_a_recovered_execution_keeps_its_deadline(tmp_path: Path) -> None:
    db = tmp_path / "agents.db"
    _killed_child(db, 2.0, "barrier:initial_preparation:after")  # admitted, to replay
    store = SqliteBarrierStore(db)
    runtime = AgentRuntime(store)
    try:
        started = time.monotonic()
        agent = Agent.load(
            "a",
            runtime=runtime,
            provider=ScriptedProvider([Reply("too late", delay_seconds=20)], model="m"),
            llm_resend="resend",  # the replayed call is sent again: the deadline stops it
        )
        [execution] = store.list_records(machine="agent_session")
        assert execution.expires_at is not None  # recorded with the start
        with pytest.raises(ExecutionTimeoutError, match="deadline"):
            agent.wait(execution.execution_id, wait_seconds=15)
        assert time.monotonic() - started < 10  # the old deadline, not a fresh 20 s call
    finally:
        runtime.close(timeout_seconds=5)
    try:
        [execution] = store.list_records(machine="agent_session")
        assert execution.status.value == "failed"
        assert execution.error is not None and execution.error.type == "DeadlineExceededError"
    finally:
        store.close()


def test_a_deadline_that_passed_while_down_fires_at_once(tmp_path: Path) -> None:
    db = tmp_path / "agents.db"
    _killed_child(db, 0.5, "barrier:initial_preparation:after")
    time.sleep(1.0)  # the deadline passes while no process runs the execution
    store = SqliteBarrierStore(db)
    runtime = AgentRuntime(store)
    try:
        agent = Agent.load("a", runtime=runtime, provider=ScriptedProvider([Reply("never")]))
        [execution] = store.list_records(machine="agent_session")
        with pytest.raises(ExecutionTimeoutError):
            agent.wait(execution.execution_id, wait_seconds=15)
    finally:
        runtime.close(timeout_seconds=5)
        store.close()
