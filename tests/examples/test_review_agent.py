"""The review agent example (docs/examples/review_agent.py) in one process on a real SQLite
file: the plan's tools as child executions, the conversation in the context, approval
(with an edited reply), rejection, a plan without tools, and the OpenAI-compatible
provider against the loopback stub server."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import review_agent as ra

from phronomy_fsm.agent import AnthropicProvider, OpenAICompatibleProvider
from phronomy_fsm.durable import DurableEventKind, DurableRuntime, ExecutionStatus
from phronomy_fsm.errors import ConfigurationError
from phronomy_fsm.store import SqliteBarrierStore
from phronomy_fsm.testing import StubLLMServer

from ..extras import modules_outside
from .conftest import EXAMPLES, Events, clean_env


def _approval(events: Events, task_id: str) -> Any:
    return events.wait_for(
        lambda e: (
            e.kind is DurableEventKind.WAITING
            and e.execution_id == task_id
            and e.record.state == "awaiting_approval"
        )
    ).record


def _run(
    tmp_path: Path, events: Events, request: str, decision: dict[str, Any], provider: Any = None
) -> tuple[Any, ra.AgentEffects, SqliteBarrierStore]:
    db = tmp_path / "agent.db"
    effects = ra.AgentEffects.beside(db, provider or ra.scripted_provider())
    store = SqliteBarrierStore(db)
    with DurableRuntime(store, machines=ra.agent_machines(effects), listeners=[events]) as runtime:
        handle = runtime.start("review_agent", ra.task_context("t-1", request), execution_id="t-1")
        waiting = _approval(events, "t-1")
        event = decision.pop("event")
        runtime.signal("t-1", event, decision, expected_revision=waiting.revision)
        result = handle.result(10)
    return result, effects, store


def test_an_approved_task_runs_its_tools_as_children_and_sends_once(
    tmp_path: Path, events: Events
) -> None:
    result, effects, store = _run(
        tmp_path, events, "Order A1 arrived broken.", {"event": "approve", "by": "ana"}
    )
    with store:
        tools = store.list_records(parent_execution_id="t-1")
        log = [(b.barrier, b.state) for b in store.barrier_log("t-1")]
    assert (result.status, result.state) == (ExecutionStatus.COMPLETED, "delivered")
    task = result.context
    assert [c["name"] for c in task.plan] == ["lookup_order", "open_ticket"]
    assert sorted((t.machine, t.status, t.state, t.labels["tool"]) for t in tools) == [
        ("review_tool", ExecutionStatus.COMPLETED, "done", "lookup_order"),
        ("review_tool", ExecutionStatus.COMPLETED, "done", "open_ticket"),
    ]
    assert log[:3] == [
        ("@start", "starting"),
        ("plan", "announcing_plan"),
        ("start_tools", "starting_tools"),
    ]
    assert log[-4:] == [
        ("review", "announcing_review"),
        ("@wait", "awaiting_approval"),
        ("send", "announcing_send"),
        ("@final", "delivered"),
    ]
    assert [m["role"] for m in task.messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "tool",
        "assistant",
    ]
    ticket = effects.tickets.entries()
    assert len(ticket) == 1 and ticket[0]["result"]["ticket_id"] in task.draft
    assert '"status": "delivered"' in task.draft
    sent = effects.sent.entries()
    assert [(s["text"], s["result"]) for s in sent] == [(task.draft, task.delivery)]
    calls = effects.llm_calls.entries()
    assert [c["effect"] for c in calls] == ["call_planner", "call_reviewer"]
    assert calls[1]["result"]["content"] == task.draft


def test_a_person_may_edit_the_reply_when_approving(tmp_path: Path, events: Events) -> None:
    result, effects, _ = _run(
        tmp_path,
        events,
        "Where is order B7?",
        {"event": "approve", "by": "ana", "text": "On its way!"},
    )
    assert result.context.draft == "On its way!"
    assert [s["text"] for s in effects.sent.entries()] == ["On its way!"]
    assert effects.tickets.entries() == []  # no "broken": no ticket


def test_a_rejected_reply_is_not_sent(tmp_path: Path, events: Events) -> None:
    result, effects, _ = _run(
        tmp_path, events, "Where is order B7?", {"event": "reject", "by": "bo"}
    )
    assert (result.status, result.state) == (ExecutionStatus.CANCELLED, "declined")
    assert effects.sent.entries() == []


def test_a_plan_without_tools_goes_straight_to_the_reviewer(tmp_path: Path, events: Events) -> None:
    result, _, store = _run(
        tmp_path, events, "Thanks, all good!", {"event": "approve", "by": "ana"}
    )
    with store:
        assert store.list_records(parent_execution_id="t-1") == []
    assert result.state == "delivered"
    assert result.context.plan == [] and result.context.tool_results == []
    assert result.context.draft == "Hello, here is what we found. Thank you for your message."


def test_a_tool_error_is_the_result_the_reviewer_sees(tmp_path: Path) -> None:
    effects = ra.AgentEffects(tmp_path, ra.scripted_provider())
    run = ra.ToolRun("t-1", "call-1", "lookup_order", '{"order_id": "Z9"}')
    with pytest.raises(LookupError, match="no order Z9"):
        effects.run_tool(run, None)
    with pytest.raises(ValueError, match="bad arguments for lookup_order"):
        effects.run_tool(ra.ToolRun("t-1", "c", "lookup_order", '{"id": 1}'), None)
    with pytest.raises(LookupError, match="unknown tool 'fly'"):
        effects.run_tool(ra.ToolRun("t-1", "c", "fly", "{}"), None)


def test_the_openai_compatible_provider_drives_the_same_flow(
    tmp_path: Path, events: Events
) -> None:
    script = [
        {"tool_calls": [{"name": "lookup_order", "arguments": {"order_id": "B7"}}]},
        {"content": "Your toaster is in transit."},
    ]
    with StubLLMServer(script=script) as server:
        provider = OpenAICompatibleProvider(base_url=server.base_url, model="stub-model")
        result, effects, _ = _run(
            tmp_path, events, "Where is order B7?", {"event": "approve", "by": "ana"}, provider
        )
        requests = list(server.requests)
    assert (result.state, result.context.draft) == ("delivered", "Your toaster is in transit.")
    planner, reviewer = (r.body for r in requests)
    assert [t["function"]["name"] for t in planner["tools"]] == ["lookup_order", "open_ticket"]
    assert "tools" not in reviewer
    assert [m["role"] for m in reviewer["messages"]] == ["system", "user", "assistant", "tool"]
    assert json.loads(reviewer["messages"][3]["content"])["status"] == "in transit"
    keys = [c["key"] for c in effects.llm_calls.entries()]
    assert [r.headers["idempotency-key"] for r in requests] == keys


def test_the_anthropic_provider_drives_the_same_flow(tmp_path: Path, events: Events) -> None:
    script = [
        {"tool_calls": [{"name": "lookup_order", "arguments": {"order_id": "B7"}}]},
        {"content": "Your toaster is in transit."},
    ]
    with StubLLMServer(script=script) as server:
        provider = AnthropicProvider(base_url=server.base_url, model="claude-stub")
        result, _effects, _ = _run(
            tmp_path, events, "Where is order B7?", {"event": "approve", "by": "ana"}, provider
        )
        requests = list(server.requests)
    assert (result.state, result.context.draft) == ("delivered", "Your toaster is in transit.")
    planner, reviewer = (r.body for r in requests)
    assert {r.path for r in requests} == {"/v1/messages"}
    assert [t["name"] for t in planner["tools"]] == ["lookup_order", "open_ticket"]
    assert reviewer["system"] and [m["role"] for m in reviewer["messages"]] == [
        "user",
        "assistant",
        "user",
    ]
    [result_block] = reviewer["messages"][2]["content"]
    assert result_block["type"] == "tool_result"
    assert json.loads(result_block["content"])["status"] == "in transit"


def test_the_provider_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("PHRONOMY_LLM_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    assert isinstance(ra.provider_from_env({}), type(ra.scripted_provider()))
    configured = ra.provider_from_env(
        {"PHRONOMY_LLM_MODEL": "m", "PHRONOMY_LLM_BASE_URL": "http://127.0.0.1:9/v1"}
    )
    assert isinstance(configured, OpenAICompatibleProvider)
    picked = ra.provider_from_env(
        {
            "PHRONOMY_ANTHROPIC_MODEL": "claude-x",
            "PHRONOMY_ANTHROPIC_BASE_URL": "http://127.0.0.1:9/v1",
            "PHRONOMY_LLM_MODEL": "m",
        }
    )
    assert isinstance(picked, AnthropicProvider) and picked.model == "claude-x"
    with pytest.raises(ConfigurationError):
        ra.provider_from_env(
            {"OPENAI_MODEL": "m", "PHRONOMY_LLM_BASE_URL": "https://llm.invalid/v1"}
        )


def test_the_example_runs_on_the_base_install(tmp_path: Path) -> None:
    """The example needs nothing but ``pip install phronomy-fsm`` (issue 21: it imported
    ``jsonschema``, which only the ``bench`` extra installs): run as a user runs it, with
    every module that install would not bring made unimportable, a task with tools is
    approved and sent, and arguments that do not match a tool's schema are refused."""
    blocked = modules_outside()
    assert "jsonschema" in blocked  # the environment has the bench extra: the check bites
    script = textwrap.dedent(
        """
        import json, runpy, sys
        for name in json.loads(sys.argv[1]):  # importing any of them raises ImportError
            sys.modules.setdefault(name, None)
        example = sys.argv[2]
        sys.argv = [example, *sys.argv[3:]]
        try:
            runpy.run_path(example, run_name="__main__")
        except SystemExit as exit:
            if exit.code:
                raise
        import review_agent as ra
        effects = ra.AgentEffects(ra.Path("."), ra.scripted_provider())
        try:
            effects.run_tool(ra.ToolRun("t-1", "c", "lookup_order", '{"id": 1}'), None)
        except ValueError as exc:
            print("refused:", exc)
        """
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            script,
            json.dumps(blocked),
            str(EXAMPLES / "review_agent.py"),
            *("run", "t-1", "--request", "Order A1 arrived broken.", "--person", "approve"),
            *("--db", "agent.db"),
        ],
        cwd=tmp_path,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert any(
        line.startswith("task t-1: completed in delivered (lookup_order ok; open_ticket ok; sent ")
        for line in lines
    ), proc.stdout
    assert lines[-1].startswith("refused: bad arguments for lookup_order:"), proc.stdout
