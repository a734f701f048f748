"""Crash points: where the crash-injection harness may kill the process (issue 6 item 5).

A crash point is a name such as ``barrier:tool_dispatch:before``. When the environment
variable ``PHRONOMY_CRASH_AT`` names a point (optionally ``NAME@N`` for its N-th hit,
counting from 1), the process sends itself SIGKILL the moment it reaches that point —
no cleanup, no flushing, exactly like a power cut for the process. Unset (the normal
case) a check costs one global read.

Points, generated from the tables (``tools/crash_matrix.py`` enumerates them from the
generated modules, so a new barrier or offload hook in a spec is covered without
editing the harness):

- ``barrier:<name>:before`` — the commit is built but not yet submitted;
- ``barrier:<name>:during`` — inside the store transaction, before COMMIT;
- ``barrier:<name>:after`` — the commit returned; its outcome is not yet applied;
- ``offload:<hook>:after`` — the offloaded work (an LLM call, a tool side effect)
  returned; its result is not yet applied.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import threading

ENV = "PHRONOMY_CRASH_AT"

_POINT = re.compile(r"(barrier:[A-Za-z_]\w*:(before|during|after)|offload:[A-Za-z_]\w*:after)")


def _parse(spec: str | None) -> tuple[str | None, int]:
    """``NAME[@N]`` → (point, N). A malformed value is reported on stderr (a typo would
    otherwise silently never fire) and still armed as written, so a harness that
    relies on a name the pattern does not know still works."""
    if not spec:
        return None, 1
    target, sep, nth = spec.partition("@")
    count = 1
    if sep and not (nth.isdigit() and int(nth) > 0):
        print(
            f"phronomy_fsm: {ENV}={spec!r}: the part after '@' must be a positive hit "
            "count (NAME@N); using the first hit",
            file=sys.stderr,
        )
    elif sep:
        count = int(nth)
    if not _POINT.fullmatch(target):
        print(
            f"phronomy_fsm: {ENV}={spec!r} is not a crash point name; expected "
            "barrier:<name>:before|during|after or offload:<hook>:after "
            "(docs/operations.md, Crash injection)",
            file=sys.stderr,
        )
    return target or None, count


ARMED, _remaining = _parse(os.environ.get(ENV))
_lock = threading.Lock()


def hit(point: str) -> None:
    """Kill the process with SIGKILL if ``point`` is the armed crash point (on its
    N-th hit). Never returns in that case; otherwise returns at once."""
    global _remaining
    if ARMED is None or point != ARMED:
        return
    with _lock:
        _remaining -= 1
        if _remaining > 0:
            return
    os.kill(os.getpid(), signal.SIGKILL)


def points_for(barriers: tuple[str, ...], offload_hooks: tuple[str, ...]) -> list[str]:
    """Every crash point for a machine with these barriers and offload hooks."""
    points = []
    for name in barriers:
        points += [f"barrier:{name}:before", f"barrier:{name}:during", f"barrier:{name}:after"]
    points += [f"offload:{hook}:after" for hook in offload_hooks]
    return points
