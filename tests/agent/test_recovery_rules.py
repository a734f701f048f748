"""Recovery classification (reference §6.2) and resolution rules (§6.6), row by row."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import attrs
import pytest

from phronomy_fsm.agent.recovery import (
    CONTINUE,
    RESOLUTION_REQUIRED,
    SUSPENDED,
    classify,
    resolution_commit,
    validate_resolution,
)
from phronomy_fsm.agent.types import Resolution
from phronomy_fsm.errors import InvalidStatusTransitionError, RecoveryResolutionError
from phronomy_fsm.generated import agent_session
from phronomy_fsm.store.records import (
    AgentLifecycle,
    AgentRecord,
    ApprovalItem,
    ApprovalRequest,
    ExecutionRecord,
    ExecutionStatus,
    RecoveryDescriptor,
    RecoverySubject,
    ToolBatchEntry,
)

NOW = datetime(2026, 3, 29, 1, 30, tzinfo=UTC)


def execution(**changes: Any) -> ExecutionRecord:
    base = ExecutionRecord(
        execution_id="e1",
        agent_id="a",
        revision=3,
        status=ExecutionStatus.ACTIVE,
        phase="calling_llm",
        spec_version=agent_session.SPEC_VERSION,
        spec_sha256=agent_session.SPEC_SHA256,
        created_at=NOW,
        updated_at=NOW,
        input="hi",
        pending_llm_call_id="llm-1",
        metadata={"preparation_replayable": True},
    )
    return attrs.evolve(base, **changes)


def entry(tool_id: str, status: str) -> ToolBatchEntry:
    return ToolBatchEntry(tool_id, f"call-{tool_id}", "refund", "llm-0", {"q": tool_id}, status)


ROOT = AgentRecord("a", 7, AgentLifecycle.ACTIVE, 10, NOW, NOW)


def test_suspended_for_approval_waits() -> None:
    request = ApprovalRequest("r1", "e1", (ApprovalItem("t1", "c1", "refund", {}),), NOW)
    c = classify(
        execution(
            status=ExecutionStatus.SUSPENDED,
            phase="approval",
            approval_request=request,
            pending_llm_call_id=None,
        )
    )
    assert (c.kind, c.facts["approval_request_id"]) == (SUSPENDED, "r1")


def test_preparing_is_replayed_only_when_marked_replayable() -> None:
    c = classify(execution(status=ExecutionStatus.PREPARING, phase="preparing", revision=0))
    assert (c.kind, c.state, c.event) == (CONTINUE, "admitting", "admission_committed")
    for marker in ({"preparation_replayable": False}, {}):
        c = classify(
            execution(
                status=ExecutionStatus.PREPARING, phase="preparing", revision=0, metadata=marker
            )
        )
        assert c.kind == RESOLUTION_REQUIRED and "not replayable" in c.reason
        assert c.allowed_outcomes == ("failed", "not_performed")


@pytest.mark.parametrize("approved", [True, False])
def test_committed_approval_decisions_continue(approved: bool) -> None:
    request = ApprovalRequest("r1", "e1", (), NOW, approved=approved)
    c = classify(execution(phase="resuming", approval_request=request, pending_llm_call_id=None))
    assert (c.kind, c.state, c.event) == (CONTINUE, "resuming", "approval_committed")
    assert c.reason == ("approval_committed" if approved else "approval_rejection_committed")


@pytest.mark.parametrize(
    "phase", ["recovery_provider_completed", "recovery_tools_completed", "recovery_resolved_failed"]
)
def test_committed_resolutions_continue(phase: str) -> None:
    c = classify(execution(phase=phase, pending_llm_call_id=None))
    assert (c.kind, c.state, c.event, c.reason) == (
        CONTINUE,
        "resolving",
        "resolution_committed",
        phase,
    )


def test_pending_llm_call_needs_an_operator() -> None:
    c = classify(execution())
    assert c.kind == RESOLUTION_REQUIRED
    assert c.subject == {"type": "llm_call", "llm_call_id": "llm-1"}
    assert c.allowed_outcomes == ("succeeded", "failed", "not_performed")


def test_dispatched_tools_need_an_operator_one_subject_at_a_time() -> None:
    batch = (entry("t1", "completed"), entry("t2", "authorized"), entry("t3", "running"))
    c = classify(execution(phase="dispatching_tools", tool_batch=batch, pending_llm_call_id=None))
    assert c.kind == RESOLUTION_REQUIRED and c.subject["tool_invocation_id"] == "t2"
    assert c.facts["unresolved_tools"] == ["t2", "t3"]
    resolved = RecoveryDescriptor(
        "x", (RecoverySubject("tool_invocation", tool_invocation_id="t2", state="resolved"),)
    )
    c = classify(
        execution(
            phase="recovery_tools", tool_batch=batch, recovery=resolved, pending_llm_call_id=None
        )
    )
    assert c.subject["tool_invocation_id"] == "t3"


def test_unknown_phase_and_other_spec_fail_closed() -> None:
    c = classify(execution(phase="somewhere_else", pending_llm_call_id=None))
    assert c.kind == RESOLUTION_REQUIRED and "not at a restart-safe point" in c.reason
    c = classify(execution(spec_sha256="0" * 64, spec_version=99))
    assert c.kind == RESOLUTION_REQUIRED and c.reason.startswith("spec_changed")
    assert c.subject == {"type": "execution", "execution_id": "e1"}


def resolve(
    ex: ExecutionRecord,
    subject: dict[str, Any],
    outcome: str,
    result: Any = None,
    error: str | None = None,
) -> Any:
    return resolution_commit(
        ex, ROOT, Resolution(ex.execution_id, ex.revision, subject, outcome, result, error), NOW
    )


LLM = {"type": "llm_call", "llm_call_id": "llm-1"}


def test_llm_not_performed_or_failed_resolves_to_failed() -> None:
    for outcome, error in (("not_performed", None), ("failed", "provider returned 500")):
        commit = resolve(execution(), LLM, outcome, error=error)
        updated = commit.execution
        assert updated.phase == "recovery_resolved_failed" and updated.revision == 4
        assert updated.pending_llm_call_id is None
        assert updated.recovery.resolution_outcome == outcome
        assert commit.expected_revision == 3 and commit.agent.revision == ROOT.revision + 1
    assert (
        "no automatic redispatch"
        in resolve(execution(), LLM, "not_performed").execution.recovery.failure.message
    )


def test_llm_succeeded_records_the_response() -> None:
    commit = resolve(
        execution(),
        LLM,
        "succeeded",
        {"content": "hello", "tool_calls": [{"name": "refund", "arguments": {"q": 1}}]},
    )
    assert commit.execution.phase == "recovery_provider_completed"
    kinds = [r.kind for r in commit.journal]
    assert kinds == ["recovery_resolved", "llm_call_recorded", "assistant_message"]
    assistant = commit.journal[-1].content
    assert (
        assistant["content"] == "hello"
        and assistant["tool_calls"][0]["function"]["name"] == "refund"
    )


def test_tool_succeeded_marks_the_entry_and_moves_on_when_all_resolved() -> None:
    batch = (entry("t1", "authorized"), entry("t2", "authorized"))
    ex = execution(phase="dispatching_tools", tool_batch=batch, pending_llm_call_id=None)
    first = resolve(
        ex,
        {"type": "tool_invocation", "tool_invocation_id": "t1"},
        "succeeded",
        {"refund_id": "R1"},
    )
    assert first.execution.phase == "recovery_tools"
    assert [e.status for e in first.execution.tool_batch] == ["completed", "authorized"]
    assert [r.kind for r in first.journal] == ["recovery_resolved", "tool_result", "tool_message"]
    second = resolve(
        first.execution, {"type": "tool_invocation", "tool_invocation_id": "t2"}, "succeeded", "ok"
    )
    assert second.execution.phase == "recovery_tools_completed"
    failed = resolve(
        ex,
        {"type": "tool_invocation", "tool_invocation_id": "t1", "llm_call_id": "llm-1"},
        "not_performed",
    )
    assert failed.execution.phase == "recovery_resolved_failed"
    # the durable error names the tool call, not the LLM call that asked for it
    message = failed.execution.recovery.failure.message
    assert message.startswith("tool_invocation t1 not performed") and "llm-1" not in message


@pytest.mark.parametrize(
    ("subject", "outcome", "result", "error", "message"),
    [
        (
            {"type": "llm_call", "llm_call_id": "other"},
            "not_performed",
            None,
            None,
            "not the one to resolve",
        ),
        (
            {"type": "tool_invocation", "tool_invocation_id": "t1"},
            "not_performed",
            None,
            None,
            "not the one to resolve",
        ),
        (LLM, "maybe", None, None, "not allowed"),
        (LLM, "succeeded", None, None, "needs a result"),
        (LLM, "failed", None, None, "needs an error"),
        (LLM, "not_performed", {"content": "x"}, None, "takes no result"),
        (LLM, "succeeded", {"content": "x"}, "boom", "takes no error"),
        (LLM, "succeeded", 42, None, "response text"),
    ],
)
def test_bad_resolutions_are_refused_with_a_reason(
    subject: Any, outcome: str, result: Any, error: Any, message: str
) -> None:
    ex = execution()
    with pytest.raises(RecoveryResolutionError, match=message):
        validate_resolution(ex, Resolution("e1", 3, subject, outcome, result, error))


def test_nothing_to_resolve_for_a_continuation() -> None:
    ex = execution(phase="recovery_provider_completed", pending_llm_call_id=None)
    with pytest.raises(RecoveryResolutionError, match="needs no resolution"):
        validate_resolution(ex, Resolution("e1", 3, LLM, "not_performed"))


def test_status_machine_is_enforced_on_resolution_records() -> None:
    done = execution(status=ExecutionStatus.COMPLETED, phase="completed", pending_llm_call_id=None)
    with pytest.raises(InvalidStatusTransitionError):
        done.advance(status=ExecutionStatus.ACTIVE)


def test_declared_migrations_rename_and_repin_old_executions(monkeypatch: Any) -> None:
    from phronomy_fsm.agent.recovery import pin_to_current_spec
    from phronomy_fsm.table import MigrationRow

    old_sha = "a" * 64
    old = execution(spec_version=0, spec_sha256=old_sha, phase="awaiting_llm")
    parked = classify(old)
    assert parked.kind == RESOLUTION_REQUIRED and parked.reason.startswith("spec_changed")
    assert pin_to_current_spec(old) is old
    table = agent_session.TABLE._replace(
        migrations=(MigrationRow(0, old_sha, (("awaiting_llm", "calling_llm"),)),)
    )
    monkeypatch.setattr(agent_session, "TABLE", table)
    migrated = classify(old)
    assert migrated.kind == RESOLUTION_REQUIRED and migrated.subject == {
        "type": "llm_call",
        "llm_call_id": "llm-1",
    }
    pinned = pin_to_current_spec(old)
    assert (pinned.phase, pinned.spec_sha256, pinned.revision) == (
        "calling_llm",
        agent_session.SPEC_SHA256,
        old.revision,
    )
    # a migration for another sha256 does not apply
    other = execution(spec_version=0, spec_sha256="b" * 64, phase="awaiting_llm")
    assert classify(other).reason.startswith("spec_changed")
