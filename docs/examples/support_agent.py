"""An agent with a tool that needs approval (docs/getting-started.md).

python docs/examples/support_agent.py [DB_PATH]

The refund tool runs only after a person approves it. Here the approval comes from the
same process (``agent.approve``); from another process it is ``phronomy-fsm approve
EXECUTION_ID --request REQUEST_ID --db DB_PATH``, which ``phronomy-fsm executions show``
prints — the execution waits in the store meanwhile, across restarts.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

from phronomy_fsm.agent import (
    Agent,
    AgentEvent,
    AgentRuntime,
    ApprovalRequired,
    Reply,
    ScriptedProvider,
    Tool,
)
from phronomy_fsm.errors import AgentExistsError
from phronomy_fsm.store import SqliteBarrierStore


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
        effect="pure",  # a read: recovery may simply run it again
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
    approval = threading.Event()
    pending: list[ApprovalRequired] = []

    def on_event(event: AgentEvent) -> None:  # runs on the loop thread: keep it quick
        print("event:", event.type.value)
        if isinstance(event, ApprovalRequired):
            pending.append(event)
            approval.set()

    with AgentRuntime(SqliteBarrierStore(db), own_store=True) as runtime:
        options = {"provider": PROVIDER, "tools": TOOLS, "on_event": on_event, "runtime": runtime}
        try:
            agent = Agent.create("support", **options)
        except AgentExistsError:  # a second run: the agent is in the store already
            agent = Agent.load("support", **options)

        task = agent.invoke_async("Order A1 arrived broken, refund please.")
        approval.wait(10)  # the execution now waits durably; a person decides:
        request = pending[0]
        print("approve:", ", ".join(f"{i.tool_name} {i.arguments}" for i in request.items))
        agent.approve(request.execution_id, approval_request_id=request.request_id)
        result = task.result(10)  # the original task settles with the same result
        print(result.status.value, result.output)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "getting-started.db")
