"""An agent with a tool that needs approval (docs/getting-started.md).

python docs/examples/support_agent.py [DB_PATH]
"""

from __future__ import annotations

import sys
import threading
from typing import Any

from phronomy_fsm.agent import Agent, AgentEvent, AgentRuntime, Reply, ScriptedProvider, Tool
from phronomy_fsm.errors import AgentExistsError


def lookup_order(arguments: dict[str, Any], context: Any) -> dict[str, Any]:
    return {"order_id": arguments["order_id"], "status": "delivered", "amount": 25.0}


def issue_refund(arguments: dict[str, Any], context: Any) -> dict[str, Any]:
    # runs only after the tool barrier committed; the key is stable across restarts
    return {"refund_id": "R-" + context.idempotency_key[-6:], "amount": arguments["amount"]}


TOOLS = [
    Tool(
        "lookup_order",
        lookup_order,
        "Look an order up by id.",
        {
            "type": "object",
            "properties": {"order_id": {"type": "string"}},
            "required": ["order_id"],
        },
    ),
    Tool(
        "issue_refund",
        issue_refund,
        "Refund an order.",
        {
            "type": "object",
            "properties": {"order_id": {"type": "string"}, "amount": {"type": "number"}},
            "required": ["order_id", "amount"],
        },
        requires_approval=True,
    ),
]

PROVIDER = ScriptedProvider(
    [
        Reply(tool_calls=(("lookup_order", {"order_id": "A1"}),)),
        Reply(tool_calls=(("issue_refund", {"order_id": "A1", "amount": 25.0}),)),
        Reply(content="I refunded $25.00 for order A1."),
    ]
)


def main(db: str) -> None:
    runtime = AgentRuntime()  # or leave it out to use the process-wide one
    approval = threading.Event()
    pending: dict[str, str] = {}

    def on_event(event: AgentEvent) -> None:  # runs on the dispatcher thread: keep it quick
        print("event:", event.type, event.payload.get("name", ""))
        if event.type == "approval_required":
            pending["execution_id"] = event.execution_id
            pending["request_id"] = event.payload["request"]["id"]
            approval.set()

    options = {"provider": PROVIDER, "tools": TOOLS, "on_event": on_event, "runtime": runtime}
    try:
        agent = Agent.create("support", store=db, **options)
    except AgentExistsError:  # a second run: the agent is in the store already
        agent = Agent.load("support", store=db, **options)

    task = agent.invoke_async("Order A1 arrived broken, refund please.")
    approval.wait(10)  # the execution is now suspended durably; a person decides:
    agent.approve(pending["execution_id"], approval_request_id=pending["request_id"])
    result = task.result(10)  # the original task settles with the same result
    print(result.status, result.output)
    runtime.close()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "getting-started.db")
