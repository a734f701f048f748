"""The interleaving checker's quick form on the durable examples: ``phronomy-fsm check
SPEC --app MODULE:FACTORY --json`` on each spec (the review agent's two machines each
get a check), every kind of step run and fired, and every invariant 0."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import DURABLE_EXAMPLES, ROOT, clean_env

CHECKS = DURABLE_EXAMPLES


@pytest.mark.slow
@pytest.mark.timeout(400)
@pytest.mark.parametrize(("spec", "app"), CHECKS, ids=[spec for spec, _ in CHECKS])
def test_the_quick_check_fires_every_kind_of_step_and_keeps_every_invariant(
    spec: str, app: str, tmp_path: Path
) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "phronomy_fsm.cli", "check", f"docs/examples/{spec}.yaml"]
        + ["--app", app, "--quick", "--json", "--keep-failures", str(tmp_path / "failures")],
        cwd=ROOT,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=380,
        check=False,
    )
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    assert report["machine"] == spec
    assert report["mode"] == "quick"
    assert report["violations"] == [], json.dumps(report["violations"], indent=1)
    assert set(report["invariants"]) == {
        "lost",
        "double_terminal",
        "duplicate_effects",
        "blind_resends",
        "idempotent_keys",
        "question_keys",
        "signals_applied",
        "lost_signals",
        "stuck",
        "app_errors",
    }
    assert proc.returncode == 0
    kinds = {"kill", "signal", "cancel", "timer", "takeover"}
    assert kinds <= set(report["by_kind"])
    assert kinds <= {kind for kind, fired in report["fired"].items() if fired}
    assert report["signals"] == ["approve", "reject"]
    # the review agent has no effect after a wait: its engine's @effect commit never
    # happens; the order workflow's effects (effect shorthands, no barrier states) are
    # announced by @effect commits, so it reaches every point
    effect_commit = {"barrier:@effect:before", "barrier:@effect:during", "barrier:@effect:after"}
    expected = set() if spec == "order_workflow" else effect_commit
    assert set(report["points_never_reached"]) == expected
