"""Stores for the console's tests: real executions of the order machine
(``tests/durable/order_app.py``) in every status an operator meets, on SQLite or
PostgreSQL, and a console served on loopback by uvicorn in a thread of the test.

:func:`populate` leaves, with no process running them (their runtimes closed, leases
ended):

- ``order-a``: ``recovery_required`` at revision 2 — the crash harness killed its child
  process right after the card was charged, and a recovery parked it (its at_most_once
  ``charge_card`` may or may not have happened);
- ``order-1``: ``waiting`` in ``awaiting_approval`` at revision 5;
- ``order-2``: ``completed`` in ``shipped`` (approved);
- :data:`HOSTILE_ID`: ``waiting``, an id made of HTML metacharacters.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from phronomy_fsm.durable import DurableRuntime
from phronomy_fsm.store.open import open_store
from phronomy_fsm.testing.deadlines import scaled_seconds
from tests.durable.order_app import Order, create_app

ROOT = Path(__file__).resolve().parents[2]
APP = "tests.durable.order_app:create_app"
#: An execution id a hostile client could choose: HTML, quotes, an ampersand.
HOSTILE_ID = "<script>alert('x')</script>&\"q"


class Waiter:
    """A listener that lets a test wait until executions reach an event kind."""

    def __init__(self) -> None:
        self.seen: dict[str, set[str]] = {}
        self.cond = threading.Condition()

    def __call__(self, event: Any) -> None:
        with self.cond:
            self.seen.setdefault(event.kind.value, set()).add(event.execution_id)
            self.cond.notify_all()

    def wait(self, kind: str, *ids: str, timeout_seconds: float = 30.0) -> None:
        """Return once every id in ``ids`` reported ``kind`` (AssertionError after the
        timeout, naming what was seen)."""
        timeout_seconds = scaled_seconds(timeout_seconds)  # a hang limit, not a speed
        with self.cond:
            ok = self.cond.wait_for(lambda: set(ids) <= self.seen.get(kind, set()), timeout_seconds)
        assert ok, (kind, ids, self.seen)


def kill_at(target: str, folder: Path, point: str) -> None:
    """Run the crash harness's ``approved`` scenario (order ``order-a``) in a child
    process that SIGKILLs itself at ``point``."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PHRONOMY_APP_DIR": str(folder)}
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tools" / "durable_crash.py"),
            "child",
            "run",
            "--app",
            APP,
            "--db",
            target,
            "--dir",
            str(folder),
            "--scenario",
            "approved",
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


@contextmanager
def order_runtime(target: str, folder: Path) -> Iterator[tuple[DurableRuntime, Waiter]]:
    """A runtime of the order app on ``target`` (its ledger in ``folder``), closed at
    the end of the block (its lease ends)."""
    before = os.environ.get("PHRONOMY_APP_DIR")
    os.environ["PHRONOMY_APP_DIR"] = str(folder)  # the ledger of a PostgreSQL store
    try:
        app = create_app(target)
    finally:
        if before is None:
            os.environ.pop("PHRONOMY_APP_DIR")
        else:
            os.environ["PHRONOMY_APP_DIR"] = before
    waiter = Waiter()
    runtime = DurableRuntime(
        open_store(target), machines=app.machines, listeners=[waiter], own_store=True
    )
    try:
        yield runtime, waiter
    finally:
        runtime.close(timeout_seconds=10)


def populate(target: str, folder: Path) -> None:
    """Fill the store ``target`` as the module docstring says."""
    kill_at(target, folder, "offload:charge_card:after")
    with order_runtime(target, folder) as (runtime, waiter):
        runtime.recover()
        waiter.wait("recovery_required", "order-a")
        for i, order_id in enumerate(("order-1", "order-2", HOSTILE_ID)):
            runtime.start("order_flow", Order(order_id, 1000 + i), execution_id=order_id)
        waiter.wait("waiting", "order-1", "order-2", HOSTILE_ID)
        runtime.signal("order-2", "approve", {"by": "setup"})
        waiter.wait("finished", "order-2")
