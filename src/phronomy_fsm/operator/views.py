"""The values the operator's actions return (:mod:`phronomy_fsm.operator`).

Frozen attrs values, each with a ``to_dict()`` JSON form that front ends print with
``--json``: a page of executions, one execution's details, what a signal, resolution
or cancel wrote, and what a recovery did. They hold durable records as read from the
store; nothing here reads or writes a store.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

import attrs
import orjson

from phronomy_fsm.durable.records import (
    BarrierLogRecord,
    EffectRef,
    ExecutionRecord,
    ExecutionStatus,
    JournalEntry,
    SignalRecord,
    to_json,
)

#: The machine of agent executions (their exclusive key is the agent id).
AGENT_MACHINE = "agent_session"


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _data(record: Any) -> Any:
    """The JSON data of a durable record (its canonical JSON, decoded)."""
    return orjson.loads(to_json(record))


# ------------------------------------------------------------------ value types


@attrs.frozen
class WorkerLease:
    """The worker that owns an engine execution, and whether it still runs it.

    ``is_live`` is True while ``lease_expires_at`` has not passed and its process is
    not provably gone (``process_gone``: a process of this host that no longer
    exists): that worker applies what reaches the execution's inbox. Otherwise no
    process runs the execution, and nothing happens to it until ``phronomy-fsm
    recover`` (or a runtime's ``recover()``) claims it. ``host``/``pid`` are ``None``
    when the worker row is gone.
    """

    worker_id: str
    is_live: bool
    lease_expires_at: datetime | None = None
    host: str | None = None
    pid: int | None = None
    process_gone: bool = False

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "worker_id": self.worker_id,
            "is_live": self.is_live,
            "lease_expires_at": _iso(self.lease_expires_at),
            "host": self.host,
            "pid": self.pid,
            "process_gone": self.process_gone,
        }


@attrs.frozen
class ExecutionSummary:
    """One row of :func:`list_executions`: an execution of any machine.

    ``needs_operator`` is True for an execution in ``recovery_required``. For an
    agent execution (machine ``agent_session``) ``exclusive_key`` is its agent id.
    """

    execution_id: str
    machine: str
    state: str
    status: str
    revision: int
    active: bool
    needs_operator: bool
    created_at: datetime
    updated_at: datetime
    exclusive_key: str | None = None
    parent_execution_id: str | None = None
    owner_id: str | None = None
    deadline_at: datetime | None = None

    @property
    def is_agent(self) -> bool:
        """True for an agent execution (machine ``agent_session``)."""
        return self.machine == AGENT_MACHINE

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form; agent executions also carry ``agent_id`` and ``phase`` (its
        state; both ``None`` for other machines), as ``executions list --json`` always
        printed them."""
        return {
            "execution_id": self.execution_id,
            "machine": self.machine,
            "state": self.state,
            "status": self.status,
            "revision": self.revision,
            "active": self.active,
            "needs_operator": self.needs_operator,
            "exclusive_key": self.exclusive_key,
            "agent_id": self.exclusive_key if self.is_agent else None,
            "phase": self.state if self.is_agent else None,
            "parent_execution_id": self.parent_execution_id,
            "owner_id": self.owner_id,
            "created_at": self.created_at.isoformat(),
            "updated_at": self.updated_at.isoformat(),
            "deadline_at": _iso(self.deadline_at),
        }


@attrs.frozen
class ExecutionPage:
    """What :func:`list_executions` returns: one page of executions, oldest first.

    ``counts`` is ``{status: n}`` over the machine and exclusive-key filters (not
    the status filter); ``total`` is how many match every filter; ``offset`` and
    ``limit`` are the page's (``limit`` ``None``: no limit).
    """

    executions: tuple[ExecutionSummary, ...]
    counts: Mapping[str, int]
    total: int
    offset: int = 0
    limit: int | None = None

    @property
    def has_more(self) -> bool:
        """True when executions after this page match too."""
        return self.offset + len(self.executions) < self.total

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "executions": [e.to_dict() for e in self.executions],
            "counts": dict(sorted(self.counts.items())),
            "total": self.total,
            "offset": self.offset,
            "limit": self.limit,
        }


@attrs.frozen
class RecoveryRequest:
    """Why an engine execution waits for an operator, and how to answer.

    ``subject`` is the effect whose outcome is unknown (``None``: the execution as a
    whole, which may only be ended ``failed``); ``allowed_outcomes`` are what may be
    answered; ``commands`` holds, per allowed outcome in that order, the exact
    ``phronomy-fsm resolve`` command (shell-quoted; a result or error text to fill in
    is written as :data:`RESULT_PLACEHOLDER` / :data:`ERROR_PLACEHOLDER`).
    """

    execution_id: str
    revision: int
    reason: str
    subject: EffectRef | None
    allowed_outcomes: tuple[str, ...]
    detected_at: datetime
    commands: tuple[str, ...]

    def describe_subject(self) -> str:
        """One line naming the subject: the effect with its kind, state, idempotency
        key and attempt, or ``the execution as a whole``."""
        s = self.subject
        if s is None:
            return "the execution as a whole"
        return (
            f"effect {s.effect} ({s.kind.value}) in state {s.state}, idempotency key {s.key}, "
            f"attempt {s.attempt}"
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "execution_id": self.execution_id,
            "expected_revision": self.revision,
            "reason": self.reason,
            "subject": None if self.subject is None else _data(self.subject),
            "allowed_outcomes": list(self.allowed_outcomes),
            "detected_at": self.detected_at.isoformat(),
            "resolve_commands": list(self.commands),
        }


@attrs.frozen
class ExecutionDetail:
    """What :func:`describe_execution` returns for an engine execution.

    ``awaits`` are the events a ``waiting`` execution takes by signal (its timer aside);
    ``recovery`` is set while it waits for an operator; ``owner`` is the worker that
    owns it (``None``: never claimed).
    """

    record: ExecutionRecord
    barriers: tuple[BarrierLogRecord, ...]
    signals: tuple[SignalRecord, ...]
    journal: tuple[JournalEntry, ...]
    owner: WorkerLease | None
    awaits: tuple[str, ...] = ()
    recovery: RecoveryRequest | None = None

    @property
    def needs_operator(self) -> bool:
        """True while the execution is in ``recovery_required``."""
        return self.record.status is ExecutionStatus.RECOVERY_REQUIRED

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form: the summary keys, then ``execution`` (the stored record),
        ``barriers``, ``signals``, ``journal``, ``owner`` and ``recovery``."""
        r = self.record
        return {
            "execution_id": r.execution_id,
            "machine": r.machine,
            "status": r.status.value,
            "state": r.state,
            "revision": r.revision,
            "point": r.point.value,
            "needs_operator": self.needs_operator,
            "pending_effects": list(r.pending_effects),
            "awaits": list(self.awaits),
            "owner": None if self.owner is None else self.owner.to_dict(),
            "recovery": None if self.recovery is None else self.recovery.to_dict(),
            "execution": _data(r),
            "barriers": [
                {
                    "revision": b.revision,
                    "barrier": b.barrier,
                    "committed_at": b.committed_at.isoformat(),
                    "status": b.status,
                    "state": b.state,
                    "digest": b.digest,
                }
                for b in self.barriers
            ],
            "signals": [_data(s) for s in self.signals],
            "journal": [_data(j) for j in self.journal],
        }


@attrs.frozen
class InboxReceipt:
    """What a signal, resolution or cancel wrote: the stored ``signal`` (with its
    ``seq``) and the execution's ``owner`` when it was written. With a live owner that
    worker applies it promptly; otherwise it waits in the inbox until the execution is
    recovered."""

    signal: SignalRecord
    owner: WorkerLease | None

    @property
    def is_applied_by_live_owner(self) -> bool:
        """True when a live worker owns the execution (it applies the entry)."""
        return self.owner is not None and self.owner.is_live

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "signal": _data(self.signal),
            "owner": None if self.owner is None else self.owner.to_dict(),
            "applied_by_live_owner": self.is_applied_by_live_owner,
        }


@attrs.frozen
class RecoveredExecution:
    """One execution as :func:`recover_store` left it.

    ``found_status`` is the status it was claimed in (``None`` when this process did
    not claim it: a live worker owns it); ``record`` is as stored after the wait;
    ``at_rest`` is True once it waits (for a signal or its timer), waits for an
    operator, or has finished, with nothing in its inbox it would act on.
    """

    record: ExecutionRecord
    found_status: str | None
    at_rest: bool
    owner: WorkerLease | None = None
    awaits: tuple[str, ...] = ()
    recovery: RecoveryRequest | None = None

    @property
    def execution_id(self) -> str:
        """The execution's id."""
        return self.record.execution_id

    @property
    def needs_operator(self) -> bool:
        """True when it waits for an operator (``recovery_required``)."""
        return self.record.status is ExecutionStatus.RECOVERY_REQUIRED

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        r = self.record
        return {
            "execution_id": r.execution_id,
            "machine": r.machine,
            "status": r.status.value,
            "state": r.state,
            "revision": r.revision,
            "found_status": self.found_status,
            "claimed": self.found_status is not None,
            "at_rest": self.at_rest,
            "needs_operator": self.needs_operator,
            "awaits": list(self.awaits),
            "deadline_at": _iso(r.deadline_at),
            "error": None if r.error is None else r.error.render(),
            "owner": None if self.owner is None else self.owner.to_dict(),
            "recovery": None if self.recovery is None else self.recovery.to_dict(),
        }


@attrs.frozen
class StoreRecoveryReport:
    """What :func:`recover_store` did.

    ``executions`` are those this process claimed and those a live worker owns (with
    their state after the wait), in the store's order; ``unknown_machine`` are active
    ``(execution_id, machine)`` pairs of machines the application does not run (the
    agent layer's excepted); ``wait_seconds`` is how long it waited for rest.
    """

    executions: tuple[RecoveredExecution, ...]
    unknown_machine: tuple[tuple[str, str], ...] = ()
    wait_seconds: float = 0.0

    @property
    def needs_operator(self) -> tuple[RecoveredExecution, ...]:
        """The executions left waiting for an operator."""
        return tuple(e for e in self.executions if e.needs_operator)

    @property
    def not_at_rest(self) -> tuple[RecoveredExecution, ...]:
        """Claimed executions still moving when the wait ended."""
        return tuple(e for e in self.executions if e.found_status is not None and not e.at_rest)

    def get(self, execution_id: str) -> RecoveredExecution | None:
        """The entry of ``execution_id``, if the report has one."""
        return next((e for e in self.executions if e.execution_id == execution_id), None)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "executions": [e.to_dict() for e in self.executions],
            "unknown_machine": [
                {"execution_id": eid, "machine": machine} for eid, machine in self.unknown_machine
            ],
            "wait_seconds": round(self.wait_seconds, 3),
        }


__all__ = [
    "AGENT_MACHINE",
    "ExecutionDetail",
    "ExecutionPage",
    "ExecutionSummary",
    "InboxReceipt",
    "RecoveredExecution",
    "RecoveryRequest",
    "StoreRecoveryReport",
    "WorkerLease",
]
