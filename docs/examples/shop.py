"""The outside world of the order examples: a card processor, an outbox and a carrier, as files.

Not part of the library, and not part of the workflow: ``order_workflow.py`` (on
phronomy_fsm) and ``peers/order_workflow_dbos.py`` (the same workflow on DBOS) both
call it, standing in for the API clients a shop would use. The records live in a
folder beside the database (``shop.db`` → ``shop-effects/``), so a run can be checked:

- ``card_ledger.jsonl``, the card processor: a **charge** is not deduplicated (the spec
  declares it ``at_most_once``: after a crash an operator decides), a **refund** is, by
  idempotency key (``idempotent``: recovery runs it again with the same key);
- ``outbox.jsonl``: confirmation e-mails, deduplicated by key (``idempotent``);
- ``shipments.jsonl``, the carrier: not deduplicated (``at_most_once``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # durable_service.py
    sys.path.insert(0, str(HERE))

from durable_service import JsonLines

from phronomy_fsm.durable.app import EffectEntry

#: The card processor declines a charge above this total, in cents.
CARD_LIMIT_CENTS = 100_000
#: The carrier refuses parcels to this destination.
NOWHERE = "Atlantis"


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
