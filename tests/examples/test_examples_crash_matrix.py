"""Both examples survive ``kill -9`` at every point of their generated crash matrix:
``tools/crash_matrix.py --spec SPEC --app MODULE:FACTORY --quick`` on each spec (the
review agent's two machines each get their own matrix), every invariant 0 and every
crash point of the spec killed at least once, so none silently never fires."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import DURABLE_EXAMPLES, ROOT, TOOLS, clean_env

MATRICES = DURABLE_EXAMPLES


@pytest.mark.slow
@pytest.mark.timeout(400)
@pytest.mark.parametrize(("spec", "app"), MATRICES, ids=[spec for spec, _ in MATRICES])
def test_the_quick_crash_matrix_kills_every_point_and_keeps_every_invariant(
    spec: str, app: str, tmp_path: Path
) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            str(TOOLS / "crash_matrix.py"),
            "--spec",
            f"docs/examples/{spec}.yaml",
            "--app",
            app,
            "--quick",
            "--json",
            "--keep-failures",
            str(tmp_path / "failures"),
        ],
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
    assert report["invariants"] == dict.fromkeys(report["invariants"], 0), report["failures"]
    assert set(report["invariants"]) == {
        "lost",
        "double_terminal",
        "duplicate_effects",
        "blind_resends",
        "stuck",
        "app_errors",
    }
    assert report["failures"] == []
    assert report["points_never_reached"] == []
    assert len(report["points_killed"]) == report["points"] > 0
    assert report["kills"] >= report["points"]
    assert proc.returncode == 0
