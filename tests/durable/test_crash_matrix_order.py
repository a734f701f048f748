"""The crash matrix of the durable engine on the order test machine (quick form): every
crash point of its table is killed at least once, and every invariant holds."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))


@pytest.mark.slow
def test_every_point_of_the_order_machine_is_killed_and_every_invariant_holds() -> None:
    import durable_crash

    report = durable_crash.matrix(
        ROOT / "tests" / "durable" / "specs" / "order_flow.yaml",
        "tests.durable.order_app:create_app",
        quick=True,
        jobs=2,
        keep=None,
    )
    assert report["invariants"] == dict.fromkeys(durable_crash.INVARIANTS, 0), report["failures"]
    assert report["points_never_reached"] == []
    assert len(report["points_killed"]) == report["points"] == 30
    assert report["kills"] >= report["points"]


@pytest.mark.slow
def test_the_quick_matrix_holds_on_postgresql(postgres) -> None:
    import durable_crash

    report = durable_crash.matrix(
        ROOT / "tests" / "durable" / "specs" / "order_flow.yaml",
        "tests.durable.order_app:create_app",
        quick=True,
        jobs=2,
        keep=None,
        postgres=postgres.admin_dsn,
    )
    assert report["invariants"] == dict.fromkeys(durable_crash.INVARIANTS, 0), report["failures"]
    assert report["points_never_reached"] == []
    assert len(report["points_killed"]) == report["points"]


def test_the_generated_test_machines_are_fresh(tmp_path: Path) -> None:
    import subprocess

    specs = sorted((ROOT / "tests" / "durable" / "specs").glob("*.yaml"))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "phronomy_fsm.cli",
            "generate",
            *map(str, specs),
            "--out",
            str(tmp_path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    for spec in specs:
        fresh = (tmp_path / f"{spec.stem}.py").read_text()
        checked_in = (ROOT / "tests" / "durable" / "generated" / f"{spec.stem}.py").read_text()
        assert fresh == checked_in, (
            f"regenerate: phronomy-fsm generate {spec} --out tests/durable/generated"
        )
