"""``phronomy-fsm diagram --execution ID --db PATH``: one execution drawn over its
machine (issue 12 item 8), from the spec given or from the table its runtime registered
in the store."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from phronomy_fsm.cli import main
from phronomy_fsm.diagram.dot import CURRENT_COLOR, PATH_COLOR

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "tests" / "durable" / "specs" / "order_flow.yaml"


def _waiting_order(tmp_path: Path) -> str:
    """A store whose order waits for approval (its process was killed right after)."""
    db = tmp_path / "store.db"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tools" / "durable_crash.py"),
            "child",
            "run",
            "--app",
            "tests.durable.order_app:create_app",
            "--db",
            str(db),
            "--scenario",
            "approved",
            "--crash-at",
            "barrier:@wait:after",
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == -9, proc.stderr
    return str(db)


def _node(dot: str, name: str) -> str:
    match = re.search(rf"^\s*{name} \[(.*?)\]$", dot, flags=re.MULTILINE | re.DOTALL)
    assert match, f"no node {name}"
    return match.group(1)


def test_an_execution_is_drawn_with_its_current_state_and_path(tmp_path: Path) -> None:
    db = _waiting_order(tmp_path)
    for args in (
        ["--execution", "order-a", "--db", db],
        [str(SPEC), "--execution", "order-a", "--db", db],
    ):
        result = CliRunner().invoke(main, ["diagram", *args, "--format", "dot"])
        assert result.exit_code == 0, result.output
        dot = result.stdout
        current = _node(dot, "awaiting_approval")
        assert "CURRENT" in current and CURRENT_COLOR in current
        for visited in ("created", "announcing_charge", "recording_payment"):
            assert PATH_COLOR in _node(dot, visited), visited
        for untouched in ("shipping", "rejected"):
            assert PATH_COLOR not in _node(dot, untouched), untouched
        # created -> announcing_charge is one step: drawn as taken
        assert re.search(rf"created -> announcing_charge \[[^\]]*{PATH_COLOR}", dot)


def test_drawing_an_unknown_execution_is_one_error_line(tmp_path: Path) -> None:
    db = _waiting_order(tmp_path)
    result = CliRunner().invoke(main, ["diagram", "--execution", "nope", "--db", db])
    assert result.exit_code == 1
    assert result.stderr.startswith("error:") and "nope" in result.stderr
    usage = CliRunner().invoke(main, ["diagram", "--execution", "order-a"])
    assert usage.exit_code == 2 and "--db" in usage.output


def test_the_effect_states_passed_the_stay_in_recovery_and_the_status_are_drawn(
    tmp_path: Path,
) -> None:
    """Issue 23 item 5: a crash after the charge, parked, then answered: the title
    names the execution and its status, the effect states it passed are marked, and
    its stay in recovery_required is marked with its revisions."""
    from tests.integration.test_operator_cli import APP, kill_at, record, run, run_process

    db = tmp_path / "store.db"
    kill_at(db, "offload:charge_card:after")
    assert run_process("recover", "--db", str(db), "--app", APP).returncode == 3

    def draw() -> str:
        result = CliRunner().invoke(
            main, ["diagram", "--execution", "order-a", "--db", str(db), "--format", "dot"]
        )
        assert result.exit_code == 0, result.output
        return result.stdout

    parked = draw()
    assert "execution order-a: recovery_required in announcing_charge at r2" in parked
    assert "RECOVERY_REQUIRED since r2" in _node(parked, "announcing_charge")
    assert "EFFECT PASSED" in _node(parked, "charging")  # the charge it may have made
    assert "EFFECT PASSED" not in _node(parked, "emailing")
    assert re.search(rf"announcing_charge -> charging \[[^\]]*{PATH_COLOR}", parked)

    answered = run(
        "resolve", "order-a", "--db", str(db), "--expected-revision", "2",
        "--outcome", "succeeded", "--result", '{"charged_cents": 1000}',
    )  # fmt: skip
    assert answered.exit_code == 0, answered.output
    assert run_process("recover", "--db", str(db), "--app", APP).returncode == 0
    after = draw()
    status = record(db, "order-a")
    assert (
        f"execution order-a: {status.status.value} in {status.state} at r{status.revision}" in after
    )
    assert "RECOVERY_REQUIRED r2 to r3" in _node(after, "announcing_charge")
    for effect in ("charging", "emailing"):
        assert "EFFECT PASSED" in _node(after, effect), effect
    assert "EFFECT PASSED" not in _node(after, "shipping")
