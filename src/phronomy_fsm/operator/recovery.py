"""Recovering a store in this process until its executions rest.

:func:`recover_store` runs a :class:`~phronomy_fsm.durable.runtime.DurableRuntime`
with an application's machines, lets it claim and resume what no live worker runs,
and waits (with a deadline) until each execution rests (:func:`is_at_rest`) — what
``phronomy-fsm recover`` and ``resolve --app`` do.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from datetime import datetime
from typing import Any

from phronomy_fsm.durable.app import DurableApp
from phronomy_fsm.durable.machines import MachineFacts
from phronomy_fsm.durable.records import ExecutionRecord, ExecutionStatus, SignalKind, SignalRecord
from phronomy_fsm.operator.actions import awaited_events, execution_owner, recovery_request
from phronomy_fsm.operator.views import RecoveredExecution, StoreRecoveryReport
from phronomy_fsm.runtime.clock import SYSTEM_CLOCK, Clock


def is_at_rest(
    record: ExecutionRecord,
    pending: Iterable[SignalRecord],
    facts: MachineFacts | None,
    now: datetime,
) -> bool:
    """True when ``record`` rests: finished, waiting for an operator with no
    resolution or cancel pending, or waiting with no cancel or signal it takes
    pending and its timer not yet due — and, unless finished, not past its own
    deadline (``expires_at``). ``running`` never rests. Pure."""
    if record.is_finished:
        return True
    if record.status is ExecutionStatus.RUNNING:
        return False
    if record.expires_at is not None and record.expires_at <= now:
        return False  # past its own deadline: the engine ends it
    pending = list(pending)
    if any(s.kind is SignalKind.CANCEL for s in pending):
        return False
    if record.status is ExecutionStatus.RECOVERY_REQUIRED:
        return not any(s.kind is SignalKind.RESOLUTION for s in pending)
    if record.deadline_at is not None and record.deadline_at <= now:
        return False
    handled = None if facts is None else facts.handled.get(record.state, frozenset())
    return not any(
        s.kind in (SignalKind.EVENT, SignalKind.CHILD) and (handled is None or s.event in handled)
        for s in pending
    )


def recover_store(
    store: Any,
    app: DurableApp,
    *,
    wait_seconds: float = 60.0,
    wait_for: Collection[str] | None = None,
    db_path: str | None = None,
    app_spec: str | None = None,
    on_progress: Callable[[int, int], None] | None = None,
    clock: Clock = SYSTEM_CLOCK,
) -> StoreRecoveryReport:
    """Recover a store with a durable application, in this process, until its
    executions rest.

    Starts a :class:`~phronomy_fsm.durable.runtime.DurableRuntime` with the app's
    machines, which claims every active execution of them that no live worker owns
    and resumes it from its last commit (``docs/semantics.md``, "Recovery"); waits up
    to ``wait_seconds`` until each claimed execution (or only those in ``wait_for``,
    which may also name executions a live worker runs) is at rest (:func:`is_at_rest`);
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
    from phronomy_fsm.durable.runtime import DurableRuntime

    if wait_seconds < 0:
        raise ValueError("wait_seconds must not be negative")
    wake = threading.Event()
    facts = {m.name: MachineFacts(m.table, m.final_status) for m in app.machines}
    runtime = DurableRuntime(
        store,
        machines=app.machines,
        clock=clock,
        listeners=[lambda _event: wake.set(), *app.listeners],
        name="phronomy-operator",
    )
    started = time.monotonic()
    try:
        found = runtime.recover(accept=app.accept)
        claimed = dict(found.claimed)
        watched = list(claimed) if wait_for is None else list(wait_for)
        _wait_until_rest(store, watched, facts, wake, started + wait_seconds, on_progress, clock)
        waited = time.monotonic() - started
    finally:
        runtime.close(timeout_seconds=min(10.0, max(1.0, wait_seconds)))
    ids = list(claimed) + [eid for eid, _worker in found.owned_elsewhere if eid not in claimed]
    ids += [eid for eid in (wait_for or ()) if eid not in ids]
    db = store.path if db_path is None else db_path
    entries = []
    for eid in ids:
        record = store.load_record(eid)
        machine_facts = facts.get(record.machine)
        entries.append(
            RecoveredExecution(
                record=record,
                found_status=claimed.get(eid),
                at_rest=is_at_rest(record, store.pending_signals(eid), machine_facts, clock.now()),
                owner=execution_owner(store, eid, clock=clock),
                awaits=awaited_events(store, record, machine_facts),
                recovery=recovery_request(record, db_path=db, app_spec=app_spec),
            )
        )
    return StoreRecoveryReport(tuple(entries), tuple(found.unknown_machine), waited)


def _wait_until_rest(
    store: Any,
    execution_ids: list[str],
    facts: Mapping[str, MachineFacts],
    wake: threading.Event,
    deadline: float,
    on_progress: Callable[[int, int], None] | None,
    clock: Clock,
) -> None:
    """Poll the store until every execution rests or ``deadline`` (monotonic) passes;
    a runtime event wakes the poll early."""
    waiting = set(execution_ids)
    total = len(waiting)
    reported = -1
    while True:
        wake.clear()
        for eid in list(waiting):
            record = store.load_record(eid)
            if is_at_rest(
                record, store.pending_signals(eid), facts.get(record.machine), clock.now()
            ):
                waiting.discard(eid)
        if on_progress is not None and total - len(waiting) != reported:
            reported = total - len(waiting)
            on_progress(reported, total)
        remaining = deadline - time.monotonic()
        if not waiting or remaining <= 0:
            return
        wake.wait(min(0.2, remaining))


__all__ = ["is_at_rest", "recover_store"]
