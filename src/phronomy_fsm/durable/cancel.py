"""Cancel: a durable request, applied once nothing of the execution runs any more.

Owns :class:`Cancellation`, the engine's part that applies a cancel request (from the
inbox, from the execution's own deadline, or from its parent): it stops the session
at once, cancels the children this runtime runs and has requests written to the
children others run, and once nothing of the execution runs any more and its
children have finished, commits ``@cancel`` — ``cancelled``, or ``failed`` when the
request says so — naming any non-pure effect that had started. The rules:
``docs/semantics.md``, "Cancel". Loop thread only. Must not import the store or
agent layers.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import attrs

from phronomy_fsm.durable import points
from phronomy_fsm.durable.lifecycle import Halt, LiveExecution
from phronomy_fsm.durable.points import EngineBarrier
from phronomy_fsm.durable.records import (
    EffectKind,
    ErrorInfo,
    ExecutionStatus,
    SignalKind,
    SignalRecord,
)

if TYPE_CHECKING:
    from phronomy_fsm.durable.engine import Engine

log = logging.getLogger("phronomy_fsm.durable")


class Cancellation:
    """The engine's cancel (see the module docstring).

    Args:
        engine: the engine that owns this part (loop thread).
    """

    __slots__ = ("engine",)

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def cancel_instead(self, live: LiveExecution, barrier: str) -> None:
        """The store refused the commit ``barrier`` that would have ended the execution
        because a cancel request waits in its inbox (recorded before that end): read
        the inbox and apply the cancel, so the execution ends cancelled as its caller
        was told (``docs/semantics.md``, "Cancel"). Should the request be gone by then,
        recover the execution from the store as after any refused commit."""

        def arrived(signals: list[SignalRecord] | None) -> None:
            if self.engine.live.get(live.execution_id) is not live or live.record.is_finished:
                return
            if signals and any(s.kind is SignalKind.CANCEL for s in signals):
                log.info(
                    "execution %s: a cancel request came before its end (%s); cancelling",
                    live.execution_id,
                    barrier,
                )
                live.cancelling = None  # the refused end was not this cancel: apply it
                self.engine.delivery.add_signals(live, signals)
                return
            self.engine.recovery.recover_from_store(
                live, f"commit {barrier} refused for a cancel not found"
            )

        self.engine.host.io.refresh_signals(live, on_read=arrived)

    def cancel(self, live: LiveExecution, signal: SignalRecord) -> None:
        """Cancel: stop the session at once (results of work in flight become stale),
        cancel its active children, and once nothing of it runs any more and its
        children have finished, commit it finished — ``cancelled``, or ``failed``
        when the request says so (a deadline, a listener failure) — with the
        request's error."""
        if live.cancelling is not None:  # being cancelled: once is enough
            return
        live.cancelling = signal
        if live.timer is not None:
            live.timer.cancel()
            live.timer = None
        if live.session_id is not None:
            self.engine.halt(live, Halt.CANCEL)
        payload = signal.payload if isinstance(signal.payload, dict) else {}
        status = (
            ExecutionStatus.FAILED
            if payload.get("status") == "failed"
            else ExecutionStatus.CANCELLED
        )
        error = ErrorInfo(
            str(payload.get("error_type") or "Cancelled"),
            str(payload.get("reason") or "cancelled"),
        )
        doubt = live.record.recovery
        if doubt is not None and doubt.subject is not None:
            # parked on an effect nobody answered for: the record keeps the question,
            # or a cancelled execution would hide a charge that may have happened
            effect = doubt.subject
            error = ErrorInfo(
                error.type,
                f"{error.message}; left unanswered: {doubt.reason} (effect {effect.effect}, "
                f"idempotency key {effect.key}, attempt {effect.attempt})",
            )
        here = set()
        for child in list(self.engine.live.values()):
            if child.record.parent_execution_id == live.execution_id and child is not live:
                here.add(child.execution_id)
                self.cancel(child, attrs.evolve(signal, execution_id=child.execution_id, seq=0))
        # children another worker runs (it took them over, or claimed them) hear it
        # through their inbox — before this execution's @cancel commit consumes its own
        # request, so a crash in between cancels it, and them, again at recovery
        cascade = self.engine.host.io.cancel_children_elsewhere(live.execution_id, payload, here)

        def commit() -> None:
            if self.engine.live.get(live.execution_id) is not live:
                return
            if live.committing:  # decide after that commit
                self.engine.host.dispatcher.call_later(0.01, commit)
                return
            children = [
                child
                for child in list(self.engine.live.values())
                if child.record.parent_execution_id == live.execution_id and child is not live
            ]
            for child in children:
                if child.cancelling is None:  # started by the commit that was in flight
                    self.cancel(child, attrs.evolve(signal, execution_id=child.execution_id, seq=0))
            if children:  # once they have finished
                self.engine.host.dispatcher.call_later(0.01, commit)
                return
            told = error
            started = live.effect_in_flight
            if started is not None and started.kind is not EffectKind.PURE:
                # an effect started since the last commit: the cancel drops its result,
                # so the record says it ran (or may have), or a charge would be hidden
                known = live.effect_outcome or "it did not report back: it may or may not have run"
                told = ErrorInfo(
                    error.type,
                    f"{error.message}; the {started.kind.value} effect {started.effect} "
                    f"(idempotency key {started.key}, attempt {started.attempt}) had started "
                    f"before the cancel: {known}; its result was not applied",
                )
            record = points.cancelled(
                live.record, self.engine.now(), state=live.state, status=status, error=told
            )
            # signals delivered but never committed, and other cancel requests, are
            # closed by the @cancel commit itself (the store drops what a finishing
            # commit leaves pending)
            live.delivered = [signal.seq] if signal.seq else []
            self.engine.finish(live, EngineBarrier.CANCEL, record)

        # commit once nothing of it runs here and the requests elsewhere are written
        waiting_for = [2]

        def one_done() -> None:
            waiting_for[0] -= 1
            if waiting_for[0] == 0:
                commit()

        self.engine.host.dispatcher.when_quiescent(live.execution_id, one_done)
        cascade.add_done_callback(lambda _: self.engine.post(one_done))


__all__ = ["Cancellation"]
