"""Who a process is, and whether a recorded process is still alive.

Owns :class:`ProcessIdentity` (host name, pid, start time, boot id, PID namespace),
:func:`current_process` and the liveness check :func:`probe_owner`, used by the
durable runtime's workers (a restarted process takes over at once the executions of a
worker that is provably gone on this host, instead of waiting for its lease to pass;
``docs/semantics.md``, "Leases and fencing").
"""

from __future__ import annotations

import os
import socket

import attrs

_PROC = "/proc"

#: Liveness verdicts of :func:`probe_owner`.
SELF = "self"
ALIVE = "alive"
DEAD = "dead"
UNVERIFIABLE = "unverifiable"


@attrs.frozen
class ProcessIdentity:
    """Who a process is, as recorded in a claim.

    Attributes:
        host: ``socket.gethostname()``.
        pid: the process id.
        start_time: the process start time in clock ticks after boot (Linux: field 22
            of ``/proc/<pid>/stat``); ``None`` where there is no ``/proc``. Tells a
            live process from a later one that reuses its pid.
        boot_id: ``/proc/sys/kernel/random/boot_id`` (Linux), else ``None``: a claim
            from an earlier boot of this host is from a dead process.
        pid_namespace: the ``/proc/self/ns/pid`` link (Linux), else ``None``: pids of
            another namespace (a container sharing the host name) cannot be checked.
    """

    host: str
    pid: int
    start_time: int | None = None
    boot_id: str | None = None
    pid_namespace: str | None = None

    def describe(self) -> str:
        """``process 1234 on host h`` (for messages)."""
        return f"process {self.pid} on host {self.host}"


def process_start_time(pid: int) -> int | None:
    """The start time of ``pid`` in clock ticks after boot (field 22 of
    ``/proc/<pid>/stat``), or ``None`` when there is no such process or no ``/proc``."""
    stat = _read_stat(pid)
    return None if stat is None else stat[1]


def _read_stat(pid: int) -> tuple[str, int] | None:
    """``(state, start_time)`` of ``pid`` from ``/proc/<pid>/stat``; ``None`` if absent.

    The command name (field 2) may hold spaces and parentheses, so fields are counted
    after its last ``)``: field 3 (state) is the first, field 22 (start time) the 20th.
    """
    try:
        with open(f"{_PROC}/{pid}/stat", "rb") as fh:
            text = fh.read().decode("ascii", "replace")
    except OSError:
        return None
    rest = text[text.rfind(")") + 1 :].split()
    try:
        return rest[0], int(rest[19])
    except (IndexError, ValueError):
        return None


def _read_text(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as fh:
            return fh.read().strip() or None
    except OSError:
        return None


def _pid_namespace() -> str | None:
    try:
        return os.readlink(f"{_PROC}/self/ns/pid")
    except OSError:
        return None


_current: ProcessIdentity | None = None


def current_process() -> ProcessIdentity:
    """This process's identity (computed once per pid, so a forked child gets its own)."""
    global _current
    pid = os.getpid()
    if _current is None or _current.pid != pid:
        _current = ProcessIdentity(
            socket.gethostname(),
            pid,
            process_start_time(pid),
            _read_text(f"{_PROC}/sys/kernel/random/boot_id"),
            _pid_namespace(),
        )
    return _current


def probe_owner(owner: ProcessIdentity, me: ProcessIdentity) -> tuple[str, str]:
    """Is the recorded ``owner`` alive, as seen from ``me``? Never raises.

    Returns ``(verdict, reason)``: :data:`SELF` (it is this process), :data:`ALIVE`
    (a running process on this host with the recorded start time), :data:`DEAD`
    (provably gone: no such pid, a zombie, pid reuse, or an earlier boot) or
    :data:`UNVERIFIABLE` (another host or PID namespace, no start time recorded, or
    no ``/proc``: cannot be proven either way). ``reason`` is a short explanation.
    """
    if owner == me:
        return SELF, "this process"
    if owner.host != me.host:
        return UNVERIFIABLE, f"it runs on host {owner.host}, not on this host ({me.host})"
    if owner.boot_id is not None and me.boot_id is not None and owner.boot_id != me.boot_id:
        return DEAD, "the host has rebooted since it claimed the agent"
    if (
        owner.pid_namespace is not None
        and me.pid_namespace is not None
        and owner.pid_namespace != me.pid_namespace
    ):
        return UNVERIFIABLE, f"it runs in another PID namespace ({owner.pid_namespace})"
    if os.path.isdir(f"{_PROC}/self"):
        stat = _read_stat(owner.pid)
        if stat is None:
            return DEAD, f"no process {owner.pid} exists"
        state, started = stat
        if state in ("Z", "X"):
            return DEAD, f"process {owner.pid} has exited"
        if owner.start_time is None:
            return UNVERIFIABLE, f"pid {owner.pid} is in use but no start time was recorded"
        if started != owner.start_time:
            return DEAD, f"pid {owner.pid} now belongs to another process (pid reuse)"
        return ALIVE, f"process {owner.pid} is running"
    if os.name != "posix":
        return UNVERIFIABLE, "processes cannot be checked on this platform"
    try:
        os.kill(owner.pid, 0)
    except ProcessLookupError:
        return DEAD, f"no process {owner.pid} exists"
    except OSError:
        pass  # PermissionError: it exists, owned by another user
    return UNVERIFIABLE, f"pid {owner.pid} is in use (pid reuse cannot be ruled out here)"


__all__ = [
    "ALIVE",
    "DEAD",
    "SELF",
    "UNVERIFIABLE",
    "ProcessIdentity",
    "current_process",
    "probe_owner",
    "process_start_time",
]
