"""The store CLI through click's CliRunner (issue 4 items 9-10): JSON keys, exit codes,
stderr diagnostics, no tracebacks, and read commands that never create files."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from click.testing import CliRunner

from phronomy_fsm.cli import main
from phronomy_fsm.store import SqliteBarrierStore
from tests.store.helpers import admission, finish, step_with_journal


@pytest.fixture
def db(tmp_path):
    """A store with ex-done (cancelled 30 days ago, 3 journal records) and ex-live."""
    path = tmp_path / "store.db"
    month_ago = datetime.now(UTC) - timedelta(days=30)
    with SqliteBarrierStore(path, clock=lambda: month_ago) as store:
        agent, ex = admission(store, "a1", "ex-done")
        c = step_with_journal(ex, agent, count=2)
        store.commit(c)
        store.commit(finish(c.execution, store.load_agent("a1")))
        admission(store, "a2", "ex-live")
    return str(path)


def run(*args: str):
    return CliRunner().invoke(main, list(args))


def test_list_json_and_filters(db):
    result = run("executions", "list", "--db", db, "--json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [(r["execution_id"], r["status"], r["revision"]) for r in rows] == [
        ("ex-done", "cancelled", 2),
        ("ex-live", "preparing", 0),
    ]
    only = json.loads(
        run("executions", "list", "--db", db, "--json", "--status", "cancelled").stdout
    )
    assert [r["execution_id"] for r in only] == ["ex-done"]
    by_agent = json.loads(run("executions", "list", "--db", db, "--json", "--agent", "a2").stdout)
    assert [r["execution_id"] for r in by_agent] == ["ex-live"]


def test_list_table(db):
    result = run("executions", "list", "--db", db)
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    header = ["EXECUTION", "MACHINE", "STATUS", "STATE", "REV", "UPDATED", "KEY", "OPERATOR"]
    assert lines[0].split() == header
    row = lines[1].split()
    assert row[:5] == ["ex-done", "agent_session", "cancelled", "cancelled", "2"]
    assert row[6:] == ["a1"]  # the agent id is the exclusive key; no operator needed
    # ex-live was admitted, is not replayable and no process owns its agent: recovering
    # it would ask an operator, so the listing says so
    assert lines[2].split()[:3] + lines[2].split()[6:] == [
        "ex-live",
        "agent_session",
        "preparing",
        "a2",
        "needed",
    ]
    assert lines[3] == "1-2 of 2 execution(s); by status: cancelled 1, preparing 1"
    assert lines[4].startswith("1 need(s) an operator: phronomy-fsm executions show ID --db ")


def test_show_json_has_the_required_keys(db):
    result = run("executions", "show", "ex-done", "--db", db, "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert {
        "execution_id",
        "agent_id",
        "status",
        "phase",
        "revision",
        "barriers",
        "journal",
    } <= set(data)
    assert (data["execution_id"], data["agent_id"], data["status"], data["revision"]) == (
        "ex-done",
        "a1",
        "cancelled",
        2,
    )
    assert [b["barrier"] for b in data["barriers"]] == ["admission", "terminal", "terminal"]
    assert [r["sequence"] for r in data["journal"]] == [1, 2, 3]
    assert data["journal"][-1]["kind"] == "execution_cancelled"
    assert data["execution"]["execution_id"] == "ex-done"


def test_show_text(db):
    result = run("executions", "show", "ex-done", "--db", db)
    assert result.exit_code == 0
    assert (
        "status: cancelled" in result.stdout
        and "barriers (3):" in result.stdout
        and "journal (3):" in result.stdout
    )


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
    assert report["kept_journal_records"] == 3
    listed = json.loads(run("executions", "list", "--db", db, "--json").stdout)
    assert [r["execution_id"] for r in listed] == ["ex-live"]
    assert report["wal_checkpoint"][0] == 0  # not busy: the WAL was truncated
    assert archive.exists()
    again = run("store", "compact", "--db", db, "--older-than-days", "7")
    assert again.exit_code == 0 and again.stdout.startswith("removed 0 executions")
    assert again.stdout.rstrip().endswith("; WAL truncated")


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
