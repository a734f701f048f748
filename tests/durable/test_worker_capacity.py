"""A worker's ``concurrency`` limits the executions it *runs*: executions waiting
durably for a person (or parked for an operator) stay with it without using a slot, so
waiting work never starves new work (docs/scale-out.md, "Running workers"). Real
components: a SQLite file, an in-process :class:`Worker` claiming what another caller
submitted."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from phronomy_fsm.durable import ExecutionStatus
from phronomy_fsm.durable.app import DurableApp
from phronomy_fsm.durable.operations import send_signal
from phronomy_fsm.durable.submit import submit_execution
from phronomy_fsm.durable.worker import Worker
from phronomy_fsm.store.open import open_store

from .order_app import TABLE, Order, OrderHooks, order_machine

pytestmark = pytest.mark.timeout(120)


def _statuses(store: Any, ids: list[str]) -> dict[str, str]:
    return {eid: store.load_record(eid).status.value for eid in ids}


def _wait(predicate: Any, timeout_seconds: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_seconds
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_waiting_executions_do_not_use_a_workers_slots(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "orders.db"))
    machine = order_machine(tmp_path / "ledger.jsonl")
    ids = [f"o-{i}" for i in range(5)]
    for i, eid in enumerate(ids):
        submit_execution(store, machine, Order(eid, 100 + i), execution_id=eid)
    worker = Worker(store, DurableApp(machines=(machine,)), concurrency=2, scan_seconds=0.1)
    worker.start()
    try:
        # every order reaches its approval, though only two may run at once
        _wait(lambda: set(_statuses(store, ids).values()) == {ExecutionStatus.WAITING.value})
        assert worker.held == 5 and worker.running == 0
        for eid in ids:
            send_signal(store, eid, "approve", {"by": "test"})
        _wait(lambda: set(_statuses(store, ids).values()) == {ExecutionStatus.COMPLETED.value})
    finally:
        worker.close()
        store.close()


def test_no_more_than_concurrency_executions_run_at_once(tmp_path: Path) -> None:
    gate = threading.Event()
    lock = threading.Lock()
    running = [0, 0]  # now, most

    class Slow(OrderHooks):
        def charge_card(self, ctx: Order, payload: Any) -> Any:
            inner = super().charge_card(ctx, payload)

            def work(octx: Any) -> Any:
                with lock:
                    running[0] += 1
                    running[1] = max(running[1], running[0])
                gate.wait(30)
                with lock:
                    running[0] -= 1
                return inner(octx)

            return work

    from phronomy_fsm.durable import Machine

    machine = Machine(
        TABLE,
        Slow(tmp_path / "ledger.jsonl"),
        context_type=Order,
        final_status={"rejected": ExecutionStatus.FAILED, "failed": ExecutionStatus.FAILED},
    )
    store = open_store(str(tmp_path / "orders.db"))
    ids = [f"o-{i}" for i in range(6)]
    for i, eid in enumerate(ids):
        submit_execution(store, machine, Order(eid, 100 + i), execution_id=eid)
    worker = Worker(store, DurableApp(machines=(machine,)), concurrency=2, scan_seconds=0.05)
    worker.start()
    try:
        _wait(lambda: running[0] == 2)
        time.sleep(0.5)  # several scans: none claims a third while two run
        assert running[1] == 2 and worker.running == 2
        unclaimed = [
            eid for eid, (owner, _f, _a) in store.execution_fences(ids).items() if not owner
        ]
        assert len(unclaimed) == 4
        gate.set()
        _wait(lambda: set(_statuses(store, ids).values()) == {ExecutionStatus.WAITING.value})
        assert running[1] == 2  # never more than two charges at once
    finally:
        gate.set()
        worker.close()
        store.close()
