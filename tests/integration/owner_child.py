"""A process that runs an agent, driven by ``tests/integration/test_who_runs_an_execution.py``.

Usage: ``python -m tests.integration.owner_child MODE DB``. It prints one JSON object
per line on stdout and reads one command per line on stdin, so the test synchronises on
what the child says, never on time.

Modes:

- ``suspend``: create the demo agent (:mod:`phronomy_fsm.demo`), invoke it and wait
  until it waits for the refund's approval; print ``{"ready": "waiting",
  "execution_id": ..., "request_id": ..., "worker_id": ...}``.
- ``tool``: create agent ``blocker`` whose tool ``slow_effect`` blocks until the
  ``finish`` command, invoke it and print ``{"ready": "tool_running", ...}`` once the
  tool has started (the tool barrier is committed by then). On ``finish`` the tool
  appends its idempotency key to ``DB.effects`` and returns.

Commands: ``finish`` (tool mode: let the tool return), ``result`` (print how the
invoke task ended: ``{"status", "output"}`` or ``{"error"}``), ``exit``.

:func:`create_app` is the ``--app tests.integration.owner_child:create_app`` factory
of the same two agents for the operator commands run by the test.
"""

from __future__ import annotations

import json
import sys
import threading
from typing import Any

from phronomy_fsm.agent import Agent, AgentRuntime, ApprovalRequired, Reply, ScriptedProvider, Tool
from phronomy_fsm.agent.app import agent_app
from phronomy_fsm.agent.config import AgentConfig
from phronomy_fsm.demo import DEMO_AGENT_ID, DEMO_INPUT, demo_options
from phronomy_fsm.durable.app import DurableApp
from phronomy_fsm.errors import Cancelled, PhronomyError
from phronomy_fsm.store import SqliteBarrierStore

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


def create_app(db_path: str) -> DurableApp:
    """Both agents as a durable application (``blocker``'s tool returns at once)."""
    gate, started = threading.Event(), threading.Event()
    gate.set()
    return agent_app(
        db_path,
        [
            AgentConfig.build(DEMO_AGENT_ID, **demo_options(db_path)),
            AgentConfig.build(BLOCKER, **blocker_options(db_path, gate, started)),
        ],
    )


def main(mode: str, db: str) -> int:
    """Run ``mode`` on ``db`` and obey stdin commands until ``exit`` or EOF."""
    runtime = AgentRuntime(SqliteBarrierStore(db), own_store=True)
    approval = threading.Event()
    requests: list[ApprovalRequired] = []

    def on_event(event: Any) -> None:
        if isinstance(event, ApprovalRequired):
            requests.append(event)
            approval.set()

    gate, started = threading.Event(), threading.Event()
    if mode == "suspend":
        agent = Agent.create(DEMO_AGENT_ID, runtime=runtime, on_event=on_event, **demo_options(db))
        task = agent.invoke_async(DEMO_INPUT)
        approval.wait(60)
        say(
            ready="waiting",
            execution_id=requests[0].execution_id,
            request_id=requests[0].request_id,
            worker_id=runtime.durable.worker_id,
        )
    else:
        agent = Agent.create(BLOCKER, runtime=runtime, **blocker_options(db, gate, started))
        task = agent.invoke_async("do the slow thing", execution_id="ex-slow")
        started.wait(60)
        say(ready="tool_running", execution_id="ex-slow", worker_id=runtime.durable.worker_id)
    for line in sys.stdin:
        command = line.strip()
        if command == "finish":
            gate.set()
        elif command == "result":
            try:
                result = task.result(60)
                say(status=result.status.value, output=result.output)
            except (PhronomyError, Cancelled) as exc:  # the task's own error, for the test
                say(error=f"{type(exc).__name__}: {exc}")
        elif command == "exit":
            break
    runtime.close(timeout_seconds=10)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
