"""Cancellation tokens (``docs/runtime.md``, "Cancellation tokens").

A :class:`CancellationToken` is cancelled explicitly (:meth:`~CancellationToken.cancel`,
idempotent, firing ``on_cancel`` callbacks once) or passively by a deadline on the
injectable clock (``deadline_monotonic``; :meth:`~CancellationToken.is_cancelled` turns
true, but callbacks do not fire for a passive deadline unless someone promotes it with
:meth:`~CancellationToken.check_deadline`, as the reference does with a timer).
:meth:`~CancellationToken.raise_if_cancelled` raises
:class:`~phronomy_fsm.errors.Cancelled`, which ``except Exception`` does not catch.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from phronomy_fsm.errors import HOOK_ERRORS, Cancelled
from phronomy_fsm.runtime.clock import SYSTEM_CLOCK, Clock

log = logging.getLogger("phronomy_fsm.runtime")


class CancellationToken:
    """A thread-safe, one-way cancellation flag with callbacks and an optional deadline.

    Args:
        deadline_monotonic: absolute deadline on ``clock.monotonic()`` (seconds), or None.
        clock: the clock the deadline is read from.

    Concurrency: every method may be called from any thread; callbacks run on the
    thread that cancels (or immediately on the registering thread if already cancelled),
    isolated from each other (a raising callback is logged).
    """

    __slots__ = ("_callbacks", "_clock", "_lock", "_reason", "_timed_out", "deadline_monotonic")

    def __init__(
        self, *, deadline_monotonic: float | None = None, clock: Clock = SYSTEM_CLOCK
    ) -> None:
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[Cancelled], object]] = []
        self._reason: str | None = None
        self._timed_out = False
        self.deadline_monotonic = deadline_monotonic
        self._clock = clock

    @classmethod
    def timeout_after(cls, seconds: float, *, clock: Clock = SYSTEM_CLOCK) -> CancellationToken:
        """A token whose deadline is ``seconds`` from now on ``clock``."""
        return cls(deadline_monotonic=clock.monotonic() + seconds, clock=clock)

    @property
    def reason(self) -> str | None:
        """Why it was cancelled (``None`` while not cancelled explicitly)."""
        return self._reason

    @property
    def timed_out(self) -> bool:
        """True when the cancellation came from a deadline or timeout."""
        return self._timed_out or self._deadline_passed()

    def _deadline_passed(self) -> bool:
        return (
            self.deadline_monotonic is not None
            and self._clock.monotonic() >= self.deadline_monotonic
        )

    def is_cancelled(self) -> bool:
        """True after an explicit cancel, or once the deadline has passed."""
        return self._reason is not None or self._deadline_passed()

    def cancel(self, reason: str = "cancelled", *, timed_out: bool = False) -> bool:
        """Cancel; return False if it was already cancelled explicitly. Runs callbacks."""
        with self._lock:
            if self._reason is not None:
                return False
            self._reason = reason
            self._timed_out = timed_out
            callbacks, self._callbacks = self._callbacks, []
        error = self.error()
        for callback in callbacks:
            try:
                callback(error)
            except HOOK_ERRORS:
                log.exception("cancellation callback raised")
        return True

    def check_deadline(self) -> bool:
        """Promote a passed deadline to an explicit cancel (firing callbacks); return
        whether the token is cancelled."""
        if self._reason is None and self._deadline_passed():
            self.cancel("deadline passed", timed_out=True)
        return self.is_cancelled()

    def on_cancel(self, callback: Callable[[Cancelled], object]) -> None:
        """Run ``callback(error)`` on explicit cancellation (now, if already cancelled)."""
        with self._lock:
            if self._reason is None:
                self._callbacks.append(callback)
                return
        callback(self.error())

    def error(self) -> Cancelled:
        """The :class:`Cancelled` error describing this token's state."""
        if self._reason is None and self._deadline_passed():
            return Cancelled("deadline passed", timed_out=True)
        return Cancelled(self._reason or "cancelled", timed_out=self._timed_out)

    def raise_if_cancelled(self) -> None:
        """Raise :class:`Cancelled` if cancelled (explicitly or by deadline)."""
        if self.is_cancelled():
            raise self.error()
