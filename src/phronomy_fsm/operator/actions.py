"""The operator's reads and inbox writes: list, describe, signal, resolve, cancel.

Reads cover every execution of a store (the durable engine's and the agent layer's);
writes go through :mod:`phronomy_fsm.durable.operations`, which validates against the
stored execution and its machine's registered table and writes nothing when it
refuses. Returns the values of :mod:`phronomy_fsm.operator.views`.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

from phronomy_fsm.durable import operations
from phronomy_fsm.durable.codec import datetime_to_epoch_ms, epoch_ms_to_datetime
from phronomy_fsm.durable.machines import MachineFacts
from phronomy_fsm.durable.records import ExecutionRecord, ExecutionStatus
from phronomy_fsm.errors import ResolutionError, SerializationError
from phronomy_fsm.operator.views import (
    AGENT_MACHINE,
    AgentExecutionDetail,
    ExecutionDetail,
    ExecutionPage,
    ExecutionSummary,
    InboxReceipt,
    RecoveryRequest,
    WorkerLease,
)
from phronomy_fsm.runtime.clock import SYSTEM_CLOCK, Clock
from phronomy_fsm.store import records as agent_records

#: What ``sender`` the operator's signals record unless a front end names itself.
DEFAULT_SENDER = "operator"
#: Placeholders in the printed resolve commands: the operator fills them in. Neither
#: is JSON, so a command pasted unchanged with ``--result`` is refused.
RESULT_PLACEHOLDER = "<the result as JSON>"
ERROR_PLACEHOLDER = "<what went wrong>"


def list_executions(
    store: Any,
    *,
    machine: str | None = None,
    status: str | None = None,
    exclusive_key: str | None = None,
    limit: int | None = None,
    offset: int = 0,
) -> ExecutionPage:
    """One page of the store's executions of every machine, agent rows included.

    Args:
        store: a :class:`~phronomy_fsm.store.sqlite.SqliteBarrierStore` (read-only is
            enough).
        machine / status / exclusive_key: only executions matching every given filter
            (an agent row's exclusive key is its agent id).
        limit: at most this many rows (``None``: all); offset: skip this many first.

    Returns:
        An :class:`ExecutionPage` (oldest first) with counts per status.

    Raises:
        ValueError: a negative ``limit`` or ``offset``.
        StorageError: the read failed. SerializationError: an agent row's body is
            damaged.
    """
    if (limit is not None and limit < 0) or offset < 0:
        raise ValueError("limit and offset must not be negative")
    counts = store.count_by_status(machine=machine, exclusive_key=exclusive_key)
    total = sum(counts.values()) if status is None else counts.get(status, 0)
    rows = store.execution_rows(
        machine=machine, status=status, exclusive_key=exclusive_key, limit=limit, offset=offset
    )
    return ExecutionPage(
        tuple(_summary(store, row) for row in rows), dict(counts), total, offset, limit
    )


def _summary(store: Any, row: Mapping[str, Any]) -> ExecutionSummary:
    active = bool(row["active"])
    if row["machine"] == AGENT_MACHINE:
        needs = active and _agent_needs_operator(store, row["execution_id"])
    else:
        needs = row["status"] == ExecutionStatus.RECOVERY_REQUIRED.value
    deadline = row["deadline_epoch_ms"]
    return ExecutionSummary(
        execution_id=row["execution_id"],
        machine=row["machine"],
        state=row["state"],
        status=row["status"],
        revision=row["revision"],
        active=active,
        needs_operator=needs,
        created_at=epoch_ms_to_datetime(row["created_epoch_ms"]),
        updated_at=epoch_ms_to_datetime(row["updated_epoch_ms"]),
        exclusive_key=row["exclusive_key"],
        parent_execution_id=row["parent_execution_id"],
        owner_id=row["owner_id"],
        deadline_at=None if deadline is None else epoch_ms_to_datetime(deadline),
    )


def _agent_needs_operator(store: Any, execution_id: str) -> bool:
    return _agent_request(store, store.load_execution(execution_id)) is not None


def _agent_request(store: Any, execution: agent_records.ExecutionRecord) -> Any:
    """The agent layer's classification of an active agent execution when recovering
    it would ask an operator for a resolution
    (:func:`phronomy_fsm.agent.recovery.classify`) and no live process owns its agent
    (a live owner is running it, or has asked already); else ``None``."""
    from phronomy_fsm.agent.recovery import RESOLUTION_REQUIRED, classify
    from phronomy_fsm.runtime.processes import DEAD, current_process, probe_owner

    if not execution.is_active:
        return None
    found = classify(execution)
    if found.kind != RESOLUTION_REQUIRED:
        return None
    owner = store.agent_owner(execution.agent_id)
    if owner is not None and probe_owner(owner.process, current_process())[0] != DEAD:
        return None
    return found


_AGENT_SUBJECT_KEYS = {
    "llm_call": "llm_call_id",
    "tool_invocation": "tool_invocation_id",
    "execution": "execution_id",
}


def _agent_commands(
    execution: agent_records.ExecutionRecord, found: Any, db_path: str
) -> tuple[str, ...]:
    subject = found.subject or {}
    kind = subject.get("type", "execution")
    ident = subject.get(_AGENT_SUBJECT_KEYS.get(kind, "execution_id"), execution.execution_id)
    base = [
        "phronomy-fsm", "resolve", execution.execution_id, "--db", db_path,
        "--app", "MODULE:FACTORY", "--expected-revision", str(execution.revision),
        "--subject", f"{kind}:{ident}",
    ]  # fmt: skip
    commands = []
    for outcome in found.allowed_outcomes:
        words = [*base, "--outcome", outcome]
        if outcome == "succeeded":
            words += ["--result", RESULT_PLACEHOLDER]
        elif outcome == "failed":
            words += ["--error", ERROR_PLACEHOLDER]
        commands.append(shlex.join(words))
    return tuple(commands)


def load_any_execution(
    store: Any, execution_id: str
) -> ExecutionRecord | agent_records.ExecutionRecord:
    """The stored execution ``execution_id``: an engine
    :class:`~phronomy_fsm.durable.records.ExecutionRecord`, or the agent layer's
    :class:`~phronomy_fsm.store.records.ExecutionRecord` for an agent execution.

    Raises:
        NotFoundError: no such execution. SerializationError: its body is damaged
            (the engine decoder's message). StorageError.
    """
    try:
        return store.load_record(execution_id)  # type: ignore[no-any-return]
    except SerializationError as engine_error:
        try:
            return store.load_execution(execution_id)  # type: ignore[no-any-return]
        except SerializationError:
            raise engine_error from None


def describe_execution(
    store: Any,
    execution_id: str,
    *,
    db_path: str | None = None,
    app_spec: str | None = None,
    clock: Clock = SYSTEM_CLOCK,
) -> ExecutionDetail | AgentExecutionDetail:
    """Everything an operator reads about one execution.

    Args:
        store: the store (read-only is enough).
        execution_id: the execution.
        db_path / app_spec: written into the resolve commands (``--db``, and ``--app``
            when given); ``db_path`` defaults to the store's path.
        clock: decides whether the owner's lease still runs.

    Returns:
        :class:`ExecutionDetail` for an engine execution (record, barrier log, signals
        with their outcomes, journal entries, owner, awaited events, recovery request),
        :class:`AgentExecutionDetail` for an agent execution.

    Raises:
        NotFoundError, SerializationError, StorageError.
    """
    record = load_any_execution(store, execution_id)
    db = store.path if db_path is None else db_path
    if isinstance(record, agent_records.ExecutionRecord):
        found = _agent_request(store, record)
        return AgentExecutionDetail(
            record,
            tuple(store.barrier_history(execution_id)),
            tuple(store.execution_journal(execution_id)),
            needs_operator=found is not None,
            reason=None if found is None else found.reason,
            commands=() if found is None else _agent_commands(record, found, db),
        )
    return ExecutionDetail(
        record=record,
        barriers=tuple(store.barrier_log(execution_id)),
        signals=tuple(store.list_signals(execution_id)),
        journal=tuple(store.journal_entries(execution_id)),
        owner=execution_owner(store, execution_id, clock=clock),
        awaits=awaited_events(store, record),
        recovery=recovery_request(record, db_path=db, app_spec=app_spec),
    )


def execution_owner(
    store: Any, execution_id: str, *, clock: Clock = SYSTEM_CLOCK
) -> WorkerLease | None:
    """The worker owning an engine execution (``None``: never claimed), with whether
    it still runs it: its lease has not passed at ``clock.now()`` and its process is
    not provably gone (:func:`phronomy_fsm.runtime.processes.probe_owner`). Raises
    NotFoundError, StorageError."""
    from phronomy_fsm.runtime.processes import DEAD, ProcessIdentity, current_process, probe_owner

    owner_id, _token, expires_ms = store.execution_owner(execution_id)
    if owner_id is None:
        return None
    worker = next((w for w, _hb, _exp in store.list_workers() if w.worker_id == owner_id), None)
    gone = False
    if worker is not None:
        identity = ProcessIdentity(
            worker.host, worker.pid, worker.start_time, worker.boot_id, worker.pid_namespace
        )
        gone = probe_owner(identity, current_process())[0] == DEAD
    now_ms = datetime_to_epoch_ms(clock.now())
    return WorkerLease(
        worker_id=owner_id,
        is_live=expires_ms is not None and expires_ms >= now_ms and not gone,
        lease_expires_at=None if not expires_ms else epoch_ms_to_datetime(expires_ms),
        host=None if worker is None else worker.host,
        pid=None if worker is None else worker.pid,
        process_gone=gone,
    )


def awaited_events(
    store: Any, record: ExecutionRecord, facts: MachineFacts | None = None
) -> tuple[str, ...]:
    """The events a waiting execution takes by signal, sorted: those its wait state
    handles among the events its machine lets anyone signal (``facts``, else the
    machine's table registered in the store). Empty when it is not waiting or the
    table was never registered. Raises StorageError."""
    if record.status is not ExecutionStatus.WAITING:
        return ()
    facts = facts if facts is not None else operations.machine_facts(store, record)
    if facts is None:
        return ()
    return tuple(sorted(facts.handled.get(record.state, frozenset()) & facts.signal_events))


def recovery_request(
    record: ExecutionRecord, *, db_path: str, app_spec: str | None = None
) -> RecoveryRequest | None:
    """The :class:`RecoveryRequest` of an execution in ``recovery_required`` (``None``
    otherwise), with one ``phronomy-fsm resolve`` command per allowed outcome, naming
    ``db_path`` (and ``--app app_spec`` when given). Pure."""
    info = record.recovery
    if record.status is not ExecutionStatus.RECOVERY_REQUIRED or info is None:
        return None
    base = ["phronomy-fsm", "resolve", record.execution_id, "--db", db_path]
    if app_spec is not None:
        base += ["--app", app_spec]
    base += ["--expected-revision", str(record.revision)]
    commands = []
    for outcome in info.allowed_outcomes:
        words = [*base, "--outcome", outcome]
        if outcome == "succeeded":
            words += ["--result", RESULT_PLACEHOLDER]
        elif outcome == "failed":
            words += ["--error", ERROR_PLACEHOLDER]
        commands.append(shlex.join(words))
    return RecoveryRequest(
        execution_id=record.execution_id,
        revision=record.revision,
        reason=info.reason,
        subject=info.subject,
        allowed_outcomes=tuple(info.allowed_outcomes),
        detected_at=info.detected_at,
        commands=tuple(commands),
    )


# ------------------------------------------------------------------ writing


def signal_execution(
    store: Any,
    execution_id: str,
    event: str,
    payload: Any = None,
    *,
    expected_revision: int | None = None,
    signal_id: str | None = None,
    sender: str = DEFAULT_SENDER,
    clock: Clock = SYSTEM_CLOCK,
) -> InboxReceipt:
    """Send ``event`` with JSON ``payload`` to an engine execution's durable inbox
    (:func:`phronomy_fsm.durable.operations.send_signal`: the rules, and what it
    refuses).

    Returns:
        An :class:`InboxReceipt`: the stored signal and the owner that applies it.

    Raises:
        NotFoundError, ExecutionFinishedError, SignalRefusedError (undeclared or
        engine-internal event, payload not JSON, stale ``expected_revision``, an agent
        execution), InvalidIdError, StorageError — nothing was written.

    Durability: committed before it returns; a retry with the same ``signal_id`` is a
    no-op that returns the first signal.
    """
    signal = operations.send_signal(
        store,
        execution_id,
        event,
        payload,
        expected_revision=expected_revision,
        signal_id=signal_id,
        sender=sender,
    )
    return InboxReceipt(signal, execution_owner(store, execution_id, clock=clock))


def resolve_execution(
    store: Any,
    execution_id: str,
    *,
    expected_revision: int,
    outcome: str,
    result: Any = None,
    error: str | None = None,
    subject: str | None = None,
    signal_id: str | None = None,
    sender: str = DEFAULT_SENDER,
    clock: Clock = SYSTEM_CLOCK,
) -> InboxReceipt:
    """Answer an engine execution in ``recovery_required``
    (:func:`phronomy_fsm.durable.operations.request_resolution`: outcomes and what it
    refuses).

    Args:
        subject: optionally, what the operator believes the subject is —
            ``effect:<hook>`` or ``execution:<id>``; refused when it is not the
            stored subject (a check that the answer is about what was looked up).

    Raises:
        NotFoundError, ExecutionFinishedError, ResolutionError (not waiting for an
        operator, stale revision, outcome not allowed, missing or forbidden
        result/error, result not JSON, another subject), SignalRefusedError (an agent
        execution), StorageError — nothing was written.

    Durability: committed to the inbox before it returns; the owner applies it in a
    ``@resolution`` commit.
    """
    if subject is not None:
        _check_subject(store, execution_id, subject)
    signal = operations.request_resolution(
        store,
        execution_id,
        expected_revision=expected_revision,
        outcome=outcome,
        result=result,
        error=error,
        signal_id=signal_id,
        sender=sender,
    )
    return InboxReceipt(signal, execution_owner(store, execution_id, clock=clock))


def _check_subject(store: Any, execution_id: str, subject: str) -> None:
    record = operations.load_execution_record(store, execution_id)
    stored = None if record.recovery is None else record.recovery.subject
    expected = f"execution:{execution_id}" if stored is None else f"effect:{stored.effect}"
    if record.recovery is not None and subject != expected:
        raise ResolutionError(
            f"execution {execution_id} waits for an answer about {expected}, not {subject}; "
            "nothing was written",
            execution_id=execution_id,
            reason="subject",
        )


def cancel_execution(
    store: Any,
    execution_id: str,
    *,
    reason: str = "cancelled by an operator",
    expected_revision: int | None = None,
    signal_id: str | None = None,
    sender: str = DEFAULT_SENDER,
    clock: Clock = SYSTEM_CLOCK,
) -> InboxReceipt:
    """Ask an engine execution's owner to cancel it
    (:func:`phronomy_fsm.durable.operations.request_cancel`): once nothing of it runs
    it finishes ``cancelled``. With ``expected_revision`` it is refused unless the
    execution is still at that revision (the console sends the revision its page
    showed).

    Raises:
        NotFoundError, ExecutionFinishedError, SignalRefusedError (an agent
        execution, a stale ``expected_revision``), InvalidIdError, StorageError —
        nothing was written.
    """
    signal = operations.request_cancel(
        store,
        execution_id,
        reason=reason,
        expected_revision=expected_revision,
        signal_id=signal_id,
        sender=sender,
    )
    return InboxReceipt(signal, execution_owner(store, execution_id, clock=clock))


__all__ = [
    "DEFAULT_SENDER",
    "ERROR_PLACEHOLDER",
    "RESULT_PLACEHOLDER",
    "cancel_execution",
    "describe_execution",
    "execution_owner",
    "list_executions",
    "load_any_execution",
    "recovery_request",
    "resolve_execution",
    "signal_execution",
]
