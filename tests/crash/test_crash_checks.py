"""The crash matrix's own parts, tested: the invariant checker fed deliberately
corrupted stores and logs, the operator's answers, crash-point enumeration and planning
(issue 6 item 5)."""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from crash_app import append_jsonl, decide_resolution, log_paths, read_jsonl
from crash_checks import EXTRA_CHECKS, INVARIANTS, check_run, snapshot
from crash_matrix import Plan, crash_points, parse_plan, plan_stage_one, plan_stage_two, summarize
from crash_scenarios import SCENARIOS

from phronomy_fsm.generated import agent_session, execution_admission, tool_invocation
from phronomy_fsm.runtime.faults import points_for

pytestmark = pytest.mark.timeout(180)


def nonzero(findings: Any) -> dict[str, int]:
    return {k: v for k, v in findings.counts.items() if v}


def finished(app_run: Any, tmp_path: Path, scenario: str) -> Path:
    """Run ``scenario`` to its end in a subprocess; return the database path."""
    db = tmp_path / "agents.db"
    proc = app_run("run", scenario, "--db", str(db))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["settled"] is True
    return db


def crashed(app_run: Any, tmp_path: Path, scenario: str, point: str) -> Path:
    db = tmp_path / "agents.db"
    proc = app_run("run", scenario, "--db", str(db), crash_at=point)
    assert proc.returncode == -9, (proc.returncode, proc.stderr)
    return db


def sql(db: Path, statement: str, *params: Any) -> None:
    with sqlite3.connect(db) as conn:
        conn.execute(statement, params)


def test_a_clean_run_has_no_findings(app_run: Any, tmp_path: Path) -> None:
    db = finished(app_run, tmp_path, "parallel_tools")
    findings = check_run(db, snapshots=[snapshot(db)], last_summary={"remaining": []})
    assert findings.ok and findings.details == []
    assert set(findings.counts) == set(INVARIANTS + EXTRA_CHECKS)


def test_an_execution_that_disappears_is_lost(app_run: Any, tmp_path: Path) -> None:
    db = finished(app_run, tmp_path, "plain_answer")
    before = snapshot(db)
    sql(db, "DELETE FROM executions WHERE execution_id = ?", "exec-plain_answer")
    findings = check_run(db, snapshots=[before], last_summary=None)
    assert findings.counts["lost"] == 2  # seen in a snapshot, and acknowledged as completed
    assert {d["execution_id"] for d in findings.details if d["invariant"] == "lost"} == {
        "exec-plain_answer"
    }


def test_an_acknowledgement_the_store_does_not_back_is_lost(app_run: Any, tmp_path: Path) -> None:
    db = finished(app_run, tmp_path, "plain_answer")
    acks = log_paths(db)["acks"]
    append_jsonl(
        acks,
        {
            "execution_id": "exec-plain_answer",
            "agent_id": "plain",
            "source": "invoke",
            "status": "rejected",
            "error": None,
        },
    )
    append_jsonl(
        acks,
        {
            "execution_id": "exec-plain_answer",
            "agent_id": "plain",
            "source": "invoke",
            "status": None,
            "error": "ExecutionFailedError",
        },
    )
    # a refusal is not an outcome: never counted
    append_jsonl(
        acks,
        {
            "execution_id": "exec-other",
            "agent_id": "plain",
            "source": "invoke",
            "status": None,
            "error": "AgentBusyError",
        },
    )
    findings = check_run(db, snapshots=[], last_summary=None)
    assert nonzero(findings) == {"lost": 2}


def test_a_second_terminal_barrier_is_double_terminal(app_run: Any, tmp_path: Path) -> None:
    db = finished(app_run, tmp_path, "plain_answer")
    sql(
        db,
        "INSERT INTO barriers(execution_id, revision, barrier, committed_epoch_ms, digest, status, state) VALUES (?,?,?,?,?,?,?)",
        "exec-plain_answer",
        3,
        "terminal_commit",
        0,
        "x",
        "failed",
        "failed",
    )
    findings = check_run(db, snapshots=[], last_summary=None)
    assert findings.counts["double_terminal"] == 1
    assert findings.counts["journal_inconsistent"] >= 1  # revisions 0..3 for an execution at 2


def test_a_terminal_status_that_changes_between_snapshots_is_double_terminal(
    app_run: Any, tmp_path: Path
) -> None:
    db = finished(app_run, tmp_path, "plain_answer")
    final = snapshot(db)
    earlier = {eid: dict(row, status="failed") for eid, row in final.items()}
    findings = check_run(db, snapshots=[earlier, final], last_summary=None)
    assert nonzero(findings) == {"double_terminal": 1}


def test_one_tool_call_under_two_keys_and_one_key_twice_are_duplicate_effects(
    app_run: Any, tmp_path: Path
) -> None:
    db = finished(app_run, tmp_path, "tool_cycle")
    effects = log_paths(db)["effects"]
    first = read_jsonl(effects)[0]
    append_jsonl(effects, dict(first, key="tool-another-key"))  # same call, new key
    findings = check_run(db, snapshots=[], last_summary=None)
    assert findings.counts["duplicate_effects"] == 1
    append_jsonl(effects, dict(first, t=first["t"] + 1))  # the same key ran again
    findings = check_run(db, snapshots=[], last_summary=None)
    assert findings.counts["duplicate_effects"] == 2
    assert findings.counts["blind_resends"] == 1  # the key was re-sent with no resolution between


def test_a_deduplicated_replay_is_not_a_duplicate_effect_but_is_a_resend(
    app_run: Any, tmp_path: Path
) -> None:
    db = finished(app_run, tmp_path, "parallel_tools")
    effects = log_paths(db)["effects"]
    charge = next(e for e in read_jsonl(effects) if e["tool"] == "charge")
    append_jsonl(effects, dict(charge, replayed=True, t=charge["t"] + 1))
    assert nonzero(check_run(db, snapshots=[], last_summary=None)) == {"blind_resends": 1}


def test_an_llm_call_sent_twice_is_a_blind_resend(app_run: Any, tmp_path: Path) -> None:
    db = finished(app_run, tmp_path, "plain_answer")
    llm = log_paths(db)["llm"]
    call = read_jsonl(llm)[0]
    append_jsonl(llm, dict(call, t=call["t"] + 1))
    assert nonzero(check_run(db, snapshots=[], last_summary=None)) == {"blind_resends": 1}


def test_a_resend_after_an_operator_resolution_is_not_blind(app_run: Any, tmp_path: Path) -> None:
    db = crashed(app_run, tmp_path, "tool_cycle", "offload:execute_tool:after")
    proc = app_run("recover", "--db", str(db))
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert [r["outcome"] for r in summary["resolutions"]] == ["succeeded"]
    key = summary["resolutions"][0]["subject"]["tool_invocation_id"]
    effects = log_paths(db)["effects"]
    original = next(e for e in read_jsonl(effects) if e["key"] == key)
    assert nonzero(check_run(db, snapshots=[], last_summary=summary)) == {}
    later = read_jsonl(effects)[-1]["t"] + 1  # after the resolution record
    append_jsonl(effects, dict(original, replayed=True, t=later))
    assert nonzero(check_run(db, snapshots=[], last_summary=summary)) == {}
    append_jsonl(effects, dict(original, replayed=True, t=later + 1))
    assert nonzero(check_run(db, snapshots=[], last_summary=summary)) == {"blind_resends": 1}


def test_an_active_execution_nobody_was_told_about_is_stuck(app_run: Any, tmp_path: Path) -> None:
    db = crashed(app_run, tmp_path, "plain_answer", "offload:call_llm:after")
    assert nonzero(check_run(db, snapshots=[], last_summary=None)) == {"stuck": 1}
    announced = {"remaining": [{"execution_id": "exec-plain_answer", "waiting_for": "operator"}]}
    assert nonzero(check_run(db, snapshots=[], last_summary=announced)) == {}


def test_a_suspended_execution_waiting_for_approval_is_not_stuck(
    app_run: Any, tmp_path: Path
) -> None:
    db = crashed(app_run, tmp_path, "approval_granted", "barrier:approval_decision:before")
    assert snapshot(db)["exec-approval_granted"]["status"] == "suspended"
    assert nonzero(check_run(db, snapshots=[], last_summary=None)) == {}


def test_journal_gaps_and_barrier_log_mismatches_are_journal_inconsistent(
    app_run: Any, tmp_path: Path
) -> None:
    db = finished(app_run, tmp_path, "tool_cycle")
    sql(db, "DELETE FROM journal WHERE sequence = 2")
    findings = check_run(db, snapshots=[], last_summary=None)
    assert findings.counts["journal_inconsistent"] == 2  # a gap, and the head != count
    other = tmp_path / "other"
    other.mkdir()
    db2 = finished(app_run, other, "plain_answer")
    sql(db2, "UPDATE barriers SET state = 'calling_llm' WHERE revision = 2")
    assert check_run(db2, snapshots=[], last_summary=None).counts["journal_inconsistent"] == 1
    sql(db2, "DELETE FROM barriers WHERE revision = 1")
    messages = [d["message"] for d in check_run(db2, snapshots=[], last_summary=None).details]
    assert "barrier revisions are not 0..revision" in messages


def test_an_agent_root_left_active_is_reported(app_run: Any, tmp_path: Path) -> None:
    db = finished(app_run, tmp_path, "plain_answer")
    sql(
        db, "UPDATE agents SET lifecycle = 'active', body = json_set(body, '$.lifecycle', 'active')"
    )
    findings = check_run(db, snapshots=[], last_summary=None)
    assert nonzero(findings) == {"agent_root_inconsistent": 1}
    assert findings.details[0]["expected"] == "idle"


def test_the_operator_answers_from_the_logs() -> None:
    tool_subject = {"type": "tool_invocation", "tool_invocation_id": "k1"}
    payload = {
        "subject": tool_subject,
        "allowed_outcomes": ["succeeded", "failed", "not_performed"],
    }
    effects = [
        {"key": "k1", "result": {"ok": 1}, "replayed": False},
        {"key": "k2", "result": {}, "replayed": True},
    ]
    assert decide_resolution(payload, effects, []) == {"outcome": "succeeded", "result": {"ok": 1}}
    assert decide_resolution(
        dict(payload, subject={"type": "tool_invocation", "tool_invocation_id": "k2"}), effects, []
    ) == {
        "outcome": "not_performed",
        "result": None,
    }
    llm = [{"llm_call_id": "c1", "response": {"content": "hi", "tool_calls": []}}]
    llm_payload = dict(payload, subject={"type": "llm_call", "llm_call_id": "c1"})
    assert decide_resolution(llm_payload, [], llm) == {
        "outcome": "succeeded",
        "result": {"content": "hi", "tool_calls": []},
    }
    assert decide_resolution(llm_payload, [], [])["outcome"] == "not_performed"
    execution = {
        "subject": {"type": "execution", "execution_id": "e"},
        "allowed_outcomes": ["failed", "not_performed"],
    }
    assert decide_resolution(execution, [], [])["outcome"] == "not_performed"
    assert decide_resolution({"subject": None, "allowed_outcomes": []}, [], []) is None


def test_crash_points_come_from_every_generated_table() -> None:
    tables = (agent_session.TABLE, execution_admission.TABLE, tool_invocation.TABLE)
    barriers = tuple(dict.fromkeys(b for t in tables for b in t.barriers))
    hooks = tuple(dict.fromkeys(h for t in tables for h in t.offload_hooks))
    points = crash_points()
    assert sorted(points) == sorted(points_for(barriers, hooks))
    assert len(points) == 3 * len(barriers) + len(hooks) == len(set(points))
    assert {
        "barrier:terminal_commit:during",
        "offload:execute_tool:after",
        "offload:call_llm:after",
    } <= set(points)


def _fake_result(
    scenario: str, crashes: tuple[Any, ...], stages: list[list[str]], killed: list[str]
) -> dict[str, Any]:
    return {
        "scenario": scenario,
        "crashes": list(crashes),
        "stages": [
            {"stage": i, "reached": s, "killed": i < len(killed), "seconds": 1.0, "returncode": 0}
            for i, s in enumerate(stages)
        ],
        "killed_points": killed,
        "counts": dict.fromkeys(INVARIANTS, 0),
        "violations": [],
        "kept": None,
    }


def test_quick_planning_targets_each_reachable_point_once_and_recovery_points_in_two_crashes() -> (
    None
):
    points = [
        "barrier:x:before",
        "barrier:x:during",
        "barrier:x:after",
        "barrier:r:before",
        "offload:h:after",
    ]
    baselines = {
        "s1": _fake_result("s1", (), [["barrier:x:before", "barrier:x:after"]], []),
        "s2": _fake_result(
            "s2", (), [["barrier:x:before", "barrier:x:after", "offload:h:after"]], []
        ),
    }
    plans = plan_stage_one(points, ["s1", "s2"], baselines, quick=True)
    targeted = Counter(p.crashes[0] for p in plans)
    assert set(targeted) == {
        "barrier:x:before",
        "barrier:x:during",
        "barrier:x:after",
        "offload:h:after",
    }
    assert set(targeted.values()) == {1}
    assert {p.scenario for p in plans} == {"s1", "s2"}  # spread over the scenarios
    ran = [
        _fake_result(
            "s1",
            ("barrier:x:after",),
            [["barrier:x:before", "barrier:x:after"], []],
            ["barrier:x:after"],
        ),
        _fake_result(
            "s2",
            ("offload:h:after",),
            [["offload:h:after"], ["barrier:r:before", "barrier:x:after"]],
            ["offload:h:after"],
        ),
    ]
    assert plan_stage_two(points, ran, quick=True) == [
        Plan("s2", ("offload:h:after", "barrier:r:before"))
    ]
    full = plan_stage_one(
        points, ["s1"], {"s1": _fake_result("s1", (), [["barrier:x:before"] * 2], [])}, quick=False
    )
    assert Plan("s1", ("barrier:x:before@2",)) in full and len(full) == len(points) + 1


def test_the_report_counts_not_wired_during_points_separately() -> None:
    points = ["barrier:x:before", "barrier:x:during", "barrier:x:after"]
    results = [
        _fake_result("s", ("barrier:x:before",), [["barrier:x:before"]], ["barrier:x:before"]),
        _fake_result("s", ("barrier:x:during",), [["barrier:x:before", "barrier:x:after"]], []),
        _fake_result(
            "s",
            ("barrier:x:after",),
            [["barrier:x:before", "barrier:x:after"]],
            ["barrier:x:after"],
        ),
    ]
    report = summarize(points, ["s"], results, quick=True, elapsed=0.0)
    assert report["not_wired"] == ["barrier:x:during"] and report["uncovered"] == []
    assert (report["runs"], report["killed_runs"], report["not_reached_runs"]) == (3, 2, 1)
    row = report["per_point"]["barrier:x:before"]
    assert (row["runs"], row["killed"], row["scenarios"], row["violations"]) == (1, 1, ["s"], 0)


def test_every_scenario_of_the_issue_is_defined() -> None:
    assert set(SCENARIOS) == {
        "plain_answer",
        "tool_cycle",
        "parallel_tools",
        "approval_granted",
        "approval_rejected",
        "cancellation",
        "timeout",
        "handoff",
    }


def test_a_run_label_parses_back_into_its_plan() -> None:
    plan = Plan(
        "tool_cycle", ("barrier:tool_dispatch:during@2", None, "barrier:recovery_resolution:during")
    )
    assert (
        plan.label()
        == "tool_cycle:barrier:tool_dispatch:during@2,-,barrier:recovery_resolution:during"
    )
    assert parse_plan(plan.label()) == plan
    assert parse_plan("plain_answer:") == Plan("plain_answer")
    with pytest.raises(ValueError, match="unknown scenario"):
        parse_plan("nope:barrier:x:before")


def test_a_barrier_row_the_chain_does_not_reach_is_inconsistent(
    app_run: Any, tmp_path: Path
) -> None:
    db = finished(app_run, tmp_path, "plain_answer")
    sql(db, "UPDATE barriers SET previous_seq = NULL WHERE revision = 2")
    findings = check_run(db, snapshots=[], last_summary=None)
    assert nonzero(findings) == {"journal_inconsistent": 1}
    (detail,) = findings.details
    assert detail["message"].startswith("the execution's barrier chain does not link")
    assert detail["chain"] == [2] and detail["rows"] == [0, 1, 2]
