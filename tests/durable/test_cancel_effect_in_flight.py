"""Cancelling an execution while one of its at_most_once effects runs keeps what is
known of that effect in the cancelled record (issue 22 item 10; docs/semantics.md
"Cancel"): the engine waited for the work, dropped its result and committed
``cancelled`` with nothing saying that the effect ran."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from phronomy_fsm.durable import DurableEventKind, DurableRuntime, ExecutionStatus, Machine
from phronomy_fsm.store import SqliteBarrierStore
from phronomy_fsm.testing.deadlines import scaled_seconds, wait_until

from .late_effect_app import TABLE, Hooks
from .order_app import read_ledger


class GatedHooks(Hooks):
    """``ship`` runs (and writes its ledger line) only once ``gate`` is set."""

    def __init__(self, ledger: Path) -> None:
        super().__init__(ledger)
        self.gate = threading.Event()

    def ship(self, ctx: dict[str, Any], payload: Any) -> Any:
        work = super().ship(ctx, payload)

        def gated(octx: Any) -> Any:
            assert self.gate.wait(scaled_seconds(30))
            return work(octx)

        return gated


def test_a_cancelled_record_names_the_effect_it_cut_short_and_its_key(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.jsonl"
    hooks = GatedHooks(ledger)
    started: list[Any] = []

    def listen(event: Any) -> None:
        if event.kind is DurableEventKind.EFFECT_STARTED:
            started.append(event.detail)

    runtime = DurableRuntime(
        SqliteBarrierStore(tmp_path / "c.db"),
        machines=[Machine(TABLE, hooks)],
        listeners=[listen],
        own_store=True,
    )
    with runtime:
        handle = runtime.start("late_effect", {"order": "c-1"}, execution_id="c-1")
        wait_until(lambda: handle.record().status is ExecutionStatus.WAITING, 10, "the wait")
        runtime.signal("c-1", "approve", {"by": "ops"})
        wait_until(lambda: started, 10, "the shipping effect to start")
        runtime.cancel("c-1", reason="the customer called")
        hooks.gate.set()  # it ships after all, as the cancel waits for it
        wait_until(lambda: not handle.record().is_active, 30, "the cancel")
        record = handle.record()
    [shipped] = read_ledger(ledger)
    assert record.status is ExecutionStatus.CANCELLED
    message = record.error.message
    assert message.startswith("the customer called; the at_most_once effect ship")
    assert f"idempotency key {shipped['key']}, attempt 1" in message
    assert "it returned a result; its result was not applied" in message
