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
from phronomy_fsm.testing.deadlines import scaled_seconds

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


def _batch_machines(items: Any) -> list[Any]:
    """The batch parent and its item children, the items worked on by ``items``."""
    from phronomy_fsm.durable import Machine

    from .batch_app import Batch, BatchHooks, Item
    from .generated import batch_flow, item_flow

    return [
        Machine(batch_flow.TABLE, BatchHooks(), context_type=Batch),
        Machine(item_flow.TABLE, items, context_type=Item),
    ]


def _abandoned_batch(db: str, ledger: Path, names: list[str], gate: threading.Event) -> Any:
    """Runtime A starts batch ``batch`` of ``names`` whose items' work hangs on ``gate``,
    then goes away (closed, its lease let go) while they hang; returns a store open
    on ``db``, for the caller to close."""
    from phronomy_fsm.durable import DurableRuntime

    from .batch_app import Batch, Item, ItemHooks

    class Hanging(ItemHooks):
        def do_item(self, ctx: Item, payload: Any) -> Any:
            def work(octx: Any) -> Any:
                gate.wait(60)
                raise RuntimeError("runtime A is gone")

            return work

    first = DurableRuntime(
        open_store(db), machines=_batch_machines(Hanging(ledger)), own_store=True, lease_seconds=1.0
    )
    first.start("batch_flow", Batch(names), execution_id="batch")
    store = open_store(db)
    _wait(lambda: len(store.list_records(parent_execution_id="batch")) == len(names))
    time.sleep(0.3)  # the children's work has started and hangs
    first.close(timeout_seconds=0.5)
    return store


def test_a_parent_waiting_for_its_children_does_not_keep_them_from_being_claimed(
    tmp_path: Path,
) -> None:
    # runtime A starts a batch (a parent and three children) and goes away while the
    # children's work hangs; worker B, with room for ONE running execution, takes over.
    # The parent, once replayed, only waits for its children: it must not use B's slot,
    # or B never claims the children and the batch never finishes.
    from .batch_app import ItemHooks

    gate = threading.Event()
    ledger = tmp_path / "items.jsonl"
    store = _abandoned_batch(str(tmp_path / "batch.db"), ledger, ["x", "y", "z"], gate)
    try:
        machines = _batch_machines(ItemHooks(ledger))
        worker = Worker(
            store, DurableApp(machines=tuple(machines)), concurrency=1, scan_seconds=0.1,
            lease_seconds=1.0,
        )  # fmt: skip
        worker.start()
        try:
            _wait(lambda: store.load_record("batch").status is ExecutionStatus.COMPLETED, 30)
            children = store.list_records(parent_execution_id="batch")
            assert {c.status for c in children} == {ExecutionStatus.COMPLETED}
        finally:
            worker.close()
    finally:
        gate.set()
        store.close()


def test_cancelling_a_parent_cancels_the_children_another_runtime_holds(
    tmp_path: Path,
) -> None:
    # runtime A starts a batch and goes away while its children's work hangs; runtime B
    # takes over only the parent and cancels it: the children B does not run get the
    # cancel in their inbox, and whoever recovers them ends them cancelled without
    # running their work again
    from phronomy_fsm.durable import DurableRuntime

    from .batch_app import ItemHooks

    gate = threading.Event()
    db = str(tmp_path / "batch.db")
    ledger = tmp_path / "items.jsonl"
    store = _abandoned_batch(db, ledger, ["x", "y"], gate)
    try:
        second = DurableRuntime(
            open_store(db), machines=_batch_machines(ItemHooks(ledger)), own_store=True
        )
        try:
            _wait(lambda: second.claim(accept=lambda r: r.machine == "batch_flow") or True)
            _wait(lambda: second.handle("batch").record().status is not None)
            second.cancel("batch", reason="the batch was called off")
            assert second.handle("batch").result(15).status is ExecutionStatus.CANCELLED
            children = [c.execution_id for c in store.list_records(parent_execution_id="batch")]
            _wait(
                lambda: all(
                    any(s.kind.value == "cancel" for s in store.list_signals(c)) for c in children
                )
            )
        finally:
            second.close(timeout_seconds=5)
        third = DurableRuntime(
            open_store(db), machines=_batch_machines(ItemHooks(ledger)), own_store=True
        )
        try:
            third.recover()
            for child in children:
                assert third.handle(child).result(15).status is ExecutionStatus.CANCELLED
        finally:
            third.close(timeout_seconds=5)
        assert not ledger.exists() or "do_item" not in ledger.read_text()  # no work re-run
    finally:
        gate.set()
        store.close()


class _SlowChildCancels:
    """A store whose writes of a parent's cancel to its children wait until the parent's
    ``@cancel`` commit is submitted (or a few seconds pass): a slow disk, the moment a
    crash lost them before their write came before that commit."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.parent_committing = threading.Event()
        self.order: list[str] = []

    def send_signal(self, signal: Any) -> Any:
        if signal.signal_id.startswith("cancel-of-parent:"):
            self.parent_committing.wait(scaled_seconds(1))
            self.order.append(f"cancel {signal.execution_id}")
        return self.inner.send_signal(signal)

    def submit(self, commit: Any) -> Any:
        if commit.barrier == "@cancel" and commit.execution.execution_id == "batch":
            self.order.append("@cancel batch")
            self.parent_committing.set()
        return self.inner.submit(commit)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_a_parents_cancel_commit_comes_after_its_childrens_cancel_requests(
    tmp_path: Path,
) -> None:
    """Issue 22 item 7: the requests to children held elsewhere were written by a
    background thread after the parent's @cancel commit; a crash in between left them
    running for good. Now the commit waits for them (until it, the parent's own request
    stays pending, so a recovery cancels parent and children again)."""
    from phronomy_fsm.durable import DurableRuntime

    from .batch_app import ItemHooks

    gate = threading.Event()
    db = str(tmp_path / "batch.db")
    ledger = tmp_path / "items.jsonl"
    store = _abandoned_batch(db, ledger, ["x", "y"], gate)
    slow = _SlowChildCancels(open_store(db))
    try:
        second = DurableRuntime(slow, machines=_batch_machines(ItemHooks(ledger)), own_store=False)
        try:
            _wait(lambda: second.claim(accept=lambda r: r.machine == "batch_flow") or True)
            _wait(lambda: second.handle("batch").record().status is not None)
            second.cancel("batch", reason="the batch was called off")
            assert second.handle("batch").result(scaled_seconds(15)).status is (
                ExecutionStatus.CANCELLED
            )
            children = sorted(
                c.execution_id for c in store.list_records(parent_execution_id="batch")
            )
            # no waiting: when the parent is committed cancelled, its children know
            assert all(
                any(s.kind.value == "cancel" for s in store.list_signals(c)) for c in children
            )
            assert slow.order == [*(f"cancel {c}" for c in children), "@cancel batch"]
            # each child's request carries the parent's reason (mutation survivor:
            # runtime.py `_cancel_each` dropping it for the default text)
            reasons = {
                s.payload["reason"]
                for c in children
                for s in store.list_signals(c)
                if s.kind.value == "cancel"
            }
            assert reasons == {"the batch was called off"}
        finally:
            second.close(timeout_seconds=5)
    finally:
        gate.set()
        slow.inner.close()
        store.close()
