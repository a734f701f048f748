"""An application factory for ``phronomy-fsm recover --app`` that loses a race: before
returning, it lets another process recover the same store to the end (used by
tests/integration/test_demo_cli.py)."""

from __future__ import annotations

import subprocess
import sys

from phronomy_fsm.demo import create_app as demo_app
from phronomy_fsm.durable.app import DurableApp


def create_app(db_path: str) -> DurableApp:
    """Run a competing ``recover`` to completion, then return the demo application."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "phronomy_fsm.cli",
            "recover",
            "--db",
            db_path,
            "--app",
            "phronomy_fsm.demo:create_app",
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return demo_app(db_path)
