"""A worker started on a backlog of executions left running by a dead worker claims new
work at once, not after the backlog (issue 26 item 2; ``docs/scale-out.md``, "Running
workers")."""

from __future__ import annotations

import importlib.util
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType

import pytest

from phronomy_fsm.durable.records import WorkerRecord
from phronomy_fsm.durable.submit import submit_execution
from phronomy_fsm.durable.worker import Worker
from phronomy_fsm.store import SqliteBarrierStore
from phronomy_fsm.testing.deadlines import wait_until

BACKLOG = 200


def _app() -> ModuleType:
    """The benchmark's waiting machine (``tools/benchmarks/_waiting_app``)."""
    path = Path(__file__).resolve().parents[2] / "tools/benchmarks/_waiting_app/app.py"
    spec = importlib.util.spec_from_file_location("waiting_bench_app", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_new_work_is_claimed_before_the_backlog_of_recoveries_is_done(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WAITING_STEP_SECONDS", "0.02")  # each resumed step takes a while
    app = _app()
    long_ago = datetime.now(UTC) - timedelta(minutes=5)
    with SqliteBarrierStore(tmp_path / "restart.db") as store:
        dead = WorkerRecord("dead", "gone", 1, "dead", long_ago, long_ago, long_ago)
        store.register_worker(dead, 3600)
        backlog = [f"run-{i:04d}" for i in range(BACKLOG)]
        app.seed(store, (app.running_record(eid, long_ago) for eid in backlog), owner="dead")
        store.retire_worker("dead")  # its lease ended: the backlog is claimable
        worker = Worker(store, app.create_app(""), concurrency=4, lease_seconds=10.0).start()
        try:
            submit_execution(store, app.machine(), {"kind": "step"}, execution_id="new")
            wait_until(lambda: not store.load_record("new").is_active, 30, "the new one")
            resumed = sum(1 for eid in backlog if not store.load_record(eid).is_active)
            # claimed in age order, the new one came after every one of the backlog
            assert resumed < BACKLOG // 2
            wait_until(
                lambda: store.count_by_status().get("completed", 0) == BACKLOG + 1,
                60,
                "the backlog to be resumed",
            )
        finally:
            worker.close()
