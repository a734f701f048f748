"""An execution's event stream, read by another process that reconnects with its cursor
(docs/agent.md, "Event streams").

python docs/examples/event_stream.py [DB_PATH]
python docs/examples/event_stream.py follow DB_PATH EXECUTION_ID [--after N] [--until KIND]

The first form runs an agent whose refund tool needs approval. While the execution waits
for the decision, it starts a reader — a separate process, the second form — that
prints the events committed so far and disconnects at the approval request, printing its
last cursor. It then approves, and starts a second reader with ``--after`` that cursor:
the second reader gets the rest, live, up to the terminal event. Together they printed
every event of the journal once. Offline: the LLM is a scripted provider.

The console serves the same stream over HTTP (``GET /execution/events?id=...``,
docs/console.md, "Event streams").
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from phronomy_fsm.agent import Agent, AgentRuntime, ApprovalRequired, Reply, ScriptedProvider, Tool
from phronomy_fsm.agent.streams import ExecutionEvents
from phronomy_fsm.store import SqliteBarrierStore
from phronomy_fsm.store.open import open_store


def issue_refund(arguments: dict[str, Any], context: Any) -> dict[str, Any]:
    return {"refunded": arguments["order_id"]}


REFUND = Tool(
    "issue_refund",
    issue_refund,
    "Refund an order.",
    {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]},
    requires_approval=True,
)
PROVIDER = ScriptedProvider(
    [
        Reply(content="I will refund it.", tool_calls=(("issue_refund", {"order_id": "A1"}),)),
        Reply(content="Order A1 is refunded."),
    ]
)


def follow(db_path: str, execution_id: str, after: int, until: str | None) -> int:
    """Print the events after ``after`` (``cursor kind``), stopping after ``until`` or
    the terminal event; the last line is ``last cursor N``."""
    store = open_store(db_path, read_only=True)
    cursor = after
    try:
        for event in ExecutionEvents(store, execution_id, after=after, wait_seconds=60):
            print(f"{event.cursor:3d} {event.kind}", flush=True)
            cursor = event.cursor
            if event.kind == until:
                break  # disconnect: a later reader resumes after this cursor
    finally:
        store.close()
    print(f"last cursor {cursor}", flush=True)
    return 0


def reader(db_path: Path, execution_id: str, *options: str) -> int:
    """Run ``follow`` in a new process, echo its output, return its last cursor."""
    proc = subprocess.run(
        [sys.executable, __file__, "follow", str(db_path), execution_id, *options],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    print(proc.stdout, end="")
    return int(proc.stdout.splitlines()[-1].split()[-1])


def demo(db_path: Path) -> int:
    store = SqliteBarrierStore(db_path)
    runtime = AgentRuntime(store)
    approvals: list[ApprovalRequired] = []
    try:
        agent = Agent.create(
            "refunds",
            provider=PROVIDER,
            tools=[REFUND],
            runtime=runtime,
            on_event=lambda e: approvals.append(e) if isinstance(e, ApprovalRequired) else None,
        )
        execution_id = agent.submit("Please refund order A1", execution_id="refund-1")
        print("reader 1 (another process):")
        cursor = reader(db_path, execution_id, "--until", "approval_required")
        # decided now: the rest reaches reader 2 live, as it is committed
        task = agent.approve_async(execution_id, approval_request_id=approvals[0].request_id)
        print(f"reader 2 (another process, --after {cursor}):")
        last = reader(db_path, execution_id, "--after", str(cursor))
        task.result(60)
        journal = store.journal_entries(execution_id)
        print(f"journal: {len(journal)} entries; the readers printed cursors 1..{last}, each once")
    finally:
        runtime.close()
        store.close()
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["follow"]:
        parser = argparse.ArgumentParser(prog="event_stream.py follow")
        parser.add_argument("db_path")
        parser.add_argument("execution_id")
        parser.add_argument("--after", type=int, default=0)
        parser.add_argument("--until")
        args = parser.parse_args(argv[1:])
        return follow(args.db_path, args.execution_id, args.after, args.until)
    if argv:
        return demo(Path(argv[0]))
    with tempfile.TemporaryDirectory() as folder:
        return demo(Path(folder) / "events.db")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
