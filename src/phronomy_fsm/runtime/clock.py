"""Clocks: the one place the runtime reads time, so tests can replace it.

:class:`SystemClock` reads ``time.monotonic`` and the UTC wall clock; :class:`ManualClock`
only moves when a test calls :meth:`ManualClock.advance`, and wakes whoever waits on it
(the dispatcher's timer wait), so timeouts are tested by advancing time instead of
sleeping (STYLE.md "Tests"; sismic's injectable clock).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    """What the runtime needs from a clock. ``monotonic()`` is in seconds from an
    arbitrary origin and never goes back; ``now()`` is timezone-aware wall time."""

    def monotonic(self) -> float:
        """Seconds, monotonic."""
        ...

    def now(self) -> datetime:
        """Aware UTC wall time."""
        ...

    def on_advance(self, callback: Callable[[], None]) -> None:
        """Register ``callback`` to run after the clock jumps (manual clocks only;
        system clocks never call it)."""
        ...


class SystemClock:
    """The real clock: ``time.monotonic()`` and ``datetime.now(timezone.utc)``."""

    __slots__ = ()

    def monotonic(self) -> float:
        """Seconds from ``time.monotonic``."""
        return time.monotonic()

    def now(self) -> datetime:
        """Aware UTC now."""
        return datetime.now(UTC)

    def on_advance(self, callback: Callable[[], None]) -> None:
        """No-op: real time does not jump."""


SYSTEM_CLOCK = SystemClock()


class ManualClock:
    """A clock that moves only when told to (tests, simulations).

    Args:
        start_monotonic: initial monotonic reading in seconds.
        start_wall: initial wall time (aware); defaults to 2026-01-01T00:00Z.

    Concurrency: thread-safe; :meth:`advance` may be called from any thread and runs the
    ``on_advance`` callbacks (for example the dispatcher's wake-up) on that thread.
    """

    def __init__(self, start_monotonic: float = 0.0, start_wall: datetime | None = None) -> None:
        self._lock = threading.Lock()
        self._monotonic = start_monotonic
        self._wall = start_wall or datetime(2026, 1, 1, tzinfo=UTC)
        if self._wall.tzinfo is None:
            raise ValueError("start_wall must be timezone-aware")
        self._callbacks: list[Callable[[], None]] = []

    def monotonic(self) -> float:
        """The current manual monotonic reading, in seconds."""
        return self._monotonic

    def now(self) -> datetime:
        """The current manual wall time."""
        return self._wall

    def on_advance(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` after every :meth:`advance`."""
        with self._lock:
            self._callbacks.append(callback)

    def advance(self, seconds: float) -> None:
        """Move both readings forward by ``seconds`` (must be ≥ 0) and notify waiters.

        Raises ``ValueError`` for a negative or non-finite step."""
        if not (seconds >= 0 and seconds != float("inf")):
            raise ValueError(f"cannot advance a clock by {seconds!r} seconds")
        with self._lock:
            self._monotonic += seconds
            self._wall += timedelta(seconds=seconds)
            callbacks = list(self._callbacks)
        for callback in callbacks:
            callback()
