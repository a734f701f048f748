"""Recovering a store in this process until its executions rest.

:func:`recover_store` runs a :class:`~phronomy_fsm.durable.runtime.DurableRuntime`
with an application's machines, lets it claim and resume what no live worker runs,
and waits (with a deadline) until each execution rests (:func:`is_at_rest`) — what
``phronomy-fsm recover`` and ``resolve --app`` do.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from datetime import datetime

from phronomy_fsm.durable.app import DurableApp
from phronomy_fsm.durable.machines import MachineFacts
from phronomy_fsm.durable.ports import ExecutionStore
from phronomy_fsm.durable.records import ExecutionRecord, ExecutionStatus, SignalKind, SignalRecord
from phronomy_fsm.durable.types import DurableEvent, DurableEventKind
from phronomy_fsm.operator.actions import awaited_events, execution_owner, recovery_request
from phronomy_fsm.operator.agents import agent_view
from phronomy_fsm.operator.views import ApprovalView, RecoveredExecution, StoreRecoveryReport
from phronomy_fsm.runtime.clock import SYSTEM_CLOCK, Clock
from phronomy_fsm.runtime.faults import FaultPlan
from phronomy_fsm.store.open import command_target


def is_at_rest(
    record: ExecutionRecord,
    pending: Iterable[SignalRecord],
    facts: MachineFacts | None,
    now: datetime,
    *,
    children_at_rest: Sequence[bool] = (),
) -> bool:
    """True when ``record`` rests: finished, waiting for an operator with no
    resolution or cancel pending, or waiting with no cancel or signal it takes
    pending and its timer not yet due — and, unless finished, not past its own
    deadline (``expires_at``). A ``running`` execution rests only while it waits for
    its children: it announced no effect of its own, it has active children
    (``children_at_rest``, one flag per active child) that all rest, and no signal it
    takes is pending (an agent execution whose tool call waits for an operator). Pure."""
    if record.is_finished:
        return True
    if record.expires_at is not None and record.expires_at <= now:
        return False  # past its own deadline: the engine ends it
    pending = list(pending)
    if any(s.kind is SignalKind.CANCEL for s in pending):
        return False
    if record.status is ExecutionStatus.RUNNING:
        return (
            not record.pending_effects
            and bool(children_at_rest)
            and all(children_at_rest)
            and not pending
        )
    if record.status is ExecutionStatus.RECOVERY_REQUIRED:
        return not any(s.kind is SignalKind.RESOLUTION for s in pending)
    if record.deadline_at is not None and record.deadline_at <= now:
        return False
    handled = None if facts is None else facts.handled.get(record.state, frozenset())
    return not any(
        s.kind in (SignalKind.EVENT, SignalKind.CHILD) and (handled is None or s.event in handled)
        for s in pending
    )


def execution_at_rest(
    store: ExecutionStore,
    record: ExecutionRecord,
    facts: Mapping[str, MachineFacts],
    now: datetime,
    *,
    depth: int = 0,
) -> bool:
    """:func:`is_at_rest` of a stored execution, its children's rest read from the
    store (for a ``running`` one). Raises StorageError."""
    children: list[bool] = []
    if record.status is ExecutionStatus.RUNNING and not record.pending_effects and depth < 8:
        children = [
            execution_at_rest(store, child, facts, now, depth=depth + 1)
            for child in store.list_records(parent_execution_id=record.execution_id, active=True)
        ]
    return is_at_rest(
        record,
        store.pending_signals(record.execution_id),
        facts.get(record.machine),
        now,
        children_at_rest=children,
    )


def with_parents(store: ExecutionStore, execution_ids: Iterable[str]) -> list[str]:
    """``execution_ids`` followed by the parents they notify (a child's end moves its
    parent on), each once, nearest first. Raises NotFoundError, StorageError."""
    out: list[str] = []
    for eid in execution_ids:
        current: str | None = eid
        while current is not None and current not in out and len(out) < 1000:
            out.append(current)
            current = store.load_record(current).parent_execution_id
    return out


def recover_store(
    store: ExecutionStore,
    app: DurableApp,
    *,
    wait_seconds: float = 60.0,
    wait_for: Collection[str] | None = None,
    db_path: str | None = None,
    app_spec: str | None = None,
    on_progress: Callable[[int, int], None] | None = None,
    clock: Clock = SYSTEM_CLOCK,
    faults: FaultPlan | None = None,
    park_other_specs: bool = False,
) -> StoreRecoveryReport:
    """Recover a store with a durable application, in this process, until its
    executions rest.

    Starts a :class:`~phronomy_fsm.durable.runtime.DurableRuntime` with the app's
    machines, which claims every active execution of them that no live worker owns
    and whose spec they run, and resumes it from its last commit
    (``docs/semantics.md``, "Recovery"; executions of other specs are left for a
    worker that runs them and reported, ``docs/scale-out.md``, "Rolling upgrades"); waits up
    to ``wait_seconds`` until each claimed execution (or only those in ``wait_for``
    and the parents they notify, which may also name executions a live worker runs)
    is at rest (:func:`is_at_rest`);
    then closes the runtime (its lease ends, so another process may claim what it
    left) and reads every execution back.

    Args:
        store: the store, opened read-write; it is not closed.
        app: the application (:func:`phronomy_fsm.durable.app.load_app`).
        wait_seconds: the deadline of the wait, in seconds.
        wait_for: execution ids to wait for (default: every claimed execution).
        db_path / app_spec: written into the resolve commands of the report.
        on_progress: called with ``(executions at rest, executions waited for)`` each
            time that count may have changed, on the calling thread.
        clock: the runtime's clock.
        faults: crash points for the runtime (tests and the crash harness only).
        park_other_specs: also claim the executions of the app's machines pinned to
            a spec it does not run and park each ``spec_changed`` (only ``failed``
            answers it): for a store where no worker will run that spec again
            (:meth:`~phronomy_fsm.durable.runtime.DurableRuntime.recover`).

    Returns:
        A :class:`StoreRecoveryReport`.

    Raises:
        ValueError: a negative ``wait_seconds``.
        MissingHookError, DurableError: a machine of the app cannot be registered.
        StorageError: the store failed (executions claimed so far are left to the
            next recovery once this worker's lease has passed).

    Durability: every resumed execution commits as it goes; what is still moving when
    the runtime closes is resumed by the next recovery from its last commit.
    Concurrency: blocks the calling thread for up to ``wait_seconds`` plus the
    runtime's close.
    """
    from phronomy_fsm.durable.app import attach_app
    from phronomy_fsm.durable.runtime import DurableRuntime

    if wait_seconds < 0:
        raise ValueError("wait_seconds must not be negative")
    wake = threading.Event()
    started_here: list[str] = []  # executions the app started during the run (handoffs)

    def listen(event: DurableEvent) -> None:
        if event.kind is DurableEventKind.STARTED:
            started_here.append(event.execution_id)
        wake.set()

    facts = {m.name: MachineFacts(m.table, m.final_status) for m in app.machines}
    runtime = DurableRuntime(
        store,
        machines=app.machines,
        clock=clock,
        listeners=[listen, *app.listeners],
        name="phronomy-operator",
        faults=faults,
    )
    detach = attach_app(app, runtime)
    started = time.monotonic()
    try:
        found = runtime.recover(accept=app.accept, park_other_specs=park_other_specs)
        claimed = dict(found.claimed)
        watched = list(claimed) if wait_for is None else with_parents(store, wait_for)
        wait_until_rest(
            store,
            watched,
            facts,
            deadline=started + wait_seconds,
            wake=wake,
            on_progress=on_progress,
            clock=clock,
        )
        # what the app started meanwhile (a handoff nobody started) rests here too
        if wait_for is None:
            runtime.wait_at_rest(max(0.0, started + wait_seconds - time.monotonic()))
        waited = time.monotonic() - started
    finally:
        detach()
        runtime.close(timeout_seconds=min(10.0, max(1.0, wait_seconds)))
    ids = list(claimed) + [eid for eid, _worker in found.owned_elsewhere if eid not in claimed]
    ids += [eid for eid in [*watched, *started_here] if eid not in ids]
    db = command_target(store) if db_path is None else db_path
    entries = []
    for eid in ids:
        record = store.load_record(eid)
        machine_facts = facts.get(record.machine)
        entries.append(
            RecoveredExecution(
                record=record,
                found_status=claimed.get(eid),
                at_rest=execution_at_rest(store, record, facts, clock.now()),
                owner=execution_owner(store, eid, clock=clock),
                awaits=awaited_events(store, record, machine_facts),
                recovery=recovery_request(
                    record, db_path=db, app_spec=app_spec, facts=machine_facts
                ),
                approval=_pending_approval(record, db, app_spec),
            )
        )
    return StoreRecoveryReport(
        tuple(entries), tuple(found.unknown_machine), waited, tuple(found.other_spec)
    )


def _pending_approval(
    record: ExecutionRecord, db_path: str, app_spec: str | None
) -> ApprovalView | None:
    view = agent_view(record, db_path=db_path, app_spec=app_spec)
    approval = None if view is None else view.approval
    return approval if approval is not None and approval.commands else None


def wait_until_rest(
    store: ExecutionStore,
    execution_ids: Iterable[str],
    facts: Mapping[str, MachineFacts],
    *,
    deadline: float,
    wake: threading.Event | None = None,
    on_progress: Callable[[int, int], None] | None = None,
    clock: Clock = SYSTEM_CLOCK,
) -> bool:
    """Poll the store until every execution of ``execution_ids`` rests
    (:func:`execution_at_rest`) or ``deadline`` (a :func:`time.monotonic` value)
    passes; ``wake`` (set by a runtime's listener) ends a poll's pause early.
    ``on_progress(at rest, total)`` is called when that count may have changed.
    Returns True when every one rests. Raises NotFoundError, StorageError.

    Concurrency: blocks the calling thread until then; runs no execution itself."""
    waiting = set(execution_ids)
    total = len(waiting)
    reported = -1
    while True:
        if wake is not None:
            wake.clear()
        for eid in list(waiting):
            if execution_at_rest(store, store.load_record(eid), facts, clock.now()):
                waiting.discard(eid)
        if on_progress is not None and total - len(waiting) != reported:
            reported = total - len(waiting)
            on_progress(reported, total)
        remaining = deadline - time.monotonic()
        if not waiting or remaining <= 0:
            return not waiting
        if wake is not None:
            wake.wait(min(0.2, remaining))
        else:
            time.sleep(min(0.05, remaining))


__all__ = [
    "execution_at_rest",
    "is_at_rest",
    "recover_store",
    "wait_until_rest",
    "with_parents",
]
