"""The demo and the operator commands as separate processes, with real SIGKILLs
(issue 5 item 9, issue 6 items 1-3): a suspended execution survives the process, an
approval recorded by another process is continued by a third, and an execution killed
right after a tool's side effect is parked for an operator — never re-run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

CLI = [sys.executable, "-m", "phronomy_fsm.cli"]
APP = "phronomy_fsm.demo:create_app"


def run(
    *args: str, crash_at: str | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("PHRONOMY_CRASH_AT", None)
    if crash_at:
        env["PHRONOMY_CRASH_AT"] = crash_at
    proc = subprocess.run(
        [*CLI, *args], capture_output=True, text=True, env=env, timeout=120, check=False
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{args} exited {proc.returncode}\nstdout:{proc.stdout}\nstderr:{proc.stderr}"
        )
    return proc


def start_demo(db: Path) -> tuple[str, str]:
    out = run("demo", "--db", str(db)).stdout
    execution = next(
        line.split(": ", 1)[1] for line in out.splitlines() if line.startswith("execution_id: ")
    )
    request = next(
        line.split(": ", 1)[1]
        for line in out.splitlines()
        if line.startswith("approval_request_id: ")
    )
    return execution, request


def resolve_cli(
    db: Path, execution: str, revision: Any, subject: str, outcome: str, *extra: str, **kw: Any
) -> subprocess.CompletedProcess[str]:
    """``phronomy-fsm resolve`` of ``execution`` with the demo app."""
    return run(
        "resolve",
        execution,
        "--db",
        str(db),
        "--app",
        APP,
        "--expected-revision",
        str(revision),
        "--subject",
        subject,
        "--outcome",
        outcome,
        *extra,
        **kw,
    )


def ledger(db: Path) -> list[dict[str, Any]]:
    path = db.with_name(db.stem + "-refunds.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def show(db: Path, execution: str) -> dict[str, Any]:
    return json.loads(run("executions", "show", execution, "--db", str(db), "--json").stdout)


def test_main_job_sequence_across_three_processes(tmp_path: Path) -> None:
    db = tmp_path / "demo.db"
    execution, request = start_demo(db)
    stored = show(db, execution)
    assert (stored["status"], stored["phase"]) == ("suspended", "approval")
    assert ledger(db) == []
    run("approve", execution, "--request", request, "--db", str(db))
    out = run("demo", "--resume", "--db", str(db)).stdout
    assert "status: completed" in out and "answer: Done: I refunded $25.00" in out
    assert "rev 8: terminal_commit" in out
    assert len(ledger(db)) == 1
    final = show(db, execution)
    assert (
        final["status"] == "completed"
        and [b["barrier"] for b in final["barriers"]][-1] == "terminal_commit"
    )


def test_rejection_from_another_process(tmp_path: Path) -> None:
    db = tmp_path / "demo.db"
    execution, request = start_demo(db)
    decided = run("approve", execution, "--request", request, "--db", str(db), "--reject").stdout
    assert "the execution ends as rejected when its agent is loaded again" in decided
    out = run("demo", "--resume", "--db", str(db)).stdout
    assert "status: rejected" in out
    assert ledger(db) == []
    assert show(db, execution)["status"] == "rejected"


def test_bad_approvals_are_refused_and_change_nothing(tmp_path: Path) -> None:
    db = tmp_path / "demo.db"
    execution, request = start_demo(db)
    before = show(db, execution)
    wrong = run("approve", execution, "--request", "nope", "--db", str(db), check=False)
    assert (
        wrong.returncode == 1
        and "does not match" in wrong.stderr
        and "Traceback" not in wrong.stderr
    )
    missing = run(
        "approve", "no-such-execution", "--request", request, "--db", str(db), check=False
    )
    assert missing.returncode == 1 and "Traceback" not in missing.stderr
    assert show(db, execution) == before
    not_a_db = tmp_path / "notes.db"
    not_a_db.write_bytes(b"these are not the droids" * 100)
    bad = run("approve", execution, "--request", request, "--db", str(not_a_db), check=False)
    assert bad.returncode == 1 and "Traceback" not in bad.stderr
    assert not_a_db.read_bytes() == b"these are not the droids" * 100


def test_two_processes_approving_at_once_one_wins(tmp_path: Path) -> None:
    db = tmp_path / "demo.db"
    execution, request = start_demo(db)
    env = {k: v for k, v in os.environ.items() if k != "PHRONOMY_CRASH_AT"}
    procs = [
        subprocess.Popen(
            [*CLI, "approve", execution, "--request", request, "--db", str(db)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(2)
    ]
    codes = sorted(p.wait(60) for p in procs)
    assert codes == [0, 1]
    stored = show(db, execution)
    assert (
        stored["revision"] == 5
        and [b["barrier"] for b in stored["barriers"]].count("approval_decision") == 1
    )


def test_killed_after_the_tool_effect_then_resolved_by_an_operator(tmp_path: Path) -> None:
    db = tmp_path / "demo.db"
    execution, request = start_demo(db)
    run("approve", execution, "--request", request, "--db", str(db))
    killed = run(
        "demo", "--resume", "--db", str(db), crash_at="offload:execute_tool:after", check=False
    )
    assert killed.returncode == -signal.SIGKILL
    assert len(ledger(db)) == 1  # the refund happened, its result was never applied
    parked = run("demo", "--resume", "--db", str(db), check=False)
    assert (
        parked.returncode == 3  # needs an operator (README "Exit codes")
        and "needs an operator decision" in parked.stderr
        and "phronomy-fsm resolve" in parked.stderr
    )
    assert len(ledger(db)) == 1  # not re-sent on restart
    recovered = run("recover", "--db", str(db), "--app", APP, "--json", check=False)
    assert recovered.returncode == 3, recovered.stderr  # an execution awaits an operator
    summary = json.loads(recovered.stdout)["recovered"][0]
    assert (
        summary["state"] == "recovery_required" and summary["subject"]["type"] == "tool_invocation"
    )
    refund = ledger(db)[0]
    assert summary["subject"]["tool_invocation_id"] == refund["idempotency_key"]
    stale = resolve_cli(
        db,
        execution,
        str(summary["execution_revision"] - 1),
        f"tool_invocation:{refund['idempotency_key']}",
        "succeeded",
        "--result",
        "{}",
        check=False,
    )
    assert stale.returncode == 1 and "revision" in stale.stderr
    before = show(db, execution)
    for bad in ("NaN", "1e999", "NaN"):  # refused results: an error, never a success
        refused = resolve_cli(
            db,
            execution,
            str(summary["execution_revision"]),
            f"tool_invocation:{refund['idempotency_key']}",
            "succeeded",
            "--result",
            bad,
            check=False,
        )
        assert refused.returncode == 1 and refused.stderr.startswith("error:"), refused
        assert "Traceback" not in refused.stderr
    assert show(db, execution)["revision"] == before["revision"]
    for factory, message in (
        ("create_app", "no provider configured"),
        ("not_a_dict", "must return a dict"),
    ):
        broken = run(
            "recover",
            "--db",
            str(db),
            "--app",
            f"tests.integration.failing_app:{factory}",
            "--json",
            check=False,
        )
        assert broken.returncode == 1 and "Traceback" not in broken.stderr
        [entry] = json.loads(broken.stdout)["recovered"]
        assert entry["state"] == "not_loaded" and message in entry["error"]
    assert show(db, execution)["revision"] == before["revision"]
    done = resolve_cli(
        db,
        execution,
        str(summary["execution_revision"]),
        f"tool_invocation:{refund['idempotency_key']}",
        "succeeded",
        "--result",
        json.dumps({"refund_id": refund["refund_id"], "amount": refund["amount"]}),
    )
    assert json.loads(done.stdout)["state"] == "completed"
    stored = show(db, execution)
    assert stored["status"] == "completed" and "recovery_resolution" in [
        b["barrier"] for b in stored["barriers"]
    ]
    assert len(ledger(db)) == 1
    # the same answer again: the execution already finished, and the refusal says so
    # (issue 11 item 10f), without writing anything
    repeated = resolve_cli(
        db,
        execution,
        str(summary["execution_revision"]),
        f"tool_invocation:{refund['idempotency_key']}",
        "succeeded",
        "--result",
        "{}",
        check=False,
    )
    assert repeated.returncode == 1 and repeated.stderr.startswith("error:")
    assert "already finished" in repeated.stderr and "completed" in repeated.stderr
    assert "in this process" not in repeated.stderr
    assert show(db, execution)["revision"] == stored["revision"]


def test_killed_before_the_terminal_commit_and_resolved_not_performed(tmp_path: Path) -> None:
    db = tmp_path / "demo.db"
    execution, request = start_demo(db)
    run("approve", execution, "--request", request, "--db", str(db))
    killed = run(
        "demo", "--resume", "--db", str(db), crash_at="barrier:terminal_commit:before", check=False
    )
    assert killed.returncode == -signal.SIGKILL
    recovered = run("recover", "--db", str(db), "--app", APP, "--json", check=False)
    assert recovered.returncode == 3, recovered.stderr
    summary = json.loads(recovered.stdout)["recovered"][0]
    assert summary["subject"]["type"] == "llm_call"
    out = resolve_cli(
        db,
        execution,
        str(summary["execution_revision"]),
        f"llm_call:{summary['subject']['llm_call_id']}",
        "not_performed",
    ).stdout
    assert json.loads(out)["state"] == "failed"
    stored = show(db, execution)
    assert stored["status"] == "failed"
    assert len(ledger(db)) == 1  # the refund of the earlier step stays done exactly once


@pytest.mark.parametrize(
    "point",
    ["barrier:suspension:after", "barrier:initial_preparation:before", "barrier:admission:after"],
)
def test_killed_on_the_way_to_suspension_comes_back_waiting(tmp_path: Path, point: str) -> None:
    db = tmp_path / "demo.db"
    killed = run("demo", "--db", str(db), crash_at=point, check=False)
    assert killed.returncode == -signal.SIGKILL
    execution, request = start_demo(db)  # recovers (replays preparation if needed) and suspends
    run("approve", execution, "--request", request, "--db", str(db))
    assert "status: completed" in run("demo", "--resume", "--db", str(db)).stdout
    assert len(ledger(db)) == 1


def test_resume_after_a_crash_at_admission_stops_at_the_approval(tmp_path: Path) -> None:
    # the recovered continuation comes to rest waiting for approval: --resume says so
    # and names the request instead of waiting for an end that needs a person
    db = tmp_path / "demo.db"
    killed = run("demo", "--db", str(db), crash_at="barrier:admission:after", check=False)
    assert killed.returncode == -signal.SIGKILL
    resumed = run("demo", "--resume", "--db", str(db), "--wait-seconds", "60")
    assert "approval_request_id: " in resumed.stdout and "next: phronomy-fsm approve" in (
        resumed.stdout
    )
    execution = next(
        line.split(": ", 1)[1]
        for line in resumed.stdout.splitlines()
        if line.startswith("execution_id: ")
    )
    assert show(db, execution)["status"] == "suspended"


def test_recover_reports_an_execution_another_process_finished_meanwhile(tmp_path: Path) -> None:
    # this recover lists the approved execution as active, then (in its --app factory)
    # another recover finishes it: loading finds nothing to continue, so it reports the
    # stored outcome at once instead of waiting --wait-seconds for events
    db = tmp_path / "demo.db"
    execution, request = start_demo(db)
    run("approve", execution, "--request", request, "--db", str(db))
    out = run(
        "recover",
        "--db",
        str(db),
        "--app",
        "tests.integration.racing_app:create_app",
        "--wait-seconds",
        "600",  # a wait for events that never come would hit run()'s 120 s timeout
        "--json",
    )
    [entry] = json.loads(out.stdout)["recovered"]
    assert entry["execution_id"] == execution and entry["state"] == "completed"
    assert show(db, execution)["status"] == "completed"
    assert len(ledger(db)) == 1  # the refund ran once
