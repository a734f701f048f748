"""Why a barrier's compare-and-set matched no row, why an owner's inbox write was
refused, when a commit that would end an execution is refused because a cancel waits
for it, and when a signal id already stored names another signal — the same for every
backend.

Both stores (SQLite and PostgreSQL) read the execution's row back after a fenced write
that changed nothing (a commit's UPDATE, an owner's inbox write), or read the stored
signal that holds an id, and turn it into the typed refusal the engine and the
operator commands act on (``docs/store.md``, "Error taxonomy — what each means for the
caller"; ``docs/semantics.md``, "Signals", "Leases and fencing"). The reading is the
backend's; the decision is here.
"""

from __future__ import annotations

from typing import Any

from phronomy_fsm.durable.codec import dumps, json_data
from phronomy_fsm.durable.records import DurableCommit, ExecutionStatus, Fence, SignalRecord
from phronomy_fsm.errors import (
    ConflictError,
    ExecutionFinishedError,
    LeaseLostError,
    NotFoundError,
    PhronomyError,
    SignalRefusedError,
)

#: The columns :func:`update_refusal` reads, in order.
REFUSAL_COLUMNS = "revision, machine, active, status, owner_id, fence"
#: The columns :func:`inbox_write_refusal` reads, in order.
FENCE_COLUMNS = "owner_id, fence"


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
    return fence_refusal(ex.execution_id, commit.fence, owner, token, "nothing was committed")


def fence_refusal(
    execution_id: str, fence: Fence | None, owner: str | None, token: int, written: str
) -> LeaseLostError:
    """The refusal of a write made under ``fence`` to an execution that the store says
    ``owner`` holds under fencing ``token``: another owner or token (the worker must
    drop its copy), else the worker's lease has passed. ``written`` ends the message
    (``nothing was committed``, ``nothing was written``)."""
    if fence is not None and (owner != fence.worker_id or token != fence.token):
        return LeaseLostError(
            f"execution {execution_id} is now owned by worker {owner} (fence {token}), not "
            f"{fence.worker_id} (fence {fence.token}); {written}; this worker must drop it",
            execution_id=execution_id,
            owner_id=owner,
        )
    return LeaseLostError(
        f"execution {execution_id}: the lease of worker "
        f"{fence.worker_id if fence else '?'} has expired; {written}",
        execution_id=execution_id,
        owner_id=owner,
    )


def inbox_write_refusal(
    execution_id: str, fence: Fence, row: tuple[Any, ...] | None
) -> PhronomyError:
    """The refusal of an owner's inbox write (closing signals) made under ``fence``,
    given the execution's stored row (``FENCE_COLUMNS``, or ``None`` when there is no
    such execution): NotFoundError, or LeaseLostError (:func:`fence_refusal`)."""
    if row is None:
        return NotFoundError(
            f"execution {execution_id} does not exist; nothing was written",
            execution_id=execution_id,
        )
    owner, token = row
    return fence_refusal(execution_id, fence, owner, token, "nothing was written")


def signal_differences(stored: SignalRecord, sent: SignalRecord) -> tuple[str, ...]:
    """What makes ``sent`` another signal than ``stored``, which holds its id: any of
    ``execution``, ``kind``, ``event``, ``payload`` (compared as canonical JSON, so
    ``true`` is not ``1``). Empty when it is the same signal sent again — its time,
    sender and expected revision may differ (a retry after the execution moved on).

    Raises:
        SerializationError: ``sent``'s payload is not JSON.
    """
    differs = []
    if sent.execution_id != stored.execution_id:
        differs.append("execution")
    if sent.kind is not stored.kind:
        differs.append("kind")
    if sent.event != stored.event:
        differs.append("event")
    if dumps(json_data(sent.payload)) != dumps(json_data(stored.payload)):
        differs.append("payload")
    return tuple(differs)


def _reused_signal_id_text(
    stored: SignalRecord, sent: SignalRecord, differs: tuple[str, ...]
) -> str:
    """The message of a refused reuse of ``stored``'s signal id by ``sent``: the id, the
    signal and execution it belongs to, and what differs (:func:`signal_differences`)."""
    what = {
        "execution": f"execution ({sent.execution_id})",
        "kind": f"kind ({sent.kind.value})",
        "event": "event (none)" if sent.event is None else f"event ({sent.event!r})",
        "payload": "payload",
    }
    parts = [what[d] for d in differs]
    listed = parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} and {parts[-1]}"
    first = stored.kind.value if stored.event is None else f"{stored.kind.value} {stored.event!r}"
    return (
        f"signal id {sent.signal_id} is already used by signal #{stored.seq} ({first}) to "
        f"execution {stored.execution_id}; this signal differs in its {listed}"
    )


def reused_signal_id_refusal(stored: SignalRecord, sent: SignalRecord) -> SignalRefusedError | None:
    """``None`` when ``sent`` is ``stored`` sent again (a no-op: the caller returns
    ``stored``), else the refusal (``reason`` ``signal_id_reused``, ``signal_id``,
    ``used_by_execution_id``, ``differs``; the message says nothing was sent).

    Raises:
        SerializationError: ``sent``'s payload is not JSON.
    """
    differs = signal_differences(stored, sent)
    if not differs:
        return None
    return SignalRefusedError(
        f"{_reused_signal_id_text(stored, sent, differs)}. Sending the same signal again "
        "is a no-op; another signal needs another id (nothing was sent)",
        execution_id=sent.execution_id,
        reason="signal_id_reused",
        signal_id=sent.signal_id,
        used_by_execution_id=stored.execution_id,
        differs=differs,
    )


def signal_sent_already_error(stored: SignalRecord | None, sent: SignalRecord) -> ConflictError:
    """The refusal of a commit that sends ``sent`` while its id is stored already
    (``stored``, or ``None`` when it could not be read back): a ConflictError
    (``reason`` ``signal_id_reused``), as for every duplicate id in a commit — even
    the same signal, since a commit sends a signal once, with the execution's move."""
    if stored is None:
        where = ""
        used_by = None
    else:
        differs = signal_differences(stored, sent)
        used_by = stored.execution_id
        where = (
            f" ({_reused_signal_id_text(stored, sent, differs)})"
            if differs
            else f" (signal #{stored.seq} to execution {stored.execution_id})"
        )
    return ConflictError(
        f"signal {sent.signal_id} was sent already{where}; nothing of this commit was written",
        signal_id=sent.signal_id,
        reason="signal_id_reused",
        used_by_execution_id=used_by,
    )


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


def finishes(commit: DurableCommit) -> bool:
    """True for a commit that ends an existing execution. In the same transaction the
    store closes every signal still pending in its inbox with :func:`finished_outcome`,
    so no finished execution keeps a signal that nothing will ever read
    (``docs/semantics.md``, "Signals")."""
    return commit.expected_revision is not None and not commit.execution.is_active


def finished_outcome(state: str) -> str:
    """The outcome of a signal left pending when its execution finished in ``state``."""
    return f"dropped: finished in {state}"


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


__all__ = [
    "FENCE_COLUMNS",
    "REFUSAL_COLUMNS",
    "cancel_pending_error",
    "ends_unless_cancelled",
    "fence_refusal",
    "inbox_write_refusal",
    "reused_signal_id_refusal",
    "signal_differences",
    "signal_sent_already_error",
    "update_refusal",
]
