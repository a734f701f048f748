"""An ``--app`` factory for an agent other than the demo's, on the same machines: an
operator command given it for the demo agent's execution must be refused."""

from __future__ import annotations

from typing import Any

from phronomy_fsm.agent.app import agent_app
from phronomy_fsm.agent.config import AgentConfig
from phronomy_fsm.demo import demo_provider


def create_app(db_path: str) -> Any:
    """The application of agent ``another-agent`` (``--app`` factory)."""
    return agent_app(db_path, [AgentConfig.build("another-agent", provider=demo_provider())])
