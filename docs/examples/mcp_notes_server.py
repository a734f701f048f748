"""A tiny MCP server for docs/examples/mcp_agent.py: notes kept in a JSON file.

python docs/examples/mcp_notes_server.py NOTES_FILE

It speaks MCP on its stdin and stdout (the agent starts it for each call) and has three
tools: ``list_notes`` (read-only), ``save_note`` (idempotent: saving the same text under
the same title twice changes nothing) and ``delete_note`` (neither: a person approves
it in the example).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from mcp.server import MCPServer
from mcp.types import ToolAnnotations

NOTES = Path(sys.argv[1] if len(sys.argv) > 1 else "notes.json")
server = MCPServer("notes", log_level="WARNING")


def _load() -> dict[str, str]:
    return json.loads(NOTES.read_text()) if NOTES.exists() else {}


def _save(notes: dict[str, str]) -> None:
    NOTES.write_text(json.dumps(notes, indent=2, sort_keys=True))


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def list_notes() -> dict[str, str]:
    """Every note, by title."""
    return _load()


@server.tool(annotations=ToolAnnotations(idempotent_hint=True))
def save_note(title: str, text: str) -> dict[str, str]:
    """Save a note under a title (replacing the note of that title)."""
    notes = _load()
    notes[title] = text
    _save(notes)
    return {"saved": title}


@server.tool(annotations=ToolAnnotations(destructive_hint=True))
def delete_note(title: str) -> dict[str, bool]:
    """Delete the note of a title."""
    notes = _load()
    existed = notes.pop(title, None) is not None
    _save(notes)
    return {"deleted": existed}


if __name__ == "__main__":
    server.run()
