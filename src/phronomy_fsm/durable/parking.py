"""Parking for an operator, and applying an operator's answer.

Owns :class:`Parking`, the engine's part that stops an execution whose next step
nobody may take without a person — an ``at_most_once`` effect that may or may not
have run, a replay that diverged, a spec that changed, a context that cannot be read
— commits it ``recovery_required`` (``@recovery``) with the question, and applies an
operator's resolution signal (``@resolution``): replay from the last durable point
with the answer, or finish ``failed``. The rules: ``docs/semantics.md``, "Operator
resolution". Loop thread only. Must not import the store or agent layers.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from phronomy_fsm.durable import points
from phronomy_fsm.durable.lifecycle import LiveExecution
from phronomy_fsm.durable.points import EngineBarrier
from phronomy_fsm.durable.records import (
    ErrorInfo,
    ExecutionRecord,
    ExecutionStatus,
    RecoveryInfo,
    ResolutionInfo,
    ResolutionOutcome,
    SignalRecord,
)
from phronomy_fsm.durable.types import DurableEventKind
from phronomy_fsm.errors import ReplayDivergedError
from phronomy_fsm.runtime.session import Session

if TYPE_CHECKING:
    from phronomy_fsm.durable.engine import Engine

log = logging.getLogger("phronomy_fsm.durable")

#: Outcomes an operator may give for an effect whose outcome is unknown.
EFFECT_OUTCOMES = tuple(o.value for o in ResolutionOutcome)
#: Outcomes for the execution as a whole (spec changed, context unreadable).
EXECUTION_OUTCOMES = (ResolutionOutcome.FAILED.value,)


def resolution_problem(record: ExecutionRecord, signal: SignalRecord) -> str | None:
    """Why a resolution signal cannot be applied to ``record`` now, or ``None``.

    The rules (``docs/semantics.md``, "Operator resolution"): the execution is in
    ``recovery_required``; the signal names its current revision; the outcome is one
    of the recovery's allowed outcomes; ``succeeded`` carries a result (JSON), and
    ``failed`` an error text; other outcomes carry neither."""
    info = record.recovery
    payload = signal.payload if isinstance(signal.payload, dict) else {}
    if record.status is not ExecutionStatus.RECOVERY_REQUIRED or info is None:
        return f"execution {record.execution_id} is {record.status.value}, not recovery_required"
    if signal.expected_revision != record.revision:
        return (
            f"execution {record.execution_id} is at revision {record.revision}, not "
            f"{signal.expected_revision}"
        )
    outcome = payload.get("outcome")
    if outcome not in info.allowed_outcomes:
        return f"outcome {outcome!r} is not allowed; allowed: {', '.join(info.allowed_outcomes)}"
    has_result = payload.get("result") is not None
    has_error = bool(payload.get("error"))
    if outcome == ResolutionOutcome.SUCCEEDED.value and not has_result:
        return "outcome 'succeeded' needs a result"
    if outcome == ResolutionOutcome.FAILED.value and not has_error:
        return "outcome 'failed' needs an error text"
    if outcome != ResolutionOutcome.SUCCEEDED.value and has_result:
        return f"outcome {outcome!r} takes no result"
    if outcome != ResolutionOutcome.FAILED.value and has_error:
        return f"outcome {outcome!r} takes no error text"
    return None


class Parking:
    """The engine's parking and resolutions (see the module docstring).

    Args:
        engine: the engine that owns this part (loop thread).
    """

    __slots__ = ("engine",)

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def park(self, live: LiveExecution, session: Session, info: RecoveryInfo) -> None:
        """Stop the session and commit ``recovery_required`` (the durable context and
        replay origin are kept as they were)."""
        live.parked = info
        # Why no HALTING phase: the session's end (session_done) commits the park
        # whatever stops it, and nothing about the session changes before then.
        sid = live.session_id
        if sid is not None:
            self.engine.host.dispatcher.halt(sid)

    def park_diverged(
        self, live: LiveExecution, session: Session, expected: Any, reached: str
    ) -> None:
        """Park an execution whose replay reached ``reached`` instead of the effect
        an operator answered for (``expected``)."""
        error = ReplayDivergedError(
            f"recovery replayed execution {live.execution_id} and reached {reached} instead of "
            f"{getattr(expected, 'effect', expected)} (key {getattr(expected, 'key', '-')}); the "
            "code between a barrier and its effect must be deterministic",
            expected=getattr(expected, "effect", None),
            reached=reached,
        )
        self.park(
            live,
            session,
            RecoveryInfo(
                reason=str(error),
                subject=expected,
                allowed_outcomes=EFFECT_OUTCOMES if expected is not None else EXECUTION_OUTCOMES,
                detected_at=self.engine.now(),
            ),
        )

    def commit_parked(self, live: LiveExecution) -> None:
        """Commit ``recovery_required`` with ``live.parked``; the session is gone."""
        info, live.parked = live.parked, None
        assert info is not None
        live.replay = None
        live.delivered.clear()  # not consumed: read back from the inbox once parked
        live.ctx = None  # the durable context stands; decode it again when resolved
        live.state = live.record.state
        record = points.parked(live.record, self.engine.now(), info)

        def committed() -> None:
            log.warning("execution %s needs an operator: %s", live.execution_id, info.reason)
            self.engine.emit(DurableEventKind.RECOVERY_REQUIRED, live, record, reason=info.reason)
            self.engine.host.io.refresh_signals(live)

        self.engine.engine_commit(live, EngineBarrier.RECOVERY, record, on_committed=committed)

    def apply_resolution(self, live: LiveExecution, signal: SignalRecord) -> None:
        """Apply an operator's resolution signal to a parked execution: commit it,
        then replay from the last durable point with the answer (or finish the
        execution ``failed`` when the subject is the execution itself)."""
        record = live.record
        info = record.recovery
        payload = signal.payload if isinstance(signal.payload, dict) else {}
        problem = resolution_problem(record, signal)
        if problem is not None or info is None:
            self.engine.host.io.drop_signals(
                live, [signal.seq], f"rejected: {problem or 'nothing to resolve'}"
            )
            return
        outcome = ResolutionOutcome(payload["outcome"])
        if info.subject is None:
            failed = points.resolved_failed(
                live.record,
                self.engine.now(),
                ErrorInfo("ResolvedFailed", str(payload.get("error") or info.reason)),
            )
            live.delivered = [signal.seq]
            self.engine.finish(live, EngineBarrier.RESOLUTION, failed)
            return
        resolution = ResolutionInfo(
            outcome=outcome,
            subject=info.subject,
            resolved_at=self.engine.now(),
            signal_id=signal.signal_id,
            result=payload.get("result"),
            error=payload.get("error"),
        )
        resumed = points.resumed(live.record, self.engine.now(), resolution)

        def committed() -> None:
            self.engine.recovery.install(live, resumed, list(live.pending), fresh_resolution=True)

        self.engine.engine_commit(
            live, EngineBarrier.RESOLUTION, resumed, consume=(signal.seq,), on_committed=committed
        )

    def park_record(self, live: LiveExecution, reason: str) -> None:
        """Park an execution that cannot be resumed at all (the operator may only end
        it): ``recovery_required`` with no effect as the subject."""
        if (
            live.record.status is ExecutionStatus.RECOVERY_REQUIRED
            and live.record.recovery is not None
        ):
            self.engine.delivery.react(live)
            return
        live.parked = RecoveryInfo(reason, None, EXECUTION_OUTCOMES, self.engine.now())
        self.commit_parked(live)


__all__ = ["EFFECT_OUTCOMES", "EXECUTION_OUTCOMES", "Parking", "resolution_problem"]
