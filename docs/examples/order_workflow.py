"""A durable order workflow of your own (docs/getting-started.md, "Example: an order workflow").

The machine is ``docs/examples/order_workflow.yaml``: charge the card, e-mail a
confirmation, wait for a person's approval (at most 10 seconds), ship; a rejected,
expired or unshippable order is refunded. Its generated table is checked in as
``docs/examples/machines/order_workflow.py`` (a test keeps it fresh); regenerate it with
``phronomy-fsm generate docs/examples/order_workflow.yaml --out docs/examples/machines``.

The effects write to small files in a folder beside the database
(``shop.db`` → ``shop-effects/``), stand-ins for outside systems that keep their own
records, so a run can be checked:

- ``card_ledger.jsonl``, the card processor: a **charge** is not deduplicated (the spec
  declares it ``at_most_once``: after a crash an operator decides), a **refund** is, by
  idempotency key (``idempotent``: recovery runs it again with the same key);
- ``outbox.jsonl``: confirmation e-mails, deduplicated by key (``idempotent``);
- ``shipments.jsonl``, the carrier: not deduplicated (``at_most_once``).

Run it (``--help`` lists the options)::

    python docs/examples/order_workflow.py run o-1 --amount 2500 --person approve --db shop.db
    python docs/examples/order_workflow.py run o-2 --amount 2500 --person later --db shop.db
    python docs/examples/order_workflow.py signal o-2 approve --db shop.db
    python docs/examples/order_workflow.py run --db shop.db --operator

``create_app`` is the application factory of the operator tools and the crash harness
(``--app docs.examples.order_workflow:create_app``).
"""

from __future__ import annotations

import argparse
import os
import queue
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # machines/ (generated) and durable_service.py
    sys.path.insert(0, str(HERE))

from durable_service import PERSON_CHOICES, JsonLines, printing_listener, serve, truthful_answer
from machines.order_workflow import MACHINE, TABLE, Hooks

from phronomy_fsm.durable import (
    DurableEvent,
    DurableRuntime,
    ExecutionRecord,
    ExecutionStatus,
    Machine,
    send_signal,
)
from phronomy_fsm.durable.app import Answer, DurableApp, EffectEntry, Scenario
from phronomy_fsm.errors import PhronomyError
from phronomy_fsm.store import SqliteBarrierStore

#: Added to every order's amount, in cents.
SHIPPING_CENTS = 500
#: The card processor declines a charge above this total, in cents.
CARD_LIMIT_CENTS = 100_000
#: The carrier refuses parcels to this destination.
NOWHERE = "Atlantis"


@attrs.define
class Order:
    """The context of one order execution: the order, then what happened to it.

    Persisted as JSON at every commit (``docs/semantics.md``, "The context"), so every
    field is JSON data: ``*_cents`` are integers, the effects' results are the dicts
    the outside systems returned.
    """

    order_id: str
    amount_cents: int
    customer: str
    destination: str = "Berlin"
    total_cents: int = 0
    charge: dict[str, Any] | None = None
    email: dict[str, Any] | None = None
    decision: dict[str, Any] | None = None
    shipment: dict[str, Any] | None = None
    refund: dict[str, Any] | None = None
    errors: list[str] = attrs.Factory(list)


# ------------------------------------------------------------------ the outside world


class CardDeclinedError(Exception):
    """The card processor declined a charge (the order finishes ``failed``)."""


class CarrierRefusedError(Exception):
    """The carrier refused a parcel (the order is refunded)."""


class ShopEffects:
    """The card processor, the outbox and the carrier of the example, as files.

    Args:
        folder: where their records live (see the module docstring).

    Every method runs on an offload worker, only after the barrier announcing it
    committed, and returns the JSON result the machine keeps in the context (and an
    operator may hand back when resolving). Each entry names the execution (the order
    id: the example starts each order under its own id), the effect, its kind, its
    idempotency key and its attempt.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.card = JsonLines(folder / "card_ledger.jsonl")
        self.outbox = JsonLines(folder / "outbox.jsonl")
        self.carrier = JsonLines(folder / "shipments.jsonl")
        self.ledgers = (self.card, self.outbox, self.carrier)

    @classmethod
    def beside(cls, db_path: str | os.PathLike[str]) -> ShopEffects:
        """The effects of the store at ``db_path``: ``<folder>/<stem>-effects/``."""
        path = Path(db_path).resolve()
        return cls(path.parent / f"{path.stem}-effects")

    def charge(self, key: str, attempt: int, order_id: str, total_cents: int) -> dict[str, Any]:
        """Charge the card. Not deduplicated: every call is a new charge.

        Raises:
            CardDeclinedError: the total is above :data:`CARD_LIMIT_CENTS` (nothing
                is charged).
        """
        if total_cents > CARD_LIMIT_CENTS:
            raise CardDeclinedError(f"{total_cents} cents is above the card's limit")
        result = {"charge_id": f"ch-{key[-12:]}-{attempt}", "amount_cents": total_cents}
        return self.card.record(
            execution_id=order_id,
            effect="charge_card",
            kind="at_most_once",
            key=key,
            attempt=attempt,
            result=result,
        )

    def refund(self, key: str, order_id: str, charge: dict[str, Any]) -> dict[str, Any]:
        """Refund ``charge``; a key seen before returns the first refund's result."""
        result = {
            "refund_id": f"re-{key[-12:]}",
            "charge_id": charge["charge_id"],
            "amount_cents": charge["amount_cents"],
        }
        return self.card.once(
            key, lambda: _entry(order_id, "refund_card", "idempotent", key, result)
        )

    def send_mail(self, key: str, order_id: str, to: str, subject: str) -> dict[str, Any]:
        """Put an e-mail in the outbox; a key seen before returns the first one's result
        (the mail goes out once)."""
        result = {"message_id": f"m-{key[-12:]}", "to": to, "subject": subject}
        return self.outbox.once(
            key, lambda: _entry(order_id, "send_confirmation", "idempotent", key, result)
        )

    def ship(self, key: str, attempt: int, order_id: str, destination: str) -> dict[str, Any]:
        """Hand the parcel to the carrier. Not deduplicated.

        Raises:
            CarrierRefusedError: the destination is :data:`NOWHERE` (nothing shipped).
        """
        if destination == NOWHERE:
            raise CarrierRefusedError(f"the carrier does not deliver to {destination}")
        result = {"tracking": f"T-{key[-12:]}-{attempt}", "destination": destination}
        return self.carrier.record(
            execution_id=order_id,
            effect="ship_order",
            kind="at_most_once",
            key=key,
            attempt=attempt,
            result=result,
        )

    def effects(self) -> list[EffectEntry]:
        """Every effect that happened, as the crash harness reads them."""
        return [entry for ledger in self.ledgers for entry in ledger.effects()]


def _entry(order_id: str, effect: str, kind: str, key: str, result: Any) -> dict[str, Any]:
    return {
        "execution_id": order_id,
        "effect": effect,
        "kind": kind,
        "key": key,
        "attempt": 1,
        "result": result,
    }


# ------------------------------------------------------------------ the hooks


class OrderHooks(Hooks):
    """The hooks the generated ``Hooks`` Protocol lists, called on the loop thread as
    ``hook(ctx, payload)``. Actions change the context; offload hooks snapshot what the
    work needs and return the work, which runs on a worker as ``work(octx)`` with the
    effect's idempotency key (``octx.idempotency_key``) and attempt
    (``octx.effect.attempt``). The barriers (``charge``, ``payment``, ``shipment``,
    ``refund``) need no hook: the engine commits them.

    Args:
        effects: the outside world the work writes to.
    """

    def __init__(self, effects: ShopEffects) -> None:
        self.effects = effects

    # actions

    def price_order(self, ctx: Order, payload: Any) -> None:
        """Entry of ``created``: the total is the amount plus shipping."""
        ctx.total_cents = ctx.amount_cents + SHIPPING_CENTS

    def remember_charge(self, ctx: Order, payload: dict[str, Any]) -> None:
        """``charged``: keep the processor's receipt."""
        ctx.charge = payload

    def remember_email(self, ctx: Order, payload: dict[str, Any]) -> None:
        """``emailed``: keep the outbox entry."""
        ctx.email = payload

    def remember_decision(self, ctx: Order, payload: Any) -> None:
        """``approve`` / ``reject``: keep the person's signal payload."""
        ctx.decision = dict(payload) if isinstance(payload, dict) else {"payload": payload}

    def remember_expiry(self, ctx: Order, payload: Any) -> None:
        """``approval_expired``: nobody decided in time."""
        ctx.decision = {"expired": True}

    def remember_shipment(self, ctx: Order, payload: dict[str, Any]) -> None:
        """``shipped``: keep the carrier's tracking."""
        ctx.shipment = payload

    def remember_refund(self, ctx: Order, payload: dict[str, Any]) -> None:
        """``refunded``: keep the refund."""
        ctx.refund = payload

    def remember_error(self, ctx: Order, payload: Any) -> None:
        """A failure outcome: keep what went wrong, as text."""
        ctx.errors.append(f"{type(payload).__name__}: {payload}")

    # offload hooks (effects)

    def charge_card(self, ctx: Order, payload: Any) -> Callable[[Any], dict[str, Any]]:
        """``charging`` (at_most_once): charge the total."""
        effects, order_id, total = self.effects, ctx.order_id, ctx.total_cents

        def work(octx: Any) -> dict[str, Any]:  # on a worker, after the `charge` commit
            return effects.charge(octx.idempotency_key, octx.effect.attempt, order_id, total)

        return work

    def send_confirmation(self, ctx: Order, payload: Any) -> Callable[[Any], dict[str, Any]]:
        """``emailing`` (idempotent): the confirmation, deduplicated by key."""
        effects, order_id, to = self.effects, ctx.order_id, ctx.customer
        subject = f"Order {ctx.order_id}: {ctx.total_cents} cents charged, awaiting approval"

        def work(octx: Any) -> dict[str, Any]:  # after the `payment` commit; again on recovery
            return effects.send_mail(octx.idempotency_key, order_id, to, subject)

        return work

    def ship_order(self, ctx: Order, payload: Any) -> Callable[[Any], dict[str, Any]]:
        """``shipping`` (at_most_once): hand the parcel to the carrier."""
        effects, order_id, destination = self.effects, ctx.order_id, ctx.destination

        def work(octx: Any) -> dict[str, Any]:  # after the `shipment` commit
            return effects.ship(octx.idempotency_key, octx.effect.attempt, order_id, destination)

        return work

    def refund_card(self, ctx: Order, payload: Any) -> Callable[[Any], dict[str, Any]]:
        """``refunding`` (idempotent): give the charge back, deduplicated by key."""
        effects, order_id, charge = self.effects, ctx.order_id, dict(ctx.charge or {})

        def work(octx: Any) -> dict[str, Any]:  # after the `refund` commit; again on recovery
            return effects.refund(octx.idempotency_key, order_id, charge)

        return work


def order_machine(effects: ShopEffects) -> Machine:
    """The order machine for the durable runtime: the generated table, hooks writing to
    ``effects``, the :class:`Order` context; ``cancelled`` finishes with status
    ``cancelled`` and ``failed`` with ``failed`` (``delivered``: ``completed``)."""
    return Machine(
        TABLE,
        OrderHooks(effects),
        context_type=Order,
        final_status={"cancelled": ExecutionStatus.CANCELLED, "failed": ExecutionStatus.FAILED},
    )


# ------------------------------------------------------------------ people and operators


def operator_answer(record: ExecutionRecord, effects: ShopEffects) -> Answer:
    """What a truthful operator answers for an order in ``recovery_required``: the
    subject effect's key looked up in the card ledger, the outbox and the carrier's
    shipments — ``succeeded`` with the recorded result when found, ``retry`` when not
    (:func:`durable_service.truthful_answer`)."""
    return truthful_answer(record, effects.ledgers)


def create_app(db_path: str) -> DurableApp:
    """The application factory (``--app docs.examples.order_workflow:create_app``):
    the order machine with its effects beside ``db_path``, the crash harness's
    scenarios, the truthful :func:`operator_answer` and the effects' record."""
    effects = ShopEffects.beside(db_path)

    def start(*orders: tuple[str, int, str]) -> Callable[[Any], list[str]]:
        def run(runtime: Any) -> list[str]:
            for order_id, amount, destination in orders:
                order = Order(order_id, amount, f"{order_id}@example.invalid", destination)
                runtime.start(MACHINE, order, execution_id=order_id)
            return [order_id for order_id, _, _ in orders]

        return run

    def person(event: str | None) -> Callable[[ExecutionRecord], Answer | None]:
        def answer(record: ExecutionRecord) -> Answer | None:
            return None if event is None else Answer(event=event, payload={"by": "harness"})

        return answer

    return DurableApp(
        machines=(order_machine(effects),),
        scenarios={
            "approved": Scenario(start(("order-a", 2500, "Berlin")), person("approve")),
            "rejected": Scenario(start(("order-r", 2500, "Berlin")), person("reject")),
            "timed_out": Scenario(start(("order-t", 2500, "Berlin")), person(None)),
            "two_orders": Scenario(
                start(("order-1", 1200, "Lisbon"), ("order-2", 3400, "Oslo")), person("approve")
            ),
            "declined": Scenario(start(("order-d", 250_000, "Berlin")), person("approve")),
            "unshippable": Scenario(start(("order-u", 2500, NOWHERE)), person("approve")),
        },
        operator=lambda record: operator_answer(record, effects),
        effects=effects.effects,
        applied_signals=applied_signals,
    )


def applied_signals(record: ExecutionRecord) -> list[Any]:
    """The signals whose change an order's stored context holds, for the interleaving
    checker (``DurableApp.applied_signals``): a person's decision, kept whole by
    :meth:`OrderHooks.remember_decision` (an expiry is the timer's, not a signal)."""
    decision = record.context.get("decision") if isinstance(record.context, dict) else None
    return [decision] if decision and not decision.get("expired") else []


# ------------------------------------------------------------------ the command line


def describe(record: ExecutionRecord) -> str:
    """One line about an order as stored: status, state and what happened."""
    ctx = record.context if isinstance(record.context, dict) else {}
    facts = []
    if ctx.get("charge"):
        facts.append(f"charged {ctx['charge']['amount_cents']} cents")
    if ctx.get("email"):
        facts.append(f"mail {ctx['email']['message_id']}")
    if ctx.get("shipment"):
        facts.append(f"tracking {ctx['shipment']['tracking']}")
    if ctx.get("refund"):
        facts.append(f"refunded {ctx['refund']['amount_cents']} cents")
    facts += ctx.get("errors", [])
    detail = f" ({'; '.join(facts)})" if facts else ""
    return f"order {record.execution_id}: {record.status.value} in {record.state}{detail}"


def main(argv: Sequence[str] | None = None) -> int:
    """The command line (``--help``). Exit codes: 0 done, 1 gave up waiting (the orders
    live on in the store), 2 usage, 3 an order waits for an operator (run again with
    ``--operator``)."""
    parser = argparse.ArgumentParser(description="A durable order workflow (phronomy_fsm example).")
    sub = parser.add_subparsers(dest="command", required=True)
    run_cmd = sub.add_parser("run", help="start an order, resume every unfinished one, drive them")
    run_cmd.add_argument("order_id", nargs="?", help="start this order (its execution id)")
    run_cmd.add_argument("--db", required=True, help="the SQLite store")
    run_cmd.add_argument("--amount", type=int, default=2500, help="in cents (default 2500)")
    run_cmd.add_argument("--destination", default="Berlin", help=f"{NOWHERE} is unshippable")
    run_cmd.add_argument(
        "--person",
        choices=PERSON_CHOICES,
        default="later",
        help="how a person answers a waiting order: approve, reject, nobody (it expires) or "
        "later (exit; answer with the signal command)",
    )
    run_cmd.add_argument(
        "--operator", action="store_true", help="resolve parked orders from the ledgers"
    )
    run_cmd.add_argument("--timeout-seconds", type=float, default=60.0)
    signal_cmd = sub.add_parser("signal", help="a person answers a waiting order, from any process")
    signal_cmd.add_argument("order_id")
    signal_cmd.add_argument("decision", choices=("approve", "reject"))
    signal_cmd.add_argument("--db", required=True)
    args = parser.parse_args(argv)

    if args.command == "signal":  # writes to the order's durable inbox; any process may
        with SqliteBarrierStore(args.db) as store:
            try:
                sent = send_signal(store, args.order_id, args.decision, {"by": "person"})
            except PhronomyError as exc:
                print(f"error: {exc}", file=sys.stderr)
                return 1
        print(f"order {args.order_id}: {args.decision} recorded (signal {sent.signal_id})")
        return 0

    effects = ShopEffects.beside(args.db)
    events: queue.SimpleQueue[DurableEvent] = queue.SimpleQueue()
    store = SqliteBarrierStore(args.db)
    machines = [order_machine(effects)]
    with DurableRuntime(store, machines=machines, listeners=[printing_listener(events)]) as runtime:
        if args.order_id is not None:
            order = Order(
                args.order_id, args.amount, f"{args.order_id}@example.invalid", args.destination
            )
            if not runtime.start(MACHINE, order, execution_id=args.order_id).created:
                print(f"order {args.order_id} exists already")
        for execution_id, status in runtime.recover().claimed:
            print(f"order {execution_id}: recovered ({status})")
        code = serve(
            runtime,
            person=args.person,
            person_states={"awaiting_approval"},
            operator=(lambda record: operator_answer(record, effects)) if args.operator else None,
            events=events,
            timeout_seconds=args.timeout_seconds,
        )
    for record in store.list_records(machine=MACHINE):
        print(describe(record))
    store.close()
    if code == 3:
        print("an order waits for an operator: run again with --operator", file=sys.stderr)
    elif code == 1:
        print(f"gave up after {args.timeout_seconds:g} s; run again to resume", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
