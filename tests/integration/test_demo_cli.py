"""The demo and the operator commands as separate processes, with real SIGKILLs: an
execution waiting for approval survives its process, a decision recorded by another
process is applied by a third, and an execution killed right after a tool's side
effect waits for an operator — never re-run — who is told the exact command to run.

Every process is a real ``python -m phronomy_fsm.cli``; kills are SIGKILLs at the
library's crash points (the demo's hidden ``--crash-at`` hands a fault plan to its
runtime and store); every refusal is checked to write nothing by reading the store
back.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

CLI = [sys.executable, "-m", "phronomy_fsm.cli"]
APP = "phronomy_fsm.demo:create_app"
ROOT = Path(__file__).resolve().parents[2]
ENV = {
    **{k: v for k, v in os.environ.items() if k != "PHRONOMY_CRASH_AT"},
    "PYTHONPATH": str(ROOT),
}


def run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [*CLI, *args], capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=120, check=False
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{args} exited {proc.returncode}\nstdout:{proc.stdout}\nstderr:{proc.stderr}"
        )
    return proc


def field(out: str, name: str) -> str:
    return next(line.split(": ", 1)[1] for line in out.splitlines() if line.startswith(name + ": "))


def start_demo(db: Path) -> tuple[str, str]:
    out = run("demo", "--db", str(db)).stdout
    assert "event: approval_required for issue_refund" in out
    return field(out, "execution_id"), field(out, "approval_request_id")


def ledger(db: Path) -> list[dict[str, Any]]:
    path = db.with_name(db.stem + "-refunds.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def show(db: Path, execution: str) -> dict[str, Any]:
    return json.loads(run("executions", "show", execution, "--db", str(db), "--json").stdout)


def snapshot(db: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every row an operator command could write (workers aside: a read-write open
    registers none), read with plain sqlite3."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return {
            table: conn.execute(f"SELECT * FROM {table} ORDER BY 1, 2").fetchall()
            for table in ("executions", "barriers", "signals", "execution_journal")
        }
    finally:
        conn.close()


def commands(out: str, prefix: str) -> list[str]:
    return [line.strip() for line in out.splitlines() if line.strip().startswith(prefix)]


def test_main_job_sequence_across_three_processes(tmp_path: Path) -> None:
    db = tmp_path / "demo.db"
    execution, request = start_demo(db)
    stored = show(db, execution)
    assert (stored["status"], stored["state"], stored["waits_for"]) == (
        "waiting",
        "suspended",
        "approval",
    )
    approval = stored["agent"]["approval"]
    assert approval["request_id"] == request
    assert [i["tool_name"] for i in approval["items"]] == ["issue_refund"]
    assert approval["approve_commands"][0] == (
        f"phronomy-fsm approve {execution} --request {request} --db {db}"
    )
    assert ledger(db) == []
    decided = run("approve", execution, "--request", request, "--db", str(db)).stdout
    assert decided.startswith(f"approved request {request}: signal #")
    assert "no process runs it now" in decided
    assert show(db, execution)["status"] == "waiting"  # only the inbox moved
    out = run("demo", "--resume", "--db", str(db)).stdout
    assert "status: completed" in out and "answer: Done: I refunded $25.00" in out
    assert out.splitlines()[-1].split()[:3] == ["r7", "@final", "completed/completed"]
    assert len(ledger(db)) == 1
    final = show(db, execution)
    assert final["status"] == "completed" and final["barriers"][-1]["barrier"] == "@final"
    assert final["agent"]["output"].startswith("Done: I refunded $25.00")
    assert [j["kind"] for j in final["journal"]][:2] == ["input_received", "user_message"]


def test_rejection_from_another_process(tmp_path: Path) -> None:
    db = tmp_path / "demo.db"
    execution, request = start_demo(db)
    decided = run("approve", execution, "--request", request, "--db", str(db), "--reject").stdout
    assert decided.startswith(f"rejected request {request}: signal #")
    out = run("demo", "--resume", "--db", str(db)).stdout
    assert "status: rejected" in out
    assert ledger(db) == []
    assert show(db, execution)["agent"]["outcome"] == "rejected"


def test_bad_approvals_are_refused_and_change_nothing(tmp_path: Path) -> None:
    db = tmp_path / "demo.db"
    execution, request = start_demo(db)
    before = snapshot(db)
    for args, needle in (
        (("approve", execution, "--request", "nope"), "does not match the pending request"),
        (("approve", "no-such-execution", "--request", request), "does not exist"),
        (("approve", execution, "--request", request, "--item", "tool-x=approve"), "not in"),
        (("approve", execution, "--request", request, "--item", "x=maybe"), "--item"),
        (("signal", execution, "approval_decided", "--payload", "{}"), "phronomy-fsm approve"),
        (("signal", execution, "tool_finished"), "not sent by hand"),
    ):
        refused = run(*args, "--db", str(db), check=False)
        assert refused.returncode in (1, 2), refused
        assert needle in refused.stderr and "Traceback" not in refused.stderr, refused.stderr
    assert snapshot(db) == before
    not_a_db = tmp_path / "notes.db"
    not_a_db.write_bytes(b"these are not the droids" * 100)
    bad = run("approve", execution, "--request", request, "--db", str(not_a_db), check=False)
    assert bad.returncode == 1 and "Traceback" not in bad.stderr
    assert not_a_db.read_bytes() == b"these are not the droids" * 100


def test_approving_twice_says_already_decided(tmp_path: Path) -> None:
    db = tmp_path / "demo.db"
    execution, request = start_demo(db)
    run("approve", execution, "--request", request, "--db", str(db))
    before = snapshot(db)
    again = run("approve", execution, "--request", request, "--db", str(db), check=False)
    assert again.returncode == 1
    assert again.stderr.startswith("error: ") and "already decided" in again.stderr
    assert "not suspended" not in again.stderr
    assert snapshot(db) == before
    run("demo", "--resume", "--db", str(db))  # the first decision is applied
    after = snapshot(db)
    late = run("approve", execution, "--request", request, "--db", str(db), "--reject", check=False)
    assert late.returncode == 1 and "already decided" in late.stderr, late.stderr
    assert snapshot(db) == after


def test_two_processes_approving_at_once_one_wins(tmp_path: Path) -> None:
    db = tmp_path / "demo.db"
    execution, request = start_demo(db)
    procs = [
        subprocess.Popen(
            [*CLI, "approve", execution, "--request", request, "--db", str(db), *extra],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=ENV,
        )
        for extra in ((), ("--reject",))
    ]
    outcomes = [(p.wait(60), p.stderr.read() if p.stderr else "") for p in procs]
    for p in procs:
        for stream in (p.stdout, p.stderr):
            if stream is not None:
                stream.close()
    assert sorted(code for code, _ in outcomes) == [0, 1]
    assert any("already decided" in err for code, err in outcomes if code == 1)
    decisions = [s for s in show(db, execution)["signals"] if s["event"] == "approval_decided"]
    assert len(decisions) == 1  # one decision in the inbox: the winner's


def test_killed_after_the_tool_effect_then_resolved_by_an_operator(tmp_path: Path) -> None:
    db = tmp_path / "demo.db"
    execution, request = start_demo(db)
    run("approve", execution, "--request", request, "--db", str(db))
    killed = run(
        "demo", "--resume", "--db", str(db), "--crash-at", "offload:execute_tool:after", check=False
    )
    assert killed.returncode == -signal.SIGKILL
    [refund] = ledger(db)  # the refund happened; its result was never applied
    parked = run("demo", "--resume", "--db", str(db), check=False)
    assert parked.returncode == 3, parked  # waits for an operator (docs/operations.md)
    assert "waits for an operator" in parked.stdout
    tool_call = refund["idempotency_key"]  # the tool call's id is its idempotency key
    assert f"subject: tool call {tool_call} of agent support-demo: issue_refund" in parked.stdout
    prefix = f"phronomy-fsm resolve {tool_call} --db {db} --app {APP} --expected-revision"
    printed = commands(parked.stdout, prefix)
    assert [c.split(" --outcome ")[1].split()[0] for c in printed] == [
        "succeeded",
        "failed",
        "not_performed",
        "retry",
    ]
    assert f"--subject tool_invocation:{tool_call}" in printed[0]
    assert len(ledger(db)) == 1  # not re-sent on restart

    recovered = run("recover", "--db", str(db), "--app", APP, "--json", check=False)
    assert recovered.returncode == 3, recovered.stderr
    entries = {e["execution_id"]: e for e in json.loads(recovered.stdout)["executions"]}
    assert entries[execution]["at_rest"] is True  # waits for its tool call
    request_ = entries[tool_call]["recovery"]
    assert request_["agent_subject"]["type"] == "tool_invocation"
    assert request_["agent_subject"]["arguments"]["order_id"] == "A1001"
    assert request_["parent_execution_id"] == execution
    assert request_["resolve_commands"] == printed
    revision = request_["expected_revision"]

    before = snapshot(db)
    words = shlex.split(printed[0])
    for value, needle in (
        ("<the tool result as JSON>", "--result must be JSON"),  # pasted unchanged
        ("NaN", "not storable JSON"),
        ("1e999", "not storable JSON"),
    ):
        words[words.index("--result") + 1] = value
        refused = run(*words[1:], check=False)
        assert refused.returncode == 1 and refused.stderr.startswith("error:"), refused
        assert needle in refused.stderr and "Traceback" not in refused.stderr
    stale = run(*[w if w != str(revision) else str(revision - 1) for w in words[1:-2]],
                "--result", "{}", check=False)  # fmt: skip
    assert stale.returncode == 1 and "revision" in stale.stderr
    for factory, message in (
        ("create_app", "no provider configured"),
        ("not_an_app", "not a phronomy_fsm.durable.app.DurableApp"),
        ("agent_factory", "takes the store path"),
    ):
        broken = run(
            "recover", "--db", str(db), "--app", f"tests.integration.failing_app:{factory}",
            check=False,
        )  # fmt: skip
        assert broken.returncode == 1 and "Traceback" not in broken.stderr
        assert message in broken.stderr and broken.stderr.startswith("error: ")
    assert snapshot(db) == before

    words[words.index("--result") + 1] = json.dumps(
        {"refund_id": refund["refund_id"], "amount": refund["amount"]}
    )
    done = run(*words[1:], "--json")
    answer = json.loads(done.stdout)
    assert answer["execution"]["status"] == "completed"  # the tool call
    assert [p["status"] for p in answer["parents"]] == ["completed"]  # and the agent's execution
    stored = show(db, execution)
    assert stored["status"] == "completed" and "refunded" in stored["agent"]["output"]
    assert len(ledger(db)) == 1
    # the same answer again: the tool call already finished, and the refusal says so
    after = snapshot(db)
    repeated = run(*words[1:], check=False)
    assert repeated.returncode == 1 and repeated.stderr.startswith("error:")
    assert "already finished" in repeated.stderr and "completed" in repeated.stderr
    assert snapshot(db) == after


def test_killed_before_the_final_commit_and_resolved_not_performed(tmp_path: Path) -> None:
    db = tmp_path / "demo.db"
    execution, request = start_demo(db)
    run("approve", execution, "--request", request, "--db", str(db))
    killed = run(
        "demo", "--resume", "--db", str(db), "--crash-at", "barrier:@final:before@2", check=False
    )
    assert killed.returncode == -signal.SIGKILL
    recovered = run("recover", "--db", str(db), "--app", APP, check=False)
    assert recovered.returncode == 3, recovered.stderr
    assert "subject: LLM call " in recovered.stdout  # the last call may have been answered
    [command] = commands(recovered.stdout, f"phronomy-fsm resolve {execution} --db")[2:3]
    assert "--subject llm_call:" in command and command.endswith("--outcome not_performed")
    out = run(*shlex.split(command)[1:]).stdout
    assert f"{execution}  agent_session  failed in failed" in out
    assert show(db, execution)["status"] == "failed"
    assert len(ledger(db)) == 1  # the refund of the earlier step stays done exactly once


@pytest.mark.parametrize(
    "point",
    ["barrier:@wait:after", "barrier:initial_preparation:before", "barrier:@start:after"],
)
def test_killed_on_the_way_to_the_approval_comes_back_waiting(tmp_path: Path, point: str) -> None:
    db = tmp_path / "demo.db"
    killed = run("demo", "--db", str(db), "--crash-at", point, check=False)
    assert killed.returncode == -signal.SIGKILL
    out = run("demo", "--db", str(db)).stdout  # resumes the execution the crash left
    assert "(resumed the execution an earlier run left)" in out
    execution, request = field(out, "execution_id"), field(out, "approval_request_id")
    run("approve", execution, "--request", request, "--db", str(db))
    assert "status: completed" in run("demo", "--resume", "--db", str(db)).stdout
    assert len(ledger(db)) == 1


def test_resume_after_a_crash_at_the_start_stops_at_the_approval(tmp_path: Path) -> None:
    # the recovered execution comes to rest waiting for approval: --resume says so and
    # names the request instead of waiting for an end that needs a person
    db = tmp_path / "demo.db"
    killed = run("demo", "--db", str(db), "--crash-at", "barrier:@start:after", check=False)
    assert killed.returncode == -signal.SIGKILL
    resumed = run("demo", "--resume", "--db", str(db), "--wait-seconds", "60")
    assert "approval_request_id: " in resumed.stdout
    assert "next: phronomy-fsm approve" in resumed.stdout
    assert show(db, field(resumed.stdout, "execution_id"))["status"] == "waiting"


def test_recover_reports_an_execution_another_process_finished_meanwhile(tmp_path: Path) -> None:
    # in its --app factory another recover finishes the approved execution: this one
    # then has nothing to claim and says so at once instead of waiting --wait-seconds
    db = tmp_path / "demo.db"
    execution, request = start_demo(db)
    run("approve", execution, "--request", request, "--db", str(db))
    out = run(
        "recover", "--db", str(db), "--app", "tests.integration.racing_app:create_app",
        "--wait-seconds", "600", "--json",
    )  # fmt: skip
    assert json.loads(out.stdout)["executions"] == []
    assert show(db, execution)["status"] == "completed"
    assert len(ledger(db)) == 1  # the refund ran once


def test_demo_usage_and_store_errors(tmp_path: Path) -> None:
    missing = tmp_path / "missing.db"
    resumed = run("demo", "--resume", "--db", str(missing), check=False)
    assert resumed.returncode == 1 and "does not exist" in resumed.stderr
    assert not missing.exists()
    typo = run("demo", "--db", str(tmp_path / "x.db"), "--crash-at", "nowhere", check=False)
    assert typo.returncode == 2 and "not a crash point name" in typo.stderr
