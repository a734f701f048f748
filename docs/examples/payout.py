"""The minimal durable machine of docs/getting-started.md ("Your own machines").

phronomy-fsm generate docs/examples/payout.yaml --out docs/examples/machines
python docs/examples/payout.py [DB_PATH]
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import attrs

sys.path.insert(0, str(Path(__file__).resolve().parent))  # machines/ holds the generated table

from machines.payout import TABLE, Hooks

from phronomy_fsm.durable import DurableRuntime, Machine
from phronomy_fsm.store import SqliteBarrierStore


@attrs.define
class Payout:
    """The context: stored as JSON at every commit, so JSON-typed fields only."""

    invoice: str
    amount_cents: int
    confirmed_by: str | None = None
    receipt: dict[str, Any] | None = None


class PayoutHooks(Hooks):
    """Every action and offload hook the generated Protocol lists (the `payment`
    barrier needs none: the engine commits it)."""

    def remember_confirmation(self, ctx: Payout, payload: dict[str, Any]) -> None:
        """Action of ``confirm``: who confirmed."""
        ctx.confirmed_by = payload["by"]  # the signal's payload

    def remember_receipt(self, ctx: Payout, payload: dict[str, Any]) -> None:
        """Action of ``paid``: the bank's receipt."""
        ctx.receipt = payload  # what the work returned

    def send_payment(self, ctx: Payout, payload: Any) -> Any:
        """Offload hook of ``paying`` (at_most_once): returns the work."""
        invoice, amount = ctx.invoice, ctx.amount_cents  # snapshot on the loop thread

        def work(octx: Any) -> dict[str, Any]:  # on a worker, after `payment` committed
            # call the bank here, passing octx.idempotency_key (stable across restarts)
            return {"invoice": invoice, "amount_cents": amount, "key": octx.idempotency_key}

        return work


PAYOUT = Machine(TABLE, PayoutHooks(), context_type=Payout)


def main(db: str) -> None:
    """Start a payout, confirm it, wait for it to finish; print how it ended."""
    with DurableRuntime(SqliteBarrierStore(db), machines=[PAYOUT], own_store=True) as runtime:
        handle = runtime.start("payout", Payout("INV-7", 12_000), execution_id="INV-7")
        if handle.created:  # run again, the script finds INV-7 finished in the store
            runtime.signal("INV-7", "confirm", {"by": "ana"})  # any process may send it
        result = handle.result(timeout_seconds=10)
    print(result.status.value, result.state, result.revision)  # completed done 3


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "payouts.db")
