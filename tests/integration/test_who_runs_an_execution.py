"""Who runs an execution, across real processes (``docs/operations.md``, "Who runs an
execution"): the worker holding an execution's lease runs it; any other process may
approve, resolve or cancel it through the store, and that worker applies it; ``recover``
elsewhere leaves a live worker's executions alone and takes over a dead one's.

A child process (``owner_child.py``) runs an agent and stays alive; the operator
commands run as separate processes. Every refusal is checked to write nothing by reading
the store back.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "phronomy_fsm.cli"]
APP = "tests.integration.owner_child:create_app"
ENV = {
    **{k: v for k, v in os.environ.items() if k != "PHRONOMY_CRASH_AT"},
    "PYTHONPATH": str(ROOT),
}


class Child:
    """A running ``owner_child.py``: send commands, read its JSON lines."""

    def __init__(self, mode: str, db: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.integration.owner_child", mode, str(db)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env=ENV,
        )

    def read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait(10)
            stderr = self.proc.stderr.read() if self.proc.stderr is not None else ""
            raise AssertionError(f"child ended ({self.proc.returncode}): {stderr}")
        return json.loads(line)  # type: ignore[no-any-return]

    def send(self, command: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()

    def kill(self) -> None:
        """SIGKILL, then reap."""
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


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=120, check=False
    )


def snapshot(db: Path) -> dict[str, Any]:
    """Every execution row an operator command could have written (not ``workers``: a
    command that runs a runtime registers itself as a worker)."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return {
            table: conn.execute(f"SELECT * FROM {table} ORDER BY 1, 2").fetchall()
            for table in ("executions", "barriers", "signals", "execution_journal")
        }
    finally:
        conn.close()


def show(db: Path, execution_id: str) -> dict[str, Any]:
    result = cli("executions", "show", execution_id, "--db", str(db), "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)  # type: ignore[no-any-return]


def effects(db: Path) -> list[str]:
    path = Path(str(db) + ".effects")
    return path.read_text().splitlines() if path.exists() else []


def test_recover_elsewhere_leaves_a_live_workers_tool_call_alone(
    tmp_path: Path, children: list[Child]
) -> None:
    db = tmp_path / "t.db"
    child = Child("tool", db)
    children.append(child)
    ready = child.read()
    assert ready["ready"] == "tool_running"
    execution_id, worker = ready["execution_id"], ready["worker_id"]
    [tool_call] = show(db, execution_id)["agent"]["tool_calls"]
    shown = show(db, tool_call)
    assert shown["status"] == "running" and shown["owner"]["worker_id"] == worker
    assert shown["owner"]["is_live"] is True
    before = snapshot(db)

    recovered = cli("recover", "--db", str(db), "--app", APP)
    assert recovered.returncode == 0, (recovered.stdout, recovered.stderr)
    assert "recovered 0 execution(s)" in recovered.stdout
    assert (
        f"{tool_call}  tool_call  running in running  r0  agent blocker  run by live worker {worker}"
        in (recovered.stdout)
    )
    refused = cli(
        "resolve", tool_call, "--db", str(db), "--expected-revision", "0",
        "--outcome", "not_performed",
    )  # fmt: skip
    assert refused.returncode == 1 and "not waiting for an operator" in refused.stderr
    assert snapshot(db) == before
    assert effects(db) == []

    child.send("finish")  # the live worker finishes its own tool: the effect happened once
    child.send("result")
    assert child.read() == {"status": "completed", "output": "finished"}
    assert show(db, execution_id)["status"] == "completed"
    assert effects(db) == [tool_call]


def test_an_approval_from_another_process_is_applied_by_the_live_worker(
    tmp_path: Path, children: list[Child]
) -> None:
    db = tmp_path / "d.db"
    child = Child("suspend", db)
    children.append(child)
    ready = child.read()
    execution_id, request_id, worker = (
        ready["execution_id"],
        ready["request_id"],
        ready["worker_id"],
    )
    approved = cli("approve", execution_id, "--request", request_id, "--db", str(db))
    assert approved.returncode == 0, approved.stderr
    assert f"  applied by live worker {worker}" in approved.stdout
    child.send("result")  # the child's own invoke task settles with the outcome
    result = child.read()
    assert result["status"] == "completed" and "refunded $25.00" in result["output"]
    stored = show(db, execution_id)
    assert stored["status"] == "completed"
    [decision] = [s for s in stored["signals"] if s["event"] == "approval_decided"]
    assert (decision["sender"], decision["outcome"]) == ("cli", "consumed")


def test_a_cancel_from_another_process_is_applied_by_the_live_worker(
    tmp_path: Path, children: list[Child]
) -> None:
    db = tmp_path / "c.db"
    child = Child("suspend", db)
    children.append(child)
    execution_id = child.read()["execution_id"]
    cancelled = cli("cancel", execution_id, "--db", str(db), "--reason", "customer called")
    assert cancelled.returncode == 0, cancelled.stderr
    assert "applied by live worker" in cancelled.stdout
    child.send("result")
    assert child.read()["error"].startswith("Cancelled: customer called")
    assert show(db, execution_id)["status"] == "cancelled"


def test_a_killed_workers_tool_call_is_taken_over_and_goes_to_an_operator(
    tmp_path: Path, children: list[Child]
) -> None:
    db = tmp_path / "k.db"
    child = Child("tool", db)
    children.append(child)
    execution_id = child.read()["execution_id"]
    listed = json.loads(cli("executions", "list", "--db", str(db), "--json").stdout)
    assert {(r["machine"], r["has_live_owner"], r["waits_for"]) for r in listed} == {
        ("agent_session", True, None),
        ("tool_call", True, None),
    }
    child.kill()
    # nothing moves until someone recovers them, and the listing says so
    table = cli("executions", "list", "--db", str(db)).stdout.splitlines()
    assert [line.split()[-1] for line in table[1:3]] == ["recover", "recover"]
    assert table[-2].startswith("2 running with no live worker: phronomy-fsm recover --db ")
    assert "phronomy_fsm.demo:create_app" in table[-1]  # what MODULE:FACTORY stands for
    recovered = cli("recover", "--db", str(db), "--app", APP)
    assert recovered.returncode == 3, (recovered.stdout, recovered.stderr)
    assert "recovered 2 execution(s)" in recovered.stdout
    assert "is gone" in recovered.stderr  # the dead worker's lease was ended at once
    [tool_call] = show(db, execution_id)["agent"]["tool_calls"]
    parked = show(db, tool_call)
    assert parked["status"] == "recovery_required"
    assert parked["recovery"]["agent_subject"]["tool_name"] == "slow_effect"
    assert effects(db) == []  # never re-run without an operator
