"""Fixtures of the durable-engine tests: runtimes over a real store — a SQLite file and a
PostgreSQL database on the session's server (``backend`` is parametrised, so each
engine test runs on both) — a helper that waits for an event of a listener, and one
that kills a child process at a crash point."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from phronomy_fsm.durable import DurableEvent, DurableRuntime
from phronomy_fsm.store.open import open_store
from phronomy_fsm.testing.deadlines import scaled_seconds

ROOT = Path(__file__).resolve().parents[2]


class Recorder:
    """A listener that keeps every event and lets a test wait for one."""

    def __init__(self) -> None:
        self.events: list[DurableEvent] = []
        self._cond = threading.Condition()

    def __call__(self, event: DurableEvent) -> None:
        with self._cond:
            self.events.append(event)
            self._cond.notify_all()

    def wait_for(
        self, predicate: Callable[[DurableEvent], bool], timeout_seconds: float = 10.0
    ) -> DurableEvent:
        """The first event matching ``predicate`` (waiting up to the timeout)."""
        deadline = time.monotonic() + scaled_seconds(timeout_seconds)
        with self._cond:
            while True:
                for event in self.events:
                    if predicate(event):
                        return event
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(
                        "no matching event; saw "
                        + ", ".join(f"{e.kind.value}:{e.execution_id}" for e in self.events)
                    )
                self._cond.wait(remaining)

    def kinds(self, execution_id: str) -> list[str]:
        """The kinds of the events of one execution, in order."""
        return [e.kind.value for e in self.events if e.execution_id == execution_id]


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    """The store backend of the test: ``sqlite`` or ``postgres``."""
    return str(request.param)


@pytest.fixture
def store_target(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """Where the test's store lives: ``tmp_path/store.db``, or a fresh PostgreSQL
    database's DSN (what ``open_store`` and ``--db`` take)."""
    if backend == "sqlite":
        return str(tmp_path / "store.db")
    return str(request.getfixturevalue("pg_dsn"))


@pytest.fixture
def open_runtime(store_target: str) -> Iterator[Callable[..., tuple[DurableRuntime, Recorder]]]:
    """``open_runtime(machines, **options)`` → ``(runtime, recorder)`` on the test's
    store (:func:`store_target`); every runtime is closed at the end."""
    opened: list[DurableRuntime] = []

    def make(machines: Any, **options: Any) -> tuple[DurableRuntime, Recorder]:
        recorder = Recorder()
        store = open_store(store_target, **options.pop("store_options", {}))
        runtime = DurableRuntime(
            store, machines=machines, listeners=[recorder], own_store=True, **options
        )
        opened.append(runtime)
        return runtime, recorder

    yield make
    for runtime in opened:
        runtime.close(timeout_seconds=5)


def kill_at(
    tmp_path: Path,
    point: str,
    *,
    scenario: str = "approved",
    app: str = "tests.durable.order_app:create_app",
    db: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run a scenario of the crash harness in a child process killed at ``point``, on
    the store ``db`` (default ``tmp_path/store.db``); the app's ledger and the
    harness's files go to ``tmp_path``."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PHRONOMY_APP_DIR": str(tmp_path)}
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tools" / "durable_crash.py"),
            "child",
            "run",
            "--app",
            app,
            "--db",
            db or str(tmp_path / "store.db"),
            "--dir",
            str(tmp_path),
            "--scenario",
            scenario,
            "--crash-at",
            point,
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == -9, (proc.returncode, proc.stderr[-2000:])
    return proc
