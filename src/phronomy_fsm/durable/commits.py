"""Submitting a commit and learning its outcome, a lost response reconciled by reading back.

Owns :func:`submit_with_reconciliation`, the one place that turns what a store did with
a commit into one of the four barrier outcomes (``docs/semantics.md``, "Barrier
outcomes"):

- ``committed`` — the store returned a receipt, or a lost response was read back and
  the intended record is stored;
- ``not_committed`` — a typed store error known to have happened before the commit
  (nothing written), or the read-back shows the previous revision;
- ``conflict`` — a compare-and-set was refused (stale revision, another owner, a
  duplicate id), or the read-back shows something else;
- ``outcome_unknown`` — the response was lost and even the read-back failed, or the
  store raised something outside its taxonomy (it may have written: fail closed).

A commit refused only because the database stayed locked past the store's busy
timeout wrote nothing; it is submitted again after each delay of
:data:`BUSY_RETRY_DELAYS` before it counts as not committed.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from phronomy_fsm.durable.ports import ExecutionStore
from phronomy_fsm.durable.records import DurableCommit
from phronomy_fsm.errors import (
    AgentBusyError,
    ConflictError,
    OutcomeUnknownError,
    StorageError,
    StoreError,
)
from phronomy_fsm.table import (
    COMMITTED,
    CONFLICT,
    NOT_COMMITTED,
    OUTCOME_UNKNOWN,
    BarrierOutcome,
    PendingBarrier,
)

log = logging.getLogger("phronomy_fsm.durable")

#: Seconds to wait before each resubmission of a commit that found the database locked.
BUSY_RETRY_DELAYS: tuple[float, ...] = (0.05, 0.2, 0.5, 1.0, 2.0)


def is_busy(error: BaseException) -> bool:
    """A StorageError for a database locked by another connection (nothing written)."""
    if not isinstance(error, StorageError):
        return False
    if getattr(error, "busy", False):
        return True
    code = getattr(error, "sqlite_error", None)
    return isinstance(code, str) and code.startswith(("SQLITE_BUSY", "SQLITE_LOCKED"))


def submit_with_reconciliation(
    store: ExecutionStore,
    commit: DurableCommit,
    *,
    value: Any = None,
    name: str = "",
) -> PendingBarrier:
    """Submit ``commit`` to ``store``'s group commit and report its outcome once.

    Args:
        store: a store with ``submit(commit) -> Future`` and ``reconcile(commit) ->
            "committed" | "not_committed" | "conflict"``.
        commit: a barrier commit of that store (its ``execution.revision`` is the
            revision reported on success).
        value: handed back as ``BarrierOutcome.value`` when committed; when ``None``
            the value is the store's :class:`~phronomy_fsm.durable.records.DurableReceipt`
            (with the seqs of the signals the commit sent), or ``None`` when only a
            read-back proved the commit.
        name: the barrier's name, for log messages.

    Returns:
        A :class:`~phronomy_fsm.table.PendingBarrier`; ``subscribe(report)`` calls
        ``report(BarrierOutcome)`` exactly once, from a store or helper thread.

    Durability: ``committed`` is reported only after the store's COMMIT returned (or a
    read-back found the record). Concurrency: any thread.
    """
    revision = commit.execution.revision
    label = name or getattr(commit, "barrier", "?")

    def subscribe(report: Callable[[BarrierOutcome], None]) -> None:
        delays = iter(BUSY_RETRY_DELAYS)

        def settle(error: BaseException | None, receipt: Any = None) -> None:
            if error is None:
                report(BarrierOutcome(COMMITTED, revision, receipt if value is None else value))
            elif is_busy(error) and (delay := next(delays, None)) is not None:
                log.info("barrier %s: database locked, retrying in %.2f s", label, delay)
                timer = threading.Timer(delay, submit)
                timer.daemon = True
                timer.start()
            elif isinstance(error, OutcomeUnknownError):
                threading.Thread(
                    target=reconcile, args=(error,), name="phronomy-reconcile", daemon=True
                ).start()
            elif isinstance(error, (ConflictError, AgentBusyError)):
                report(BarrierOutcome(CONFLICT, error=error))
            elif isinstance(error, StoreError):
                report(BarrierOutcome(NOT_COMMITTED, error=error))
            else:  # outside the taxonomy: it may have written (fail closed)
                report(BarrierOutcome(OUTCOME_UNKNOWN, error=error))

        def reconcile(error: OutcomeUnknownError) -> None:
            try:
                disposition = store.reconcile(commit)
            except Exception as exc:  # noqa: BLE001 - cannot prove anything
                log.warning("barrier %s: read-back failed: %r", label, exc)
                report(BarrierOutcome(OUTCOME_UNKNOWN, error=error))
                return
            if disposition == COMMITTED:
                report(BarrierOutcome(COMMITTED, revision, value))
            elif disposition == NOT_COMMITTED:
                report(BarrierOutcome(NOT_COMMITTED, error=error))
            else:
                report(BarrierOutcome(CONFLICT, error=error))

        def submit() -> None:
            try:
                future = store.submit(commit)
            except BaseException as exc:  # noqa: BLE001 - classified like a commit error
                settle(exc)
                return
            future.add_done_callback(done)

        def done(future: Any) -> None:
            error = future.exception()
            settle(error, None if error is not None else future.result())

        submit()

    return PendingBarrier(subscribe)


__all__ = ["BUSY_RETRY_DELAYS", "is_busy", "submit_with_reconciliation"]
