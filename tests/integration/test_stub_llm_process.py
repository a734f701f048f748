"""The stub OpenAI-compatible server ships in the package (issue 14 item 10): ``python -m
phronomy_fsm.testing.stub_llm`` runs as a process of its own, prints its base URL when
it listens, answers the library's provider plainly and streamed, binds loopback only,
and ends on SIGTERM; killed, it is gone."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from phronomy_fsm.agent import AnthropicProvider, LLMRequest, Message, OpenAICompatibleProvider

MODULE = [sys.executable, "-m", "phronomy_fsm.testing.stub_llm"]


@pytest.fixture
def stub_process(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], str]]:
    script = tmp_path / "steps.json"
    script.write_text(
        json.dumps(
            [
                {"content": "Plain answer.", "usage": {"prompt_tokens": 7, "completion_tokens": 2}},
                {"content": "Streamed in pieces."},
            ]
        )
    )
    proc = subprocess.Popen(
        [*MODULE, "--script", str(script), "--model", "stub-7"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()  # printed once it listens
        yield proc, url
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)


def _request(call_id: str, *, stream: bool) -> LLMRequest:
    return LLMRequest(call_id, (Message("user", "Hello?"),), (), stream)


def test_the_provider_completes_against_the_stub_process(
    stub_process: tuple[subprocess.Popen[str], str],
) -> None:
    proc, url = stub_process
    assert url.startswith("http://127.0.0.1:") and url.endswith("/v1")
    tokens: list[str] = []
    with OpenAICompatibleProvider(base_url=url, model="m", timeout_seconds=10.0) as provider:
        plain = provider.complete(_request("llm-1", stream=False))
        streamed = provider.complete(_request("llm-2", stream=True), on_token=tokens.append)
    assert (plain.content, plain.model, plain.finish_reason) == ("Plain answer.", "m", "stop")
    assert (plain.usage.prompt_tokens, plain.usage.completion_tokens) == (7, 2)
    assert streamed.content == "Streamed in pieces."
    assert tokens == ["Streamed ", "in ", "pieces."]
    proc.kill()
    assert proc.wait(10) == -signal.SIGKILL


def test_the_anthropic_provider_completes_against_the_stub_process(
    stub_process: tuple[subprocess.Popen[str], str],
) -> None:
    """The same script, served as Anthropic Messages on ``/v1/messages``."""
    _proc, url = stub_process
    tokens: list[str] = []
    with AnthropicProvider(base_url=url, model="m", timeout_seconds=10.0) as provider:
        plain = provider.complete(_request("llm-1", stream=False))
        streamed = provider.complete(_request("llm-2", stream=True), on_token=tokens.append)
    assert (plain.content, plain.model, plain.finish_reason) == ("Plain answer.", "m", "end_turn")
    assert (plain.usage.prompt_tokens, plain.usage.completion_tokens) == (7, 2)
    assert (streamed.content, tokens) == ("Streamed in pieces.", ["Streamed ", "in ", "pieces."])


def test_sigterm_ends_the_stub_with_status_0(
    stub_process: tuple[subprocess.Popen[str], str],
) -> None:
    proc, url = stub_process
    assert url.startswith("http://127.0.0.1:")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(10) == 0


@pytest.mark.parametrize("host", ["0.0.0.0", "192.0.2.1", "example.com"])
def test_only_loopback_hosts_are_accepted(host: str) -> None:
    proc = subprocess.run(
        [*MODULE, "--host", host], capture_output=True, text=True, timeout=30, check=False
    )
    assert proc.returncode == 2
    assert "only loopback addresses" in proc.stderr
    assert proc.stdout == ""


def test_help_describes_the_options() -> None:
    proc = subprocess.run(
        [*MODULE, "--help"], capture_output=True, text=True, timeout=30, check=True
    )
    for option in ("--host", "--port", "--script", "--model"):
        assert option in proc.stdout
