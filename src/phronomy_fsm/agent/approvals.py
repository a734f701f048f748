"""Approval decisions and operator answers for agent executions, from any process.

An agent execution waiting for approval rests, durably, in ``suspended``; a
decision is the ``approval_decided`` signal, written to its inbox with the revision it
was checked against, so it applies to exactly the request that was checked
(``docs/agent.md``, "Approval"). :func:`send_approval` checks a decision against the
stored execution and writes nothing when it refuses. :func:`send_resolution` does the
same for an operator's answer to an agent execution (or one of its tool calls) in
``recovery_required``: an LLM answer supplied as ``succeeded`` must parse as one.
:func:`send_budget_extension` checks a person's new limits for an execution waiting in
``budget_exhausted`` (``docs/agent.md``, "Budgets") and writes them as the
``budget_extended`` signal the same way.

Both are what :class:`~phronomy_fsm.agent.agent.Agent` and the operator library
(``phronomy-fsm approve`` / ``resolve``) call.
"""

from __future__ import annotations

import hashlib
import os
import shlex
from collections.abc import Mapping
from typing import Any

from phronomy_fsm.agent.budget import check_extension, check_extension_limits
from phronomy_fsm.agent.types import LLMResponse
from phronomy_fsm.durable.codec import json_data
from phronomy_fsm.durable.operations import request_resolution, send_signal
from phronomy_fsm.durable.ports import ExecutionStore
from phronomy_fsm.durable.records import ExecutionRecord, ExecutionStatus, SignalRecord
from phronomy_fsm.errors import (
    ApprovalError,
    BudgetError,
    NotFoundError,
    PhronomyError,
    ResolutionError,
    SignalRefusedError,
)
from phronomy_fsm.generated import agent_session
from phronomy_fsm.store.open import command_target

APPROVAL_EVENT = agent_session.Event.APPROVAL_DECIDED.value
BUDGET_EVENT = agent_session.Event.BUDGET_EXTENDED.value


def _state(record: ExecutionRecord) -> str:
    """The stored state of an agent execution by this spec's names (one stored by an
    older spec's runtime may still use the old name, :meth:`MachineTable.migrated_state`)."""
    return agent_session.TABLE.migrated_state(record.spec_version, record.spec_sha256, record.state)


def check_decision_types(
    execution_id: Any, approval_request_id: Any, approved: Any, decisions: Any
) -> dict[str, bool] | None:
    """Check the shapes of a decision's arguments; returns ``decisions`` as a dict.

    Raises:
        ApprovalError: an id that is not a string, ``approved`` that is not a bool,
            ``decisions`` that is not a mapping of tool invocation ids to bools.
    """
    if not isinstance(execution_id, str) or not isinstance(approval_request_id, str):
        raise ApprovalError(
            "execution_id and approval_request_id must be strings (from the "
            "approval_required event or `phronomy-fsm executions show`)",
            execution_id=execution_id,
        )
    if not isinstance(approved, bool):
        raise ApprovalError(
            f"approved must be True or False, got {approved!r}", reason="bad_arguments"
        )
    if decisions is None:
        return None
    if not (
        isinstance(decisions, Mapping)
        and all(isinstance(k, str) and isinstance(v, bool) for k, v in decisions.items())
    ):
        raise ApprovalError(
            "decisions must map the tool_invocation_id of every item of the approval "
            f"request to True (run it) or False (reject it), got {decisions!r}",
            execution_id=execution_id,
            reason="bad_arguments",
        )
    return dict(decisions)


def check_approval(
    record: ExecutionRecord,
    approval_request_id: str,
    decisions: Mapping[str, bool] | None,
) -> None:
    """Refuse a decision the stored execution cannot take (``docs/agent.md``,
    "Approval").

    Raises:
        ApprovalError: not an agent execution; finished (``reason`` ``finished``);
            not waiting for approval
            (``reason`` ``not_waiting``); the request was already decided
            (``already_decided``); another request is pending (``other_request``); or
            ``decisions`` leaves an item out or names one not in the request
            (``partial_decisions``).
    """
    eid = record.execution_id
    if record.machine != agent_session.MACHINE:
        raise ApprovalError(
            f"execution {eid} is a {record.machine} execution, not an agent execution; "
            "send it a signal instead (phronomy-fsm signal)",
            execution_id=eid,
        )
    ctx = json_data(record.context)
    ctx = ctx if isinstance(ctx, dict) else {}
    approval = ctx.get("approval") or {}
    decided = {
        str((item.get("data") or {}).get("approval_request_id"))
        for item in ctx.get("audit", [])
        if item.get("kind") == "approval_decided"
    }
    if approval_request_id in decided or (
        approval.get("request_id") == approval_request_id and approval.get("decided")
    ):
        raise ApprovalError(
            f"approval request {approval_request_id} of execution {eid} was already decided; "
            "nothing was written",
            execution_id=eid,
            reason="already_decided",
        )
    if record.is_finished:
        raise ApprovalError(
            f"execution {eid} is {record.status.value}; there is nothing to approve",
            execution_id=eid,
            reason="finished",
        )
    if (
        record.status is not ExecutionStatus.WAITING
        or _state(record) != agent_session.State.SUSPENDED
    ):
        raise ApprovalError(
            f"execution {eid} is not waiting for approval (status {record.status.value}, "
            f"state {record.state})",
            execution_id=eid,
            reason="not_waiting",
        )
    if approval.get("request_id") != approval_request_id:
        raise ApprovalError(
            f"approval request {approval_request_id!r} does not match the pending request "
            f"{approval.get('request_id')!r} of execution {eid}",
            execution_id=eid,
            reason="other_request",
        )
    if decisions is not None:
        items = set(approval.get("items", ()))
        missing = sorted(items - set(decisions))
        unknown = sorted(set(decisions) - items)
        if missing or unknown:
            problems = []
            if missing:
                problems.append(f"no decision for {', '.join(missing)}")
            if unknown:
                problems.append(f"not in the request: {', '.join(unknown)}")
            raise ApprovalError(
                f"decisions for request {approval_request_id} must name every item of it "
                f"exactly once ({'; '.join(problems)}); an item nobody decided is never "
                "approved",
                execution_id=eid,
                reason="partial_decisions",
            )


def send_approval(
    store: ExecutionStore,
    execution_id: str,
    *,
    approval_request_id: str,
    approved: bool = True,
    decisions: Mapping[str, bool] | None = None,
    by: str | None = None,
    expected_revision: int | None = None,
    sender: str = "",
    arguments_sha256: Mapping[str, str] | None = None,
) -> SignalRecord:
    """Check a decision against the stored execution, then write it to the
    execution's inbox (the owner applies it; any process may send it).

    The decision carries, per item, the sha256 of the arguments it approves — the
    ones the stored request recorded — and a call runs only with arguments of that
    hash (``docs/agent.md``, "Approval").

    Args:
        execution_id / approval_request_id: from the ``approval_required`` event or
            ``phronomy-fsm executions show``.
        approved: decides every item when ``decisions`` is None.
        decisions: tool invocation id → True (run it) / False (reject it; the LLM sees
            the rejection and the execution goes on), for every item.
        by: who decided (kept in the journal).
        expected_revision: the revision the decider read (a console page's): refused
            unless the execution is still at it. ``None``: the revision read here.
        sender: who sent it (kept with the signal).
        arguments_sha256: tool invocation id → the hash of the arguments the decider
            saw (:attr:`~phronomy_fsm.agent.events.ApprovalItem.arguments_sha256`);
            refused unless each names an item and equals the stored request's hash.

    Raises:
        ApprovalError: see :func:`check_decision_types` and :func:`check_approval`;
            also (``reason`` ``already_decided``) when a decision for this request is
            already on its way, or was sent by another process at the same moment, and
            (``reason`` ``stale_revision``) when ``expected_revision`` is not the
            stored revision, or the execution moved on while the decision was written;
            (``reason`` ``arguments_changed``) when ``arguments_sha256`` differs from
            the hashes of the stored request.
        NotFoundError: no such execution. StorageError.

    Durability: the signal is committed before this returns. Its id is derived from
    the execution, the request and the revision checked (:func:`approval_signal_id`),
    so of two decisions sent at once exactly one is stored.
    """
    decisions = check_decision_types(execution_id, approval_request_id, approved, decisions)
    record = store.load_record(execution_id)
    check_approval(record, approval_request_id, decisions)
    if expected_revision is not None and expected_revision != record.revision:
        raise ApprovalError(
            f"execution {execution_id} is at revision {record.revision}, not "
            f"{expected_revision}; read it again; nothing was written",
            execution_id=execution_id,
            reason="stale_revision",
        )
    already = ApprovalError(
        f"approval request {approval_request_id} of execution {execution_id} was already "
        "decided (a decision for it is in the execution's inbox); nothing was written",
        execution_id=execution_id,
        reason="already_decided",
    )
    for pending in store.pending_signals(execution_id):
        payload = pending.payload if isinstance(pending.payload, dict) else {}
        if pending.event == APPROVAL_EVENT and payload.get("request_id") == approval_request_id:
            raise already
    ctx = json_data(record.context)
    request = ((ctx.get("approval") if isinstance(ctx, dict) else None) or {}).get(
        "arguments_sha256"
    )
    hashes: dict[str, str] = dict(request) if isinstance(request, dict) else {}
    if arguments_sha256 is not None:
        changed = sorted(
            k for k, v in dict(arguments_sha256).items() if hashes.get(k) != v or not hashes
        )
        if changed:
            raise ApprovalError(
                f"the arguments of {', '.join(changed)} in approval request "
                f"{approval_request_id} of execution {execution_id} are not the ones you "
                "saw (their sha256 differs); read the request again; nothing was written",
                execution_id=execution_id,
                reason="arguments_changed",
            )
    nonce = os.urandom(8).hex()
    try:
        signal = send_signal(
            store,
            execution_id,
            APPROVAL_EVENT,
            {
                "request_id": approval_request_id,
                "approved": approved,
                "decisions": decisions,
                "by": by,
                "nonce": nonce,
                # what is approved: these arguments, by hash (the tool call refuses others)
                "arguments_sha256": hashes,
            },
            expected_revision=record.revision,
            # one decision per request and revision: of two sent at once, the store
            # keeps the first (the signal id is unique) and refuses the second
            signal_id=approval_signal_id(execution_id, approval_request_id, record.revision),
            sender=sender,
            table=agent_session.TABLE,
        )
    except SignalRefusedError as exc:
        if getattr(exc, "reason", None) == "signal_id_reused":
            # another decision on this request and revision is stored (its nonce
            # differs): the store refuses this one, which is the one not kept
            raise already from exc
        raise ApprovalError(
            f"execution {execution_id} moved on while the decision was sent ({exc}); read it again",
            execution_id=execution_id,
            reason="stale_revision",
        ) from exc
    payload = signal.payload if isinstance(signal.payload, dict) else {}
    if payload.get("nonce") != nonce:
        raise already
    return signal  # type: ignore[no-any-return]


def approval_signal_id(execution_id: str, approval_request_id: str, revision: int) -> str:
    """The signal id of the decision on ``approval_request_id`` sent against
    ``revision``: ``approval-`` and 32 hex digits of a sha256, the same for every
    process, so that two decisions sent at once are one signal."""
    raw = f"{execution_id}\x00{approval_request_id}\x00{revision}".encode()
    return "approval-" + hashlib.sha256(raw).hexdigest()[:32]


def send_budget_extension(
    store: ExecutionStore,
    execution_id: str,
    *,
    limits: Mapping[str, int | float],
    request_id: str | None = None,
    by: str | None = None,
    expected_revision: int | None = None,
    sender: str = "",
) -> SignalRecord:
    """Check new limits against the stored execution waiting in ``budget_exhausted``,
    then write them to its inbox as the ``budget_extended`` signal (the owner applies
    them; any process may send them; ``docs/agent.md``, "Budgets").

    Args:
        limits: limit name (``max_tokens``, ``max_llm_calls``, ``max_tool_calls``,
            ``max_cost_usd``) → its new value (a positive int; US dollars > 0 for
            ``max_cost_usd``); the limits not named stay as they are.
        request_id: the pending budget request (``BudgetExhausted`` event, ``executions
            show``); None: the one pending now.
        by: who extended it (kept in the journal); sender: kept with the signal.
        expected_revision: refuse unless the execution is still at this revision.

    Raises:
        BudgetError: ``reason`` ``bad_arguments`` (not limits), ``not_agent``,
            ``finished``, ``not_waiting``, ``other_request``, ``already_extended`` (an
            extension is already in its inbox), ``stale_revision``, ``lowers_limit``,
            ``not_enough`` (the waiting call would still be refused).
        NotFoundError, StorageError. Nothing is written when it raises.

    Durability: the signal is committed before this returns; its id is derived from the
    execution, the request and the revision checked, so of two extensions sent at once
    one is stored and the other refused.
    """
    checked = check_extension_limits(limits)
    record = store.load_record(execution_id)
    eid = record.execution_id
    if record.machine != agent_session.MACHINE:
        raise BudgetError(
            f"execution {eid} is a {record.machine} execution, not an agent execution",
            execution_id=eid,
            reason="not_agent",
        )
    if record.is_finished:
        raise BudgetError(
            f"execution {eid} is {record.status.value}; there is no budget to extend",
            execution_id=eid,
            reason="finished",
        )
    ctx = json_data(record.context)
    ctx = ctx if isinstance(ctx, dict) else {}
    pending = ctx.get("budget_request") or {}
    if (
        record.status is not ExecutionStatus.WAITING
        or _state(record) != agent_session.State.BUDGET_EXHAUSTED
        or pending.get("decided")
    ):
        raise BudgetError(
            f"execution {eid} does not wait for a budget extension (status "
            f"{record.status.value}, state {record.state}); nothing was written",
            execution_id=eid,
            reason="not_waiting",
        )
    pending_id = str(pending.get("request_id"))
    if request_id is not None and request_id != pending_id:
        raise BudgetError(
            f"budget request {request_id!r} does not match the pending request "
            f"{pending_id!r} of execution {eid}; nothing was written",
            execution_id=eid,
            reason="other_request",
        )
    if expected_revision is not None and expected_revision != record.revision:
        raise BudgetError(
            f"execution {eid} is at revision {record.revision}, not {expected_revision}; "
            "read it again; nothing was written",
            execution_id=eid,
            reason="stale_revision",
        )
    check_extension(ctx, checked, execution_id=eid)
    already = BudgetError(
        f"budget request {pending_id} of execution {eid} already has an extension on its "
        "way (in the execution's inbox); nothing was written",
        execution_id=eid,
        reason="already_extended",
    )
    for signal in store.pending_signals(eid):
        payload = signal.payload if isinstance(signal.payload, dict) else {}
        if signal.event == BUDGET_EVENT and payload.get("request_id") == pending_id:
            raise already
    nonce = os.urandom(8).hex()
    raw = f"{eid}\x00{pending_id}\x00{record.revision}".encode()
    try:
        stored = send_signal(
            store,
            eid,
            BUDGET_EVENT,
            {"request_id": pending_id, "limits": checked, "by": by, "nonce": nonce},
            expected_revision=record.revision,
            signal_id="budget-" + hashlib.sha256(raw).hexdigest()[:32],
            sender=sender,
            table=agent_session.TABLE,
        )
    except SignalRefusedError as exc:
        if getattr(exc, "reason", None) == "signal_id_reused":
            raise already from exc
        raise BudgetError(
            f"execution {eid} moved on while the extension was sent ({exc}); read it again",
            execution_id=eid,
            reason="stale_revision",
        ) from exc
    payload = stored.payload if isinstance(stored.payload, dict) else {}
    if payload.get("nonce") != nonce:
        raise already
    return stored  # type: ignore[no-any-return]


def send_resolution(
    store: ExecutionStore,
    execution_id: str,
    *,
    expected_revision: int,
    outcome: str,
    result: Any = None,
    error: str | None = None,
    signal_id: str | None = None,
    sender: str = "",
) -> SignalRecord:
    """Answer an agent execution (or a tool call's execution) in
    ``recovery_required``: what became of its effect — ``succeeded`` (``result``: for
    an LLM call the answer as :meth:`LLMResponse.to_json` shapes it, for a tool the
    tool's JSON result), ``failed`` (``error``), ``not_performed``, or ``retry`` (run
    it again) — checked against the stored execution (``docs/agent.md``, "Recovery").

    Raises:
        ResolutionError: not parked, a stale ``expected_revision``, an outcome not
            allowed, or a ``result`` that is not an LLM answer for an LLM call.
        NotFoundError, StorageError.
    """
    record = store.load_record(execution_id)
    subject = record.recovery.subject if record.recovery is not None else None
    if outcome == "succeeded" and subject is not None and subject.effect == "call_llm":
        try:
            LLMResponse.from_json("resolution", result)
        except ValueError as exc:
            raise ResolutionError(
                f"execution {execution_id}: the result of an LLM call must be its answer: {exc}",
                execution_id=execution_id,
                reason="bad_result",
            ) from None
    return request_resolution(  # type: ignore[no-any-return]
        store,
        execution_id,
        expected_revision=expected_revision,
        outcome=outcome,
        result=result,
        error=error,
        signal_id=signal_id,
        sender=sender,
    )


def agent_of(store: ExecutionStore, execution_id: str) -> tuple[str | None, str]:
    """``(agent_id, session_execution_id)`` of an agent execution or of one of its
    tool calls (the agent is ``None`` for an execution of another machine).
    Raises NotFoundError."""
    record = store.load_record(execution_id)
    if record.machine != agent_session.MACHINE and record.parent_execution_id is not None:
        parent = store.load_record(record.parent_execution_id)
        if parent.machine == agent_session.MACHINE:
            record = parent
    if record.machine != agent_session.MACHINE:
        return None, execution_id
    ctx = json_data(record.context)
    agent_id = ctx.get("agent_id") if isinstance(ctx, dict) else None
    if agent_id is None:
        raise NotFoundError(f"execution {execution_id} names no agent", execution_id=execution_id)
    return str(agent_id), record.execution_id


def how_to_continue(store: ExecutionStore, execution_id: str) -> str | None:
    """What a caller detached from the agent execution ``execution_id`` is told to run
    to continue it, as the store has it (``docs/agent.md``, "Closing"; the promise of
    :class:`~phronomy_fsm.errors.ExecutionDetachedError`): when it (or one of its tool
    calls) is parked for an operator, the exact ``phronomy-fsm resolve`` command with
    the outcomes it allows; when it waits for approval, the exact ``phronomy-fsm
    approve`` command of its pending request. ``None`` when it waits for neither, or
    the store cannot be read (a store read; any thread but the loop)."""
    try:
        record = store.load_record(execution_id)
        parked = [
            r
            for r in [record, *store.list_records(parent_execution_id=execution_id)]
            if r.status is ExecutionStatus.RECOVERY_REQUIRED and r.recovery is not None
        ]
    except PhronomyError:
        return None
    db = command_target(store)
    if parked:
        commands = []
        for r in parked:
            assert r.recovery is not None
            outcomes = "|".join(str(getattr(o, "value", o)) for o in r.recovery.allowed_outcomes)
            words = ["phronomy-fsm", "resolve", r.execution_id, "--db", db]
            words += ["--expected-revision", str(r.revision), "--outcome", f"<{outcomes}>"]
            commands.append(f"`{shlex.join(words)}`")
        return (
            "it waits for an operator's answer: "
            + " and ".join(commands)
            + " (succeeded with --result JSON, failed with --error TEXT), then load its "
            "agent again (Agent.load) to continue it"
        )
    ctx = json_data(record.context)
    approval = (ctx.get("approval") or {}) if isinstance(ctx, dict) else {}
    request_id = approval.get("request_id")
    if (
        record.status is ExecutionStatus.WAITING
        and _state(record) == agent_session.State.SUSPENDED
        and isinstance(request_id, str)
        and not approval.get("decided")
    ):
        words = ["phronomy-fsm", "approve", execution_id, "--request", request_id, "--db", db]
        return (
            f"it waits for approval of request {request_id}: `{shlex.join(words)}` (add "
            "--reject to reject it), then load its agent again (Agent.load) to continue it"
        )
    budget_request = (ctx.get("budget_request") or {}) if isinstance(ctx, dict) else {}
    if (
        record.status is ExecutionStatus.WAITING
        and _state(record) == agent_session.State.BUDGET_EXHAUSTED
        and not budget_request.get("decided")
    ):
        limit = str(budget_request.get("limit"))
        words = ["phronomy-fsm", "extend-budget", execution_id, "--db", db]
        words += [f"--{limit.replace('_', '-')}", "<new limit>"]
        return (
            f"it waits for a budget extension ({limit}: spent {budget_request.get('spent')} "
            f"of {budget_request.get('allowed')}): `{shlex.join(words)}`, then load its "
            "agent again (Agent.load) to continue it"
        )
    return None


__all__ = [
    "APPROVAL_EVENT",
    "BUDGET_EVENT",
    "agent_of",
    "approval_signal_id",
    "check_approval",
    "check_decision_types",
    "how_to_continue",
    "send_approval",
    "send_budget_extension",
    "send_resolution",
]
