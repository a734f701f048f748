"""The folder of one checked run: what its processes write and the checker reads back.

Owns the file names and formats shared by the child processes
(:mod:`phronomy_fsm.checking.child`), the runner and the invariants. Every process of a
run appends to one log, ``log.jsonl`` — one JSON object a line, each written with a
single ``write`` on an ``O_APPEND`` descriptor, so lines of concurrent processes never
interleave and a line survives its process being killed right after — and each keeps
the crash points it reached in ``trace-<process>.txt``. The run's virtual clock offset
is in ``clock.json`` (:class:`SkewClock`), the signals the checker may send in
``alphabet.json``.

Log lines (``what``): ``started`` / ``finished`` (the runtime acknowledged a start or a
finish: ``status``, ``state``), ``effect_started`` (``effect``, ``key``, ``attempt``),
``sent`` (a signal the store accepted: ``signal_id``, ``event``, ``by``), ``refused``
(a send the store refused, with ``error``), ``question`` (an operator was asked:
``effect``, ``key``, ``attempt``, ``outcome``), ``injected`` (a step fired:
``step``), ``paused`` (a takeover step stopped the process: ``worker_id``),
``claimed`` (a taking-over process claimed executions). Every line has ``process``.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

LOG = "log.jsonl"
#: Exit status of a taking-over process that could not open the store: the paused
#: process holds it (a SQLite write transaction was open when it stopped).
BLOCKED = 4
CLOCK = "clock.json"
ALPHABET = "alphabet.json"


def trace_path(folder: Path, process: int) -> Path:
    """Where process ``process`` of a run lists the crash points it reached."""
    return folder / f"trace-{process}.txt"


def output_path(folder: Path, process: int) -> Path:
    """Where process ``process`` of a run writes its stdout and stderr."""
    return folder / f"process-{process}.log"


class RunLog:
    """Appends log lines to ``folder/log.jsonl`` (module docstring) for one process.

    Concurrency: :meth:`write` may be called from any thread.
    """

    def __init__(self, folder: Path, process: int) -> None:
        self.process = process
        self._fd = os.open(folder / LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    def write(self, what: str, **facts: Any) -> None:
        """Append ``{"what": what, "process": ..., **facts}`` as one line."""
        entry = {"what": what, "process": self.process, "at": round(time.time(), 4), **facts}
        line = json.dumps(entry, default=str)
        os.write(self._fd, (line + "\n").encode())


def read_log(folder: Path) -> list[dict[str, Any]]:
    """Every line of the run's log, in the order written (a line cut by a kill is
    skipped)."""
    path = folder / LOG
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict):
            out.append(entry)
    return out


def read_trace(folder: Path, process: int) -> Counter[str]:
    """How often process ``process`` reached each crash point."""
    path = trace_path(folder, process)
    if not path.exists():
        return Counter()
    return Counter(line for line in path.read_text().splitlines() if line)


class SkewClock:
    """The system clock moved forward by an offset that every process of a run shares
    (``clock.json``): a checker's step fires timers early by advancing it, and a
    process started later keeps the same time, so a deadline stored by one process
    is not far off for the next.

    Implements :class:`phronomy_fsm.runtime.clock.Clock`. Leases are not affected:
    they are measured on the store's clock.

    Concurrency: thread-safe; :meth:`advance` runs the ``on_advance`` callbacks (the
    dispatcher's wake-up) on the calling thread.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[], None]] = []
        self._offset = 0.0
        if path.exists():
            try:
                self._offset = float(json.loads(path.read_text())["offset_seconds"])
            except (ValueError, KeyError, TypeError):
                self._offset = 0.0

    @property
    def offset_seconds(self) -> float:
        """How far ahead of the system clock it is, in seconds."""
        return self._offset

    def monotonic(self) -> float:
        """``time.monotonic()`` plus the offset."""
        return time.monotonic() + self._offset

    def now(self) -> datetime:
        """Aware UTC now plus the offset."""
        return datetime.now(UTC) + timedelta(seconds=self._offset)

    def on_advance(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` after every :meth:`advance`."""
        with self._lock:
            self._callbacks.append(callback)

    def advance(self, seconds: float) -> None:
        """Move the clock ``seconds`` (≥ 0) forward, for this process and the later
        ones of the run, and wake whoever waits on it."""
        if not seconds > 0:
            return
        with self._lock:
            self._offset += seconds
            tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"offset_seconds": self._offset}))
            os.replace(tmp, self.path)
            callbacks = list(self._callbacks)
        for callback in callbacks:
            callback()


__all__ = [
    "ALPHABET",
    "BLOCKED",
    "CLOCK",
    "LOG",
    "RunLog",
    "SkewClock",
    "output_path",
    "read_log",
    "read_trace",
    "trace_path",
]
