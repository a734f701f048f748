"""A huge tool result is capped by the agent's ``max_tool_result_bytes`` (docs/agent.md,
"Tools"): the LLM and the journal get the
first bytes of its text and a note, the journal's ``tool_result`` record keeps the
original size, and nothing of the size of the whole result is journaled or sent.

Real components: a SQLite file store, the runtime's loop and worker threads.
"""

from __future__ import annotations

from typing import Any

import pytest

from phronomy_fsm.agent import Agent, Reply, ScriptedProvider, Tool
from phronomy_fsm.agent.tools import DEFAULT_MAX_TOOL_RESULT_BYTES
from phronomy_fsm.errors import ConfigurationError

BIG = 3_000_000  # bytes of text


def _agent(store: Any, runtime: Any, fn: Any, **options: Any) -> tuple[Agent, ScriptedProvider]:
    provider = ScriptedProvider([Reply(tool_calls=(("dump", {}),)), Reply(content="ok")])
    agent = Agent.create(
        "a", runtime=runtime, provider=provider, tools=[Tool("dump", fn)], **options
    )
    return agent, provider


def _journal(store: Any) -> list[Any]:
    return [
        e
        for r in store.list_records(machine="agent_session")
        for e in store.journal_entries(r.execution_id)
    ]


def _journal_bytes(store: Any) -> int:
    return sum(len(repr(e.data)) for e in _journal(store))


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("é" * (BIG // 2), id="text"),
        pytest.param({"rows": ["x" * 1000] * 3000}, id="json"),
    ],
)
def test_a_huge_result_is_capped_with_its_original_size_recorded(
    store: Any, runtime: Any, value: Any
) -> None:
    agent, provider = _agent(store, runtime, lambda args, ctx: value)
    assert agent.invoke("dump it", wait_seconds=30).status.value == "completed"
    cap = DEFAULT_MAX_TOOL_RESULT_BYTES
    sent = [m.content for m in provider.requests[1].messages if m.role == "tool"]
    assert len(sent) == 1 and len(sent[0].encode()) < cap + 300
    assert "truncated" in sent[0] and str(cap) in sent[0]
    journal = _journal(store)
    result = next(e for e in journal if e.kind == "tool_result")
    assert result.data["original_bytes"] >= BIG
    message = next(e for e in journal if e.kind == "tool_message")
    assert message.data["message"]["content"] == sent[0]
    assert _journal_bytes(store) < 4 * cap  # not twice the whole result


def test_a_result_under_the_cap_is_untouched(store: Any, runtime: Any) -> None:
    agent, provider = _agent(store, runtime, lambda args, ctx: {"ok": True})
    agent.invoke("dump it", wait_seconds=10)
    sent = [m.content for m in provider.requests[1].messages if m.role == "tool"]
    assert sent == ['{"ok": true}']
    result = next(e for e in _journal(store) if e.kind == "tool_result")
    assert result.data["result"] == {"ok": True} and "original_bytes" not in result.data


def test_the_cap_is_per_agent_and_can_be_lifted(store: Any, runtime: Any) -> None:
    agent, provider = _agent(
        store, runtime, lambda args, ctx: "y" * 5000, max_tool_result_bytes=1000
    )
    agent.invoke("dump it", wait_seconds=10)
    sent = next(m.content for m in provider.requests[1].messages if m.role == "tool")
    assert sent.startswith("y" * 1000) and not sent.startswith("y" * 1001)
    agent.close()
    lifted = Agent.load(
        "a",
        runtime=runtime,
        provider=provider,
        tools=[Tool("dump", lambda args, ctx: "z" * 5000)],
        max_tool_result_bytes=None,
    )
    lifted.invoke("again", wait_seconds=10)
    assert [m.content for m in provider.requests[-1].messages if m.role == "tool"][-1] == "z" * 5000


def test_a_huge_tool_error_is_capped_too(store: Any, runtime: Any) -> None:
    def fail(args: Any, ctx: Any) -> Any:
        raise RuntimeError("e" * BIG)

    agent, provider = _agent(store, runtime, fail, max_tool_result_bytes=2000)
    agent.invoke("dump it", wait_seconds=30)
    sent = next(m.content for m in provider.requests[1].messages if m.role == "tool")
    assert sent.startswith("Error: RuntimeError: eee") and len(sent) < 2300
    assert _journal_bytes(store) < 20_000


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "big"])
def test_a_bad_cap_is_a_configuration_error(store: Any, runtime: Any, bad: Any) -> None:
    with pytest.raises(ConfigurationError, match="max_tool_result_bytes"):
        _agent(store, runtime, lambda args, ctx: 1, max_tool_result_bytes=bad)
