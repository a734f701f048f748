"""AnthropicProvider against the real stub server speaking the Messages API on loopback
(issue 24 item 3): a tool-using agent run, a streamed run, the re-send policy on a 529
and on a dropped connection, a cancel during a streamed call, and typed errors for
malformed answers."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from phronomy_fsm.agent import Agent, AgentRuntime, AnthropicProvider, Tool
from phronomy_fsm.agent.anthropic import parse_message
from phronomy_fsm.agent.types import LLMRequest, Message, Usage
from phronomy_fsm.errors import Cancelled, ConfigurationError, LLMError
from phronomy_fsm.store import SqliteBarrierStore
from phronomy_fsm.testing.deadlines import scaled_seconds, wait_until
from phronomy_fsm.testing.stub_llm import StubLLMServer

ENV_VARIABLES = (
    "PHRONOMY_ANTHROPIC_BASE_URL",
    "PHRONOMY_ANTHROPIC_API_KEY",
    "PHRONOMY_ANTHROPIC_MODEL",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_MODEL",
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ENV_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def lookup_order(arguments: dict[str, Any], context: Any) -> dict[str, Any]:
    return {"order_id": arguments["order_id"], "status": "shipped"}


ORDER_TOOL = Tool(
    "lookup_order",
    lookup_order,
    "Look up an order.",
    {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]},
)


@pytest.fixture
def rig(tmp_path: Any) -> Iterator[Any]:
    """``rig(script, **provider_options) -> (server, provider, runtime, store)``."""
    opened: list[Any] = []

    def make(script: Any, **options: Any) -> tuple[StubLLMServer, AnthropicProvider, Any, Any]:
        server = StubLLMServer(script)
        settings = {"base_url": server.base_url, "model": "claude-stub", "timeout_seconds": 10.0}
        settings.update(options)
        provider = AnthropicProvider(**settings)
        store = SqliteBarrierStore(tmp_path / f"a{len(opened)}.db")
        runtime = AgentRuntime(store)
        opened.append((server, provider, runtime, store))
        return server, provider, runtime, store

    yield make
    for server, provider, runtime, store in opened:
        runtime.close(timeout_seconds=5)
        store.close()
        provider.close()
        server.close()


def test_a_tool_using_agent_runs_over_the_messages_api(rig: Any) -> None:
    script = [
        {
            "tool_calls": [
                {"name": "lookup_order", "arguments": {"order_id": "A-17"}},
                {"name": "lookup_order", "arguments": {"order_id": "A-18"}},
            ]
        },
        {
            "content": "Order A-17 has shipped.",
            "usage": {"prompt_tokens": 7, "completion_tokens": 3},
        },
    ]
    server, provider, runtime, store = rig(script, api_key="sk-test")
    agent = Agent.create(
        "a1", provider=provider, tools=[ORDER_TOOL], runtime=runtime, system_prompt="Be brief."
    )
    result = agent.invoke("Where is my order A-17?", wait_seconds=scaled_seconds(20))

    assert (result.status, result.output) == ("completed", "Order A-17 has shipped.")
    assert result.usage == Usage(17, 8)  # input/output tokens of both calls
    assert result.finish_reason == "end_turn"
    first, second = server.requests
    assert first.path == "/v1/messages"
    assert first.headers["x-api-key"] == "sk-test"
    assert first.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in first.headers
    assert first.body["system"] == "Be brief."
    assert first.body["max_tokens"] == 4096
    assert first.body["tools"][0]["input_schema"]["required"] == ["order_id"]
    assert [m["role"] for m in first.body["messages"]] == ["user"]
    # the tool calls went back as tool_use blocks, their results as tool_result blocks
    # of ONE user message (consecutive tool messages joined: roles must alternate)
    assistant, tool_turn = second.body["messages"][1:]
    assert assistant == {
        "role": "assistant",
        "content": [
            {
                "type": "tool_use",
                "id": f"toolu_0_{i}",
                "name": "lookup_order",
                "input": {"order_id": order},
            }
            for i, order in enumerate(("A-17", "A-18"))
        ],
    }
    assert tool_turn["role"] == "user"
    assert [(b["type"], b["tool_use_id"]) for b in tool_turn["content"]] == [
        ("tool_result", "toolu_0_0"),
        ("tool_result", "toolu_0_1"),
    ]
    assert json.loads(tool_turn["content"][1]["content"]) == {
        "order_id": "A-18",
        "status": "shipped",
    }
    journal = store.journal_entries(result.execution_id)
    calls = [j.data["llm_call_id"] for j in journal if j.kind == "llm_call_recorded"]
    assert [r.headers["idempotency-key"] for r in server.requests] == calls


def test_a_streamed_run_delivers_tokens_and_assembles_tool_input(rig: Any) -> None:
    script = [
        {
            "content": "Let me look.",
            "tool_calls": [{"name": "lookup_order", "arguments": {"order_id": "B-2"}}],
        },
        {"content": "Order B-2 has shipped, as of today."},
    ]
    server, provider, runtime, _store = rig(script)
    agent = Agent.create("a1", provider=provider, tools=[ORDER_TOOL], runtime=runtime)
    stream = agent.stream("Where is B-2?")
    events = list(stream)
    result = stream.result(scaled_seconds(10))

    tokens = [e.content for e in events if e.type == "token"]
    assert "".join(tokens) == "Let me look.Order B-2 has shipped, as of today."
    assert len(tokens) >= 4  # delivered piece by piece, not at once
    [called] = [e for e in events if e.type == "tool_call"]
    assert json.loads(called.arguments) == {"order_id": "B-2"}  # from input_json_delta pieces
    assert [e.status for e in events if e.type == "tool_result"] == ["completed"]
    assert events[-1].type == "done"
    assert result.output == "Order B-2 has shipped, as of today."
    assert result.usage == Usage(20, 10)
    assert all(r.body["stream"] is True for r in server.requests)


def test_overloaded_529_fails_the_call_once_with_a_retryable_error(rig: Any) -> None:
    """The provider never re-sends: a 529 is one request, and the execution fails with a
    typed, retryable LLMError (re-sending is the agent's policy, for unknown outcomes)."""
    server, provider, runtime, store = rig([{"status": 529}, {"content": "never"}])
    agent = Agent.create("a1", provider=provider, runtime=runtime, llm_resend="resend")
    with pytest.raises(LLMError) as info:
        agent.invoke("hello", wait_seconds=scaled_seconds(20))

    assert (info.value.status_code, info.value.reason) == (529, "http_status")
    assert info.value.retryable is True
    assert "Overloaded" in str(info.value)
    assert len(server.requests) == 1
    [record] = store.list_records(machine="agent_session")
    assert record.status.value == "failed"


def test_a_dropped_connection_mid_stream_fails_once_with_a_retryable_error(rig: Any) -> None:
    server, provider, runtime, _store = rig(
        [{"content": "one two three four", "stream_break": "abort"}, {"content": "never"}]
    )
    agent = Agent.create("a1", provider=provider, runtime=runtime, llm_resend="resend")
    stream = agent.stream("hello")
    events = list(stream)
    with pytest.raises(LLMError) as info:
        stream.result(scaled_seconds(10))

    assert info.value.reason in ("transport", "stream_incomplete")
    assert info.value.retryable is True
    assert events[-1].type == "error"
    assert len(server.requests) == 1
    assert server.requests[0].outcome == "aborted"


def test_a_cancel_during_a_streamed_call_ends_it_at_once(rig: Any) -> None:
    server, provider, runtime, store = rig(
        [{"content": "a b c d e f g h", "chunk_delay_seconds": 30}]
    )
    agent = Agent.create("a1", provider=provider, runtime=runtime)
    stream = agent.stream("hello")
    seen: list[str] = []

    def read() -> None:
        for event in stream:
            seen.append(event.type)

    reader = threading.Thread(target=read)
    reader.start()
    wait_until(lambda: server.requests, 10, "the call to reach the stub")
    started = time.monotonic()
    assert agent.cancel() is True
    with pytest.raises(Cancelled):
        stream.result(scaled_seconds(10))
    reader.join(scaled_seconds(10))
    assert time.monotonic() - started < scaled_seconds(5)  # not the 30 s between events
    assert seen[-1] == "cancelled"
    [record] = store.list_records(machine="agent_session")
    assert record.status.value == "cancelled"


def _request(stream: bool) -> LLMRequest:
    return LLMRequest("llm-1", (Message("user", "hi"),), (), stream)


@pytest.mark.parametrize(
    ("step", "stream", "reason"),
    [
        ({"malformed": "not_json"}, False, "not_json"),
        ({"malformed": "no_choices"}, False, "bad_message"),
        (
            {"tool_calls": [{"name": "t", "arguments": {}}], "malformed": "bad_tool_call"},
            False,
            "bad_tool_call",
        ),
        (
            {"tool_calls": [{"name": "t", "arguments": {}}], "malformed": "tool_args_object"},
            False,
            "bad_tool_call",
        ),
        (
            {"body": '{"type": "error", "error": {"type": "api_error", "message": "boom"}}'},
            False,
            "api_error",
        ),
        ({"content": "a b c", "malformed": "not_json"}, True, "bad_chunk"),
        ({"content": "a b c", "malformed": "no_choices"}, True, "bad_chunk"),
        ({"tool_calls": [{"name": "t", "arguments": "{not json"}]}, True, "bad_tool_call"),
        ({"content": "a b c", "stream_break": True}, True, "stream_incomplete"),
    ],
)
def test_a_malformed_answer_is_a_typed_llm_error(
    rig: Any, step: dict[str, Any], stream: bool, reason: str
) -> None:
    _server, provider, _runtime, _store = rig([step])
    with pytest.raises(LLMError) as info:
        provider.complete(_request(stream))
    assert info.value.reason == reason
    assert info.value.llm_call_id == "llm-1"


def test_configuration_names_the_anthropic_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigurationError, match="PHRONOMY_ANTHROPIC_MODEL"):
        AnthropicProvider()
    monkeypatch.setenv("ANTHROPIC_MODEL", "claude-x")
    with pytest.raises(ConfigurationError, match="PHRONOMY_ANTHROPIC_API_KEY"):
        AnthropicProvider()  # api.anthropic.com needs a key
    monkeypatch.setenv("ANTHROPIC_API_KEY", "k")
    with AnthropicProvider() as provider:
        assert provider.url == "https://api.anthropic.com/v1/messages"
        assert provider.model == "claude-x"
    with pytest.raises(ConfigurationError, match="max_tokens"):
        AnthropicProvider(max_tokens=0)


def test_prompt_tokens_include_the_cached_input() -> None:
    body = {
        "type": "message",
        "content": [{"type": "text", "text": "hi"}],
        "usage": {
            "input_tokens": 5,
            "cache_creation_input_tokens": 100,
            "cache_read_input_tokens": 1000,
            "output_tokens": 3,
        },
    }
    assert parse_message("llm-1", json.dumps(body)).usage == Usage(1105, 3)
