"""docs/getting-started.md, "Your own machines": python docs/examples/payout.py [DB_PATH]."""

import sys

import attrs
from machines.payout import TABLE  # the generated table, beside this file

from phronomy_fsm.durable import DurableRuntime, EffectContext, Machine
from phronomy_fsm.store import SqliteBarrierStore


@attrs.define
class Payout:  # the context: stored as JSON at every commit, so JSON-typed fields only
    invoice: str
    amount_cents: int
    confirmed_by: str | None = None
    receipt: dict | None = None


def remember_confirmation(ctx: Payout, payload: dict) -> None:
    ctx.confirmed_by = payload["by"]  # the signal's payload, checked against {by: str}


def remember_receipt(ctx: Payout, payload: dict) -> None:
    ctx.receipt = payload  # what send_payment returned


def send_payment(payout: Payout, ectx: EffectContext) -> dict:  # on a worker, once announced
    return {"invoice": payout.invoice, "cents": payout.amount_cents, "key": ectx.idempotency_key}


PAYOUT = Machine(TABLE, sys.modules[__name__], context_type=Payout)  # this module's functions
if __name__ == "__main__":
    store = SqliteBarrierStore(sys.argv[1] if len(sys.argv) > 1 else "payouts.db")
    with DurableRuntime(store, machines=[PAYOUT], own_store=True) as rt:
        handle = rt.start("payout", Payout("INV-7", 12_000), execution_id="INV-7")
        if handle.created:  # run again, the script finds INV-7 finished in the store
            rt.signal("INV-7", "confirm", {"by": "ana"})  # any process may send it
        result = handle.result(timeout_seconds=10)
    print(result.status.value, result.state, result.revision)  # completed done 3
