"""Budgets of agent executions (``docs/agent.md``, "Budgets"): limits on tokens, LLM
calls, tool calls and cost, counted from what the execution durably recorded; the
``fail`` policy, the ``wait`` policy with an extension, and refused extensions.

Real SQLite files and the real agent runtime; the provider is scripted.
"""

from __future__ import annotations

from typing import Any

import pytest

from phronomy_fsm.agent import (
    Agent,
    AgentRuntime,
    Budget,
    BudgetExhausted,
    ModelPrice,
    Reply,
    ScriptedProvider,
    Usage,
)
from phronomy_fsm.agent.budget import refusal, spent_of
from phronomy_fsm.durable.records import ExecutionStatus
from phronomy_fsm.errors import (
    BudgetError,
    BudgetExhaustedError,
    ConfigurationError,
    ExecutionDetachedError,
)

from .conftest import Events, barrier_names, make_tool


def _looping_provider(usage: Usage | None = None) -> ScriptedProvider:
    """An LLM that asks for the lookup tool at every turn (never answers); 120 tokens
    a call unless ``usage`` says otherwise."""
    step = Reply(tool_calls=(("lookup", {"q": "x"}),), usage=usage or Usage(100, 20))
    return ScriptedProvider([step])


def test_fail_policy_ends_failed_naming_the_limit_and_makes_no_further_call(
    store: Any, runtime: Any
) -> None:
    provider = _looping_provider()
    log: list[Any] = []
    agent = Agent.create(
        "a",
        provider=provider,
        runtime=runtime,
        tools=[make_tool("lookup", log=log)],
        budget=Budget(max_llm_calls=2),
        on_budget_exhausted="fail",
    )
    with pytest.raises(BudgetExhaustedError) as caught:
        agent.invoke("go", wait_seconds=10)
    error = caught.value
    assert (error.limit, error.spent, error.allowed) == ("max_llm_calls", 2, 2)
    assert "max_llm_calls exhausted: spent 2 of 2" in str(error)
    # two calls made, the third refused before it was announced
    assert len(provider.requests) == 2 and len(log) == 2
    record = store.load_record(error.execution_id)
    assert record.status is ExecutionStatus.FAILED
    assert record.context["error_type"] == "BudgetExhaustedError"
    assert barrier_names(store, error.execution_id).count("provider_dispatch") == 1
    recorded = [
        e for e in store.journal_entries(error.execution_id) if e.kind == "llm_call_recorded"
    ]
    assert [e.data["usage"] for e in recorded] == [
        {"prompt_tokens": 100, "completion_tokens": 20}
    ] * 2


def test_token_limit_refuses_the_call_once_spent_reaches_it(store: Any, runtime: Any) -> None:
    provider = _looping_provider(Usage(100, 20))  # 120 tokens a call
    agent = Agent.create(
        "a",
        provider=provider,
        runtime=runtime,
        tools=[make_tool("lookup")],
        budget=Budget(max_tokens=240),
    )
    with pytest.raises(BudgetExhaustedError) as caught:
        agent.invoke("go", wait_seconds=10)
    # after 120 a call is still allowed (below 240); after 240 none is
    assert (caught.value.limit, caught.value.spent, caught.value.allowed) == (
        "max_tokens",
        240,
        240,
    )
    assert len(provider.requests) == 2


def test_cost_is_priced_per_model_from_the_table(store: Any, runtime: Any) -> None:
    provider = ScriptedProvider(
        [Reply(tool_calls=(("lookup", {"q": "x"}),), usage=Usage(1_000_000, 500_000))],
        model="m-large",
    )
    agent = Agent.create(
        "a",
        provider=provider,
        runtime=runtime,
        tools=[make_tool("lookup")],
        budget=Budget(
            max_cost_usd=5.0,
            prices={"m-large": ModelPrice(2.0, 4.0), "*": (100.0, 100.0)},
        ),
    )
    with pytest.raises(BudgetExhaustedError) as caught:
        agent.invoke("go", wait_seconds=10)
    # each call: 1M input × $2/M + 0.5M output × $4/M = $4; after one call $4 < $5, after
    # two $8 ≥ $5 (the "*" price is not used for a model the table names)
    assert caught.value.limit == "max_cost_usd"
    assert caught.value.spent == pytest.approx(8.0) and caught.value.allowed == 5.0
    assert len(provider.requests) == 2
    recorded = [
        e.data
        for e in store.journal_entries(caught.value.execution_id)
        if e.kind == "llm_call_recorded"
    ]
    assert [r["cost_usd"] for r in recorded] == [pytest.approx(4.0)] * 2
    assert spent_of(store.load_record(caught.value.execution_id).context).cost_usd == pytest.approx(
        8.0
    )


def test_a_model_with_no_price_fails_even_under_wait(store: Any, runtime: Any) -> None:
    agent = Agent.create(
        "a",
        provider=_looping_provider(),
        runtime=runtime,
        tools=[make_tool("lookup")],
        budget=Budget(max_cost_usd=1.0, prices={"other": (1.0, 1.0)}),
        on_budget_exhausted="wait",
    )
    with pytest.raises(Exception, match="model 'scripted' has no price") as caught:
        agent.invoke("go", wait_seconds=10)
    assert getattr(caught.value, "error_type", None) == "BudgetError"


def test_wait_then_extend_runs_on_and_counts_tool_calls(
    store: Any, runtime: Any, events: Events
) -> None:
    log: list[Any] = []
    provider = ScriptedProvider(
        [
            Reply(tool_calls=(("lookup", {"q": "1"}),)),
            Reply(tool_calls=(("lookup", {"q": "2"}), ("lookup", {"q": "3"}))),
            Reply(content="done"),
        ]
    )
    agent = Agent.create(
        "a",
        provider=provider,
        runtime=runtime,
        tools=[make_tool("lookup", log=log)],
        budget=Budget(max_tool_calls=2),
        on_budget_exhausted="wait",
        on_event=events,
    )
    task = agent.invoke_async("go")
    event = events.wait_for("budget_exhausted")
    assert isinstance(event, BudgetExhausted)
    # one call started; the batch of two would make three > 2: refused as a whole
    assert (event.limit, event.spent, event.allowed, event.call) == (
        "max_tool_calls",
        1,
        2,
        "tool_calls",
    )
    stored = store.load_record(event.execution_id)
    assert stored.status is ExecutionStatus.WAITING and stored.state == "budget_exhausted"
    assert len(log) == 1 and not task.done()
    # not enough: 2 → 2 would still refuse the batch; nothing written
    with pytest.raises(BudgetError) as refused:
        agent.extend_budget_async(event.execution_id, max_tool_calls=2)
    assert refused.value.reason == "not_enough"
    result = agent.extend_budget(
        event.execution_id, request_id=event.request_id, max_tool_calls=3, wait_seconds=10
    )
    assert result.output == "done" and task.result(5) == result and len(log) == 3
    final = store.load_record(result.execution_id)
    assert final.context["budget"]["limits"]["max_tool_calls"] == 3
    assert final.context["tool_calls_started"] == 3
    kinds = [e.kind for e in store.journal_entries(result.execution_id)]
    # where they happened: after the second answer (whose tool calls were refused)
    at = kinds.index("budget_exhausted")
    assert kinds[at - 2 : at + 2] == [
        "llm_call_recorded",
        "assistant_message",
        "budget_exhausted",
        "budget_extended",
    ]
    streamed = [e.kind for e in agent.events(result.execution_id, wait_seconds=10)]
    assert streamed == kinds  # the event stream of the execution says the same
    assert barrier_names(store, result.execution_id).count("@wait") == 1


def test_bad_extensions_are_refused_and_write_nothing(
    store: Any, runtime: Any, events: Events
) -> None:
    agent = Agent.create(
        "a",
        provider=_looping_provider(),
        runtime=runtime,
        tools=[make_tool("lookup")],
        budget=Budget(max_llm_calls=1, max_tokens=10_000),
        on_budget_exhausted="wait",
        on_event=events,
    )
    agent.invoke_async("go")
    event = events.wait_for("budget_exhausted")
    eid = event.execution_id
    before = store.load_record(eid)
    cases: list[tuple[dict[str, Any], str]] = [
        ({}, "bad_arguments"),
        ({"max_llm_calls": 0}, "bad_arguments"),
        ({"max_tokens": 5000}, "lowers_limit"),
        ({"max_tokens": 20_000}, "not_enough"),  # the refused limit is max_llm_calls
        ({"max_llm_calls": 2, "request_id": "other"}, "other_request"),
    ]
    for kwargs, reason in cases:
        with pytest.raises(BudgetError) as caught:
            agent.extend_budget_async(eid, **kwargs)
        assert caught.value.reason == reason, kwargs
    with pytest.raises(TypeError):
        agent.extend_budget_async(eid, max_pages=3)  # type: ignore[call-arg]
    after = store.load_record(eid)
    assert (after.revision, after.state, after.context) == (
        before.revision,
        before.state,
        before.context,
    )
    assert [s for s in store.list_signals(eid) if s.event == "budget_extended"] == []
    assert agent.cancel(eid)


def test_cancel_still_works_while_waiting_for_a_budget(
    store: Any, runtime: Any, events: Events
) -> None:
    agent = Agent.create(
        "a",
        provider=_looping_provider(),
        runtime=runtime,
        tools=[make_tool("lookup")],
        budget=Budget(max_llm_calls=1),
        on_budget_exhausted="wait",
        on_event=events,
    )
    task = agent.invoke_async("go")
    event = events.wait_for("budget_exhausted")
    assert agent.cancel(event.execution_id)
    with pytest.raises(BaseException, match="cancel"):
        task.result(10)
    assert store.load_record(event.execution_id).status is ExecutionStatus.CANCELLED


def test_closing_the_runtime_while_it_waits_names_the_extend_budget_command(
    store: Any, events: Events
) -> None:
    runtime = AgentRuntime(store, max_workers=4)
    agent = Agent.create(
        "a",
        provider=_looping_provider(),
        runtime=runtime,
        tools=[make_tool("lookup")],
        budget=Budget(max_llm_calls=1),
        on_budget_exhausted="wait",
        on_event=events,
    )
    task = agent.invoke_async("go")
    event = events.wait_for("budget_exhausted")
    runtime.close(timeout_seconds=5)
    with pytest.raises(ExecutionDetachedError) as caught:
        task.result(10)
    assert "it waits for a budget extension (max_llm_calls: spent 1 of 1)" in str(caught.value)
    assert f"phronomy-fsm extend-budget {event.execution_id} --db " in str(caught.value)
    assert "--max-llm-calls '<new limit>'" in str(caught.value)


def test_budget_options_are_checked() -> None:
    provider = _looping_provider()
    for budget, match in (
        (Budget(max_tokens=0), "max_tokens must be an int"),
        (Budget(max_cost_usd=1.0), "max_cost_usd needs prices"),
        (Budget(max_cost_usd=1.0, prices={"m": (1.0,)}), "the price of 'm'"),
        ({"max_tokens": 3}, "budget must be a Budget"),
    ):
        with pytest.raises(ConfigurationError, match=match):
            Agent.create("a", provider=provider, budget=budget, store=":memory:")
    with pytest.raises(ConfigurationError, match="on_budget_exhausted"):
        Agent.create("a", provider=provider, on_budget_exhausted="pause", store=":memory:")


def test_refusal_rules_on_a_stored_context() -> None:
    ctx: dict[str, Any] = {
        "budget": {"limits": {"max_tokens": 100, "max_tool_calls": 2}, "prices": {}},
        "llm_responses": [{"usage": {"prompt_tokens": 60, "completion_tokens": 39}}],
        "llm_calls": 1,
        "tool_calls_started": 1,
        "tools": [{"status": "authorized"}],
    }
    assert refusal(ctx) is None  # 1 started + 1 = 2, not more than 2
    ctx["tools"] = [{"status": "authorized"}] * 2
    assert refusal(ctx).limit == "max_tool_calls"  # type: ignore[union-attr]
    ctx["tools"] = []
    assert refusal(ctx) is None  # 99 tokens < 100: the next call may start
    ctx["llm_responses"][0]["usage"]["completion_tokens"] = 40
    assert refusal(ctx).limit == "max_tokens"  # type: ignore[union-attr]
