"""Run the `order` machine on the dispatcher (docs/getting-started.md, "Your own machines").

phronomy-fsm generate docs/examples/order.yaml --out docs/examples/generated
python docs/examples/order_machine.py
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent / "generated"))

from order import TABLE, Hooks

from phronomy_fsm.runtime import Dispatcher, bind_machine
from phronomy_fsm.table import BarrierOutcome


class Order:
    """The session context: whatever your hooks need."""

    def __init__(self, amount: float) -> None:
        self.amount = amount
        self.receipt: dict[str, Any] | None = None
        self.log: list[str] = []
        self.paid = threading.Event()


class OrderHooks(Hooks):
    """Every guard, action and offload hook the generated Protocol lists. Each is called
    on the dispatcher's loop thread as ``hook(ctx, payload)``."""

    def in_stock(self, ctx: Order, payload: Any) -> bool:  # guard
        return True

    def charge_went_through(self, ctx: Order, payload: Any) -> bool:  # guard
        return bool(payload)  # the operator's answer

    def record_charge(self, ctx: Order, payload: Any) -> Any:  # barrier
        # in memory there is nothing to make durable; a store commits here
        return BarrierOutcome("committed")

    def remember_receipt(self, ctx: Order, payload: Any) -> None:  # action
        ctx.receipt = payload  # the value the offloaded work returned

    def send_receipt(self, ctx: Order, payload: Any) -> None:  # entry action
        ctx.log.append(f"receipt sent for {ctx.amount}")
        ctx.paid.set()

    def charge_card(self, ctx: Order, payload: Any) -> Any:  # offload hook
        amount = ctx.amount  # snapshot what the work needs: it runs on a worker thread

        def work(octx: Any) -> dict[str, Any]:  # ``work()`` without the context works too
            if amount <= 0:
                raise ValueError("nothing to charge")  # → the `charge_failed` event
            return {"charged": amount}  # → the `charged` event, with this payload

        return work


def main() -> None:
    dispatcher = Dispatcher()
    dispatcher.start()  # the loop runs on its own thread
    binding = bind_machine(TABLE, OrderHooks())  # hooks resolved once, here
    order = Order(amount=42.0)
    session_id, task = dispatcher.start_session_task(binding, order)
    dispatcher.post(session_id, "pay")
    order.paid.wait(10)  # the charge runs off the loop; then the warehouse ships
    dispatcher.post(session_id, "ship")
    result = task.result(timeout_seconds=10)  # SessionResult(status, state, context)
    print(result.status, result.state, order.receipt, order.log)
    dispatcher.stop()


if __name__ == "__main__":
    main()
