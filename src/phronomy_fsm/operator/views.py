"""The values the operator's actions return (:mod:`phronomy_fsm.operator`).

Frozen attrs values, each with a ``to_dict()`` JSON form that front ends print with
``--json``: a page of executions, one execution's details (with, for an agent
execution, what the agent was asked, answered and waits for), what a signal, approval,
resolution or cancel wrote, what a recovery did, and what a store migration did. They
hold durable records as read from the store; nothing here reads or writes a store.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import attrs
import orjson

from phronomy_fsm.durable.claims import OtherSpecExecution
from phronomy_fsm.durable.records import (
    BarrierLogRecord,
    EffectRef,
    ExecutionRecord,
    ExecutionStatus,
    JournalEntry,
    SignalRecord,
    to_json,
)
from phronomy_fsm.generated import agent_session, tool_call

#: The machine of an agent's executions (their exclusive key is the agent id).
AGENT_MACHINE = agent_session.MACHINE
#: The machine of an agent's tool calls (child executions of an ``agent_session``).
TOOL_CALL_MACHINE = tool_call.MACHINE
#: Who an execution waits for (:attr:`ExecutionSummary.waits_for`): an operator's
#: resolution, a person's approval (agents), a signal (a wait state of any machine), or
#: a recovery (running with no live worker), or a child that waits for an operator
#: (an agent execution whose tool call is parked: answer the child).
WAITS_FOR_OPERATOR = "operator"
WAITS_FOR_APPROVAL = "approval"
WAITS_FOR_BUDGET = "budget"
WAITS_FOR_SIGNAL = "signal"
WAITS_FOR_RECOVER = "recover"
WAITS_FOR_CHILD = "child"


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

    ``needs_operator`` is True for an execution in ``recovery_required`` (answer it
    with ``phronomy-fsm resolve``); :attr:`waits_for` also names executions that wait
    for a person. For an agent execution (machine ``agent_session``)
    ``exclusive_key`` is its agent id.
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
    has_live_owner: bool = False
    parked_children: tuple[str, ...] = ()

    @property
    def is_agent(self) -> bool:
        """True for an agent's execution (machine ``agent_session``)."""
        return self.machine == AGENT_MACHINE

    @property
    def waits_for(self) -> str | None:
        """Who must act before it moves: ``operator`` (``recovery_required``: answer
        with ``resolve``), ``approval`` (an agent execution waiting for a person's
        decision: ``approve``), ``budget`` (an agent execution waiting in
        ``budget_exhausted``: ``extend-budget``), ``signal`` (a wait state of another machine: ``signal``
        one of the events it awaits, or its timer), ``child`` (running, but one of its
        children — :attr:`parked_children`, an agent's tool call — waits for an
        operator: ``resolve`` the child), ``recover`` (running, but no live worker runs
        it: nothing moves until ``phronomy-fsm recover`` or the application's runtime
        claims it), or ``None``."""
        if self.status == ExecutionStatus.RECOVERY_REQUIRED.value:
            return WAITS_FOR_OPERATOR
        if self.status == ExecutionStatus.WAITING.value:
            if self.is_agent and self.state == agent_session.State.BUDGET_EXHAUSTED.value:
                return WAITS_FOR_BUDGET
            return WAITS_FOR_APPROVAL if self.is_agent else WAITS_FOR_SIGNAL
        if self.status == ExecutionStatus.RUNNING.value and self.parked_children:
            return WAITS_FOR_CHILD
        if self.status == ExecutionStatus.RUNNING.value and not self.has_live_owner:
            return WAITS_FOR_RECOVER
        return None

    @property
    def is_held_by_no_live_worker(self) -> bool:
        """True for an active execution (waiting, running, or waiting for an
        operator) that no live worker holds: a signal, approval or resolution sent to
        it waits in its inbox until ``phronomy-fsm recover`` (or a worker's takeover)
        claims it, and a wait's timer does not fire before then."""
        return self.active and not self.has_live_owner

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form; ``agent_id`` is set for an agent's execution."""
        return {
            "execution_id": self.execution_id,
            "machine": self.machine,
            "state": self.state,
            "status": self.status,
            "revision": self.revision,
            "active": self.active,
            "needs_operator": self.needs_operator,
            "waits_for": self.waits_for,
            "exclusive_key": self.exclusive_key,
            "agent_id": self.exclusive_key if self.is_agent else None,
            "parent_execution_id": self.parent_execution_id,
            "owner_id": self.owner_id,
            "has_live_owner": self.has_live_owner,
            "held_by_no_live_worker": self.is_held_by_no_live_worker,
            "parked_children": list(self.parked_children),
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
class ResultShape:
    """What a ``succeeded`` answer's ``--result`` must be: the payload of the effect's
    ``completed`` event, as the execution's own machine declares it (``docs/spec-format.md``,
    events' ``payload``), or for an agent's LLM call an LLM answer and for its tool
    call the tool's result.

    ``event`` is the event the result is delivered with (``None`` for an agent's
    subject), ``payload_type`` its declared type name (``None``: declared without one),
    ``description`` the event's description (``""`` when none), ``example`` a JSON
    text of that shape when the type is one JSON has (``dict`` -> ``{}``), else ``None``.
    """

    event: str | None
    payload_type: str | None
    description: str = ""
    example: str | None = None

    def describe(self) -> str:
        """One line: the type, the event and its description."""
        kind = self.payload_type or "any JSON value (the event declares no payload type)"
        text = f"JSON of type {kind}"
        if self.event is not None:
            text += f", delivered as the payload of event {self.event}"
        if self.description:
            text += f" ({self.description})"
        return text

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "event": self.event,
            "payload_type": self.payload_type,
            "description": self.description,
            "example": self.example,
            "text": self.describe(),
        }


@attrs.frozen
class WaitEnding:
    """How one stay in a wait state ended, read from the barrier log and the signals.

    ``revision`` is the commit that entered the wait (in ``state``); ``ended_revision``
    the next commit (``None``: it still waits). ``cause`` is ``signal`` (``event``
    delivered by signal ``signal_seq``), ``timer`` (the wait state's timeout event
    ``event``: no signal was consumed and the state has a timer), ``cancel``,
    ``resolution``, or ``unknown`` (the machine's table is not registered, or nothing
    recorded says).
    """

    revision: int
    state: str
    ended_revision: int | None
    cause: str | None
    event: str | None = None
    signal_seq: int | None = None

    def describe(self) -> str:
        """One line: ``r3 waiting in approval: ended at r4 by signal #2 approved``."""
        head = f"r{self.revision} waiting in {self.state}: "
        if self.ended_revision is None:
            return head + "still waiting"
        head += f"ended at r{self.ended_revision} "
        if self.cause == "signal":
            return head + f"by signal #{self.signal_seq} {self.event}"
        if self.cause == "timer":
            return head + f"by its timer ({self.event})"
        if self.cause in ("cancel", "resolution"):
            return head + f"by a {self.cause} (signal #{self.signal_seq})"
        return head + "(cause not recorded)"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {**attrs.asdict(self), "text": self.describe()}


@attrs.frozen
class RecoveryRequest:
    """Why an execution waits for an operator, and how to answer.

    ``subject`` is the effect whose outcome is unknown (``None``: the execution as a
    whole, which may only be ended ``failed``); ``allowed_outcomes`` are what may be
    answered; ``commands`` holds, per allowed outcome in that order, the exact
    ``phronomy-fsm resolve`` command (shell-quoted; a result or error text to fill in
    is written as a placeholder that is not JSON, such as :data:`RESULT_PLACEHOLDER`
    or :data:`ERROR_PLACEHOLDER`, so a command pasted unchanged is refused).

    For an agent's execution or one of its tool calls, ``agent_id`` names the agent
    and ``agent_subject`` says in the agent's terms what the effect was
    (:func:`phronomy_fsm.agent.directory.recovery_subject`: ``{"type": "llm_call",
    "llm_call_id", ...}`` or ``{"type": "tool_invocation", "tool_invocation_id",
    "tool_name", "arguments", ...}``); the commands then carry a ``--subject`` check.
    ``result_shape`` says what a ``succeeded`` answer's result must be (``None`` when
    ``succeeded`` is not allowed or the machine's table is not registered).
    """

    execution_id: str
    revision: int
    reason: str
    subject: EffectRef | None
    allowed_outcomes: tuple[str, ...]
    detected_at: datetime
    commands: tuple[str, ...]
    agent_id: str | None = None
    agent_subject: Mapping[str, Any] | None = None
    parent_execution_id: str | None = None
    result_shape: ResultShape | None = None

    def describe_subject(self) -> str:
        """One line naming the subject: for an agent, the LLM call or the tool call
        with its arguments; otherwise the effect with its kind, state, idempotency key
        and attempt, or ``the execution as a whole``."""
        s = self.subject
        if s is None:
            return "the execution as a whole"
        agent = self.agent_subject or {}
        kind = agent.get("type")
        if kind == "llm_call":
            call = agent.get("llm_call_id")
            return (
                f"LLM call {call} of agent {self.agent_id}: it may have been sent and "
                f"answered (the provider got it with idempotency key {call}; attempt "
                f"{s.attempt})"
            )
        if kind == "tool_invocation":
            call = agent.get("tool_invocation_id")
            arguments = json.dumps(agent.get("arguments"), sort_keys=True, ensure_ascii=False)
            return (
                f"tool call {call} of agent {self.agent_id}: {agent.get('tool_name')} "
                f"{arguments} may have run (the tool got idempotency key {call}; attempt "
                f"{s.attempt})"
            )
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
            "subject_text": self.describe_subject(),
            "agent_id": self.agent_id,
            "agent_subject": None if self.agent_subject is None else dict(self.agent_subject),
            "parent_execution_id": self.parent_execution_id,
            "allowed_outcomes": list(self.allowed_outcomes),
            "detected_at": self.detected_at.isoformat(),
            "resolve_commands": list(self.commands),
            "result_shape": None if self.result_shape is None else self.result_shape.to_dict(),
        }


@attrs.frozen
class ApprovalItemView:
    """One tool call of an approval request: its tool invocation id, the tool, its
    validated arguments and why it needs a person."""

    tool_invocation_id: str
    tool_name: str
    arguments: Any = None
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return attrs.asdict(self)


@attrs.frozen
class ApprovalView:
    """An agent execution's approval request: its id, its items, whether it was
    decided, and — while it is pending — the ``phronomy-fsm approve`` commands that
    decide it (approve, then reject)."""

    request_id: str
    items: tuple[ApprovalItemView, ...]
    decided: bool = False
    decisions: Mapping[str, bool] | None = None
    commands: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "request_id": self.request_id,
            "items": [item.to_dict() for item in self.items],
            "decided": self.decided,
            "decisions": None if self.decisions is None else dict(self.decisions),
            "approve_commands": list(self.commands),
        }


@attrs.frozen
class BudgetView:
    """An agent execution's budget (``docs/agent.md``, "Budgets"): ``limits`` (limit
    name → value or None), ``spent`` (``tokens``, ``llm_calls``, ``tool_calls``,
    ``cost_usd``), ``on_exhausted`` (``fail`` or ``wait``), ``request`` (the pending or
    last budget request: ``request_id``, ``limit``, ``spent``, ``allowed``, ``call``,
    ``decided``), ``pending`` (it waits for an extension now) and, then, the
    ``extend-budget`` command that answers it."""

    limits: Mapping[str, Any]
    spent: Mapping[str, Any]
    on_exhausted: str
    request: Mapping[str, Any] | None = None
    pending: bool = False
    command: str | None = None

    def rows(self) -> list[tuple[str, Any, Any]]:
        """``(limit, spent, allowed)`` for each limit, in a fixed order."""
        spent_key = {
            "max_tokens": "tokens",
            "max_llm_calls": "llm_calls",
            "max_tool_calls": "tool_calls",
            "max_cost_usd": "cost_usd",
        }
        return [
            (name, self.spent.get(key), self.limits.get(name)) for name, key in spent_key.items()
        ]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "limits": dict(self.limits),
            "spent": dict(self.spent),
            "on_exhausted": self.on_exhausted,
            "request": None if self.request is None else dict(self.request),
            "pending": self.pending,
            "command": self.command,
        }


@attrs.frozen
class MessageView:
    """One message of an agent execution's conversation: ``role`` (``user``,
    ``assistant``, ``tool``), its text, the tool calls an assistant message asks for
    (``name(arguments)`` each) and, for a tool message, the tool's name."""

    role: str
    text: str | None
    tool_calls: tuple[str, ...] = ()
    name: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "role": self.role,
            "text": self.text,
            "tool_calls": list(self.tool_calls),
            "name": self.name,
        }


@attrs.frozen
class AgentView:
    """The agent's side of an agent execution (``kind`` ``session``) or of one of its
    tool calls (``kind`` ``tool_call``), read from the stored context.

    Session: ``input`` as received, ``messages`` (this execution's conversation),
    ``output`` (the final answer), ``outcome`` (how it ended), ``error`` (``Type:
    message``), ``approval`` (the pending or last approval request) and ``tool_calls``
    (the ids of its tool-call executions), ``budget`` (:class:`BudgetView`, when it
    has one). Tool call: ``tool_name``, ``arguments``,
    ``result`` or ``error``, and ``parent_execution_id`` (the agent's execution).
    """

    kind: str
    agent_id: str
    input: Any = None
    messages: tuple[MessageView, ...] = ()
    output: str | None = None
    outcome: str | None = None
    error: str | None = None
    approval: ApprovalView | None = None
    tool_calls: tuple[str, ...] = ()
    tool_name: str | None = None
    budget: BudgetView | None = None
    arguments: Any = None
    result: Any = None
    parent_execution_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "kind": self.kind,
            "agent_id": self.agent_id,
            "input": self.input,
            "messages": [m.to_dict() for m in self.messages],
            "output": self.output,
            "outcome": self.outcome,
            "error": self.error,
            "approval": None if self.approval is None else self.approval.to_dict(),
            "tool_calls": list(self.tool_calls),
            "tool_name": self.tool_name,
            "arguments": self.arguments,
            "result": self.result,
            "parent_execution_id": self.parent_execution_id,
            "budget": None if self.budget is None else self.budget.to_dict(),
        }


@attrs.frozen
class ExecutionDetail:
    """What :func:`describe_execution` returns for an execution of any machine.

    ``awaits`` are the events a ``waiting`` execution takes by signal (its timer's
    event is never among them: a timer is not a signal a person sends);
    ``wait_endings`` say how each stay in a wait state ended (:class:`WaitEnding`);
    ``recovery`` is set while it waits for an operator; ``owner`` is the worker that
    owns it (``None``: never claimed); ``agent`` is the agent's side of an agent's
    execution or tool call (``None`` for other machines).
    """

    record: ExecutionRecord
    barriers: tuple[BarrierLogRecord, ...]
    signals: tuple[SignalRecord, ...]
    journal: tuple[JournalEntry, ...]
    owner: WorkerLease | None
    awaits: tuple[str, ...] = ()
    recovery: RecoveryRequest | None = None
    agent: AgentView | None = None
    wait_endings: tuple[WaitEnding, ...] = ()

    @property
    def is_held_by_no_live_worker(self) -> bool:
        """As :attr:`ExecutionSummary.is_held_by_no_live_worker`."""
        return self.record.is_active and (self.owner is None or not self.owner.is_live)

    @property
    def needs_operator(self) -> bool:
        """True while the execution is in ``recovery_required``."""
        return self.record.status is ExecutionStatus.RECOVERY_REQUIRED

    @property
    def waits_for(self) -> str | None:
        """As :attr:`ExecutionSummary.waits_for`."""
        if self.needs_operator:
            return WAITS_FOR_OPERATOR
        if self.record.status is ExecutionStatus.WAITING:
            if (
                self.record.machine == AGENT_MACHINE
                and self.record.state == agent_session.State.BUDGET_EXHAUSTED.value
            ):
                return WAITS_FOR_BUDGET
            return WAITS_FOR_APPROVAL if self.record.machine == AGENT_MACHINE else WAITS_FOR_SIGNAL
        return None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form: the summary keys, then ``agent`` (see :class:`AgentView`),
        ``execution`` (the stored record), ``barriers``, ``signals``, ``journal``,
        ``owner`` and ``recovery``."""
        r = self.record
        return {
            "execution_id": r.execution_id,
            "machine": r.machine,
            "status": r.status.value,
            "state": r.state,
            "revision": r.revision,
            "point": r.point.value,
            "needs_operator": self.needs_operator,
            "waits_for": self.waits_for,
            "pending_effects": list(r.pending_effects),
            "awaits": list(self.awaits),
            "owner": None if self.owner is None else self.owner.to_dict(),
            "held_by_no_live_worker": self.is_held_by_no_live_worker,
            "recovery": None if self.recovery is None else self.recovery.to_dict(),
            "agent": None if self.agent is None else self.agent.to_dict(),
            "context": r.context,
            "wait_endings": [w.to_dict() for w in self.wait_endings],
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
    operator, or has finished, with nothing in its inbox it would act on;
    ``approval`` is an agent execution's pending approval request, with the commands
    that decide it.
    """

    record: ExecutionRecord
    found_status: str | None
    at_rest: bool
    owner: WorkerLease | None = None
    awaits: tuple[str, ...] = ()
    recovery: RecoveryRequest | None = None
    approval: ApprovalView | None = None

    @property
    def execution_id(self) -> str:
        """The execution's id."""
        return self.record.execution_id

    @property
    def needs_operator(self) -> bool:
        """True when it waits for an operator (``recovery_required``)."""
        return self.record.status is ExecutionStatus.RECOVERY_REQUIRED

    @property
    def agent_id(self) -> str | None:
        """The agent of an agent's execution or tool call (its ``agent_id`` label)."""
        value = self.record.labels.get("agent_id")
        return value if isinstance(value, str) else None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        r = self.record
        return {
            "execution_id": r.execution_id,
            "machine": r.machine,
            "agent_id": self.agent_id,
            "parent_execution_id": r.parent_execution_id,
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
            "approval": None if self.approval is None else self.approval.to_dict(),
        }


@attrs.frozen
class StoreRecoveryReport:
    """What :func:`recover_store` did.

    ``executions`` are those this process claimed and those a live worker owns (with
    their state after the wait), in the store's order; ``unknown_machine`` are active
    ``(execution_id, machine)`` pairs of machines the application does not run (the
    agent layer's excepted); ``other_spec`` are the executions of its machines, owned
    by no live worker, that it left because it runs none of their specs
    (:class:`~phronomy_fsm.durable.OtherSpecExecution`; ``docs/scale-out.md``,
    "Rolling upgrades"); ``wait_seconds`` is how long it waited for rest.
    """

    executions: tuple[RecoveredExecution, ...]
    unknown_machine: tuple[tuple[str, str], ...] = ()
    wait_seconds: float = 0.0
    other_spec: tuple[OtherSpecExecution, ...] = ()

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
            "other_spec": [
                {
                    "execution_id": e.execution_id,
                    "machine": e.machine,
                    "spec_version": e.spec_version,
                    "spec_sha256": e.spec_sha256,
                }
                for e in self.other_spec
            ],
            "wait_seconds": round(self.wait_seconds, 3),
        }


@attrs.frozen
class MigrationReport:
    """What :func:`migrate_store` did: the store's ``path`` and its schema version
    ``before`` and ``after`` (equal when it was current already)."""

    path: str
    before: int
    after: int

    @property
    def migrated(self) -> bool:
        """True when the schema changed."""
        return self.before != self.after

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"path": self.path, "before": self.before, "after": self.after}


__all__ = [
    "AGENT_MACHINE",
    "TOOL_CALL_MACHINE",
    "WAITS_FOR_APPROVAL",
    "WAITS_FOR_BUDGET",
    "WAITS_FOR_CHILD",
    "WAITS_FOR_OPERATOR",
    "WAITS_FOR_RECOVER",
    "WAITS_FOR_SIGNAL",
    "AgentView",
    "ApprovalItemView",
    "ApprovalView",
    "BudgetView",
    "ExecutionDetail",
    "ExecutionPage",
    "ExecutionSummary",
    "InboxReceipt",
    "MessageView",
    "MigrationReport",
    "RecoveredExecution",
    "RecoveryRequest",
    "ResultShape",
    "StoreRecoveryReport",
    "WaitEnding",
    "WorkerLease",
]
