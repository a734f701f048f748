"""An agent takes the tools of real MCP servers (docs/agent.md, "MCP tools"): the SDK's
``MCPServer`` of :mod:`phronomy_fsm.testing.mcp_server`, run by the test as a stdio
subprocess and as a streamable HTTP server on 127.0.0.1. Each MCP tool call is a tool
call like any other: validated, authorized, approved where it says (bound to its
arguments' hash), run as a ``tool_call`` child execution with its idempotency key in
the request's ``_meta``, journaled. Effect kinds come from the annotations unless the
declaration overrides them.

Real components: SQLite files, MCP server processes, the stub LLM server (HTTP).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from phronomy_fsm.agent import (
    Agent,
    AgentStatus,
    OpenAICompatibleProvider,
    Reply,
    ScriptedProvider,
)
from phronomy_fsm.agent.mcp import McpServer, McpToolInfo
from phronomy_fsm.durable.records import EffectKind
from phronomy_fsm.errors import ConfigurationError, McpError
from phronomy_fsm.generated import tool_call
from phronomy_fsm.testing.deadlines import wait_until
from phronomy_fsm.testing.stub_llm import StubLLMServer

from .conftest import Events

pytest.importorskip("mcp")

SERVER = [sys.executable, "-m", "phronomy_fsm.testing.mcp_server"]


def _ledger(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _stdio(ledger: Path, **options: Any) -> McpServer:
    return McpServer.stdio(SERVER[0], [*SERVER[1:], "--ledger", str(ledger)], **options)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """An MCP server over streamable HTTP on a free loopback port: (url, ledger)."""
    ledger = tmp_path / "http-calls.jsonl"
    port = _free_port()
    process = subprocess.Popen(
        [*SERVER, "--ledger", str(ledger), "--http", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def listening() -> bool:
        assert process.poll() is None, "the MCP server exited"
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) == 0

    try:
        wait_until(listening, 20, "the MCP HTTP server listens")
        yield f"http://127.0.0.1:{port}/mcp", ledger
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_listing_maps_annotations_to_effects_and_declarations_override_them(
    tmp_path: Path,
) -> None:
    server = _stdio(
        tmp_path / "calls.jsonl",
        prefix="shop_",
        effects={"charge": "idempotent"},
        requires_approval={"charge"},
    )
    tools = {t.name: t for t in server.tools()}
    assert set(tools) == {"shop_stock", "shop_open_ticket", "shop_charge", "shop_fail"}
    assert tools["shop_stock"].effect is EffectKind.PURE  # readOnlyHint
    assert tools["shop_open_ticket"].effect is EffectKind.IDEMPOTENT  # idempotentHint
    assert tools["shop_fail"].effect is EffectKind.AT_MOST_ONCE  # no hint
    assert tools["shop_charge"].effect is EffectKind.IDEMPOTENT  # overridden
    assert tools["shop_charge"].requires_approval and not tools["shop_stock"].requires_approval
    assert tools["shop_stock"].description == "Read how many of an item are in stock."
    assert tools["shop_stock"].parameters["required"] == ["item"]
    # the server's schema is enforced before anything is sent
    assert tools["shop_stock"].validate('{"item": 5}')[1] is not None
    with pytest.raises(ConfigurationError, match="lists no tool 'refund'"):
        _stdio(tmp_path / "calls.jsonl", effects={"refund": "pure"}).tools()
    # a listing kept as JSON builds the same tools without connecting
    kept = [McpToolInfo.from_json(i.to_json()) for i in server.list_tools()]
    again = McpServer.stdio("/nonexistent/server").tools(kept)
    assert [t.name for t in again] == ["stock", "open_ticket", "charge", "fail"]


def test_an_agent_calls_stdio_mcp_tools_as_durable_tool_calls(
    store: Any, runtime: Any, tmp_path: Path
) -> None:
    ledger = tmp_path / "calls.jsonl"
    agent = Agent.create(
        "shop",
        runtime=runtime,
        provider=ScriptedProvider(
            [
                Reply(
                    tool_calls=(
                        ("stock", {"item": "pen"}),
                        ("open_ticket", {"item": "pen"}),
                        ("charge", {"item": "pen"}),
                        ("fail", {"item": "billing"}),
                    )
                ),
                Reply(content="done"),
            ]
        ),
        mcp_servers=[_stdio(ledger)],
    )
    result = agent.invoke("sell a pen", wait_seconds=60)
    assert result.status is AgentStatus.COMPLETED and result.output == "done"
    record = store.load_record(result.execution_id)
    log = {e["tool_name"]: e for e in record.context["tool_log"]}
    calls = {e["tool"]: e for e in _ledger(ledger)}
    assert set(calls) == {"stock", "open_ticket", "charge", "fail"}
    for name in ("stock", "open_ticket", "charge"):
        # the server saw the call's ids in _meta: the idempotency key is the tool
        # invocation id, which is the tool_call child execution's id
        assert calls[name]["key"] == log[name]["tool_invocation_id"]
        assert calls[name]["parent_execution_id"] == result.execution_id
        assert log[name]["status"] == "completed"
        assert log[name]["result"] == calls[name]["result"]
        child = store.load_record(log[name]["tool_invocation_id"])
        assert child.machine == tool_call.MACHINE and child.context["arguments"] == {"item": "pen"}
    assert log["fail"]["status"] == "failed"
    assert "McpError" in log["fail"]["error"] and "billing service is down" in log["fail"]["error"]
    # the LLM saw each result as a tool message
    tool_messages = [m for m in record.context["messages"] if m["role"] == "tool"]
    assert len(tool_messages) == 4
    # and the journal keeps each call's result
    journaled = {
        e.data["tool_name"]: e.data
        for e in store.journal_entries(result.execution_id)
        if e.kind == "tool_result"
    }
    assert journaled["charge"]["result"] == calls["charge"]["result"]
    assert journaled["fail"]["status"] == "failed"


def test_an_agent_uses_an_http_mcp_server_with_approval_bound_to_the_arguments(
    store: Any, runtime: Any, http_server: tuple[str, Path]
) -> None:
    url, ledger = http_server
    events = Events()
    script = [
        {"tool_calls": [{"name": "m_charge", "arguments": {"item": "lamp"}, "id": "c1"}]},
        {"content": "charged"},
    ]
    with StubLLMServer(script) as llm:
        provider = OpenAICompatibleProvider(base_url=llm.base_url, model="m", timeout_seconds=10)
        try:
            agent = Agent.create(
                "lamps",
                runtime=runtime,
                provider=provider,
                mcp_servers=[McpServer.http(url, prefix="m_", requires_approval=True)],
                on_event=events,
            )
            sent = llm.requests
            task = agent.invoke_async("charge me for a lamp")
            event = events.wait_for("approval_required", timeout=30)
            (item,) = event.items
            assert item.tool_name == "m_charge" and item.arguments == {"item": "lamp"}
            assert _ledger(ledger) == []  # nothing reaches the server before approval
            result = agent.approve(
                event.execution_id,
                approval_request_id=event.request_id,
                arguments_sha256={item.tool_invocation_id: item.arguments_sha256},
                wait_seconds=60,
            )
            assert task.result(10) == result
        finally:
            provider.close()
    assert result.status is AgentStatus.COMPLETED and result.output == "charged"
    (call,) = _ledger(ledger)
    assert call["tool"] == "charge" and call["key"] == item.tool_invocation_id
    # the LLM was told the tools by their prefixed names and saw the server's result
    assert {t["function"]["name"] for t in sent[0].body["tools"]} == {
        "m_stock",
        "m_open_ticket",
        "m_charge",
        "m_fail",
    }
    tool_message = next(m for m in sent[1].body["messages"] if m["role"] == "tool")
    assert json.loads(tool_message["content"]) == call["result"]


def test_an_unreachable_server_is_a_clear_error_and_nothing_is_created(
    store: Any, runtime: Any
) -> None:
    url = f"http://127.0.0.1:{_free_port()}/mcp"
    with pytest.raises(McpError, match=r"127\.0\.0\.1.*listing its tools failed"):
        Agent.create(
            "nobody",
            runtime=runtime,
            provider=ScriptedProvider([Reply(content="x")]),
            mcp_servers=[McpServer.http(url, timeout_seconds=5)],
        )
    assert not store.agent_exists("nobody")
    with pytest.raises(ConfigurationError, match="http:// or https://"):
        McpServer.http("127.0.0.1:8000/mcp")
