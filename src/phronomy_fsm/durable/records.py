"""The durable facts of the engine: executions, commits, signals, workers, machines.

Frozen attrs values with canonical JSON (:mod:`phronomy_fsm.durable.codec`). They are
what every store backend keeps for any machine (``docs/semantics.md`` "What is
stored"); the engine (:mod:`phronomy_fsm.durable.runtime`) builds them and the stores
(:mod:`phronomy_fsm.store`) write them. Records know nothing of the dispatcher.

Vocabulary: an **execution** is one durable run of a machine; its **revision** rises by
exactly one per commit; a **durable point** says how recovery resumes it (enter the
initial state, replay a committed barrier, wait again, or nothing: it is final); an
**effect** is an offload that touches the outside world, of a declared **kind**; a
**signal** is an event sent to an execution from anywhere, kept in its durable inbox
until the execution consumes it in a commit.
"""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Any

import attrs

from phronomy_fsm.durable.codec import (
    make_converter,
    record_from_json,
    record_to_json,
    record_to_json_bytes,
)

JSON = Any


class ExecutionStatus(enum.StrEnum):
    """Durable status of an execution (``docs/operations.md``, "What the statuses mean").

    - ``running``: the machine is moving (its last commit was a start, a barrier or a
      resolution); recovery resumes it from that point;
    - ``waiting``: halted in a wait state until a signal or its timer;
    - ``recovery_required``: an effect may or may not have happened and its kind
      forbids running it again; an operator must resolve it;
    - ``completed`` / ``failed`` / ``cancelled``: finished (a final state was reached,
      an error ended it, or it was cancelled). Nothing leaves these.
    """

    RUNNING = "running"
    WAITING = "waiting"
    RECOVERY_REQUIRED = "recovery_required"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


ACTIVE_STATUSES = frozenset(
    {ExecutionStatus.RUNNING, ExecutionStatus.WAITING, ExecutionStatus.RECOVERY_REQUIRED}
)
FINISHED_STATUSES = frozenset(
    {ExecutionStatus.COMPLETED, ExecutionStatus.FAILED, ExecutionStatus.CANCELLED}
)


class DurablePoint(enum.StrEnum):
    """How recovery resumes an execution from its last commit.

    - ``start``: revision 0; enter the initial state as if new;
    - ``barrier``: the barrier of ``state`` committed; replay its committed outcome;
    - ``wait``: halted in the wait state ``state`` (timers re-armed from the stored
      deadline);
    - ``effect``: the effect ``announced`` of ``state`` may have started: its work is
      started again from the stored context and ``effect_payload``, under the
      recovery rules of its kind (``docs/semantics.md``, "Effects");
    - ``final``: finished in ``state`` (a final state) or by an error or cancel.
    """

    START = "start"
    BARRIER = "barrier"
    WAIT = "wait"
    EFFECT = "effect"
    FINAL = "final"


class EffectKind(enum.StrEnum):
    """What may happen to an effect whose outcome a crash left unknown
    (``docs/semantics.md`` "Effects")."""

    PURE = "pure"
    IDEMPOTENT = "idempotent"
    AT_MOST_ONCE = "at_most_once"


class ResolutionOutcome(enum.StrEnum):
    """What an operator says about an effect whose outcome is unknown.

    ``succeeded`` (with its result: the effect's completed event gets it),
    ``failed`` (with an error text: its failed event gets an EffectFailedError),
    ``not_performed`` (its failed event gets an EffectNotPerformedError; nothing is
    sent again), ``retry`` (run it again, as a new attempt: the operator takes the
    risk of a second effect)."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    NOT_PERFORMED = "not_performed"
    RETRY = "retry"


class SignalKind(enum.StrEnum):
    """What a signal asks for: an ``event`` of the machine, an operator ``resolution``,
    a ``cancel``, or a ``child`` execution's completion for its parent."""

    EVENT = "event"
    RESOLUTION = "resolution"
    CANCEL = "cancel"
    CHILD = "child"


@attrs.frozen
class ErrorInfo:
    """A durable description of an error: class name, message, optional JSON details."""

    type: str
    message: str
    details: dict[str, JSON] = attrs.field(factory=dict)

    @classmethod
    def from_exception(cls, exc: BaseException) -> ErrorInfo:
        """Describe ``exc`` by its class name and ``str(exc)``."""
        return cls(type(exc).__name__, str(exc))

    def render(self) -> str:
        """``Type: message``."""
        return f"{self.type}: {self.message}"


@attrs.frozen
class EffectRef:
    """One effect the engine started, or is about to start, after a commit.

    ``effect`` is the offload hook's name, ``state`` the state whose entry (or whose
    incoming transition) starts it, ``key`` its idempotency key
    (:func:`phronomy_fsm.durable.keys.idempotency_key`), ``attempt`` 1 for the first
    run and one more for each operator ``retry``."""

    effect: str
    kind: EffectKind
    state: str
    key: str
    attempt: int = 1


@attrs.frozen
class RecoveryInfo:
    """Why an execution waits for an operator and what may be answered: the
    **recovery question** stored on an execution in ``recovery_required``
    (:attr:`ExecutionRecord.recovery`; ``docs/semantics.md``, "Operator resolution").

    Attributes:
        reason: why it was parked, in words (``the at_most_once effect charge_card may
            or may not have run before the process stopped``, ``spec_changed: ...``).
        subject: the effect whose outcome is unknown (an :class:`EffectRef`: its hook
            ``effect``, ``kind``, ``state``, idempotency ``key`` and ``attempt``), or
            ``None``: the execution as a whole (its spec changed, its context cannot
            be read), which only ``failed`` ends.
        allowed_outcomes: the :class:`ResolutionOutcome` values an answer may give
            (an ``at_most_once`` effect: ``succeeded``, ``failed``, ``not_performed``,
            ``retry``).
        detected_at: when it was parked (UTC).

    A ``succeeded`` answer's result becomes the payload of the effect's completed
    event; :func:`phronomy_fsm.operator.result_shape` says which type its machine
    declares."""

    reason: str
    subject: EffectRef | None
    allowed_outcomes: tuple[str, ...]
    detected_at: datetime


@attrs.frozen
class ResolutionInfo:
    """An operator's answer, committed before the engine acts on it."""

    outcome: ResolutionOutcome
    subject: EffectRef | None
    resolved_at: datetime
    signal_id: str
    result: JSON = None
    error: str | None = None


@attrs.frozen
class KeyOrigin:
    """Where an execution forked from a past commit takes its idempotency keys from
    (``docs/operations.md``, "Fork and restart from a past commit"): its revision
    ``r`` is revision ``revision + r`` of ``execution_id`` for
    :func:`~phronomy_fsm.durable.keys.idempotency_key`, so an effect it runs again
    on the same path carries the key the first run used."""

    execution_id: str
    revision: int


@attrs.frozen
class ExecutionRecord:
    """One execution of a machine, as committed by its last commit.

    Attributes:
        execution_id: unique id (1-128 printable characters, no whitespace).
        machine: the machine's name; ``spec_version``/``spec_sha256`` pin its spec.
        state: the state of the durable point (see :class:`DurablePoint`).
        point: how recovery resumes it.
        status: :class:`ExecutionStatus`.
        revision: 0 at start, +1 per commit.
        context: the application's data, as JSON (its declared type's unstructured form).
        point_revision: the revision of the commit that set the durable point (a
            later ``@recovery`` or ``@resolution`` commit keeps it); effects announced
            by it derive their idempotency keys from it.
        resume_event: for point ``barrier``, the committed-outcome event recovery
            fires at ``state`` to replay from it.
        pending_effects: effects the last barrier announced (display only; recovery
            finds the exact one by replaying).
        deadline_at: when the timer of the wait state ``state`` fires (UTC), if any.
        expires_at: the execution's own deadline (``start(..., timeout_seconds=)``):
            past it, the engine ends it ``failed`` with DeadlineExceededError.
        parent_execution_id / notify_event: for a child execution, its parent and the
            event its completion is signalled as.
        exclusive_key: executions sharing it have at most one active member.
        recovery / resolution: set while an operator must answer, and once answered
            until the engine applied it.
        error: why it failed (finished ``failed``), or the last recovery problem.
        labels: free string labels (e.g. ``agent_id``), shown by operator tools.
        announced: for point ``effect``: the effect this commit announced (its kind,
            idempotency key — derived from this commit's revision — and attempt).
        effect_payload: for point ``effect``: the input its work was prepared with
            (the payload of the event that entered ``state``), as JSON.
        effect_row: for point ``effect``: the index of the transition whose own
            offload it is (``None``: the offload of ``state``).
        key_origin: for an execution forked from a past commit of another that keeps
            that one's idempotency keys, where they come from (:class:`KeyOrigin`);
            ``None``: keys derive from this execution's own id.
    """

    execution_id: str
    machine: str
    spec_version: int
    spec_sha256: str
    state: str
    point: DurablePoint
    status: ExecutionStatus
    revision: int
    created_at: datetime
    updated_at: datetime
    context: JSON = None
    point_revision: int = 0
    resume_event: str | None = None
    pending_effects: tuple[str, ...] = ()
    deadline_at: datetime | None = None
    expires_at: datetime | None = None
    parent_execution_id: str | None = None
    notify_event: str | None = None
    exclusive_key: str | None = None
    recovery: RecoveryInfo | None = None
    resolution: ResolutionInfo | None = None
    error: ErrorInfo | None = None
    labels: dict[str, JSON] = attrs.field(factory=dict)
    announced: EffectRef | None = None
    effect_payload: JSON = None
    effect_row: int | None = None
    key_origin: KeyOrigin | None = None

    def effect_key(self, revision: int, effect: str) -> str:
        """The idempotency key of ``effect`` announced by this execution's commit at
        ``revision`` (``docs/semantics.md``, "Idempotency keys"; a fork's follow its
        :attr:`key_origin`)."""
        from phronomy_fsm.durable.keys import idempotency_key

        origin = self.key_origin
        if origin is None:
            return idempotency_key(self.execution_id, revision, effect)
        return idempotency_key(origin.execution_id, origin.revision + revision, effect)

    @property
    def is_active(self) -> bool:
        """Status running, waiting or recovery_required."""
        return self.status in ACTIVE_STATUSES

    @property
    def is_finished(self) -> bool:
        """Status completed, failed or cancelled."""
        return self.status in FINISHED_STATUSES


@attrs.frozen
class Fence:
    """The lease a commit is made under: the owning worker's id and the execution's
    fencing token at claim time. A store refuses a commit whose fence does not match
    the stored owner and token, or whose worker's lease has expired."""

    worker_id: str
    token: int


@attrs.frozen
class SignalRecord:
    """One entry of an execution's durable inbox.

    ``seq`` is assigned by the store (0 before); ``consumed_revision`` is the revision
    of the commit that consumed it (``None`` while pending); ``outcome`` says how it
    was consumed (``consumed``, ``rejected: <why>``, ``dropped: <why>``)."""

    signal_id: str
    execution_id: str
    kind: SignalKind
    created_at: datetime
    event: str | None = None
    payload: JSON = None
    expected_revision: int | None = None
    sender: str = ""
    seq: int = 0
    consumed_revision: int | None = None
    outcome: str | None = None


@attrs.frozen
class SignalPoll:
    """What one poll of the whole inbox found (``ExecutionStore.signals_since``): the
    unconsumed signals that became visible since the cursor polled from, in sequence
    order, and the cursor to poll from next. A cursor is an opaque string of the store
    that made it (a sequence number on SQLite, a snapshot on PostgreSQL)."""

    signals: tuple[SignalRecord, ...]
    cursor: str


@attrs.frozen
class JournalEntry:
    """An application record added to a commit by a barrier hook (kept per execution,
    in commit order). ``revision`` and ``position`` are assigned when committed."""

    kind: str
    data: JSON = None
    revision: int = 0
    position: int = 0


@attrs.frozen
class DurableCommit:
    """Everything one commit writes, atomically (one transaction, or nothing).

    Args:
        barrier: the spec's barrier name, or an engine commit: ``@start``, ``@wait``,
            ``@final``, ``@recovery``, ``@resolution``, ``@cancel``.
        execution: the new record.
        expected_revision: ``None`` to create it (revision 0); else the stored
            revision must equal it and ``execution.revision`` is one more.
        fence: the lease it is made under (``None``: no lease check).
        consume_signals: inbox ``seq`` numbers this commit consumes (each must still
            be pending and belong to the execution).
        consume_outcome: the ``outcome`` text written on them.
        children: child executions created with this commit (revision 0).
        send_signals: signals sent with this commit (a child's completion).
        journal: application records added at this revision.
    """

    barrier: str
    execution: ExecutionRecord
    expected_revision: int | None
    fence: Fence | None = None
    consume_signals: tuple[int, ...] = ()
    consume_outcome: str = "consumed"
    children: tuple[ExecutionRecord, ...] = ()
    send_signals: tuple[SignalRecord, ...] = ()
    journal: tuple[JournalEntry, ...] = ()

    def __attrs_post_init__(self) -> None:
        if self.expected_revision is None:
            if self.execution.revision != 0:
                raise ValueError("a creating commit must carry revision 0")
        elif self.execution.revision != self.expected_revision + 1:
            raise ValueError(
                f"revision must rise by exactly one: expected {self.expected_revision} + 1, "
                f"got {self.execution.revision}"
            )
        for child in self.children:
            if child.revision != 0 or child.parent_execution_id != self.execution.execution_id:
                raise ValueError(
                    f"child {child.execution_id} must be at revision 0 under its parent"
                )


@attrs.frozen
class DurableReceipt:
    """A committed :class:`DurableCommit`: the new revision, the signals' assigned
    ``seq`` numbers, and the commit time."""

    execution_id: str
    revision: int
    signal_seqs: tuple[int, ...]
    committed_at: datetime


@attrs.frozen
class WorkerRecord:
    """A live runtime (worker) that owns executions under a lease.

    ``lease_expires_at`` is renewed by heartbeats; once it has passed, the worker's
    executions may be claimed by another worker (with a new fencing token).
    ``start_time``, ``boot_id`` and ``pid_namespace`` identify the process (see
    :class:`phronomy_fsm.runtime.processes.ProcessIdentity`), so a runtime on the same
    host can tell that a worker's process is gone before its lease has passed."""

    worker_id: str
    host: str
    pid: int
    name: str
    started_at: datetime
    heartbeat_at: datetime
    lease_expires_at: datetime
    start_time: int | None = None
    boot_id: str | None = None
    pid_namespace: str | None = None


@attrs.frozen
class MachineRecord:
    """A machine's compiled table as registered by a runtime, so operator tools can
    check signals and draw executions without the application's code or YAML.
    ``table`` is :func:`phronomy_fsm.durable.machines.table_to_json` output."""

    machine: str
    spec_version: int
    spec_sha256: str
    table: JSON
    registered_at: datetime


@attrs.frozen
class BarrierLogRecord:
    """One line of an execution's barrier log: which commit moved it to ``revision``,
    when, the sha256 of the committed record, and the status and state it committed."""

    execution_id: str
    revision: int
    barrier: str
    committed_at: datetime
    digest: str
    status: str
    state: str


RECORD_CLASSES: tuple[type, ...] = (
    KeyOrigin,
    ErrorInfo,
    EffectRef,
    RecoveryInfo,
    ResolutionInfo,
    ExecutionRecord,
    Fence,
    SignalRecord,
    JournalEntry,
    WorkerRecord,
    MachineRecord,
)

CONVERTER, _UNSTRUCTURE = make_converter(
    RECORD_CLASSES,
    enums=(ExecutionStatus, DurablePoint, EffectKind, ResolutionOutcome, SignalKind),
)


def to_json(record: Any) -> str:
    """Canonical JSON text of a durable record.

    Raises:
        SerializationError: a field is not storable (the message names it).
    """
    return record_to_json(_UNSTRUCTURE[type(record)], record)


def to_json_bytes(record: Any) -> bytes:
    """Canonical JSON of a durable record as UTF-8 bytes (what :func:`to_json`
    returns, encoded).

    Raises:
        SerializationError: a field is not storable (the message names it).
    """
    return record_to_json_bytes(_UNSTRUCTURE[type(record)], record)


def from_json(cls: type[Any], text: str | bytes) -> Any:
    """Decode canonical JSON text into the record class ``cls``.

    Raises:
        SerializationError: malformed, or keys missing/unknown (with paths).
    """
    return record_from_json(CONVERTER, cls, text)


def unstructure(record: Any) -> Any:
    """The JSON data (dicts, lists, scalars) of a durable record."""
    return _UNSTRUCTURE[type(record)](record)


__all__ = [
    "ACTIVE_STATUSES",
    "FINISHED_STATUSES",
    "BarrierLogRecord",
    "DurableCommit",
    "DurablePoint",
    "DurableReceipt",
    "EffectKind",
    "EffectRef",
    "ErrorInfo",
    "ExecutionRecord",
    "ExecutionStatus",
    "Fence",
    "JournalEntry",
    "KeyOrigin",
    "MachineRecord",
    "RecoveryInfo",
    "ResolutionInfo",
    "ResolutionOutcome",
    "SignalKind",
    "SignalPoll",
    "SignalRecord",
    "WorkerRecord",
    "from_json",
    "to_json",
    "to_json_bytes",
    "unstructure",
]
