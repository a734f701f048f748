"""The agent crash matrix's own parts, tested: its invariant checks fed deliberately
corrupted stores and records of the outside world, and its operator's answers read from
those records after a real kill."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import agent_crash_checks
import durable_crash
import pytest

from phronomy_fsm.durable.records import ExecutionStatus
from phronomy_fsm.store.open import open_store
from tools.agent_crash_app import Effects, execution_id_of, operator_answer

from .conftest import APP, harness

pytestmark = pytest.mark.timeout(120)

Finished = Callable[[str], Path]


def findings(folder: Path) -> dict[str, int]:
    """The agent checks' counts that are not 0."""
    counts = agent_crash_checks.check_run(str(folder / "store.db"), folder)
    return {k: v for k, v in counts.items() if v}


def generic(folder: Path) -> dict[str, int]:
    """The generic checks' counts that are not 0."""
    counts = durable_crash.check_run(APP, folder)
    return {k: v for k, v in counts.items() if v}


def append(path: Path, entry: dict[str, Any]) -> None:
    with path.open("a") as out:
        out.write(json.dumps(entry) + "\n")


def entries(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def sql(folder: Path, statement: str, *params: Any) -> int:
    """Edit the store behind its back (a defect for the checks to find). Its commit
    mark would rightly take deleted rows for a rollback and refuse the store
    (docs/store.md "Files"), so the mark goes with the edit."""
    with sqlite3.connect(folder / "store.db") as conn:
        changed = conn.execute(statement, params).rowcount
    (folder / "store.db-mark").unlink(missing_ok=True)
    return changed


def test_a_clean_run_has_no_findings_and_a_second_invoke_completes(finished: Finished) -> None:
    folder = finished("parallel_tools")
    assert findings(folder) == {} and generic(folder) == {}
    assert json.loads((folder / "agent-checks.json").read_text()) == []
    with open_store(str(folder / "store.db"), read_only=True) as store:
        again = store.load_record("again-a-parallel-1")
    assert again.status is ExecutionStatus.COMPLETED


def test_an_llm_call_sent_twice_is_found(finished: Finished) -> None:
    folder = finished("tool_cycle")
    llm = Effects.beside(str(folder / "store.db")).llm.path
    append(llm, entries(llm)[0])  # the same call, the same attempt, once more
    assert findings(folder) == {"llm_sent_twice": 1}
    assert generic(folder) == {"duplicate_effects": 1}


def test_a_tool_call_sent_twice_is_found(finished: Finished) -> None:
    folder = finished("parallel_tools")
    tools = Effects.beside(str(folder / "store.db")).tools.path
    charge = next(e for e in entries(tools) if e["tool"] == "charge")
    append(tools, dict(charge, attempt=2))  # a later attempt nobody allowed
    assert findings(folder) == {"tool_sent_twice": 1}
    assert generic(folder) == {"blind_resends": 1}


def test_idempotent_repeats_are_fine_but_a_new_key_is_not(finished: Finished) -> None:
    folder = finished("parallel_tools")
    effects = Effects.beside(str(folder / "store.db"))
    ticket = next(e for e in entries(effects.tools.path) if e["tool"] == "open_ticket")
    append(effects.tools.path, dict(ticket, replayed=True))  # the same key again: allowed
    assert findings(folder) == {}
    append(effects.tools.path, dict(ticket, key="tool-another-key"))
    first_call = entries(effects.llm.path)[0]
    append(effects.llm.path, dict(first_call, key="another-llm-call-id"))
    assert findings(folder) == {"resent_new_key": 2}


def test_a_transcript_missing_or_journaled_twice_is_found(finished: Finished) -> None:
    folder = finished("tool_cycle")
    eid = execution_id_of("tool_cycle")
    renamed = sql(
        folder,
        "UPDATE execution_journal SET kind = 'x', body = json_set(body, '$.kind', 'x')"
        " WHERE kind = 'input_received'",
    )
    assert renamed == 1
    assert findings(folder) == {"journal_not_once": 1}
    other = finished("parallel_tools")
    sql(
        other,
        "INSERT INTO execution_journal(execution_id, revision, position, kind, body)"
        " SELECT execution_id, revision + 100, position, kind, body FROM execution_journal"
        " WHERE execution_id = ?",
        execution_id_of("parallel_tools"),
    )
    assert findings(other) == {"journal_not_once": 1, "history_mismatch": 1}
    assert eid  # the first run's execution is named by the scenario


def test_a_history_that_is_not_the_conversations_is_found(finished: Finished) -> None:
    folder = finished("tool_cycle")
    changed = sql(
        folder,
        "UPDATE execution_journal SET body = json_set(body, '$.data.context', json('false'))"
        " WHERE kind = 'tool_message'",
    )
    assert changed == 1
    assert findings(folder) == {"history_mismatch": 1}


def test_a_handoff_whose_target_never_started_is_found(finished: Finished) -> None:
    folder = finished("handoff")
    with open_store(str(folder / "store.db"), read_only=True) as store:
        source = store.load_record(execution_id_of("handoff"))
    target = source.context["handoff"]["target_execution_id"]
    for table in ("execution_journal", "barriers", "signals", "executions"):
        sql(folder, f"DELETE FROM {table} WHERE execution_id = ?", target)
    assert findings(folder) == {"handoff_lost": 1}


def test_an_invoke_that_does_not_see_the_history_is_found(finished: Finished) -> None:
    folder = finished("tool_cycle")
    found = agent_crash_checks.Findings()
    effects = Effects.beside(str(folder / "store.db"))
    wrong = [{"role": "user", "content": "a history that is not the agent's"}]
    agent_crash_checks._invoke_again(str(folder / "store.db"), effects, "a-cycle", wrong, found)
    assert found.counts["second_invoke_failed"] == 1


@pytest.mark.parametrize(
    ("scenario", "point", "subject", "answer"),
    [
        ("tool_cycle", "effect:call_llm:before", "call_llm", "retry"),
        ("tool_cycle", "offload:call_llm:after", "call_llm", "succeeded"),
        ("tool_cycle", "offload:execute_tool:after", "execute_tool", "succeeded"),
        ("tool_raises", "barrier:@final:before", "execute_tool", "failed"),
    ],
)
def test_the_operator_answers_from_the_records_of_the_outside_world(
    tmp_path: Path, scenario: str, point: str, subject: str, answer: str
) -> None:
    """Killed at ``point``, then recovered by a process that stops as soon as it is at
    rest: the execution waits for an operator, who answers from the records."""
    assert harness("run", tmp_path, scenario, crash_at=point).returncode == -9
    assert harness("recover", tmp_path, scenario, drive_seconds=0).returncode == 3
    effects = Effects.beside(str(tmp_path / "store.db"))
    with open_store(str(tmp_path / "store.db"), read_only=True) as store:
        parked = store.list_records(status="recovery_required")
    assert len(parked) == 1 and parked[0].recovery.subject.effect == subject
    reply = operator_answer(parked[0], effects)
    assert reply is not None and reply.outcome == answer
    if answer == "succeeded":
        recorded = (effects.llm if subject == "call_llm" else effects.tools).entries()[-1]
        assert reply.result == recorded["result"]
    if answer == "failed":
        assert reply.error == "RuntimeError: the billing service is down"
