"""A durable order workflow (docs/getting-started.md, "Example: an order workflow"): the
machine is ``order_workflow.yaml``, the effects call ``shop.py``'s stand-ins for a card
processor, an outbox and a carrier. ``python docs/examples/order_workflow.py --help``;
``create_app`` serves the operator tools and the crash harness."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

sys.path.insert(0, str(Path(__file__).resolve().parent))  # machines/, shop.py, durable_service.py
from durable_service import service_main, truthful_answer
from machines.order_workflow import MACHINE, TABLE
from shop import NOWHERE, ShopEffects

from phronomy_fsm.durable import DurableRuntime, EffectContext, ExecutionRecord, Machine
from phronomy_fsm.durable.app import Answer, DurableApp, Scenario

SHIPPING_CENTS = 500  # added to every order's amount


@attrs.define
class Order:  # the context, stored as JSON at every commit
    order_id: str
    amount_cents: int
    customer: str
    destination: str = "Berlin"
    total_cents: int = 0
    charge: dict | None = None  # what each outside system returned
    email: dict | None = None
    decision: dict | None = None  # the person's signal, or {"expired": True}
    shipment: dict | None = None
    refund: dict | None = None
    errors: list[str] = attrs.Factory(list)


def price_order(ctx: Order, payload: None) -> None:  # actions: (ctx, payload), on the loop
    ctx.total_cents = ctx.amount_cents + SHIPPING_CENTS


def remember(field: str) -> Callable[[Order, Any], None]:  # keep the payload in ``field``
    return lambda ctx, payload: setattr(ctx, field, payload)


remember_charge, remember_email, remember_decision = map(remember, ("charge", "email", "decision"))
remember_shipment, remember_refund = remember("shipment"), remember("refund")


def remember_expiry(ctx: Order, payload: None) -> None:
    ctx.decision = {"expired": True}


def remember_error(ctx: Order, payload: Exception) -> None:
    ctx.errors.append(f"{type(payload).__name__}: {payload}")


def charge_card(shop: ShopEffects, o: Order, ectx: EffectContext) -> dict:  # effects: on a worker
    return shop.charge(ectx.idempotency_key, ectx.attempt, o.order_id, o.total_cents)


def send_confirmation(shop: ShopEffects, o: Order, ectx: EffectContext) -> dict:
    subject = f"Order {o.order_id}: {o.total_cents} cents charged, awaiting approval"
    return shop.send_mail(ectx.idempotency_key, o.order_id, o.customer, subject)


def ship_order(shop: ShopEffects, o: Order, ectx: EffectContext) -> dict:
    return shop.ship(ectx.idempotency_key, ectx.attempt, o.order_id, o.destination)


def refund_card(shop: ShopEffects, o: Order, ectx: EffectContext) -> dict:
    return shop.refund(ectx.idempotency_key, o.order_id, o.charge or {})


def order_hooks(shop: ShopEffects) -> dict[str, Callable[..., Any]]:
    """Every hook of the table by name: this module's actions, its effects bound to ``shop``."""
    effects = (charge_card, send_confirmation, ship_order, refund_card)
    hooks = {name: globals()[name] for name in (*TABLE.guards, *TABLE.actions)}
    return hooks | {f.__name__: functools.partial(f, shop) for f in effects}


def order_machine(shop: ShopEffects, hooks: dict[str, Any] | None = None) -> Machine:
    """The machine; ``delivered`` finishes completed, ``cancelled`` and ``failed`` as named."""
    return Machine(TABLE, hooks or order_hooks(shop), context_type=Order)


def applied_signals(record: ExecutionRecord) -> list[Any]:
    """The signals an order's stored context holds: a person's decision (not the timer's)."""
    decision = record.context.get("decision")
    return [decision] if decision and not decision.get("expired") else []


def create_app(db_path: str) -> DurableApp:
    """The application factory: the machine, the crash harness's scenarios, the operator."""
    shop = ShopEffects.beside(db_path)

    def scenario(person: str | None, *orders: tuple[str, int, str]) -> Scenario:
        def run(rt: DurableRuntime) -> list[str]:
            for oid, cents, to in orders:
                rt.start(MACHINE, Order(oid, cents, f"{oid}@example.invalid", to), execution_id=oid)
            return [oid for oid, _, _ in orders]

        return Scenario(run, lambda r: person and Answer(event=person, payload={"by": "harness"}))

    scenarios = {
        "approved": scenario("approve", ("order-a", 2500, "Berlin")),
        "rejected": scenario("reject", ("order-r", 2500, "Berlin")),
        "timed_out": scenario(None, ("order-t", 2500, "Berlin")),
        "two_orders": scenario("approve", ("order-1", 1200, "Lisbon"), ("order-2", 3400, "Oslo")),
        "declined": scenario("approve", ("order-d", 250_000, "Berlin")),
        "unshippable": scenario("approve", ("order-u", 2500, NOWHERE)),
    }
    operator = functools.partial(truthful_answer, ledgers=shop.ledgers)  # from outside records
    return DurableApp((order_machine(shop),), scenarios, operator, shop.effects,
                      applied_signals=applied_signals)  # fmt: skip


def describe(record: ExecutionRecord) -> str:
    """One line about an order as stored: status, state and what happened."""
    c = record.context
    facts = [f"charged {c['charge']['amount_cents']} cents"] if c["charge"] else []
    facts += [f"tracking {c['shipment']['tracking']}"] if c["shipment"] else []
    facts += [f"refunded {c['refund']['amount_cents']} cents"] if c["refund"] else []
    state = f"{record.status.value} in {record.state}"
    return f"order {record.execution_id}: {state} ({'; '.join(facts + c['errors']) or '-'})"


def main(argv: list[str] | None = None) -> int:
    """The command line (``--help``; :func:`durable_service.service_main`)."""

    def start(rt: DurableRuntime, args: Any) -> None:
        order = Order(args.id, args.amount, f"{args.id}@example.invalid", args.destination)
        if not rt.start(MACHINE, order, execution_id=args.id).created:
            print(f"order {args.id} exists already")

    def options(parser: Any) -> None:
        parser.add_argument("--amount", type=int, default=2500, help="in cents")
        parser.add_argument("--destination", default="Berlin", help=f"{NOWHERE}: unshippable")

    return service_main(argv, noun="order", app=create_app, start=start, describe=describe,
                        person_states={"awaiting_approval"}, run_options=options)  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
