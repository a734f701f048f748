"""The demo application: a scripted customer-support agent (issue 5 item 9).

The LLM (a :class:`~phronomy_fsm.agent.providers.ScriptedProvider`, deterministic across
processes) first calls ``lookup_order`` (no approval needed), then ``issue_refund``
(needs a person's approval), then answers. ``issue_refund`` appends to a JSON-lines
ledger beside the database, keyed by its idempotency key, so a refund is never written
twice for one tool call.

:func:`create_app` is also the ``--app phronomy_fsm.demo:create_app`` factory of the
operator commands (``recover``, ``resolve``): it returns the agent definition for any
agent id in the store.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from phronomy_fsm.agent.providers import Reply, ScriptedProvider
from phronomy_fsm.agent.tools import Tool, ToolContext

DEMO_AGENT_ID = "support-demo"
DEFAULT_DB = os.path.join(".phronomy", "demo.db")
DEMO_INPUT = "Hi, order A1001 arrived broken. Can I get my $25.00 back?"

ORDERS = {
    "A1001": {
        "order_id": "A1001",
        "item": "ceramic teapot",
        "amount": 25.00,
        "status": "delivered",
    },
    "A1002": {"order_id": "A1002", "item": "tea sampler", "amount": 12.50, "status": "shipped"},
}


def demo_provider() -> ScriptedProvider:
    """The scripted LLM of the demo."""
    return ScriptedProvider(
        [
            Reply(tool_calls=(("lookup_order", {"order_id": "A1001"}),)),
            Reply(
                content="The order was delivered; I will refund it.",
                tool_calls=(
                    (
                        "issue_refund",
                        {"order_id": "A1001", "amount": 25.00, "reason": "arrived broken"},
                    ),
                ),
            ),
            Reply(
                content="Done: I refunded $25.00 for order A1001 (ceramic teapot). Sorry about the breakage!"
            ),
        ],
        model="scripted-support",
    )


def ledger_path(db_path: str | os.PathLike[str]) -> Path:
    """Where the demo's refunds are written (beside the database)."""
    return Path(db_path).with_name(Path(db_path).stem + "-refunds.jsonl")


def demo_tools(ledger: Path) -> list[Tool]:
    """``lookup_order`` and ``issue_refund`` (the latter requires approval)."""

    def lookup_order(arguments: dict[str, Any], context: ToolContext) -> dict[str, Any]:
        order = ORDERS.get(arguments["order_id"])
        if order is None:
            return {"error": f"no order {arguments['order_id']}"}
        return dict(order)

    def issue_refund(arguments: dict[str, Any], context: ToolContext) -> dict[str, Any]:
        ledger.parent.mkdir(parents=True, exist_ok=True)
        key = context.idempotency_key
        if ledger.exists():
            for line in ledger.read_text("utf-8").splitlines():
                entry = json.loads(line)
                if entry["idempotency_key"] == key:
                    return {"refund_id": entry["refund_id"], "duplicate": True}
        entry = {
            "refund_id": "R-" + key[-8:],
            "idempotency_key": key,
            "order_id": arguments["order_id"],
            "amount": arguments["amount"],
        }
        with ledger.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(entry, sort_keys=True) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        return {"refund_id": entry["refund_id"], "amount": arguments["amount"]}

    return [
        Tool(
            "lookup_order",
            lookup_order,
            "Look an order up by id.",
            {
                "type": "object",
                "properties": {"order_id": {"type": "string"}},
                "required": ["order_id"],
                "additionalProperties": False,
            },
        ),
        Tool(
            "issue_refund",
            issue_refund,
            "Refund an order (needs a person's approval).",
            {
                "type": "object",
                "properties": {
                    "order_id": {"type": "string"},
                    "amount": {"type": "number", "exclusiveMinimum": 0},
                    "reason": {"type": "string"},
                },
                "required": ["order_id", "amount"],
                "additionalProperties": False,
            },
            requires_approval=True,
        ),
    ]


def create_app(agent_id: str, db_path: str | os.PathLike[str]) -> dict[str, Any]:
    """The agent definition for ``agent_id`` (the ``--app`` factory): keyword arguments
    for :meth:`Agent.load <phronomy_fsm.agent.agent.Agent.load>` except ``store``,
    ``runtime`` and ``on_event``."""
    return {
        "provider": demo_provider(),
        "tools": demo_tools(ledger_path(db_path)),
        "system_prompt": "You are a helpful support agent for a tea shop.",
    }


def format_event(event: Any) -> str | None:
    """One readable line for a demo event (None for tokens)."""
    payload: dict[str, Any] = event.payload
    if event.type == "tool_call":
        return f"event: tool_call {payload['name']} {payload['arguments']}"
    if event.type == "tool_result":
        return f"event: tool_result {payload['tool_name']} -> {payload['content']}"
    if event.type == "approval_required":
        items = ", ".join(i["tool_name"] for i in payload["request"]["items"])
        return f"event: approval_required for {items}"
    if event.type == "recovery_resolution_required":
        return (
            f"event: recovery_resolution_required {payload['reason']} subject={payload['subject']}"
        )
    if event.type in ("done", "handoff", "error", "timeout", "cancelled"):
        return f"event: {event.type}"
    return None


def printing_listener(echo: Callable[[str], None]) -> Callable[[Any], None]:
    """A listener that echoes demo events."""

    def listener(event: Any) -> None:
        line = format_event(event)
        if line is not None:
            echo(line)

    return listener
