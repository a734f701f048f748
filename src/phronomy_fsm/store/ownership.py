"""Which process owns an agent: the ``agent_owners`` claim of the barrier store.

Owns: the identity of a process (:class:`ProcessIdentity`: host name, pid, start time,
boot id, PID namespace), the liveness check of a recorded owner (:func:`probe_owner`),
the claim rule (:func:`decide_claim`), and the SQL of a claim, a release and a read
(called by :class:`~phronomy_fsm.store.sqlite.SqliteBarrierStore` inside its own
``BEGIN IMMEDIATE`` transactions). It must not open connections or import the agent
layer.

Why: the barriers make an execution durable, but they do not say *who* is running it.
Without a claim a second process could load an agent a live process still runs, find
its in-flight tool call "may or may not have run", and have an operator answer
``not_performed`` while the tool is still running in the first process. A claim
records the owning process per agent; a claimant takes over only from a process that
is provably gone (docs/operations.md "Who owns an agent").

The rule (one transaction, :func:`claim_in_transaction`):

- no row → claim (a fresh random owner token, ``holds`` 1);
- a row of this very process (same host, boot, PID namespace, pid and start time) →
  re-enter: ``holds`` + 1, same token (several runtimes or CLI calls in one process);
- a row of a process on this host that is gone (no such pid, a zombie, or the pid now
  belongs to a process with another start time — pid reuse — or the host rebooted
  since) → take over (new token, logged at WARNING);
- a row of a live process on this host → :class:`~phronomy_fsm.errors.AgentOwnedError`;
- a row from another host or PID namespace, or one whose liveness cannot be proven
  (no start time to compare, a platform without ``/proc``) → treated as live:
  AgentOwnedError unless ``takeover=True`` (an operator who knows the owner is gone).
  One store file is used from one host; SQLite over a network filesystem is not
  supported.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import sqlite3
from datetime import datetime
from typing import Any

import attrs

from phronomy_fsm.errors import AgentOwnedError, NotFoundError
from phronomy_fsm.store.records import epoch_ms_to_datetime

log = logging.getLogger("phronomy_fsm.store")

#: Liveness verdicts of :func:`probe_owner`.
SELF = "self"
ALIVE = "alive"
DEAD = "dead"
UNVERIFIABLE = "unverifiable"

_PROC = "/proc"


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


@attrs.frozen
class OwnerRecord:
    """One row of ``agent_owners``: the process that owns ``agent_id``.

    ``holds`` counts the claims of that process not yet released (a process may
    claim an agent more than once, e.g. from two runtimes); the row goes when it
    reaches zero. ``claimed_at`` is when the row was written (aware UTC, ms).
    """

    agent_id: str
    process: ProcessIdentity
    owner_token: str
    holds: int
    claimed_at: datetime

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (``claimed_at`` in ISO 8601, without the token)."""
        return {
            "agent_id": self.agent_id,
            "host": self.process.host,
            "pid": self.process.pid,
            "start_time": self.process.start_time,
            "boot_id": self.process.boot_id,
            "pid_namespace": self.process.pid_namespace,
            "holds": self.holds,
            "claimed_at": self.claimed_at.isoformat(),
        }


@attrs.frozen
class AgentClaim:
    """What a successful :meth:`~phronomy_fsm.store.base.BarrierStore.claim_agent` did.

    Attributes:
        agent_id: the agent.
        owner_token: pass it to ``release_agent`` (exactly once per claim).
        reentered: this process already owned the agent (``holds`` went up by one).
        replaced: the previous owner taken over (dead, or ``takeover=True``), else
            ``None``.
        reason: why the previous owner was replaced (``None`` when nothing was).
    """

    agent_id: str
    owner_token: str
    reentered: bool = False
    replaced: OwnerRecord | None = None
    reason: str | None = None


def decide_claim(
    existing: OwnerRecord | None, me: ProcessIdentity, *, takeover: bool
) -> tuple[str, str | None]:
    """The claim rule (module docstring): ``("insert" | "reenter" | "replace", reason)``.

    Raises:
        AgentOwnedError: ``existing`` is a live process, or an unverifiable one and
            ``takeover`` is false.
    """
    if existing is None:
        return "insert", None
    verdict, reason = probe_owner(existing.process, me)
    if verdict == SELF:
        return "reenter", None
    if verdict == DEAD or (verdict == UNVERIFIABLE and takeover):
        return "replace", reason if verdict == DEAD else f"takeover requested; {reason}"
    owner = existing.process
    claimed = existing.claimed_at.isoformat(timespec="seconds")
    what = f"agent {existing.agent_id!r} is owned by {owner.describe()} (claimed {claimed})"
    if verdict == ALIVE:
        message = (
            f"{what}, which is still running. Stop that process (its executions stay durable) "
            "or approve/cancel through it; then load the agent here."
        )
    else:
        message = (
            f"{what}; {reason}, so it is treated as running. Stop that process (its "
            "executions stay durable) or approve/cancel through it. If you know it is gone, "
            "take the agent over with Agent.load(..., takeover=True) or --takeover (one store "
            "file is used from one host; SQLite over a network filesystem is not supported)."
        )
    raise AgentOwnedError(
        message,
        agent_id=existing.agent_id,
        host=owner.host,
        pid=owner.pid,
        start_time=owner.start_time,
        claimed_at=existing.claimed_at.isoformat(),
        verifiable=verdict == ALIVE,
    )


# ----------------------------------------------------------------------- SQL

_COLUMNS = (
    "agent_id, host, pid, start_time, boot_id, pid_namespace, owner_token, holds, claimed_epoch_ms"
)


def _owner_from_row(row: tuple[Any, ...]) -> OwnerRecord:
    agent_id, host, pid, start_time, boot_id, namespace, token, holds, claimed_ms = row
    return OwnerRecord(
        agent_id,
        ProcessIdentity(host, pid, start_time, boot_id, namespace),
        token,
        holds,
        epoch_ms_to_datetime(claimed_ms),
    )


def read_owner(conn: sqlite3.Connection | sqlite3.Cursor, agent_id: str) -> OwnerRecord | None:
    """The ``agent_owners`` row of ``agent_id``, or ``None``. Raises ``sqlite3.Error``."""
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM agent_owners WHERE agent_id = ?", (agent_id,)
    ).fetchone()
    return None if row is None else _owner_from_row(row)


def claim_in_transaction(
    cur: sqlite3.Cursor,
    agent_id: str,
    me: ProcessIdentity,
    *,
    takeover: bool,
    now_ms: int,
    path: str,
) -> AgentClaim:
    """Claim ``agent_id`` for ``me`` inside the caller's ``BEGIN IMMEDIATE``
    transaction (the write lock is held, so the check and the write are atomic
    against every other process).

    Raises:
        NotFoundError: no such agent (nothing written).
        AgentOwnedError: see :func:`decide_claim` (nothing written).
        sqlite3.Error: for the caller to map and roll back.
    """
    if cur.execute("SELECT 1 FROM agents WHERE agent_id = ?", (agent_id,)).fetchone() is None:
        raise NotFoundError(f"no agent {agent_id!r} in {path}", agent_id=agent_id)
    existing = read_owner(cur, agent_id)
    action, reason = decide_claim(existing, me, takeover=takeover)
    if action == "reenter":
        assert existing is not None
        cur.execute(
            "UPDATE agent_owners SET holds = holds + 1 WHERE agent_id = ? AND owner_token = ?",
            (agent_id, existing.owner_token),
        )
        return AgentClaim(agent_id, existing.owner_token, reentered=True)
    token = secrets.token_hex(16)
    cur.execute(
        f"INSERT OR REPLACE INTO agent_owners({_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?)",
        (
            agent_id,
            me.host,
            me.pid,
            me.start_time,
            me.boot_id,
            me.pid_namespace,
            token,
            1,
            now_ms,
        ),
    )
    if action == "replace":
        assert existing is not None
        log.warning(
            "agent %s: taking it over from %s in %s: %s",
            agent_id,
            existing.process.describe(),
            path,
            reason,
        )
        return AgentClaim(agent_id, token, replaced=existing, reason=reason)
    return AgentClaim(agent_id, token)


def release_in_transaction(cur: sqlite3.Cursor, agent_id: str, owner_token: str) -> bool:
    """Release one claim inside the caller's transaction: ``holds`` - 1, the row goes
    at zero. Returns False (and writes nothing) when no row carries ``owner_token``
    (already released, or taken over since). Raises ``sqlite3.Error``."""
    row = cur.execute(
        "SELECT holds FROM agent_owners WHERE agent_id = ? AND owner_token = ?",
        (agent_id, owner_token),
    ).fetchone()
    if row is None:
        return False
    if row[0] > 1:
        cur.execute(
            "UPDATE agent_owners SET holds = holds - 1 WHERE agent_id = ? AND owner_token = ?",
            (agent_id, owner_token),
        )
    else:
        cur.execute(
            "DELETE FROM agent_owners WHERE agent_id = ? AND owner_token = ?",
            (agent_id, owner_token),
        )
    return True
