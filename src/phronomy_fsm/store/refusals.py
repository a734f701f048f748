"""Why a barrier's compare-and-set matched no row, and when a commit that would end an
execution is refused because a cancel waits for it — the same for every backend.

Both stores (SQLite and PostgreSQL) read the execution's row back after a fenced UPDATE
that changed nothing, and turn it into the typed refusal the engine acts on
(``docs/store.md``, "Error taxonomy — what each means for the caller"). The reading is the backend's; the decision is here.
"""

from __future__ import annotations

from typing import Any

from phronomy_fsm.durable.records import DurableCommit, ExecutionStatus
from phronomy_fsm.errors import (
    ConflictError,
    ExecutionFinishedError,
    LeaseLostError,
    NotFoundError,
    PhronomyError,
)

#: The columns :func:`update_refusal` reads, in order.
REFUSAL_COLUMNS = "revision, machine, active, status, owner_id, fence"


def update_refusal(commit: DurableCommit, row: tuple[Any, ...] | None) -> PhronomyError:
    """The refusal of ``commit`` given its execution's stored row (``REFUSAL_COLUMNS``,
    or ``None`` when there is no such execution): NotFoundError, ConflictError (another
    machine, another revision), ExecutionFinishedError (it has finished) or
    LeaseLostError (another owner or token, or the lease has passed)."""
    ex = commit.execution
    if row is None:
        return NotFoundError(
            f"execution {ex.execution_id} does not exist", execution_id=ex.execution_id
        )
    revision, machine, active, status, owner, token = row
    if machine != ex.machine:
        return ConflictError(
            f"execution {ex.execution_id} runs machine {machine}, not {ex.machine}",
            execution_id=ex.execution_id,
        )
    if not active:
        return ExecutionFinishedError(
            f"execution {ex.execution_id} has finished ({status}); nothing more is committed",
            execution_id=ex.execution_id,
            status=status,
        )
    if revision != commit.expected_revision:
        return ConflictError(
            f"execution {ex.execution_id} is at revision {revision}, not the expected "
            f"{commit.expected_revision}; reload it and decide again",
            execution_id=ex.execution_id,
            expected_revision=commit.expected_revision,
            stored_revision=revision,
        )
    fence = commit.fence
    if fence is not None and (owner != fence.worker_id or token != fence.token):
        return LeaseLostError(
            f"execution {ex.execution_id} is now owned by worker {owner} (fence {token}), not "
            f"{fence.worker_id} (fence {fence.token}); this worker must drop it",
            execution_id=ex.execution_id,
            owner_id=owner,
        )
    return LeaseLostError(
        f"execution {ex.execution_id}: the lease of worker "
        f"{fence.worker_id if fence else '?'} has expired; nothing was committed",
        execution_id=ex.execution_id,
    )


__all__ = ["REFUSAL_COLUMNS", "update_refusal"]


def ends_unless_cancelled(commit: DurableCommit) -> bool:
    """True for a commit the store refuses while a cancel request for the execution
    waits unconsumed in its inbox: one that ends the execution by its own end
    (``@final``, an operator's answer that ends it), resumes it after an operator's
    answer (``@resolution``, which would start the answered effect again), or ends it
    ``failed`` through ``@cancel`` on the engine's own request (its deadline passed, a
    listener failed), or announces an effect (``@effect``: a recorded cancel starts no
    new effect). So a cancel recorded before any of them is never outrun by it
    (``docs/semantics.md``, "Cancel"). A ``@cancel`` commit that ends the execution
    ``cancelled``, a start and the other commits of an active execution are not."""
    if commit.expected_revision is None:
        return False
    if commit.barrier == "@cancel":
        return commit.execution.status is not ExecutionStatus.CANCELLED
    return not commit.execution.is_active or commit.barrier in ("@resolution", "@effect")


def cancel_pending_error(execution_id: str, seqs: list[int]) -> ConflictError:
    """The refusal of a commit that would end ``execution_id`` while the cancel
    requests ``seqs`` wait in its inbox (``reason`` ``cancel_pending``): the caller
    reads the inbox and cancels instead."""
    return ConflictError(
        f"execution {execution_id}: a cancel request (signal {seqs[0]}) waits in its inbox; "
        "it ends cancelled, not by this commit: read the inbox and apply the cancel",
        execution_id=execution_id,
        reason="cancel_pending",
        signal_seqs=tuple(seqs),
    )
