"""Fixtures for agent tests: a real SQLite store in tmp_path and a private runtime."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from phronomy_fsm.agent import AgentEvent, AgentRuntime, Tool
from phronomy_fsm.store import SqliteBarrierStore


@pytest.fixture
def runtime() -> Iterator[AgentRuntime]:
    rt = AgentRuntime(max_workers=8)
    yield rt
    rt.close(timeout_seconds=5)


@pytest.fixture
def store(tmp_path: Any) -> Iterator[SqliteBarrierStore]:
    s = SqliteBarrierStore(tmp_path / "agents.db")
    yield s
    s.close()


class Events:
    """A listener recording events, with a way to wait for one."""

    def __init__(self) -> None:
        self.events: list[AgentEvent] = []
        self._cond = threading.Condition()

    def __call__(self, event: AgentEvent) -> None:
        with self._cond:
            self.events.append(event)
            self._cond.notify_all()

    def types(self) -> list[str]:
        return [e.type for e in self.events]

    def wait_for(self, type_: str, timeout: float = 10.0, count: int = 1) -> AgentEvent:
        with self._cond:
            ok = self._cond.wait_for(
                lambda: sum(e.type == type_ for e in self.events) >= count, timeout
            )
            assert ok, f"no {type_!r} event within {timeout} s; got {self.types()}"
            return [e for e in self.events if e.type == type_][count - 1]


@pytest.fixture
def events() -> Events:
    return Events()


def make_tool(
    name: str = "lookup",
    *,
    requires_approval: bool = False,
    fn: Any = None,
    log: list | None = None,
) -> Tool:
    calls = log if log is not None else []

    def default(arguments: Any, context: Any) -> Any:
        calls.append((arguments, context.idempotency_key))
        return {"ok": True, "echo": arguments}

    return Tool(
        name,
        fn or default,
        f"{name} tool",
        {
            "type": "object",
            "properties": {"q": {"type": "string"}},
            "required": ["q"],
            "additionalProperties": False,
        },
        requires_approval=requires_approval,
    )
