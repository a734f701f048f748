"""The event loop under the dispatcher: one thread, a FIFO inbox, timers, lifecycle.

Reference §7.1 (EventLoop). An :class:`EventLoop` owns the thread that runs it (or the
caller's thread, in :meth:`~EventLoop.run_until_idle`), a FIFO inbox of ``(None, fn,
args)`` control messages (subclasses add their own items), timers on the injectable
clock fired at the top of each turn, and the lifecycle running → draining → stopped
(or failed). It knows nothing of sessions: :class:`phronomy_fsm.runtime.dispatcher.Dispatcher`
builds on it.

Concurrency: :meth:`~EventLoop.call_soon`, :meth:`~EventLoop.call`,
:meth:`~EventLoop.start` and :meth:`~EventLoop.stop` may be called from any thread;
:meth:`~EventLoop.call_later` and everything that touches loop state only on the loop
thread (asserted with :class:`~phronomy_fsm.errors.WrongThreadError`).

A loop that failed, or that ran on its own thread and stopped, runs nothing more:
:meth:`~EventLoop.call_soon` then raises
:class:`~phronomy_fsm.errors.DispatcherStoppedError` and :meth:`~EventLoop.call`
returns a task failed with it, so no caller waits for ever on a dead inbox;
:meth:`~EventLoop.on_failure` callbacks learn of a failure.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from phronomy_fsm.errors import HOOK_ERRORS, DispatcherStoppedError, WrongThreadError
from phronomy_fsm.runtime.clock import SYSTEM_CLOCK, Clock
from phronomy_fsm.runtime.tasks import LOOP_THREADS, Task
from phronomy_fsm.runtime.timers import TimerQueue, sleep_seconds

log = logging.getLogger("phronomy_fsm.runtime")

RUNNING = "running"
DRAINING = "draining"
STOPPED = "stopped"
FAILED = "failed"
MANUAL = "manual"


class EventLoop:
    """A single-threaded loop with a FIFO inbox and timers (see the module docstring).

    Args:
        clock: the clock timers read (a manual clock wakes the loop when advanced).
        name: the loop thread's name.
    """

    def __init__(self, *, clock: Clock = SYSTEM_CLOCK, name: str = "phronomy-loop") -> None:
        self.clock = clock
        self.name = name
        self._inbox: collections.deque[tuple[Any, Any, Any]] = collections.deque()
        self._append = self._inbox.append
        self._timers = TimerQueue()
        self._cond = threading.Condition(threading.Lock())
        self._sleeping = False
        self._state = STOPPED
        self._thread: threading.Thread | None = None
        self._loop_ident: int | None = None
        self._failure: BaseException | None = None
        self._failure_callbacks: list[Callable[[BaseException], object]] = []
        clock.on_advance(self._wake)

    # ------------------------------------------------------------------ threads

    @property
    def lifecycle(self) -> str:
        """``stopped``, ``running``, ``draining``, ``manual`` or ``failed``."""
        return self._state

    def is_loop_thread(self) -> bool:
        """True on the thread currently running this loop."""
        return threading.get_ident() == self._loop_ident

    def _assert_loop(self) -> None:
        if threading.get_ident() != self._loop_ident:
            raise WrongThreadError(
                f"{self.name}: live state may only be touched on the loop thread; post a control "
                "message with call_soon() instead"
            )

    def start(self) -> None:
        """Run the loop on a new daemon thread. Raises ``RuntimeError`` if running."""
        with self._cond:
            if self._state in (RUNNING, DRAINING, MANUAL):
                raise RuntimeError(f"{self.name} is already running")
            self._state = RUNNING
            self._thread = threading.Thread(target=self._run_forever, name=self.name, daemon=True)
        self._thread.start()

    def _enter_loop(self) -> None:
        self._loop_ident = threading.get_ident()
        LOOP_THREADS.add(self._loop_ident)

    def _leave_loop(self) -> None:
        LOOP_THREADS.discard(threading.get_ident())
        self._loop_ident = None

    def _wake(self) -> None:
        with self._cond:
            self._cond.notify()

    def _post(self, item: tuple[Any, Any, Any]) -> None:
        self._append(item)
        if self._sleeping:
            self._wake()

    def _run_forever(self) -> None:
        self._enter_loop()
        try:
            while True:
                self._fire_timers()
                if self._inbox:
                    self._process(512)
                    continue
                with self._cond:
                    if self._state == DRAINING and self._idle():
                        self._state = STOPPED
                        self._cond.notify_all()
                        self._abort(
                            DispatcherStoppedError(f"{self.name} stopped while this was parked")
                        )
                        return
                    if self._state == STOPPED:
                        return
                    self._sleeping = True
                    if not self._inbox:
                        deadline = self._timers.next_deadline()
                        self._cond.wait(sleep_seconds(deadline, self.clock.monotonic()))
                    self._sleeping = False
        except BaseException as exc:  # noqa: BLE001 - logged by _fail; the thread just ends
            self._fail(exc)
        finally:
            self._leave_loop()

    # hooks for subclasses -------------------------------------------------------

    def _process(self, limit: int) -> int:
        """Handle up to ``limit`` inbox items (control messages only here)."""
        handled = 0
        pop = self._inbox.popleft
        for handled in range(1, limit + 1):
            try:
                _, fn, args = pop()
            except IndexError:
                return handled - 1
            fn(*args)
        return handled

    def _idle(self) -> bool:
        """True when a draining loop may stop (nothing queued, nothing in flight)."""
        return not self._inbox and not self._work_in_flight()

    def _work_in_flight(self) -> bool:
        """True while work started by the loop has not come back."""
        return False

    def _abort(self, error: BaseException) -> None:
        """End whatever is left when the loop stops or fails."""
        self._inbox.clear()

    def run_until_idle(
        self, *, wait_for_work: bool = True, timeout_seconds: float | None = 30.0
    ) -> int:
        """Drive the loop on the calling thread until nothing is left to do.

        Args:
            wait_for_work: also wait for offloaded work and barrier commits to come
                back (they run on worker threads) before returning.
            timeout_seconds: give up waiting after this long (real time).

        Returns:
            The number of inbox items handled. Due timers fire as the clock allows.

        Raises:
            RuntimeError: the loop is running on its own thread.
        """
        with self._cond:
            if self._state in (RUNNING, DRAINING):
                raise RuntimeError(f"{self.name} runs on its own thread; do not drive it manually")
            if self._state == FAILED:
                raise DispatcherStoppedError(f"{self.name} failed", cause=repr(self._failure))
            self._state = MANUAL
        self._enter_loop()
        handled = 0
        give_up = None if timeout_seconds is None else time.monotonic() + timeout_seconds
        try:
            while True:
                self._fire_timers()
                if self._inbox:
                    handled += self._process(1 << 30)
                    continue
                if wait_for_work and self._work_in_flight():
                    with self._cond:
                        self._sleeping = True
                        if not self._inbox:
                            remaining = None if give_up is None else give_up - time.monotonic()
                            if remaining is not None and remaining <= 0:
                                raise TimeoutError(
                                    f"{self.name}: work still in flight after {timeout_seconds} s"
                                )
                            self._cond.wait(0.05 if remaining is None else min(0.05, remaining))
                        self._sleeping = False
                    continue
                return handled
        except BaseException as exc:
            if not isinstance(exc, (TimeoutError, Exception)):
                self._fail(exc)
            raise
        finally:
            self._leave_loop()
            with self._cond:
                if self._state == MANUAL:
                    self._state = STOPPED

    def stop(self, *, timeout_seconds: float | None = 10.0) -> bool:
        """Drain: refuse new admissions, let queued work flow, stop when idle.

        Returns True if the loop stopped idle within ``timeout_seconds``; otherwise it
        is stopped anyway and what is left is aborted (returns False)."""
        with self._cond:
            if self._state == RUNNING:
                self._state = DRAINING
                self._cond.notify_all()
            thread = self._thread
        clean = True
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout_seconds)
            if thread.is_alive():
                clean = False
                self.call_soon(
                    self._abort, DispatcherStoppedError(f"{self.name} stopped before going idle")
                )
                with self._cond:
                    self._state = STOPPED
                    self._cond.notify_all()
                thread.join(5)
        return clean

    def _fail(self, exc: BaseException) -> None:
        log.exception("%s: loop failed", self.name, exc_info=exc)
        self._failure = exc
        self._state = FAILED
        error = DispatcherStoppedError(f"{self.name} failed: {exc!r}", cause=repr(exc))
        try:
            self._abort(error)
        finally:
            for callback in list(self._failure_callbacks):
                try:
                    callback(error)
                except HOOK_ERRORS:
                    log.exception("%s: failure callback raised", self.name)

    def on_failure(self, callback: Callable[[BaseException], object]) -> None:
        """Call ``callback(error)`` if the loop fails, after every session it held was
        ended: on the failing loop thread, with the
        :class:`~phronomy_fsm.errors.DispatcherStoppedError` waiters were failed with
        (its ``cause`` names the original exception). A raising callback is logged.
        Any thread; the agent runtime uses it to fail the tasks of executions that
        were resting (suspended, waiting for an operator) when the loop died."""
        self._failure_callbacks.append(callback)

    def is_dead(self) -> bool:
        """True when nothing posted will run any more: the loop failed, or it ran on
        its own thread and has stopped. A loop driven by :meth:`run_until_idle`, or
        not started yet, is not dead (posts wait for the next run). Any thread."""
        return self._state == FAILED or (self._state == STOPPED and self._thread is not None)

    def _dead_error(self) -> DispatcherStoppedError:
        if self._state == FAILED:
            return DispatcherStoppedError(
                f"{self.name} failed ({self._failure!r}) and runs nothing more; "
                "create a new runtime (its executions are durable as of their last barrier: "
                "load the agents again)",
                cause=repr(self._failure),
            )
        return DispatcherStoppedError(f"{self.name} is stopped and runs nothing more")

    def _check_open(self) -> None:
        """Raise DispatcherStoppedError when the loop is dead (:meth:`is_dead`)."""
        if self.is_dead():
            raise self._dead_error()

    # ------------------------------------------------------------ control messages

    def call_soon(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` on the loop thread, FIFO with events. Thread-safe.
        An exception from ``fn`` is logged; it does not stop the loop.

        Raises:
            DispatcherStoppedError: the loop is dead (:meth:`is_dead`); ``fn`` will
                never run.
        """
        self._check_open()
        self._post((None, self._call_isolated, (fn, args)))

    def call(self, fn: Callable[..., Any], *args: Any) -> Task[Any]:
        """Run ``fn(*args)`` on the loop thread; return a :class:`Task` for its result.
        On a dead loop (:meth:`is_dead`, also when it dies before running ``fn``) the
        task fails with :class:`~phronomy_fsm.errors.DispatcherStoppedError`."""
        task: Task[Any] = Task(getattr(fn, "__name__", "call"))

        def run() -> None:
            try:
                task.complete(fn(*args))
            except BaseException as exc:  # noqa: BLE001 - delivered to the caller
                task.fail(exc)

        if self.is_dead():
            task.fail(self._dead_error())
            return task
        self._post((None, run, ()))
        if self.is_dead():  # died meanwhile: the inbox will not be read again
            task.fail(self._dead_error())
        return task

    def call_later(self, delay_seconds: float, fn: Callable[..., Any], *args: Any) -> Any:
        """Run ``fn(*args)`` on the loop after ``delay_seconds`` on the dispatcher's clock.
        Loop thread only; returns a handle whose ``cancel()`` prevents the call."""
        self._assert_loop()
        return self._timers.schedule_at(
            self.clock.monotonic() + delay_seconds, lambda: self._call_isolated(fn, args)
        )

    def _call_isolated(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        try:
            fn(*args)
        except HOOK_ERRORS:
            log.exception("%s: control message %r raised", self.name, fn)

    def _fire_timers(self) -> None:
        if len(self._timers):
            for handle in self._timers.pop_due(self.clock.monotonic()):
                handle.callback()
