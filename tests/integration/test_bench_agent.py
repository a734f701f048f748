"""``tools/bench.py agent --json`` and ``tools/profile_agent.py --json`` run end to end
with tiny counts and print the keys ``docs/performance.md`` documents.

Behaviour only: no figure is compared with anything (speed is never asserted; the
benchmark reports ratios, CI does not judge them). The DBOS peer's durability check is
asserted because the benchmark refuses a run without it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytest.importorskip("langgraph.checkpoint.sqlite")
pytest.importorskip("dbos")

SIDES = {"phronomy_fsm", "langgraph_sqlite", "dbos_sqlite"}


def _run(tmp_path: Path, *argv: str) -> dict:
    proc = subprocess.run(
        [sys.executable, *argv],
        cwd=ROOT,
        env={**os.environ, "PHRONOMY_BENCH_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_agent_benchmark_prints_every_documented_key(tmp_path: Path) -> None:
    out = _run(
        tmp_path,
        "tools/bench.py",
        "agent",
        "--json",
        "--rounds",
        "1",
        "--runs",
        "8",
        "--concurrency",
        "4",
        "--langgraph-runs",
        "4",
        "--dbos-runs",
        "4",
        "--round-trips",
        "1",
    )
    assert set(out["runs_per_second"]) == SIDES
    assert all(v > 0 for v in out["runs_per_second"].values())
    assert set(out["ratios"]) == {"runs_vs_langgraph", "runs_vs_dbos", "round_trip_vs_langgraph"}
    assert out["targets"] == {
        "runs_vs_langgraph": ">= 10",
        "runs_vs_dbos": ">= 5",
        "round_trip_vs_langgraph": "<= 0.3",
    }
    assert set(out["cpu_seconds_per_step"]) == SIDES
    assert all(v > 0 for v in out["cpu_seconds_per_step"].values())
    steps = out["durable_steps_per_run"]
    assert SIDES <= set(steps)
    # DBOS: seven step outputs plus the workflow status row's insert and final update.
    assert steps["dbos_sqlite"] >= 9
    # Ours: at least one barrier per step of the run and per tool call.
    assert steps["phronomy_fsm"] >= 7
    assert set(out["approval_round_trip_seconds"]) == {"phronomy_fsm", "langgraph_sqlite"}
    assert out["round_trip_floor"]["barriers_per_round_trip"] > 0
    assert set(out["best_concurrency"]) == SIDES
    assert set(out["samples"]) == SIDES
    assert out["config"]["dbos_sqlite_pragmas"] == {"synchronous": [2], "journal_mode": ["wal"]}


def test_profile_tool_reports_areas_and_top_functions(tmp_path: Path) -> None:
    out = _run(tmp_path, "tools/profile_agent.py", "--json", "--runs", "8", "--concurrency", "4")
    assert out["threads_profiled"] > 1
    assert out["durable_steps"] > 0
    assert {"store", "durable engine", "dispatcher/runtime", "agent"} <= set(out["areas"])
    assert abs(sum(a["share"] for a in out["areas"].values()) - 1) < 0.01
    assert out["top_by_tottime"] and out["top_by_cumtime"]
    assert any("phronomy_fsm/" in row["function"] for row in out["top_by_cumtime"])
