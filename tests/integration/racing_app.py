"""An application factory for ``phronomy-fsm recover --app`` that loses a race: before
returning, it lets another process recover the same store to the end (used by
tests/integration/test_demo_cli.py)."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

from phronomy_fsm.demo import create_app as demo_app


def create_app(agent_id: str, db_path: str) -> dict[str, Any]:
    """Run a competing ``recover`` to completion, then configure the demo agent."""
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
    return demo_app(agent_id, db_path)
