"""The store CLI through click's CliRunner: ``executions list|show``, ``store compact``
and ``store migrate`` on the engine's tables — JSON keys, exit codes, stderr
diagnostics, no tracebacks, and read commands that never create files."""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime, timedelta

import pytest
from click.testing import CliRunner

from phronomy_fsm.cli import main
from phronomy_fsm.durable.records import (
    DurablePoint,
    EffectKind,
    EffectRef,
    ExecutionStatus,
    RecoveryInfo,
    ResolutionOutcome,
)
from phronomy_fsm.store import SqliteBarrierStore
from tests.store.helpers import T0, admit, finish, journal, signal, step


@pytest.fixture
def db(tmp_path):
    """A store with ex-done (an agent session cancelled 30 days ago: 3 commits, 3
    journal entries, one consumed signal), ex-live (running) and ex-parked (waiting
    for an operator about its effect ``charge``)."""
    path = tmp_path / "store.db"
    month_ago = datetime.now(UTC) - timedelta(days=30)
    with SqliteBarrierStore(path, clock=lambda: month_ago) as store:
        done = admit(store, "ex-done", "a1")
        sent = store.send_signal(signal("ex-done", "s-1"))
        c = step(done, "llm", journal=journal(2), consume_signals=(sent.seq,))
        store.commit(c)
        store.commit(finish(c.execution, ExecutionStatus.CANCELLED))
    with SqliteBarrierStore(path) as store:
        admit(store, "ex-live", "a2")
        parked = admit(store, "ex-parked")
        effect = EffectRef("charge", EffectKind.AT_MOST_ONCE, "charging", "key-1")
        store.commit(
            step(
                parked,
                "@recovery",
                status=ExecutionStatus.RECOVERY_REQUIRED,
                state="charging",
                point=DurablePoint.WAIT,
                recovery=RecoveryInfo(
                    "the charge may or may not have happened",
                    effect,
                    (ResolutionOutcome.SUCCEEDED.value, ResolutionOutcome.FAILED.value),
                    T0,
                ),
            )
        )
    return str(path)


def run(*args: str):
    return CliRunner().invoke(main, list(args))


def test_list_json_and_filters(db):
    result = run("executions", "list", "--db", db, "--json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [(r["execution_id"], r["status"], r["revision"], r["needs_operator"]) for r in rows] == [
        ("ex-done", "cancelled", 2, False),
        ("ex-live", "running", 0, False),
        ("ex-parked", "recovery_required", 1, True),
    ]
    only = json.loads(
        run("executions", "list", "--db", db, "--json", "--status", "cancelled").stdout
    )
    assert [r["execution_id"] for r in only] == ["ex-done"]
    by_agent = json.loads(run("executions", "list", "--db", db, "--json", "--agent", "a2").stdout)
    assert [r["execution_id"] for r in by_agent] == ["ex-live"]
    page = json.loads(run("executions", "list", "--db", db, "--json", "--offset", "2").stdout)
    assert [r["execution_id"] for r in page] == ["ex-parked"]


def test_list_table(db):
    result = run("executions", "list", "--db", db)
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    header = ["EXECUTION", "MACHINE", "STATUS", "STATE", "REV", "UPDATED", "KEY", "OPERATOR"]
    assert lines[0].split() == header
    row = lines[1].split()
    assert row[:5] == ["ex-done", "m", "cancelled", "done", "2"] and row[-1] == "a1"
    parked = lines[3].split()
    assert parked[:5] + parked[-2:] == ["ex-parked", "m", "recovery_required", "charging", "1"] + [
        "-",
        "needed",
    ]
    assert lines[4] == (
        "1-3 of 3 execution(s); by status: cancelled 1, recovery_required 1, running 1"
    )
    assert lines[5].startswith("1 need(s) an operator: phronomy-fsm executions show ID --db ")


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
        "point",
        "needs_operator",
        "owner",
        "recovery",
        "execution",
        "barriers",
        "signals",
        "journal",
    } <= set(data)
    assert (data["execution_id"], data["status"], data["revision"]) == ("ex-done", "cancelled", 2)
    assert [b["barrier"] for b in data["barriers"]] == ["@start", "llm", "@final"]
    assert [(j["revision"], j["kind"]) for j in data["journal"]] == [
        (1, "note"),
        (1, "note"),
        (2, "execution_cancelled"),
    ]
    assert [(s["signal_id"], s["consumed_revision"]) for s in data["signals"]] == [("s-1", 1)]
    assert data["execution"]["exclusive_key"] == "a1"
    parked = json.loads(run("executions", "show", "ex-parked", "--db", db, "--json").stdout)
    assert parked["needs_operator"] is True
    assert parked["recovery"]["allowed_outcomes"] == ["succeeded", "failed"]


def test_show_text(db):
    result = run("executions", "show", "ex-done", "--db", db)
    assert result.exit_code == 0
    for line in ("status: cancelled", "barriers (3):", "signals (1):", "journal (3):"):
        assert line in result.stdout
    parked = run("executions", "show", "ex-parked", "--db", db).stdout
    assert "phronomy-fsm resolve ex-parked --db" in parked


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


def test_compact_removes_old_finished_executions_and_archives(db, tmp_path):
    archive = tmp_path / "archive.db"
    args = ["store", "compact", "--db", db, "--older-than-days", "7", "--archive", str(archive)]
    result = run(*args, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert (report["removed_executions"], report["archived_executions"]) == (1, 1)
    assert (report["removed_barriers"], report["removed_journal_entries"]) == (3, 3)
    assert report["removed_signals"] == 1 and report["wal_checkpoint"][0] == 0
    listed = json.loads(run("executions", "list", "--db", db, "--json").stdout)
    assert [r["execution_id"] for r in listed] == ["ex-live", "ex-parked"]
    with sqlite3.connect(archive) as copy:
        assert copy.execute("SELECT execution_id FROM executions").fetchall() == [("ex-done",)]
    again = run("store", "compact", "--db", db, "--older-than-days", "7")
    assert again.exit_code == 0
    assert again.stdout.splitlines() == [
        "removed 0 executions with 0 barrier rows, 0 journal entries and 0 signals",
        "WAL truncated",
    ]


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
    data = json.loads(shown.stdout)
    assert [b["revision"] for b in data["barriers"]] == [0, 1, 2]
    assert (data["machine"], data["status"], data["needs_operator"]) == (
        "agent_session",
        "recovery_required",
        True,
    )
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
    foreign = tmp_path / "foreign.db"
    with sqlite3.connect(foreign) as conn:
        conn.execute("CREATE TABLE notes (text)")
    refused = runner.invoke(main, ["store", "migrate", "--db", str(foreign)])
    assert refused.exit_code == 1 and "not a phronomy_fsm store" in refused.stderr
    empty_db = tmp_path / "empty-schema.db"
    sqlite3.connect(empty_db).execute("PRAGMA user_version = 1").connection.close()
    empty = runner.invoke(main, ["store", "migrate", "--db", str(empty_db)])
    assert empty.exit_code == 1 and "empty database" in empty.stderr
