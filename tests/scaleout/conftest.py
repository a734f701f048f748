"""Fixtures of the scale-out tests: worker processes of the order test app on a fresh
PostgreSQL database, a store for the test process, and cleanup of every worker."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import scale_harness


class Cluster:
    """Workers on one database: ``start(name, **options)``, ``store``, ``app``,
    ``submit(ids)``, ``drive(ids)``, ``check(ids)``."""

    def __init__(self, dsn: str, folder: Path) -> None:
        from phronomy_fsm.durable.app import load_app
        from phronomy_fsm.store.postgres import PostgresStore

        self.dsn = dsn
        self.folder = folder
        self.store = PostgresStore(dsn)
        import os

        os.environ["PHRONOMY_APP_DIR"] = str(folder)
        self.app = load_app(scale_harness.ORDER_APP, dsn)
        self.workers: dict[str, Any] = {}

    def start(self, name: str, **options: Any) -> Any:
        proc = scale_harness.start_worker(self.dsn, self.folder, name, **options)
        self.workers[name] = proc
        return proc

    def submit(self, ids: list[str]) -> None:
        from phronomy_fsm.durable.submit import submit_execution
        from tests.durable.order_app import Order

        machine = self.app.machines[0]
        for i, eid in enumerate(ids):
            submit_execution(self.store, machine, Order(eid, 1000 + i), execution_id=eid)

    def drive(self, ids: list[str], timeout_seconds: float = 60) -> dict[str, str]:
        return scale_harness.drive(self.store, self.app, ids, timeout_seconds)

    def check(self, ids: list[str]) -> dict[str, int]:
        return scale_harness.check(self.store, self.app, ids)

    def owners(self, ids: list[str]) -> dict[str, str | None]:
        return {eid: owner for eid, (owner, _f, _a) in self.store.execution_fences(ids).items()}

    def worker_ids(self) -> dict[str, str]:
        """``{name: worker_id}`` of the registered workers."""
        return {w.name: w.worker_id for w, _hb, _exp in self.store.list_workers()}

    def log(self, name: str) -> str:
        return (self.folder / f"{name}.log").read_text(errors="replace")

    def close(self) -> None:
        for proc in self.workers.values():
            scale_harness.stop_worker(proc)
        self.store.close()


@pytest.fixture
def cluster(pg_dsn: str, tmp_path: Path) -> Iterator[Cluster]:
    """A :class:`Cluster` on a fresh database; every worker is stopped at the end."""
    c = Cluster(pg_dsn, tmp_path)
    yield c
    c.close()
