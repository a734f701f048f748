"""Fixtures of the crash tests: ``tools/`` on ``sys.path`` (the harness lives there)
and helpers that run the crash app in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

TOOLS = Path(__file__).resolve().parents[2] / "tools"
if str(TOOLS) not in sys.path:
    sys.path.insert(0, str(TOOLS))


def run_app(
    *args: str, crash_at: str | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run ``tools/crash_app.py`` with ``args``, optionally armed at ``crash_at``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PHRONOMY_CRASH_AT", "PHRONOMY_CRASH_TRACE")
    }
    if crash_at is not None:
        env["PHRONOMY_CRASH_AT"] = crash_at
    return subprocess.run(
        [sys.executable, str(TOOLS / "crash_app.py"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.fixture
def app_run() -> Any:
    """The :func:`run_app` helper."""
    return run_app
