"""The store CLI through click's CliRunner (issue 4 items 9-10): JSON keys, exit codes,
stderr diagnostics, no tracebacks, and read commands that never create files."""

from __future__ import annotations

import json
import sqlite3
import threading
from datetime import UTC, datetime, timedelta

import pytest
from click.testing import CliRunner

from phronomy_fsm.agent import Agent, AgentRuntime, ApprovalRequired, Reply, ScriptedProvider, Tool
from phronomy_fsm.cli import main
from phronomy_fsm.store import SqliteBarrierStore


@pytest.fixture
def db(tmp_path):
    """A store with ex-done (agent a1, completed 30 days ago) and ex-live (agent a2,
    waiting for a person's approval of its refund)."""
    path = tmp_path / "store.db"
    waiting = threading.Event()
    refund = Tool("refund", lambda args, ctx: {"ok": True}, "Refund.", requires_approval=True)
    with AgentRuntime(SqliteBarrierStore(path), own_store=True) as runtime:
        done = Agent.create("a1", runtime=runtime, provider=ScriptedProvider([Reply("done")]))
        done.invoke("hello", execution_id="ex-done", wait_seconds=30)
        live = Agent.create(
            "a2",
            runtime=runtime,
            provider=ScriptedProvider([Reply(tool_calls=(("refund", {}),))]),
            tools=[refund],
            on_event=lambda e: waiting.set() if isinstance(e, ApprovalRequired) else None,
        )
        live.invoke_async("refund me", execution_id="ex-live")
        assert waiting.wait(30)
    month_ago = int((datetime.now(UTC) - timedelta(days=30)).timestamp() * 1000)
    conn = sqlite3.connect(path)
    with conn:  # as if it finished a month ago
        conn.execute(
            "UPDATE executions SET created_epoch_ms = ?, updated_epoch_ms = ?"
            " WHERE execution_id = 'ex-done'",
            (month_ago, month_ago),
        )
    conn.close()
    return str(path)


def run(*args: str):
    return CliRunner().invoke(main, list(args))


def test_list_json_and_filters(db):
    result = run("executions", "list", "--db", db, "--json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [(r["execution_id"], r["status"], r["waits_for"], r["agent_id"]) for r in rows] == [
        ("ex-done", "completed", None, "a1"),
        ("ex-live", "waiting", "approval", "a2"),
    ]
    only = json.loads(
        run("executions", "list", "--db", db, "--json", "--status", "completed").stdout
    )
    assert [r["execution_id"] for r in only] == ["ex-done"]
    by_agent = json.loads(run("executions", "list", "--db", db, "--json", "--agent", "a2").stdout)
    assert [r["execution_id"] for r in by_agent] == ["ex-live"]


def test_list_table(db):
    result = run("executions", "list", "--db", db)
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    header = ["EXECUTION", "MACHINE", "STATUS", "STATE", "REV", "UPDATED", "KEY", "WAITS", "FOR"]
    assert lines[0].split() == header
    row = lines[1].split()
    assert row[:4] == ["ex-done", "agent_session", "completed", "completed"]
    assert row[6:] == ["a1"]  # the agent id is the exclusive key; nobody is awaited
    assert lines[2].split()[:4] + lines[2].split()[6:] == [
        "ex-live",
        "agent_session",
        "waiting",
        "suspended",
        "a2",
        "approval",
    ]
    assert lines[3] == "1-2 of 2 execution(s); by status: completed 1, waiting 1"
    assert lines[4].startswith("1 wait(s) for a person's approval: phronomy-fsm executions show")


def test_show_json_has_the_required_keys(db):
    result = run("executions", "show", "ex-done", "--db", db, "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert {
        "execution_id",
        "machine",
        "status",
        "state",
        "revision",
        "waits_for",
        "agent",
        "barriers",
        "signals",
        "journal",
        "execution",
    } <= set(data)
    assert (data["execution_id"], data["agent"]["agent_id"], data["status"]) == (
        "ex-done",
        "a1",
        "completed",
    )
    assert [b["barrier"] for b in data["barriers"]] == ["@start", "initial_preparation", "@final"]
    assert [j["kind"] for j in data["journal"]][-2:] == ["final_output", "execution_completed"]
    assert data["execution"]["execution_id"] == "ex-done"


def test_show_text(db):
    result = run("executions", "show", "ex-done", "--db", db)
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert "status: completed" in lines and "output: done" in lines
    assert "barriers (3):" in lines and any(line.startswith("journal (") for line in lines)


def test_unknown_execution_is_exit_1_on_stderr(db):
    result = run("executions", "show", "nope", "--db", db)
    assert result.exit_code == 1
    assert result.stderr.startswith("error: no execution nope") and result.stdout == ""
    assert "Traceback" not in result.output


def test_missing_db_is_exit_1_and_not_created(tmp_path):
    missing = tmp_path / "missing.db"
    for args in (
        ["executions", "list"],
        ["executions", "show", "x"],
        ["store", "compact", "--older-than-days", "1"],
    ):
        result = run(*args, "--db", str(missing))
        assert result.exit_code == 1, args
        assert "does not exist" in result.stderr
        assert not missing.exists()


@pytest.mark.parametrize("content", [b"garbage, not sqlite\n", b""])
def test_bad_file_is_exit_1_without_traceback(tmp_path, content):
    bad = tmp_path / "bad.db"
    bad.write_bytes(content)
    result = run("executions", "list", "--db", str(bad))
    assert result.exit_code == 1
    assert result.stderr.startswith("error: ")
    assert "Traceback" not in result.output
    assert bad.read_bytes() == content


def test_usage_errors_are_exit_2(db):
    assert run("executions", "list").exit_code == 2  # --db missing
    assert run("executions", "list", "--db", db, "--status", "bogus").exit_code == 2
    assert run("store", "compact", "--db", db, "--older-than-days", "-3").exit_code == 2


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["executions"],
        ["executions", "list"],
        ["executions", "show"],
        ["store"],
        ["store", "compact"],
    ],
)
def test_help_everywhere(args):
    result = run(*args, "--help")
    assert result.exit_code == 0 and "Usage:" in result.stdout


def test_compact_removes_old_terminal_and_archives(db, tmp_path):
    archive = tmp_path / "archive.db"
    result = run(
        "store",
        "compact",
        "--db",
        db,
        "--older-than-days",
        "7",
        "--archive",
        str(archive),
        "--json",
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["removed_executions"] == 1 and report["archived_executions"] == 1
    assert report["removed_barriers"] == 3  # @start, initial_preparation, @final
    assert report["removed_journal_entries"] == 6  # ex-done's transcript
    listed = json.loads(run("executions", "list", "--db", db, "--json").stdout)
    assert [r["execution_id"] for r in listed] == ["ex-live"]
    assert report["wal_checkpoint"][0] == 0  # not busy: the WAL was truncated
    assert archive.exists()
    again = run("store", "compact", "--db", db, "--older-than-days", "7")
    assert again.exit_code == 0 and again.stdout.startswith("removed 0 executions")
    assert again.stdout.rstrip().endswith("WAL truncated")


def test_migrate_brings_a_version_2_store_to_the_current_schema(tmp_path):
    """A read-only command refuses an older store and names `store migrate`; after it,
    the same command reads every barrier."""
    from phronomy_fsm.store import SCHEMA_VERSION
    from tests.store.test_files_and_schema import _version_2_store

    path = tmp_path / "v2.db"
    _version_2_store(path)
    runner = CliRunner()
    refused = runner.invoke(main, ["executions", "show", "ex-1", "--db", str(path), "--json"])
    assert refused.exit_code == 1
    assert f"phronomy-fsm store migrate --db {path}" in refused.stderr
    migrated = runner.invoke(main, ["store", "migrate", "--db", str(path)])
    assert migrated.exit_code == 0, migrated.output
    assert migrated.stdout.strip() == f"schema version 2 -> {SCHEMA_VERSION}"
    shown = runner.invoke(main, ["executions", "show", "ex-1", "--db", str(path), "--json"])
    assert shown.exit_code == 0, shown.output
    assert [b["revision"] for b in json.loads(shown.stdout)["barriers"]] == [0, 1, 2]
    again = runner.invoke(main, ["store", "migrate", "--db", str(path)])
    assert again.stdout.strip() == f"schema version {SCHEMA_VERSION} (already current)"


def test_migrate_refuses_what_is_not_a_store_and_writes_nothing(tmp_path):
    runner = CliRunner()
    missing = runner.invoke(main, ["store", "migrate", "--db", str(tmp_path / "nope.db")])
    assert missing.exit_code == 1 and not (tmp_path / "nope.db").exists()
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not a database at all" * 10)
    bad = runner.invoke(main, ["store", "migrate", "--db", str(junk)])
    assert bad.exit_code == 1 and "Traceback" not in bad.output
    assert junk.read_bytes() == b"not a database at all" * 10
