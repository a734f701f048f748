"""Budgets across processes (``docs/agent.md``, "Budgets"): an agent execution that
waits for a budget in a process killed with SIGKILL is shown by ``executions show``
(spent against its limits, the extend-budget command), refused a bad extension with
nothing written, and extended by ``phronomy-fsm extend-budget`` from other processes,
which take it over and count on from what it had spent — never from zero.

The agent is the offline example ``docs/examples/budget_agent.py`` (two LLM calls
allowed, four needed). Real SQLite files, real subprocesses, SIGKILL.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "docs" / "examples"
APP = "budget_agent:create_app"
ENV = {
    **{k: v for k, v in os.environ.items() if k != "PHRONOMY_CRASH_AT"},
    "PYTHONPATH": os.pathsep.join([str(ROOT), str(EXAMPLES)]),
}

#: Runs the example's agent until its execution waits for a budget, prints the
#: execution id, then blocks (the test kills it).
CHILD = """
import sys, threading
import budget_agent as ex
from phronomy_fsm.agent import Agent, AgentRuntime, BudgetExhausted
arrived = threading.Event()
def on_event(event):
    if isinstance(event, BudgetExhausted):
        print(event.execution_id, flush=True)
        arrived.set()
runtime = AgentRuntime.for_store(sys.argv[1])
agent = Agent.create(ex.AGENT_ID, runtime=runtime, on_event=on_event, **ex.options())
agent.invoke_async("Where are orders A1, A2 and A3?")
arrived.wait(120)
threading.Event().wait()
"""


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "phronomy_fsm.cli", *args],
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def snapshot(db: Path) -> dict[str, list[tuple[Any, ...]]]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return {
            table: conn.execute(f"SELECT * FROM {table} ORDER BY 1, 2").fetchall()
            for table in ("executions", "barriers", "signals", "execution_journal")
        }
    finally:
        conn.close()


def show(db: Path, execution_id: str) -> dict[str, Any]:
    proc = cli("executions", "show", execution_id, "--db", str(db), "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)  # type: ignore[no-any-return]


def test_a_budget_wait_survives_sigkill_and_is_extended_from_other_processes(
    tmp_path: Path,
) -> None:
    db = tmp_path / "budget.db"
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(db)],
        cwd=ROOT,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        execution_id = child.stdout.readline().strip()  # blocks until the wait is committed
        assert execution_id, child.stderr.read() if child.stderr else ""
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    assert child.returncode == -signal.SIGKILL

    # executions show: spent against the limits, the pending request and its command
    agent = show(db, execution_id)["agent"]
    budget = agent["budget"]
    assert budget["limits"]["max_llm_calls"] == 2 and budget["on_exhausted"] == "wait"
    assert budget["spent"] == {
        "tokens": 2 * 1280,
        "llm_calls": 2,
        "tool_calls": 2,
        "cost_usd": round(2 * (1200 * 0.15 + 80 * 0.60) / 1e6, 6),
    }
    assert budget["pending"] and budget["request"]["limit"] == "max_llm_calls"
    assert budget["command"].startswith(f"phronomy-fsm extend-budget {execution_id} --db ")
    text = cli("executions", "show", execution_id, "--db", str(db)).stdout
    assert "max_llm_calls: spent 2 of 2" in text and "extend it with:" in text
    assert "<- waits for a budget extension" in text
    listing = cli("executions", "list", "--db", str(db)).stdout
    assert "1 wait(s) for a budget extension" in listing and "extend-budget command" in listing

    # a bad extension: refused, exit 1, nothing written
    before = snapshot(db)
    for bad, says in (
        (["--max-llm-calls", "2"], "still refused"),
        (["--max-llm-calls", "1"], "lower than the current limit"),
        ([], "at least one new limit"),
        (["--max-tokens", "-5"], "must be an int"),
    ):
        refused = cli("extend-budget", execution_id, "--db", str(db), *bad)
        assert refused.returncode == 1, (bad, refused.stdout, refused.stderr)
        assert says in refused.stderr, (bad, refused.stderr)
    by_hand = cli(
        "signal", execution_id, "budget_extended", "--db", str(db),
        "--payload", '{"limits": {"max_llm_calls": 9}}',
    )  # fmt: skip
    assert by_hand.returncode == 1 and "phronomy-fsm extend-budget" in by_hand.stderr
    assert snapshot(db) == before

    # another process extends it by one call and runs it here (--app): the third call
    # is made, and the check after it counts 3 — the counts of the killed process
    extended = cli(
        "extend-budget", execution_id, "--db", str(db), "--max-llm-calls", "3",
        "--app", APP, "--json",
    )  # fmt: skip
    assert extended.returncode == 0, extended.stderr
    record = show(db, execution_id)
    assert (record["status"], record["state"]) == ("waiting", "budget_exhausted")
    assert record["agent"]["budget"]["spent"]["llm_calls"] == 3
    assert record["agent"]["budget"]["spent"]["tokens"] == 3 * 1280
    assert record["agent"]["budget"]["request"]["spent"] == 3

    # and a third process lets it finish
    done = cli(
        "extend-budget", execution_id, "--db", str(db), "--max-llm-calls", "4", "--by", "dana",
        "--app", APP,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    record = show(db, execution_id)
    assert (record["status"], record["agent"]["output"]) == (
        "completed",
        "All three orders have shipped.",
    )
    journal = [(e["kind"], e["data"]) for e in record["journal"]]
    calls = [d for k, d in journal if k == "llm_call_recorded"]
    assert len(calls) == 4  # each call made once: none repeated, none lost
    extensions = [d for k, d in journal if k == "budget_extended"]
    assert [(d["limits"], d["by"]) for d in extensions] == [
        ({"max_llm_calls": 3}, "cli"),
        ({"max_llm_calls": 4}, "dana"),
    ]
