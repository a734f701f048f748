"""The loop side of the durable runtime: the one owner of every live execution.

:class:`Engine` runs on the dispatcher's loop thread and owns each
:class:`~phronomy_fsm.durable.lifecycle.LiveExecution` (its context, last committed
record, lease fence, inbox, replay plan and waiters). It implements the rules of
``docs/semantics.md``:

- **Barriers**: the engine commits each barrier itself — state, context, revision + 1,
  the effects it announces, the signals consumed since the last commit, and what the
  application's barrier hook adds (journal entries, children) — in one transaction,
  through the store's group commit with reconciliation of a lost response.
- **Engine commits**: entering a wait state (``@wait``, with its timer's deadline) or
  a final state (``@final``), parking for an operator (``@recovery``), applying a
  resolution (``@resolution``) and cancelling (``@cancel``) are commits too. Each
  builds its record with the constructor of its durable point
  (:mod:`phronomy_fsm.durable.points`), and every commit's outcome takes one
  post-commit path (:meth:`Engine.committed`).
- **Fail closed**: entering the machine's ``fail_closed`` state, or an engine commit
  whose outcome is not ``committed``, drops the live copy and recovers the execution
  from the store exactly as a restart would.

Its parts, each a class of its own that the engine owns: effects and their
announcements (:mod:`~phronomy_fsm.durable.effects`), signals and timers
(:mod:`~phronomy_fsm.durable.delivery`), parking and operator resolutions
(:mod:`~phronomy_fsm.durable.parking`), cancel (:mod:`~phronomy_fsm.durable.cancel`),
and install, read-back and letting go (:mod:`~phronomy_fsm.durable.recovery`). The
lifecycle they move is :mod:`~phronomy_fsm.durable.lifecycle`.

Everything here runs on the loop thread; :class:`~phronomy_fsm.durable.runtime.DurableRuntime`
is the thread-safe facade, which the engine sees only as an
:class:`~phronomy_fsm.durable.host.EngineHost`. Must not import the store or agent
layers.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable
from concurrent.futures import TimeoutError as FutureTimeout
from datetime import datetime, timedelta
from typing import Any

import attrs

from phronomy_fsm.durable import points
from phronomy_fsm.durable.cancel import Cancellation
from phronomy_fsm.durable.codec import EncodedJSON, json_data
from phronomy_fsm.durable.commits import submit_with_reconciliation
from phronomy_fsm.durable.delivery import Delivery
from phronomy_fsm.durable.effects import ANNOUNCEMENT_WAIT_SECONDS, Effects
from phronomy_fsm.durable.host import EngineHost
from phronomy_fsm.durable.keys import child_execution_id
from phronomy_fsm.durable.lifecycle import Halt, LiveExecution, Registration, Replay
from phronomy_fsm.durable.limits import EffectLimiter, LimitStore, limit_claims
from phronomy_fsm.durable.parking import Parking
from phronomy_fsm.durable.points import JOURNALED, EngineBarrier
from phronomy_fsm.durable.records import (
    DurableCommit,
    DurablePoint,
    DurableReceipt,
    ErrorInfo,
    ExecutionRecord,
    ExecutionStatus,
    Fence,
    SignalKind,
    SignalRecord,
)
from phronomy_fsm.durable.recovery import Recovery
from phronomy_fsm.durable.resting import Resting
from phronomy_fsm.durable.types import (
    BarrierRecords,
    DurableEvent,
    DurableEventKind,
    ExecutionResult,
)
from phronomy_fsm.errors import (
    HOOK_ERRORS,
    ContextSerializationError,
    DispatcherStoppedError,
    EffectNotPerformedError,
    ReplayDivergedError,
    SchemaVersionError,
)
from phronomy_fsm.runtime.binding import AUTO, FINAL, WAIT
from phronomy_fsm.runtime.offload import Defer
from phronomy_fsm.runtime.session import EffectStart, Session, SessionResult
from phronomy_fsm.table import COMMITTED, BarrierOutcome, PendingBarrier

log = logging.getLogger("phronomy_fsm.durable")


class _Driver:
    """The :class:`~phronomy_fsm.runtime.session.SessionDriver` of one execution."""

    __slots__ = ("engine", "live")

    def __init__(self, engine: Engine, live: LiveExecution) -> None:
        self.engine = engine
        self.live = live

    def barrier(self, session: Session, spec: Any, payload: Any) -> Any:
        return self.engine.barrier(self.live, session, spec, payload)

    def offload(self, session: Session, spec: Any, payload: Any) -> Any:
        live = self.live
        live.limiter = None
        decision = self.engine.effects.offload(live, session, spec, payload)
        if isinstance(decision, EffectStart):
            # its work starts only with a slot of each of its limits, and a RateLimited
            # it raises defers it, limits or not (docs/semantics.md, "Limits")
            limits = live.reg.machine.table.limits
            claims = (
                limit_claims(limits, spec.name, session.ctx, live.record.labels) if limits else ()
            )
            host = self.engine.host
            store = host.store
            if claims and not isinstance(store, LimitStore):
                raise TypeError(
                    f"machine {live.reg.machine.name} declares limits on effect "
                    f"{spec.name}, but the store {type(store).__name__} cannot hold them "
                    "(use a SQLite or PostgreSQL store)"
                )
            live.limiter = EffectLimiter(
                claims,
                store,  # type: ignore[arg-type]  # a LimitStore whenever it has claims
                live.execution_id,
                decision.key,
                host.worker_id,
                host.note_write_error,
            )
        return decision

    def step(self, session: Session, source: str, target: str) -> None:
        self.engine.step(self.live, session, source, target)

    @property
    def may_start_effect(self) -> Callable[[], BaseException | Defer | None]:
        """The gate of the effect being started now (read by the dispatcher right after
        :meth:`offload`): on the pool thread, it waits for that effect's ``@effect``
        commit, when it has one, then checks the lease, then takes a slot of each of the
        effect's limits — or says "not yet" (a
        :class:`~phronomy_fsm.runtime.offload.Defer`: ``docs/semantics.md``, "Limits")."""
        announcement = self.live.announcement
        limiter = self.live.limiter
        host, execution_id = self.engine.host, self.live.execution_id

        def gate() -> BaseException | Defer | None:
            if announcement is not None:
                try:
                    error = announcement.result(timeout=ANNOUNCEMENT_WAIT_SECONDS)
                except FutureTimeout:
                    return EffectNotPerformedError(
                        f"execution {execution_id}: the commit announcing this effect did "
                        f"not settle within {ANNOUNCEMENT_WAIT_SECONDS} s; it was not started"
                    )
                if error is not None:
                    return error
            refused = host.lease_error(execution_id)
            if refused is not None or limiter is None:
                return refused
            return limiter.admit()  # a slot of each of its limits, or "not yet"

        return gate

    def effect_work(self, work: Callable[[Any], Any]) -> Callable[[Any], Any]:
        """The work of the effect being started now (read by the dispatcher right after
        :attr:`may_start_effect`): with limits, it frees its slots when it returns and
        turns :class:`~phronomy_fsm.errors.RateLimited` into a pause
        (``docs/semantics.md``, "Limits")."""
        limiter = self.live.limiter
        return work if limiter is None else limiter.wrap(work)

    def effect_done(self, name: str, effect: EffectStart, value: Any, error: Any) -> None:
        live = self.live
        ref = live.effect_in_flight
        if ref is not None and ref.key == effect.key and ref.attempt == effect.attempt:
            live.effect_outcome = (
                "it returned a result"
                if error is None
                else f"it raised {type(error).__name__}: {error}"
            )
        self.engine.emit(
            DurableEventKind.EFFECT_FINISHED,
            self.live,
            effect=name,
            kind=effect.kind,
            key=effect.key,
            attempt=effect.attempt,
            value=value,
            error=error,
        )


@attrs.frozen
class _Committed:
    """``BarrierOutcome.value`` of a committed engine barrier."""

    live: LiveExecution
    commit: DurableCommit


class Engine:
    """The loop-thread owner of live executions (see the module docstring).

    Args:
        host: the runtime (gives the store, dispatcher, clock, faults, listeners,
            the registry of machines and store I/O off the loop).

    Attributes: ``live`` (execution id → its live copy); ``commits_in_flight``;
    ``closing`` (set once the runtime closes or stops writing: nothing more is
    delivered); its parts ``effects``, ``delivery``, ``parking``, ``cancels``,
    ``recovery`` and ``resting`` (the waiting executions it holds without a live copy:
    :mod:`~phronomy_fsm.durable.resting`).
    """

    def __init__(self, host: EngineHost) -> None:
        self.host = host
        self.live: dict[str, LiveExecution] = {}
        self.commits_in_flight = 0
        self.closing = False
        self.effects = Effects(self)
        self.delivery = Delivery(self)
        self.parking = Parking(self)
        self.cancels = Cancellation(self)
        self.recovery = Recovery(self)
        #: waiting executions held as an index entry, not a live copy
        self.resting = Resting(self)

    def post(self, fn: Callable[..., Any], *args: Any) -> None:
        """Queue ``fn(*args)`` on the loop thread from a store or helper thread (a
        commit's outcome, a read-back); dropped once the loop has stopped. Any thread.
        """
        try:
            self.host.dispatcher.call_soon(fn, *args)
        except DispatcherStoppedError:
            # Why: the runtime closed (close() lets executions come to rest only up to
            # its timeout) or its loop failed while this was on its way. Nobody runs
            # the execution here any more, and what the store did is in the store:
            # whoever recovers the execution reads it back. Raising would only print a
            # traceback from the store's or the helper's thread.
            log.debug("%s dropped: the runtime's loop has stopped", getattr(fn, "__name__", fn))

    def now(self) -> datetime:
        """The runtime clock's wall time (aware UTC)."""
        return self.host.clock.now()

    def emit(
        self, what: DurableEventKind, live: LiveExecution, record: Any = None, **detail: Any
    ) -> None:
        """Tell the listeners (their errors are logged, never raised)."""
        listeners = self.host.listeners
        if not listeners:
            return
        event = DurableEvent(what, live.execution_id, live.reg.machine.name, record, detail)
        for listener in listeners:
            try:
                listener(event)
            except HOOK_ERRORS:
                log.exception("durable listener raised on %s", what.value)

    def crash_point(self, point: str) -> None:
        """Honour the runtime's fault plan at ``point`` (tests and the crash harness)."""
        faults = self.host.faults
        if faults is not None:
            faults.hit(point)

    def encode(self, live: LiveExecution) -> EncodedJSON:
        """The live context as a JSON fragment (raises ContextSerializationError)."""
        return EncodedJSON(live.reg.codec.encode(live.ctx))

    def context(self, live: LiveExecution) -> Any:
        """The decoded context (decoded from the record on first use)."""
        if live.ctx is None:
            data = live.record.context
            if type(data) is not EncodedJSON:
                # parsed data the record holds (read from the store): a decode may keep
                # its objects (a dict context, an Any field), and the session must not
                # change the committed context in place — a later commit that keeps
                # the last committed context (@cancel) would store its changes
                data = copy.deepcopy(data)
            live.ctx = live.reg.codec.decode(json_data(data))
        return live.ctx

    def start_session(
        self,
        live: LiveExecution,
        *,
        at_state: str | None = None,
        event: str | None = None,
        payload: Any = None,
        rework: bool = False,
        rework_row: int | None = None,
    ) -> None:
        """Start (or resume) the execution's session on the dispatcher (``rework``:
        start the work of ``at_state`` again, see ``Dispatcher.start_session``)."""
        reg = live.reg
        ctx = self.context(live)
        live.session_starting()
        session_id = self.host.dispatcher.start_session(
            reg.binding,
            ctx,
            at_state=at_state,
            event=event,
            payload=payload,
            group=live.execution_id,
            revision=live.record.revision,
            on_done=lambda result, error: self.session_done(live, result, error),
            step_limit=reg.machine.step_limit,
            driver=_Driver(self, live),
            rework=rework,
            rework_row=rework_row,
        )
        live.session_started(session_id)
        if at_state is not None:
            live.state = at_state

    def barrier(self, live: LiveExecution, session: Session, spec: Any, payload: Any) -> Any:
        """The work of a spec barrier: build the commit and submit it."""
        state = session.node.name
        live.barrier_started()  # no signal until its outcome moves the session
        replay = live.replay
        if replay is not None:
            live.replay = None
            if replay.resolution is not None:
                self.parking.park_diverged(
                    live, session, replay.resolution.subject, f"barrier {spec.name}"
                )
                return BarrierOutcome(
                    "not_committed", error=ReplayDivergedError("replay reached a barrier")
                )
        records = BarrierRecords()
        hook = live.reg.record_hooks.get(spec.name)
        if hook is not None:
            added = hook(session.ctx, payload)
            if added is not None:
                if not isinstance(added, BarrierRecords):
                    raise TypeError(
                        f"barrier hook {spec.name!r} returned {type(added).__name__}; return "
                        "BarrierRecords or None (docs/semantics.md, 'Barrier hooks')"
                    )
                records = added
        try:
            context = self.encode(live)
            children = self.child_records(live, records, session)
        except ContextSerializationError as exc:
            return BarrierOutcome("not_committed", error=exc)
        record = points.at_barrier(
            live.record,
            self.now(),
            state=state,
            resume_event=spec.row.committed,
            context=context,
            announced=live.reg.facts.announced.get(state, ()),
        )
        commit = DurableCommit(
            spec.name,
            record,
            live.record.revision,
            live.fence,
            consume_signals=tuple(live.delivered),
            children=tuple(c for c, _ in children),
            journal=records.journal,
        )
        pending = submit_with_reconciliation(
            self.host.store, commit, value=_Committed(live, commit), name=spec.name
        )

        def subscribe(report: Callable[[BarrierOutcome], None]) -> None:
            def noted(outcome: BarrierOutcome) -> None:
                if outcome.outcome == COMMITTED:  # queued before the dispatcher applies it
                    self.post(self.committed, live, commit)
                report(outcome)

            pending.subscribe(noted)

        return PendingBarrier(subscribe)

    def child_records(
        self, live: LiveExecution, records: BarrierRecords, session: Session
    ) -> list[tuple[ExecutionRecord, Registration]]:
        """The records of the children a barrier starts (revision 0, point start)."""
        out = []
        revision = live.record.revision + 1
        for index, child in enumerate(records.children):
            reg = self.host.registration(child.machine)
            reg.codec.check(child.context)
            context = EncodedJSON(reg.codec.encode(child.context))
            now = self.now()
            table = reg.machine.table
            record = ExecutionRecord(
                execution_id=child.execution_id
                or child_execution_id(live.execution_id, revision, index),
                machine=table.machine,
                spec_version=table.version,
                spec_sha256=table.spec_sha256,
                state=table.initial,
                point=DurablePoint.START,
                status=ExecutionStatus.RUNNING,
                revision=0,
                created_at=now,
                updated_at=now,
                context=context,
                parent_execution_id=live.execution_id,
                notify_event=child.notify_event,
                labels=dict(child.labels),
            )
            out.append((record, reg))
        return out

    def committed(self, live: LiveExecution, commit: DurableCommit) -> None:
        """The one post-commit path of every commit of ``live`` (a spec barrier's and
        an engine commit's): the live record follows the store whatever became of the
        session meanwhile (a cancel, a halt) — the durable point moved here, the
        signals it consumed are no longer delivered ones — and the children it
        started run. Loop thread; for a spec barrier, before the dispatcher applies
        the outcome to the session."""
        if commit.execution.revision <= live.record.revision:
            return
        live.record = commit.execution
        live.effect_since_commit = False  # the durable point moved here
        live.effect_in_flight = None
        del live.delivered[: len(commit.consume_signals)]
        self.emit(DurableEventKind.COMMITTED, live, commit.execution, barrier=commit.barrier)
        for child in commit.children:
            reg = self.host.registration(child.machine)
            child_live = LiveExecution(reg, child, Fence(live.fence.worker_id, 1))
            self.live[child.execution_id] = child_live
            self.emit(DurableEventKind.STARTED, child_live, child)
            if live.cancelling is not None:
                # the parent's cancel came while this commit was in flight: the child
                # is cancelled before any of its work starts (docs/semantics.md "Cancel")
                self.cancels.cancel(
                    child_live,
                    attrs.evolve(live.cancelling, execution_id=child.execution_id, seq=0),
                )
                continue
            self.start_session(child_live)

    def step(self, live: LiveExecution, session: Session, source: str, target: str) -> None:
        """After every transition: fail closed, or deliver the next signal."""
        live.state = target
        live.took_step(session.serial)  # a move settles (or leaves) its source's barrier
        facts = live.reg.facts
        if target == facts.fail_closed and target != source:
            self.halt(live, Halt.FAIL_CLOSED)
            return
        # Signals are applied between steps, never inside one: the target's entry work
        # starts first, and if it is a barrier, no signal is taken until its commit's
        # outcome moves the session (a signal applied while the commit is in flight
        # would be marked consumed by it without its change, or move the session before
        # the commit's outcome). A wait state halts the session in this very step; its
        # @wait commit's react delivers the pending signals instead.
        if session.binding.nodes[target].kind not in (AUTO, WAIT):
            self.delivery.schedule_delivery(live)

    def halt(self, live: LiveExecution, why: Halt) -> None:
        """Stop the execution's session where it stands (``why`` is remembered for
        :meth:`session_done`)."""
        live.halting_for(why)
        sid = live.session_id
        if sid is not None:
            self.host.dispatcher.halt(sid)

    def session_done(
        self, live: LiveExecution, result: SessionResult | None, error: BaseException | None
    ) -> None:
        """The session ended: commit what its end means (see the module docstring)."""
        halting = live.session_ended()
        if halting is Halt.SUPERSEDED:
            return
        if halting is Halt.FAIL_CLOSED:
            self.recovery.recover_from_store(live, "the machine entered its fail_closed state")
            return
        if halting is Halt.CANCEL:
            return  # the cancel path commits when the execution is quiescent
        if live.parked is not None:
            self.parking.commit_parked(live)
            return
        if error is not None:
            self.host.dispatcher.when_quiescent(
                live.execution_id, lambda: self.commit_failed(live, error)
            )
            return
        assert result is not None
        live.state = result.state
        kind = live.reg.binding.nodes[result.state].kind
        if kind == FINAL:
            self.commit_final(live, result.state)
        elif kind == WAIT:
            self.commit_wait(live, result.state)
        else:  # halted elsewhere (by the engine): nothing to commit
            log.debug("execution %s halted in %s", live.execution_id, result.state)

    def engine_records(self, live: LiveExecution, barrier: str, state: str) -> BarrierRecords:
        """What the machine's ``records`` hook adds to an engine commit (``@wait``,
        ``@final``, ``@cancel``, and an ``@resolution`` that finishes the execution);
        an empty set when it has none or it fails (logged:
        the commit itself must not be lost to a journal hook). A parked execution's
        context is decoded again from its record (parking dropped the live copy)."""
        hook = live.reg.machine.records
        if hook is None:
            return BarrierRecords()
        try:
            ctx = self.context(live)
        except ContextSerializationError:
            log.exception(
                "execution %s: no records on %s: its context cannot be read",
                live.execution_id,
                barrier,
            )
            return BarrierRecords()
        try:
            added = hook(ctx, barrier, state)
        except HOOK_ERRORS:
            log.exception(
                "execution %s: the records hook raised on %s; committing without records",
                live.execution_id,
                barrier,
            )
            return BarrierRecords()
        if added is None:
            return BarrierRecords()
        if not isinstance(added, BarrierRecords):
            log.error(
                "execution %s: the records hook returned %s on %s, not BarrierRecords; ignored",
                live.execution_id,
                type(added).__name__,
                barrier,
            )
            return BarrierRecords()
        return added

    def engine_commit(
        self,
        live: LiveExecution,
        point: EngineBarrier,
        record: ExecutionRecord,
        *,
        consume: tuple[int, ...] = (),
        consume_outcome: str = "consumed",
        send_signals: tuple[SignalRecord, ...] = (),
        on_committed: Callable[[], None],
        on_receipt: Callable[[DurableReceipt | None], None] | None = None,
        on_refused: Callable[[BaseException], None] | None = None,
    ) -> None:
        """Commit an engine barrier (with what the machine's records hook adds); on
        ``committed`` run ``on_committed`` (loop thread) — after ``on_receipt`` with the
        store's receipt (``None`` when a read-back proved the commit), when given — and
        on anything else recover the execution from the store."""
        barrier = point.value  # the name stored in the barrier log, as a plain str
        records = (
            self.engine_records(live, barrier, record.state)
            if point in JOURNALED or (point is EngineBarrier.RESOLUTION and record.is_finished)
            else BarrierRecords()
        )
        commit = DurableCommit(
            barrier,
            record,
            live.record.revision,
            live.fence,
            consume_signals=consume,
            consume_outcome=consume_outcome,
            send_signals=send_signals,
            journal=records.journal,
        )
        self.crash_point(f"barrier:{barrier}:before")
        live.commit_started()
        self.commits_in_flight += 1

        def report(outcome: BarrierOutcome) -> None:
            self.post(settle, outcome)

        def settle(outcome: BarrierOutcome) -> None:
            self.commits_in_flight -= 1
            live.commit_settled()
            self.crash_point(f"barrier:{barrier}:after")
            if outcome.outcome == COMMITTED:
                self.committed(live, commit)
                if on_receipt is not None:
                    on_receipt(outcome.value)
                on_committed()
                return
            if on_refused is not None:
                on_refused(
                    outcome.error or EffectNotPerformedError(f"commit {barrier} {outcome.outcome}")
                )
            if isinstance(outcome.error, SchemaVersionError):
                # newer code migrated the store: no read-back, no retry — the runtime
                # writes nothing more and lets every execution go (let_go_all)
                self.host.note_write_error(outcome.error)
                return
            if getattr(outcome.error, "reason", None) == "cancel_pending":
                self.cancels.cancel_instead(live, barrier)
                return
            log.warning(
                "execution %s: commit %s %s (%r); recovering it from the store",
                live.execution_id,
                barrier,
                outcome.outcome,
                outcome.error,
            )
            self.recovery.recover_from_store(live, f"commit {barrier} {outcome.outcome}")

        try:
            submit_with_reconciliation(self.host.store, commit, name=barrier).subscribe(report)
        except BaseException:
            self.commits_in_flight -= 1
            live.commit_settled()
            raise

    def commit_wait(self, live: LiveExecution, state: str) -> None:
        """Halted in a wait state: commit it (with its timer's deadline), then wait."""
        live.replay = None
        timeout = live.reg.facts.states[state].timeout
        deadline = None if timeout is None else self.now() + timedelta(seconds=timeout.seconds)
        stayed = live.record
        if (
            deadline is not None
            and not live.moved
            and stayed.point is DurablePoint.WAIT
            and stayed.state == state
            and stayed.deadline_at is not None
            and stayed.deadline_at > self.now()
        ):
            # resumed here by a signal it took without leaving (an internal transition,
            # or none taken): the timer counts from entering the state, not from this.
            # A deadline already passed (its timeout event taken by no row) starts anew,
            # or the timer would fire again at once, for ever.
            deadline = stayed.deadline_at
        try:
            context = self.encode(live)
        except ContextSerializationError as exc:
            self.commit_failed(live, exc)
            return
        record = points.waiting(
            live.record, self.now(), state=state, context=context, deadline_at=deadline
        )

        def committed() -> None:
            self.emit(DurableEventKind.WAITING, live, record, state=state)
            if not live.pending and self.resting.rest(live):
                return  # held as an index entry until its signal or timer comes
            self.delivery.arm_timer(live)
            self.delivery.react(live)

        self.engine_commit(
            live, EngineBarrier.WAIT, record, consume=tuple(live.delivered), on_committed=committed
        )

    def commit_final(self, live: LiveExecution, state: str) -> None:
        """Reached a final state: commit it, tell the parent, settle the waiters."""
        live.replay = None
        try:
            context = self.encode(live)
        except ContextSerializationError as exc:
            self.commit_failed(live, exc)
            return
        status = live.reg.facts.final_status.get(state, ExecutionStatus.COMPLETED)
        record = points.finished(
            live.record, self.now(), state=state, status=status, context=context
        )
        self.finish(live, EngineBarrier.FINAL, record)

    def commit_failed(self, live: LiveExecution, error: BaseException) -> None:
        """An application error ended the session: commit ``failed`` with the error
        (after every effect of the execution has physically finished)."""
        if self.live.get(live.execution_id) is not live or live.committing:
            return
        try:
            context: Any = self.encode(live)
        except HOOK_ERRORS:  # ContextSerializationError or a failing unstructure hook
            context = live.record.context
        info = ErrorInfo.from_exception(error)
        cause = error.__cause__
        if cause is not None:
            info = ErrorInfo(info.type, info.message, {"cause": f"{type(cause).__name__}: {cause}"})
        record = points.failed(
            live.record, self.now(), state=live.state, context=context, error=info
        )
        log.warning("execution %s failed: %s", live.execution_id, info.render())
        self.finish(live, EngineBarrier.FINAL, record)

    def finish(self, live: LiveExecution, barrier: EngineBarrier, record: ExecutionRecord) -> None:
        """Commit a finished record (with the parent's notification) and settle."""
        send: tuple[SignalRecord, ...] = ()
        if record.parent_execution_id is not None and record.notify_event is not None:
            send = (self.child_signal(record),)

        seqs: list[int] = []

        def receipt(got: DurableReceipt | None) -> None:
            if got is not None and len(got.signal_seqs) == len(send):
                seqs.extend(got.signal_seqs)

        def committed() -> None:
            self.emit(DurableEventKind.FINISHED, live, record, status=record.status.value)
            self.settle(live, record)
            for i, signal in enumerate(send):  # a parent live here hears at once
                parent = self.live.get(signal.execution_id)
                if parent is None:  # a parent resting here is loaded with it
                    known = [attrs.evolve(signal, seq=seqs[i])] if seqs and seqs[i] > 0 else []
                    self.resting.load(signal.execution_id, known)
                    continue
                if seqs and seqs[i] > 0:  # the signal as the store wrote it: no read
                    self.delivery.add_signals(parent, [attrs.evolve(signal, seq=seqs[i])])
                else:  # proved by a read-back (or deduplicated): read the inbox
                    self.host.io.refresh_signals(parent)

        self.engine_commit(
            live,
            barrier,
            record,
            consume=tuple(live.delivered),
            send_signals=send,
            on_committed=committed,
            on_receipt=receipt if send else None,
        )

    def child_signal(self, record: ExecutionRecord) -> SignalRecord:
        """The signal telling a parent that its child ``record`` finished."""
        context = json_data(record.context)
        return SignalRecord(
            signal_id=f"child-done:{record.execution_id}",
            execution_id=record.parent_execution_id or "",
            kind=SignalKind.CHILD,
            created_at=self.now(),
            event=record.notify_event,
            payload={
                "child_execution_id": record.execution_id,
                "machine": record.machine,
                "status": record.status.value,
                "state": record.state,
                "context": context,
            },
            sender=f"execution:{record.execution_id}",
        )

    def settle(self, live: LiveExecution, record: ExecutionRecord) -> None:
        """The execution finished durably: drop it and settle its waiters."""
        if live.timer is not None:
            live.timer.cancel()
        if live.expiry is not None:
            live.expiry.cancel()
            live.expiry = None
        self.recovery.forget(live)
        result = ExecutionResult.from_record(record, live.ctx)
        for task in live.waiters:
            task.complete(result)
        live.waiters.clear()
        # the finishing commit closed every signal still pending in the store
        live.pending.clear()

    def held_ids(self) -> list[str]:
        """The ids of every execution held here: live, or resting
        (:mod:`~phronomy_fsm.durable.resting`). Loop thread."""
        return [*self.live, *self.resting.index]

    def running_count(self) -> int:
        """How many live executions are running here (:meth:`moving`). One that waits
        durably (a person, a timer), is parked for an operator, or rests waiting for
        its children is not counted: a worker's capacity is for work, so a parent
        never keeps its own children from being claimed (``docs/scale-out.md``,
        "Running workers"). Loop thread."""
        return sum(1 for live in self.live.values() if self.moving(live))

    def at_rest(self) -> bool:
        """True when nothing moves here: no commit is in flight, and no live execution
        is moving (:meth:`moving`) — each waits durably, is parked or finished, or its
        session stands in an external state with no work in flight and no signal it
        could take now: it waits for a signal or for its children, which are live
        executions of their own (``docs/operations.md``, "Recovering a store: recover")."""
        if self.commits_in_flight:
            return False
        return not any(self.moving(live) for live in self.live.values())

    def moving(self, live: LiveExecution) -> bool:
        """True while ``live`` does something here: a commit or a signal delivery queued, a
        session halting, work (an offload, a barrier) in flight, a session in an auto,
        wait or final state (about to move on), or a signal its state takes now. An
        execution with no session, or whose session rests in an external state waiting
        for a signal or its children, is not moving. Loop thread."""
        if live.committing:
            return True
        sid = live.session_id
        if sid is None:
            return False
        if live.delivery_scheduled or live.is_halting:
            return True
        dispatcher = self.host.dispatcher
        if dispatcher.in_flight(live.execution_id):
            return True
        state = dispatcher.session_state(sid)
        node = live.reg.binding.nodes.get(state) if state is not None else None
        if state is None or node is None or node.kind in (AUTO, WAIT, FINAL):
            return True
        if node.offload is not None or node.barrier is not None:
            return True  # its work's outcome is on its way
        handled = live.reg.facts.handled.get(state, frozenset())
        return any(
            s.kind in (SignalKind.EVENT, SignalKind.CHILD, SignalKind.CANCEL)
            and (s.kind is SignalKind.CANCEL or s.event in handled)
            for s in live.pending
        )


__all__ = ["Engine", "LiveExecution", "Registration", "Replay"]
