"""Fixtures of the crash tests: the repository and ``tools/`` on ``sys.path`` (the harness
and the agent's crash application live there), a helper that runs one process of the
harness on the agent application, and finished runs of its scenarios to check (copied
per test: the checks and the tests write to them)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ROOT / "tools"
for _path in (str(ROOT), str(TOOLS)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

APP = "tools.agent_crash_app:create_app"


def harness(
    mode: str,
    folder: Path,
    scenario: str,
    *,
    crash_at: str | None = None,
    drive_seconds: float | None = None,
) -> subprocess.CompletedProcess[str]:
    """One process of ``tools/durable_crash.py child`` (``run`` or ``recover``) on the
    agent application, its store ``folder/store.db``, killed at ``crash_at`` if given."""
    folder.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable,
        str(TOOLS / "durable_crash.py"),
        "child",
        mode,
        "--app",
        APP,
        "--db",
        str(folder / "store.db"),
        "--scenario",
        scenario,
    ]
    if crash_at is not None:
        command += ["--crash-at", crash_at]
    if drive_seconds is not None:
        command += ["--drive-seconds", str(drive_seconds)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("PHRONOMY_CRASH_AT", None)
    return subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False
    )


@pytest.fixture(scope="module")
def finished_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One crash-free run of a few scenarios, each in its own folder."""
    runs = {}
    for scenario in ("tool_cycle", "parallel_tools", "handoff"):
        folder = tmp_path_factory.mktemp(scenario)
        proc = harness("run", folder, scenario)
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs[scenario] = folder
    return runs


@pytest.fixture
def finished(finished_runs: dict[str, Path], tmp_path: Path) -> Callable[[str], Path]:
    """``finished(scenario)``: a copy of that scenario's finished run; its folder."""

    def copy(scenario: str) -> Path:
        target = tmp_path / scenario
        shutil.copytree(finished_runs[scenario], target)
        return target

    return copy
