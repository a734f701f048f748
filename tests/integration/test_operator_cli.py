"""Operating durable executions of any machine through the real CLI (issue 12 item 8):
``executions list|show``, ``signal``, ``resolve``, ``cancel`` and ``recover`` on real
SQLite files, driving the order machine of ``tests/durable/order_app.py``.

Orders are started with a :class:`DurableRuntime` in the test and left waiting (or
killed at an effect by the crash harness in a child process); from then on they are
driven only through the CLI — in-process through click's CliRunner, and ``recover``
and ``resolve --app`` as new processes. Every refusal is checked to write nothing by
reading the store back.
"""

from __future__ import annotations

import json
import os
import shlex
import sqlite3
import subprocess
import sys
import threading
import unicodedata
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from phronomy_fsm.cli import main
from phronomy_fsm.durable import DurableEventKind, DurableRuntime
from phronomy_fsm.store import SqliteBarrierStore
from tests.durable.order_app import TABLE, Order, create_app, read_ledger

ROOT = Path(__file__).resolve().parents[2]
APP = "tests.durable.order_app:create_app"
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


# ------------------------------------------------------------------ helpers


def run(*args: str) -> Any:
    """The CLI in this process (click's runner; stdout and stderr apart)."""
    return CliRunner().invoke(main, list(args))


def run_process(*args: str) -> subprocess.CompletedProcess[str]:
    """The CLI as a new process, from the repository root (so ``--app`` imports)."""
    return subprocess.run(
        [sys.executable, "-m", "phronomy_fsm.cli", *args],
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def start_orders(db: Path, *orders: tuple[str, dict[str, Any]]) -> None:
    """Start each ``(order_id, start options)`` and return once every one waits for
    its approval; the runtime is closed (its lease ends), as after a process exit."""
    waiting: set[str] = set()
    done = threading.Condition()

    def listen(event: Any) -> None:
        if event.kind is DurableEventKind.WAITING:
            with done:
                waiting.add(event.execution_id)
                done.notify_all()

    app = create_app(str(db))
    runtime = DurableRuntime(
        SqliteBarrierStore(db), machines=app.machines, listeners=[listen], own_store=True
    )
    try:
        for i, (order_id, options) in enumerate(orders):
            runtime.start("order_flow", Order(order_id, 1000 + i), execution_id=order_id, **options)
        with done:
            assert done.wait_for(lambda: len(waiting) == len(orders), 20), waiting
    finally:
        runtime.close(timeout_seconds=5)


def kill_at(db: Path, point: str) -> None:
    """Run the crash harness's ``approved`` scenario (order ``order-a``) in a child
    process that SIGKILLs itself at ``point``."""
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tools" / "durable_crash.py"),
            "child",
            "run",
            "--app",
            APP,
            "--db",
            str(db),
            "--scenario",
            "approved",
            "--crash-at",
            point,
        ],
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == -9, (proc.returncode, proc.stderr[-2000:])


def snapshot(db: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every row an operator command could have written, read with plain sqlite3."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return {
            table: conn.execute(f"SELECT * FROM {table} ORDER BY 1, 2").fetchall()
            for table in ("executions", "barriers", "signals", "execution_journal", "workers")
        }
    finally:
        conn.close()


def record(db: Path, execution_id: str) -> Any:
    with SqliteBarrierStore(db, read_only=True) as store:
        return store.load_record(execution_id)


def signals(db: Path, execution_id: str) -> list[Any]:
    with SqliteBarrierStore(db, read_only=True) as store:
        return store.list_signals(execution_id)


def effects(db: Path) -> list[str]:
    return [e["effect"] for e in read_ledger(db.parent / "ledger.jsonl")]


def assert_one_error_line(result: Any, *needles: str) -> None:
    """Exit 1, nothing on stdout, exactly one ``error:`` line naming ``needles``."""
    stderr = result.stderr if hasattr(result, "stderr") else ""
    assert result.exit_code == 1, (result.stdout, stderr)
    assert result.stdout == ""
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    for needle in needles:
        assert needle in lines[0], lines[0]


def no_control_characters(text: str) -> bool:
    return not any(unicodedata.category(c) == "Cc" for c in text.replace("\n", ""))


@pytest.fixture
def waiting_db(tmp_path: Path) -> Path:
    """A store with order-1 waiting for approval at revision 3, no process running it."""
    db = tmp_path / "store.db"
    start_orders(db, ("order-1", {}))
    return db


# ------------------------------------------------------------------ the happy path


def test_a_waiting_order_is_listed_shown_signalled_and_recovered_to_its_end(
    waiting_db: Path,
) -> None:
    db = str(waiting_db)
    listed = run("executions", "list", "--db", db, "--json")
    assert listed.exit_code == 0, listed.output
    [row] = json.loads(listed.stdout)
    assert (row["execution_id"], row["machine"], row["status"], row["state"]) == (
        "order-1",
        "order_flow",
        "waiting",
        "awaiting_approval",
    )
    assert (row["revision"], row["needs_operator"], row["agent_id"]) == (3, False, None)

    shown = run("executions", "show", "order-1", "--db", db, "--json")
    assert shown.exit_code == 0, shown.output
    detail = json.loads(shown.stdout)
    assert detail["status"] == "waiting" and detail["recovery"] is None
    assert {"approve", "reject"} <= set(detail["awaits"])
    assert [b["barrier"] for b in detail["barriers"]] == ["@start", "charge", "paid", "@wait"]
    assert detail["owner"]["is_live"] is False  # the runtime closed: nobody applies signals
    text = run("executions", "show", "order-1", "--db", db).stdout
    assert "status: waiting  <- waits for a signal\n" in text and "owner: none live" in text
    assert f"phronomy-fsm recover --db {db} --app MODULE:FACTORY" in text
    # the signals it awaits, each as a command to run as it is
    assert f"  phronomy-fsm signal order-1 approve --db {db} --expected-revision 3\n" in text
    assert f"  phronomy-fsm signal order-1 reject --db {db} --expected-revision 3\n" in text

    sent = run(
        "signal", "order-1", "approve", "--db", db, "--payload", '{"by": "ops"}',
        "--expected-revision", "3",
    )  # fmt: skip
    assert sent.exit_code == 0, sent.output
    assert "no process runs it now" in sent.stdout
    [pending] = signals(waiting_db, "order-1")
    assert (pending.event, pending.payload, pending.sender) == ("approve", {"by": "ops"}, "cli")
    assert pending.consumed_revision is None
    assert record(waiting_db, "order-1").status.value == "waiting"  # only the inbox moved

    recovered = run_process("recover", "--db", db, "--app", APP)
    assert recovered.returncode == 0, (recovered.stdout, recovered.stderr)
    assert "recovered 1 execution(s)" in recovered.stdout
    assert "  order-1  order_flow  completed in shipped  r5 (found waiting)" in recovered.stdout
    assert "\r" not in recovered.stderr and "at rest" not in recovered.stderr  # no bar on a pipe
    final = record(waiting_db, "order-1")
    assert (final.status.value, final.state) == ("completed", "shipped")
    assert final.context["decision"] == {"by": "ops"}
    assert effects(waiting_db) == ["charge_card", "send_email", "ship_parcel"]
    assert [(s.event, s.consumed_revision) for s in signals(waiting_db, "order-1")] == [
        ("approve", 4)
    ]

    after = run("executions", "list", "--db", db)
    assert after.stdout.splitlines()[-1] == "1-1 of 1 execution(s); by status: completed 1"
    assert after.stdout.splitlines()[0].split()[-2:] == ["WAITS", "FOR"]


# ------------------------------------------------------------------ refusals


REFUSALS = [
    (("signal", "nope", "approve"), ("execution nope does not exist",)),
    (("signal", "order-1", "aprove"), ("declares no event 'aprove'", "did you mean 'approve'")),
    (("signal", "order-1", "state_completed"), ("posted by the engine itself",)),
    (("signal", "order-1", "charged"), ("posted by the engine itself",)),
    (("signal", "order-1", "approve", "--payload", "{not json"), ("--payload must be JSON",)),
    (("signal", "order-1", "approve", "--expected-revision", "2"), ("at revision 3, not 2",)),
    (("signal", "order 1", "approve"), ("contains whitespace",)),
    (
        ("resolve", "order-1", "--expected-revision", "3", "--outcome", "not_performed"),
        ("is waiting, not waiting for an operator",),
    ),
    (("cancel", "nope"), ("execution nope does not exist",)),
    (("cancel", "order-1", "--expected-revision", "2"), ("at revision 3, not 2",)),
]


@pytest.mark.parametrize(("args", "needles"), REFUSALS, ids=lambda v: " ".join(v)[:40])
def test_bad_input_is_one_error_line_and_writes_nothing(
    waiting_db: Path, args: tuple[str, ...], needles: tuple[str, ...]
) -> None:
    before = snapshot(waiting_db)
    result = run(*args, "--db", str(waiting_db))
    assert_one_error_line(result, *needles)
    assert snapshot(waiting_db) == before


@pytest.mark.parametrize(
    "args",
    [
        ("executions", "show", "nope"),
        ("signal", "nope", "approve"),
        ("cancel", "nope"),
        ("resolve", "nope", "--expected-revision", "1", "--outcome", "not_performed"),
        ("approve", "nope", "--request", "r-1"),
        ("diagram", "--execution", "nope"),
    ],
    ids=lambda v: " ".join(v[:2]),
)
def test_an_unknown_execution_is_named_once(waiting_db: Path, args: tuple[str, ...]) -> None:
    # a newcomer saw "execution nope: execution nope does not exist"
    before = snapshot(waiting_db)
    result = run(*args, "--db", str(waiting_db))
    assert_one_error_line(result, "nope")
    assert result.stderr.count("nope") == 1, result.stderr
    assert snapshot(waiting_db) == before


def test_a_finished_execution_refuses_signal_resolve_and_cancel(waiting_db: Path) -> None:
    db = str(waiting_db)
    cancelled = run("cancel", "order-1", "--db", db, "--reason", "customer left", "--app", APP)
    assert cancelled.exit_code == 0, cancelled.output
    assert "order-1  order_flow  cancelled in awaiting_approval" in cancelled.stdout
    assert record(waiting_db, "order-1").status.value == "cancelled"
    [cancel] = signals(waiting_db, "order-1")
    assert (cancel.kind.value, cancel.payload["reason"], cancel.outcome) == (
        "cancel",
        "customer left",
        "consumed",
    )
    before = snapshot(waiting_db)
    for args in (
        ("signal", "order-1", "approve"),
        ("resolve", "order-1", "--expected-revision", "4", "--outcome", "not_performed"),
        ("cancel", "order-1"),
    ):
        assert_one_error_line(run(*args, "--db", db), "has", "finished")
    assert snapshot(waiting_db) == before


def test_a_signal_id_used_for_another_signal_is_refused_and_writes_nothing(
    tmp_path: Path,
) -> None:
    """Issue 22 item 9: ``--signal-id`` of a signal already sent made a retry a no-op
    — and also any other signal sent with it (another payload, event or execution):
    exit 0, nothing written, the decision lost."""
    db = tmp_path / "store.db"
    start_orders(db, ("order-1", {}), ("order-2", {}))
    first = run("signal", "order-1", "approve", "--db", str(db), "--signal-id", "op-7",
                "--payload", '{"by": "ann"}')  # fmt: skip
    assert first.exit_code == 0, first.output
    again = run("signal", "order-1", "approve", "--db", str(db), "--signal-id", "op-7",
                "--payload", '{"by": "ann"}')  # fmt: skip
    assert again.exit_code == 0, again.output  # the same signal: a retry, a no-op
    assert [(s.signal_id, s.payload) for s in signals(db, "order-1")] == [("op-7", {"by": "ann"})]
    before = snapshot(db)
    for args, differs in (
        (("order-1", "approve", "--payload", '{"by": "bob"}'), "payload"),
        (("order-1", "reject", "--payload", '{"by": "ann"}'), "event"),
        (("order-2", "approve", "--payload", '{"by": "ann"}'), "execution"),
    ):
        result = run("signal", *args, "--db", str(db), "--signal-id", "op-7")
        assert_one_error_line(result, "signal id op-7", "execution order-1", differs)
        assert snapshot(db) == before  # nothing was written
    assert signals(db, "order-2") == []


def test_an_unloadable_app_is_refused_before_anything_is_written(waiting_db: Path) -> None:
    before = snapshot(waiting_db)
    result = run(
        "signal", "order-1", "approve", "--db", str(waiting_db), "--app", "tests.nowhere:create_app"
    )
    assert_one_error_line(result, "cannot import", "nothing was written")
    assert snapshot(waiting_db) == before


# ------------------------------------------------------------------ recovery_required


def test_a_crash_after_the_charge_is_listed_with_the_resolve_command_that_answers_it(
    tmp_path: Path,
) -> None:
    db = tmp_path / "store.db"
    kill_at(db, "offload:charge_card:after")  # the card was charged; the result is lost
    assert effects(db) == ["charge_card"]

    recovered = run_process("recover", "--db", str(db), "--app", APP)
    assert recovered.returncode == 3, (recovered.stdout, recovered.stderr)
    out = recovered.stdout
    assert "1 wait(s) for an operator" in out
    assert "order-a  order_flow  recovery_required in announcing_charge  r2 (found running)" in out
    assert "subject: effect charge_card (at_most_once) in state charging" in out
    assert "allowed outcomes: succeeded, failed, not_performed, retry" in out
    prefix = f"phronomy-fsm resolve order-a --db {db} --app {APP} --expected-revision 2 --outcome"
    commands = [line.strip() for line in out.splitlines() if line.strip().startswith(prefix)]
    assert [c[len(prefix) :].split()[0] for c in commands] == [
        "succeeded",
        "failed",
        "not_performed",
        "retry",
    ]
    assert not any(line.startswith("error:") for line in recovered.stderr.splitlines())

    listed = json.loads(run("executions", "list", "--db", str(db), "--json").stdout)
    assert [(r["execution_id"], r["needs_operator"]) for r in listed] == [("order-a", True)]
    shown = json.loads(run("executions", "show", "order-a", "--db", str(db), "--json").stdout)
    assert shown["recovery"]["expected_revision"] == 2
    assert shown["recovery"]["subject"]["effect"] == "charge_card"
    assert shown["recovery"]["resolve_commands"][0] == (
        f"phronomy-fsm resolve order-a --db {db} --expected-revision 2 --outcome succeeded "
        "--result '<the result as JSON>'"
    )

    # the printed placeholder is not JSON: pasted unchanged, it is refused
    before = snapshot(db)
    pasted = run(*shlex.split(commands[0])[1:])
    assert_one_error_line(pasted, "--result must be JSON")
    assert snapshot(db) == before

    # the operator looks the key up (here: the app's ledger) and answers succeeded
    charged = read_ledger(tmp_path / "ledger.jsonl")[0]["result"]
    words = shlex.split(commands[0])
    words[words.index("--result") + 1] = json.dumps(charged)
    resolved = run_process(*words[1:])
    assert resolved.returncode == 0, (resolved.stdout, resolved.stderr)
    assert "order-a  order_flow  waiting in awaiting_approval" in resolved.stdout
    waiting = record(db, "order-a")
    assert waiting.status.value == "waiting"
    assert waiting.context["receipt"] == charged
    assert effects(db) == ["charge_card", "send_email"]  # the card was not charged again

    done = run_process("signal", "order-a", "approve", "--db", str(db), "--app", APP)
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert record(db, "order-a").status.value == "completed"
    assert effects(db) == ["charge_card", "send_email", "ship_parcel"]


def test_a_crash_before_shipping_is_answered_retry_and_ships_once(tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    kill_at(db, "effect:ship_parcel:before")  # announced, never called
    recovered = run_process("recover", "--db", str(db), "--app", APP, "--json")
    assert recovered.returncode == 3, (recovered.stdout, recovered.stderr)
    [entry] = json.loads(recovered.stdout)["executions"]
    assert (entry["execution_id"], entry["found_status"], entry["at_rest"]) == (
        "order-a",
        "running",
        True,
    )
    request = entry["recovery"]
    assert request["subject"]["effect"] == "ship_parcel"
    assert request["subject"]["kind"] == "at_most_once"
    revision = request["expected_revision"]
    assert entry["revision"] == revision == record(db, "order-a").revision

    before = snapshot(db)
    for args, needles in (
        (("--expected-revision", str(revision - 1), "--outcome", "retry"), ("not", "before resolving")),
        (("--expected-revision", str(revision), "--outcome", "failed"), ("needs an error text",)),
        (
            ("--expected-revision", str(revision), "--outcome", "retry", "--subject", "effect:charge_card"),
            ("effect:ship_parcel, not effect:charge_card",),
        ),
    ):  # fmt: skip
        assert_one_error_line(run("resolve", "order-a", "--db", str(db), *args), *needles)
    assert snapshot(db) == before

    # without --app the answer waits in the inbox; the next recover applies it
    queued = run("resolve", "order-a", "--db", str(db), "--expected-revision", str(revision),
                 "--outcome", "retry", "--subject", "effect:ship_parcel", "--json")  # fmt: skip
    assert queued.exit_code == 0, queued.output
    receipt = json.loads(queued.stdout)
    assert receipt["applied_by_live_owner"] is False and receipt["execution"] is None
    assert receipt["signal"]["kind"] == "resolution"
    assert record(db, "order-a").status.value == "recovery_required"
    assert effects(db) == ["charge_card", "send_email"]
    again = run_process("recover", "--db", str(db), "--app", APP)
    assert again.returncode == 0, (again.stdout, again.stderr)
    final = record(db, "order-a")
    assert (final.status.value, final.state) == ("completed", "shipped")
    assert effects(db) == ["charge_card", "send_email", "ship_parcel"]


def test_an_execution_of_a_spec_nobody_runs_is_left_or_parked_on_request(tmp_path: Path) -> None:
    """``recover`` with an application that runs none of an execution's specs leaves it
    for a worker that does and says so (docs/scale-out.md, "Rolling upgrades"); with
    ``--park-other-specs`` it parks it ``spec_changed``, where only ``failed`` ends it."""
    db = tmp_path / "store.db"
    start_orders(db, ("order-1", {}))
    other_spec = "tests.scaleout.upgrade_app:create_v2_without_migration"
    rows = {table: rows for table, rows in snapshot(db).items() if table != "workers"}
    left = run_process("recover", "--db", str(db), "--app", other_spec)
    assert left.returncode == 0, (left.stdout, left.stderr)
    assert (
        "order-1  order_flow  not recovered: it is pinned to spec version 1 (sha256 "
        f"{TABLE.spec_sha256[:12]}), which the application does not run" in left.stdout
    )
    assert {t: r for t, r in snapshot(db).items() if t != "workers"} == rows  # untouched
    as_json = run_process("recover", "--db", str(db), "--app", other_spec, "--json")
    assert json.loads(as_json.stdout)["other_spec"] == [
        {
            "execution_id": "order-1",
            "machine": "order_flow",
            "spec_version": 1,
            "spec_sha256": TABLE.spec_sha256,
        }
    ]

    parking = run_process("recover", "--db", str(db), "--app", other_spec, "--park-other-specs")
    assert parking.returncode == 3, (parking.stdout, parking.stderr)  # waits for an operator
    parked = record(db, "order-1")
    assert parked.status.value == "recovery_required" and parked.recovery.subject is None
    assert parked.recovery.reason.startswith("spec_changed")

    shown = run("executions", "show", "order-1", "--db", str(db))
    assert "subject: the execution as a whole" in shown.stdout
    assert "allowed outcomes: failed\n" in shown.stdout
    before = snapshot(db)
    refused = run("resolve", "order-1", "--db", str(db), "--expected-revision",
                  str(parked.revision), "--outcome", "retry")  # fmt: skip
    assert_one_error_line(refused, "outcome 'retry' is not allowed here; allowed: failed")
    assert snapshot(db) == before


# ------------------------------------------------------------------ listing


def test_listing_filters_pages_and_counts(tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    start_orders(
        db,
        ("order-1", {"exclusive_key": "alice"}),
        ("order-2", {"exclusive_key": "bob"}),
        ("order-3", {"exclusive_key": "carol"}),
    )
    run("cancel", "order-2", "--db", str(db), "--app", APP)

    def ids(*args: str) -> list[str]:
        result = run("executions", "list", "--db", str(db), "--json", *args)
        assert result.exit_code == 0, result.output
        return [r["execution_id"] for r in json.loads(result.stdout)]

    assert ids() == ["order-1", "order-2", "order-3"]
    assert ids("--status", "waiting") == ["order-1", "order-3"]
    assert ids("--exclusive-key", "alice") == ["order-1"]
    assert ids("--exclusive-key", "alice", "--status", "cancelled") == []
    assert ids("--agent", "bob") == ["order-2"]
    assert ids("--machine", "agent_session") == []
    assert ids("--limit", "1", "--offset", "1") == ["order-2"]
    assert ids("--waiting-for", "person") == ["order-1", "order-3"]
    assert ids("--waiting-for", "operator") == []
    page = run("executions", "list", "--db", str(db), "--limit", "2").stdout.splitlines()
    assert page[1].split()[-1] == "signal"  # order-1 waits for a signal (its approval)
    assert page[-3:] == [
        "1-2 of 3 execution(s); by status: cancelled 1, waiting 2",
        "more: --offset 2",
        (
            f"1 wait(s) for a signal: phronomy-fsm executions show ID --db {db} prints the "
            "signal command(s); 1 held by no live worker: what you send waits in the inbox "
            "until phronomy-fsm recover --app MODULE:FACTORY (or a worker) claims it"
        ),
    ]
    for args in (
        ("--agent", "a", "--exclusive-key", "b"),
        ("--waiting-for", "operator", "--status", "waiting"),
        ("--waiting-for", "nobody"),
    ):
        assert run("executions", "list", "--db", str(db), *args).exit_code == 2


def test_hostile_keys_and_wide_ids_are_escaped_in_tables(tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    wide = "order-" + "w" * 122
    start_orders(db, (wide, {"exclusive_key": "k\x1b[2J\nforged row\x07"}))
    table = run("executions", "list", "--db", str(db))
    assert table.exit_code == 0
    assert no_control_characters(table.stdout)
    lines = table.stdout.splitlines()
    assert len(lines) == 4  # header, one row, counts, hint: the newline did not split the row
    assert lines[1].startswith(wide + "  order_flow  waiting")
    assert "k\\x1b[2J\\nforged row\\x07" in lines[1]
    shown = run("executions", "show", wide, "--db", str(db))
    assert no_control_characters(shown.stdout)
    assert "exclusive_key: k\\x1b[2J\\nforged row\\x07" in shown.stdout
    as_json = json.loads(run("executions", "list", "--db", str(db), "--json").stdout)
    assert as_json[0]["exclusive_key"] == "k\x1b[2J\nforged row\x07"  # JSON keeps it exactly


@pytest.mark.skipif(not hasattr(os, "openpty"), reason="needs a pseudo-terminal")
def test_recover_draws_a_progress_bar_only_on_a_terminal(waiting_db: Path) -> None:
    import fcntl
    import struct
    import termios

    primary, secondary = os.openpty()
    fcntl.ioctl(secondary, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "phronomy_fsm.cli", "recover", "--db", str(waiting_db),
             "--app", APP],
            cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=secondary, timeout=120, check=False,
        )  # fmt: skip
        os.close(secondary)
        secondary = -1
        chunks = []
        while True:
            try:
                chunk = os.read(primary, 65536)
            except OSError:  # the terminal's other end is closed: all was read
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        if secondary != -1:
            os.close(secondary)
        os.close(primary)
    terminal = b"".join(chunks).decode(errors="replace")
    assert proc.returncode == 0, (proc.stdout, terminal)
    assert "at rest" in terminal and "\r" in terminal  # the bar, redrawn in place
    assert b"at rest" not in proc.stdout and b"\r" not in proc.stdout


def test_a_signal_with_app_reports_other_executions_its_recovery_parked(tmp_path: Path) -> None:
    # --app recovers the whole store: an order whose charge may have run parks for an
    # operator on the way; the command says so and exits 3, as `recover` would
    db = tmp_path / "store.db"
    start_orders(db, ("order-1", {}))
    kill_at(db, "offload:charge_card:after")  # order-a: charged, result not applied
    sent = run_process(
        "signal", "order-1", "approve", "--db", str(db), "--payload", '{"by": "ops"}',
        "--app", APP,
    )  # fmt: skip
    assert sent.returncode == 3, (sent.stdout, sent.stderr)
    assert "order-1  order_flow  completed in shipped" in sent.stdout
    assert "now waiting for an operator: 1" in sent.stdout
    assert "order-a  order_flow  recovery_required" in sent.stdout
    assert "phronomy-fsm resolve order-a" in sent.stdout
    assert record(db, "order-a").status.value == "recovery_required"


def test_an_app_that_does_not_run_the_executions_machine_is_refused(tmp_path: Path) -> None:
    # a fresh user named the demo's agent app for an order: the command recovered
    # nothing of the order, said the signal was recorded and exited 0
    db = tmp_path / "store.db"
    start_orders(db, ("order-1", {}))
    before = snapshot(db)
    for command in (
        ("signal", "order-1", "approve", "--payload", '{"by": "ops"}'),
        ("cancel", "order-1"),
    ):
        sent = run_process(*command, "--db", str(db), "--app", "phronomy_fsm.demo:create_app")
        assert sent.returncode == 1, (sent.stdout, sent.stderr)
        assert "runs the machines agent_session, tool_call, not order_flow" in sent.stderr
        assert "nothing was written" in sent.stderr
    assert snapshot(db) == before  # read back: no signal, no cancel, no worker row
    assert signals(db, "order-1") == []
