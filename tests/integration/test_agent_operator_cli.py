"""Operating agent executions through the real CLI (issue 14 items 4 and 7): what
``executions list|show`` say about an agent's execution — its input, answer or error,
the pending approval request and who it waits for — the subject of a recovery in the
agent's terms, and the journal a failing tool leaves.

Real SQLite files under tmp_path; agents run in this process through the Agent API
(or killed in a child process at a crash point through the demo's ``--crash-at``);
the CLI runs through click's CliRunner and as subprocesses. Refusals are checked to
write nothing by reading the store back.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from phronomy_fsm.agent import Agent, AgentRuntime, Reply, ScriptedProvider, Tool
from phronomy_fsm.cli import main
from phronomy_fsm.store import SqliteBarrierStore

ROOT = Path(__file__).resolve().parents[2]
APP = "phronomy_fsm.demo:create_app"
ENV = {
    **{k: v for k, v in os.environ.items() if k != "PHRONOMY_CRASH_AT"},
    "PYTHONPATH": str(ROOT),
}


def run(*args: str) -> Any:
    return CliRunner().invoke(main, list(args))


def run_process(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "phronomy_fsm.cli", *args],
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def snapshot(db: Path) -> dict[str, list[tuple[Any, ...]]]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return {
            table: conn.execute(f"SELECT * FROM {table} ORDER BY 1, 2").fetchall()
            for table in ("executions", "barriers", "signals", "execution_journal")
        }
    finally:
        conn.close()


def show_json(db: Path, execution_id: str) -> dict[str, Any]:
    result = run("executions", "show", execution_id, "--db", str(db), "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)  # type: ignore[no-any-return]


def explode(arguments: dict[str, Any], context: Any) -> dict[str, Any]:
    raise ValueError(f"boom: no stock for {arguments['sku']}")


EXPLODE = Tool(
    "explode",
    explode,
    "A tool that fails.",
    {"type": "object", "properties": {"sku": {"type": "string"}}, "required": ["sku"]},
)


def test_a_tool_that_raises_leaves_its_traceback_in_the_log_and_its_error_in_the_journal(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = tmp_path / "agents.db"
    provider = ScriptedProvider(
        [Reply(tool_calls=(("explode", {"sku": "T-1"}),)), Reply(content="Sorry, out of stock.")]
    )
    caplog.set_level(logging.WARNING, logger="phronomy_fsm.agent.tools")
    with AgentRuntime(SqliteBarrierStore(db), own_store=True) as runtime:
        agent = Agent.create("shop", runtime=runtime, provider=provider, tools=[EXPLODE])
        result = agent.invoke("Is T-1 in stock?", execution_id="ex-1", wait_seconds=30)
    assert (result.status.value, result.output) == ("completed", "Sorry, out of stock.")

    [logged] = [r for r in caplog.records if r.name == "phronomy_fsm.agent.tools"]
    assert "tool explode" in logged.getMessage() and "ex-1" in logged.getMessage()
    assert logged.exc_info is not None and logged.exc_info[0] is ValueError
    traceback_text = caplog.text
    assert "Traceback (most recent call last)" in traceback_text
    assert 'raise ValueError(f"boom: no stock for' in traceback_text  # the tool's own line

    with SqliteBarrierStore(db, read_only=True) as store:  # the journal, read back
        entries = store.journal_entries("ex-1")
    [tool_result] = [e.data for e in entries if e.kind == "tool_result"]
    assert tool_result["tool_name"] == "explode" and tool_result["status"] == "failed"
    assert tool_result["error"] == "ValueError: boom: no stock for T-1"
    [tool_message] = [e.data for e in entries if e.kind == "tool_message"]
    assert tool_message["message"]["content"] == "Error: ValueError: boom: no stock for T-1"

    shown = show_json(db, "ex-1")
    assert [j["data"]["error"] for j in shown["journal"] if j["kind"] == "tool_result"] == [
        "ValueError: boom: no stock for T-1"
    ]
    text = run("executions", "show", "ex-1", "--db", str(db)).stdout
    assert "tool_result  explode failed: ValueError: boom: no stock for T-1" in text
    [child] = shown["agent"]["tool_calls"]
    tool_call = show_json(db, child)
    assert tool_call["agent"]["error"] == "ValueError: boom: no stock for T-1"
    assert tool_call["agent"]["tool_name"] == "explode"
    assert tool_call["agent"]["arguments"] == {"sku": "T-1"}


def test_show_prints_an_agent_executions_input_answer_and_error(tmp_path: Path) -> None:
    db = tmp_path / "agents.db"
    provider = ScriptedProvider([Reply(content="It ships on Monday.\nTracking: TR-9")])
    failing = ScriptedProvider([Reply(content="x", error=RuntimeError("provider down"))])
    with AgentRuntime(SqliteBarrierStore(db), own_store=True) as runtime:
        agent = Agent.create("ok", runtime=runtime, provider=provider)
        agent.invoke("When does order 7 ship?", execution_id="ex-ok", wait_seconds=30)
        broken = Agent.create("broken", runtime=runtime, provider=failing)
        with pytest.raises(Exception, match="provider down"):
            broken.invoke("hello", execution_id="ex-bad", wait_seconds=30)

    text = run("executions", "show", "ex-ok", "--db", str(db)).stdout
    lines = text.splitlines()
    assert "agent: ok" in lines and "input: When does order 7 ship?" in lines
    assert "outcome: completed" in lines
    assert "output: It ships on Monday.\\nTracking: TR-9" in lines  # escaped, one line
    assert "conversation (2):" in lines
    assert "  assistant: It ships on Monday.\\nTracking: TR-9" in lines
    data = show_json(db, "ex-ok")
    assert data["agent"]["output"] == "It ships on Monday.\nTracking: TR-9"
    assert data["agent"]["input"] == "When does order 7 ship?"
    assert [m["role"] for m in data["agent"]["messages"]] == ["user", "assistant"]

    failed = run("executions", "show", "ex-bad", "--db", str(db)).stdout.splitlines()
    assert "status: failed" in failed and "input: hello" in failed
    assert any(
        line.startswith("error: LLMError: provider failed: RuntimeError: provider down")
        for line in failed
    ), failed


@pytest.fixture
def waiting_demo(tmp_path: Path) -> tuple[Path, str, str]:
    """The demo's execution waiting for the refund's approval (its process ended)."""
    db = tmp_path / "demo.db"
    out = run_process("demo", "--db", str(db))
    assert out.returncode == 0, out.stderr
    fields = dict(line.split(": ", 1) for line in out.stdout.splitlines() if ": " in line)
    return db, fields["execution_id"], fields["approval_request_id"]


def test_list_and_show_say_who_an_agent_execution_waits_for(
    waiting_demo: tuple[Path, str, str],
) -> None:
    db, execution, request = waiting_demo
    table = run("executions", "list", "--db", str(db)).stdout.splitlines()
    [row] = [line for line in table if line.startswith(execution)]
    assert row.split()[-1] == "approval"
    assert table[-1] == (
        f"1 wait(s) for a person's approval: phronomy-fsm executions show ID --db {db} prints "
        "the approve command(s); 1 held by no live worker: what you send waits in the inbox "
        "until phronomy-fsm recover --app MODULE:FACTORY (or a worker) claims it"
    )
    waiting = json.loads(
        run("executions", "list", "--db", str(db), "--json", "--waiting-for", "person").stdout
    )
    assert [(r["execution_id"], r["waits_for"], r["agent_id"]) for r in waiting] == [
        (execution, "approval", "support-demo")
    ]
    assert (
        json.loads(
            run("executions", "list", "--db", str(db), "--json", "--waiting-for", "operator").stdout
        )
        == []
    )

    text = run("executions", "show", execution, "--db", str(db)).stdout.splitlines()
    assert "status: waiting  <- waits for a person's approval" in text
    assert "input: Hi, order A1001 arrived broken. Can I get my $25.00 back?" in text
    assert f"approval request {request} (pending):" in text
    [item] = [line for line in text if "issue_refund {" in line and line.startswith("  tool-")]
    assert '{"amount": 25.0, "order_id": "A1001", "reason": "arrived broken"}' in item
    assert "(the tool requires approval)" in item
    assert f"    phronomy-fsm approve {execution} --request {request} --db {db}" in text
    assert f"    phronomy-fsm approve {execution} --request {request} --db {db} --reject" in text


def test_approve_with_app_runs_the_execution_here_and_cancel_works_on_agents(
    waiting_demo: tuple[Path, str, str],
) -> None:
    db, execution, request = waiting_demo
    approved = run_process(
        "approve", execution, "--request", request, "--db", str(db), "--app", APP, "--json"
    )
    assert approved.returncode == 0, approved.stderr
    data = json.loads(approved.stdout)
    assert data["signal"]["event"] == "approval_decided"
    assert data["execution"]["status"] == "completed"

    again = run_process("demo", "--db", str(db))  # a second execution, waiting again
    second = next(
        line.split(": ", 1)[1]
        for line in again.stdout.splitlines()
        if line.startswith("execution_id: ")
    )
    cancelled = run_process(
        "cancel", second, "--db", str(db), "--app", APP, "--reason", "customer called"
    )
    assert cancelled.returncode == 0, cancelled.stderr
    assert f"{second}  agent_session  cancelled in suspended" in cancelled.stdout
    assert show_json(db, second)["status"] == "cancelled"


def test_an_llm_call_left_unanswered_is_described_and_answered_in_the_agents_terms(
    tmp_path: Path,
) -> None:
    db = tmp_path / "demo.db"
    killed = run_process("demo", "--db", str(db), "--crash-at", "offload:call_llm:after")
    assert killed.returncode == -signal.SIGKILL
    recovered = run_process("recover", "--db", str(db), "--app", APP)
    assert recovered.returncode == 3, (recovered.stdout, recovered.stderr)
    out = recovered.stdout
    assert "1 wait(s) for an operator" in out
    [subject] = [line.strip() for line in out.splitlines() if "subject: LLM call" in line]
    call = subject.split()[3]
    assert subject == (
        f"subject: LLM call {call} of agent support-demo: it may have been sent and answered "
        f"(the provider got it with idempotency key {call}; attempt 1)"
    )
    [command] = [line.strip() for line in out.splitlines() if "--outcome succeeded" in line]
    words = shlex.split(command)
    assert words[words.index("--subject") + 1] == f"llm_call:{call}"
    assert words[-1] == '<the LLM answer as JSON: {"content": "..."}>'
    listed = json.loads(run("executions", "list", "--db", str(db), "--json").stdout)
    [parked] = [r for r in listed if r["needs_operator"]]
    assert parked["waits_for"] == "operator" and parked["machine"] == "agent_session"

    before = snapshot(db)
    for value, needle in (
        ('"just text"', "the result of an LLM call must be its answer"),
        ('{"content": 7}', "content must be a string"),
    ):
        words[-1] = value
        refused = run(*words[1:])
        assert refused.exit_code == 1 and needle in refused.stderr, refused.stderr
    wrong = [w if not w.startswith("llm_call:") else "tool_invocation:tool-x" for w in words]
    wrong[-1] = "{}"
    refused = run(*wrong[1:])
    assert refused.exit_code == 1
    assert f"waits for an answer about LLM call {call}, not tool call tool-x" in refused.stderr
    assert snapshot(db) == before

    # the provider's log says the first call answered with a lookup: the operator
    # supplies that answer, and the execution goes on without calling the LLM again
    words[-1] = json.dumps(
        {
            "content": None,
            "tool_calls": [{"name": "lookup_order", "arguments": {"order_id": "A1001"}}],
        }
    )
    answered = run_process(*words[1:])
    assert answered.returncode == 0, answered.stderr
    assert "agent_session  waiting in suspended" in answered.stdout
    assert "approval request" in answered.stdout and "phronomy-fsm approve" in answered.stdout


def test_approve_decides_item_by_item(waiting_demo: tuple[Path, str, str]) -> None:
    db, execution, request = waiting_demo
    shown = show_json(db, execution)
    [item] = shown["agent"]["approval"]["items"]
    revision = shown["revision"]
    before = snapshot(db)
    stale = run(
        "approve", execution, "--request", request, "--db", str(db),
        "--expected-revision", str(revision - 1),
    )  # fmt: skip
    assert stale.exit_code == 1 and f"at revision {revision}, not {revision - 1}" in stale.stderr
    assert snapshot(db) == before
    decided = run_process(
        "approve", execution, "--request", request, "--db", str(db),
        "--item", f"{item['tool_invocation_id']}=reject", "--by", "dana", "--app", APP,
        "--expected-revision", str(revision),
    )  # fmt: skip
    assert decided.returncode == 0, decided.stderr
    assert decided.stdout.startswith(f"decided request {request}: signal #")
    stored = show_json(db, execution)
    assert stored["status"] == "completed"  # the LLM saw the rejection and went on
    [audit] = [j["data"] for j in stored["journal"] if j["kind"] == "approval_decided"]
    assert audit["decisions"] == {item["tool_invocation_id"]: False} and audit["by"] == "dana"
    rejected = "The call to issue_refund was rejected and did not run."
    assert rejected in [m["text"] for m in stored["agent"]["messages"]]
    assert not db.with_name(db.stem + "-refunds.jsonl").exists()  # nothing was refunded


def test_a_parked_tool_call_names_its_agent_execution_as_waiting_for_it(
    waiting_demo: tuple[Path, str, str],
) -> None:
    """The agent's execution of a tool call parked for an operator waits for that
    child (not for ``recover``), and ``recover`` does not wait out its deadline for it:
    the agent's execution rests as long as its only child waits for an operator."""
    db, execution, request = waiting_demo
    assert run("approve", execution, "--request", request, "--db", str(db)).exit_code == 0
    killed = run_process(
        "demo", "--db", str(db), "--resume", "--crash-at", "offload:execute_tool:after"
    )
    assert killed.returncode == -signal.SIGKILL
    recovered = run_process("recover", "--db", str(db), "--app", APP, "--wait-seconds", "100")
    assert recovered.returncode == 3, (recovered.stdout, recovered.stderr)
    [headline] = [line for line in recovered.stdout.splitlines() if line.startswith("recovered ")]
    seconds = float(headline.split(" in ")[1].split(" s")[0])
    assert seconds < 100  # it returned because everything rests, not at its deadline

    listed = json.loads(run("executions", "list", "--db", str(db), "--json").stdout)
    [tool_call] = [r for r in listed if r["needs_operator"]]
    assert tool_call["machine"] == "tool_call" and tool_call["waits_for"] == "operator"
    [parent] = [r for r in listed if r["execution_id"] == execution]
    assert parent["status"] == "running"
    assert (parent["waits_for"], parent["parked_children"]) == (
        "child",
        [tool_call["execution_id"]],
    )
    text = run("executions", "list", "--db", str(db)).stdout.splitlines()
    assert (
        f"{execution} waits for its child {tool_call['execution_id']}, which waits for an "
        f"operator: phronomy-fsm executions show {tool_call['execution_id']} --db {db} "
        "prints the resolve command(s)"
    ) in text
    assert not any("running with no live worker" in line for line in text)


def test_a_streamed_token_cannot_be_signalled_by_hand(
    waiting_demo: tuple[Path, str, str],
) -> None:
    """``llm_stream_chunk`` is posted by the provider's stream in the running process:
    a hand-made one is refused and writes nothing."""
    db, execution, _request = waiting_demo
    before = snapshot(db)
    refused = run("signal", execution, "llm_stream_chunk", "--payload", "42", "--db", str(db))
    assert refused.exit_code == 1
    assert "'llm_stream_chunk' is not sent by hand" in refused.stderr, refused.stderr
    assert snapshot(db) == before


def test_an_app_for_other_agents_is_refused_before_anything_is_written(
    waiting_demo: tuple[Path, str, str],
) -> None:
    # the agent machines are the same; only the application's accept() tells: before,
    # the approval was recorded, nothing applied it, and the command exited 0
    db, execution, request = waiting_demo
    before = snapshot(db)
    refused = run_process(
        "approve", execution, "--request", request, "--db", str(db),
        "--app", "tests.integration.other_agent_app:create_app",
    )  # fmt: skip
    assert refused.returncode == 1, (refused.stdout, refused.stderr)
    assert f"does not run execution {execution} (agent_session; agent_id=" in refused.stderr
    assert "nothing was written" in refused.stderr
    assert snapshot(db) == before  # read back: no approval recorded
    approved = run_process(
        "approve", execution, "--request", request, "--db", str(db), "--app", APP
    )
    assert approved.returncode == 0, (approved.stdout, approved.stderr)
    assert show_json(db, execution)["status"] == "completed"
