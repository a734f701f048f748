"""The dispatcher: one loop thread that owns every live session.

The rules are in ``docs/runtime.md``.

- A FIFO inbox carries session events, control messages (functions to run on the loop)
  and results coming back from workers; timers fire at the top of each turn. One item is
  handled to completion before the next.
- A session runs a :class:`~phronomy_fsm.runtime.binding.MachineBinding`. For an event,
  the candidate rows of the current state are tried in table order; the first whose
  guard passes is taken: its actions run, the state changes, the target's entry actions
  run, its offload or barrier starts, its timer is armed, and then by kind: an ``auto``
  state posts ``state_completed`` to itself *through the queue*; a ``wait`` state halts
  the session; a ``final`` state finishes it. A declared event whose guards all fail is
  a no-op; an event with no row in the current state ends the session with
  :class:`~phronomy_fsm.errors.UndeclaredEventError` unless the event is declared
  ``unhandled: ignore``. Exceeding the step limit ends it with
  :class:`~phronomy_fsm.errors.StepLimitError`.
- Offloaded work and barrier commits run off the loop; their results come back as
  messages carrying the :class:`Authority` they started under (session incarnation,
  revision, state, state-entry serial, operation id) and are applied only if all still
  match; otherwise they are dropped, logged and counted (``docs/runtime.md``,
  "Stale results").
- A session may start at any state and fire one event directly (resume start,
  ``docs/runtime.md``, "Sessions"): approval resume and recovery use it. Every resume is a new
  incarnation with a new session id.

Concurrency: :meth:`Dispatcher.post`, :meth:`Dispatcher.start_session`,
:meth:`Dispatcher.call_soon` and :meth:`Dispatcher.stop` may be called from any thread.
Everything else that reads or changes live state runs on the loop thread and asserts it
(:class:`~phronomy_fsm.errors.WrongThreadError`). Hooks run on the loop thread.
"""

from __future__ import annotations

import concurrent.futures as cf
import itertools
import logging
from collections.abc import Callable
from typing import Any

from phronomy_fsm.errors import (
    HOOK_ERRORS,
    BackpressureError,
    DispatcherStoppedError,
    DispatchInputError,
    HookError,
    SessionFaultError,
    StepLimitError,
    UndeclaredEventError,
    UnknownSessionError,
)
from phronomy_fsm.runtime.binding import (
    AUTO,
    FINAL,
    WAIT,
    BarrierWorkSpec,
    MachineBinding,
    Node,
    OffloadWorkSpec,
    Row,
)
from phronomy_fsm.runtime.cancellation import CancellationToken
from phronomy_fsm.runtime.clock import SYSTEM_CLOCK, Clock
from phronomy_fsm.runtime.faults import FaultPlan
from phronomy_fsm.runtime.inputs import check_event, check_session_id, check_start, shown
from phronomy_fsm.runtime.loop import DRAINING, FAILED, EventLoop
from phronomy_fsm.runtime.offload import OffloadPool, Operation
from phronomy_fsm.runtime.session import (
    PARKED,
    Authority,
    DispatcherStats,
    EffectStart,
    OffloadContext,
    Session,
    SessionDriver,
    SessionResult,
    StepRecord,
)
from phronomy_fsm.runtime.tasks import Task
from phronomy_fsm.table import (
    BARRIER_OUTCOMES,
    OUTCOME_UNKNOWN,
    STATE_COMPLETED,
    BarrierOutcome,
    PendingBarrier,
    Settled,
)

log = logging.getLogger("phronomy_fsm.runtime")

_SC = STATE_COMPLETED

FINISHED = "finished"
HALTED = "halted"


class Dispatcher(EventLoop):
    """The single-threaded dispatcher loop (see the module docstring).

    Args:
        pool: the offload pool for offload hooks and callable barrier work; one with
            default bounds is created (and owned) if omitted.
        clock: the clock for timers and step records.
        name: the loop thread's name.
        faults: crash points to honour (tests and the crash harness; see
            :mod:`phronomy_fsm.runtime.faults`).

    Use :meth:`start` to run the loop on its own thread, or :meth:`run_until_idle` to
    drive it from the calling thread (tests, benchmarks).
    """

    def __init__(
        self,
        *,
        pool: OffloadPool | None = None,
        clock: Clock = SYSTEM_CLOCK,
        name: str = "phronomy-dispatcher",
        faults: FaultPlan | None = None,
    ) -> None:
        super().__init__(clock=clock, name=name)
        self.faults = faults
        self._own_pool = pool is None
        self.pool = pool if pool is not None else OffloadPool(clock=clock)
        self._sessions: dict[int, Session] = {}
        self._admitted: set[int] = set()
        self._ids = itertools.count(1)
        self._op_ids = itertools.count(1)
        self._observers: list[Callable[[StepRecord], None]] = []
        #: (machine, hook kind, name) of hooks that returned the wrong type (logged once)
        self._misreturned: set[tuple[str, str, str | None]] = set()
        self._in_flight: dict[Any, int] = {}
        self._quiescence: dict[Any, list[Callable[[], object]]] = {}
        self._wait_for_sessions = True
        self.stats = DispatcherStats()

    # ------------------------------------------------------------- loop hooks

    def _idle(self) -> bool:
        if self._inbox or self._work_in_flight():
            return False
        return not self._sessions or not self._wait_for_sessions

    def _work_in_flight(self) -> bool:
        return any(self._in_flight.values())

    def _abort(self, error: BaseException) -> None:
        for s in list(self._sessions.values()):
            self._end(s, None, error)
        self._inbox.clear()

    def stop(self, *, timeout_seconds: float | None = 10.0, wait_for_sessions: bool = True) -> bool:
        """Drain: refuse new sessions, let results and events flow, stop when idle.

        Idle means an empty inbox, no offloaded work or barrier in flight and — when
        ``wait_for_sessions`` — no live session. With ``wait_for_sessions=False``,
        sessions parked waiting for outside events do not hold the loop: they end with
        :class:`DispatcherStoppedError` once everything in flight has come back.

        Returns True if the loop stopped idle within ``timeout_seconds``; otherwise it
        is stopped anyway and every remaining session fails with
        :class:`DispatcherStoppedError` (returns False). The owned pool is shut down.
        """
        self._wait_for_sessions = wait_for_sessions
        clean = super().stop(timeout_seconds=timeout_seconds)
        if self._own_pool:
            self.pool.shutdown(wait=False)
        return clean

    # ------------------------------------------------------------ public API

    def add_observer(self, observer: Callable[[StepRecord], None]) -> None:
        """Call ``observer(record)`` on the loop thread after every transition."""
        self._observers.append(observer)

    def start_session(
        self,
        binding: MachineBinding,
        context: Any,
        *,
        at_state: str | None = None,
        event: str | None = None,
        payload: Any = None,
        group: Any = None,
        revision: int | None = None,
        on_done: Callable[[SessionResult | None, BaseException | None], None] | None = None,
        step_limit: int | None = None,
        driver: SessionDriver | None = None,
        rework: bool = False,
        rework_row: int | None = None,
    ) -> int:
        """Create a session and queue its start; return its id (incarnation). Thread-safe.

        Args:
            binding: the machine.
            context: the application object guards and actions receive as ``ctx``.
            at_state: resume start: begin in this state without running its entry work,
                then fire ``event`` with ``payload`` (``docs/runtime.md``, "Sessions"). An
                auto state without ``event`` posts ``state_completed``; an external state
                without ``event`` just waits there.
            group: quiescence group (e.g. the execution id): offloads of every session in
                the group are counted together (:meth:`when_quiescent`).
            revision: the durable revision the session starts at (authority checks).
            on_done: called on the loop thread as ``on_done(result, None)`` when the
                session finishes or halts, or ``on_done(None, error)`` when it fails.
            step_limit: overrides the binding's step limit.
            driver: the durable runtime's hooks into this session (barriers, effects,
                steps); ``None`` for a plain in-memory session.
            rework: with ``at_state`` and no ``event``: start the state's work again —
                its offload (or, with ``rework_row``, the offload of the transition with
                that index), prepared with ``payload`` — without its entry actions, as
                if the state had just been entered (a durable execution recovered at an
                announced effect: ``docs/semantics.md``, "Effects").
            rework_row: see ``rework``.

        Raises:
            DispatcherStoppedError: the dispatcher is draining, stopped or failed.
            DispatchInputError: ``at_state`` or ``event`` is not a ``str`` naming a
                state or event of the machine, ``group`` cannot be hashed, or
                ``step_limit`` is not a positive ``int`` (also a ``ValueError``).
                Nothing was queued.
        """
        self._check_open()
        if self._state in (DRAINING, FAILED):
            raise DispatcherStoppedError(f"{self.name} is {self._state} and admits no new sessions")
        check_start(binding, at_state, event, group, step_limit)
        if rework and (at_state is None or event is not None):
            raise DispatchInputError("rework needs at_state and no event", machine=binding.machine)
        sid = next(self._ids)
        session = Session(
            sid, binding, context, group, on_done, revision, step_limit or binding.step_limit
        )
        session.driver = driver
        self._admitted.add(sid)
        work = (rework, rework_row) if rework else None
        self._post((None, self._begin, (session, at_state, event, payload, work)))
        return sid

    def start_session_task(
        self, binding: MachineBinding, context: Any, **kwargs: Any
    ) -> tuple[int, Task[SessionResult]]:
        """Like :meth:`start_session`, returning also a :class:`Task` that settles with
        the :class:`SessionResult` (or the session's error)."""
        task: Task[SessionResult] = Task(f"{binding.machine} session")
        user_done = kwargs.pop("on_done", None)

        def done(result: SessionResult | None, error: BaseException | None) -> None:
            if user_done is not None:
                user_done(result, error)
            if error is None:
                task.complete(result)  # type: ignore[arg-type]
            else:
                task.fail(error)

        sid = self.start_session(binding, context, on_done=done, **kwargs)
        task.name = f"{binding.machine} session {sid}"
        return sid, task

    def post(self, session_id: int, event: str, payload: Any = None) -> bool:
        """Queue ``event`` for a session; return False (and queue nothing) if the session
        is no longer admitted (finished, halted, failed or unknown). Thread-safe.

        ``state_completed`` is the engine's own event: posted from outside it is
        dropped as stale at once (counted in ``stats.dropped_stale``; returns True as
        for any other accepted event). The payload is passed to the session's hooks as
        it is; an event the current state has no transition for ends that session
        (:class:`~phronomy_fsm.errors.UndeclaredEventError`), never the loop.

        Raises:
            DispatchInputError: ``session_id`` is not an ``int`` or ``event`` is not
                exactly a ``str``; nothing was queued.
        """
        if type(session_id) is not int or type(event) is not str:  # checks inlined: hot
            check_session_id(session_id)
            check_event(event)
        if session_id in self._admitted:
            if event == _SC:
                self.stats.dropped_stale += 1
                return True
            self._append((session_id, event, payload))
            if self._sleeping:
                self._wake()
            return True
        self.stats.dropped_unknown_session += 1
        return False

    def deliver_now(self, session_id: int, event: str, payload: Any = None) -> bool:
        """Apply ``event`` to a live session at once, synchronously: its transition,
        the target's entry actions and the start of its work have happened when this
        returns. For an owner that applies events only *between* steps and must know
        that one was applied before it decides the next (the durable engine's signals:
        ``docs/semantics.md``, "Signals"); never call it from inside a hook or a
        driver's step. Loop thread only. Returns False (and applies nothing) when the
        session is no longer live.

        Raises:
            WrongThreadError: called off the loop thread.
        """
        self._assert_loop()
        s = self._sessions.get(session_id)
        if s is None or session_id not in self._admitted:
            return False
        try:
            self._deliver(s, event, payload)
        except BaseException as exc:  # noqa: BLE001 - one event must not end the loop
            self._item_failed(session_id, event, payload, exc)
        return True

    def post_authorized(self, authority: Authority, event: str, payload: Any = None) -> None:
        """Queue ``event`` to be applied only if ``authority`` still holds (same
        incarnation, revision, state entry and operation). Thread-safe.

        Raises:
            DispatchInputError: ``event`` is not exactly a ``str``; nothing was queued.
        """
        check_event(event)
        self._post((None, self._apply_authorized, (authority, event, payload)))

    def discard_session(self, session_id: int) -> bool:
        """End a live (or admitted, not yet begun) session at once, running nothing:
        no hook, no ``on_done``; the authority of its in-flight work is revoked and
        events still queued for it are dropped. For an owner that replaces a session
        it no longer needs (the agent runtime re-seats an admission slot after reading
        the durable record back). Loop thread only. Returns False when the session is
        unknown or already ended."""
        self._assert_loop()
        s = self._sessions.pop(session_id, None)
        admitted = session_id in self._admitted
        self._admitted.discard(session_id)
        if s is None:
            return admitted
        s.serial += 1
        if s.token is not None:
            s.cancel_work("the session was detached")
        self.stats.sessions_halted += 1
        return True

    # ---- loop-thread queries -------------------------------------------------

    def session_serial(self, session_id: int) -> int | None:
        """The entry serial of a live session (it rises each time the session enters a
        state), or None when it is not live. Any thread: a best-effort read without the
        loop's ordering (``WorkContext.is_stale`` uses it as a hint)."""
        s = self._sessions.get(session_id)
        return None if s is None else s.serial

    def session_state(self, session_id: int) -> str | None:
        """The current state of a live session, or None. Loop thread only."""
        self._assert_loop()
        s = self._sessions.get(session_id)
        return None if s is None else s.node.name

    def session(self, session_id: int) -> Session:
        """The live session object (loop thread only). Raises UnknownSessionError."""
        self._assert_loop()
        s = self._sessions.get(session_id)
        if s is None:
            raise UnknownSessionError(f"no live session {session_id}", session_id=session_id)
        return s

    def authority(self, session_id: int) -> Authority:
        """The authority a result started now must match (loop thread only)."""
        s = self.session(session_id)
        return Authority(s.id, s.revision, s.node.name, s.serial, s.op)

    def live_sessions(self) -> int:
        """How many sessions are live (any thread; approximate off-loop)."""
        return len(self._sessions)

    def in_flight(self, group: Any) -> int:
        """Offloads and barrier commits of ``group`` that have not physically finished."""
        return self._in_flight.get(group, 0)

    def when_quiescent(self, group: Any, callback: Callable[[], object]) -> None:
        """Call ``callback()`` on the loop once ``group`` has no physically running work
        (immediately if it has none). Loop thread only (``docs/runtime.md``, "Offloads and the pool")."""
        self._assert_loop()
        if not self._in_flight.get(group):
            callback()
        else:
            self._quiescence.setdefault(group, []).append(callback)

    def halt(self, session_id: int) -> bool:
        """End a live session as ``halted`` where it stands (its ``on_done`` gets a
        :class:`SessionResult` with status ``halted`` and its current state); the
        authority of its work in flight is revoked. Loop thread only. Returns False
        when no such session is live."""
        self._assert_loop()
        s = self._sessions.get(session_id)
        if s is None:
            return False
        self._end(s, HALTED, None)
        return True

    def _crash_point(self, point: str) -> None:
        if self.faults is not None:
            self.faults.hit(point)

    # ----------------------------------------------------------------- loop

    def _process(self, limit: int) -> int:
        """Handle up to ``limit`` inbox items; return how many were handled.

        The common case — one unguarded row with at most one action, no transition
        work, into a plain external or simple auto state — is inlined here (bindings
        store exactly those rows as bare :class:`Row` objects); every other case goes
        through :meth:`_deliver` with identical semantics. With observers registered
        every event takes the general path, so each step is reported."""
        fast = not self._observers
        inbox = self._inbox
        pop = inbox.popleft
        append = inbox.append
        get = self._sessions.get
        handled = 0
        for handled in range(1, limit + 1):
            try:
                sid, event, payload = pop()
            except IndexError:
                return handled - 1
            try:
                if sid is None:
                    event(*payload)
                    continue
                s = get(sid)
                if s is None:
                    self.stats.dropped_unknown_session += 1
                    continue
                if event is _SC:
                    if payload != s.serial:
                        self.stats.dropped_stale += 1
                        continue
                    payload = None
                row = s.node.get(event)
                if row.__class__ is not Row or not fast:
                    self._deliver(s, event, payload)
                    continue
                steps = s.steps = s.steps + 1
                if steps > s.limit:
                    self._step_limit(s)
                    continue
                action = row.action  # type: ignore[union-attr]
                if action is not None:
                    try:
                        value = action(s.ctx, payload)
                        if value is not None:
                            self._returned(s, "action", row.action_names[0], value)  # type: ignore[union-attr]
                    except HOOK_ERRORS as exc:
                        self._hook_failed(
                            s, exc, f"the action of transition {row.index} ({row.action_names[0]})"
                        )  # type: ignore[union-attr]
                        continue
                target: Node = row.target  # type: ignore[union-attr,assignment]
                s.node = target
                serial = s.serial = s.serial + 1
                mode = target.mode
                if mode:
                    if mode == 1:
                        append((sid, _SC, serial))
                    else:
                        self._enter(s, target, row, payload)  # type: ignore[arg-type]
            except BaseException as exc:  # noqa: BLE001 - one item must not end the loop
                self._item_failed(sid, event, payload, exc)
        return handled

    def _item_failed(self, sid: Any, event: Any, payload: Any, exc: BaseException) -> None:
        """An inbox item raised outside every hook boundary (hooks have their own): end
         the session it concerns with :class:`SessionFaultError` (``__cause__`` is
         ``exc``) so that one malformed item or engine defect ends at most that session
        . A control message that names no live session re-raises: the
         loop fails, and every waiter is told (:meth:`EventLoop.on_failure`)."""
        s: Session | None = None
        if sid is None:
            for arg in payload if isinstance(payload, tuple) else ():
                if isinstance(arg, Authority):
                    s = self._sessions.get(arg.session_id)
                    break
                if isinstance(arg, Session):
                    s = arg if self._sessions.get(arg.id) is arg else None
                    break
            if s is None:
                raise exc
        else:
            s = self._sessions.get(sid)
            if s is None:
                log.error("%s: item for ended session %s raised: %r", self.name, sid, exc)
                return
        log.error(
            "%s: session %s: an inbox item raised %r; ending the session", self.name, s.id, exc
        )
        error = SessionFaultError(
            f"session {s.id} of {s.binding.machine!r} (state {s.node.name!r}) could not handle "
            f"{shown(event)}: {type(exc).__name__}: {exc}",
            machine=s.binding.machine,
            state=s.node.name,
            session_id=s.id,
        )
        error.__cause__ = exc
        self._end(s, None, error)

    def _deliver(self, s: Session, event: str, payload: Any) -> None:
        cand = s.node.rows.get(event)
        if cand is None:
            if event in s.binding.ignored:
                self.stats.ignored += 1
                return
            if event in s.binding.events:
                why = (
                    f"event {event!r} arrived in state {s.node.name!r}, which declares no transition "
                    "for it (declare one, or mark the event 'unhandled: ignore')"
                )
            else:
                why = f"event {event!r} is not declared by the machine (declare it under 'events')"
            self._end(
                s,
                None,
                UndeclaredEventError(
                    f"machine {s.binding.machine!r}: {why}",
                    machine=s.binding.machine,
                    state=s.node.name,
                    event=event,
                    session_id=s.id,
                ),
            )
            return
        try:
            if cand.__class__ is Row:
                row = cand
            else:
                ctx = s.ctx
                for row in cand:  # type: ignore[union-attr]
                    guard = row.guard
                    if guard is None:
                        break
                    value = guard(ctx, payload)
                    if value.__class__ is not bool:
                        self._returned(s, "guard", row.guard_name, value)
                    if bool(value) is not row.negated:
                        break
                else:
                    self.stats.noops += 1
                    if s.node.kind == WAIT:
                        # resumed with an event it then did not take: it halts again as
                        # it rests there (docs/runtime.md "Sessions"), or it would sit
                        # in the wait live, taking no signal and firing no timer
                        self._end(s, HALTED, None)
                    return
        except HOOK_ERRORS as exc:
            self._hook_failed(s, exc, f"a guard of state {s.node.name!r} on {event!r}")
            return
        self._take(s, row, payload)

    def _take(self, s: Session, row: Row, payload: Any) -> None:
        steps = s.steps = s.steps + 1
        if steps > s.limit:
            self._step_limit(s)
            return
        if row.actions:
            ctx = s.ctx
            try:
                for i, action in enumerate(row.actions):
                    value = action(ctx, payload)
                    if value is not None:
                        self._returned(s, "action", row.action_names[i], value)
            except HOOK_ERRORS as exc:
                self._hook_failed(
                    s, exc, f"an action of transition {row.index} ({', '.join(row.action_names)})"
                )
                return
        source = s.node
        target = source if row.internal else row.target
        if not row.internal:
            s.node = target  # type: ignore[assignment]
            s.serial += 1
            if s.token is not None:
                s.cancel_work(f"the session left state {source.name}")
        driver = s.driver
        if driver is not None:
            try:
                driver.step(s, source.name, target.name)  # type: ignore[union-attr]
            except HOOK_ERRORS as exc:
                self._hook_failed(s, exc, "the durable runtime's step hook")
                return
            if s.id not in self._admitted:  # the driver halted it
                return
        if self._observers:
            self._observe(s, row, source.name, target.name)  # type: ignore[union-attr]
        on_transition = s.binding.on_transition
        if on_transition is not None:
            try:
                on_transition(s.ctx, source.name, target.name)  # type: ignore[union-attr]
            except HOOK_ERRORS:
                log.exception("%s: on_transition of %s raised", self.name, s.binding.machine)
        if row.internal:
            if source.kind == WAIT:
                # a session lives in a wait state only while it takes the event it was
                # resumed with; staying there, it halts again as on entering it (the
                # durable engine then commits the change: docs/runtime.md "Sessions")
                self._end(s, HALTED, None)
            return
        if target.mode == 0 and row.offload is None and row.barrier is None:  # type: ignore[union-attr]
            return
        self._enter(s, target, row, payload)  # type: ignore[arg-type]

    def _returned(self, s: Session, kind: str, name: str | None, value: Any) -> None:
        """A guard returned something other than a bool (it is still read as its truth
        value), or an action returned a value (ignored): log it once per hook and
        machine, naming the hook and the value (docs/runtime.md, "Sessions")."""
        key = (s.binding.machine, kind, name)
        if key in self._misreturned:
            return
        self._misreturned.add(key)
        if kind == "guard":
            log.warning(
                "%s: machine %r: guard %r returned %s %s, not a bool; its truth value is used "
                "(return True or False)",
                self.name,
                s.binding.machine,
                name,
                type(value).__name__,
                shown(value),
            )
        else:
            log.warning(
                "%s: machine %r: %s %r returned %s %s, which is ignored (an action changes "
                "the context and returns None)",
                self.name,
                s.binding.machine,
                kind,
                name,
                type(value).__name__,
                shown(value),
            )

    def _step_limit(self, s: Session) -> None:
        self._end(
            s,
            None,
            StepLimitError(
                f"session {s.id} of {s.binding.machine!r} exceeded its step limit of {s.limit} "
                f"(in state {s.node.name!r}); a loop without progress?",
                session_id=s.id,
                limit=s.limit,
            ),
        )

    def _enter(
        self, s: Session, node: Node, row: Row | None, payload: Any, *, entry: bool = True
    ) -> None:
        if entry and node.entry:
            ctx = s.ctx
            try:
                for i, action in enumerate(node.entry):
                    value = action(ctx, payload)
                    if value is not None:
                        self._returned(s, "entry action", node.entry_names[i], value)
            except HOOK_ERRORS as exc:
                self._hook_failed(
                    s,
                    exc,
                    f"an entry action of state {node.name!r} ({', '.join(node.entry_names)})",
                )
                return
        offload = (row.offload if row is not None else None) or node.offload
        barrier = (row.barrier if row is not None else None) or node.barrier
        if offload is not None:
            self._start_offload(s, offload, payload)
        elif barrier is not None:
            self._start_barrier(s, barrier, payload)
        if s.driver is not None and s.id not in self._admitted:
            return  # the durable runtime stopped the session while starting its work
        if node.timeout is not None:
            seconds, event = node.timeout
            serial = s.serial
            sid = s.id
            self._timers.schedule_at(
                self.clock.monotonic() + seconds, lambda: self._timer_fired(sid, serial, event)
            )
        kind = node.kind  # by value: a table read back from JSON has its own strings
        if kind == AUTO:
            self._inbox.append((s.id, _SC, s.serial))
        elif kind == FINAL:
            self._end(s, FINISHED, None)
        elif kind == WAIT:
            self._end(s, HALTED, None)

    def _timer_fired(self, sid: int, serial: int, event: str) -> None:
        s = self._sessions.get(sid)
        if s is None or s.serial != serial:
            return
        self._inbox.append((None, self._apply_timer, (sid, serial, event)))

    def _apply_timer(self, sid: int, serial: int, event: str) -> None:
        s = self._sessions.get(sid)
        if s is None or s.serial != serial:
            self.stats.dropped_stale += 1
            return
        self._deliver(s, event, None)

    def _observe(self, s: Session, row: Row, source: str, target: str) -> None:
        record = StepRecord(
            s.id,
            s.binding.machine,
            source,
            row.event,
            row.render_guard(),
            target,
            row.internal,
            row.index,
            s.steps,
            self.clock.monotonic(),
        )
        for observer in self._observers:
            try:
                observer(record)
            except HOOK_ERRORS:
                log.exception("%s: step observer raised", self.name)

    def _begin(
        self,
        s: Session,
        at_state: str | None,
        event: str | None,
        payload: Any,
        work: tuple[bool, int | None] | None = None,
    ) -> None:
        if s.id not in self._admitted:  # aborted before it began
            return
        self._sessions[s.id] = s
        self.stats.sessions_started += 1
        if at_state is None:
            s.serial = 1
            self._enter(s, s.node, None, None)
            return
        s.node = s.binding.nodes[at_state]
        s.serial = 1
        if work is not None:
            row = None if work[1] is None else _row_with_index(s.binding, work[1])
            self._enter(s, s.node, row, payload, entry=False)
            return
        if event is None:
            if s.node.kind == AUTO:
                self._inbox.append((s.id, _SC, s.serial))
        else:
            self._deliver(s, event, payload)

    def _end(self, s: Session, status: str | None, error: BaseException | None) -> None:
        self._sessions.pop(s.id, None)
        self._admitted.discard(s.id)
        s.serial += 1  # revoke the authority of anything still in flight
        if s.token is not None:
            s.cancel_work("the session ended")
        if error is not None:
            self.stats.sessions_failed += 1
        elif status == FINISHED:
            self.stats.sessions_finished += 1
        else:
            self.stats.sessions_halted += 1
        if s.on_done is None:
            if error is not None:
                log.warning(
                    "%s: session %s of %s failed: %s", self.name, s.id, s.binding.machine, error
                )
            return
        try:
            if error is None:
                s.on_done(
                    SessionResult(s.id, s.binding.machine, status or FINISHED, s.node.name, s.ctx),
                    None,
                )
            else:
                s.on_done(None, error)
        except HOOK_ERRORS:
            log.exception("%s: on_done of session %s raised", self.name, s.id)

    def _hook_failed(self, s: Session, exc: BaseException, where: str) -> None:
        error = HookError(
            f"{where} raised {type(exc).__name__}: {exc} (session {s.id} of {s.binding.machine!r}, "
            f"state {s.node.name!r})",
            machine=s.binding.machine,
            state=s.node.name,
            session_id=s.id,
        )
        error.__cause__ = exc
        self._end(s, None, error)

    # --------------------------------------------------------- offload and barriers

    def _count_in(self, group: Any) -> None:
        self._in_flight[group] = self._in_flight.get(group, 0) + 1

    def _physical_done(self, group: Any) -> None:
        left = self._in_flight.get(group, 0) - 1
        if left > 0:
            self._in_flight[group] = left
            return
        self._in_flight.pop(group, None)
        for callback in self._quiescence.pop(group, ()):
            try:
                callback()
            except HOOK_ERRORS:
                log.exception("%s: quiescence callback raised", self.name)

    def _start_offload(self, s: Session, spec: OffloadWorkSpec, payload: Any) -> None:
        op_id = next(self._op_ids)
        s.op = op_id
        authority = Authority(s.id, s.revision, s.node.name, s.serial, op_id)
        effect: EffectStart | None = None
        if s.driver is not None:
            try:
                decision = s.driver.offload(s, spec, payload)
            except HOOK_ERRORS as exc:
                self._hook_failed(s, exc, f"the durable runtime's effect hook ({spec.name})")
                return
            if decision is PARKED:
                return
            if type(decision) is Settled:
                event = spec.completed if decision.error is None else spec.failed
                value = decision.value if decision.error is None else decision.error
                self._inbox.append((None, self._apply_authorized, (authority, event, value)))
                return
            effect = decision
        try:
            work = spec.prepare(s.ctx, payload)
            if type(work) is Settled:
                if work.error is None:
                    self._inbox.append(
                        (None, self._apply_authorized, (authority, spec.completed, work.value))
                    )
                else:
                    self._inbox.append(
                        (None, self._apply_authorized, (authority, spec.failed, work.error))
                    )
                return
            if not callable(work):
                raise TypeError(
                    f"offload hook {spec.name!r} returned {type(work).__name__}, not a callable"
                )
            code = getattr(work, "__code__", None)
            if code is not None and code.co_argcount == 0 and not code.co_flags & _VARARGS:
                work = _without_context(work)  # ``work()`` is accepted as well as ``work(octx)``
            if self.faults is not None:
                work = _crash_after(work, f"offload:{spec.name}:after", self._crash_point)
        except HOOK_ERRORS as exc:
            self._inbox.append((None, self._apply_authorized, (authority, spec.failed, exc)))
            return
        group = s.group
        post = self._post
        returned = self._offload_returned
        token = None
        gate = None
        if s.driver is not None:  # a durable execution's work can be told to stop
            token = s.token = CancellationToken()
            if effect is not None:  # not pure: it starts only while the worker may run it
                gate = s.driver.may_start_effect
                work = s.driver.effect_work(work)
        try:
            op = self.pool.submit(
                work,
                OffloadContext(self, authority, effect, token),
                name=spec.name,
                on_full="raise",
                cancellation_token=token,
                gate=gate,
            )
        except BackpressureError as exc:
            self.stats.backpressure += 1
            self._inbox.append((None, self._apply_authorized, (authority, spec.failed, exc)))
            return
        self._count_in(group)
        # one message per operation: physical completion and, if the work ran, its result
        watcher = s.driver if effect is not None else None
        op.add_physical_callback(
            lambda op: post((None, returned, (group, authority, spec, op, watcher, effect)))
        )

    def _offload_returned(
        self,
        group: Any,
        authority: Authority,
        spec: OffloadWorkSpec,
        op: Operation,
        watcher: SessionDriver | None = None,
        effect: EffectStart | None = None,
    ) -> None:
        if op.returned is None:  # never ran (cancelled while queued): nothing to apply
            self._physical_done(group)
            return
        value, error = op.returned
        if watcher is not None and effect is not None:
            try:
                watcher.effect_done(spec.name, effect, value, error)
            except HOOK_ERRORS:
                log.exception("%s: the durable runtime's effect_done hook raised", self.name)
        # after effect_done: what waits for quiescence (a cancel's commit) knows how
        # the effect ended
        self._physical_done(group)
        if error is None:
            self._apply_authorized(authority, spec.completed, value)
        else:
            self._apply_authorized(authority, spec.failed, error)

    def _start_barrier(self, s: Session, spec: BarrierWorkSpec, payload: Any) -> None:
        op_id = next(self._op_ids)
        s.op = op_id
        authority = Authority(s.id, s.revision, s.node.name, s.serial, op_id)
        row = spec.row
        post = self._post
        apply = self._apply_barrier
        self._crash_point(f"barrier:{spec.name}:before")
        try:
            driver = s.driver
            work = (
                spec.prepare(s.ctx, payload) if driver is None else driver.barrier(s, spec, payload)
            )
        except HOOK_ERRORS as exc:
            self._inbox.append(
                (None, apply, (authority, row, BarrierOutcome("not_committed", error=exc)))
            )
            return
        group = s.group
        if isinstance(work, BarrierOutcome):  # decided synchronously (e.g. nothing to commit)
            self._inbox.append((None, apply, (authority, row, work)))
            return
        if isinstance(work, PendingBarrier):  # started elsewhere; it reports once
            self._count_in(group)
            barrier_returned = self._barrier_returned
            work.subscribe(
                lambda outcome: post((None, barrier_returned, (group, authority, row, outcome)))
            )
            return
        future = work.future if isinstance(work, Task) else work
        if isinstance(future, cf.Future):
            self._count_in(group)

            def future_done(f: cf.Future[Any]) -> None:
                error = f.exception()
                outcome = _outcome_of(f.result() if error is None else None, error)
                post((None, self._barrier_returned, (group, authority, row, outcome)))

            future.add_done_callback(future_done)
            return
        if not callable(work):
            error = TypeError(
                f"barrier {spec.name!r} returned {type(work).__name__}: expected a callable, a Task or a Future"
            )
            self._inbox.append(
                (None, apply, (authority, row, BarrierOutcome("not_committed", error=error)))
            )
            return

        try:
            op = self.pool.submit(work, name=spec.name, on_full="raise")
        except BackpressureError as exc:
            self.stats.backpressure += 1
            self._inbox.append(
                (None, apply, (authority, row, BarrierOutcome("not_committed", error=exc)))
            )
            return
        self._count_in(group)

        def returned(op: Operation) -> None:
            value, error = op.returned if op.returned is not None else (None, op.error)
            post((None, self._barrier_returned, (group, authority, row, _outcome_of(value, error))))

        op.add_physical_callback(returned)

    def _barrier_returned(
        self, group: Any, authority: Authority, row: Any, outcome: BarrierOutcome
    ) -> None:
        self._physical_done(group)
        self._apply_barrier(authority, row, outcome)

    def _authoritative(self, authority: Authority) -> Session | None:
        s = self._sessions.get(authority.session_id)
        if (
            s is None
            or s.serial != authority.entry_serial
            or s.op != authority.operation_id
            or s.revision != authority.revision
            or s.node.name != authority.state
        ):
            self.stats.dropped_stale += 1
            log.debug("%s: dropped stale result for %r", self.name, authority)
            return None
        return s

    def _apply_authorized(self, authority: Authority, event: str, payload: Any) -> None:
        s = self._authoritative(authority)
        if s is None:
            return
        self._deliver(s, event, payload)

    def _apply_barrier(self, authority: Authority, row: Any, outcome: BarrierOutcome) -> None:
        self._crash_point(f"barrier:{row.name}:after")
        s = self._authoritative(authority)
        if s is None:
            if outcome.outcome == "committed":
                log.warning(
                    "%s: a committed barrier result arrived for a session that moved on (%r); "
                    "its live revision may be stale",
                    self.name,
                    authority,
                )
            return
        if outcome.outcome == "committed" and outcome.revision is not None:
            s.revision = outcome.revision
        settle = s.binding.on_barrier_outcome
        if settle is not None:
            try:
                settle(s.ctx, authority.state, outcome)
            except HOOK_ERRORS as exc:
                self._hook_failed(s, exc, "the barrier-outcome hook")
                return
        self._deliver(s, row.event_for(outcome.outcome), outcome)


_VARARGS = 0x04  # inspect.CO_VARARGS


def _without_context(work: Callable[[], Any]) -> Callable[[Any], Any]:
    """Adapt offload work written without the context parameter."""

    def call(octx: Any) -> Any:
        return work()

    return call


def _crash_after(
    work: Callable[[Any], Any], point: str, hit: Callable[[str], None]
) -> Callable[[Any], Any]:
    """Wrap offload work so the crash point fires right after it returns."""

    def wrapped(octx: Any) -> Any:
        value = work(octx)
        hit(point)
        return value

    return wrapped


def _outcome_of(value: Any, error: BaseException | None) -> BarrierOutcome:
    """Normalise what barrier work produced into a :class:`BarrierOutcome`.

    Work that raised instead of reporting an outcome may have written: the outcome is
    unknown (fail closed: ``docs/semantics.md``, "Fail closed")."""
    if error is not None:
        return BarrierOutcome(OUTCOME_UNKNOWN, error=error)
    if isinstance(value, BarrierOutcome) and value.outcome in BARRIER_OUTCOMES:
        return value
    return BarrierOutcome(
        OUTCOME_UNKNOWN,
        error=TypeError(f"barrier work returned {type(value).__name__}, not a BarrierOutcome"),
    )


def _row_with_index(binding: MachineBinding, index: int) -> Row | None:
    """The bound row of the table's transition ``index`` (``None``: no such row)."""
    for node in binding.nodes.values():
        for cand in node.rows.values():
            for row in cand if isinstance(cand, tuple) else (cand,):
                if row.index == index:
                    return row
    return None
