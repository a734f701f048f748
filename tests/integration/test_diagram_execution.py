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
