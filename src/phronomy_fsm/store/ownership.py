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
import secrets
import sqlite3
from datetime import datetime
from typing import Any

import attrs

from phronomy_fsm.errors import AgentOwnedError, NotFoundError
from phronomy_fsm.runtime.processes import (
    ALIVE,
    DEAD,
    SELF,
    UNVERIFIABLE,
    ProcessIdentity,
    current_process,
    probe_owner,
    process_start_time,
)
from phronomy_fsm.store.records import epoch_ms_to_datetime

log = logging.getLogger("phronomy_fsm.store")


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


__all__ = [
    "ALIVE",
    "DEAD",
    "SELF",
    "UNVERIFIABLE",
    "AgentClaim",
    "OwnerRecord",
    "ProcessIdentity",
    "claim_in_transaction",
    "current_process",
    "decide_claim",
    "probe_owner",
    "process_start_time",
    "read_owner",
    "release_in_transaction",
]
