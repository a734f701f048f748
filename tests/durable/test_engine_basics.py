"""The durable engine end to end on a real SQLite file: start, barriers, effects with
keys, a wait state with a signal, final commit, the barrier log."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from phronomy_fsm.durable import DurableEventKind, DurableRuntime, ExecutionStatus
from phronomy_fsm.store import SqliteBarrierStore

from .order_app import Order, order_machine, read_ledger


def _runtime(tmp_path: Path, **options):
    store = SqliteBarrierStore(tmp_path / "orders.db")
    events = []
    runtime = DurableRuntime(
        store,
        machines=[order_machine(tmp_path / "ledger.jsonl")],
        listeners=[events.append],
        own_store=True,
        **options,
    )
    return runtime, events


def _wait_for(events, predicate, timeout=10.0):
    done = threading.Event()
    deadline = timeout
    import time

    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if any(predicate(e) for e in list(events)):
            return
        done.wait(0.01)
    raise AssertionError(f"no matching event in {[e.kind.value for e in events]}")


def test_an_order_runs_to_its_wait_state_then_ships_on_approval(tmp_path: Path) -> None:
    runtime, events = _runtime(tmp_path)
    with runtime:
        handle = runtime.start("order_flow", Order("o-1", 1000), execution_id="o-1")
        _wait_for(events, lambda e: e.kind is DurableEventKind.WAITING)
        waiting = handle.record()
        assert waiting.status is ExecutionStatus.WAITING
        assert waiting.state == "awaiting_approval"
        assert waiting.deadline_at is not None
        runtime.signal("o-1", "approve", {"by": "ops"})
        result = handle.result(10)
    assert result.status is ExecutionStatus.COMPLETED
    assert result.state == "shipped"
    assert result.context.tracking["tracking"] == "T-o-1"
    assert result.context.decision == {"by": "ops"}
    ledger = read_ledger(tmp_path / "ledger.jsonl")
    assert [e["effect"] for e in ledger] == ["charge_card", "send_email", "ship_parcel"]
    assert all(e["attempt"] == 1 and e["key"].startswith(e["effect"] + "-") for e in ledger)
    with SqliteBarrierStore(tmp_path / "orders.db") as store:
        log = store.barrier_log("o-1")
        assert [(b.revision, b.barrier, b.state) for b in log] == [
            (0, "@start", "created"),
            (1, "charge", "announcing_charge"),
            (2, "paid", "recording_payment"),
            (3, "@wait", "awaiting_approval"),
            (4, "ship", "announcing_shipping"),
            (5, "@final", "shipped"),
        ]
        signals = store.list_signals("o-1")
        assert [(s.event, s.consumed_revision, s.outcome) for s in signals] == [
            ("approve", 4, "consumed")
        ]


def test_a_rejection_finishes_failed_and_a_second_signal_is_refused(tmp_path: Path) -> None:
    from phronomy_fsm.errors import ExecutionFinishedError

    runtime, events = _runtime(tmp_path)
    with runtime:
        handle = runtime.start("order_flow", Order("o-2", 1), execution_id="o-2")
        _wait_for(events, lambda e: e.kind is DurableEventKind.WAITING)
        runtime.signal("o-2", "reject", {"by": "ops"})
        result = handle.result(10)
        assert result.status is ExecutionStatus.FAILED and result.state == "rejected"
        with pytest.raises(ExecutionFinishedError):
            runtime.signal("o-2", "approve", {})


def test_effects_report_their_start_and_their_return(tmp_path: Path) -> None:
    runtime, events = _runtime(tmp_path)
    with runtime:
        handle = runtime.start("order_flow", Order("o-3", 1), execution_id="o-3")
        _wait_for(events, lambda e: e.kind is DurableEventKind.WAITING)
        runtime.signal("o-3", "approve", {})
        handle.result(10)
    started = [e.detail for e in events if e.kind is DurableEventKind.EFFECT_STARTED]
    finished = [e.detail for e in events if e.kind is DurableEventKind.EFFECT_FINISHED]
    assert [d["effect"] for d in started] == ["charge_card", "send_email", "ship_parcel"]
    assert [(d["effect"], d["key"]) for d in finished] == [(d["effect"], d["key"]) for d in started]
    assert finished[0]["value"]["charged_cents"] == 1 + 500  # the amount and shipping
    assert all(d["error"] is None for d in finished)
