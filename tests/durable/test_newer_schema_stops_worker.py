"""A worker stops once newer code has migrated its store (``docs/scale-out.md``,
"Rolling upgrades"): its next write — a lease renewal at the latest — is refused with
SchemaVersionError, and it stops claiming, lets its executions go without writing,
logs why and ends ``run`` with that error. Before, it renewed its lease and committed
on, in the older format, for as long as it lived. Real components: a SQLite file or a
PostgreSQL database, an in-process :class:`Worker`."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import pytest

from phronomy_fsm.durable import ExecutionStatus
from phronomy_fsm.durable.app import DurableApp
from phronomy_fsm.durable.submit import submit_execution
from phronomy_fsm.durable.worker import Worker
from phronomy_fsm.errors import SchemaVersionError
from phronomy_fsm.store.open import open_store

from ..engine_port.test_schema_recheck import bump_schema, dump
from .order_app import Order, order_machine

pytestmark = pytest.mark.timeout(120)


def test_a_worker_stops_writing_and_exits_once_newer_code_migrated_the_store(
    store_target: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = open_store(store_target)
    machine = order_machine(tmp_path / "ledger.jsonl")
    submit_execution(store, machine, Order("o-1", 100), execution_id="o-1")
    worker = Worker(store, DurableApp(machines=(machine,)), lease_seconds=1.5, scan_seconds=0.1)
    ended: list[BaseException | None] = []

    def run() -> None:
        try:
            worker.run()
        except BaseException as exc:  # noqa: BLE001 - the test looks at it
            ended.append(exc)
        else:
            ended.append(None)

    thread = threading.Thread(target=run, daemon=True)
    try:
        with caplog.at_level(logging.INFO):
            thread.start()
            deadline = time.monotonic() + 60
            while store.load_record("o-1").status is not ExecutionStatus.WAITING:
                assert time.monotonic() < deadline, "o-1 never came to wait"
                time.sleep(0.05)
            newer = bump_schema(store)
            before = dump(store)
            thread.join(30)  # its next lease renewal (every 0.5 s) is refused
            assert not thread.is_alive(), "the worker went on after the migration"
        assert len(ended) == 1 and isinstance(ended[0], SchemaVersionError), ended
        assert f"schema version {newer}" in str(ended[0])
        assert dump(store) == before  # not a heartbeat, not a retirement
        stopped = [r.getMessage() for r in caplog.records if "stops writing:" in r.getMessage()]
        assert stopped and f"schema version {newer}" in stopped[0], stopped
    finally:
        worker.stop()
        thread.join(30)
        store.close()
