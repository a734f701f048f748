"""Structured final output (docs/agent.md, "Structured output"): an agent's
``output_type`` is told to the LLM, its answer parsed and checked on a worker, an
invalid answer re-asked through the ``output_retry`` barrier (a durable LLM call like
any other) up to ``output_retries`` times, then the execution fails with
OutputValidationError; ``AgentResult.parsed`` holds the converted value."""

from __future__ import annotations

import json
from typing import Any, TypedDict

import attrs
import pydantic
import pytest

from phronomy_fsm.agent import Agent, AgentRuntime, Reply, ScriptedProvider
from phronomy_fsm.agent.providers import OUTPUT_RETRY_PREFIX
from phronomy_fsm.errors import (
    ConfigurationError,
    OutputValidationError,
    TypeSchemaError,
)
from phronomy_fsm.store import SqliteBarrierStore

from .conftest import (
    StrictProvider,
    assert_stored_conversations_are_legal,
    barrier_names,
    journal_kinds,
)


@attrs.frozen
class Verdict:
    label: str
    confidence: float
    tags: list[str] = attrs.Factory(list)


class Summary(pydantic.BaseModel):
    title: str
    points: list[str]


class Pair(TypedDict):
    left: int
    right: int


VERDICT_SCHEMA = {
    "type": "object",
    "properties": {
        "label": {"type": "string"},
        "confidence": {"type": "number"},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["label", "confidence"],
    "additionalProperties": False,
}


def test_an_invalid_first_answer_is_re_asked_and_the_second_is_parsed(
    store: Any, runtime: Any
) -> None:
    provider = StrictProvider(
        [
            Reply(content="It looks like spam to me."),  # not JSON
            Reply(content='```json\n{"label": "spam", "confidence": 0.9}\n```'),
        ]
    )
    agent = Agent.create(
        "triage",
        provider=provider,
        runtime=runtime,
        system_prompt="You triage mail.",
        output_type=Verdict,
    )
    result = agent.invoke("Win a prize!", execution_id="ex-1", wait_seconds=30)
    assert result.status.value == "completed"
    assert result.parsed == Verdict(label="spam", confidence=0.9, tags=[])
    assert result.output == '```json\n{"label": "spam", "confidence": 0.9}\n```'
    # the schema is told in the one system message, after the system prompt
    first, second = provider.requests
    system = first.messages[0]
    assert system.role == "system"
    assert system.content is not None and system.content.startswith("You triage mail.\n\n")
    assert system.content.endswith(json.dumps(VERDICT_SCHEMA, sort_keys=True))
    # the re-ask is a new LLM call that sees the refused answer and why it was refused
    assert [m.role for m in second.messages] == ["system", "user", "assistant", "user"]
    retry = second.messages[-1].content or ""
    assert retry.startswith(OUTPUT_RETRY_PREFIX + "the answer is not JSON")
    assert second.llm_call_id != first.llm_call_id
    # durable like any call: announced by its own barrier before it was made
    assert barrier_names(store, "ex-1") == [
        "@start",
        "initial_preparation",
        "output_retry",
        "@final",
    ]
    record = store.load_record("ex-1")
    assert record.context["output_retries"] == 1
    assert record.context["parsed_output"] == {"label": "spam", "confidence": 0.9}
    kinds = journal_kinds(store, "ex-1")
    # the refusal is journaled where it happened: right before the re-ask
    at = kinds.index("output_rejected")
    assert kinds[at - 1 : at + 2] == ["assistant_message", "output_rejected", "user_message"]
    [rejected] = [e for e in store.journal_entries("ex-1") if e.kind == "output_rejected"]
    assert rejected.data["attempt"] == 1
    assert rejected.data["error"].startswith("the answer is not JSON")
    assert_stored_conversations_are_legal(store, "triage")


def test_answers_that_never_validate_exhaust_the_retries_and_fail(store: Any, runtime: Any) -> None:
    provider = ScriptedProvider(
        [
            Reply(content='{"label": "spam"}'),  # confidence missing
            Reply(content='{"label": "spam", "confidence": "high"}'),  # wrong type
            Reply(content='{"label": 3, "confidence": 1}'),  # wrong type again
        ]
    )
    agent = Agent.create(
        "stubborn", provider=provider, runtime=runtime, output_type=Verdict, output_retries=2
    )
    with pytest.raises(OutputValidationError) as info:
        agent.invoke("classify", execution_id="ex-2", wait_seconds=30)
    error = info.value
    assert error.attempts == 3  # type: ignore[attr-defined]
    assert "after 3 answer(s) (output_retries=2)" in str(error)
    assert 'label: 3 is not of type "string"' in str(error)
    assert len(provider.requests) == 3
    assert barrier_names(store, "ex-2") == [
        "@start",
        "initial_preparation",
        "output_retry",
        "output_retry",
        "@final",
    ]
    record = store.load_record("ex-2")
    assert (record.status.value, record.state) == ("failed", "failed")
    assert record.context["error_type"] == "OutputValidationError"
    # a caller that reads the outcome back from the store gets the same typed error
    runtime.close(timeout_seconds=5)
    with AgentRuntime(SqliteBarrierStore(store.path), own_store=True) as again:
        loaded = Agent.load("stubborn", provider=provider, runtime=again, output_type=Verdict)
        with pytest.raises(OutputValidationError, match="label: 3") as read_back:
            loaded.wait("ex-2", wait_seconds=10)
        assert read_back.value.attempts == 3  # type: ignore[attr-defined]


def test_no_retries_fails_at_the_first_invalid_answer_and_max_iterations_bounds_them(
    store: Any, runtime: Any
) -> None:
    never = Agent.create(
        "never",
        provider=ScriptedProvider([Reply(content="[1, 2]")]),
        runtime=runtime,
        output_type=Pair,
        output_retries=0,
    )
    with pytest.raises(OutputValidationError, match=r"\(root\).*is not of type \"object\""):
        never.invoke("pair", wait_seconds=30)
    bounded = Agent.create(
        "bounded",
        provider=ScriptedProvider([Reply(content="nope")]),
        runtime=runtime,
        output_type=Pair,
        output_retries=5,
        max_iterations=2,
    )
    with pytest.raises(OutputValidationError, match="max_iterations reached"):
        bounded.invoke("pair", execution_id="ex-3", wait_seconds=30)
    assert barrier_names(store, "ex-3").count("output_retry") == 1


def test_pydantic_and_builtin_output_types_are_parsed(store: Any, runtime: Any) -> None:
    summary = Agent.create(
        "summary",
        provider=ScriptedProvider([Reply(content='{"title": "T", "points": ["a", "b"]}')]),
        runtime=runtime,
        output_type=Summary,
    )
    assert summary.invoke("sum up", wait_seconds=30).parsed == Summary(title="T", points=["a", "b"])
    numbers = Agent.create(
        "numbers",
        provider=ScriptedProvider([Reply(content="[3, 1, 2]")]),
        runtime=runtime,
        output_type=list[int],
    )
    assert numbers.invoke("count", wait_seconds=30).parsed == [3, 1, 2]
    plain = Agent.create("plain", provider=ScriptedProvider([Reply(content="hi")]), runtime=runtime)
    assert plain.invoke("hello", wait_seconds=30).parsed is None


def test_bad_output_options_are_refused_before_anything_is_written(
    store: Any, runtime: Any
) -> None:
    provider = ScriptedProvider([Reply(content="{}")])
    with pytest.raises(TypeSchemaError, match="agent 'x', output_type"):
        Agent.create("x", provider=provider, runtime=runtime, output_type=object)
    with pytest.raises(ConfigurationError, match="output_retries must be an int"):
        Agent.create("x", provider=provider, runtime=runtime, output_type=Pair, output_retries=-1)
    assert store.list_records(machine="agent_session") == []
