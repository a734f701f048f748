"""Per-agent ownership across real processes (docs/operations.md "Who owns an agent").

A child process (``ownership_child.py``) creates an agent and stays alive; this process
must then be refused — by ``Agent.load`` and by the operator commands run as separate
processes — with nothing written to the store. Once the child is killed with SIGKILL,
loading takes the agent over and recovers it. Rows forged with a reused pid, or from
another host, check the liveness rule; ``close`` releases; racing loaders get exactly
one winner.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from phronomy_fsm.agent import Agent, AgentRuntime
from phronomy_fsm.demo import DEMO_AGENT_ID, create_app
from phronomy_fsm.errors import AgentBusyError, AgentOwnedError
from phronomy_fsm.store import SqliteBarrierStore
from phronomy_fsm.store.ownership import current_process, process_start_time
from tests.agent.conftest import Events

CHILD = Path(__file__).with_name("ownership_child.py")
CLI = [sys.executable, "-m", "phronomy_fsm.cli"]
APP = "phronomy_fsm.demo:create_app"


class Child:
    """A running ``ownership_child.py``: send commands, read its JSON lines."""

    def __init__(self, mode: str, db: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(CHILD), mode, str(db)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={k: v for k, v in os.environ.items() if k != "PHRONOMY_CRASH_AT"},
        )
        self.pid = self.proc.pid

    def read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait(10)
            raise AssertionError(f"child ended ({self.proc.returncode}): {self.stderr()}")
        return json.loads(line)  # type: ignore[no-any-return]

    def send(self, command: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()

    def stderr(self) -> str:
        return self.proc.stderr.read() if self.proc.stderr is not None else ""

    def kill(self) -> None:
        """SIGKILL, then reap (a zombie would count as gone anyway)."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


@pytest.fixture
def children() -> Iterator[list[Child]]:
    started: list[Child] = []
    yield started
    for child in started:
        child.stop()


@pytest.fixture
def runtime() -> Iterator[AgentRuntime]:
    rt = AgentRuntime(max_workers=4)
    yield rt
    rt.close(timeout_seconds=5)


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120, check=False)


def snapshot(db: Path) -> dict[str, Any]:
    """Everything an operator command could have written, read with plain sqlite3."""
    conn = sqlite3.connect(db)
    try:
        return {
            table: conn.execute(f"SELECT * FROM {table} ORDER BY 1, 2").fetchall()
            for table in ("agents", "executions", "barriers", "journal", "agent_owners")
        }
    finally:
        conn.close()


def owner_row(db: Path, agent_id: str) -> tuple[Any, ...] | None:
    conn = sqlite3.connect(db)
    try:
        return conn.execute(
            "SELECT host, pid, start_time FROM agent_owners WHERE agent_id = ?", (agent_id,)
        ).fetchone()
    finally:
        conn.close()


def forge_owner(db: Path, agent_id: str, **columns: Any) -> None:
    """Overwrite the owner row of ``agent_id`` as if another process had claimed it."""
    conn = sqlite3.connect(db)
    try:
        with conn:
            conn.execute(
                "UPDATE agent_owners SET host = ?, pid = ?, start_time = ? WHERE agent_id = ?",
                (columns["host"], columns["pid"], columns["start_time"], agent_id),
            )
            assert conn.total_changes == 1
    finally:
        conn.close()


def assert_refused(proc: subprocess.CompletedProcess[str], owner_pid: int) -> None:
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert lines, proc.stderr
    assert any(f"process {owner_pid} on host {socket.gethostname()}" in line for line in lines)
    assert any("stop that process" in line.lower() for line in lines)


def test_live_owner_with_a_running_tool_refuses_everyone_else(
    tmp_path: Path, children: list[Child], runtime: AgentRuntime
) -> None:
    db = tmp_path / "t.db"
    child = Child("tool", db)
    children.append(child)
    ready = child.read()
    assert ready["ready"] == "tool_running"
    execution_id = ready["execution_id"]
    before = snapshot(db)
    assert [r[1] for r in before["agent_owners"]] == [socket.gethostname()]
    with pytest.raises(AgentOwnedError) as info:
        Agent.load(
            "blocker", store=str(db), runtime=runtime, on_event=Events(), **create_app("", db)
        )
    assert info.value.pid == child.pid and info.value.verifiable is True
    assert isinstance(info.value, AgentBusyError)
    assert "stop that process" in str(info.value).lower()
    assert_refused(cli("recover", "--db", str(db), "--app", APP), child.pid)
    execution = SqliteBarrierStore(db, read_only=True).load_execution(execution_id)
    assert execution.phase == "dispatching_tools"
    subject = execution.tool_batch[0].tool_invocation_id
    assert_refused(
        cli(
            "resolve", execution_id, "--db", str(db), "--app", APP,
            "--expected-revision", str(execution.revision),
            "--subject", f"tool_invocation:{subject}", "--outcome", "not_performed",
        ),
        child.pid,
    )  # fmt: skip
    # read-only inspection is allowed and claims nothing
    listing = cli("executions", "list", "--db", str(db), "--json")
    assert listing.returncode == 0 and execution_id in listing.stdout
    assert snapshot(db) == before
    # the owner finishes its tool: the effect happened once and the store says so
    child.send("finish")
    assert child.read() == {"status": "completed", "output": "finished"}
    final = SqliteBarrierStore(db, read_only=True).load_execution(execution_id)
    assert final.status.value == "completed"
    assert (tmp_path / "t.db.effects").read_text().splitlines() == [subject]


def test_approve_cli_is_refused_while_the_owner_lives_and_works_after_it_died(
    tmp_path: Path, children: list[Child], runtime: AgentRuntime
) -> None:
    db = tmp_path / "d.db"
    child = Child("suspend", db)
    children.append(child)
    ready = child.read()
    execution_id, request_id = ready["execution_id"], ready["request_id"]
    assert ready["ready"] == "suspended" and request_id
    before = snapshot(db)
    refused = cli("approve", execution_id, "--request", request_id, "--db", str(db))
    assert_refused(refused, child.pid)
    assert snapshot(db) == before
    child.kill()
    # the dead owner's row is still there; the next claimant takes it over
    assert owner_row(db, DEMO_AGENT_ID)[1] == child.pid  # type: ignore[index]
    approved = cli("approve", execution_id, "--request", request_id, "--db", str(db))
    assert approved.returncode == 0, approved.stderr
    assert owner_row(db, DEMO_AGENT_ID) is None  # released when the command ended
    events = Events()
    agent = Agent.load(
        DEMO_AGENT_ID, store=str(db), runtime=runtime, on_event=events, **create_app("", db)
    )
    assert agent.recovered is not None
    result = agent.recovered.result(30)
    assert result.status == "completed" and "refunded $25.00" in (result.output or "")
    assert owner_row(db, DEMO_AGENT_ID)[1] == os.getpid()  # type: ignore[index]


def test_killed_owner_is_taken_over_and_its_tool_call_goes_to_an_operator(
    tmp_path: Path, children: list[Child], runtime: AgentRuntime
) -> None:
    db = tmp_path / "k.db"
    child = Child("tool", db)
    children.append(child)
    execution_id = child.read()["execution_id"]
    child.kill()
    events = Events()
    Agent.load("blocker", store=str(db), runtime=runtime, on_event=events, **create_app("", db))
    announced = events.wait_for("recovery_resolution_required")
    assert announced.execution_id == execution_id
    assert announced.payload["subject"]["tool_name"] == "slow_effect"
    assert owner_row(db, "blocker")[1] == os.getpid()  # type: ignore[index]


def _created_and_released(db: Path, agent_id: str = DEMO_AGENT_ID) -> None:
    """Create ``agent_id`` in this process and give its claim back."""
    rt = AgentRuntime(max_workers=2)
    Agent.create(agent_id, store=str(db), runtime=rt, **create_app("", db))
    rt.close(timeout_seconds=5)
    assert owner_row(db, agent_id) is None


def _claimed_here(db: Path, agent_id: str = DEMO_AGENT_ID) -> None:
    """Leave a claim of this process in the store (a store opened and left claimed)."""
    store = SqliteBarrierStore(db)
    store.claim_agent(agent_id)
    store.close()


@pytest.mark.parametrize("pid", [os.getppid(), 1], ids=["parent", "init"])
def test_a_live_pid_with_another_start_time_is_pid_reuse_and_taken_over(
    tmp_path: Path, runtime: AgentRuntime, pid: int
) -> None:
    db = tmp_path / "r.db"
    _created_and_released(db)
    _claimed_here(db)
    started = process_start_time(pid)
    assert started is not None  # Linux: /proc/<pid>/stat is readable
    forge_owner(db, DEMO_AGENT_ID, host=socket.gethostname(), pid=pid, start_time=started + 1)
    Agent.load(DEMO_AGENT_ID, store=str(db), runtime=runtime, **create_app("", db))
    assert owner_row(db, DEMO_AGENT_ID) == (
        socket.gethostname(),
        os.getpid(),
        current_process().start_time,
    )


def test_the_same_live_pid_with_its_own_start_time_is_refused(
    tmp_path: Path, runtime: AgentRuntime
) -> None:
    db = tmp_path / "p.db"
    _created_and_released(db)
    _claimed_here(db)
    parent = os.getppid()
    forge_owner(
        db,
        DEMO_AGENT_ID,
        host=socket.gethostname(),
        pid=parent,
        start_time=process_start_time(parent),
    )
    with pytest.raises(AgentOwnedError) as info:
        Agent.load(
            DEMO_AGENT_ID, store=str(db), runtime=runtime, takeover=True, **create_app("", db)
        )
    assert info.value.pid == parent and info.value.verifiable is True
    assert owner_row(db, DEMO_AGENT_ID)[1] == parent  # type: ignore[index]


def test_an_owner_on_another_host_needs_an_explicit_takeover(
    tmp_path: Path, children: list[Child], runtime: AgentRuntime
) -> None:
    db = tmp_path / "h.db"
    child = Child("suspend", db)
    children.append(child)
    ready = child.read()
    child.send("shutdown")
    assert child.read() == {"shutdown": True}
    child.stop()
    _claimed_here(db)
    forge_owner(db, DEMO_AGENT_ID, host="elsewhere.example", pid=os.getpid(), start_time=None)
    before = snapshot(db)
    with pytest.raises(AgentOwnedError) as info:
        Agent.load(
            DEMO_AGENT_ID, store=str(db), runtime=runtime, on_event=Events(), **create_app("", db)
        )
    assert info.value.host == "elsewhere.example" and info.value.verifiable is False
    assert "--takeover" in str(info.value)
    args = ["approve", ready["execution_id"], "--request", ready["request_id"], "--db", str(db)]
    refused = cli(*args)
    assert (
        refused.returncode == 1
        and "error: " in refused.stderr
        and "elsewhere.example" in refused.stderr
    )
    assert "Traceback" not in refused.stderr
    assert snapshot(db) == before
    taken = cli(*args, "--takeover")
    assert taken.returncode == 0, taken.stderr
    assert (
        SqliteBarrierStore(db, read_only=True).load_execution(ready["execution_id"]).phase
        == "resuming"
    )
    assert owner_row(db, DEMO_AGENT_ID) is None


def test_load_takeover_true_overrides_an_unverifiable_owner(
    tmp_path: Path, runtime: AgentRuntime
) -> None:
    db = tmp_path / "o.db"
    _created_and_released(db)
    _claimed_here(db)
    forge_owner(db, DEMO_AGENT_ID, host="elsewhere.example", pid=4242, start_time=7)
    Agent.load(DEMO_AGENT_ID, store=str(db), runtime=runtime, takeover=True, **create_app("", db))
    assert owner_row(db, DEMO_AGENT_ID)[:2] == (socket.gethostname(), os.getpid())  # type: ignore[index]


def test_close_releases_so_another_process_can_load(tmp_path: Path, children: list[Child]) -> None:
    db = tmp_path / "c.db"
    owner = Child("suspend", db)
    children.append(owner)
    owner.read()
    loader = Child("load", db)
    children.append(loader)
    loader.send("go")
    refused = loader.read()
    assert refused["pid"] == owner.pid and "owned" in refused
    owner.send("close")  # Agent.close: the execution is suspended, nothing runs
    assert owner.read() == {"closed": True}
    second = Child("load", db)
    children.append(second)
    # the release runs on the owner's pool right after close; wait for the row to go
    _wait_for(lambda: owner_row(db, DEMO_AGENT_ID) is None)
    second.send("go")
    assert second.read() == {"loaded": True}
    assert owner_row(db, DEMO_AGENT_ID)[1] == second.pid  # type: ignore[index]
    assert owner.proc.poll() is None  # the first owner is still alive


def test_two_processes_racing_to_load_get_exactly_one_winner(
    tmp_path: Path, children: list[Child]
) -> None:
    db = tmp_path / "race.db"
    _created_and_released(db)
    racers = [Child("load", db) for _ in range(2)]
    children.extend(racers)
    for racer in racers:
        racer.send("go")
    answers = {racer.pid: racer.read() for racer in racers}
    winners = [pid for pid, answer in answers.items() if answer.get("loaded")]
    assert len(winners) == 1, answers
    loser = next(answer for pid, answer in answers.items() if pid not in winners)
    assert loser["pid"] == winners[0]
    assert owner_row(db, DEMO_AGENT_ID)[1] == winners[0]  # type: ignore[index]


def _wait_for(condition: Any, timeout_seconds: float = 10.0) -> None:
    """Wait for a condition another process makes true (polls the store file)."""
    import time

    end = time.monotonic() + timeout_seconds
    while not condition():
        assert time.monotonic() < end, "condition not met in time"
        time.sleep(0.02)
