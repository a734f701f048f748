"""An agent that uses the tools of an MCP server (docs/agent.md, "MCP tools").

python docs/examples/mcp_agent.py [FOLDER]

Offline: the LLM is the stub chat-completions server of ``phronomy_fsm.testing``,
scripted to save a note, read the notes and delete one; the MCP server is
``mcp_notes_server.py`` beside this file, started over stdio for each call (it keeps
its notes in FOLDER/notes.json). Its tools' annotations give their effect kinds:
``list_notes`` is read-only (``pure``), ``save_note`` idempotent, ``delete_note``
neither (``at_most_once``) and needs a person's approval — given here in the same
process, bound to the hash of the exact arguments shown. The store is FOLDER/agents.db
(default: the current folder). Needs the extra ``mcp`` (``pip install
'phronomy-fsm[mcp]'``).
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path

from phronomy_fsm.agent import (
    Agent,
    AgentEvent,
    AgentRuntime,
    ApprovalRequired,
    OpenAICompatibleProvider,
)
from phronomy_fsm.agent.mcp import McpServer
from phronomy_fsm.errors import AgentExistsError
from phronomy_fsm.store import SqliteBarrierStore
from phronomy_fsm.testing.stub_llm import StubLLMServer

HERE = Path(__file__).resolve().parent

#: What the stub LLM answers, call by call.
SCRIPT = [
    {
        "tool_calls": [
            {"name": "notes_save_note", "arguments": {"title": "milk", "text": "buy 2 litres"}},
            {"name": "notes_save_note", "arguments": {"title": "call", "text": "ring Ana"}},
        ]
    },
    {"tool_calls": [{"name": "notes_list_notes", "arguments": {}}]},
    {"tool_calls": [{"name": "notes_delete_note", "arguments": {"title": "call"}}]},
    {"content": "Saved two notes and deleted the call note; one note is left."},
]


def main(folder: Path) -> None:
    """Run one agent execution against the notes server and print what happened."""
    folder.mkdir(parents=True, exist_ok=True)
    notes = McpServer.stdio(
        sys.executable,
        [str(HERE / "mcp_notes_server.py"), str(folder / "notes.json")],
        prefix="notes_",  # the LLM sees notes_list_notes, notes_save_note, ...
        requires_approval={"delete_note"},  # by the server's own tool name
    )
    approvals: list[ApprovalRequired] = []
    asked = threading.Event()

    def on_event(event: AgentEvent) -> None:
        if isinstance(event, ApprovalRequired):
            approvals.append(event)
            asked.set()

    with (
        StubLLMServer(SCRIPT) as llm,
        OpenAICompatibleProvider(base_url=llm.base_url, model="stub") as provider,
        AgentRuntime(SqliteBarrierStore(folder / "agents.db"), own_store=True) as runtime,
    ):
        options = {"provider": provider, "mcp_servers": [notes], "on_event": on_event}
        try:  # the tools are listed from the server here
            agent = Agent.create("note-keeper", runtime=runtime, **options)
        except AgentExistsError:
            agent = Agent.load("note-keeper", runtime=runtime, **options)
        for tool in agent.config.tools.values():
            print(f"tool {tool.name}: effect {tool.effect.value}")
        agent.invoke_async("Note the milk and the call, then drop the call note.")
        if not asked.wait(60):
            raise SystemExit("the agent asked for no approval")
        request = approvals[0]
        for item in request.items:
            print(
                f"approve {item.tool_name} {item.arguments} (sha256 {item.arguments_sha256[:12]}...)"
            )
        # approving exactly what was shown: a call whose arguments hash otherwise is refused
        result = agent.approve(
            request.execution_id,
            approval_request_id=request.request_id,
            arguments_sha256={i.tool_invocation_id: i.arguments_sha256 for i in request.items},
            wait_seconds=60,
        )
        print(f"{result.status.value}: {result.output}")
    print("notes left:", (folder / "notes.json").read_text().replace("\n", " "))


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("."))
