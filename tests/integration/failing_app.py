"""An application factory for ``phronomy-fsm recover/resolve --app`` that fails, as a
misconfigured application would (used by tests/integration/test_demo_cli.py)."""

from __future__ import annotations

from typing import Any


def create_app(agent_id: str, db_path: str) -> dict[str, Any]:
    """Raise like an application whose configuration is missing."""
    raise RuntimeError(f"no provider configured for {agent_id}")


def not_a_dict(agent_id: str, db_path: str) -> Any:
    """Return something that is not Agent.load keyword arguments."""
    return ["provider"]
