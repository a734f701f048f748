"""A store written by the code of schema version 3 (the checked-in fixture was made by
that code's `phronomy-fsm demo`: one agent execution suspended for approval) is brought
to the current schema by `phronomy-fsm store migrate`, keeps every row, and its
suspended execution is approved and finished by the current code (issue 12 item 13)."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

from .test_demo_cli import ledger, run, show

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "store-v3-demo-suspended.db"
EXECUTION = "5d09b1e3f315cae0110bb337edddeb19"
REQUEST = "61f7af941a496dd8579f442ea1089254"


def test_a_version_3_store_is_migrated_and_its_suspended_execution_finishes(tmp_path: Path) -> None:
    db = tmp_path / "demo.db"
    shutil.copyfile(FIXTURE, db)
    with sqlite3.connect(db) as old:
        before = old.execute(
            "SELECT execution_id, agent_id, revision, status, phase, body FROM executions"
        ).fetchall()
        log_before = old.execute("SELECT count(*) FROM barriers").fetchone()[0]
    refused = run("executions", "list", "--db", str(db), check=False)
    assert refused.returncode == 1 and "store migrate" in refused.stderr  # reads refuse it
    out = run("store", "migrate", "--db", str(db)).stdout
    assert "4" in out
    with sqlite3.connect(db) as new:
        assert new.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone() == ("4",)
        after = new.execute(
            "SELECT execution_id, exclusive_key, revision, status, state, body, machine"
            " FROM executions"
        ).fetchall()
        assert [row[:6] for row in after] == before  # every value kept, columns renamed
        assert after[0][6] == "agent_session"
        assert new.execute("SELECT count(*) FROM barriers").fetchone()[0] == log_before
    assert show(db, EXECUTION)["status"] == "suspended"
    run("approve", EXECUTION, "--request", REQUEST, "--db", str(db))
    run("demo", "--resume", "--db", str(db))
    finished = show(db, EXECUTION)
    assert finished["status"] == "completed"
    assert finished["revision"] > before[0][2]
    assert [entry["order_id"] for entry in ledger(db)] == ["A1001"]  # the refund ran once
