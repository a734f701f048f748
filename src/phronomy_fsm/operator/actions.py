"""The operator's reads and inbox writes: list, describe, signal, approve, resolve,
cancel.

Reads cover every execution of a store, agents' included. Writes go through
:mod:`phronomy_fsm.durable.operations` (and, for agents, through
:mod:`phronomy_fsm.agent.approvals`), which validate against the stored execution and
its machine's registered table and write nothing when they refuse. Returns the values
of :mod:`phronomy_fsm.operator.views`.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from phronomy_fsm.durable import operations
from phronomy_fsm.durable.codec import datetime_to_epoch_ms, epoch_ms_to_datetime
from phronomy_fsm.durable.machines import MachineFacts
from phronomy_fsm.durable.ports import ExecutionStore
from phronomy_fsm.durable.records import (
    BarrierLogRecord,
    ExecutionRecord,
    ExecutionStatus,
    ResolutionOutcome,
    SignalKind,
    SignalRecord,
)
from phronomy_fsm.errors import ResolutionError
from phronomy_fsm.operator import agents
from phronomy_fsm.operator.views import (
    AGENT_MACHINE,
    WAITS_FOR_OPERATOR,
    ExecutionDetail,
    ExecutionPage,
    ExecutionSummary,
    InboxReceipt,
    RecoveryRequest,
    ResultShape,
    WaitEnding,
    WorkerLease,
)
from phronomy_fsm.runtime.clock import SYSTEM_CLOCK, Clock
from phronomy_fsm.store.open import command_target, redact_dsn

#: What ``sender`` the operator's signals record unless a front end names itself.
DEFAULT_SENDER = "operator"
#: Placeholders in the printed resolve commands: the operator fills them in. Neither
#: is JSON, so a command pasted unchanged with ``--result`` is refused.
RESULT_PLACEHOLDER = "<the result as JSON>"
ERROR_PLACEHOLDER = "<what went wrong>"


#: ``waiting_for`` of :func:`list_executions`: the status each selects.
WAITING_FOR_STATUS = {
    WAITS_FOR_OPERATOR: ExecutionStatus.RECOVERY_REQUIRED.value,
    "person": ExecutionStatus.WAITING.value,
}


def list_executions(
    store: ExecutionStore,
    *,
    machine: str | None = None,
    status: str | None = None,
    exclusive_key: str | None = None,
    waiting_for: str | None = None,
    limit: int | None = None,
    offset: int = 0,
    clock: Clock = SYSTEM_CLOCK,
) -> ExecutionPage:
    """One page of the store's executions of every machine, agents' included.

    Args:
        store: an :class:`~phronomy_fsm.durable.ports.ExecutionStore` (read-only is
            enough).
        machine / status / exclusive_key: only executions matching every given filter
            (an agent's execution has its agent id as exclusive key).
        waiting_for: ``operator`` (in ``recovery_required``: answer with ``resolve``)
            or ``person`` (``waiting``: an approval, or a signal of a wait state).
        limit: at most this many rows (``None``: all); offset: skip this many first.
        clock: decides whether an owner's lease still runs.

    Returns:
        An :class:`ExecutionPage` (oldest first) with counts per status; each row says
        whether a live worker runs it.

    Raises:
        ValueError: a negative ``limit`` or ``offset``, an unknown ``waiting_for``, or
            a ``status`` that contradicts it.
        StorageError: the read failed.
    """
    if (limit is not None and limit < 0) or offset < 0:
        raise ValueError("limit and offset must not be negative")
    if waiting_for is not None:
        wanted = WAITING_FOR_STATUS.get(waiting_for)
        if wanted is None:
            raise ValueError(
                f"waiting_for must be one of {sorted(WAITING_FOR_STATUS)}, not {waiting_for!r}"
            )
        if status is not None and status != wanted:
            raise ValueError(
                f"status {status!r} contradicts waiting for {waiting_for} (status {wanted})"
            )
        status = wanted
    counts = store.count_by_status(machine=machine, exclusive_key=exclusive_key)
    total = sum(counts.values()) if status is None else counts.get(status, 0)
    rows = store.execution_rows(
        machine=machine, status=status, exclusive_key=exclusive_key, limit=limit, offset=offset
    )
    leases = _worker_leases(store, clock)
    expiry = {w.worker_id: expires for w, _hb, expires in store.list_workers()}
    parked: dict[str, list[str]] = {}  # parent -> its children waiting for an operator
    for child in store.execution_rows(status=ExecutionStatus.RECOVERY_REQUIRED.value):
        if child["parent_execution_id"] is not None:
            parked.setdefault(child["parent_execution_id"], []).append(child["execution_id"])
    summaries = []
    for row in rows:
        owner = row["owner_id"]
        live = owner is not None and leases(owner, expiry.get(owner)).is_live
        summary = _summary(row, has_live_owner=live)
        children = parked.get(summary.execution_id)
        if children:
            summary = attrs.evolve(summary, parked_children=tuple(children))
        summaries.append(summary)
    return ExecutionPage(tuple(summaries), dict(counts), total, offset, limit)


def _summary(row: Mapping[str, Any], *, has_live_owner: bool) -> ExecutionSummary:
    deadline = row["deadline_epoch_ms"]
    return ExecutionSummary(
        execution_id=row["execution_id"],
        machine=row["machine"],
        state=row["state"],
        status=row["status"],
        revision=row["revision"],
        active=bool(row["active"]),
        needs_operator=row["status"] == ExecutionStatus.RECOVERY_REQUIRED.value,
        created_at=epoch_ms_to_datetime(row["created_epoch_ms"]),
        updated_at=epoch_ms_to_datetime(row["updated_epoch_ms"]),
        exclusive_key=row["exclusive_key"],
        parent_execution_id=row["parent_execution_id"],
        owner_id=row["owner_id"],
        deadline_at=None if deadline is None else epoch_ms_to_datetime(deadline),
        has_live_owner=has_live_owner,
    )


def describe_execution(
    store: ExecutionStore,
    execution_id: str,
    *,
    db_path: str | None = None,
    app_spec: str | None = None,
    clock: Clock = SYSTEM_CLOCK,
) -> ExecutionDetail:
    """Everything an operator reads about one execution.

    Args:
        store: the store (read-only is enough).
        execution_id: the execution.
        db_path / app_spec: written into the resolve and approve commands (``--db``,
            and ``--app`` when given); ``db_path`` defaults to the store's path.
        clock: decides whether the owner's lease still runs.

    Returns:
        An :class:`ExecutionDetail`: record, barrier log, signals with their outcomes,
        journal entries, owner, awaited events, recovery request, and for an agent's
        execution or tool call the agent's side (:class:`AgentView`).

    Raises:
        NotFoundError, SerializationError, StorageError.
    """
    # a read: whatever id a store holds can be shown (printed escaped by front ends)
    record: ExecutionRecord = store.load_record(execution_id)
    db = command_target(store) if db_path is None else db_path
    children: tuple[str, ...] = ()
    if record.machine == AGENT_MACHINE:
        children = tuple(
            child.execution_id for child in store.list_records(parent_execution_id=execution_id)
        )
    facts = operations.machine_facts(store, record)
    barriers = tuple(store.barrier_log(execution_id))
    signals = tuple(store.list_signals(execution_id))
    return ExecutionDetail(
        record=record,
        barriers=barriers,
        signals=signals,
        journal=tuple(store.journal_entries(execution_id)),
        owner=execution_owner(store, execution_id, clock=clock),
        awaits=awaited_events(store, record, facts),
        recovery=recovery_request(record, db_path=db, app_spec=app_spec, facts=facts),
        agent=agents.agent_view(record, db_path=db, app_spec=app_spec, tool_calls=children),
        wait_endings=wait_endings(barriers, signals, facts),
    )


def wait_endings(
    barriers: tuple[BarrierLogRecord, ...],
    signals: tuple[SignalRecord, ...],
    facts: MachineFacts | None,
) -> tuple[WaitEnding, ...]:
    """How each stay of an execution in a wait state ended (:class:`WaitEnding`),
    oldest first, from its barrier log and its signals: a commit in status
    ``waiting`` starts a stay; the next commit ends it — by the event signal it
    consumed, else by a cancel or a resolution it consumed, else by the wait state's
    timer when the state has one (``facts``: the machine's table). Pure."""
    endings = []
    by_revision: dict[int, list[SignalRecord]] = {}
    for signal in signals:
        if signal.consumed_revision is not None and signal.outcome in (None, "consumed"):
            by_revision.setdefault(signal.consumed_revision, []).append(signal)
    for index, row in enumerate(barriers):
        if row.status != ExecutionStatus.WAITING.value:
            continue
        if index + 1 < len(barriers) and barriers[index + 1].revision == row.revision:
            continue  # another row of the same commit
        after = next((b for b in barriers[index + 1 :] if b.revision > row.revision), None)
        if after is None:
            endings.append(WaitEnding(row.revision, row.state, None, None))
            continue
        consumed = by_revision.get(after.revision, [])
        event = next((s for s in consumed if s.kind is SignalKind.EVENT), None)
        other = next(
            (s for s in consumed if s.kind in (SignalKind.CANCEL, SignalKind.RESOLUTION)), None
        )
        timeout = None
        if facts is not None and row.state in facts.states:
            timeout = facts.states[row.state].timeout
        if event is not None:
            ending = WaitEnding(
                row.revision, row.state, after.revision, "signal", event.event, event.seq
            )
        elif other is not None:
            ending = WaitEnding(
                row.revision, row.state, after.revision, other.kind.value, None, other.seq
            )
        elif timeout is not None:
            ending = WaitEnding(row.revision, row.state, after.revision, "timer", timeout.event)
        else:
            ending = WaitEnding(row.revision, row.state, after.revision, "unknown")
        endings.append(ending)
    return tuple(endings)


def execution_owner(
    store: ExecutionStore, execution_id: str, *, clock: Clock = SYSTEM_CLOCK
) -> WorkerLease | None:
    """The worker owning an execution (``None``: never claimed), with whether it still
    runs it: its lease has not passed at ``clock.now()`` and its process is not
    provably gone (:func:`phronomy_fsm.runtime.processes.probe_owner`). Raises
    NotFoundError, StorageError."""
    owner_id, _token, expires_ms = store.execution_owner(execution_id)
    if owner_id is None:
        return None
    return _worker_leases(store, clock)(owner_id, expires_ms)


def _worker_leases(store: ExecutionStore, clock: Clock) -> Callable[[str, int | None], WorkerLease]:
    """A function ``(worker_id, lease_expires_ms) -> WorkerLease`` over the store's
    workers as read now, probing each worker's process at most once."""
    from phronomy_fsm.runtime.processes import DEAD, ProcessIdentity, current_process, probe_owner

    workers = {w.worker_id: w for w, _hb, _exp in store.list_workers()}
    gone: dict[str, bool] = {}
    now_ms = datetime_to_epoch_ms(clock.now())
    me = current_process()

    def lease(owner_id: str, expires_ms: int | None) -> WorkerLease:
        worker = workers.get(owner_id)
        if worker is not None and owner_id not in gone:
            identity = ProcessIdentity(
                worker.host, worker.pid, worker.start_time, worker.boot_id, worker.pid_namespace
            )
            gone[owner_id] = probe_owner(identity, me)[0] == DEAD
        is_gone = gone.get(owner_id, False)
        return WorkerLease(
            worker_id=owner_id,
            is_live=expires_ms is not None and expires_ms >= now_ms and not is_gone,
            lease_expires_at=None if not expires_ms else epoch_ms_to_datetime(expires_ms),
            host=None if worker is None else worker.host,
            pid=None if worker is None else worker.pid,
            process_gone=is_gone,
        )

    return lease


def awaited_events(
    store: ExecutionStore, record: ExecutionRecord, facts: MachineFacts | None = None
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
    events = facts.handled.get(record.state, frozenset()) & facts.signal_events
    timeout = facts.states[record.state].timeout if record.state in facts.states else None
    if timeout is not None:
        events -= {timeout.event}  # its timer sends it; a person does not
    return tuple(sorted(events))


def result_shape(record: ExecutionRecord, facts: MachineFacts | None) -> ResultShape | None:
    """What a ``succeeded`` answer about ``record``'s recovery subject must hold: the
    payload type of the subject effect's ``completed`` event, from its own machine's
    table (``facts``); for an agent's LLM call an LLM answer, for its tool call the
    tool's result. ``None`` when there is no effect subject or the table is unknown.
    Pure."""
    info = record.recovery
    if info is None or info.subject is None:
        return None
    terms = agents.agent_recovery_terms(record)
    if terms is not None:
        kind = terms[1].get("type")
        if kind == "llm_call":
            return ResultShape(
                None,
                "LLMResponse",
                "the answer the LLM gave",
                '{"content": "...", "tool_calls": []}',
            )
        if kind == "tool_invocation":
            return ResultShape(None, None, f"the result of tool {terms[1].get('tool_name')}")
    if facts is None:
        return None
    offloads = [s.offload for s in facts.table.states] + [
        t.offload for t in facts.table.transitions
    ]
    offload = next((o for o in offloads if o is not None and o.hook == info.subject.effect), None)
    if offload is None:
        return None
    event = next((e for e in facts.table.events if e.name == offload.completed), None)
    payload = None if event is None else event.payload
    return ResultShape(
        offload.completed,
        payload,
        "" if event is None else event.description,
        _JSON_EXAMPLES.get(payload or ""),
    )


#: A JSON text of each payload type JSON itself has, for the answer's example.
_JSON_EXAMPLES = {
    "dict": "{}",
    "list": "[]",
    "str": '""',
    "int": "0",
    "float": "0.0",
    "bool": "true",
}


def recovery_request(
    record: ExecutionRecord,
    *,
    db_path: str,
    app_spec: str | None = None,
    facts: MachineFacts | None = None,
) -> RecoveryRequest | None:
    """The :class:`RecoveryRequest` of an execution in ``recovery_required`` (``None``
    otherwise), with one ``phronomy-fsm resolve`` command per allowed outcome, naming
    ``db_path`` (and ``--app app_spec`` when given). For an agent's execution or tool
    call the subject is also described in the agent's terms and each command checks it
    with ``--subject``. ``facts`` (the machine's table) gives the ``result_shape`` a
    ``succeeded`` answer needs (:func:`result_shape`). Pure."""
    info = record.recovery
    if record.status is not ExecutionStatus.RECOVERY_REQUIRED or info is None:
        return None
    terms = agents.agent_recovery_terms(record)
    agent_id, agent_subject = (None, None) if terms is None else terms
    base = ["phronomy-fsm", "resolve", record.execution_id, "--db", redact_dsn(db_path)]
    if app_spec is not None:
        base += ["--app", app_spec]
    base += ["--expected-revision", str(record.revision)]
    subject = None if agent_subject is None else agents.subject_option(agent_subject)
    if subject is not None:
        base += ["--subject", subject]
    placeholder = agents.result_placeholder(agent_subject) or RESULT_PLACEHOLDER
    commands = []
    for outcome in info.allowed_outcomes:
        words = [*base, "--outcome", outcome]
        if outcome == ResolutionOutcome.SUCCEEDED:
            words += ["--result", placeholder]
        elif outcome == ResolutionOutcome.FAILED:
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
        agent_id=agent_id,
        agent_subject=agent_subject,
        parent_execution_id=record.parent_execution_id,
        result_shape=(
            result_shape(record, facts)
            if ResolutionOutcome.SUCCEEDED in info.allowed_outcomes
            else None
        ),
    )


# ------------------------------------------------------------------ writing


def signal_execution(
    store: ExecutionStore,
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
        engine-internal event, payload not JSON, stale ``expected_revision``, an
        agent's ``approval_decided`` — use :func:`approve_execution` — or
        ``tool_finished``, ``signal_id`` already used by another signal:
        ``signal_id_reused``), InvalidIdError, StorageError — nothing was written.

    Durability: committed before it returns; a retry of the same signal with the same
    ``signal_id`` is a no-op that returns the first signal.
    """
    agents.check_agent_signal(operations.load_execution_record(store, execution_id), event)
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


def approve_execution(
    store: ExecutionStore,
    execution_id: str,
    *,
    approval_request_id: str,
    approved: bool = True,
    decisions: Mapping[str, bool] | None = None,
    by: str | None = None,
    expected_revision: int | None = None,
    sender: str = DEFAULT_SENDER,
    clock: Clock = SYSTEM_CLOCK,
) -> InboxReceipt:
    """Decide an agent execution's pending approval request: the decision is checked
    against the stored execution and written to its durable inbox; the worker that
    runs the execution applies it (:func:`phronomy_fsm.agent.approvals.send_approval`).

    Args:
        execution_id / approval_request_id: from ``executions show`` (or the agent's
            ``approval_required`` event).
        approved: the decision for every item when ``decisions`` is None.
        decisions: tool invocation id → True (run it) / False (reject it), for every
            item of the request.
        by: who decided (kept in the execution's audit); sender: recorded with the
            signal.
        expected_revision: refuse unless the execution is still at this revision
            (the console sends the revision its page showed; ``None``: not checked
            beyond the request itself).

    Returns:
        An :class:`InboxReceipt`: the stored signal and the owner that applies it.

    Raises:
        ApprovalError: not an agent execution, finished, not waiting for approval,
            another request pending, decisions that do not name every item once, or
            the request was **already decided** (also when another decision for it is
            on its way), a stale ``expected_revision`` (``reason`` ``stale_revision``).
            NotFoundError, InvalidIdError, StorageError — nothing was written.

    Durability: committed to the inbox before it returns; two decisions sent at once
    for the same request are one signal: the second is refused.
    """
    from phronomy_fsm.agent import approvals  # the agent layer is heavy: only when used

    operations.load_execution_record(store, execution_id)  # a clear error for a bad id
    signal = approvals.send_approval(
        store,
        execution_id,
        approval_request_id=approval_request_id,
        approved=approved,
        decisions=decisions,
        by=by,
        expected_revision=expected_revision,
        sender=sender,
    )
    return InboxReceipt(signal, execution_owner(store, execution_id, clock=clock))


def extend_budget_execution(
    store: ExecutionStore,
    execution_id: str,
    *,
    limits: Mapping[str, int | float],
    request_id: str | None = None,
    by: str | None = None,
    expected_revision: int | None = None,
    sender: str = DEFAULT_SENDER,
    clock: Clock = SYSTEM_CLOCK,
) -> InboxReceipt:
    """Extend the budget of an agent execution waiting in ``budget_exhausted``: the
    new limits are checked against the stored execution and written to its durable
    inbox; the worker that runs the execution applies them
    (:func:`phronomy_fsm.agent.approvals.send_budget_extension`; ``docs/agent.md``,
    "Budgets").

    Args:
        limits: limit name (``max_tokens``, ``max_llm_calls``, ``max_tool_calls``,
            ``max_cost_usd``) → new value; the others stay.
        request_id: the pending budget request (``executions show``); None: the one
            pending now.
        by / sender / expected_revision: as for :func:`approve_execution`.

    Returns:
        An :class:`InboxReceipt`: the stored signal and the owner that applies it.

    Raises:
        BudgetError: not waiting for a budget, another request, limits that are not
            limits, lowered, or still refusing the waiting call, a stale
            ``expected_revision``, an extension already on its way. NotFoundError,
            InvalidIdError, StorageError — nothing was written.

    Durability: committed to the inbox before it returns.
    """
    from phronomy_fsm.agent import approvals  # the agent layer is heavy: only when used

    operations.load_execution_record(store, execution_id)  # a clear error for a bad id
    signal = approvals.send_budget_extension(
        store,
        execution_id,
        limits=limits,
        request_id=request_id,
        by=by,
        expected_revision=expected_revision,
        sender=sender,
    )
    return InboxReceipt(signal, execution_owner(store, execution_id, clock=clock))


def resolve_execution(
    store: ExecutionStore,
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
    """Answer an execution in ``recovery_required``: what happened to its subject
    (:func:`phronomy_fsm.durable.operations.request_resolution`: outcomes and what it
    refuses). An agent's execution or tool call is answered through
    :func:`phronomy_fsm.agent.approvals.send_resolution`, which also checks that the
    result for an LLM call is an LLM answer.

    Args:
        subject: optionally, what the operator believes the subject is —
            ``effect:<hook>`` or ``execution:<id>``, and for an agent also
            ``llm_call:<id>`` or ``tool_invocation:<id>``; refused when it is not the
            stored subject (a check that the answer is about what was looked up).

    Raises:
        NotFoundError, ExecutionFinishedError, ResolutionError (not waiting for an
        operator, stale revision, outcome not allowed, missing or forbidden
        result/error, result not JSON or not an LLM answer, another subject),
        InvalidIdError, StorageError — nothing was written.

    Durability: committed to the inbox before it returns; the owner applies it in a
    ``@resolution`` commit.
    """
    record = operations.load_execution_record(store, execution_id)
    if subject is not None:
        _check_subject(record, subject)
    if agents.is_agent_execution(record):
        from phronomy_fsm.agent import approvals  # the agent layer is heavy: only when used

        signal = approvals.send_resolution(
            store,
            execution_id,
            expected_revision=expected_revision,
            outcome=outcome,
            result=result,
            error=error,
            signal_id=signal_id,
            sender=sender,
        )
    else:
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


def _check_subject(record: ExecutionRecord, subject: str) -> None:
    if record.recovery is None:
        return  # not waiting for an operator: the resolution itself says so
    execution_id = record.execution_id
    matches = agents.matches_agent_subject(record, subject)
    stored = record.recovery.subject
    expected = f"execution:{execution_id}" if stored is None else f"effect:{stored.effect}"
    if matches is None:
        matches = subject == expected
    if not matches:
        terms = agents.agent_recovery_terms(record)
        named = None if terms is None else agents.subject_option(terms[1])
        about = agents.describe_agent_subject(named) if named else expected
        raise ResolutionError(
            f"execution {execution_id} waits for an answer about {about}, not "
            f"{agents.describe_agent_subject(subject)}; nothing was written",
            execution_id=execution_id,
            reason="subject",
        )


def cancel_execution(
    store: ExecutionStore,
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
        NotFoundError, ExecutionFinishedError, SignalRefusedError (a stale
        ``expected_revision``), InvalidIdError, StorageError —
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
    "WAITING_FOR_STATUS",
    "approve_execution",
    "cancel_execution",
    "describe_execution",
    "execution_owner",
    "extend_budget_execution",
    "list_executions",
    "recovery_request",
    "resolve_execution",
    "result_shape",
    "signal_execution",
    "wait_endings",
]
