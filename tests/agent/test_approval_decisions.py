"""Per-item approval decisions never approve an item they do not name: a ``decisions``
mapping must decide every item of the request, else the approval is refused with
ApprovalError and nothing is sent, decided or run — through the agent and through
``phronomy_fsm.agent.approvals.send_approval``, which any process (the CLI's
``approve``) uses (docs/agent.md, "Approval").

Real components: a SQLite file store, the runtime's loop and worker threads.
"""

from __future__ import annotations

from typing import Any

import pytest

from phronomy_fsm.agent import Agent, AgentStatus, Reply, ScriptedProvider
from phronomy_fsm.agent.approvals import send_approval
from phronomy_fsm.durable.records import ExecutionStatus
from phronomy_fsm.errors import ApprovalError

from .conftest import Events, make_tool


def _two_refunds(runtime: Any, events: Events, log: list[Any]) -> Agent:
    return Agent.create(
        "a",
        runtime=runtime,
        provider=ScriptedProvider(
            [
                Reply(tool_calls=(("refund", {"q": "first"}), ("refund", {"q": "second"}))),
                Reply(content="done"),
            ]
        ),
        tools=[make_tool("refund", requires_approval=True, log=log)],
        on_event=events,
    )


def _ids(event: Any) -> tuple[str, str]:
    first = next(i.tool_invocation_id for i in event.items if i.arguments == {"q": "first"})
    second = next(i.tool_invocation_id for i in event.items if i.arguments == {"q": "second"})
    return first, second


def _unchanged(store: Any, execution_id: str, revision: int) -> None:
    stored = store.load_record(execution_id)
    assert (stored.status, stored.revision) == (ExecutionStatus.WAITING, revision)
    assert stored.context["approval"]["decided"] is False
    assert store.pending_signals(execution_id) == []


@pytest.mark.parametrize("approved", [True, False])
def test_a_partial_decision_is_refused_and_nothing_runs(
    store: Any, runtime: Any, events: Events, approved: bool
) -> None:
    log: list[Any] = []
    agent = _two_refunds(runtime, events, log)
    task = agent.invoke_async("two refunds")
    event = events.wait_for("approval_required")
    first, second = _ids(event)
    revision = store.load_record(event.execution_id).revision
    with pytest.raises(ApprovalError, match="every item") as refused:
        agent.approve(
            event.execution_id,
            approval_request_id=event.request_id,
            approved=approved,
            decisions={first: True},
            wait_seconds=10,
        )
    assert second in str(refused.value)
    assert refused.value.reason == "partial_decisions"
    _unchanged(store, event.execution_id, revision)
    assert log == [] and not task.done()
    # deciding every item works: the named one runs, the rejected one does not
    result = agent.approve(
        event.execution_id,
        approval_request_id=event.request_id,
        decisions={first: True, second: False},
        wait_seconds=10,
    )
    assert result.status is AgentStatus.COMPLETED and [a for a, _ in log] == [{"q": "first"}]
    assert task.result(5) == result
    decided = store.load_record(event.execution_id).context["approval"]
    assert decided is None or decided["decisions"] == {first: True, second: False}


def test_an_empty_decision_mapping_is_refused(store: Any, runtime: Any, events: Events) -> None:
    log: list[Any] = []
    agent = _two_refunds(runtime, events, log)
    agent.invoke_async("two refunds")
    event = events.wait_for("approval_required")
    revision = store.load_record(event.execution_id).revision
    with pytest.raises(ApprovalError, match="every item"):
        agent.approve(
            event.execution_id, approval_request_id=event.request_id, decisions={}, wait_seconds=10
        )
    _unchanged(store, event.execution_id, revision)
    assert log == []


def test_the_store_level_approval_refuses_a_partial_mapping(
    store: Any, runtime: Any, events: Events
) -> None:
    """What the CLI's `approve` calls refuses it too, before writing."""
    log: list[Any] = []
    agent = _two_refunds(runtime, events, log)
    task = agent.invoke_async("two refunds")
    event = events.wait_for("approval_required")
    first, second = _ids(event)
    revision = store.load_record(event.execution_id).revision
    with pytest.raises(ApprovalError, match="every item") as refused:
        send_approval(
            store, event.execution_id, approval_request_id=event.request_id, decisions={first: True}
        )
    assert second in str(refused.value)
    _unchanged(store, event.execution_id, revision)
    signal = send_approval(
        store,
        event.execution_id,
        approval_request_id=event.request_id,
        decisions={first: True, second: False},
        by="operator",
    )
    assert signal.expected_revision == revision
    assert task.result(10).status is AgentStatus.COMPLETED  # the owner applied it
    assert [a for a, _ in log] == [{"q": "first"}]
    decided = next(
        e.data for e in store.journal_entries(event.execution_id) if e.kind == "approval_decided"
    )
    assert decided["decisions"] == {first: True, second: False} and decided["by"] == "operator"


def test_a_decision_read_at_an_older_revision_is_refused_and_writes_nothing(
    store: Any, runtime: Any, events: Events
) -> None:
    """``expected_revision`` (the revision a console page showed) must be the stored
    one; each refusal names why (``reason``), so a front end can tell a stale page."""
    log: list[Any] = []
    agent = _two_refunds(runtime, events, log)
    task = agent.invoke_async("two refunds")
    event = events.wait_for("approval_required")
    revision = store.load_record(event.execution_id).revision
    for stale in (revision - 1, revision + 1):
        with pytest.raises(ApprovalError, match=f"at revision {revision}, not {stale}") as refused:
            send_approval(
                store,
                event.execution_id,
                approval_request_id=event.request_id,
                expected_revision=stale,
            )
        assert refused.value.reason == "stale_revision"
        _unchanged(store, event.execution_id, revision)
    with pytest.raises(ApprovalError) as other:
        send_approval(store, event.execution_id, approval_request_id="another-request")
    assert other.value.reason == "other_request"
    signal = send_approval(
        store,
        event.execution_id,
        approval_request_id=event.request_id,
        approved=False,
        expected_revision=revision,
    )
    assert signal.expected_revision == revision
    with pytest.raises(ApprovalError) as again:
        send_approval(store, event.execution_id, approval_request_id=event.request_id)
    assert again.value.reason == "already_decided"
    assert task.result(10).status is AgentStatus.REJECTED and log == []
    with pytest.raises(ApprovalError) as finished:
        send_approval(store, event.execution_id, approval_request_id=event.request_id)
    assert finished.value.reason == "already_decided"  # checked before it finished


def test_decision_errors_name_tool_invocation_ids(store: Any, runtime: Any) -> None:
    agent = Agent.create("a", runtime=runtime, provider=ScriptedProvider([Reply(content="x")]))
    with pytest.raises(ApprovalError, match="tool_invocation_id") as refused:
        agent.approve_async("e", approval_request_id="r", decisions={"call_1": "yes"})  # type: ignore[dict-item]
    assert "tool_call_id" not in str(refused.value)
    doc = Agent.approve_async.__doc__ or ""
    assert "tool_invocation_id" in doc and "tool_call_id" not in doc
