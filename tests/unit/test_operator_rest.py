"""When an execution rests, as ``phronomy-fsm recover`` and ``resolve --app`` wait for
it (:func:`phronomy_fsm.operator.is_at_rest`), and the resolve commands an operator is
given (:func:`phronomy_fsm.operator.recovery_request`), for an agent's tool call in the
agent's terms: pure functions over records."""

from __future__ import annotations

import shlex
from datetime import UTC, datetime, timedelta

import attrs
import pytest

from phronomy_fsm.durable.machines import MachineFacts
from phronomy_fsm.durable.records import (
    DurablePoint,
    EffectKind,
    EffectRef,
    ExecutionRecord,
    ExecutionStatus,
    RecoveryInfo,
    SignalKind,
    SignalRecord,
)
from phronomy_fsm.operator import (
    RESULT_PLACEHOLDER,
    TOOL_RESULT_PLACEHOLDER,
    is_at_rest,
    recovery_request,
)
from tests.durable.order_app import TABLE

NOW = datetime(2030, 1, 1, tzinfo=UTC)
FACTS = MachineFacts(TABLE)


def execution(status: ExecutionStatus, **changes: object) -> ExecutionRecord:
    base = ExecutionRecord(
        execution_id="order-1",
        machine="order_flow",
        spec_version=1,
        spec_sha256=TABLE.spec_sha256,
        state="awaiting_approval",
        point=DurablePoint.WAIT,
        status=status,
        revision=3,
        created_at=NOW,
        updated_at=NOW,
    )
    return attrs.evolve(base, **changes)


def signal(kind: SignalKind, event: str | None = None) -> SignalRecord:
    return SignalRecord("s-1", "order-1", kind, NOW, event=event, seq=1)


@pytest.mark.parametrize(
    ("status", "pending", "changes", "expected"),
    [
        (ExecutionStatus.RUNNING, [], {}, False),
        (ExecutionStatus.COMPLETED, [signal(SignalKind.EVENT, "approve")], {}, True),
        (ExecutionStatus.WAITING, [], {}, True),
        (ExecutionStatus.WAITING, [signal(SignalKind.EVENT, "approve")], {}, False),
        # an event the wait state does not take stays in the inbox: it rests
        (ExecutionStatus.WAITING, [signal(SignalKind.EVENT, "abandon")], {}, True),
        (ExecutionStatus.WAITING, [signal(SignalKind.CANCEL)], {}, False),
        (ExecutionStatus.WAITING, [], {"deadline_at": NOW - timedelta(seconds=1)}, False),
        (ExecutionStatus.WAITING, [], {"deadline_at": NOW + timedelta(seconds=1)}, True),
        (ExecutionStatus.RECOVERY_REQUIRED, [], {}, True),
        (ExecutionStatus.RECOVERY_REQUIRED, [signal(SignalKind.RESOLUTION)], {}, False),
        (ExecutionStatus.RECOVERY_REQUIRED, [signal(SignalKind.EVENT, "abandon")], {}, True),
        (ExecutionStatus.WAITING, [], {"expires_at": NOW}, False),
        (ExecutionStatus.RECOVERY_REQUIRED, [], {"expires_at": NOW}, False),
        (ExecutionStatus.FAILED, [], {"expires_at": NOW}, True),
    ],
)
def test_is_at_rest(
    status: ExecutionStatus, pending: list[SignalRecord], changes: dict, expected: bool
) -> None:
    assert is_at_rest(execution(status, **changes), pending, FACTS, NOW) is expected


def test_without_the_machine_table_any_pending_event_keeps_it_moving() -> None:
    waiting = execution(ExecutionStatus.WAITING)
    assert is_at_rest(waiting, [signal(SignalKind.EVENT, "abandon")], None, NOW) is False


def test_the_resolve_commands_quote_what_a_shell_would_expand() -> None:
    subject = EffectRef("charge_card", EffectKind.AT_MOST_ONCE, "charging", "charge_card-k", 1)
    parked = execution(
        ExecutionStatus.RECOVERY_REQUIRED,
        execution_id="order-$(touch${IFS}x);",
        revision=7,
        recovery=RecoveryInfo("unknown", subject, ("succeeded", "not_performed"), NOW),
    )
    request = recovery_request(parked, db_path="my store.db", app_spec="app:make")
    assert request is not None
    assert request.allowed_outcomes == ("succeeded", "not_performed")
    first, second = (shlex.split(c) for c in request.commands)
    assert first == [
        "phronomy-fsm", "resolve", "order-$(touch${IFS}x);", "--db", "my store.db",
        "--app", "app:make", "--expected-revision", "7", "--outcome", "succeeded",
        "--result", RESULT_PLACEHOLDER,
    ]  # fmt: skip
    assert second[-2:] == ["--outcome", "not_performed"]
    assert request.describe_subject() == (
        "effect charge_card (at_most_once) in state charging, idempotency key charge_card-k, "
        "attempt 1"
    )
    assert recovery_request(execution(ExecutionStatus.WAITING), db_path="x") is None


@pytest.mark.parametrize(
    ("changes", "children", "pending", "expected"),
    [
        ({}, (), [], False),  # no children: it is moving
        ({}, (True, True), [], True),  # it waits for children that all rest
        ({}, (True, False), [], False),
        ({}, (True,), [signal(SignalKind.CHILD, "tool_finished")], False),  # a child ended
        ({"pending_effects": ("charge_card",)}, (True,), [], False),  # its own effect runs
        ({"expires_at": NOW}, (True,), [], False),
    ],
)
def test_a_running_execution_rests_only_while_it_waits_for_resting_children(
    changes: dict, children: tuple[bool, ...], pending: list[SignalRecord], expected: bool
) -> None:
    running = execution(ExecutionStatus.RUNNING, point=DurablePoint.BARRIER, **changes)
    assert is_at_rest(running, pending, FACTS, NOW, children_at_rest=children) is expected


def test_an_agent_subject_is_named_in_the_agents_terms_and_checked_by_the_commands() -> None:
    subject = EffectRef("execute_tool", EffectKind.AT_MOST_ONCE, "running", "execute_tool-k", 2)
    parked = execution(
        ExecutionStatus.RECOVERY_REQUIRED,
        execution_id="tool-1",
        machine="tool_call",
        state="running",
        revision=4,
        parent_execution_id="ex-1",
        context={
            "agent_id": "shop",
            "parent_execution_id": "ex-1",
            "tool_invocation_id": "tool-1",
            "tool_name": "issue_refund",
            "arguments": {"amount": 25.0, "order_id": "A1"},
        },
        recovery=RecoveryInfo("unknown", subject, ("succeeded", "not_performed"), NOW),
    )
    request = recovery_request(parked, db_path="s.db")
    assert request is not None
    assert (request.agent_id, request.parent_execution_id) == ("shop", "ex-1")
    assert request.describe_subject() == (
        'tool call tool-1 of agent shop: issue_refund {"amount": 25.0, "order_id": "A1"} may '
        "have run (the tool got idempotency key tool-1; attempt 2)"
    )
    assert shlex.split(request.commands[0]) == [
        "phronomy-fsm", "resolve", "tool-1", "--db", "s.db", "--expected-revision", "4",
        "--subject", "tool_invocation:tool-1", "--outcome", "succeeded",
        "--result", TOOL_RESULT_PLACEHOLDER,
    ]  # fmt: skip
    assert request.to_dict()["agent_subject"]["tool_name"] == "issue_refund"
