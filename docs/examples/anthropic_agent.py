"""An agent on the Anthropic Messages API, offline (docs/agent.md, "The Anthropic provider").

python docs/examples/anthropic_agent.py [DB_PATH]

The agent's provider is :class:`~phronomy_fsm.agent.AnthropicProvider`. With no
configuration it talks to the package's stub LLM server, started here on 127.0.0.1 and
speaking ``POST /v1/messages`` with a scripted answer — so this runs without a network or
a key. Set ``PHRONOMY_ANTHROPIC_MODEL`` (e.g. ``claude-sonnet-4-5``) and
``ANTHROPIC_API_KEY`` to run it against the real API instead.

It asks once (the LLM calls a tool, then answers) and once streamed (tokens are printed
as they arrive), and prints what the stub received: the tool call went back to the API as
a ``tool_use`` block and its result as a ``tool_result`` block.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from phronomy_fsm.agent import Agent, AgentRuntime, AnthropicProvider, Tool
from phronomy_fsm.store import SqliteBarrierStore
from phronomy_fsm.testing.stub_llm import StubLLMServer

SCRIPT = [
    {"tool_calls": [{"name": "lookup_order", "arguments": {"order_id": "A-17"}}]},
    {"content": "Order A-17 shipped yesterday."},
    {"content": "Parcels usually arrive within three days."},
]


def lookup_order(arguments: dict[str, Any], context: Any) -> dict[str, Any]:
    return {"order_id": arguments["order_id"], "status": "shipped"}


LOOKUP = Tool(
    "lookup_order",
    lookup_order,
    "Look an order up by id.",
    {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]},
    effect="pure",
)


@contextlib.contextmanager
def provider() -> Iterator[tuple[AnthropicProvider, StubLLMServer | None]]:
    """The real API when ``PHRONOMY_ANTHROPIC_MODEL`` is set, else the stub."""
    if os.environ.get("PHRONOMY_ANTHROPIC_MODEL"):
        with AnthropicProvider() as real:
            yield real, None
        return
    with (
        StubLLMServer(SCRIPT) as server,
        AnthropicProvider(base_url=server.base_url, model="claude-stub") as stubbed,
    ):
        yield stubbed, server


def main(db_path: Path) -> int:
    store = SqliteBarrierStore(db_path)
    runtime = AgentRuntime(store)
    try:
        with provider() as (llm, server):
            agent = Agent.create(
                "anthropic-demo",
                provider=llm,
                tools=[LOOKUP],
                runtime=runtime,
                system_prompt="You answer questions about orders. Be brief.",
            )
            result = agent.invoke("Where is order A-17?", wait_seconds=60)
            print(f"answer: {result.output}")
            print(f"usage: {result.usage.prompt_tokens} in, {result.usage.completion_tokens} out")
            print("streamed: ", end="", flush=True)
            for event in agent.stream("When will it arrive?"):
                if event.type == "token":
                    print(event.content, end="|", flush=True)
            print()
            if server is not None:
                follow_up = server.requests[1].body["messages"]
                blocks = [b["type"] for m in follow_up for b in m["content"]]
                print(f"sent to /v1/messages: {blocks}")
    finally:
        runtime.close()
        store.close()
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1:
        sys.exit(main(Path(sys.argv[1])))
    with tempfile.TemporaryDirectory() as folder:
        sys.exit(main(Path(folder) / "anthropic.db"))
