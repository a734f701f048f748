"""Checking generated specs: one spec data (``tests/spec_strategies.py``,
:func:`durable_specs`) written to a file and checked with the generic application
(``tests/checking/generic_app.py``). Shared by ``tests/checking/test_generated_specs.py``
and ``tools/check_generated.py``."""

from __future__ import annotations

import hashlib
import os
import shlex
from pathlib import Path
from typing import Any

from phronomy_fsm.checking import Budget, CheckOptions, CheckReport, check_app
from tests.checking.generic_app import SPEC_VARIABLE
from tests.spec_strategies import dump

ROOT = Path(__file__).resolve().parents[2]
GENERIC_APP = "tests.checking.generic_app:create_app"
#: The budget of one generated spec in CI: a handful of each kind but takeovers.
CI_BUDGET = Budget(crash=4, signal=3, cancel=2, timer=1, takeover=0, two_kills=False)


def write_spec(data: Any, folder: Path) -> Path:
    """Write spec data as YAML under ``folder``, named by its sha256."""
    text = dump(data)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"gen-{hashlib.sha256(text.encode()).hexdigest()[:12]}.yaml"
    path.write_text(text)
    return path


def check_spec_file(
    path: Path, *, budget: Budget = CI_BUDGET, seed: int = 1, jobs: int = 2
) -> CheckReport:
    """Check the spec at ``path`` run by the generic application (it reads the spec's
    path from ``PHRONOMY_CHECK_SPEC``, set here for the child processes)."""
    previous = os.environ.get(SPEC_VARIABLE)
    os.environ[SPEC_VARIABLE] = str(path)
    try:
        options = CheckOptions(budget=budget, seed=seed, jobs=jobs, cwd=ROOT)
        return check_app(path, GENERIC_APP, options)
    finally:
        if previous is None:
            os.environ.pop(SPEC_VARIABLE, None)
        else:
            os.environ[SPEC_VARIABLE] = previous


def replay(path: Path, label: str) -> str:
    """The shell command that replays one interleaving of a generated spec."""
    return (
        f"{SPEC_VARIABLE}={shlex.quote(str(path))} phronomy-fsm check {shlex.quote(str(path))} "
        f"--app {GENERIC_APP} --only {shlex.quote(label)}"
    )
