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


class StoreTime(Protocol):
    """What :class:`StoreClock` reads: a store's clock (both stores implement it)."""

    def store_time(self) -> datetime:
        """Now on the store's clock (aware UTC). Raises StorageError."""
        ...


class StoreClock:
    """This host's clock, moved onto the store's: the default clock of a durable
    runtime, so every worker measures deadlines and timers on the one clock leases and
    signals' arrival times are measured on (``docs/semantics.md``, "One clock").

    ``now()`` is ``local.now()`` plus an offset, measured by :meth:`align` as the
    store's time minus the midpoint of the local readings around asking for it (the
    error is at most half the round trip); ``monotonic()`` is ``local.monotonic()``.
    The runtime aligns it when it starts and at each lease renewal.

    Args:
        store: the store whose clock it follows (:class:`StoreTime`).
        local: the host's clock (a test passes one that runs behind or ahead).

    Raises (at construction): StorageError from the first reading of the store.

    Concurrency: thread-safe; the offset is one float, replaced whole.
    """

    __slots__ = ("_local", "_offset", "_store")

    def __init__(self, store: StoreTime, local: Clock = SYSTEM_CLOCK) -> None:
        self._store = store
        self._local = local
        self._offset = 0.0
        self.align()

    @property
    def offset_seconds(self) -> float:
        """The store's clock minus this host's, in seconds, as last measured."""
        return self._offset

    def align(self) -> float:
        """Measure the offset again and return it (seconds). Raises StorageError
        (the offset is then kept)."""
        before = self._local.now()
        at_store = self._store.store_time()
        after = self._local.now()
        middle = before + (after - before) / 2
        self._offset = (at_store - middle).total_seconds()
        return self._offset

    def monotonic(self) -> float:
        """The host clock's monotonic seconds (durations need no store)."""
        return self._local.monotonic()

    def now(self) -> datetime:
        """Aware UTC now on the store's clock."""
        return self._local.now() + timedelta(seconds=self._offset)

    def on_advance(self, callback: Callable[[], None]) -> None:
        """Passed to the host's clock (a manual one jumps)."""
        self._local.on_advance(callback)
