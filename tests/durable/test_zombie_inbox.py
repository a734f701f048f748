"""A worker whose lease passed (a network cut, a pause) and whose execution another
worker took over must not close that worker's signals: its stale live copy, polling its
inbox before its next heartbeat, calls the new owner's current approval stale, and
before issue 22 item 6 closed it unfenced — the new owner found no approval and the
execution waited for ever. The close is refused (LeaseLostError) and the stale copy is
let go, as after a refused commit (``docs/semantics.md``, "Leases and fencing").

Real components on SQLite and PostgreSQL: worker A is a :class:`DurableRuntime` that
runs an order to its approval; worker B is played by the test on the store (it claims
the execution and commits once, as a takeover would)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import attrs
import pytest

from phronomy_fsm.durable import DurableEventKind, ExecutionStatus
from phronomy_fsm.durable.operations import send_signal
from phronomy_fsm.durable.records import DurableCommit, Fence, WorkerRecord
from phronomy_fsm.store.open import open_store

from .order_app import Order, order_machine

pytestmark = pytest.mark.timeout(120)


def _wait(predicate: Any, timeout_seconds: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout_seconds
    while not (value := predicate()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)
    return value


def test_a_zombie_workers_stale_copy_does_not_close_the_new_owners_approval(
    open_runtime: Any, store_target: str, tmp_path: Path
) -> None:
    # A renews its lease only every 200 s: its stale copy is still live when the
    # approval arrives (the poll comes before the heartbeat that would let it go)
    a, events = open_runtime([order_machine(tmp_path / "ledger.jsonl")], lease_seconds=600)
    a.start("order_flow", Order("z1", 100), execution_id="z1")
    events.wait_for(lambda e: e.kind is DurableEventKind.WAITING and e.execution_id == "z1")
    with open_store(store_target) as store:
        waiting = store.load_record("z1")
        assert store.execution_owner("z1")[:2] == (a.worker_id, 1)
        # A is cut off past its lease; B takes the order over and commits it once
        store.retire_worker(a.worker_id)
        at = waiting.created_at
        b = WorkerRecord("B", "other-host", 1, "B", at, at, at)
        store.register_worker(b, 60)
        assert store.claim_execution("z1", "B") == 2
        moved = attrs.evolve(waiting, revision=waiting.revision + 1)
        store.submit(DurableCommit("@wait", moved, waiting.revision, Fence("B", 2))).result(30)
        # a person approves the order as B holds it; A's copy, at the revision before,
        # takes the approval for a stale one
        approval = send_signal(
            store, "z1", "approve", {"by": "ops"}, expected_revision=moved.revision
        )

        def settled() -> bool:
            released = any(
                e.kind is DurableEventKind.RELEASED and e.execution_id == "z1"
                for e in events.events
            )
            closed = store.list_signals("z1")[0].consumed_revision is not None
            return released or closed

        _wait(settled)
        [stored] = store.list_signals("z1")
        assert (stored.seq, stored.consumed_revision, stored.outcome) == (approval.seq, None, None)
        assert store.load_record("z1") == moved  # A wrote nothing
        assert store.execution_owner("z1")[:2] == ("B", 2)
        events.wait_for(lambda e: e.kind is DurableEventKind.RELEASED and e.execution_id == "z1")
        assert store.load_record("z1").status is ExecutionStatus.WAITING


def test_the_owner_closes_a_stale_signal_under_its_own_fence(
    open_runtime: Any, store_target: str, tmp_path: Path
) -> None:
    """The fenced close still does its job for the owner: an approval meant for a
    revision the execution has left is closed ``rejected: stale`` by the worker that
    holds the execution now."""
    machines = [order_machine(tmp_path / "ledger.jsonl")]
    first, events = open_runtime(machines)
    first.start("order_flow", Order("z2", 100), execution_id="z2")
    events.wait_for(lambda e: e.kind is DurableEventKind.WAITING and e.execution_id == "z2")
    first.close(timeout_seconds=5)  # its lease ends with it
    with open_store(store_target) as store:
        waiting = store.load_record("z2")
        approval = send_signal(
            store, "z2", "approve", {"by": "ops"}, expected_revision=waiting.revision
        )
        # the execution moves on before anyone applies the approval (a commit made
        # under no lease, as an operator's tool would)
        moved = attrs.evolve(waiting, revision=waiting.revision + 1)
        store.submit(DurableCommit("@wait", moved, waiting.revision)).result(30)
        second, _ = open_runtime(machines)
        second.recover()
        assert store.execution_owner("z2")[:2] == (second.worker_id, 2)
        closed = _wait(lambda: store.list_signals("z2")[0].outcome)
        assert closed.startswith("rejected: stale"), closed
        [stored] = store.list_signals("z2")
        assert (stored.seq, stored.consumed_revision) == (approval.seq, moved.revision)
        assert store.load_record("z2").status is ExecutionStatus.WAITING
