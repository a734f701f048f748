"""The crash-injection matrix in its ``--quick`` configuration (issue 6 item 5; runs in
CI): every crash point derived from the generated tables is targeted, every reachable
one kills a real agent process, and after recovery every invariant holds."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from phronomy_fsm.generated import agent_session, execution_admission, tool_invocation
from phronomy_fsm.runtime.faults import points_for

MATRIX = Path(__file__).resolve().parents[2] / "tools" / "crash_matrix.py"
COUNTERS = (
    "lost",
    "double_terminal",
    "duplicate_effects",
    "blind_resends",
    "stuck",
    "journal_inconsistent",
)
EXTRA = ("agent_root_inconsistent", "app_errors")


def points_from_tables() -> list[str]:
    tables = (agent_session.TABLE, execution_admission.TABLE, tool_invocation.TABLE)
    barriers = tuple(dict.fromkeys(b for t in tables for b in t.barriers))
    hooks = tuple(dict.fromkeys(h for t in tables for h in t.offload_hooks))
    return points_for(barriers, hooks)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_quick_matrix_kills_every_point_and_keeps_every_invariant(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            str(MATRIX),
            "--quick",
            "--json",
            "--keep-failures",
            str(tmp_path / "failures"),
        ],
        capture_output=True,
        text=True,
        timeout=880,
        check=False,
    )
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    violations = json.dumps(report["violations"], indent=1)[:6000]
    for counter in COUNTERS + EXTRA:
        assert report[counter] == 0, f"{counter}: {violations} {report['app_error_runs'][:2]}"
    assert proc.returncode == 0
    points = points_from_tables()
    assert report["crash_points"] == len(points)
    assert set(report["per_point"]) == set(points)
    assert report["scenarios"] == 8
    assert report["runs"] >= report["crash_points"]
    not_wired = set(report["not_wired"])
    assert not_wired <= {p for p in points if p.endswith(":during")}
    for point, row in report["per_point"].items():
        assert row["runs"] >= 1, f"{point} was never targeted"
        if point not in not_wired:
            assert row["killed"] >= 1, f"{point} never killed a process: {row}"
    assert report["uncovered"] == []
