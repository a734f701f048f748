"""The order workflow example (docs/examples/order_workflow.py) in one process on a real
SQLite file: each way an order can end, what the outside systems recorded, the barrier
history, and the truthful operator."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import order_workflow as ow
import pytest
import shop
from durable_service import truthful_answer

from phronomy_fsm.durable import DurableEventKind, DurableRuntime, ExecutionStatus
from phronomy_fsm.runtime.clock import ManualClock
from phronomy_fsm.store import SqliteBarrierStore

from .conftest import Events


def _runtime(db: Path, events: Events, **options: Any) -> tuple[DurableRuntime, ow.ShopEffects]:
    effects = ow.ShopEffects.beside(db)
    runtime = DurableRuntime(
        SqliteBarrierStore(db),
        machines=[ow.order_machine(effects)],
        listeners=[events],
        own_store=True,
        **options,
    )
    return runtime, effects


def _waiting(events: Events, order_id: str) -> Any:
    return events.wait_for(
        lambda e: e.kind is DurableEventKind.WAITING and e.execution_id == order_id
    ).record


def test_an_approved_order_is_charged_mailed_and_shipped_once(
    tmp_path: Path, events: Events
) -> None:
    runtime, effects = _runtime(tmp_path / "shop.db", events)
    with runtime:
        handle = runtime.start(
            "order_workflow", ow.Order("o-1", 2500, "ana@example.invalid"), execution_id="o-1"
        )
        waiting = _waiting(events, "o-1")
        assert (waiting.state, waiting.status) == ("awaiting_approval", ExecutionStatus.WAITING)
        assert waiting.deadline_at is not None
        runtime.signal("o-1", "approve", {"by": "ana"}, expected_revision=waiting.revision)
        result = handle.result(10)
        log = runtime.store.barrier_log("o-1")
    assert (result.status, result.state) == (ExecutionStatus.COMPLETED, "delivered")
    order = result.context
    assert order.total_cents == 3000
    assert order.charge == {"amount_cents": 3000, "charge_id": order.charge["charge_id"]}
    assert order.decision == {"by": "ana"}
    assert order.shipment["destination"] == "Berlin"
    # @start announces the charge; the engine announces each later effect by its own
    # @effect commit (there is no barrier state in the spec)
    assert [(b.revision, b.barrier, b.state) for b in log] == [
        (0, "@start", "created"),
        (1, "@effect", "emailing"),
        (2, "@wait", "awaiting_approval"),
        (3, "@effect", "shipping"),
        (4, "@final", "delivered"),
    ]
    entries = [(e.effect, e.kind, e.attempt) for e in effects.effects()]
    assert sorted(entries) == [
        ("charge_card", "at_most_once", 1),
        ("send_confirmation", "idempotent", 1),
        ("ship_order", "at_most_once", 1),
    ]
    mail = effects.outbox.entries()[0]
    assert mail["key"].startswith("send_confirmation-") and mail["result"] == order.email


@pytest.mark.parametrize(
    ("amount", "destination", "person", "status", "state", "effects_run"),
    [
        (2500, "Berlin", "reject", ExecutionStatus.CANCELLED, "cancelled",
         ["charge_card", "refund_card", "send_confirmation"]),
        (2500, shop.NOWHERE, "approve", ExecutionStatus.CANCELLED, "cancelled",
         ["charge_card", "refund_card", "send_confirmation"]),
    ],
    ids=["rejected", "unshippable"],
)  # fmt: skip
def test_an_order_that_is_not_shipped_is_refunded(
    tmp_path: Path,
    events: Events,
    amount: int,
    destination: str,
    person: str,
    status: ExecutionStatus,
    state: str,
    effects_run: list[str],
) -> None:
    runtime, effects = _runtime(tmp_path / "shop.db", events)
    with runtime:
        order = ow.Order("o-2", amount, "bo@example.invalid", destination)
        handle = runtime.start("order_workflow", order, execution_id="o-2")
        runtime.signal(
            "o-2", person, {"by": "bo"}, expected_revision=_waiting(events, "o-2").revision
        )
        result = handle.result(10)
    assert (result.status, result.state) == (status, state)
    assert result.context.refund["charge_id"] == result.context.charge["charge_id"]
    assert sorted(e.effect for e in effects.effects()) == effects_run


def test_a_declined_card_fails_the_order_before_anything_else(
    tmp_path: Path, events: Events
) -> None:
    runtime, effects = _runtime(tmp_path / "shop.db", events)
    with runtime:
        order = ow.Order("o-3", shop.CARD_LIMIT_CENTS, "cy@example.invalid")
        result = runtime.start("order_workflow", order, execution_id="o-3").result(10)
    assert (result.status, result.state) == (ExecutionStatus.FAILED, "failed")
    assert result.context.errors == [
        f"CardDeclinedError: {shop.CARD_LIMIT_CENTS + ow.SHIPPING_CENTS} cents is above the card's limit"
    ]
    assert effects.effects() == []


def test_nobody_deciding_in_time_refunds_the_order(tmp_path: Path, events: Events) -> None:
    clock = ManualClock(start_wall=datetime.now(UTC))
    runtime, _ = _runtime(tmp_path / "shop.db", events, clock=clock, lease_seconds=3600)
    with runtime:
        handle = runtime.start(
            "order_workflow", ow.Order("o-4", 100, "d@example.invalid"), execution_id="o-4"
        )
        waiting = _waiting(events, "o-4")
        assert (waiting.deadline_at - clock.now()).total_seconds() == 10
        clock.advance(10)
        result = handle.result(10)
    assert (result.status, result.state) == (ExecutionStatus.CANCELLED, "cancelled")
    assert result.context.decision == {"expired": True}
    assert result.context.refund["amount_cents"] == 600


def test_the_idempotent_effects_happen_once_per_key(tmp_path: Path) -> None:
    effects = ow.ShopEffects(tmp_path / "effects")
    first = effects.send_mail("send_confirmation-k1", "o-1", "a@example.invalid", "hi")
    again = effects.send_mail("send_confirmation-k1", "o-1", "a@example.invalid", "hi")
    other = effects.send_mail("send_confirmation-k2", "o-1", "a@example.invalid", "hi")
    assert first == again != other
    charge = effects.charge("charge_card-k", 1, "o-1", 700)
    refunds = [effects.refund("refund_card-k", "o-1", charge) for _ in range(3)]
    assert refunds[0] == refunds[2]
    assert [e.effect for e in effects.effects()] == [
        "charge_card",
        "refund_card",
        "send_confirmation",
        "send_confirmation",
    ]


def test_the_operator_answers_from_the_outside_records(tmp_path: Path) -> None:
    from phronomy_fsm.durable.records import EffectKind, EffectRef, RecoveryInfo

    effects = ow.ShopEffects(tmp_path / "effects")
    charged = effects.charge("charge_card-done", 1, "o-1", 900)

    def parked(key: str | None) -> Any:
        subject = (
            None
            if key is None
            else EffectRef("charge_card", EffectKind.AT_MOST_ONCE, "charging", key)
        )
        info = RecoveryInfo(
            "the process stopped", subject, ("succeeded", "retry"), datetime.now(UTC)
        )
        return type("Record", (), {"recovery": info})()

    done = truthful_answer(parked("charge_card-done"), effects.ledgers)
    assert (done.outcome, done.result) == ("succeeded", charged)
    assert truthful_answer(parked("charge_card-never"), effects.ledgers).outcome == "retry"
    unreadable = truthful_answer(parked(None), effects.ledgers)
    assert (unreadable.outcome, unreadable.error) == ("failed", "the process stopped")
