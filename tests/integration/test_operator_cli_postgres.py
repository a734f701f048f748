"""The operator commands take a PostgreSQL DSN as ``--db`` as well as a SQLite file
(docs/scale-out.md, "What an operator does"): list, show and signal an execution on the
server the harness starts; a command made for SQLite files only refuses a DSN with exit
1 and writes nothing."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from phronomy_fsm.cli import main
from phronomy_fsm.durable import DurableEventKind, DurableRuntime
from phronomy_fsm.store.open import open_store
from tests.durable.order_app import Order, order_machine


def run(*args: str) -> Any:
    return CliRunner().invoke(main, list(args))


def start_waiting_order(dsn: str, folder: Path, execution_id: str) -> None:
    """Start an order on ``dsn`` and run it until it waits for approval; its runtime
    is closed after (nothing runs it then)."""
    waiting = threading.Event()
    runtime = DurableRuntime(
        open_store(dsn),
        machines=[order_machine(folder / "ledger.jsonl")],
        listeners=[lambda e: e.kind is DurableEventKind.WAITING and waiting.set()],
        own_store=True,
    )
    try:
        runtime.start("order_flow", Order(execution_id, 1000), execution_id=execution_id)
        assert waiting.wait(30)
    finally:
        runtime.close(timeout_seconds=5)


def test_list_show_and_signal_an_execution_on_postgresql(tmp_path: Path, postgres: Any) -> None:
    dsn = postgres.database("cli")
    start_waiting_order(dsn, tmp_path, "pg-1")

    listed = run("executions", "list", "--db", dsn, "--json")
    assert listed.exit_code == 0, listed.output
    [row] = json.loads(listed.stdout)
    assert (row["execution_id"], row["status"], row["state"]) == (
        "pg-1",
        "waiting",
        "awaiting_approval",
    )
    shown = run("executions", "show", "pg-1", "--db", dsn, "--json")
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout)["revision"] == row["revision"]

    sent = run("signal", "pg-1", "approve", "--db", dsn, "--payload", '{"by": "ops"}')
    assert sent.exit_code == 0, sent.output
    compacted = run("store", "compact", "--db", dsn, "--older-than-days", "0")
    assert compacted.exit_code == 0, compacted.output
    assert "removed 0 executions" in compacted.output  # the waiting one is never removed

    with open_store(dsn) as store:  # what the commands wrote, read back
        [signal] = store.list_signals("pg-1")
        assert (signal.event, signal.payload, signal.sender) == ("approve", {"by": "ops"}, "cli")
        assert store.load_record("pg-1").revision == row["revision"]


def test_signal_to_an_execution_locked_by_a_stuck_transaction_exits_1(
    tmp_path: Path, postgres: Any
) -> None:
    """A transaction left open on the execution's row makes the signal wait the store's
    lock timeout (5 s by default), then exit 1 saying what to do: it does not hang
    (issue 21 item 2)."""
    import psycopg

    from phronomy_fsm.store.postgres.store import DEFAULT_LOCK_TIMEOUT_SECONDS

    dsn = postgres.database("locked")
    start_waiting_order(dsn, tmp_path, "pg-1")
    with psycopg.connect(dsn) as holder:  # not autocommit: the row stays locked
        holder.execute("SELECT 1 FROM executions WHERE execution_id = 'pg-1' FOR UPDATE")
        started = time.monotonic()
        sent = run("signal", "pg-1", "approve", "--db", dsn)
        waited = time.monotonic() - started
        holder.rollback()
    assert sent.exit_code == 1, sent.output
    assert "error: PostgreSQL send_signal" in sent.output
    assert "lock that another transaction holds on execution pg-1" in sent.output
    assert "nothing was written" in sent.output and "pg_stat_activity" in sent.output
    assert DEFAULT_LOCK_TIMEOUT_SECONDS * 0.9 <= waited < DEFAULT_LOCK_TIMEOUT_SECONDS + 30
    with open_store(dsn) as store:
        assert store.list_signals("pg-1") == []


def test_a_signal_id_used_for_another_signal_exits_1_and_writes_nothing(
    tmp_path: Path, postgres: Any
) -> None:
    """Issue 22 item 9 on PostgreSQL: a reused ``--signal-id`` with another payload or
    for another execution exited 0 and wrote nothing."""
    dsn = postgres.database("reused")
    start_waiting_order(dsn, tmp_path, "pg-1")
    start_waiting_order(dsn, tmp_path, "pg-2")
    for _ in range(2):  # the second is a retry of the same signal: a no-op
        sent = run("signal", "pg-1", "approve", "--db", dsn, "--signal-id", "op-7",
                   "--payload", '{"by": "ann"}')  # fmt: skip
        assert sent.exit_code == 0, sent.output
    for target, payload, differs in (
        ("pg-1", '{"by": "bob"}', "payload"),
        ("pg-2", '{"by": "ann"}', "execution"),
    ):
        refused = run("signal", target, "approve", "--db", dsn, "--signal-id", "op-7",
                      "--payload", payload)  # fmt: skip
        assert refused.exit_code == 1, refused.output
        assert refused.stdout == ""
        assert "signal id op-7" in refused.stderr and "execution pg-1" in refused.stderr
        assert differs in refused.stderr
    with open_store(dsn) as store:  # read back: only the first signal
        assert [(s.signal_id, s.payload) for s in store.list_signals("pg-1")] == [
            ("op-7", {"by": "ann"})
        ]
        assert store.list_signals("pg-2") == []


def _tables(dsn: str) -> list[str]:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename"
        ).fetchall()
    return [r[0] for r in rows]


def test_a_database_without_a_store_is_refused_and_gets_no_tables(postgres: Any) -> None:
    import psycopg

    empty = postgres.database("empty")
    other = postgres.database("other")
    with psycopg.connect(other, autocommit=True) as conn:
        conn.execute("CREATE TABLE orders (id int)")
    for dsn, tables in ((empty, []), (other, ["orders"])):
        for args in (
            ("executions", "list", "--db", dsn),
            ("signal", "x1", "go", "--db", dsn),
            ("cancel", "x1", "--db", dsn),
            ("store", "migrate", "--db", dsn),
        ):
            result = run(*args)
            assert result.exit_code == 1, (args, result.output)
            assert "no phronomy_fsm store" in result.output, (args, result.output)
        assert _tables(dsn) == tables  # nothing was created


def test_store_migrate_and_recover_take_a_dsn(
    tmp_path: Path, postgres: Any, monkeypatch: Any
) -> None:
    dsn = postgres.database("ops")
    open_store(dsn).close()  # a current store
    migrated = run("store", "migrate", "--db", dsn)
    assert migrated.exit_code == 0, migrated.output
    assert "(already current)" in migrated.output
    monkeypatch.setenv("PHRONOMY_APP_DIR", str(tmp_path))  # the order app's ledger
    recovered = run("recover", "--db", dsn, "--app", "tests.durable.order_app:create_app")
    assert recovered.exit_code == 0, recovered.output
    assert recovered.output.startswith("recovered 0 execution(s)"), recovered.output


def test_printed_commands_leave_the_password_out_and_still_run(
    tmp_path: Path, postgres: Any
) -> None:
    import shlex

    dsn = postgres.database("secret")
    assert dsn.startswith("postgresql://postgres@"), dsn
    with_password = dsn.replace("postgres@", "postgres:sekret-pw@", 1)  # trust: ignored
    start_waiting_order(with_password, tmp_path, "pg-2")
    shown = run("executions", "show", "pg-2", "--db", with_password)
    assert shown.exit_code == 0, shown.output
    assert "sekret-pw" not in shown.output
    [command] = [
        line.strip()
        for line in shown.stdout.splitlines()
        if line.strip().startswith("phronomy-fsm signal pg-2 approve")
    ]
    words = shlex.split(command)
    assert words[words.index("--db") + 1] == dsn  # the DSN, less its password
    sent = run(*words[1:], "--payload", '{"by": "ops"}')  # runnable as printed
    assert sent.exit_code == 0, sent.output
    assert "sekret-pw" not in sent.output
    with open_store(dsn) as store:
        assert [s.event for s in store.list_signals("pg-2")] == ["approve"]


def test_agent_apps_open_a_dsn_and_the_demo_refuses_one(postgres: Any) -> None:
    from phronomy_fsm.store.postgres import PostgresStore
    from tests.integration import other_agent_app

    dsn = postgres.database("agents")
    PostgresStore(dsn).close()  # a store, with no agent yet
    app = other_agent_app.create_app(dsn)  # agent_app reads the histories from the DSN
    assert sorted(m.name for m in app.machines) == ["agent_session", "tool_call"]
    with_password = dsn.replace("postgres@", "postgres:sekret-pw@", 1)
    for command in (
        ("demo", "--db", with_password),
        ("recover", "--db", with_password, "--app", "phronomy_fsm.demo:create_app"),
    ):
        refused = run(*command)
        assert refused.exit_code == 1, refused.output
        assert "the demo runs on a SQLite store file" in refused.output
        assert "sekret-pw" not in refused.output
    with open_store(dsn) as store:  # read back: recover ran no runtime, started nothing
        assert store.list_workers() == [] and store.list_records() == []
