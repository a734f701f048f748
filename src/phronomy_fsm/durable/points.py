"""The next :class:`~phronomy_fsm.durable.records.ExecutionRecord` at each durable point.

Owns how a live execution's next record is built from its last committed one: one
named constructor per durable point (``docs/semantics.md``, "Commits"). Each
returns ``record`` with revision + 1 and ``updated_at = now`` and sets exactly the
fields its point defines; what it does not name is kept from ``record`` (a finished
record keeps its ``labels``, its parent and its deadline, for example). The engine
(:mod:`phronomy_fsm.durable.engine`) commits what these return; nothing here writes.

Pure functions of their arguments (any thread). Must not import the store, the
runtime facade or agent layers.
"""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Any

import attrs

from phronomy_fsm.durable.codec import EncodedJSON
from phronomy_fsm.durable.records import (
    DurablePoint,
    EffectRef,
    ErrorInfo,
    ExecutionRecord,
    ExecutionStatus,
    RecoveryInfo,
    ResolutionInfo,
)


class EngineBarrier(enum.Enum):
    """The commits the engine makes itself (besides a spec's own barriers), by the
    name stored in the barrier log (``docs/semantics.md``, "Commits")."""

    #: an execution started (revision 0)
    START = "@start"
    #: an execution forked from a past commit of another (revision 0;
    #: ``docs/operations.md``, "Fork and restart from a past commit")
    FORK = "@fork"
    #: an effect announced before it starts
    EFFECT = "@effect"
    #: halted in a wait state
    WAIT = "@wait"
    #: reached a final state, or failed
    FINAL = "@final"
    #: parked for an operator
    RECOVERY = "@recovery"
    #: an operator's answer applied
    RESOLUTION = "@resolution"
    #: cancelled
    CANCEL = "@cancel"


#: The engine commits the machine's ``records`` hook adds to (and an ``@resolution``
#: that finishes the execution).
JOURNALED = frozenset({EngineBarrier.WAIT, EngineBarrier.FINAL, EngineBarrier.CANCEL})


def _next(record: ExecutionRecord, now: datetime, **changes: Any) -> ExecutionRecord:
    """``record`` at revision + 1, updated at ``now`` (aware UTC), with ``changes``."""
    return attrs.evolve(record, revision=record.revision + 1, updated_at=now, **changes)


def _moved(
    record: ExecutionRecord,
    now: datetime,
    *,
    point: DurablePoint,
    status: ExecutionStatus,
    state: str,
    context: EncodedJSON | Any,
    **changes: Any,
) -> ExecutionRecord:
    """A record whose durable point moves to this commit: no operator question, no
    resolution; ``point_revision`` is the new revision."""
    return _next(
        record,
        now,
        state=state,
        point=point,
        point_revision=record.revision + 1,
        status=status,
        context=context,
        recovery=None,
        resolution=None,
        **changes,
    )


def at_barrier(
    record: ExecutionRecord,
    now: datetime,
    *,
    state: str,
    resume_event: str | None,
    context: EncodedJSON,
    announced: tuple[str, ...],
) -> ExecutionRecord:
    """A spec barrier of ``state``: running, resumed at recovery with ``resume_event``
    (the barrier's committed event); ``announced``: the effects the barrier announces
    (``docs/semantics.md``, "Commits")."""
    return _moved(
        record,
        now,
        point=DurablePoint.BARRIER,
        status=ExecutionStatus.RUNNING,
        state=state,
        context=context,
        resume_event=resume_event,
        pending_effects=announced,
        deadline_at=None,
    )


def effect_announced(
    record: ExecutionRecord,
    now: datetime,
    *,
    effect: EffectRef,
    context: EncodedJSON,
    payload: Any,
    row: int | None,
) -> ExecutionRecord:
    """``@effect``: ``effect`` (its kind, its key derived from this commit) is
    announced in its state, with the context and ``payload`` (JSON data) its work
    reads and the ``row`` (transition index) whose offload it is, ``None`` for the
    state's own (``docs/semantics.md``, "Effects")."""
    return _moved(
        record,
        now,
        point=DurablePoint.EFFECT,
        status=ExecutionStatus.RUNNING,
        state=effect.state,
        context=context,
        resume_event=None,
        pending_effects=(effect.effect,),
        deadline_at=None,
        announced=effect,
        effect_payload=payload,
        effect_row=row,
    )


def waiting(
    record: ExecutionRecord,
    now: datetime,
    *,
    state: str,
    context: EncodedJSON,
    deadline_at: datetime | None,
) -> ExecutionRecord:
    """``@wait``: waiting in ``state`` for a signal, or until ``deadline_at`` (its
    timer, aware UTC; ``None``: none) (``docs/semantics.md``, "Commits")."""
    return _moved(
        record,
        now,
        point=DurablePoint.WAIT,
        status=ExecutionStatus.WAITING,
        state=state,
        context=context,
        resume_event=None,
        pending_effects=(),
        deadline_at=deadline_at,
    )


def finished(
    record: ExecutionRecord,
    now: datetime,
    *,
    state: str,
    status: ExecutionStatus,
    context: EncodedJSON,
) -> ExecutionRecord:
    """``@final``: reached the final ``state``, finished with ``status``."""
    return _moved(
        record,
        now,
        point=DurablePoint.FINAL,
        status=status,
        state=state,
        context=context,
        resume_event=None,
        pending_effects=(),
        deadline_at=None,
    )


def failed(
    record: ExecutionRecord,
    now: datetime,
    *,
    state: str,
    context: EncodedJSON | Any,
    error: ErrorInfo,
) -> ExecutionRecord:
    """``@final`` after an application error: ``failed`` with ``error``. The durable
    point's revision, an operator question and a resolution are kept as they were
    (the error, not a new point, says what happened)."""
    return _next(
        record,
        now,
        state=state,
        point=DurablePoint.FINAL,
        status=ExecutionStatus.FAILED,
        resume_event=None,
        context=context,
        pending_effects=(),
        deadline_at=None,
        error=error,
    )


def cancelled(
    record: ExecutionRecord,
    now: datetime,
    *,
    state: str,
    status: ExecutionStatus,
    error: ErrorInfo,
) -> ExecutionRecord:
    """``@cancel``: finished ``cancelled`` (or ``failed``, when the request says so)
    in ``state`` with the request's ``error``; the context stays the last committed
    one (``docs/semantics.md``, "Cancel")."""
    return _moved(
        record,
        now,
        point=DurablePoint.FINAL,
        status=status,
        state=state,
        context=record.context,
        resume_event=None,
        pending_effects=(),
        deadline_at=None,
        error=error,
    )


def parked(record: ExecutionRecord, now: datetime, info: RecoveryInfo) -> ExecutionRecord:
    """``@recovery``: ``recovery_required`` with the question ``info``; the durable
    context and replay origin are kept (``docs/semantics.md``, "Operator
    resolution")."""
    return _next(
        record, now, status=ExecutionStatus.RECOVERY_REQUIRED, recovery=info, resolution=None
    )


def resumed(record: ExecutionRecord, now: datetime, resolution: ResolutionInfo) -> ExecutionRecord:
    """``@resolution``: an operator answered; running again from the last durable
    point with ``resolution`` (the replay applies it at its subject)."""
    return _next(record, now, status=ExecutionStatus.RUNNING, recovery=None, resolution=resolution)


def resolved_failed(record: ExecutionRecord, now: datetime, error: ErrorInfo) -> ExecutionRecord:
    """``@resolution`` that ends a parked execution whose subject is the execution
    itself (spec changed, context unreadable): ``failed`` with ``error``."""
    return _next(
        record,
        now,
        point=DurablePoint.FINAL,
        status=ExecutionStatus.FAILED,
        resume_event=None,
        recovery=None,
        pending_effects=(),
        error=error,
    )


__all__ = [
    "JOURNALED",
    "EngineBarrier",
    "at_barrier",
    "cancelled",
    "effect_announced",
    "failed",
    "finished",
    "parked",
    "resolved_failed",
    "resumed",
    "waiting",
]
