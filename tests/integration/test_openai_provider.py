"""OpenAICompatibleProvider against the real stub server on localhost (issue 5 item 5).

No httpx mocks: every test sends real HTTP to ``phronomy_fsm.testing.stub_llm`` running in
this process (one test runs it as a subprocess). Covers the answer shapes (text, tool
calls, streaming, usage), the headers, every failure path (each an ``LLMError`` with
the right attributes), cancellation mid-stream, configuration from the environment,
concurrent use from several threads, and one real Agent execution end to end.
"""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from phronomy_fsm.agent.openai import DEFAULT_BASE_URL, OpenAICompatibleProvider
from phronomy_fsm.agent.types import LLMRequest, Message, ToolSpec, Usage
from phronomy_fsm.errors import Cancelled, ConfigurationError, LLMError
from phronomy_fsm.runtime.cancellation import CancellationToken
from phronomy_fsm.testing.stub_llm import StubLLMServer

ENV_VARIABLES = (
    "PHRONOMY_LLM_BASE_URL",
    "PHRONOMY_LLM_API_KEY",
    "PHRONOMY_LLM_MODEL",
    "OPENAI_BASE_URL",
    "OPENAI_API_KEY",
    "OPENAI_MODEL",
)

WEATHER = ToolSpec(
    "get_weather",
    "Current weather of a city.",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No developer environment leaks into these tests."""
    for name in ENV_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def request(
    call_id: str = "llm-1", *, stream: bool = False, tools: tuple[ToolSpec, ...] = ()
) -> LLMRequest:
    return LLMRequest(
        call_id,
        (Message("system", "Be brief."), Message("user", "What is the weather in Oslo?")),
        tools,
        stream,
    )


@pytest.fixture
def make() -> Any:
    """``make(script) -> (server, provider)``; both are closed after the test."""
    opened: list[tuple[Any, OpenAICompatibleProvider]] = []

    def factory(script: Any, **provider_options: Any) -> tuple[Any, OpenAICompatibleProvider]:
        server = StubLLMServer(script)
        options = {"base_url": server.base_url, "model": "test-model", "timeout_seconds": 5.0}
        options.update(provider_options)
        provider = OpenAICompatibleProvider(**options)
        opened.append((server, provider))
        return server, provider

    yield factory
    for server, provider in opened:
        provider.close()
        server.close()


def llm_error(provider: OpenAICompatibleProvider, req: LLMRequest, **kwargs: Any) -> LLMError:
    with pytest.raises(LLMError) as info:
        provider.complete(req, **kwargs)
    err = info.value
    assert err.llm_call_id == req.llm_call_id
    return err


# ------------------------------------------------------------------ answers


def test_plain_answer_sends_openai_body_and_reads_content_usage_and_model(make: Any) -> None:
    server, provider = make(
        [
            {
                "content": "Sunny, 21 C.",
                "model": "served-model-7",
                "usage": {"prompt_tokens": 31, "completion_tokens": 4},
            }
        ]
    )
    req = request("call-abc")

    response = provider.complete(req)

    assert response.llm_call_id == "call-abc"
    assert response.content == "Sunny, 21 C."
    assert response.tool_calls == ()
    assert response.usage == Usage(31, 4)
    assert response.model == "served-model-7"
    [received] = server.requests
    assert received.path == "/v1/chat/completions"
    assert received.body == {"model": "test-model", "messages": [m.to_json() for m in req.messages]}


def test_idempotency_key_and_request_id_headers_equal_llm_call_id(make: Any) -> None:
    server, provider = make([{"content": "a"}, {"content": "b"}])
    provider.complete(request("first-id"))
    provider.complete(request("second-id", stream=True))
    assert [r.headers["idempotency-key"] for r in server.requests] == ["first-id", "second-id"]
    assert [r.headers["x-request-id"] for r in server.requests] == ["first-id", "second-id"]
    assert server.requests[1].headers["accept"] == "text/event-stream"


def test_api_key_is_sent_as_bearer_and_extra_headers_are_added(make: Any) -> None:
    server, provider = make(
        [{"content": "a"}], api_key="sk-test-123", extra_headers={"X-Tenant": "acme"}
    )
    provider.complete(request())
    headers = server.requests[0].headers
    assert headers["authorization"] == "Bearer sk-test-123"
    assert headers["x-tenant"] == "acme"
    assert "sk-test-123" not in repr(provider)


def test_no_authorization_header_without_a_key_on_localhost(make: Any) -> None:
    server, provider = make([{"content": "a"}])
    provider.complete(request())
    assert "authorization" not in server.requests[0].headers


def test_tools_are_offered_and_tool_calls_keep_the_exact_argument_string(make: Any) -> None:
    raw = '{"city":  "Oslo" ,"units":"metric"}'
    server, provider = make(
        [
            {
                "tool_calls": [
                    {"name": "get_weather", "arguments": raw, "id": "call_w1"},
                    {"name": "get_weather", "arguments": "{broken"},
                ]
            }
        ]
    )
    response = provider.complete(request(tools=(WEATHER,)))

    assert server.requests[0].body["tools"] == [WEATHER.to_json()]
    assert response.content is None
    assert [(c.id, c.name, c.arguments_json) for c in response.tool_calls] == [
        ("call_w1", "get_weather", raw),
        ("call_0_1", "get_weather", "{broken"),
    ]
    assert response.tool_calls[0].parsed_arguments() == {"city": "Oslo", "units": "metric"}


def test_streaming_delivers_tokens_in_order_and_assembles_the_answer(make: Any) -> None:
    server, provider = make(
        [
            {
                "content": "The weather in Oslo is sunny today.",
                "usage": {"prompt_tokens": 12, "completion_tokens": 8},
            }
        ]
    )
    tokens: list[str] = []

    response = provider.complete(request(stream=True), on_token=tokens.append)

    assert tokens == ["The ", "weather ", "in ", "Oslo ", "is ", "sunny ", "today."]
    assert response.content == "The weather in Oslo is sunny today."
    assert response.usage == Usage(12, 8)
    assert response.model == "test-model"
    body = server.requests[0].body
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize("interleave", [False, True])
def test_streamed_tool_calls_are_assembled_by_index_across_chunks(
    make: Any, interleave: bool
) -> None:
    first = {"city": "Oslo", "note": "a fairly long argument so it spans many chunks"}
    second = '{"city": "Bergen"}'
    _, provider = make(
        [
            {
                "content": "Checking.",
                "tool_calls": [
                    {"name": "get_weather", "arguments": first},
                    {"name": "get_weather", "arguments": second},
                ],
                "interleave_tool_calls": interleave,
            }
        ]
    )
    response = provider.complete(request(stream=True, tools=(WEATHER,)))

    assert response.content == "Checking."
    assert [(c.id, c.name) for c in response.tool_calls] == [
        ("call_0_0", "get_weather"),
        ("call_0_1", "get_weather"),
    ]
    assert response.tool_calls[0].arguments_json == json.dumps(first, sort_keys=True)
    assert response.tool_calls[1].arguments_json == second


def test_streamed_answer_without_usage_chunk_reports_zero_usage(make: Any) -> None:
    _, provider = make([{"content": "ok", "usage": None}])
    response = provider.complete(request(stream=True))
    assert response.content == "ok"
    assert response.usage == Usage(0, 0)


def test_server_that_ignores_stream_and_answers_json_is_accepted(make: Any) -> None:
    body = json.dumps(
        {
            "model": "m2",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "whole answer"}}],
        }
    )
    _, provider = make([{"status": 200, "body": body}])
    tokens: list[str] = []
    response = provider.complete(request(stream=True), on_token=tokens.append)
    assert tokens == ["whole answer"]
    assert response.content == "whole answer"
    assert response.model == "m2"


# ----------------------------------------------------------------- failures


@pytest.mark.parametrize(
    ("status", "retryable"),
    [(500, True), (503, True), (429, True), (408, True), (400, False), (401, False), (404, False)],
)
def test_http_status_errors_carry_status_and_retryable_and_are_not_retried(
    make: Any, status: int, retryable: bool
) -> None:
    server, provider = make([{"status": status}, {"content": "must not be reached"}])
    err = llm_error(provider, request())
    assert (err.reason, err.status_code, err.retryable, err.timed_out) == (
        "http_status",
        status,
        retryable,
        False,
    )
    assert f"HTTP {status}" in str(err)
    assert f"stub error {status}" in str(err)  # the API's own error.message
    assert ("retryable" in str(err)) and (("not retryable" in str(err)) != retryable)
    assert len(server.requests) == 1  # no automatic retry


def test_http_error_with_a_raw_body_keeps_a_short_excerpt(make: Any) -> None:
    page = "<html><body>" + "Bad gateway " * 100 + "</body></html>"
    _, provider = make([{"status": 502, "body": page, "content_type": "text/html"}])
    err = llm_error(provider, request(stream=True))
    assert err.status_code == 502 and err.retryable is True
    assert err.body_excerpt.startswith("<html><body>Bad gateway")
    assert len(err.body_excerpt) <= 300


def test_timeout_becomes_timed_out_llm_error(make: Any) -> None:
    server, provider = make([{"delay_seconds": 3, "content": "late"}], timeout_seconds=0.3)
    started = time.monotonic()
    err = llm_error(provider, request())
    assert time.monotonic() - started < 2.5
    assert (err.reason, err.timed_out, err.retryable, err.status_code) == (
        "timeout",
        True,
        True,
        None,
    )
    assert "timed out" in str(err)
    assert len(server.requests) == 1  # sent once, not retried


def test_connection_refused_on_a_closed_port() -> None:
    server = StubLLMServer([{"content": "x"}])
    base_url = server.base_url
    server.close()
    with OpenAICompatibleProvider(base_url=base_url, model="m", timeout_seconds=2) as provider:
        err = llm_error(provider, request())
    assert (err.reason, err.retryable, err.timed_out, err.status_code) == (
        "connection",
        True,
        False,
        None,
    )
    assert "could not connect" in str(err)
    assert isinstance(err.__cause__, Exception) and not isinstance(err.__cause__, LLMError)


@pytest.mark.parametrize(
    ("step", "stream", "reason"),
    [
        ({"malformed": "not_json"}, False, "not_json"),
        ({"malformed": "no_choices"}, False, "no_choices"),
        ({"malformed": "no_choices"}, True, "no_choices"),
        ({"status": 200, "body": '{"choices": [{"index": 0}]}'}, False, "bad_message"),
        (
            {"status": 200, "body": '{"choices": [{"message": {"content": ["a"]}}]}'},
            False,
            "bad_message",
        ),
        ({"status": 200, "body": '{"error": {"message": "model overloaded"}}'}, False, "api_error"),
        (
            {
                "malformed": "bad_tool_call",
                "tool_calls": [{"name": "get_weather", "arguments": {}}],
            },
            False,
            "bad_tool_call",
        ),
        (
            {
                "malformed": "bad_tool_call",
                "tool_calls": [{"name": "get_weather", "arguments": {}}],
            },
            True,
            "bad_tool_call",
        ),
        (
            {
                "malformed": "tool_args_object",
                "tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}],
            },
            False,
            "bad_tool_call",
        ),
        (
            {
                "malformed": "tool_args_object",
                "tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}],
            },
            True,
            "bad_tool_call",
        ),
        ({"malformed": "not_json", "content": "one two three"}, True, "bad_chunk"),
        ({"stream_break": True, "content": "one two three"}, True, "stream_incomplete"),
        ({"stream_break": "abort", "content": "one two three"}, True, "transport"),
    ],
)
def test_protocol_failures_become_llm_errors(
    make: Any, step: dict[str, Any], stream: bool, reason: str
) -> None:
    _, provider = make([step])
    err = llm_error(provider, request(stream=stream))
    assert err.reason == reason
    assert err.timed_out is False and err.status_code is None
    assert err.retryable is (reason in ("stream_incomplete", "transport"))


def test_non_json_body_error_names_the_body(make: Any) -> None:
    _, provider = make([{"malformed": "not_json"}])
    err = llm_error(provider, request())
    assert "not JSON" in str(err)
    assert "<html>" in err.body_excerpt


def test_bad_tool_call_error_says_what_is_wrong(make: Any) -> None:
    _, provider = make(
        [
            {
                "malformed": "tool_args_object",
                "tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}],
            }
        ]
    )
    err = llm_error(provider, request())
    assert "tool call 0 (get_weather) has arguments that are dict, not a JSON string" in str(err)


def test_llm_error_pickles_with_its_attributes(make: Any) -> None:
    _, provider = make([{"status": 503}])
    err = llm_error(provider, request())
    copy = pickle.loads(pickle.dumps(err))
    assert type(copy) is LLMError
    assert (copy.reason, copy.status_code, copy.retryable, copy.llm_call_id) == (
        "http_status",
        503,
        True,
        "llm-1",
    )
    assert str(copy) == str(err)


def test_closed_provider_fails_with_llm_error(make: Any) -> None:
    _, provider = make([{"content": "x"}])
    provider.close()
    err = llm_error(provider, request())
    assert err.reason == "transport" and "closed" in str(err)


# -------------------------------------------------------------- cancellation


def test_cancellation_mid_stream_raises_cancelled_and_stops_reading(make: Any) -> None:
    words = " ".join(f"w{i}" for i in range(20))
    server, provider = make([{"content": words, "chunk_delay_seconds": 0.1}])
    token = CancellationToken()
    tokens: list[str] = []

    def on_token(text: str) -> None:
        tokens.append(text)
        token.cancel("user cancelled")

    started = time.monotonic()
    with pytest.raises(Cancelled) as info:
        provider.complete(request(stream=True), on_token=on_token, cancellation=token)
    elapsed = time.monotonic() - started

    assert info.value.reason == "user cancelled"
    assert tokens == ["w0 "]
    assert elapsed < 1.0  # the whole stream would take > 2 s
    record = server.requests[0]
    assert record.done.wait(5)
    assert record.outcome == "client_disconnected"  # the connection was closed under it


def test_already_cancelled_token_sends_nothing(make: Any) -> None:
    server, provider = make([{"content": "x"}])
    token = CancellationToken()
    token.cancel("gone")
    with pytest.raises(Cancelled):
        provider.complete(request(), cancellation=token)
    assert server.requests == []


# ------------------------------------------------------------- configuration


def test_configuration_from_phronomy_variables(make: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    server, _ = make([{"content": "from env"}])
    monkeypatch.setenv("PHRONOMY_LLM_BASE_URL", server.base_url + "/")
    monkeypatch.setenv("PHRONOMY_LLM_MODEL", "env-model")
    monkeypatch.setenv("PHRONOMY_LLM_API_KEY", "sk-env")
    monkeypatch.setenv("OPENAI_MODEL", "loses")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-loses")
    with OpenAICompatibleProvider() as provider:
        assert provider.complete(request()).content == "from env"
    assert provider.base_url == server.base_url
    assert server.requests[0].body["model"] == "env-model"
    assert server.requests[0].headers["authorization"] == "Bearer sk-env"


def test_configuration_falls_back_to_openai_variables(
    make: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, _ = make([{"content": "x"}])
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    monkeypatch.setenv("OPENAI_MODEL", "openai-env-model")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai")
    with OpenAICompatibleProvider() as provider:
        provider.complete(request())
    assert server.requests[0].body["model"] == "openai-env-model"
    assert server.requests[0].headers["authorization"] == "Bearer sk-openai"


def test_arguments_win_over_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PHRONOMY_LLM_MODEL", "env-model")
    monkeypatch.setenv("PHRONOMY_LLM_BASE_URL", "http://localhost:1/v1")
    with OpenAICompatibleProvider(model="arg-model", base_url="http://127.0.0.1:2/v1") as provider:
        assert (provider.model, provider.url) == (
            "arg-model",
            "http://127.0.0.1:2/v1/chat/completions",
        )


def test_default_base_url_is_openai(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PHRONOMY_LLM_MODEL", "gpt-x")
    monkeypatch.setenv("PHRONOMY_LLM_API_KEY", "sk-x")
    with OpenAICompatibleProvider() as provider:
        assert provider.base_url == DEFAULT_BASE_URL == "https://api.openai.com/v1"


def test_missing_model_raises_configuration_error_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PHRONOMY_LLM_API_KEY", "sk-x")
    with pytest.raises(ConfigurationError, match="PHRONOMY_LLM_MODEL"):
        OpenAICompatibleProvider()


@pytest.mark.parametrize(
    "base_url", ["https://api.openai.com/v1", "http://10.0.0.5:8000/v1", "https://llm.example.com"]
)
def test_missing_key_for_a_remote_server_raises_configuration_error(
    monkeypatch: pytest.MonkeyPatch, base_url: str
) -> None:
    monkeypatch.setenv("PHRONOMY_LLM_MODEL", "m")
    with pytest.raises(ConfigurationError, match="PHRONOMY_LLM_API_KEY"):
        OpenAICompatibleProvider(base_url=base_url)


@pytest.mark.parametrize(
    "base_url",
    [
        "http://localhost:8000/v1",
        "http://127.0.0.1:1234/v1",
        "http://[::1]:8080/v1",
        "http://127.0.1.1/v1",
    ],
)
def test_missing_key_is_allowed_on_localhost(base_url: str) -> None:
    with OpenAICompatibleProvider(base_url=base_url, model="m") as provider:
        assert provider.url == base_url + "/chat/completions"


@pytest.mark.parametrize(
    "options",
    [{"base_url": "ftp://127.0.0.1/v1"}, {"base_url": "127.0.0.1:8000"}, {"timeout_seconds": 0}],
)
def test_bad_settings_raise_configuration_error(options: dict[str, Any]) -> None:
    settings = {"base_url": "http://127.0.0.1:9/v1", "model": "m", **options}
    with pytest.raises(ConfigurationError):
        OpenAICompatibleProvider(**settings)


# --------------------------------------------------------------- concurrency


def test_one_provider_serves_several_worker_threads_at_once(make: Any) -> None:
    def answer(body: dict[str, Any], index: int) -> dict[str, Any]:
        return {"content": "re: " + body["messages"][-1]["content"], "delay_seconds": 0.05}

    server, provider = make(answer)
    results: dict[int, str | None] = {}
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        req = LLMRequest(f"call-{n}", (Message("user", f"question {n}"),), stream=n % 2 == 0)
        try:
            results[n] = provider.complete(req).content
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert errors == []
    assert results == {n: f"re: question {n}" for n in range(8)}
    assert sorted(r.headers["idempotency-key"] for r in server.requests) == sorted(
        f"call-{n}" for n in range(8)
    )


# ------------------------------------------------------------------ stub CLI


def test_stub_server_runs_as_a_script(tmp_path: Path) -> None:
    script = tmp_path / "steps.json"
    script.write_text(json.dumps([{"content": "from the script"}]))
    proc = subprocess.Popen(
        [sys.executable, "-m", "phronomy_fsm.testing.stub_llm", "--script", str(script)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        assert line.startswith("http://127.0.0.1:")
        with OpenAICompatibleProvider(base_url=line, model="m") as provider:
            assert provider.complete(request()).content == "from the script"
            err = llm_error(provider, request("second"))
            assert "stub script exhausted after 1 steps" in str(err)
    finally:
        proc.terminate()
        proc.wait(10)


# ---------------------------------------------------------------- end to end


def test_agent_runs_end_to_end_on_the_stub_server(tmp_path: Path) -> None:
    from phronomy_fsm.agent import Agent, AgentRuntime, Tool
    from phronomy_fsm.store import SqliteBarrierStore

    keys: list[str] = []

    def lookup_order(arguments: dict[str, Any], context: Any) -> dict[str, Any]:
        keys.append(context.idempotency_key)
        return {"order_id": arguments["order_id"], "status": "shipped"}

    tool = Tool(
        "lookup_order",
        lookup_order,
        "Look up an order.",
        {
            "type": "object",
            "properties": {"order_id": {"type": "string"}},
            "required": ["order_id"],
        },
    )
    script = [
        {"tool_calls": [{"name": "lookup_order", "arguments": '{"order_id": "A-17"}'}]},
        {"content": "Order A-17 has shipped."},
        {"content": "Streamed answer here."},
    ]
    store = SqliteBarrierStore(tmp_path / "a.db")
    rt = AgentRuntime(store)
    with (
        StubLLMServer(script) as server,
        OpenAICompatibleProvider(base_url=server.base_url, model="m") as provider,
    ):
        try:
            agent = Agent.create("a1", provider=provider, tools=[tool], runtime=rt)
            result = agent.invoke("Where is my order A-17?", wait_seconds=10)

            assert (result.status, result.output) == ("completed", "Order A-17 has shipped.")
            assert result.usage == Usage(20, 10)
            assert result.finish_reason is not None
            barriers = [b.barrier for b in store.barrier_log(result.execution_id)]
            assert barriers[0] == "@start" and barriers[-1] == "@final"
            assert "tool_dispatch" in barriers and "provider_dispatch" in barriers
            journal = store.journal_entries(result.execution_id)
            calls = [j.data["llm_call_id"] for j in journal if j.kind == "llm_call_recorded"]
            # each durable llm_call_id went out as the Idempotency-Key of its request
            assert [r.headers["idempotency-key"] for r in server.requests] == calls
            assistant = next(j for j in journal if j.kind == "assistant_message")
            assert (
                assistant.data["message"]["tool_calls"][0]["function"]["arguments"]
                == '{"order_id": "A-17"}'
            )
            follow_up = server.requests[1].body["messages"]
            assert [m["role"] for m in follow_up] == ["user", "assistant", "tool"]
            assert follow_up[2]["tool_call_id"] == "call_0_0"
            assert json.loads(follow_up[2]["content"]) == {"order_id": "A-17", "status": "shipped"}
            assert len(keys) == 1 and keys[0] == next(
                j.data["tool_invocation_id"] for j in journal if j.kind == "tool_result"
            )
            assert [j.data for j in journal if j.kind == "final_output"] == [
                {"text": "Order A-17 has shipped."}
            ]

            events = list(agent.stream("Stream it"))
            tokens = [e.content for e in events if e.type == "token"]
            assert len(tokens) >= 2
            assert events[-1].type == "done"
            assert server.requests[2].body["stream"] is True
        finally:
            rt.close()
            store.close()


def test_a_cancel_interrupts_a_call_blocked_on_the_network(tmp_path: Path) -> None:
    """The server takes 30 s to answer; a cancel ends the call (and the execution) at
    once: the provider stops waiting for the server (the exchange is abandoned)."""
    from phronomy_fsm.agent import Agent, AgentRuntime
    from phronomy_fsm.store import SqliteBarrierStore

    store = SqliteBarrierStore(tmp_path / "c.db")
    rt = AgentRuntime(store)
    with (
        StubLLMServer([{"content": "late", "delay_seconds": 30}]) as server,
        OpenAICompatibleProvider(
            base_url=server.base_url, model="m", timeout_seconds=60
        ) as provider,
    ):
        try:
            agent = Agent.create("a1", provider=provider, runtime=rt)
            task = agent.invoke_async("hello")
            deadline = time.monotonic() + 10
            while not server.requests and time.monotonic() < deadline:
                time.sleep(0.01)
            assert server.requests, "the call never reached the server"
            started = time.monotonic()
            assert agent.cancel() is True
            with pytest.raises(Cancelled):
                task.result(10)
            assert time.monotonic() - started < 5  # not the 30 s the server takes
            [record] = store.list_records(machine="agent_session")
            assert record.status.value == "cancelled"
        finally:
            rt.close()
            store.close()


# ------------------------------------------------------------------ budgets


@pytest.mark.parametrize("stream", [False, True])
def test_a_budget_counts_the_usage_and_model_the_server_reports(
    make: Any, tmp_path: Any, stream: bool
) -> None:
    """``docs/agent.md``, "Budgets": the tokens and the cost an execution has spent are
    the ``usage`` the server reported (in the response, or in the last stream chunk with
    ``stream_options.include_usage``), priced by the model the server named."""
    from phronomy_fsm.agent import Agent, AgentRuntime, Budget, Tool
    from phronomy_fsm.errors import BudgetExhaustedError
    from phronomy_fsm.store import SqliteBarrierStore

    step = {
        "tool_calls": [{"name": "lookup", "arguments": {"q": "x"}}],
        "usage": {"prompt_tokens": 700, "completion_tokens": 300},
        "model": "served-model",
    }
    server, provider = make([step, step, {"content": "never"}])
    lookup = Tool(
        "lookup",
        lambda arguments, context: {"ok": True},
        "Look something up.",
        {"type": "object", "properties": {"q": {"type": "string"}}},
    )
    runtime = AgentRuntime(SqliteBarrierStore(tmp_path / "a.db"), own_store=True)
    try:
        agent = Agent.create(
            "a",
            provider=provider,
            runtime=runtime,
            tools=[lookup],
            budget=Budget(max_tokens=2000, prices={"served-model": (1.0, 2.0)}),
        )
        run = agent.stream("go") if stream else None
        with pytest.raises(BudgetExhaustedError) as caught:
            if run is not None:
                for _event in run:
                    pass
                run.result(20)
            else:
                agent.invoke("go", wait_seconds=20)
        assert (caught.value.limit, caught.value.spent, caught.value.allowed) == (
            "max_tokens",
            2000,
            2000,
        )
        assert len(server.requests) == 2  # the third call was refused, not sent
        if stream:
            assert server.requests[0].body["stream_options"] == {"include_usage": True}
        facts = runtime.store.load_record(caught.value.execution_id).context["llm_responses"]
        assert [(f["model"], f["usage"], f["cost_usd"]) for f in facts] == [
            (
                "served-model",
                {"prompt_tokens": 700, "completion_tokens": 300},
                pytest.approx((700 * 1.0 + 300 * 2.0) / 1e6),
            )
        ] * 2
    finally:
        runtime.close(timeout_seconds=5)
