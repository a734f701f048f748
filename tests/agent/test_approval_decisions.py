"""Per-item approval decisions never approve an item they do not name (issue 11 item
1): a ``decisions`` mapping must decide every item of the request, else the approve
call is refused with ApprovalError and nothing is decided or run — through the live
agent and through the store-level commit the CLI's ``approve`` uses.

Real components: a SQLite file store, the runtime's loop and worker threads.
"""

from __future__ import annotations

from typing import Any

import pytest

from phronomy_fsm.agent import Agent, Reply, ScriptedProvider
from phronomy_fsm.agent.durable import approval_decision_commit
from phronomy_fsm.errors import ApprovalError
from phronomy_fsm.store.records import ExecutionStatus

from .conftest import Events, make_tool


def _two_refunds(store: Any, runtime: Any, events: Events, log: list[Any]) -> Agent:
    return Agent.create(
        "a",
        store=store,
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
    items = event.payload["request"]["items"]
    first = next(i["tool_invocation_id"] for i in items if i["arguments"] == {"q": "first"})
    second = next(i["tool_invocation_id"] for i in items if i["arguments"] == {"q": "second"})
    return first, second


@pytest.mark.parametrize("approved", [True, False])
def test_a_partial_decision_is_refused_and_nothing_runs(
    store: Any, runtime: Any, events: Events, approved: bool
) -> None:
    log: list[Any] = []
    agent = _two_refunds(store, runtime, events, log)
    task = agent.invoke_async("two refunds")
    event = events.wait_for("approval_required")
    first, second = _ids(event)
    request_id = event.payload["request"]["id"]
    with pytest.raises(ApprovalError, match="every item") as refused:
        agent.approve(
            event.execution_id,
            approval_request_id=request_id,
            approved=approved,
            decisions={first: True},
            wait_seconds=10,
        )
    assert second in str(refused.value)
    stored = store.load_execution(event.execution_id)
    assert stored.status is ExecutionStatus.SUSPENDED
    assert stored.approval_request.approved is None and log == []
    assert not task.done()
    # deciding every item works: the named one runs, the rejected one does not
    result = agent.approve(
        event.execution_id,
        approval_request_id=request_id,
        decisions={first: True, second: False},
        wait_seconds=10,
    )
    assert result.status == "completed" and [a for a, _ in log] == [{"q": "first"}]
    assert task.result(5) == result


def test_an_empty_decision_mapping_is_refused(store: Any, runtime: Any, events: Events) -> None:
    log: list[Any] = []
    agent = _two_refunds(store, runtime, events, log)
    agent.invoke_async("two refunds")
    event = events.wait_for("approval_required")
    with pytest.raises(ApprovalError, match="every item"):
        agent.approve(
            event.execution_id,
            approval_request_id=event.payload["request"]["id"],
            decisions={},
            wait_seconds=10,
        )
    assert store.load_execution(event.execution_id).status is ExecutionStatus.SUSPENDED
    assert log == []


def test_the_store_level_decision_refuses_a_partial_mapping(
    store: Any, runtime: Any, events: Events
) -> None:
    """The commit the CLI's `approve` builds refuses it too, before writing."""
    agent = _two_refunds(store, runtime, events, [])
    agent.invoke_async("two refunds")
    event = events.wait_for("approval_required")
    first, second = _ids(event)
    execution = store.load_execution(event.execution_id)
    with pytest.raises(ApprovalError, match="every item") as refused:
        approval_decision_commit(
            execution,
            store.load_agent("a"),
            request_id=event.payload["request"]["id"],
            approved=True,
            decisions={first: True},
            now=runtime.now(),
        )
    assert second in str(refused.value)
    commit = approval_decision_commit(
        execution,
        store.load_agent("a"),
        request_id=event.payload["request"]["id"],
        approved=True,
        decisions={first: True, second: False},
        now=runtime.now(),
    )
    assert commit.execution.metadata["approval_decisions"] == {first: True, second: False}


def test_decision_errors_name_tool_invocation_ids(store: Any, runtime: Any) -> None:
    agent = Agent.create(
        "a", store=store, runtime=runtime, provider=ScriptedProvider([Reply(content="x")])
    )
    with pytest.raises(ApprovalError, match="tool_invocation_id") as refused:
        agent.approve_async("e", approval_request_id="r", decisions={"call_1": "yes"})  # type: ignore[dict-item]
    assert "tool_call_id" not in str(refused.value)
    doc = Agent.approve_async.__doc__ or ""
    assert "tool_invocation_id" in doc and "tool_call_id" not in doc
