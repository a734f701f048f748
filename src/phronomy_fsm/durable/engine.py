"""The loop side of the durable runtime: the one owner of every live execution.

:class:`Engine` runs on the dispatcher's loop thread and owns each
:class:`LiveExecution` (its context, last committed record, lease fence, inbox, replay
plan and waiters). It implements the rules of ``docs/semantics.md``:

- **Barriers**: the engine commits each barrier itself — state, context, revision + 1,
  the effects it announces, the signals consumed since the last commit, and what the
  application's barrier hook adds (journal entries, children) — in one transaction,
  through the store's group commit with reconciliation of a lost response.
- **Engine commits**: entering a wait state (``@wait``, with its timer's deadline) or
  a final state (``@final``), parking for an operator (``@recovery``), applying a
  resolution (``@resolution``) and cancelling (``@cancel``) are commits too.
- **Effects**: every non-pure offload is started with its idempotency key. While an
  execution is being **replayed** after a restart (from its last barrier), the first
  effect it reaches decides: ``pure`` runs again, ``idempotent`` runs again with the
  same key, ``at_most_once`` parks the execution in ``recovery_required``; a committed
  resolution is applied there instead of running the effect.
- **Fail closed**: entering the machine's ``fail_closed`` state, or an engine commit
  whose outcome is not ``committed``, drops the live copy and recovers the execution
  from the store exactly as a restart would.
- **Signals**: each execution's inbox is delivered in order to the first signal whose
  event the current (non-auto) state handles (others wait); delivered signals are
  consumed by the next commit, so after a crash they are delivered again.

Everything here runs on the loop thread; :class:`~phronomy_fsm.durable.runtime.DurableRuntime`
is the thread-safe facade. Must not import the store or agent layers.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from datetime import datetime, timedelta
from typing import Any

import attrs

from phronomy_fsm.durable.codec import EncodedJSON, ensure_json, json_data
from phronomy_fsm.durable.commits import submit_with_reconciliation
from phronomy_fsm.durable.context import ContextCodec
from phronomy_fsm.durable.keys import child_execution_id, idempotency_key
from phronomy_fsm.durable.machines import MachineFacts
from phronomy_fsm.durable.records import (
    DurableCommit,
    DurablePoint,
    DurableReceipt,
    EffectKind,
    EffectRef,
    ErrorInfo,
    ExecutionRecord,
    ExecutionStatus,
    Fence,
    RecoveryInfo,
    ResolutionInfo,
    ResolutionOutcome,
    SignalKind,
    SignalRecord,
)
from phronomy_fsm.durable.types import (
    BarrierRecords,
    DurableEvent,
    DurableEventKind,
    ExecutionResult,
    Machine,
)
from phronomy_fsm.errors import (
    HOOK_ERRORS,
    ContextSerializationError,
    DispatcherStoppedError,
    EffectFailedError,
    EffectNotPerformedError,
    LeaseLostError,
    ReplayDivergedError,
    RuntimeClosedError,
    SchemaVersionError,
    SerializationError,
)
from phronomy_fsm.runtime.binding import AUTO, FINAL, WAIT, MachineBinding, is_protocol_stub
from phronomy_fsm.runtime.session import PARKED, EffectStart, Session, SessionResult
from phronomy_fsm.runtime.tasks import Task
from phronomy_fsm.table import COMMITTED, BarrierOutcome, PendingBarrier, Settled

log = logging.getLogger("phronomy_fsm.durable")

#: Outcomes an operator may give for an effect whose outcome is unknown.
EFFECT_OUTCOMES = tuple(o.value for o in ResolutionOutcome)
#: Outcomes for the execution as a whole (spec changed, context unreadable).
EXECUTION_OUTCOMES = (ResolutionOutcome.FAILED.value,)
#: Seconds between attempts to read an execution back after an unproven outcome.
READBACK_DELAYS = (0.0, 0.05, 0.2, 0.5, 1.0, 2.0, 5.0)


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


class Registration:
    """A registered machine: its binding, facts, context codec and record hooks."""

    __slots__ = ("binding", "codec", "facts", "machine", "record_hooks")

    def __init__(self, machine: Machine, binding: MachineBinding) -> None:
        self.machine = machine
        self.binding = binding
        self.facts = MachineFacts(machine.table, machine.final_status)
        self.codec = ContextCodec(machine.context_type, machine.name)
        hooks = machine.hooks
        self.record_hooks: dict[str, Any] = {
            name: getattr(hooks, name)
            for name in machine.table.barriers
            if callable(getattr(hooks, name, None)) and not is_protocol_stub(hooks, name)
        }


#: How long an announced effect's work waits (on its pool thread) for the ``@effect``
#: commit before it gives up without starting, in seconds.
ANNOUNCEMENT_WAIT_SECONDS = 60.0


def _row_index_of(binding: MachineBinding, spec: Any) -> int | None:
    """The index of the transition whose own offload is ``spec`` (``None``: none)."""
    for node in binding.nodes.values():
        for cand in node.rows.values():
            for row in cand if isinstance(cand, tuple) else (cand,):
                if getattr(row, "offload", None) is spec:
                    return int(row.index)
    return None


class Replay:
    """Set while a recovered execution re-runs from its last barrier, until it reaches
    its first non-pure effect, a barrier, a wait or a final state.

    ``fresh`` is true only right after this runtime committed ``resolution`` (nothing
    of it has run yet); a resolution read back from the store may have been acted on
    before the process stopped (a ``retry`` may have run its attempt)."""

    __slots__ = ("fresh", "resolution")

    def __init__(self, resolution: Any = None, *, fresh: bool = False) -> None:
        self.resolution = resolution
        self.fresh = fresh


class LiveExecution:
    """The live state of one execution in this process (loop thread only).

    Attributes: ``execution_id``; ``reg`` (its machine); ``record`` (as last
    committed); ``ctx`` (the decoded context, ``None`` while it waits); ``fence``;
    ``session_id`` (while a session runs); ``state`` (current live state);
    ``pending`` (undelivered inbox signals, in order); ``delivered`` (seqs consumed by
    the next commit); ``replay``; ``parked`` (why it is being parked); ``halting``
    (why its session is being stopped); ``waiters`` (tasks settled when it finishes);
    ``timer``; ``effect_since_commit`` (an effect started since the last commit that set
    the durable point: the next one needs an announcement of its own);
    ``effect_in_flight`` / ``effect_outcome`` (the last non-pure effect started since
    that commit, and what it reported back: a cancel's record names them);
    ``moved`` (its session has entered a state since it started: a wait it re-commits
    without having left it keeps its timer's deadline); ``cancel_seq`` (the cancel
    request being applied: the same request read again, or
    another, changes nothing); ``announcement`` (the outcome of the ``@effect`` commit the effect being started
    waits for: ``None`` once committed, else the error);
    ``delivery_scheduled`` (a look for the next signal its live session takes
    is queued on the loop); ``barrier_pending`` (its session's barrier commit is in
    flight: it takes no signal until the outcome moves it); ``committing`` (an engine
    commit is in flight).
    """

    __slots__ = (
        "announcement",
        "barrier_pending",
        "cancel_seq",
        "committing",
        "ctx",
        "delivered",
        "delivery_scheduled",
        "effect_in_flight",
        "effect_outcome",
        "effect_since_commit",
        "execution_id",
        "expiry",
        "fence",
        "halting",
        "moved",
        "parked",
        "pending",
        "record",
        "reg",
        "replay",
        "session_id",
        "state",
        "timer",
        "waiters",
    )

    def __init__(self, reg: Registration, record: ExecutionRecord, fence: Fence) -> None:
        self.execution_id = record.execution_id
        self.reg = reg
        self.record = record
        self.ctx: Any = None
        self.fence = fence
        self.session_id: int | None = None
        self.state = record.state
        self.pending: list[SignalRecord] = []
        self.delivered: list[int] = []
        self.replay: Replay | None = None
        self.parked: RecoveryInfo | None = None
        self.halting: str | None = None
        self.moved = False
        self.waiters: list[Task[ExecutionResult]] = []
        self.timer: Any = None
        self.expiry: Any = None
        self.delivery_scheduled = False
        self.barrier_pending = False
        self.cancel_seq: int | None = None
        self.effect_since_commit = False
        self.effect_in_flight: EffectRef | None = None
        self.effect_outcome: str | None = None
        self.announcement: Future[BaseException | None] | None = None
        self.committing = False

    def __repr__(self) -> str:
        return f"<LiveExecution {self.execution_id} {self.state} r{self.record.revision}>"


class _Driver:
    """The :class:`~phronomy_fsm.runtime.session.SessionDriver` of one execution."""

    __slots__ = ("engine", "live")

    def __init__(self, engine: Engine, live: LiveExecution) -> None:
        self.engine = engine
        self.live = live

    def barrier(self, session: Session, spec: Any, payload: Any) -> Any:
        return self.engine.barrier(self.live, session, spec, payload)

    def offload(self, session: Session, spec: Any, payload: Any) -> Any:
        return self.engine.offload(self.live, session, spec, payload)

    def step(self, session: Session, source: str, target: str) -> None:
        self.engine.step(self.live, session, source, target)

    @property
    def may_start_effect(self) -> Callable[[], BaseException | None]:
        """The gate of the effect being started now (read by the dispatcher right after
        :meth:`offload`): on the pool thread, it waits for that effect's ``@effect``
        commit, when it has one, then checks the lease."""
        announcement = self.live.announcement
        engine, execution_id = self.engine, self.live.execution_id

        def gate() -> BaseException | None:
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
            return engine.rt.lease_error(execution_id)

        return gate

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
        runtime: the facade (gives the store, dispatcher, clock, faults, listeners,
            worker id and the registry of machines).
    """

    def __init__(self, runtime: Any) -> None:
        self.rt = runtime
        self.live: dict[str, LiveExecution] = {}
        self.commits_in_flight = 0
        self.closing = False

    # ------------------------------------------------------------------ helpers

    def post(self, fn: Callable[..., Any], *args: Any) -> None:
        """Queue ``fn(*args)`` on the loop thread from a store or helper thread (a
        commit's outcome, a read-back); dropped once the loop has stopped. Any thread.
        """
        try:
            self.rt.dispatcher.call_soon(fn, *args)
        except DispatcherStoppedError:
            # Why: the runtime closed (close() lets executions come to rest only up to
            # its timeout) or its loop failed while this was on its way. Nobody runs
            # the execution here any more, and what the store did is in the store:
            # whoever recovers the execution reads it back. Raising would only print a
            # traceback from the store's or the helper's thread.
            log.debug("%s dropped: the runtime's loop has stopped", getattr(fn, "__name__", fn))

    def now(self) -> datetime:
        """The runtime clock's wall time (aware UTC)."""
        return self.rt.clock.now()

    def emit(
        self, what: DurableEventKind, live: LiveExecution, record: Any = None, **detail: Any
    ) -> None:
        """Tell the listeners (their errors are logged, never raised)."""
        listeners = self.rt.listeners
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
        faults = self.rt.faults
        if faults is not None:
            faults.hit(point)

    def encode(self, live: LiveExecution) -> EncodedJSON:
        """The live context as a JSON fragment (raises ContextSerializationError)."""
        return EncodedJSON(live.reg.codec.encode(live.ctx))

    def context(self, live: LiveExecution) -> Any:
        """The decoded context (decoded from the record on first use)."""
        if live.ctx is None:
            live.ctx = live.reg.codec.decode(json_data(live.record.context))
        return live.ctx

    def next_record(self, live: LiveExecution, **changes: Any) -> ExecutionRecord:
        """The record after ``live.record``: revision + 1, fresh ``updated_at``."""
        return attrs.evolve(
            live.record, revision=live.record.revision + 1, updated_at=self.now(), **changes
        )

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
        live.halting = None
        live.barrier_pending = False
        live.moved = False
        live.session_id = self.rt.dispatcher.start_session(
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
        if at_state is not None:
            live.state = at_state

    # ------------------------------------------------------------------ barriers

    def barrier(self, live: LiveExecution, session: Session, spec: Any, payload: Any) -> Any:
        """The work of a spec barrier: build the commit and submit it."""
        state = session.node.name
        live.barrier_pending = True  # no signal until its outcome moves the session
        replay = live.replay
        if replay is not None:
            live.replay = None
            if replay.resolution is not None:
                self.park_diverged(live, session, replay.resolution.subject, f"barrier {spec.name}")
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
        facts = live.reg.facts
        record = self.next_record(
            live,
            state=state,
            point=DurablePoint.BARRIER,
            point_revision=live.record.revision + 1,
            status=ExecutionStatus.RUNNING,
            resume_event=spec.row.committed,
            context=context,
            pending_effects=facts.announced.get(state, ()),
            deadline_at=None,
            recovery=None,
            resolution=None,
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
            self.rt.store, commit, value=_Committed(live, commit), name=spec.name
        )

        def subscribe(report: Callable[[BarrierOutcome], None]) -> None:
            def noted(outcome: BarrierOutcome) -> None:
                if outcome.outcome == COMMITTED:  # queued before the dispatcher applies it
                    self.post(self.note_committed, live, commit)
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
            reg = self.rt.registration(child.machine)
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

    def note_committed(self, live: LiveExecution, commit: DurableCommit) -> None:
        """A spec barrier committed: the live record follows the store whatever became
        of the session meanwhile (a cancel, a halt), and its children start. Runs on
        the loop before the dispatcher applies the outcome to the session."""
        if commit.execution.revision <= live.record.revision:
            return
        live.record = commit.execution
        live.effect_since_commit = False  # the durable point moved here
        live.effect_in_flight = None
        del live.delivered[: len(commit.consume_signals)]
        self.emit(DurableEventKind.COMMITTED, live, commit.execution, barrier=commit.barrier)
        for child in commit.children:
            reg = self.rt.registration(child.machine)
            child_live = LiveExecution(reg, child, Fence(live.fence.worker_id, 1))
            self.live[child.execution_id] = child_live
            self.emit(DurableEventKind.STARTED, child_live, child)
            self.start_session(child_live)

    # ------------------------------------------------------------------ effects

    def offload(self, live: LiveExecution, session: Session, spec: Any, payload: Any) -> Any:
        """Decide about an offload about to start (see the module docstring)."""
        kind = EffectKind(spec.effect)
        policy = live.reg.machine.effect_policy
        if policy is not None:
            kind = EffectKind(policy(session.ctx, spec.name, kind))
        if kind is EffectKind.PURE:
            return None
        key = idempotency_key(live.execution_id, live.record.point_revision, spec.name)
        replay = live.replay
        if replay is not None:
            live.replay = None
            ref = EffectRef(spec.name, kind, session.node.name, key)
            resolution = replay.resolution
            if resolution is not None:
                subject = resolution.subject
                if subject is None or subject.effect != spec.name or subject.key != key:
                    self.park_diverged(live, session, subject, f"effect {spec.name} (key {key})")
                    return PARKED
                outcome = resolution.outcome
                # the answered effect is this commit's: the next one needs its own
                live.effect_since_commit = True
                if outcome is ResolutionOutcome.SUCCEEDED:
                    return Settled(resolution.result)
                if outcome is ResolutionOutcome.FAILED:
                    return Settled(
                        error=EffectFailedError(
                            resolution.error or "failed", effect=spec.name, key=key
                        )
                    )
                if outcome is ResolutionOutcome.NOT_PERFORMED:
                    return Settled(
                        error=EffectNotPerformedError(
                            f"{spec.name} was not performed (operator resolution); it is not "
                            "sent again",
                            effect=spec.name,
                            key=key,
                        )
                    )
                attempt = subject.attempt + 1
                if kind is EffectKind.AT_MOST_ONCE and not replay.fresh:
                    # the retried attempt may have run before the process stopped
                    self.park(
                        live,
                        session,
                        RecoveryInfo(
                            reason=(
                                f"the at_most_once effect {spec.name} (attempt {attempt}, "
                                "retried by an operator) may or may not have run before the "
                                "process stopped"
                            ),
                            subject=attrs.evolve(subject, attempt=attempt),
                            allowed_outcomes=EFFECT_OUTCOMES,
                            detected_at=self.now(),
                        ),
                    )
                    return PARKED
                return self.effect_start(live, spec.name, kind, key, attempt)
            if kind is EffectKind.AT_MOST_ONCE:
                self.park(
                    live,
                    session,
                    RecoveryInfo(
                        reason=(
                            f"the at_most_once effect {spec.name} may or may not have run "
                            "before the process stopped"
                        ),
                        subject=ref,
                        allowed_outcomes=EFFECT_OUTCOMES,
                        detected_at=self.now(),
                    ),
                )
                return PARKED
            # the effect the replayed commit announced runs again with its key: the
            # commit covers it, it is not announced anew (a new key would be a new effect)
            live.announcement = None
            return self.effect_start(live, spec.name, kind, key, 1)
        if live.effect_since_commit or live.record.point not in (
            DurablePoint.BARRIER,
            DurablePoint.START,
        ):
            # the durable point does not cover this effect (a wait, a timer, an effect
            # came between): it is announced by a commit of its own before it starts
            return self.announce(live, session, spec, kind, payload)
        live.announcement = None
        return self.effect_start(live, spec.name, kind, key, 1)

    def announce(
        self, live: LiveExecution, session: Session, spec: Any, kind: EffectKind, payload: Any
    ) -> Any:
        """Commit ``@effect`` — the state, the context and the input the work reads, the
        effect with its kind, its key (derived from this commit) and attempt — and let
        the work start once it committed (the gate waits for it). A recovery from it
        decides about the effect as after a barrier (``docs/semantics.md``,
        "Effects")."""
        state = session.node.name
        revision = live.record.revision + 1
        key = idempotency_key(live.execution_id, revision, spec.name)
        try:
            ensure_json(
                payload,
                what=f"the input of effect {spec.name} (the payload of the event that "
                "entered its state; an announced effect's input is stored: make it JSON "
                "data, or put what the effect needs in the context — docs/semantics.md, "
                '"Effects")',
            )
            context = self.encode(live)
        except (SerializationError, ContextSerializationError) as exc:
            live.announcement = None
            return Settled(error=exc)  # not started: its failed event says why
        row = None
        if session.node.offload is not spec:
            row = next(
                (
                    r.index
                    for cand in session.node.rows.values()
                    for r in (cand if isinstance(cand, tuple) else (cand,))
                    if r.offload is spec
                ),
                None,
            )
            if row is None:  # a transition's offload, taken into this state
                row = _row_index_of(live.reg.binding, spec)
        record = self.next_record(
            live,
            state=state,
            point=DurablePoint.EFFECT,
            point_revision=revision,
            status=ExecutionStatus.RUNNING,
            resume_event=None,
            context=context,
            pending_effects=(spec.name,),
            deadline_at=None,
            recovery=None,
            resolution=None,
            announced=EffectRef(spec.name, kind, state, key),
            effect_payload=payload,
            effect_row=row,
        )
        announced: Future[BaseException | None] = Future()
        live.announcement = announced
        consume = tuple(live.delivered)

        def committed() -> None:
            live.effect_since_commit = True  # the effect it announced starts now
            live.effect_in_flight = record.announced
            announced.set_result(None)
            self.react(live)  # signals (a cancel) held back while it was in flight

        def refused(error: BaseException) -> None:
            live.effect_in_flight = None  # never started: the gate refused it
            announced.set_result(error)

        try:
            self.engine_commit(
                live,
                "@effect",
                record,
                consume=consume,
                on_committed=committed,
                on_refused=refused,
            )
        except BaseException as exc:
            announced.set_result(exc)
            raise
        return self.effect_start(live, spec.name, kind, key, 1)

    def effect_start(
        self, live: LiveExecution, name: str, kind: EffectKind, key: str, attempt: int
    ) -> EffectStart:
        """Let an effect start: report it and hand its kind, key and attempt to the
        work (``octx.effect``)."""
        self.crash_point(f"effect:{name}:before")
        live.effect_since_commit = True
        live.effect_in_flight = EffectRef(name, kind, live.state, key, attempt)
        live.effect_outcome = None
        self.emit(
            DurableEventKind.EFFECT_STARTED,
            live,
            effect=name,
            kind=kind.value,
            key=key,
            attempt=attempt,
        )
        return EffectStart(kind.value, key, attempt)

    # ------------------------------------------------------------------ steps

    def step(self, live: LiveExecution, session: Session, source: str, target: str) -> None:
        """After every transition: fail closed, or deliver the next signal."""
        live.state = target
        live.barrier_pending = False  # a move settles (or leaves) the barrier of its source
        if session.serial != 1:  # every session starts at entry serial 1; a move raises it
            live.moved = True
        facts = live.reg.facts
        if target == facts.fail_closed and target != source:
            self.halt(live, "fail_closed")
            return
        # Signals are applied between steps, never inside one: the target's entry work
        # starts first, and if it is a barrier, no signal is taken until its commit's
        # outcome moves the session (a signal applied while the commit is in flight
        # would be marked consumed by it without its change, or move the session before
        # the commit's outcome). A wait state halts the session in this very step; its
        # @wait commit's react delivers the pending signals instead.
        if session.binding.nodes[target].kind not in (AUTO, WAIT):
            self.schedule_delivery(live)

    def halt(self, live: LiveExecution, why: str) -> None:
        """Stop the execution's session where it stands (``why`` is remembered for
        :meth:`session_done`)."""
        live.halting = why
        sid = live.session_id
        if sid is not None:
            self.rt.dispatcher.halt(sid)

    # ------------------------------------------------------------------ signals

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
        if live.committing or self.closing:
            return
        for signal in list(live.pending):
            if signal.kind is SignalKind.CANCEL:
                live.pending.remove(signal)
                self.cancel(live, signal)
                return
        status = live.record.status
        if live.session_id is None and status is ExecutionStatus.RECOVERY_REQUIRED:
            for signal in list(live.pending):
                if signal.kind is SignalKind.RESOLUTION:
                    live.pending.remove(signal)
                    self.apply_resolution(live, signal)
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
        return signal.created_at >= record.deadline_at and self.now() >= record.deadline_at

    def schedule_delivery(self, live: LiveExecution) -> None:
        """Look for the next signal the live session takes, on the loop, after the
        current step (once however often asked)."""
        if not live.delivery_scheduled:
            live.delivery_scheduled = True
            self.rt.dispatcher.call_soon(self.deliver_scheduled, live)

    def deliver_scheduled(self, live: LiveExecution) -> None:
        """Between steps: apply the next pending signal the live session's state takes,
        unless a commit (the engine's or its barrier's) is in flight or the session is
        stopping. A session in a wait state is resuming from it with its own event (or
        halting there): it takes no other; the @wait commit's react does."""
        live.delivery_scheduled = False
        sid = live.session_id
        if (
            sid is None
            or self.closing
            or live.committing
            or live.barrier_pending
            or live.halting is not None
            or self.live.get(live.execution_id) is not live
        ):
            return
        state = self.rt.dispatcher.session_state(sid)
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
            self.rt.drop_signals(
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
            self.emit(
                DurableEventKind.RESUMED, live, event=signal.event, signal_id=signal.signal_id
            )
            self.start_session(live, at_state=state, event=signal.event, payload=signal.payload)
            return
        # applied now, whole: the next commit consumes it with its change in the context
        self.rt.dispatcher.deliver_now(live.session_id, signal.event, signal.payload)
        if live.session_id is not None:
            self.schedule_delivery(live)  # the next one, if the state takes it

    # ------------------------------------------------------------------ session end

    def session_done(
        self, live: LiveExecution, result: SessionResult | None, error: BaseException | None
    ) -> None:
        """The session ended: commit what its end means (see the module docstring)."""
        live.session_id = None
        live.barrier_pending = False
        halting, live.halting = live.halting, None
        if halting == "superseded":
            return
        if halting == "fail_closed":
            self.recover_from_store(live, "the machine entered its fail_closed state")
            return
        if halting == "cancel":
            return  # the cancel path commits when the execution is quiescent
        if live.parked is not None:
            self.commit_parked(live)
            return
        if error is not None:
            self.rt.dispatcher.when_quiescent(
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
        barrier: str,
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
        records = (
            self.engine_records(live, barrier, record.state)
            if barrier in ("@wait", "@final", "@cancel")
            or (barrier == "@resolution" and record.is_finished)
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
        live.committing = True
        self.commits_in_flight += 1

        def report(outcome: BarrierOutcome) -> None:
            self.post(settle, outcome)

        def settle(outcome: BarrierOutcome) -> None:
            self.commits_in_flight -= 1
            live.committing = False
            self.crash_point(f"barrier:{barrier}:after")
            if outcome.outcome == COMMITTED:
                live.record = record
                live.effect_since_commit = False  # the durable point moved here
                live.effect_in_flight = None
                del live.delivered[: len(consume)]
                self.emit(DurableEventKind.COMMITTED, live, record, barrier=barrier)
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
                self.rt.note_write_error(outcome.error)
                return
            if getattr(outcome.error, "reason", None) == "cancel_pending":
                self.cancel_instead(live, barrier)
                return
            log.warning(
                "execution %s: commit %s %s (%r); recovering it from the store",
                live.execution_id,
                barrier,
                outcome.outcome,
                outcome.error,
            )
            self.recover_from_store(live, f"commit {barrier} {outcome.outcome}")

        try:
            submit_with_reconciliation(self.rt.store, commit, name=barrier).subscribe(report)
        except BaseException:
            self.commits_in_flight -= 1
            live.committing = False
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
        record = self.next_record(
            live,
            state=state,
            point=DurablePoint.WAIT,
            point_revision=live.record.revision + 1,
            status=ExecutionStatus.WAITING,
            resume_event=None,
            context=context,
            pending_effects=(),
            deadline_at=deadline,
            recovery=None,
            resolution=None,
        )

        def committed() -> None:
            self.emit(DurableEventKind.WAITING, live, record, state=state)
            self.arm_timer(live)
            self.react(live)

        self.engine_commit(
            live, "@wait", record, consume=tuple(live.delivered), on_committed=committed
        )

    def arm_timer(self, live: LiveExecution) -> None:
        """Arm the timer of a waiting execution from its stored deadline."""
        record = live.record
        if record.deadline_at is None:
            return
        timeout = live.reg.facts.states[record.state].timeout
        if timeout is None:
            return
        delay = max(0.0, (record.deadline_at - self.now()).total_seconds())
        revision = record.revision

        def fire() -> None:
            live.timer = None
            if (
                live.record.revision != revision
                or live.session_id is not None
                or live.committing
                or self.live.get(live.execution_id) is not live
            ):
                return
            self.fire_timer(live)

        live.timer = self.rt.dispatcher.call_later(delay, fire)

    def fire_timer(self, live: LiveExecution) -> None:
        """Resume the waiting execution with its wait state's timeout event."""
        if live.timer is not None:
            live.timer.cancel()
            live.timer = None
        timeout = live.reg.facts.states[live.record.state].timeout
        assert timeout is not None
        self.emit(DurableEventKind.RESUMED, live, event=timeout.event, timer=True)
        self.start_session(live, at_state=live.record.state, event=timeout.event)

    def arm_expiry(self, live: LiveExecution) -> None:
        """Arm the execution's own deadline (``expires_at``), if it has one: past it
        the execution is cancelled as ``failed`` (DeadlineExceededError)."""
        expires_at = live.record.expires_at
        if expires_at is None or live.expiry is not None:
            return
        delay = max(0.0, (expires_at - self.now()).total_seconds())

        def expire() -> None:
            live.expiry = None
            if self.live.get(live.execution_id) is not live or live.record.is_finished:
                return
            signal = SignalRecord(
                signal_id=f"deadline:{live.execution_id}",
                execution_id=live.execution_id,
                kind=SignalKind.CANCEL,
                created_at=self.now(),
                payload={
                    "reason": f"execution {live.execution_id} ran past its deadline "
                    f"({expires_at.isoformat()})",
                    "status": "failed",
                    "error_type": "DeadlineExceededError",
                },
                sender="engine",
            )
            self.cancel(live, signal)

        live.expiry = self.rt.dispatcher.call_later(delay, expire)

    def commit_final(self, live: LiveExecution, state: str) -> None:
        """Reached a final state: commit it, tell the parent, settle the waiters."""
        live.replay = None
        try:
            context = self.encode(live)
        except ContextSerializationError as exc:
            self.commit_failed(live, exc)
            return
        status = live.reg.facts.final_status.get(state, ExecutionStatus.COMPLETED)
        record = self.next_record(
            live,
            state=state,
            point=DurablePoint.FINAL,
            point_revision=live.record.revision + 1,
            status=status,
            resume_event=None,
            context=context,
            pending_effects=(),
            deadline_at=None,
            recovery=None,
            resolution=None,
        )
        self.finish(live, "@final", record)

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
        record = self.next_record(
            live,
            state=live.state,
            point=DurablePoint.FINAL,
            status=ExecutionStatus.FAILED,
            resume_event=None,
            context=context,
            pending_effects=(),
            deadline_at=None,
            error=info,
        )
        log.warning("execution %s failed: %s", live.execution_id, info.render())
        self.finish(live, "@final", record)

    def finish(self, live: LiveExecution, barrier: str, record: ExecutionRecord) -> None:
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
                if parent is None:
                    continue
                if seqs and seqs[i] > 0:  # the signal as the store wrote it: no read
                    self.add_signals(parent, [attrs.evolve(signal, seq=seqs[i])])
                else:  # proved by a read-back (or deduplicated): read the inbox
                    self.rt.refresh_signals(parent)

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
        self.forget(live)
        result = ExecutionResult.from_record(record, live.ctx)
        for task in live.waiters:
            task.complete(result)
        live.waiters.clear()
        if live.pending:
            dropped = [s.seq for s in live.pending]
            live.pending.clear()
            self.rt.drop_signals(live, dropped, f"dropped: finished in {record.state}")

    # ------------------------------------------------------------------ parking

    def park(self, live: LiveExecution, session: Session, info: RecoveryInfo) -> None:
        """Stop the session and commit ``recovery_required`` (the durable context and
        replay origin are kept as they were)."""
        live.parked = info
        self.halt(live, "park")
        live.halting = None

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
                detected_at=self.now(),
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
        record = self.next_record(
            live, status=ExecutionStatus.RECOVERY_REQUIRED, recovery=info, resolution=None
        )

        def committed() -> None:
            log.warning("execution %s needs an operator: %s", live.execution_id, info.reason)
            self.emit(DurableEventKind.RECOVERY_REQUIRED, live, record, reason=info.reason)
            self.rt.refresh_signals(live)

        self.engine_commit(live, "@recovery", record, on_committed=committed)

    def apply_resolution(self, live: LiveExecution, signal: SignalRecord) -> None:
        """Apply an operator's resolution signal to a parked execution: commit it,
        then replay from the last durable point with the answer (or finish the
        execution ``failed`` when the subject is the execution itself)."""
        record = live.record
        info = record.recovery
        payload = signal.payload if isinstance(signal.payload, dict) else {}
        problem = resolution_problem(record, signal)
        if problem is not None or info is None:
            self.rt.drop_signals(live, [signal.seq], f"rejected: {problem or 'nothing to resolve'}")
            return
        outcome = ResolutionOutcome(payload["outcome"])
        if info.subject is None:
            failed = self.next_record(
                live,
                point=DurablePoint.FINAL,
                status=ExecutionStatus.FAILED,
                resume_event=None,
                recovery=None,
                pending_effects=(),
                error=ErrorInfo("ResolvedFailed", str(payload.get("error") or info.reason)),
            )
            live.delivered = [signal.seq]
            self.finish(live, "@resolution", failed)
            return
        resolution = ResolutionInfo(
            outcome=outcome,
            subject=info.subject,
            resolved_at=self.now(),
            signal_id=signal.signal_id,
            result=payload.get("result"),
            error=payload.get("error"),
        )
        resumed = self.next_record(
            live, status=ExecutionStatus.RUNNING, recovery=None, resolution=resolution
        )

        def committed() -> None:
            self.install(live, resumed, list(live.pending), fresh_resolution=True)

        self.engine_commit(
            live, "@resolution", resumed, consume=(signal.seq,), on_committed=committed
        )

    # ------------------------------------------------------------------ cancel

    def cancel_instead(self, live: LiveExecution, barrier: str) -> None:
        """The store refused the commit ``barrier`` that would have ended the execution
        because a cancel request waits in its inbox (recorded before that end): read
        the inbox and apply the cancel, so the execution ends cancelled as its caller
        was told (``docs/semantics.md``, "Cancel"). Should the request be gone by then,
        recover the execution from the store as after any refused commit."""

        def arrived(signals: list[SignalRecord] | None) -> None:
            if self.live.get(live.execution_id) is not live or live.record.is_finished:
                return
            if signals and any(s.kind is SignalKind.CANCEL for s in signals):
                log.info(
                    "execution %s: a cancel request came before its end (%s); cancelling",
                    live.execution_id,
                    barrier,
                )
                live.cancel_seq = None  # the refused end was not this cancel: apply it
                self.add_signals(live, signals)
                return
            self.recover_from_store(live, f"commit {barrier} refused for a cancel not found")

        self.rt.refresh_signals(live, on_read=arrived)

    def cancel(self, live: LiveExecution, signal: SignalRecord) -> None:
        """Cancel: stop the session at once (results of work in flight become stale),
        cancel its active children, and once nothing of it runs any more and its
        children have finished, commit it finished — ``cancelled``, or ``failed``
        when the request says so (a deadline, a listener failure) — with the
        request's error."""
        if live.cancel_seq is not None:  # being cancelled: once is enough
            return
        live.cancel_seq = signal.seq
        if live.timer is not None:
            live.timer.cancel()
            live.timer = None
        if live.session_id is not None:
            self.halt(live, "cancel")
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
        for child in list(self.live.values()):
            if child.record.parent_execution_id == live.execution_id and child is not live:
                here.add(child.execution_id)
                self.cancel(child, attrs.evolve(signal, execution_id=child.execution_id, seq=0))
        # children another worker runs (it took them over, or claimed them) hear it
        # through their inbox — before this execution's @cancel commit consumes its own
        # request, so a crash in between cancels it, and them, again at recovery
        cascade = self.rt.cancel_children_elsewhere(live.execution_id, payload, here)

        def commit() -> None:
            if self.live.get(live.execution_id) is not live:
                return
            if live.committing:  # decide after that commit
                self.rt.dispatcher.call_later(0.01, commit)
                return
            children = [
                child
                for child in list(self.live.values())
                if child.record.parent_execution_id == live.execution_id and child is not live
            ]
            for child in children:
                if child.cancel_seq is None:  # started by the commit that was in flight
                    self.cancel(child, attrs.evolve(signal, execution_id=child.execution_id, seq=0))
            if children:  # once they have finished
                self.rt.dispatcher.call_later(0.01, commit)
                return
            record = self.next_record(
                live,
                point=DurablePoint.FINAL,
                point_revision=live.record.revision + 1,
                status=status,
                state=live.state,
                resume_event=None,
                pending_effects=(),
                deadline_at=None,
                recovery=None,
                resolution=None,
                error=error,
            )
            started = live.effect_in_flight
            if started is not None and started.kind is not EffectKind.PURE:
                # an effect started since the last commit: the cancel drops its result,
                # so the record says it ran (or may have), or a charge would be hidden
                known = live.effect_outcome or "it did not report back: it may or may not have run"
                record = attrs.evolve(
                    record,
                    error=ErrorInfo(
                        record.error.type if record.error else "Cancelled",
                        f"{record.error.message if record.error else 'cancelled'}; the "
                        f"{started.kind.value} effect {started.effect} (idempotency key "
                        f"{started.key}, attempt {started.attempt}) had started before the "
                        f"cancel: {known}; its result was not applied",
                    ),
                )
            taken = [seq for seq in live.delivered if seq != signal.seq]
            if taken:  # delivered, never committed: closed, not left pending for ever
                self.rt.drop_signals(live, taken, "dropped: the execution was cancelled")
            live.delivered = [signal.seq] if signal.seq else []
            self.finish(live, "@cancel", record)

        # commit once nothing of it runs here and the requests elsewhere are written
        waiting_for = [2]

        def one_done() -> None:
            waiting_for[0] -= 1
            if waiting_for[0] == 0:
                commit()

        self.rt.dispatcher.when_quiescent(live.execution_id, one_done)
        cascade.add_done_callback(lambda _: self.post(one_done))

    # ------------------------------------------------------------------ recovery

    def recover_from_store(self, live: LiveExecution, why: str) -> None:
        """Forget the live copy and recover the execution from the store, as a
        restart would (retrying the read with backoff)."""
        if live.session_id is not None:
            self.halt(live, "superseded")
        live.replay = None
        live.parked = None
        live.delivered.clear()
        live.ctx = None
        if live.timer is not None:
            live.timer.cancel()
            live.timer = None
        self.rt.readback(live, why)

    def close_refused(self, live: LiveExecution, error: BaseException) -> None:
        """The store refused to close signals of ``live`` under its fence (``error``,
        a LeaseLostError): this copy may be stale — another worker may own the
        execution, whose signals it took for stale or finished ones. Recover it from
        the store as after a refused commit (:meth:`recover_from_store`: the copy is
        let go when the store names another owner). Loop thread."""
        if self.live.get(live.execution_id) is not live:
            return  # settled or let go already: nothing live to drop
        if live.committing:
            return  # the commit in flight is fenced too: its outcome decides
        log.warning(
            "execution %s: closing its signals was refused (%s); recovering it from the store",
            live.execution_id,
            error,
        )
        self.recover_from_store(live, "closing signals refused")

    def reinstall(
        self,
        live: LiveExecution,
        record: ExecutionRecord,
        owner: tuple[str | None, int],
        signals: list[SignalRecord],
    ) -> None:
        """Install what the store holds for an execution this runtime claimed, after a
        commit of it whose outcome was not proven. When that commit was written after all
        (the record is past the last one known here), the listeners are told what it
        did — finished, waiting, parked — as its outcome would have told them."""
        worker, token = owner
        if worker != live.fence.worker_id or token != live.fence.token:
            self.release(
                live,
                LeaseLostError(
                    f"execution {live.execution_id} is now owned by worker {worker}; this "
                    "runtime dropped it",
                    execution_id=live.execution_id,
                    owner_id=worker,
                ),
            )
            return
        if record.revision > live.record.revision:
            if record.is_finished:
                self.emit(DurableEventKind.FINISHED, live, record, status=record.status.value)
            elif record.status is ExecutionStatus.WAITING:
                self.emit(DurableEventKind.WAITING, live, record, state=record.state)
            elif record.status is ExecutionStatus.RECOVERY_REQUIRED and record.recovery:
                reason = record.recovery.reason
                self.emit(DurableEventKind.RECOVERY_REQUIRED, live, record, reason=reason)
        self.install(live, record, signals)

    def forget(self, live: LiveExecution) -> None:
        """Remove ``live`` from :attr:`live` — only that copy: a newer one installed
        under a later claim of the same execution stays."""
        if self.live.get(live.execution_id) is live:
            del self.live[live.execution_id]

    def release(self, live: LiveExecution, error: BaseException) -> None:
        """Drop an execution this runtime no longer owns; its waiters fail."""
        self.forget(live)
        if live.timer is not None:
            live.timer.cancel()
        if live.expiry is not None:
            live.expiry.cancel()
            live.expiry = None
        self.emit(DurableEventKind.RELEASED, live, reason=str(error))
        for task in live.waiters:
            task.fail(error)
        live.waiters.clear()

    def install(
        self,
        live: LiveExecution,
        record: ExecutionRecord,
        signals: list[SignalRecord],
        *,
        fresh_resolution: bool = False,
    ) -> None:
        """Make ``record`` (just read from the store, or just committed with a
        resolution: ``fresh_resolution``) the live execution and resume it per
        ``docs/semantics.md`` "Recovery" (loop thread)."""
        self.live[live.execution_id] = live
        facts = live.reg.facts
        renames = facts.rename_for(record.spec_version, record.spec_sha256)
        live.record = record
        live.ctx = None
        live.pending = []
        live.delivered = []
        live.parked = None
        live.replay = None
        live.cancel_seq = None
        if record.is_finished:
            self.settle(live, record)
            return
        if renames is None:
            self.park_record(
                live,
                f"spec_changed: the execution started under {record.machine} spec version "
                f"{record.spec_version} (sha256 {record.spec_sha256[:12]}...), this runtime runs "
                f"version {facts.table.version} and declares no migration for it",
            )
            return
        if record.spec_sha256 != facts.table.spec_sha256:
            # a migration covers it (with or without renames): from its next commit on
            # it is pinned to this spec, so a worker of the older spec no longer claims
            # it (docs/scale-out.md, "Rolling upgrades")
            record = attrs.evolve(
                record,
                state=renames.get(record.state, record.state),
                spec_version=facts.table.version,
                spec_sha256=facts.table.spec_sha256,
            )
            live.record = record
        live.state = record.state
        try:
            self.context(live)
        except ContextSerializationError as exc:
            self.park_record(live, f"context_unreadable: {exc}")
            return
        for signal in signals:
            if signal.consumed_revision is None:
                live.pending.append(signal)
        self.arm_expiry(live)
        if any(s.kind is SignalKind.CANCEL for s in live.pending):
            # a cancel recorded before this point (while a resolution was committed, a
            # @cancel commit failed, the owner died) wins: nothing resumes first
            self.react(live)
            return
        if record.status is ExecutionStatus.WAITING:
            self.arm_timer(live)
            self.react(live)
            return
        if record.status is ExecutionStatus.RECOVERY_REQUIRED:
            self.react(live)
            return
        live.replay = Replay(record.resolution, fresh=fresh_resolution)
        if record.point is DurablePoint.START:
            self.start_session(live)
        elif record.point is DurablePoint.BARRIER and record.resume_event is not None:
            outcome = BarrierOutcome(COMMITTED, record.revision)
            self.start_session(
                live, at_state=record.state, event=record.resume_event, payload=outcome
            )
        elif record.point is DurablePoint.EFFECT and record.announced is not None:
            # the announced effect may have started: its work is started again from
            # the stored context and input, and offload() decides by its kind
            self.start_session(
                live,
                at_state=record.state,
                payload=record.effect_payload,
                rework=True,
                rework_row=record.effect_row,
            )
            self.schedule_delivery(live)  # its state may take a pending signal
        else:
            self.park_record(
                live, f"not_resumable: point {record.point.value} with status {record.status.value}"
            )

    def park_record(self, live: LiveExecution, reason: str) -> None:
        """Park an execution that cannot be resumed at all (the operator may only end
        it): ``recovery_required`` with no effect as the subject."""
        if (
            live.record.status is ExecutionStatus.RECOVERY_REQUIRED
            and live.record.recovery is not None
        ):
            self.react(live)
            return
        live.parked = RecoveryInfo(reason, None, EXECUTION_OUTCOMES, self.now())
        self.commit_parked(live)

    def fences(self) -> dict[str, Fence]:
        """The fence of every live execution (for the ownership check)."""
        return {eid: live.fence for eid, live in self.live.items()}

    def check_ownership(
        self, stored: dict[str, tuple[str | None, int, bool]], asked: dict[str, Fence]
    ) -> None:
        """Drop every live execution that the store says another worker now owns
        (its fencing token moved on while this worker was paused or cut off)."""
        for eid, fence in asked.items():
            live = self.live.get(eid)
            if live is None or live.fence != fence or eid not in stored:
                continue
            owner, token, _active = stored[eid]
            if owner != fence.worker_id or token != fence.token:
                if live.session_id is not None:
                    self.halt(live, "superseded")
                self.release(
                    live,
                    LeaseLostError(
                        f"execution {eid} is now owned by worker {owner} (fence {token}); this "
                        "worker's lease passed and it let the execution go",
                        execution_id=eid,
                        owner_id=owner,
                    ),
                )

    # ------------------------------------------------------------------ shutdown

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
        if live.delivery_scheduled or live.halting is not None:
            return True
        dispatcher = self.rt.dispatcher
        if dispatcher.in_flight(live.execution_id):
            return True
        state = dispatcher.session_state(sid)
        node = live.reg.binding.nodes.get(state) if state is not None else None
        if node is None or node.kind in (AUTO, WAIT, FINAL):
            return True
        if node.offload is not None or node.barrier is not None:
            return True  # its work's outcome is on its way
        handled = live.reg.facts.handled.get(state, frozenset())
        return any(
            s.kind in (SignalKind.EVENT, SignalKind.CHILD, SignalKind.CANCEL)
            and (s.kind is SignalKind.CANCEL or s.event in handled)
            for s in live.pending
        )

    def let_go_all(self, error: BaseException) -> None:
        """The store refuses every write (newer code migrated its schema): stop every
        live execution here without a commit — its session halted, its timers
        cancelled, its waiters failed with ``error`` — and take nothing on again
        (loop thread). The executions live on in the store at their last commit; a
        worker that can write resumes them by the rules of recovery."""
        self.closing = True
        for live in list(self.live.values()):
            if live.session_id is not None:
                self.halt(live, "superseded")
            self.release(live, error)

    def detach_all(self) -> None:
        """The runtime is closing: fail every waiter with RuntimeClosedError (the
        executions live on in the store)."""
        for live in list(self.live.values()):
            error = RuntimeClosedError(
                f"the runtime closed before execution {live.execution_id} finished; it lives on "
                f"in the store (status {live.record.status.value}, state {live.record.state}); "
                "start a runtime with its machine and call recover() (or phronomy-fsm recover) "
                "to continue it",
                execution_id=live.execution_id,
                status=live.record.status.value,
            )
            for task in live.waiters:
                task.fail(error)
            live.waiters.clear()
            if live.timer is not None:
                live.timer.cancel()
            if live.expiry is not None:
                live.expiry.cancel()
        self.live.clear()


__all__ = ["Engine", "LiveExecution", "Registration", "Replay"]
