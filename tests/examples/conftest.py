"""Fixtures of the examples' tests: ``docs/examples/`` and ``tools/`` on ``sys.path`` (the
examples import their generated tables as ``machines.*`` and the crash harness lives in
``tools/``), a scrubbed environment for subprocesses, and helpers that wait on a
runtime's events."""

from __future__ import annotations

import os
import queue
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from phronomy_fsm.testing.deadlines import scaled_seconds

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "docs" / "examples"
TOOLS = ROOT / "tools"
for folder in (EXAMPLES, TOOLS):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

#: Variables that would point the examples at a real LLM; never in tests.
LLM_VARIABLES = tuple(
    f"{prefix}_{name}"
    for prefix in ("PHRONOMY_LLM", "OPENAI", "PHRONOMY_ANTHROPIC", "ANTHROPIC")
    for name in ("BASE_URL", "API_KEY", "MODEL")
)


#: The durable examples and the application factory that runs each, as
#: ``phronomy-fsm check`` and ``tools/crash_matrix.py --spec`` take them.
DURABLE_EXAMPLES = [
    ("order_workflow", "docs.examples.order_workflow:create_app"),
    ("review_agent", "docs.examples.review_agent:create_app"),
    ("review_tool", "docs.examples.review_agent:create_app"),
]


def clean_env(**extra: str) -> dict[str, str]:
    """The environment for an example's subprocess: no LLM configuration (so the
    scripted provider answers), no crash-harness variables, plus ``extra``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in LLM_VARIABLES and not k.startswith("PHRONOMY_CRASH")
    }
    env.update(extra)
    return env


class Events:
    """A runtime listener that keeps every event and lets a test wait for one."""

    def __init__(self) -> None:
        self.seen: list[Any] = []
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()

    def __call__(self, event: Any) -> None:
        self._queue.put(event)

    def wait_for(self, predicate: Callable[[Any], bool], timeout_seconds: float = 20.0) -> Any:
        """The first event (seen already or arriving within ``timeout_seconds``) for
        which ``predicate`` holds. Raises AssertionError listing what was seen."""
        for event in self.seen:
            if predicate(event):
                return event
        timeout_seconds = scaled_seconds(timeout_seconds)
        deadline = time.monotonic() + timeout_seconds
        while True:
            remaining = deadline - time.monotonic()
            try:
                event = self._queue.get(timeout=max(0.0, remaining))
            except queue.Empty:
                kinds = [(e.execution_id, e.kind.value, e.detail) for e in self.seen]
                raise AssertionError(
                    f"no matching event within {timeout_seconds} s: {kinds}"
                ) from None
            self.seen.append(event)
            if predicate(event):
                return event


@pytest.fixture
def events() -> Iterator[Events]:
    """A fresh :class:`Events` listener."""
    yield Events()
