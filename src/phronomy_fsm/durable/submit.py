"""Start an execution **for the workers**: commit its start with no owner, run it nowhere.

:func:`submit_execution` is what a web handler, a cron job or any process that does not
run executions itself calls (``DurableRuntime.start(..., run_here=False)`` does the
same): the execution is committed at revision 0 (point ``start``, status ``running``)
with no owner and fencing token 0, so it is at once **runnable**: the next worker that
scans for work (or hears ``phronomy_work`` on PostgreSQL) claims it — taking the
fencing token to 1 — and runs it from its initial state (``docs/scale-out.md``,
"Starting executions for the workers"). The rules of starting are those of
``docs/semantics.md`` ("Starting").
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from phronomy_fsm.durable.codec import EncodedJSON
from phronomy_fsm.durable.context import ContextCodec
from phronomy_fsm.durable.keys import check_id, new_execution_id
from phronomy_fsm.durable.points import EngineBarrier
from phronomy_fsm.durable.ports import ExecutionStore
from phronomy_fsm.durable.records import (
    DurableCommit,
    DurablePoint,
    ExecutionRecord,
    ExecutionStatus,
)
from phronomy_fsm.durable.types import Machine
from phronomy_fsm.errors import ConflictError, ExecutionExistsError, OutcomeUnknownError
from phronomy_fsm.runtime.clock import SYSTEM_CLOCK, Clock
from phronomy_fsm.table import COMMITTED, NOT_COMMITTED, check_delay


def start_record(
    machine: Machine,
    encoded_context: bytes,
    *,
    execution_id: str,
    exclusive_key: str | None,
    labels: dict[str, Any] | None,
    clock: Clock,
    timeout_seconds: float | None = None,
) -> ExecutionRecord:
    """The revision-0 record of a new execution of ``machine`` (initial state, point
    ``start``, ``running``) with an already encoded context; ``timeout_seconds`` sets
    its deadline (``expires_at``).

    Raises ValueError for a timeout that is not a positive number of seconds."""
    table = machine.table
    now = clock.now()
    expires_at = (
        None
        if timeout_seconds is None
        else now + timedelta(seconds=check_delay(timeout_seconds, "timeout_seconds"))
    )
    return ExecutionRecord(
        execution_id=execution_id,
        machine=table.machine,
        spec_version=table.version,
        spec_sha256=table.spec_sha256,
        state=table.initial,
        point=DurablePoint.START,
        status=ExecutionStatus.RUNNING,
        revision=0,
        created_at=now,
        updated_at=now,
        context=EncodedJSON(encoded_context),
        exclusive_key=exclusive_key,
        labels=dict(labels or {}),
        expires_at=expires_at,
    )


def commit_start(store: ExecutionStore, commit: DurableCommit) -> bool:
    """Commit a start (a lost response read back); returns False when an execution of
    that id and machine existed already (nothing was written).

    Raises ExecutionExistsError (another machine), AgentBusyError, StorageError."""
    try:
        store.submit(commit).result()
    except (OutcomeUnknownError, ConflictError) as exc:
        return start_outcome(store, commit, exc)
    return True


def start_outcome(store: ExecutionStore, commit: DurableCommit, error: BaseException) -> bool:
    """What a start whose commit raised ``error`` (OutcomeUnknownError or
    ConflictError) amounts to, read back from the store (blocking): True when it
    committed after all, False when an execution of that id and machine existed
    already.

    Raises ExecutionExistsError (the id runs another machine), ``error`` itself when
    the start did not commit, ConflictError when something else is stored."""
    record = commit.execution
    eid = record.execution_id
    try:
        if isinstance(error, OutcomeUnknownError):
            disposition = store.reconcile(commit)
            if disposition == COMMITTED:
                return True
            if disposition == NOT_COMMITTED:
                raise error
            raise ConflictError(
                f"execution {eid}: the start's outcome was lost and something else is stored",
                execution_id=eid,
            ) from None
        raise error
    except ConflictError:
        existing = store.load_record(eid)
        if existing.machine != record.machine:
            raise ExecutionExistsError(
                f"execution {eid} exists and runs machine {existing.machine!r}, "
                f"not {record.machine!r}",
                execution_id=eid,
                machine=existing.machine,
            ) from None
        return False


def submit_execution(
    store: ExecutionStore,
    machine: Machine,
    context: Any,
    *,
    execution_id: str | None = None,
    exclusive_key: str | None = None,
    labels: dict[str, Any] | None = None,
    clock: Clock = SYSTEM_CLOCK,
    timeout_seconds: float | None = None,
) -> tuple[str, bool]:
    """Commit a new execution of ``machine`` with no owner, for a worker to claim.

    Args:
        store: an :class:`~phronomy_fsm.durable.ports.ExecutionStore`.
        machine: the machine (only its table and context type are used: the hooks
            run in the worker).
        context: an instance of the machine's context type.
        execution_id: 1-128 printable characters without whitespace (default: random).
        exclusive_key / labels / timeout_seconds: as :meth:`DurableRuntime.start`.
        clock: the clock of the record's times.

    Returns:
        ``(execution_id, created)``: ``created`` is False when an execution of that id
        and machine existed already (nothing was written; a caller unsure whether its
        submit committed may submit again).

    Raises:
        InvalidIdError, ContextSerializationError (naming the path; nothing written),
        ExecutionExistsError (the id runs another machine), AgentBusyError (the
        exclusive key has an active execution), StorageError.

    Durability: committed before it returns (a lost response is read back).
    """
    eid = new_execution_id() if execution_id is None else check_id(execution_id)
    codec = ContextCodec(machine.context_type, machine.name)
    codec.check(context)
    record = start_record(
        machine,
        codec.encode(context),
        execution_id=eid,
        exclusive_key=exclusive_key,
        labels=labels,
        clock=clock,
        timeout_seconds=timeout_seconds,
    )
    commit = DurableCommit(EngineBarrier.START.value, record, None, None)
    return eid, commit_start(store, commit)


__all__ = ["commit_start", "start_outcome", "start_record", "submit_execution"]
