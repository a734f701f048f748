"""Signals and timers: what reaches a live execution between its commits.

Owns :class:`Delivery`, the engine's part that queues the signals read from an
execution's inbox (in inbox order, duplicates ignored) and applies them: a cancel
first, a resolution to a parked execution, and otherwise the first event signal the
current state handles — never inside a step, never while a commit of it is in
flight; delivered signals are consumed by the next commit, so after a crash they are
delivered again. It also arms the timer of a wait state from its stored deadline (a
signal that reached the inbox after that deadline loses to the timer) and the
execution's own deadline. The rules: ``docs/semantics.md``, "Signals" and "Commits".
Loop thread only. Must not import the store or agent layers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from phronomy_fsm.durable.lifecycle import LiveExecution, Phase
from phronomy_fsm.durable.records import ExecutionStatus, SignalKind, SignalRecord
from phronomy_fsm.durable.types import DurableEventKind
from phronomy_fsm.runtime.binding import AUTO, FINAL, WAIT

if TYPE_CHECKING:
    from phronomy_fsm.durable.engine import Engine


class Delivery:
    """The engine's signal delivery and timers (see the module docstring).

    Args:
        engine: the engine that owns this part (loop thread).
    """

    __slots__ = ("engine",)

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def add_signals(self, live: LiveExecution, signals: list[SignalRecord]) -> None:
        """Queue signals read from the inbox (duplicates ignored) and act on them."""
        known = {s.seq for s in live.pending} | set(live.delivered)
        for signal in signals:
            if signal.seq in known or signal.consumed_revision is not None:
                continue
            known.add(signal.seq)
            live.pending.append(signal)
        live.pending.sort(key=lambda s: s.seq)
        self.react(live)

    def react(self, live: LiveExecution) -> None:
        """Act on pending signals now if the execution can take one."""
        if live.committing or self.engine.closing:
            return
        for signal in list(live.pending):
            if signal.kind is SignalKind.CANCEL:
                live.pending.remove(signal)
                self.engine.cancels.cancel(live, signal)
                return
        status = live.record.status
        if live.session_id is None and status is ExecutionStatus.RECOVERY_REQUIRED:
            for signal in list(live.pending):
                if signal.kind is SignalKind.RESOLUTION:
                    live.pending.remove(signal)
                    self.engine.parking.apply_resolution(live, signal)
                    return
            return
        if live.session_id is None and status is ExecutionStatus.WAITING:
            self.deliver_next(live, live.record.state)
            return
        if live.session_id is not None:
            self.schedule_delivery(live)

    def is_late(self, live: LiveExecution, signal: SignalRecord) -> bool:
        """True when ``signal`` reached the inbox after the deadline of the wait the
        execution rests in (which has a timer): the timer comes first."""
        record = live.record
        if record.status is not ExecutionStatus.WAITING or record.deadline_at is None:
            return False
        if live.reg.facts.states[record.state].timeout is None:
            return False
        return signal.created_at >= record.deadline_at and self.engine.now() >= record.deadline_at

    def schedule_delivery(self, live: LiveExecution) -> None:
        """Look for the next signal the live session takes, on the loop, after the
        current step (once however often asked)."""
        if not live.delivery_scheduled:
            live.delivery_scheduled = True
            self.engine.host.dispatcher.call_soon(self.deliver_scheduled, live)

    def deliver_scheduled(self, live: LiveExecution) -> None:
        """Between steps: apply the next pending signal the live session's state takes,
        unless a commit (the engine's or its barrier's) is in flight or the session is
        stopping. A session in a wait state is resuming from it with its own event (or
        halting there): it takes no other; the @wait commit's react does."""
        live.delivery_scheduled = False
        sid = live.session_id
        if (
            sid is None
            or self.engine.closing
            or live.committing
            or live.phase in (Phase.AT_BARRIER, Phase.HALTING)
            or self.engine.live.get(live.execution_id) is not live
        ):
            return
        state = self.engine.host.dispatcher.session_state(sid)
        node = live.reg.binding.nodes.get(state) if state is not None else None
        if node is not None and node.kind not in (AUTO, WAIT, FINAL):
            self.deliver_next(live, state)  # type: ignore[arg-type]

    def deliver_next(self, live: LiveExecution, state: str) -> None:
        """Deliver the first pending event signal that ``state`` handles."""
        handled = live.reg.facts.handled.get(state, frozenset())
        stale = [
            s
            for s in live.pending
            if s.expected_revision is not None
            and s.kind is SignalKind.EVENT
            and s.expected_revision != live.record.revision
        ]
        if stale:  # meant for the execution as it stood at an earlier revision
            for signal in stale:
                live.pending.remove(signal)
            self.engine.host.io.drop_signals(
                live,
                [s.seq for s in stale],
                f"rejected: stale (the execution is past revision {stale[0].expected_revision})",
            )
        for signal in live.pending:
            if signal.kind in (SignalKind.EVENT, SignalKind.CHILD) and signal.event in handled:
                break
        else:
            return
        if live.session_id is None and self.is_late(live, signal):
            # it arrived after the wait's deadline: the timer, due first, wins — as it
            # would have with a process running it (docs/semantics.md "Signals")
            self.fire_timer(live)
            return
        live.pending.remove(signal)
        live.delivered.append(signal.seq)
        if live.session_id is None:  # waiting: resume the wait state with it
            if live.timer is not None:
                live.timer.cancel()
                live.timer = None
            self.engine.emit(
                DurableEventKind.RESUMED, live, event=signal.event, signal_id=signal.signal_id
            )
            self.engine.start_session(
                live, at_state=state, event=signal.event, payload=signal.payload
            )
            return
        # applied now, whole: the next commit consumes it with its change in the context
        self.engine.host.dispatcher.deliver_now(live.session_id, signal.event, signal.payload)
        if live.session_id is not None:
            self.schedule_delivery(live)  # the next one, if the state takes it

    def arm_timer(self, live: LiveExecution) -> None:
        """Arm the timer of a waiting execution from its stored deadline."""
        record = live.record
        if record.deadline_at is None:
            return
        timeout = live.reg.facts.states[record.state].timeout
        if timeout is None:
            return
        delay = max(0.0, (record.deadline_at - self.engine.now()).total_seconds())
        revision = record.revision

        def fire() -> None:
            live.timer = None
            if (
                live.record.revision != revision
                or live.session_id is not None
                or live.committing
                or self.engine.live.get(live.execution_id) is not live
            ):
                return
            self.fire_timer(live)

        live.timer = self.engine.host.dispatcher.call_later(delay, fire)

    def fire_timer(self, live: LiveExecution) -> None:
        """Resume the waiting execution with its wait state's timeout event."""
        if live.timer is not None:
            live.timer.cancel()
            live.timer = None
        timeout = live.reg.facts.states[live.record.state].timeout
        assert timeout is not None
        self.engine.emit(DurableEventKind.RESUMED, live, event=timeout.event, timer=True)
        self.engine.start_session(live, at_state=live.record.state, event=timeout.event)

    def arm_expiry(self, live: LiveExecution) -> None:
        """Arm the execution's own deadline (``expires_at``), if it has one: past it
        the execution is cancelled as ``failed`` (DeadlineExceededError)."""
        expires_at = live.record.expires_at
        if expires_at is None or live.expiry is not None:
            return
        delay = max(0.0, (expires_at - self.engine.now()).total_seconds())

        def expire() -> None:
            live.expiry = None
            if self.engine.live.get(live.execution_id) is not live or live.record.is_finished:
                return
            signal = SignalRecord(
                signal_id=f"deadline:{live.execution_id}",
                execution_id=live.execution_id,
                kind=SignalKind.CANCEL,
                created_at=self.engine.now(),
                payload={
                    "reason": f"execution {live.execution_id} ran past its deadline "
                    f"({expires_at.isoformat()})",
                    "status": "failed",
                    "error_type": "DeadlineExceededError",
                },
                sender="engine",
            )
            self.engine.cancels.cancel(live, signal)

        live.expiry = self.engine.host.dispatcher.call_later(delay, expire)


__all__ = ["Delivery"]
