"""The order machine of the durable-engine tests: context, hooks with file-backed effects.

Every effect appends one JSON line — its name, idempotency key, attempt and the order —
to an **effects ledger** and fsyncs it before returning, so a test (or the crash
harness) can count how often each effect really happened. The ledger lives in the
folder named by ``PHRONOMY_APP_DIR`` when set (a PostgreSQL store has no folder), else
beside the database file. ``PHRONOMY_TEST_EFFECT_SECONDS`` makes each effect take that
long before it acts (a slow outside service: the fault tests pause and kill workers
while effects are in flight).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import attrs

sys.path.insert(0, str(Path(__file__).resolve().parent / "generated"))

from order_flow import TABLE, Hooks

from phronomy_fsm.durable import ExecutionStatus, Machine


@attrs.define
class Order:
    """The context of one order execution."""

    order_id: str
    amount_cents: int
    price_cents: int = 0
    receipt: dict[str, Any] | None = None
    email: dict[str, Any] | None = None
    decision: dict[str, Any] | None = None
    tracking: dict[str, Any] | None = None
    errors: list[str] = attrs.Factory(list)


def append_effect(ledger: Path, entry: dict[str, Any]) -> None:
    """Append one effect to the ledger and fsync it."""
    line = json.dumps(entry, sort_keys=True) + "\n"
    fd = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line.encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def read_ledger(ledger: Path) -> list[dict[str, Any]]:
    """Every effect appended so far."""
    if not ledger.exists():
        return []
    return [json.loads(line) for line in ledger.read_text().splitlines() if line.strip()]


class OrderHooks(Hooks):
    """The order's hooks; effects append to ``ledger``."""

    def __init__(self, ledger: Path, *, fail: frozenset[str] = frozenset()) -> None:
        self.ledger = ledger
        self.fail = fail

    def price_order(self, ctx: Order, payload: Any) -> None:
        ctx.price_cents = ctx.amount_cents + 500  # shipping

    def remember_receipt(self, ctx: Order, payload: Any) -> None:
        ctx.receipt = payload

    def remember_email(self, ctx: Order, payload: Any) -> None:
        ctx.email = payload

    def remember_decision(self, ctx: Order, payload: Any) -> None:
        ctx.decision = payload

    def remember_tracking(self, ctx: Order, payload: Any) -> None:
        ctx.tracking = payload

    def remember_error(self, ctx: Order, payload: Any) -> None:
        ctx.errors.append(f"{type(payload).__name__}: {payload}")

    def _effect(self, name: str, ctx: Order, result: dict[str, Any]) -> Any:
        ledger, fail, order_id = self.ledger, self.fail, ctx.order_id

        delay = float(os.environ.get("PHRONOMY_TEST_EFFECT_SECONDS", "0") or 0)

        def work(octx: Any) -> dict[str, Any]:
            if delay:
                time.sleep(delay)
            if name in fail:
                raise RuntimeError(f"{name} refused")
            effect = octx.effect
            value = {**result, "key": effect.key}
            append_effect(
                ledger,
                {
                    "effect": name,
                    "order": order_id,
                    "key": effect.key,
                    "attempt": effect.attempt,
                    "result": value,
                },
            )
            return value

        return work

    def charge_card(self, ctx: Order, payload: Any) -> Any:
        return self._effect("charge_card", ctx, {"charged_cents": ctx.price_cents})

    def send_email(self, ctx: Order, payload: Any) -> Any:
        return self._effect("send_email", ctx, {"to": f"{ctx.order_id}@example.invalid"})

    def ship_parcel(self, ctx: Order, payload: Any) -> Any:
        return self._effect("ship_parcel", ctx, {"tracking": f"T-{ctx.order_id}"})


def order_machine(ledger: Path, **options: Any) -> Machine:
    """The order machine bound to hooks writing ``ledger``."""
    return Machine(
        TABLE,
        OrderHooks(ledger, **options),
        context_type=Order,
        final_status={"rejected": ExecutionStatus.FAILED, "failed": ExecutionStatus.FAILED},
    )


# ------------------------------------------------------------------ the durable app

KINDS = {"charge_card": "at_most_once", "send_email": "idempotent", "ship_parcel": "at_most_once"}


def ledger_path(db_path: str) -> Path:
    """The effects ledger of the app on store ``db_path`` (module docstring)."""
    if "://" not in db_path and "=" not in db_path:  # a SQLite file: its folder
        return Path(db_path).resolve().parent / "ledger.jsonl"
    folder = os.environ.get("PHRONOMY_APP_DIR")
    if not folder:
        raise ValueError("a PostgreSQL store has no folder: set PHRONOMY_APP_DIR for the ledger")
    return Path(folder) / "ledger.jsonl"


def create_app(db_path: str) -> Any:
    """The application factory of the crash harness (``--app tests.durable.order_app:create_app``)."""
    from phronomy_fsm.durable.app import Answer, DurableApp, EffectEntry, Scenario

    ledger = ledger_path(db_path)

    def start(ids: list[str]) -> Any:
        def run(runtime: Any) -> list[str]:
            for i, order_id in enumerate(ids):
                runtime.start("order_flow", Order(order_id, 1000 + i), execution_id=order_id)
            return ids

        return run

    def answer(event: str) -> Any:
        def on_waiting(record: Any) -> Any:
            return Answer(event=event, payload={"by": "harness"})

        return on_waiting

    def operator(record: Any) -> Any:
        subject = record.recovery.subject if record.recovery is not None else None
        if subject is None:
            return Answer(outcome="failed", error="cannot be resumed")
        done = [e for e in read_ledger(ledger) if e["key"] == subject.key]
        if done:
            return Answer(outcome="succeeded", result=done[-1]["result"])
        return Answer(outcome="retry")

    def effects() -> list[Any]:
        return [
            EffectEntry(
                e["order"], e["effect"], KINDS[e["effect"]], e["key"], e["attempt"], e["result"]
            )
            for e in read_ledger(ledger)
        ]

    return DurableApp(
        machines=(order_machine(ledger),),
        scenarios={
            "approved": Scenario(start(["order-a"]), answer("approve")),
            "rejected": Scenario(start(["order-r"]), answer("reject")),
            "two_orders": Scenario(start(["order-1", "order-2"]), answer("approve")),
        },
        operator=operator,
        effects=effects,
    )
