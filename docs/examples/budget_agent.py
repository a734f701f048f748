"""An agent with a budget (docs/agent.md, "Budgets"), offline: a scripted LLM that looks
up three orders, one LLM call each, then answers. Its budget allows two LLM calls and
$0.05 (priced from a table per model); when the third call would pass the call limit
the execution waits, durably, in ``budget_exhausted`` until a person extends the
budget — here the program itself, as ``phronomy-fsm extend-budget`` would from any
process.

Run it: ``python docs/examples/budget_agent.py budget.db`` (a new store file each
time, or the same one: the agent is created once). ``create_app`` makes this module an
``--app`` factory too: ``phronomy-fsm extend-budget EXECUTION --db budget.db
--max-llm-calls 4 --app budget_agent:create_app`` (with this folder on PYTHONPATH).
"""

from __future__ import annotations

import sys
import threading
from typing import Any

from phronomy_fsm.agent import (
    Agent,
    AgentRuntime,
    Budget,
    BudgetExhausted,
    ModelPrice,
    Reply,
    ScriptedProvider,
    Tool,
    Usage,
)
from phronomy_fsm.agent.app import agent_app
from phronomy_fsm.agent.config import AgentConfig
from phronomy_fsm.errors import AgentExistsError

AGENT_ID = "order-desk"

#: US dollars per million tokens (input, output) of each model the agent may use.
PRICES = {"small-model": ModelPrice(0.15, 0.60)}


def lookup(arguments: dict[str, Any], context: Any) -> dict[str, Any]:
    """The order's status (a made-up, deterministic answer)."""
    return {"order_id": arguments["order_id"], "status": "shipped"}


def options() -> dict[str, Any]:
    """The agent's options: its provider, tool and budget."""
    calls = [("lookup", {"order_id": order}) for order in ("A1", "A2", "A3")]
    script = [Reply(tool_calls=(call,), usage=Usage(1200, 80)) for call in calls]
    script.append(Reply(content="All three orders have shipped.", usage=Usage(1500, 40)))
    return {
        "provider": ScriptedProvider(script, model="small-model"),
        "tools": [
            Tool(
                "lookup",
                lookup,
                "Look up an order.",
                {
                    "type": "object",
                    "properties": {"order_id": {"type": "string"}},
                    "required": ["order_id"],
                },
            )
        ],
        "budget": Budget(max_llm_calls=2, max_cost_usd=0.05, prices=PRICES),
        "on_budget_exhausted": "wait",
    }


def create_app(db_path: str) -> Any:
    """The durable application of this agent (an ``--app`` factory)."""
    return agent_app(db_path, [AgentConfig.build(AGENT_ID, **options())])


def main(db_path: str) -> None:
    """Run one execution: it waits for a budget, is extended, and completes."""
    seen: list[BudgetExhausted] = []
    arrived = threading.Event()
    runtime = AgentRuntime.for_store(db_path)
    try:
        try:
            agent = Agent.create(
                AGENT_ID, runtime=runtime, on_event=_collect(seen, arrived), **options()
            )
        except AgentExistsError:
            agent = Agent.load(
                AGENT_ID, runtime=runtime, on_event=_collect(seen, arrived), **options()
            )
        task = agent.invoke_async("Where are orders A1, A2 and A3?")
        # the event comes once the wait is committed; an execution that ended instead
        # raises here why
        while not arrived.wait(0.05):
            if task.done():
                task.result()
        event = seen[0]
        print(f"waits: {event.limit} spent {event.spent} of {event.allowed} ({event.call})")
        result = agent.extend_budget(
            event.execution_id, request_id=event.request_id, max_llm_calls=4, wait_seconds=30
        )
        record = runtime.store.load_record(result.execution_id)
        budget = record.context["budget"]["limits"]
        cost = sum(f["cost_usd"] for f in record.context["llm_responses"])
        print(
            f"spent: {record.context['llm_calls']} LLM calls of {budget['max_llm_calls']}, "
            f"{result.usage.prompt_tokens + result.usage.completion_tokens} tokens, "
            f"${cost:.6f} of ${budget['max_cost_usd']}"
        )
        print(result.status.value, result.output)
    finally:
        runtime.close()


def _collect(seen: list[BudgetExhausted], arrived: threading.Event) -> Any:
    def on_event(event: Any) -> None:
        if isinstance(event, BudgetExhausted):
            seen.append(event)
            arrived.set()

    return on_event


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "budget.db")
