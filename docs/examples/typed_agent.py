"""A typed tool and a structured answer (docs/agent.md, "Typed tools" and "Structured
output"), offline: a scripted LLM stands in for the model.

python docs/examples/typed_agent.py [DB_PATH]

The tool is an annotated function: its parameters (a str, a Literal, an attrs class
with an enum) are the JSON Schema the LLM sees, and it receives them converted. The
agent's answer must be JSON of ``Recommendation``: the scripted LLM first answers in
prose, is told why that is not valid and asked again (a durable LLM call, announced by
the ``output_retry`` barrier), then answers with JSON, which ``result.parsed`` holds as
a ``Recommendation``.
"""

from __future__ import annotations

import enum
import json
import sys
import tempfile
from pathlib import Path
from typing import Literal

import attrs

from phronomy_fsm.agent import Agent, AgentRuntime, Reply, ScriptedProvider, ToolContext, tool
from phronomy_fsm.errors import AgentExistsError
from phronomy_fsm.store import SqliteBarrierStore


class Category(enum.Enum):
    PENS = "pens"
    PAPER = "paper"


@attrs.frozen
class Filters:
    category: Category
    max_price: float | None = None


@attrs.frozen
class Product:
    name: str
    price: float


@attrs.frozen
class Recommendation:
    product: str
    reason: str


CATALOGUE = [
    Product("fine liner", 2.5),
    Product("fountain pen", 40.0),
    Product("ballpoint", 1.0),
]


@tool(effect="pure")  # a read: recovery may run it again
def search(
    query: str, filters: Filters, ctx: ToolContext, order: Literal["cheap", "dear"] = "cheap"
) -> list[Product]:
    """Search the shop's catalogue.

    Args:
        query: words to look for.
        filters: which products qualify.
        order: cheapest or dearest first.
    """
    print(f"search got: {query!r}, {filters!r}, order={order!r}")
    hits = [p for p in CATALOGUE if filters.max_price is None or p.price <= filters.max_price]
    return sorted(hits, key=lambda p: p.price, reverse=order == "dear")


PROVIDER = ScriptedProvider(
    [
        Reply(
            tool_calls=(
                (
                    "search",
                    {"query": "pen", "filters": {"category": "pens", "max_price": 5}},
                ),
            )
        ),
        Reply(content="I would take the fine liner."),  # prose: not valid output
        Reply(content='{"product": "fine liner", "reason": "the best pen under 5"}'),
    ]
)


def main(db: str) -> None:
    print("filters schema:", json.dumps(search.parameters["$defs"]["Filters"], sort_keys=True))
    with AgentRuntime(SqliteBarrierStore(db), own_store=True) as runtime:
        options = {
            "provider": PROVIDER,
            "tools": [search],
            "output_type": Recommendation,
            "output_retries": 2,
            "runtime": runtime,
        }
        try:
            agent = Agent.create("shop", **options)
        except AgentExistsError:  # a second run: the agent is in the store already
            agent = Agent.load("shop", **options)
        result = agent.invoke("Which pen should I buy for under $5?", wait_seconds=30)
        print("LLM calls:", len(PROVIDER.requests))
        print("parsed:", result.parsed)


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(sys.argv[1])
    else:
        with tempfile.TemporaryDirectory() as folder:
            main(str(Path(folder) / "typed_agent.db"))
