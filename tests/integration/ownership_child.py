"""A process that owns an agent, driven by ``tests/integration/test_agent_ownership.py``.

Usage: ``python ownership_child.py MODE DB``. It prints one JSON object per line on
stdout and reads one command per line on stdin, so the test synchronises on what the
child says, never on time.

Modes:

- ``suspend``: create the demo agent (:mod:`phronomy_fsm.demo`), invoke it and wait
  until it suspends for the refund approval; print ``{"ready": "suspended",
  "execution_id": ..., "request_id": ...}``.
- ``tool``: create agent ``blocker`` whose tool ``slow_effect`` blocks until the
  ``finish`` command, invoke it and print ``{"ready": "tool_running", ...}`` once the
  tool has started (the tool barrier is committed by then). On ``finish`` the tool
  appends its effect to ``DB.effects`` and returns; the child prints the result.
- ``load``: wait for ``go``, then ``Agent.load`` the demo agent; print ``{"loaded":
  true}`` or ``{"owned": MESSAGE, "pid": OWNER_PID}``.

Commands: ``finish`` (tool mode), ``close`` (``agent.close()``; print ``{"closed":
true}``), ``shutdown`` (``runtime.close()``; print ``{"shutdown": true}``), ``exit``.
"""

from __future__ import annotations

import json
import sys
import threading
from typing import Any

from phronomy_fsm.agent import Agent, AgentRuntime, Reply, ScriptedProvider, Tool
from phronomy_fsm.demo import DEMO_AGENT_ID, DEMO_INPUT, create_app
from phronomy_fsm.errors import AgentOwnedError

BLOCKER = "blocker"


def say(**data: Any) -> None:
    """One JSON line on stdout."""
    print(json.dumps(data, sort_keys=True), flush=True)


def blocker_options(db: str, gate: threading.Event, started: threading.Event) -> dict[str, Any]:
    """Agent options of ``blocker``: one call of ``slow_effect``, then an answer."""

    def slow_effect(arguments: dict[str, Any], context: Any) -> dict[str, Any]:
        started.set()
        gate.wait()
        with open(db + ".effects", "a", encoding="utf-8") as fh:
            fh.write(context.idempotency_key + "\n")
        return {"done": arguments["n"]}

    tool = Tool(
        "slow_effect",
        slow_effect,
        "An effect that takes a while.",
        {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
    )
    provider = ScriptedProvider(
        [Reply(tool_calls=(("slow_effect", {"n": 1}),)), Reply(content="finished")]
    )
    return {"provider": provider, "tools": [tool]}


def main(mode: str, db: str) -> int:
    """Run ``mode`` on ``db`` and obey stdin commands until ``exit`` or EOF."""
    runtime = AgentRuntime()
    events: list[Any] = []
    settled = threading.Event()

    def on_event(event: Any) -> None:
        events.append(event)
        if event.type in ("approval_required", "done", "error"):
            settled.set()

    agent: Agent | None = None
    task = None
    gate, started = threading.Event(), threading.Event()
    if mode == "suspend":
        agent = Agent.create(
            DEMO_AGENT_ID, store=db, runtime=runtime, on_event=on_event, **create_app("", db)
        )
        agent.invoke_async(DEMO_INPUT)
        settled.wait(60)
        active = agent.active_execution() or {}
        say(
            ready="suspended",
            execution_id=active.get("execution_id"),
            request_id=active.get("approval_request_id"),
        )
    elif mode == "tool":
        agent = Agent.create(
            BLOCKER,
            store=db,
            runtime=runtime,
            on_event=on_event,
            **blocker_options(db, gate, started),
        )
        task = agent.invoke_async("do the slow thing")
        started.wait(60)
        active = agent.active_execution() or {}
        say(ready="tool_running", execution_id=active.get("execution_id"))
    for line in sys.stdin:
        command = line.strip()
        if command == "go" and mode == "load":
            try:
                agent = Agent.load(
                    DEMO_AGENT_ID,
                    store=db,
                    runtime=runtime,
                    on_event=on_event,
                    **create_app("", db),
                )
                say(loaded=True)
            except AgentOwnedError as exc:
                say(owned=str(exc), pid=exc.pid)
        elif command == "finish":
            gate.set()
            assert task is not None
            result = task.result(60)
            say(status=result.status, output=result.output)
        elif command == "close":
            assert agent is not None
            agent.close()
            say(closed=True)
        elif command == "shutdown":
            runtime.close(timeout_seconds=10)
            say(shutdown=True)
        elif command == "exit":
            break
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
