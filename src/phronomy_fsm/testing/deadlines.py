"""Deadlines for tests that wait on a condition, scaled to the machine they run on.

A test that waits for an execution to finish, a worker to take over or a server to
answer polls a condition and gives up at a deadline. A deadline that a quiet machine
meets with room to spare is missed on a busy one — a 2-core CI machine running the
suite in parallel, or beside another suite — and the test fails for no fault of the
code. Waiting longer costs nothing when the condition comes true early, so every
deadline is scaled:

- by ``PHRONOMY_TEST_TIME_SCALE`` (a float, default 1; ``tools/run.sh test`` sets it
  for its parallel run), and
- by the machine's load at the moment the wait starts: the 1-minute load average per
  core, when it is above 1 (a machine twice as loaded as it has cores gets twice the
  time).

Speed itself is never asserted by the tests (``docs/performance.md``): these are
limits on a hang, not measurements. Nothing in the library imports this module.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TypeVar

#: The environment variable that multiplies every scaled deadline.
TIME_SCALE_VARIABLE = "PHRONOMY_TEST_TIME_SCALE"

T = TypeVar("T")


def time_scale() -> float:
    """The factor :func:`scaled_seconds` applies now: ``PHRONOMY_TEST_TIME_SCALE``
    (at least 1; an unreadable value counts as 1) times the load per core when that
    is above 1."""
    try:
        configured = max(1.0, float(os.environ.get(TIME_SCALE_VARIABLE, "1")))
    except ValueError:
        configured = 1.0
    try:
        load = os.getloadavg()[0] / (os.cpu_count() or 1)
    except OSError:  # no load average on this platform
        load = 1.0
    return configured * max(1.0, load)


def scaled_seconds(seconds: float) -> float:
    """``seconds`` (a deadline that holds on a quiet machine) scaled to this one now,
    in seconds (module docstring)."""
    return seconds * time_scale()


def wait_until(
    predicate: Callable[[], T], timeout_seconds: float, what: str, *, poll_seconds: float = 0.05
) -> T:
    """Poll ``predicate()`` every ``poll_seconds`` until it returns something truthy,
    and return that; the deadline is ``timeout_seconds`` scaled by
    :func:`scaled_seconds` when the wait starts.

    Raises:
        AssertionError: the deadline passed; the message names ``what`` and the
            deadline in seconds.
    """
    limit = scaled_seconds(timeout_seconds)
    deadline = time.monotonic() + limit
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {limit:.0f} s waiting for {what}")
        time.sleep(poll_seconds)


__all__ = ["TIME_SCALE_VARIABLE", "scaled_seconds", "time_scale", "wait_until"]
