"""The order workflow of ``docs/examples/order_workflow.{yaml,py}`` written with DBOS, to compare.

Same steps against the same stand-ins (``docs/examples/shop.py``): charge, e-mail, wait at
most 10 s for a person's decision, ship or refund. Not run in CI; a local check (SQLite)::

    python docs/examples/peers/order_workflow_dbos.py o-1 --person approve --db shop-dbos.db

Differences that are DBOS's, not the example's: a step cut short by a crash runs again on
recovery (at least once: DBOS has no at-most-once step that parks for an operator); a
decision's payload is not checked against a declared type; there is no spec to validate
or draw.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from dbos import DBOS, DBOSConfig, SetWorkflowID

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # shop.py
from shop import CardDeclinedError, CarrierRefusedError, ShopEffects

SHIPPING_CENTS = 500
APPROVAL_SECONDS = 10
SHOP: ShopEffects  # set by main(): the records beside the database


def key() -> str:  # an idempotency key: stable across a step's re-runs
    return f"{DBOS.workflow_id}-{DBOS.step_id}"


@DBOS.step()
def charge_card(order: dict[str, Any]) -> dict[str, Any]:
    return SHOP.charge(key(), 1, order["order_id"], order["total_cents"])


@DBOS.step()
def send_confirmation(order: dict[str, Any]) -> dict[str, Any]:
    subject = f"Order {order['order_id']}: {order['total_cents']} cents charged, awaiting approval"
    return SHOP.send_mail(key(), order["order_id"], order["customer"], subject)


@DBOS.step()
def ship_order(order: dict[str, Any]) -> dict[str, Any]:
    return SHOP.ship(key(), 1, order["order_id"], order["destination"])


@DBOS.step()
def refund_card(order: dict[str, Any]) -> dict[str, Any]:
    return SHOP.refund(key(), order["order_id"], order["charge"])


@DBOS.workflow()
def order_workflow(order: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """Run one order to its end: ``(final state, order)``."""
    order["total_cents"] = order["amount_cents"] + SHIPPING_CENTS
    try:
        order["charge"] = charge_card(order)
    except CardDeclinedError as exc:
        order["errors"].append(f"CardDeclinedError: {exc}")
        return "failed", order
    try:
        order["email"] = send_confirmation(order)
    except Exception as exc:  # noqa: BLE001 - the mail is a courtesy: wait anyway
        order["errors"].append(f"{type(exc).__name__}: {exc}")
    decision = DBOS.recv("decision", timeout_seconds=APPROVAL_SECONDS)
    order["decision"] = decision or {"expired": True}
    if decision is not None and decision.get("event") == "approve":
        try:
            order["shipment"] = ship_order(order)
            return "delivered", order
        except CarrierRefusedError as exc:
            order["errors"].append(f"CarrierRefusedError: {exc}")
    try:
        order["refund"] = refund_card(order)
        return "cancelled", order
    except Exception as exc:  # noqa: BLE001 - an operator follows up
        order["errors"].append(f"{type(exc).__name__}: {exc}")
        return "failed", order


def main(argv: list[str] | None = None) -> None:
    """Start (or resume) an order, let a person decide, print how it ended."""
    global SHOP
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("order_id")
    parser.add_argument("--db", default="shop-dbos.db")
    parser.add_argument("--amount", type=int, default=2500)
    parser.add_argument("--destination", default="Berlin")
    parser.add_argument("--person", choices=("approve", "reject", "nobody"), default="approve")
    args = parser.parse_args(argv)
    SHOP = ShopEffects.beside(args.db)
    config: DBOSConfig = {
        "name": "order-workflow-dbos",
        "system_database_url": f"sqlite:///{args.db}",
    }
    DBOS(config=config)
    DBOS.launch()  # recovers the workflows a crash cut short
    order = {"order_id": args.order_id, "amount_cents": args.amount, "destination": args.destination,
             "customer": f"{args.order_id}@example.invalid", "errors": []}  # fmt: skip
    with SetWorkflowID(args.order_id):  # starting an id twice returns the first run
        handle = DBOS.start_workflow(order_workflow, order)
    if args.person != "nobody":
        DBOS.send(args.order_id, {"event": args.person, "by": "person"}, topic="decision")
    state, result = handle.get_result()
    print(f"order {args.order_id}: {state} ({'; '.join(result['errors']) or 'no error'})")
    DBOS.destroy()


if __name__ == "__main__":
    main()
