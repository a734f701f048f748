"""Fixtures of the checker's tests: the repository root (the applications are imported
from it, as ``phronomy-fsm check`` imports ``--app`` from the working directory) and
a runner of :func:`phronomy_fsm.checking.check_app` on the generic application."""

from __future__ import annotations

from pathlib import Path

import pytest

from phronomy_fsm.checking import Budget, CheckOptions, CheckReport, check_app
from tests.checking.generic_app import DEFECT_VARIABLE, SPEC_VARIABLE

ROOT = Path(__file__).resolve().parents[2]
GENERIC_APP = "tests.checking.generic_app:create_app"
SPECS = Path(__file__).resolve().parent / "specs"
#: Kills only: one at every crash point.
KILLS = Budget(crash=None, signal=0, cancel=0, timer=0, takeover=0, two_kills=False)


def check_generic(
    monkeypatch: pytest.MonkeyPatch,
    spec: Path,
    *,
    defect: str | None = None,
    budget: Budget = KILLS,
    only: tuple[str, ...] = (),
    seed: int = 1,
) -> CheckReport:
    """Check ``spec`` run by the generic application with ``defect`` seeded.

    The checker builds the application in this process too, and a seeded defect patches
    the engine's classes (``generic_app.seed_engine_defect``): the patched methods are
    put back when the test ends, or every later test of this process would run on a
    broken engine (seen: effects no longer announced in the examples' tests)."""
    from phronomy_fsm.durable.effects import Effects
    from phronomy_fsm.durable.runtime import DurableRuntime

    monkeypatch.setattr(Effects, "announce", Effects.announce)
    monkeypatch.setattr(DurableRuntime, "lease_error", DurableRuntime.lease_error)
    monkeypatch.setenv(SPEC_VARIABLE, str(spec))
    if defect is None:
        monkeypatch.delenv(DEFECT_VARIABLE, raising=False)
    else:
        monkeypatch.setenv(DEFECT_VARIABLE, defect)
    options = CheckOptions(budget=budget, only=only, seed=seed, cwd=ROOT, jobs=2)
    return check_app(spec, GENERIC_APP, options)
