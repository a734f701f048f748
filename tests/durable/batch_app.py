"""Parent and child machines of the durable-engine tests (child executions)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import attrs

sys.path.insert(0, str(Path(__file__).resolve().parent / "generated"))

import batch_flow
import item_flow

from phronomy_fsm.durable import BarrierRecords, ChildStart, JournalEntry, Machine

from .order_app import append_effect


@attrs.define
class Batch:
    """The parent's context: the items to start and what each child reported."""

    items: list[str]
    results: dict[str, Any] = attrs.Factory(dict)


@attrs.define
class Item:
    """A child's context."""

    name: str
    result: dict[str, Any] | None = None


class BatchHooks(batch_flow.Hooks):
    """Starts one item child per entry with the ``launch`` barrier."""

    def launch(self, ctx: Batch, payload: Any) -> BarrierRecords:
        return BarrierRecords(
            journal=(JournalEntry("launched", {"items": list(ctx.items)}),),
            children=tuple(
                ChildStart("item_flow", Item(name), notify_event="item_done") for name in ctx.items
            ),
        )

    def last_item(self, ctx: Batch, payload: dict[str, Any]) -> bool:
        return len(ctx.results) + 1 >= len(ctx.items)

    def record_item(self, ctx: Batch, payload: dict[str, Any]) -> None:
        ctx.results[payload["context"]["name"]] = payload["context"]["result"]


class ItemHooks(item_flow.Hooks):
    """Works on one item; the effect appends to ``ledger``."""

    def __init__(self, ledger: Path) -> None:
        self.ledger = ledger

    def do_item(self, ctx: Item, payload: Any) -> Any:
        ledger, name = self.ledger, ctx.name

        def work(octx: Any) -> dict[str, Any]:
            append_effect(
                ledger,
                {
                    "effect": "do_item",
                    "order": name,
                    "key": octx.idempotency_key,
                    "attempt": octx.effect.attempt,
                    "result": None,
                },
            )
            return {"item": name.upper(), "key": octx.idempotency_key}

        return work

    def keep_result(self, ctx: Item, payload: dict[str, Any]) -> None:
        ctx.result = payload


def batch_machines(ledger: Path) -> list[Machine]:
    """The parent and child machines."""
    return [
        Machine(batch_flow.TABLE, BatchHooks(), context_type=Batch),
        Machine(item_flow.TABLE, ItemHooks(ledger), context_type=Item),
    ]
