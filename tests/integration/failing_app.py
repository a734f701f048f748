"""Application factories for ``phronomy-fsm recover/resolve --app`` that fail, as a
misconfigured application would (used by tests/integration/test_demo_cli.py)."""

from __future__ import annotations

from typing import Any


def create_app(db_path: str) -> Any:
    """Raise like an application whose configuration is missing."""
    raise RuntimeError(f"no provider configured for {db_path}")


def not_an_app(db_path: str) -> Any:
    """Return something that is not a DurableApp."""
    return ["provider"]


def agent_factory(agent_id: str, db_path: str) -> dict[str, Any]:
    """The factory shape of earlier versions (one agent's Agent.load options)."""
    return {}
