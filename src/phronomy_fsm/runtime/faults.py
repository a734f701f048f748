"""Fault plans: where a process kills itself on purpose, passed in explicitly.

A :class:`FaultPlan` is given to the components that have crash points (the
dispatcher, the SQLite and PostgreSQL stores, the durable runtime, the agent runtime).
Production code never reads the environment for it: a test, the crash-injection
harness (``tools/``) or a command-line entry point (``phronomy-fsm demo --crash-at``)
builds a plan from its own options and hands it over. Without a plan a crash point
costs one ``is None`` test.

Crash points (``docs/operations.md``, "The crash-injection matrix"):

- ``barrier:<name>:before`` — a barrier's commit is built, not yet submitted;
- ``barrier:<name>:during`` — inside the store transaction, before COMMIT (for a
  group commit the SQLite store applies as one statement that is its own transaction:
  just before that statement; either way a kill there leaves nothing of it written);
- ``barrier:<name>:after`` — the commit returned; its outcome is not yet applied;
- ``offload:<hook>:after`` — offloaded work returned; its result is not yet applied;
- ``effect:<hook>:before`` — an effect is about to start (its idempotency key known).

The engine's own commits are barriers too, named ``@start``, ``@wait``, ``@final``,
``@recovery``, ``@resolution`` and ``@cancel`` (points ``barrier:@wait:after``...).
"""

from __future__ import annotations

import os
import re
import signal
import threading
from collections.abc import Callable

#: What a crash point name looks like.
POINT = re.compile(
    r"(barrier:@?[A-Za-z_]\w*:(before|during|after)|offload:[A-Za-z_]\w*:after"
    r"|effect:[A-Za-z_]\w*:before)"
)


class FaultPlan:
    """Kill the process with SIGKILL at the ``nth`` hit of ``crash_at``.

    Args:
        crash_at: a crash point name, or ``None`` to only trace.
        nth: which hit of the point kills (1 = the first).
        trace: called with every point reached, before it may kill (the crash
            harness appends them to a file, flushed, to know what a run reached).

    Raises:
        ValueError: ``crash_at`` is not a crash point name, or ``nth`` < 1.

    Concurrency: :meth:`hit` may be called from any thread.
    """

    __slots__ = ("_lock", "_remaining", "crash_at", "nth", "trace")

    def __init__(
        self,
        crash_at: str | None = None,
        *,
        nth: int = 1,
        trace: Callable[[str], None] | None = None,
    ) -> None:
        if crash_at is not None and not POINT.fullmatch(crash_at):
            raise ValueError(
                f"{crash_at!r} is not a crash point name (barrier:<name>:before|during|after, "
                "offload:<hook>:after or effect:<hook>:before)"
            )
        if nth < 1:
            raise ValueError("nth must be at least 1")
        self.crash_at = crash_at
        self.nth = nth
        self.trace = trace
        self._remaining = nth
        self._lock = threading.Lock()

    @classmethod
    def parse(cls, spec: str | None, *, trace: Callable[[str], None] | None = None) -> FaultPlan:
        """Build a plan from ``NAME`` or ``NAME@N`` (empty or ``None``: trace only).

        Raises:
            ValueError: the name is not a crash point name.
        """
        if not spec:
            return cls(None, trace=trace)
        name, sep, nth = spec.rpartition("@")
        if sep and name and nth.isdigit() and int(nth) > 0:
            return cls(name, nth=int(nth), trace=trace)
        name, count = spec, 1
        return cls(name, nth=count, trace=trace)

    def hit(self, point: str) -> None:
        """Report ``point`` and kill the process if it is the armed point's ``nth`` hit.

        Never returns in that case: the process ends with SIGKILL at once, with no
        cleanup and no flushing (like a power cut for the process).
        """
        if self.trace is not None:
            self.trace(point)
        if point != self.crash_at:
            return
        with self._lock:
            self._remaining -= 1
            if self._remaining > 0:
                return
        os.kill(os.getpid(), signal.SIGKILL)


def points_for(barriers: tuple[str, ...], offload_hooks: tuple[str, ...]) -> list[str]:
    """List every crash point of a machine with these barriers and offload hooks.

    Args:
        barriers: the machine's barrier names (``TABLE.barriers``).
        offload_hooks: its offload hook names (``TABLE.offload_hooks``).

    Returns:
        ``barrier:<name>:before|during|after`` for each barrier, then
        ``offload:<hook>:after`` for each hook, in the order given (the crash matrices
        in ``tools/`` enumerate their runs from it; ``docs/operations.md``, "The
        crash-injection matrix").
    """
    points = []
    for name in barriers:
        points += [f"barrier:{name}:before", f"barrier:{name}:during", f"barrier:{name}:after"]
    points += [f"offload:{hook}:after" for hook in offload_hooks]
    return points


__all__ = ["POINT", "FaultPlan", "points_for"]
