"""A claim whose answer never reached the worker — the store made it, the
connection died before the reply, and the retried statement found nothing more to
claim — leaves an execution owned by a live worker that does not run it. The worker
finds such executions on its claim loop and resumes them (docs/scale-out.md,
"Stranded claims"); before, they stayed stuck for as long as the worker renewed its
lease. Real components: a SQLite file or a PostgreSQL database, an in-process
:class:`Worker`."""

from __future__ import annotations

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

from .order_app import Order, order_machine, read_ledger

pytestmark = pytest.mark.timeout(120)


def _wait(predicate: Any, timeout_seconds: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_seconds
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_an_execution_claimed_for_a_worker_that_never_heard_of_it_is_resumed(
    store_target: str, tmp_path: Path
) -> None:
    store = open_store(store_target)
    ledger = tmp_path / "ledger.jsonl"
    machine = order_machine(ledger)
    ids = ["o-stranded", "o-normal"]
    for i, eid in enumerate(ids):
        submit_execution(store, machine, Order(eid, 100 + i), execution_id=eid)
    worker = Worker(store, DurableApp(machines=(machine,)), scan_seconds=0.1)
    try:
        # what a lost reply leaves behind: the store says the worker owns it
        token = store.claim_execution("o-stranded", worker.worker_id)
        assert token is not None
        assert store.owned_executions(worker.worker_id, (machine.name,)) == {"o-stranded": token}
        worker.start()

        def statuses() -> dict[str, str]:
            return {eid: store.load_record(eid).status.value for eid in ids}

        _wait(lambda: set(statuses().values()) == {ExecutionStatus.WAITING.value})
        owner, fence, _ = store.execution_owner("o-stranded")
        assert owner == worker.worker_id and fence > token  # claimed again: fence moved on
        for eid in ids:
            send_signal(store, eid, "approve", {"by": "test"})
        _wait(lambda: set(statuses().values()) == {ExecutionStatus.COMPLETED.value})
        charges = [e["key"] for e in read_ledger(ledger) if e.get("effect") == "charge_card"]
        assert len(charges) == len(set(charges)) == 2  # each card charged once
        assert store.owned_executions(worker.worker_id, (machine.name,)) == {}
    finally:
        worker.close()
        store.close()


def test_an_execution_being_started_here_is_not_taken_for_a_stranded_one(
    store_target: str, tmp_path: Path
) -> None:
    """The sweep needs the same fencing token seen for ``min_age_seconds``: an
    execution owned here that becomes live before then is left alone."""
    store = open_store(store_target)
    machine = order_machine(tmp_path / "ledger.jsonl")
    submit_execution(store, machine, Order("o-1", 100), execution_id="o-1")
    worker = Worker(store, DurableApp(machines=(machine,)), scan_seconds=0.1)
    try:
        runtime = worker.runtime
        token = store.claim_execution("o-1", worker.worker_id)
        assert runtime.resume_stranded(min_age_seconds=30) == []  # seen once, too young
        assert [eid for eid, _status in runtime.adopt(["o-1"])] == ["o-1"]
        assert runtime.resume_stranded(min_age_seconds=0) == []  # live now: not stranded
        owner, fence, _ = store.execution_owner("o-1")
        assert owner == worker.worker_id and fence >= (token or 0)
    finally:
        worker.close()
        store.close()


def test_two_paths_that_claim_one_stranded_execution_at_once_claim_it_once(
    store_target: str, tmp_path: Path
) -> None:
    """``adopt`` (a read-back resuming children, ``Agent.load``) and the stranded
    sweep both ask "live here?", then claim, then queue the install. Behind a busy
    loop both heard "no" and both claimed: two sessions, the later claim fencing out
    the first, whose release then dropped the newer copy."""
    import threading

    store = open_store(store_target)
    ledger = tmp_path / "ledger.jsonl"
    machine = order_machine(ledger)
    submit_execution(store, machine, Order("o-1", 100), execution_id="o-1")
    worker = Worker(store, DurableApp(machines=(machine,)), scan_seconds=0.1)
    try:
        runtime = worker.runtime
        token = store.claim_execution("o-1", worker.worker_id)
        assert token is not None
        runtime.dispatcher.call_soon(lambda: time.sleep(1.5))  # a busy loop
        results: dict[str, Any] = {}
        paths = {
            "adopt": lambda: runtime.adopt(["o-1"]),
            "sweep": lambda: runtime.resume_stranded(min_age_seconds=0),
        }
        threads = [
            threading.Thread(target=lambda n=n, f=f: results.__setitem__(n, f()))
            for n, f in paths.items()
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        claimed = [eid for found in results.values() for eid, _status in found]
        assert claimed == ["o-1"], results  # one path claimed it, the other saw it live
        owner, fence, _ = store.execution_owner("o-1")
        assert (owner, fence) == (worker.worker_id, token + 1)
        _wait(lambda: store.load_record("o-1").status is ExecutionStatus.WAITING)
        assert runtime.is_live("o-1")
        send_signal(store, "o-1", "approve", {"by": "test"})
        worker.start()
        _wait(lambda: store.load_record("o-1").status is ExecutionStatus.COMPLETED)
        charges = [e for e in read_ledger(ledger) if e.get("effect") == "charge_card"]
        assert len(charges) == 1
    finally:
        worker.close()
        store.close()
