"""A small MCP server for tests: tools annotated read-only, idempotent and neither, each
call recorded in a JSON-lines ledger.

For the tests of :mod:`phronomy_fsm.agent.mcp` and the agent crash matrix
(``docs/agent.md``, "MCP tools"): a real MCP server written with the official SDK
(``mcp.server.MCPServer``; the extra ``mcp``), run as its own process::

    python -m phronomy_fsm.testing.mcp_server --ledger calls.jsonl            # stdio
    python -m phronomy_fsm.testing.mcp_server --ledger calls.jsonl --http PORT

``--http`` serves streamable HTTP at ``http://127.0.0.1:PORT/mcp`` (loopback only).
With ``--hold DIR``, a ``charge`` or ``open_ticket`` call records its effect, writes
``held-<tool>`` (the server's pid) in ``DIR`` and then never answers — a client killed now is killed *during*
the call, after its effect (a test's SIGKILL).
Its tools, each taking ``{"item": str}``:

- ``stock`` (``readOnlyHint``): ``{"item", "in_stock": 3}``;
- ``open_ticket`` (``idempotentHint``): ``{"ticket": "TK-<last 8 of the key>",
  "item"}``, the first result again for a repeated idempotency key (``replayed``);
- ``charge`` (no hint: at most once): ``{"tool": "charge", "item", "done": true}``;
- ``fail`` (no hint): raises, so the call answers with an error.

Every call appends one fsynced line to the ledger before it returns:
``{"execution_id", "parent_execution_id", "agent_id", "effect": "execute_tool",
"tool", "kind", "key", "attempt", "arguments", "result", "error", "replayed"}``, the
ids taken from the request's ``_meta`` (:data:`phronomy_fsm.agent.mcp.META_IDEMPOTENCY_KEY`
and the others) — the shape of the crash matrix's ``tools.jsonl``.
"""

from __future__ import annotations

import argparse
import asyncio
import fcntl
import json
import os
from pathlib import Path
from typing import Any

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

from phronomy_fsm.agent.mcp import (
    META_AGENT_ID,
    META_ATTEMPT,
    META_EXECUTION_ID,
    META_IDEMPOTENCY_KEY,
    META_TOOL_INVOCATION_ID,
)


async def _hold(folder: Path | None, tool: str) -> None:
    """Never return when ``folder`` is set (``--hold``, module docstring)."""
    if folder is None:
        return
    Path(folder, f"held-{tool}").write_text(str(os.getpid()))
    await asyncio.Event().wait()  # until the connection (and so this request) goes


class Ledger:
    """The server's record of its calls (module docstring).

    Args:
        path: the JSON-lines file (created on the first call).

    Concurrency: :meth:`locked_find_or_append` holds an exclusive ``flock`` on a
    sibling lock file, so a check-then-append is atomic across processes.
    """

    def __init__(self, path: Path) -> None:
        self.path = path

    def entries(self) -> list[dict[str, Any]]:
        """Every entry, oldest first (a line cut short by a kill is skipped)."""
        if not self.path.exists():
            return []
        out = []
        for line in self.path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
        return out

    def append(self, entry: dict[str, Any]) -> None:
        """Append one entry as one fsynced line."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, (json.dumps(entry, sort_keys=True) + "\n").encode())
            os.fsync(fd)
        finally:
            os.close(fd)

    def locked(self) -> Any:
        """An open lock file held exclusively until it is closed (``with``)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(f"{self.path}.lock", "a")  # noqa: SIM115 - closed by the caller's with
        fcntl.flock(handle, fcntl.LOCK_EX)
        return handle


def build_server(ledger: Ledger, hold: Path | None = None) -> MCPServer:
    """The server and its four tools (module docstring), recording into ``ledger``;
    ``hold``: the folder of ``--hold``."""
    server = MCPServer("phronomy-test-tools", log_level="WARNING")

    def record(ctx: Context, tool: str, kind: str, item: str, **entry: Any) -> None:
        meta = dict(ctx.request_context.meta or {})
        ledger.append(
            {
                "execution_id": meta.get(META_TOOL_INVOCATION_ID),
                "parent_execution_id": meta.get(META_EXECUTION_ID),
                "agent_id": meta.get(META_AGENT_ID),
                "effect": "execute_tool",
                "tool": tool,
                "kind": kind,
                "key": meta.get(META_IDEMPOTENCY_KEY),
                "attempt": meta.get(META_ATTEMPT, 1),
                "arguments": {"item": item},
                **entry,
            }
        )

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def stock(item: str, ctx: Context) -> dict[str, Any]:
        """Read how many of an item are in stock."""
        result = {"item": item, "in_stock": 3}
        record(ctx, "stock", "pure", item, result=result)
        return result

    @server.tool(annotations=ToolAnnotations(idempotent_hint=True))
    async def open_ticket(item: str, ctx: Context) -> dict[str, Any]:
        """Open a support ticket for an item (a repeated call returns the same ticket)."""
        key = str(dict(ctx.request_context.meta or {}).get(META_IDEMPOTENCY_KEY))
        with ledger.locked():
            first = next((e for e in ledger.entries() if e.get("key") == key), None)
            result = (
                first["result"] if first is not None else {"ticket": f"TK-{key[-8:]}", "item": item}
            )
            record(
                ctx, "open_ticket", "idempotent", item, result=result, replayed=first is not None
            )
        await _hold(hold, "open_ticket")
        return dict(result)

    @server.tool()
    async def charge(item: str, ctx: Context) -> dict[str, Any]:
        """Charge the customer for an item (not safe to repeat)."""
        result = {"tool": "charge", "item": item, "done": True}
        record(ctx, "charge", "at_most_once", item, result=result)
        await _hold(hold, "charge")
        return result

    @server.tool()
    def fail(item: str, ctx: Context) -> str:
        """A tool whose service is always down."""
        error = f"the {item} service is down"
        record(ctx, "fail", "at_most_once", item, result=None, error=f"McpError: {error}")
        raise ToolError(error)  # its text reaches the client (any other error's does not)

    return server


def main(argv: list[str] | None = None) -> None:
    """The command line (module docstring)."""
    parser = argparse.ArgumentParser(description="A small MCP server for tests.")
    parser.add_argument("--ledger", type=Path, required=True, help="the JSON-lines call record")
    parser.add_argument("--http", type=int, metavar="PORT", help="serve streamable HTTP here")
    parser.add_argument(
        "--hold", type=Path, metavar="DIR", help="hold charge and open_ticket calls (tests)"
    )
    args = parser.parse_args(argv)
    server = build_server(Ledger(args.ledger), args.hold)
    if args.http is None:
        server.run()
    else:
        server.run("streamable-http", host="127.0.0.1", port=args.http)


__all__ = ["Ledger", "build_server", "main"]

if __name__ == "__main__":
    main()
