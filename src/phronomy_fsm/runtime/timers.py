"""Timers on an injectable clock.

:class:`TimerQueue` is a plain heap of deadlines, owned by whoever drives it (the
dispatcher fires due timers at the top of each loop turn: ``docs/runtime.md``, "Timers").
:class:`TimerService` drives a :class:`TimerQueue` from its own daemon thread, for
components without a loop (the offload pool's operation timeouts). Both read time only
from the clock, so a :class:`~phronomy_fsm.runtime.clock.ManualClock` makes them
deterministic.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
from collections.abc import Callable

from phronomy_fsm.errors import HOOK_ERRORS
from phronomy_fsm.runtime.clock import SYSTEM_CLOCK, Clock
from phronomy_fsm.table import MAX_DELAY_SECONDS


def sleep_seconds(deadline: float | None, now: float) -> float | None:
    """How long a thread may sleep until ``deadline`` (None: until notified), clamped
    to ``[0, MAX_DELAY_SECONDS]``."""
    if deadline is None:
        return None
    remaining = deadline - now
    return (
        remaining
        if 0.0 <= remaining <= MAX_DELAY_SECONDS
        else (MAX_DELAY_SECONDS if remaining > 0 else 0.0)
    )


log = logging.getLogger("phronomy_fsm.runtime")


class TimerHandle:
    """A scheduled callback; :meth:`cancel` prevents it from firing (if not yet fired)."""

    __slots__ = ("callback", "cancelled", "deadline")

    def __init__(self, deadline: float, callback: Callable[[], object]) -> None:
        self.deadline = deadline
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        """Do not fire. Idempotent; cheap (the entry is skipped lazily)."""
        self.cancelled = True


class TimerQueue:
    """A min-heap of :class:`TimerHandle` by deadline (monotonic seconds).

    Not thread-safe by itself: one owner schedules and fires.
    """

    __slots__ = ("_heap", "_seq")

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, TimerHandle]] = []
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._heap)

    def schedule_at(self, deadline: float, callback: Callable[[], object]) -> TimerHandle:
        """Fire ``callback`` once the clock reads ``deadline`` or later."""
        handle = TimerHandle(deadline, callback)
        heapq.heappush(self._heap, (deadline, next(self._seq), handle))
        return handle

    def next_deadline(self) -> float | None:
        """The earliest pending deadline (skipping cancelled entries), or None."""
        heap = self._heap
        while heap and heap[0][2].cancelled:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def pop_due(self, now: float) -> list[TimerHandle]:
        """Remove and return the timers due at ``now``, in deadline order."""
        due = []
        heap = self._heap
        while heap and heap[0][0] <= now:
            _, _, handle = heapq.heappop(heap)
            if not handle.cancelled:
                due.append(handle)
        return due


class TimerService:
    """A daemon thread firing callbacks at deadlines on ``clock``.

    Callbacks run on the timer thread and must be quick; exceptions are logged.
    The thread starts on the first :meth:`schedule` and stops with :meth:`close`.
    """

    def __init__(self, clock: Clock = SYSTEM_CLOCK, name: str = "phronomy-timers") -> None:
        self._clock = clock
        self._name = name
        self._queue = TimerQueue()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False
        clock.on_advance(self._wake)

    def _wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def schedule(self, delay_seconds: float, callback: Callable[[], object]) -> TimerHandle:
        """Fire ``callback`` after ``delay_seconds`` on the clock; returns its handle."""
        with self._cond:
            if self._closed:
                raise RuntimeError("timer service is closed")
            handle = self._queue.schedule_at(self._clock.monotonic() + delay_seconds, callback)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            self._cond.notify_all()
            return handle

    def _run(self) -> None:
        while True:
            with self._cond:
                if self._closed:
                    return
                now = self._clock.monotonic()
                due = self._queue.pop_due(now)
                if not due:
                    deadline = self._queue.next_deadline()
                    # a manual clock's advance() wakes this wait early (on_advance)
                    self._cond.wait(sleep_seconds(deadline, now))
                    continue
            for handle in due:
                try:
                    handle.callback()
                except HOOK_ERRORS:
                    log.exception("timer callback raised")

    def close(self) -> None:
        """Stop the thread; pending timers never fire."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
