"""Operator actions on durable executions from any process: signal, resolve, cancel.

These functions only write to an execution's durable inbox (``docs/semantics.md``,
"Signals" and "Operator resolution"); the runtime that owns the execution consumes
the entry in order, exactly once, in one of its commits. Each validates against the
stored execution and the machine's registered table first and writes **nothing** when
it refuses. They are what ``phronomy-fsm signal``, ``resolve`` and ``cancel`` and the
console call; a :class:`~phronomy_fsm.durable.runtime.DurableRuntime` calls them too
and then wakes its own loop at once.
"""

from __future__ import annotations

import difflib
from typing import Any

from phronomy_fsm.durable.app import SIGNAL_MARK
from phronomy_fsm.durable.codec import ensure_json, utc_now
from phronomy_fsm.durable.keys import check_id, new_signal_id
from phronomy_fsm.durable.machines import MachineFacts, table_from_json
from phronomy_fsm.durable.ports import ExecutionStore
from phronomy_fsm.durable.records import (
    ExecutionRecord,
    ExecutionStatus,
    ResolutionOutcome,
    SignalKind,
    SignalRecord,
)
from phronomy_fsm.errors import (
    ExecutionFinishedError,
    NotFoundError,
    ResolutionError,
    SerializationError,
    SignalPayloadError,
    SignalRefusedError,
)
from phronomy_fsm.table import MachineTable, payload_problems


def load_execution_record(store: ExecutionStore, execution_id: str) -> ExecutionRecord:
    """The stored engine execution ``execution_id``.

    Raises:
        InvalidIdError: a malformed id.
        NotFoundError: no such execution.
        SignalRefusedError: the execution is an agent execution of the agent layer
            (approve, resolve or cancel it through the agent commands).
        StorageError: the read failed.
    """
    check_id(execution_id)
    try:
        return store.load_record(execution_id)
    except SerializationError as exc:
        raise SignalRefusedError(
            f"execution {execution_id} is not run by the durable engine (an agent execution?); "
            f"use the agent commands (phronomy-fsm approve / resolve) for it ({exc})",
            execution_id=execution_id,
            reason="not_an_engine_execution",
        ) from exc


def machine_facts(
    store: ExecutionStore, record: ExecutionRecord, table: MachineTable | None = None
) -> MachineFacts | None:
    """The facts of ``record``'s machine: from ``table`` when given, else from the
    table a runtime registered in the store (``None`` when none did)."""
    if table is not None:
        return MachineFacts(table)
    try:
        registered = store.load_machine(record.machine, record.spec_sha256)
    except NotFoundError:
        return None
    return MachineFacts(table_from_json(registered.table))


def _new_signal(
    execution_id: str,
    kind: SignalKind,
    *,
    event: str | None = None,
    payload: Any = None,
    expected_revision: int | None = None,
    signal_id: str | None = None,
    sender: str = "api",
) -> SignalRecord:
    return SignalRecord(
        signal_id=new_signal_id() if signal_id is None else check_id(signal_id, "signal_id"),
        execution_id=execution_id,
        kind=kind,
        created_at=utc_now(),
        event=event,
        payload=payload,
        expected_revision=expected_revision,
        sender=sender,
    )


def send_signal(
    store: ExecutionStore,
    execution_id: str,
    event: str,
    payload: Any = None,
    *,
    expected_revision: int | None = None,
    signal_id: str | None = None,
    sender: str = "api",
    table: MachineTable | None = None,
) -> SignalRecord:
    """Send ``event`` (with JSON ``payload``) to an execution's durable inbox.

    Args:
        store: the store holding the execution (any backend of the engine).
        execution_id: the execution.
        event: an event its machine declares (not one only the engine posts:
            ``state_completed``, offload and barrier outcomes).
        payload: JSON data handed to the transition as its payload.
        expected_revision: refuse unless the execution is at this revision.
        signal_id: names this signal: sending the same signal (execution, event,
            payload) again with it is a no-op that returns the first one's record;
            any other signal with it is refused.
        sender: free text recorded with the signal (``cli``, ``console``...).
        table: the machine's table, when the caller has it (else the one a runtime
            registered in the store is used).

    Returns:
        The stored :class:`SignalRecord` (with its ``seq``).

    Raises:
        NotFoundError: no such execution. ExecutionFinishedError: it has finished.
        SignalPayloadError: the payload does not fit the payload schema the event
            declares (``reason`` ``payload_type``; ``problems`` lists each mismatch).
        SignalRefusedError: undeclared or engine-internal event, payload not JSON,
            stale ``expected_revision``, ``signal_id`` already used by another signal
            (``reason`` says which: ``signal_id_reused`` names the execution it
            belongs to and what differs). InvalidIdError.
        StorageError: nothing was written.

    Durability: the signal is committed before this returns; the owning runtime
    consumes it in order, exactly once (``docs/semantics.md``, "Signals"). A retry
    with the same ``signal_id`` is safe.
    """
    record = load_execution_record(store, execution_id)
    if record.is_finished:
        raise ExecutionFinishedError(
            f"execution {execution_id} has finished ({record.status.value}); nothing was sent",
            execution_id=execution_id,
            status=record.status.value,
        )
    if not isinstance(event, str) or not event:
        raise SignalRefusedError(
            f"the event must be a non-empty string, got {event!r}", reason="bad_event"
        )
    facts = machine_facts(store, record, table)
    if facts is not None:
        if event in facts.internal_events:
            raise SignalRefusedError(
                f"event {event!r} of machine {record.machine!r} is posted by the engine itself "
                "(state_completed, an offload or barrier outcome); it cannot be signalled",
                execution_id=execution_id,
                reason="internal_event",
            )
        if event not in facts.signal_events:
            near = difflib.get_close_matches(event, sorted(facts.signal_events), n=1)
            hint = f"; did you mean {near[0]!r}?" if near else ""
            raise SignalRefusedError(
                f"machine {record.machine!r} declares no event {event!r}{hint} "
                f"(signal-able events: {', '.join(sorted(facts.signal_events)) or 'none'})",
                execution_id=execution_id,
                reason="undeclared_event",
            )
    try:
        ensure_json(payload, what="the signal's payload")
    except SerializationError as exc:
        raise SignalRefusedError(str(exc), execution_id=execution_id, reason="payload") from exc
    if facts is not None:
        check_signal_payload(facts.table, execution_id, event, payload)
    signal = _new_signal(
        execution_id,
        SignalKind.EVENT,
        event=event,
        payload=payload,
        expected_revision=expected_revision,
        signal_id=signal_id,
        sender=sender,
    )
    return store.send_signal(signal)


def check_signal_payload(table: MachineTable, execution_id: str, event: str, payload: Any) -> None:
    """Check ``payload`` against the payload schema ``event`` declares in ``table``
    (nothing to check when it declares none).

    Raises:
        SignalPayloadError: the payload misses the schema; every problem is listed.
    """
    row = next((e for e in table.events if e.name == event), None)
    fields = tuple(getattr(row, "fields", ()) or ()) if row is not None else ()
    # the interleaving checker marks the signals it sends (durable/app.py, SIGNAL_MARK)
    problems = payload_problems(
        tuple((str(f), str(t)) for f, t in fields), payload, extra_keys=frozenset({SIGNAL_MARK})
    )
    if problems:
        raise SignalPayloadError(
            f"the payload of {event!r} does not fit its declared type "
            f"({row.payload if row is not None else 'schema'}): {'; '.join(problems)}; "
            "nothing was sent",
            execution_id=execution_id,
            reason="payload_type",
            event=event,
            problems=tuple(problems),
        )


def request_resolution(
    store: ExecutionStore,
    execution_id: str,
    *,
    expected_revision: int,
    outcome: str,
    result: Any = None,
    error: str | None = None,
    signal_id: str | None = None,
    sender: str = "api",
) -> SignalRecord:
    """Answer an execution in ``recovery_required``: what happened to its subject.

    ``outcome`` is ``succeeded`` (with ``result``, JSON: delivered as the effect's
    completed payload), ``failed`` (with ``error`` text: its failed event gets an
    EffectFailedError), ``not_performed`` (its failed event gets an
    EffectNotPerformedError; nothing is sent again) or ``retry`` (run the effect
    again: the operator accepts the risk of a second effect). For a subject that is
    the execution itself only ``failed`` is allowed (it then finishes failed).

    Raises:
        NotFoundError, ExecutionFinishedError.
        ResolutionError: not in recovery_required, stale ``expected_revision``,
            an outcome that is not allowed, a missing or forbidden result/error, a
            result that is not JSON, another answer already waiting to be applied
            (``already_answered``), ``signal_id`` already used by another signal
            (``signal_id_reused``) (``reason`` says which). Nothing was written.
        StorageError.

    Durability: committed to the inbox before it returns; the owner applies it in a
    ``@resolution`` commit, then replays to the effect with the answer.
    """
    record = load_execution_record(store, execution_id)
    if record.is_finished:
        raise ExecutionFinishedError(
            f"execution {execution_id} has already finished ({record.status.value}); there is "
            "nothing to resolve",
            execution_id=execution_id,
            status=record.status.value,
        )
    info = record.recovery
    if record.status is not ExecutionStatus.RECOVERY_REQUIRED or info is None:
        raise ResolutionError(
            f"execution {execution_id} is {record.status.value}, not waiting for an operator; "
            "nothing to resolve",
            execution_id=execution_id,
            reason="not_recovery_required",
        )
    if expected_revision != record.revision:
        raise ResolutionError(
            f"execution {execution_id} is at revision {record.revision}, not {expected_revision}; "
            "read it again (phronomy-fsm executions show) before resolving",
            execution_id=execution_id,
            reason="stale_revision",
            stored_revision=record.revision,
        )
    try:
        ResolutionOutcome(outcome)
    except ValueError:
        outcome_ok = False
    else:
        outcome_ok = outcome in info.allowed_outcomes
    if not outcome_ok:
        raise ResolutionError(
            f"outcome {outcome!r} is not allowed here; allowed: {', '.join(info.allowed_outcomes)}",
            execution_id=execution_id,
            reason="outcome",
        )
    if outcome == ResolutionOutcome.SUCCEEDED.value and result is None:
        raise ResolutionError("outcome 'succeeded' needs a result (JSON)", reason="result")
    if outcome == ResolutionOutcome.FAILED.value and not error:
        raise ResolutionError("outcome 'failed' needs an error text", reason="error")
    if outcome != ResolutionOutcome.SUCCEEDED.value and result is not None:
        raise ResolutionError(f"outcome {outcome!r} takes no result", reason="result")
    if outcome != ResolutionOutcome.FAILED.value and error is not None:
        raise ResolutionError(f"outcome {outcome!r} takes no error text", reason="error")
    try:
        ensure_json(result, what="the result")
    except SerializationError as exc:
        raise ResolutionError(str(exc), reason="result") from exc
    waiting = [
        s
        for s in store.pending_signals(execution_id)
        if s.kind is SignalKind.RESOLUTION and (signal_id is None or s.signal_id != signal_id)
    ]
    if waiting:  # a retried send (the same signal id) is a no-op below, not a second answer
        first = waiting[0]
        given = first.payload.get("outcome") if isinstance(first.payload, dict) else None
        raise ResolutionError(
            f"execution {execution_id} already has an answer waiting to be applied (signal "
            f"#{first.seq}, outcome {given}); nothing was sent. It is applied when the "
            "execution is recovered or by its live owner",
            execution_id=execution_id,
            reason="already_answered",
        )
    signal = _new_signal(
        execution_id,
        SignalKind.RESOLUTION,
        payload={"outcome": outcome, "result": result, "error": error},
        expected_revision=expected_revision,
        signal_id=signal_id,
        sender=sender,
    )
    try:
        return store.send_signal(signal)
    except SignalRefusedError as exc:  # stale_revision or signal_id_reused: kept
        raise ResolutionError(
            str(exc), execution_id=execution_id, reason=getattr(exc, "reason", "stale_revision")
        ) from exc


def request_cancel(
    store: ExecutionStore,
    execution_id: str,
    *,
    reason: str = "cancelled by an operator",
    as_failure: bool = False,
    error_type: str | None = None,
    expected_revision: int | None = None,
    signal_id: str | None = None,
    sender: str = "api",
) -> SignalRecord:
    """Ask the owner to cancel an execution: its session stops at once (results of
    work in flight are dropped when they come back), its active children are
    cancelled, and once nothing of it runs any more it finishes ``cancelled`` — or
    ``failed`` with ``as_failure`` (a timeout, a failing listener) — with ``reason``
    as its error message and ``error_type`` as the error's name. With
    ``expected_revision`` the cancel is refused unless the execution is still at that
    revision (checked in the inbox write's transaction: a console page that is out of
    date cancels nothing).

    Raises NotFoundError, ExecutionFinishedError, SignalRefusedError (a stale
    ``expected_revision``; ``signal_id`` already used by another signal:
    ``signal_id_reused``), StorageError (nothing written)."""
    load_execution_record(store, execution_id)
    signal = _new_signal(
        execution_id,
        SignalKind.CANCEL,
        payload={
            "reason": str(reason),
            "status": "failed" if as_failure else "cancelled",
            "error_type": error_type or ("Failed" if as_failure else "Cancelled"),
        },
        expected_revision=expected_revision,
        signal_id=signal_id,
        sender=sender,
    )
    return store.send_signal(signal)


__all__ = [
    "check_signal_payload",
    "load_execution_record",
    "machine_facts",
    "request_cancel",
    "request_resolution",
    "send_signal",
]
