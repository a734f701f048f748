"""What operators are told (issue 23 item 5), on real SQLite files through the CLI:
the shape a ``succeeded`` answer needs, from the execution's own machine; answering
many parked executions at once, each checked against its revision; ``executions
show`` with the context and how each wait ended (a signal or the timer); a wait no
live worker holds; timer events not offered as signals."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from phronomy_fsm.durable import DurableRuntime, ExecutionStatus, Machine
from phronomy_fsm.runtime.clock import ManualClock
from phronomy_fsm.store import SqliteBarrierStore
from phronomy_fsm.testing.deadlines import wait_until
from tests.durable.late_effect_app import TABLE as LATE_TABLE
from tests.durable.late_effect_app import Hooks as LateHooks
from tests.integration.test_operator_cli import (
    APP,
    kill_at,
    record,
    run,
    run_process,
    signals,
    snapshot,
    start_orders,
)


def test_show_prints_the_context_and_that_a_signal_ended_the_wait(tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    start_orders(db, ("order-1", {}))
    before = run("executions", "show", "order-1", "--db", str(db))
    assert before.exit_code == 0, before.output
    assert "wait: r3 waiting in awaiting_approval: still waiting\n" in before.stdout
    assert "context: {" in before.stdout and '"order_id": "order-1"' in before.stdout
    # the timer's event is the engine's: not offered as a signal to send
    assert "approval_expired" not in before.stdout.split("pending_effects:")[0]
    assert "no live worker holds it: what you send waits in its inbox" in before.stdout
    detail = json.loads(run("executions", "show", "order-1", "--db", str(db), "--json").stdout)
    assert detail["awaits"] == ["approve", "reject"]
    assert detail["held_by_no_live_worker"] is True
    assert detail["context"]["order_id"] == "order-1"

    sent = run("signal", "order-1", "approve", "--db", str(db), "--payload", '{"by": "ops"}')
    assert sent.exit_code == 0, sent.output
    done = run_process("recover", "--db", str(db), "--app", APP)
    assert done.returncode == 0, (done.stdout, done.stderr)
    after = json.loads(run("executions", "show", "order-1", "--db", str(db), "--json").stdout)
    assert [w["text"] for w in after["wait_endings"]] == [
        "r3 waiting in awaiting_approval: ended at r4 by signal #1 approve"
    ]
    assert after["wait_endings"][0]["cause"] == "signal"
    assert after["context"]["decision"] == {"by": "ops"}
    assert after["held_by_no_live_worker"] is False  # finished: nobody needs to hold it


def test_show_says_the_timer_ended_a_wait(tmp_path: Path) -> None:
    db = tmp_path / "late.db"
    two_hours_ago = datetime.now(UTC) - timedelta(hours=2)
    machine = Machine(
        LATE_TABLE,
        LateHooks(tmp_path / "ledger.jsonl"),
        final_status={"failed": ExecutionStatus.FAILED},
    )

    def runtime(**options: object) -> DurableRuntime:
        return DurableRuntime(SqliteBarrierStore(db), machines=[machine], own_store=True, **options)

    with runtime(clock=ManualClock(start_wall=two_hours_ago)) as late:
        handle = late.start("late_effect", {"order": "late-1"}, execution_id="late-1")
        wait_until(lambda: handle.record().status is ExecutionStatus.WAITING, 10, "the wait")
    with runtime() as now:  # its deadline passed in real time: the timer fires at recovery
        now.recover()
        wait_until(lambda: not now.store.load_record("late-1").is_active, 30, "the end")
    shown = run("executions", "show", "late-1", "--db", str(db))
    assert shown.exit_code == 0, shown.output
    [line] = [x for x in shown.stdout.splitlines() if x.startswith("wait: ")]
    assert line.endswith("by its timer (expired)"), line
    detail = json.loads(run("executions", "show", "late-1", "--db", str(db), "--json").stdout)
    assert [(w["cause"], w["event"]) for w in detail["wait_endings"]] == [("timer", "expired")]


def test_a_parked_effect_names_the_result_its_own_machine_declares(tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    kill_at(db, "offload:charge_card:after")
    recovered = run_process("recover", "--db", str(db), "--app", APP)
    assert recovered.returncode == 3, (recovered.stdout, recovered.stderr)
    needs = (
        "succeeded needs --result: JSON of type dict, delivered as the payload of event "
        "charged (The card was charged.)"
    )
    assert needs in recovered.stdout
    shown = run("executions", "show", "order-a", "--db", str(db))
    assert needs in shown.stdout and "e.g. --result '{}'" in shown.stdout
    detail = json.loads(run("executions", "show", "order-a", "--db", str(db), "--json").stdout)
    assert detail["recovery"]["result_shape"]["payload_type"] == "dict"
    assert detail["recovery"]["result_shape"]["event"] == "charged"
    # nothing of another machine: no LLM answer, no other app's fields
    help_text = run("resolve", "--help").stdout
    assert "tool_calls" not in help_text and "tool_calls" not in shown.stdout
    assert "charged_cents" not in shown.stdout


def _parked_orders(tmp_path: Path) -> Path:
    """Three orders parked (spec_changed, only ``failed`` allowed) with no live worker."""
    db = tmp_path / "store.db"
    start_orders(db, ("order-1", {}), ("order-2", {}), ("order-3", {}))
    parking = run_process(
        "recover", "--db", str(db), "--app",
        "tests.scaleout.upgrade_app:create_v2_without_migration", "--park-other-specs",
    )  # fmt: skip
    assert parking.returncode == 3, (parking.stdout, parking.stderr)
    return db


def test_resolve_all_and_a_file_of_answers_each_checked_against_its_revision(
    tmp_path: Path,
) -> None:
    db = _parked_orders(tmp_path)
    revisions = {i: record(db, f"order-{i}").revision for i in (1, 2, 3)}
    assert all(record(db, f"order-{i}").status.value == "recovery_required" for i in (1, 2, 3))

    unfiltered = run("resolve", "--all", "--db", str(db), "--outcome", "failed", "--error", "x")
    assert unfiltered.exit_code == 2 and "--all needs --machine, --state or --effect" in (
        unfiltered.stderr
    )
    before = snapshot(db)
    dry = run(
        "resolve", "--all", "--machine", "order_flow", "--db", str(db), "--outcome", "failed",
        "--error", "spec withdrawn", "--dry-run",
    )  # fmt: skip
    assert dry.exit_code == 0, dry.output
    assert dry.stdout.startswith("3 answer(s); --dry-run: nothing was written")
    assert snapshot(db) == before
    none = run(
        "resolve", "--all", "--effect", "charge_card", "--db", str(db), "--outcome", "failed",
        "--error", "x", "--dry-run",
    )  # fmt: skip
    assert none.stdout.startswith("0 answer(s)")  # parked as a whole, not at an effect

    answers = tmp_path / "answers.jsonl"
    answers.write_text(
        json.dumps({"execution_id": "order-1", "expected_revision": revisions[1],
                    "outcome": "failed", "error": "withdrawn"}) + "\n"
        + json.dumps({"execution_id": "order-2", "expected_revision": revisions[2] - 1,
                      "outcome": "failed", "error": "withdrawn"}) + "\n"
    )  # fmt: skip
    sent = run("resolve", "--answers", str(answers), "--db", str(db))
    assert sent.exit_code == 1, sent.output  # one was refused
    lines = sent.stdout.splitlines()
    assert lines[0].startswith(f"written  order-1  r{revisions[1]}  failed: waits for")
    assert lines[1].startswith(f"refused  order-2  r{revisions[2] - 1}  failed: ")
    assert f"at revision {revisions[2]}, not {revisions[2] - 1}" in lines[1]
    assert lines[-1] == "1 written, 1 refused"
    assert [s.kind.value for s in signals(db, "order-1")] == ["resolution"]
    assert signals(db, "order-2") == []  # refused: nothing written for it

    rest = run(
        "resolve", "--all", "--machine", "order_flow", "--state", record(db, "order-3").state,
        "--db", str(db), "--outcome", "failed", "--error", "withdrawn", "--json",
    )  # fmt: skip
    report = json.loads(rest.stdout)
    written = sorted(a["answer"]["execution_id"] for a in report["attempts"] if a["written"])
    assert written == ["order-2", "order-3"]  # order-1's answer waits in its inbox already
    assert [s.payload["outcome"] for s in signals(db, "order-3")] == ["failed"]

    bad = tmp_path / "bad.json"
    bad.write_text('[{"execution_id": "order-3", "outcome": "failed"}]')
    refused = run("resolve", "--answers", str(bad), "--db", str(db))
    assert refused.exit_code == 1
    assert "item 1: 'expected_revision' is missing; nothing was written" in refused.stderr
