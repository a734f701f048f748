"""Durable records: frozen attrs values and their canonical JSON form.

These are the facts the barrier store keeps (reference §2 "The durable Execution
record", §2.7 journal, §5 persistence): the agent root, executions with their revision,
status and phase, the append-only journal, and the barrier log. Records are serialised
to canonical JSON through a strict cattrs converter: unknown or missing keys fail,
datetimes must be timezone-aware and round-trip to the same instant (written in UTC as
ISO 8601 with microseconds, read back in UTC), and nothing is ever pickled.

Values typed ``Any`` hold JSON data (``None``, bools, numbers, strings, lists, dicts with
string keys); they are checked when encoded. Records are frozen; treat the dicts and
lists inside them as read-only too (copy before changing, then ``evolve``).
"""

from __future__ import annotations

import enum
import hashlib
import math
import typing
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import attrs
import cattrs
import orjson
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

from phronomy_fsm.errors import InvalidStatusTransitionError, SerializationError

T = TypeVar("T")

#: The Unix epoch; the store's integer columns hold milliseconds since it.
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def datetime_to_epoch_ms(value: datetime) -> int:
    """Epoch milliseconds of a timezone-aware datetime (truncated)."""
    return (value - EPOCH) // timedelta(milliseconds=1)


def epoch_ms_to_datetime(epoch_ms: int) -> datetime:
    """UTC datetime of an integer epoch in milliseconds (exact, no float rounding)."""
    return EPOCH + timedelta(milliseconds=epoch_ms)


JSON = Any


def utc_now() -> datetime:
    """The current time, timezone-aware (UTC)."""
    return datetime.now(UTC)


# ----------------------------------------------------------------------- statuses


class ExecutionStatus(str, enum.Enum):
    """Durable status of an execution (reference §2.2)."""

    PREPARING = "preparing"
    ACTIVE = "active"
    SUSPENDED = "suspended"
    COMPLETED = "completed"
    REJECTED = "rejected"
    BLOCKED = "blocked"
    HANDED_OFF = "handed_off"
    FAILED = "failed"
    CANCELLED = "cancelled"


ACTIVE_STATUSES = frozenset(
    {ExecutionStatus.PREPARING, ExecutionStatus.ACTIVE, ExecutionStatus.SUSPENDED}
)
TERMINAL_STATUSES = frozenset(
    {
        ExecutionStatus.COMPLETED,
        ExecutionStatus.REJECTED,
        ExecutionStatus.BLOCKED,
        ExecutionStatus.HANDED_OFF,
        ExecutionStatus.FAILED,
        ExecutionStatus.CANCELLED,
    }
)

#: Allowed status changes (reference §2.2); a terminal status only moves to itself.
ALLOWED_STATUS_CHANGES: dict[ExecutionStatus, frozenset[ExecutionStatus]] = {
    ExecutionStatus.PREPARING: frozenset(
        {
            ExecutionStatus.PREPARING,
            ExecutionStatus.ACTIVE,
            ExecutionStatus.FAILED,
            ExecutionStatus.CANCELLED,
            ExecutionStatus.BLOCKED,
        }
    ),
    ExecutionStatus.ACTIVE: frozenset(ExecutionStatus) - {ExecutionStatus.PREPARING},
    ExecutionStatus.SUSPENDED: frozenset(
        {
            ExecutionStatus.SUSPENDED,
            ExecutionStatus.ACTIVE,
            ExecutionStatus.FAILED,
            ExecutionStatus.CANCELLED,
        }
    ),
    **{status: frozenset({status}) for status in TERMINAL_STATUSES},
}


class AgentLifecycle(str, enum.Enum):
    """Lifecycle of the agent root (reference §2.7): barriers set it to active,
    suspended or idle."""

    IDLE = "idle"
    ACTIVE = "active"
    SUSPENDED = "suspended"


# -------------------------------------------------------------------- value types


@attrs.frozen
class ErrorInfo:
    """A durable description of an error: its class name, message, and JSON details."""

    type: str
    message: str
    details: dict[str, JSON] = attrs.field(factory=dict)

    @classmethod
    def from_exception(cls, exc: BaseException) -> ErrorInfo:
        """Describe ``exc`` (class name and ``str(exc)``)."""
        return cls(type(exc).__name__, str(exc))

    def render(self) -> str:
        """``Type: message``."""
        return f"{self.type}: {self.message}"


@attrs.frozen
class ToolBatchEntry:
    """One tool call of the durable tool batch (reference §2.5 ``recovery_tool_batch``).

    ``status`` is the tool invocation's state name (``authorized``,
    ``awaiting_approval``, ``completed``, ``failed``, ``rejected``, ``cancelled``, ...);
    ``tool_invocation_id`` is also the idempotency key handed to the tool.
    """

    tool_invocation_id: str
    tool_call_id: str
    tool_name: str
    llm_call_id: str
    arguments: JSON
    status: str
    result: JSON = None
    error: str | None = None


@attrs.frozen
class ApprovalItem:
    """One tool call awaiting a person's decision."""

    tool_invocation_id: str
    tool_call_id: str
    tool_name: str
    arguments: JSON
    reason: str = ""


@attrs.frozen
class ApprovalRequest:
    """A durable approval request (reference §2.6). ``approved`` is ``None`` until a
    decision is committed."""

    request_id: str
    execution_id: str
    items: tuple[ApprovalItem, ...]
    created_at: datetime
    approved: bool | None = None


@attrs.frozen
class RecoverySubject:
    """An external operation whose outcome is unknown (reference §6.6 subjects):
    ``type`` is ``llm_call`` or ``tool_invocation``."""

    type: str
    llm_call_id: str | None = None
    tool_invocation_id: str | None = None
    tool_call_id: str | None = None
    tool_name: str | None = None
    arguments: JSON = None
    state: str = "unresolved"
    outcome: str | None = None
    result: JSON = None


@attrs.frozen
class RecoveryDescriptor:
    """Why an execution needs an operator, and what may be answered (reference §2.5
    ``recovery``)."""

    reason: str
    subjects: tuple[RecoverySubject, ...]
    allowed_outcomes: tuple[str, ...] = ("succeeded", "failed", "not_performed")
    resolution_outcome: str | None = None
    failure: ErrorInfo | None = None


@attrs.frozen
class AgentRecord:
    """The agent root (reference §2.7 AgentRoot).

    ``revision`` rises by one with every commit that saves the root; ``journal_head`` is
    the sequence number of the agent's last journal record (0 when empty).
    """

    agent_id: str
    revision: int
    lifecycle: AgentLifecycle
    journal_head: int
    created_at: datetime
    updated_at: datetime
    metadata: dict[str, JSON] = attrs.field(factory=dict)

    def advance(self, *, now: datetime | None = None, **changes: Any) -> AgentRecord:
        """Return a copy with ``changes``, ``revision + 1`` and a fresh ``updated_at``."""
        if "revision" in changes:
            raise ValueError("advance() sets the revision itself (current + 1)")
        return attrs.evolve(
            self, revision=self.revision + 1, updated_at=now or utc_now(), **changes
        )


@attrs.frozen
class ExecutionRecord:
    """One agent execution (reference §2.1), as committed by the last barrier.

    ``phase`` is the durable "where was I" marker used by recovery (§2.3);
    ``spec_sha256``/``spec_version`` pin the agent_session spec it started under;
    ``pending_llm_call_id`` names the LLM call that may be in flight; ``tool_batch`` is
    the durable batch snapshot; ``recovery`` is set while an operator must resolve.
    """

    execution_id: str
    agent_id: str
    revision: int
    status: ExecutionStatus
    phase: str
    spec_version: int
    spec_sha256: str
    created_at: datetime
    updated_at: datetime
    input: JSON = None
    invocation_mode: str = "invoke"
    pending_llm_call_id: str | None = None
    llm_call_count: int = 0
    tool_batch: tuple[ToolBatchEntry, ...] = ()
    approval_request: ApprovalRequest | None = None
    recovery: RecoveryDescriptor | None = None
    output: JSON = None
    error: ErrorInfo | None = None
    terminal_reason: str | None = None
    metadata: dict[str, JSON] = attrs.field(factory=dict)

    @property
    def is_active(self) -> bool:
        """Status preparing, active or suspended (counts toward one-per-agent)."""
        return self.status in ACTIVE_STATUSES

    @property
    def is_terminal(self) -> bool:
        """Status completed, rejected, blocked, handed_off, failed or cancelled."""
        return self.status in TERMINAL_STATUSES

    def advance(self, *, now: datetime | None = None, **changes: Any) -> ExecutionRecord:
        """Return the next revision: ``changes`` applied, ``revision + 1``, ``updated_at``
        refreshed, and the status change checked against reference §2.2.

        Raises:
            InvalidStatusTransitionError: the new status is not allowed after the current one.
            ValueError: ``revision`` was passed (the rule is exactly +1 per barrier).
        """
        if "revision" in changes:
            raise ValueError("advance() sets the revision itself (current + 1)")
        new_status = ExecutionStatus(changes.get("status", self.status))
        if new_status not in ALLOWED_STATUS_CHANGES[self.status]:
            raise InvalidStatusTransitionError(
                f"execution {self.execution_id}: status {self.status.value} cannot become "
                f"{new_status.value} (reference §2.2)",
                execution_id=self.execution_id,
                current=self.status.value,
                requested=new_status.value,
            )
        changes["status"] = new_status
        return attrs.evolve(
            self, revision=self.revision + 1, updated_at=now or utc_now(), **changes
        )


@attrs.frozen
class JournalRecord:
    """One append-only journal fact (reference §2.7 JournalRecord).

    ``kind`` names the fact (``input_received``, ``assistant_message``, ``tool_result``,
    ``approval_decided``, ``final_output``, ``execution_completed``, ...); ``role`` is the
    chat role for messages (``user``, ``assistant``, ``tool``) or ``None`` for audit
    facts; ``content`` is JSON; ``sequence`` is assigned by the store on append (0 before).
    """

    record_id: str
    agent_id: str
    execution_id: str
    kind: str
    occurred_at: datetime
    role: str | None = None
    content: JSON = None
    llm_call_id: str | None = None
    tool_call_id: str | None = None
    tool_invocation_id: str | None = None
    context_candidate: bool = False
    sequence: int = 0
    metadata: dict[str, JSON] = attrs.field(factory=dict)


@attrs.frozen
class BarrierRecord:
    """One line of the barrier log: which barrier moved ``execution_id`` to
    ``revision``, when, and the sha256 of the committed execution JSON."""

    execution_id: str
    revision: int
    barrier: str
    committed_at: datetime
    digest: str
    status: str
    phase: str


@attrs.frozen
class BarrierCommit:
    """Everything one barrier commits, atomically (one transaction, or nothing).

    Args:
        barrier: the barrier's name (from the spec), written to the barrier log.
        execution: the new execution record.
        expected_revision: ``None`` to create the execution (its revision must be 0);
            otherwise the stored revision must equal it and ``execution.revision`` must
            be exactly ``expected_revision + 1`` (compare-and-set, reference §5.1).
        agent: the new agent root, or ``None`` to leave it; when given, the stored
            root's revision must be ``agent.revision - 1``.
        journal: records appended after the agent's journal head; requires ``agent``,
            whose ``journal_head`` must be the old head plus ``len(journal)``.
    """

    barrier: str
    execution: ExecutionRecord
    expected_revision: int | None
    agent: AgentRecord | None = None
    journal: tuple[JournalRecord, ...] = ()

    def __attrs_post_init__(self) -> None:
        if self.expected_revision is None:
            if self.execution.revision != 0:
                raise ValueError("a creating commit must carry revision 0")
        elif self.execution.revision != self.expected_revision + 1:
            raise ValueError(
                f"revision must rise by exactly one: expected {self.expected_revision} + 1, "
                f"got {self.execution.revision}"
            )
        if self.journal and self.agent is None:
            raise ValueError("a journal append needs the new agent root (its journal head)")
        for record in self.journal:
            if record.agent_id != self.execution.agent_id:
                raise ValueError(f"journal record {record.record_id} belongs to another agent")
        if self.agent is not None and self.agent.agent_id != self.execution.agent_id:
            raise ValueError("the agent root belongs to another agent")


@attrs.frozen
class CommitReceipt:
    """What a committed barrier returns: the execution's new revision, the sequences
    assigned to the appended journal records, and the commit time."""

    execution_id: str
    revision: int
    journal_sequences: tuple[int, ...]
    committed_at: datetime


# ----------------------------------------------------------------------- converter


def _structure_datetime(value: Any, _: Any) -> datetime:
    if not isinstance(value, str):
        raise TypeError(f"expected an ISO 8601 timestamp string, got {type(value).__name__}")
    parsed = datetime.fromisoformat(value)
    if parsed.tzinfo is None:
        raise ValueError(f"timestamp {value!r} has no UTC offset; store timezone-aware times only")
    # in UTC, as written since issue 11 item 10e (older stores may hold other offsets)
    return parsed if parsed.tzinfo is UTC else parsed.astimezone(UTC)


def _strict(kind: type, label: str) -> Any:
    def hook(value: Any, _: Any) -> Any:
        if isinstance(value, bool) and kind is not bool:
            raise TypeError(f"expected {label}, got a boolean")
        if not isinstance(value, kind):
            raise TypeError(f"expected {label}, got {type(value).__name__}")
        return value

    return hook


def _structure_enum(value: Any, cls: type[enum.Enum]) -> Any:
    # Registered per enum class: the generic ``str`` hook would otherwise match these
    # str-subclass enums (singledispatch follows the MRO) and accept any string.
    if not isinstance(value, str):
        raise TypeError(f"expected a {cls.__name__} string, got {type(value).__name__}")
    return cls(value)


RECORD_CLASSES: tuple[type, ...] = (
    ErrorInfo,
    ToolBatchEntry,
    ApprovalItem,
    ApprovalRequest,
    RecoverySubject,
    RecoveryDescriptor,
    AgentRecord,
    ExecutionRecord,
    JournalRecord,
    BarrierRecord,
)


def _identity(value: Any) -> Any:
    return value


def _is_json_data(tp: Any) -> bool:
    """Fields holding application JSON (``Any`` or ``dict[str, Any]``)."""
    return tp is Any or tp == dict[str, Any]


#: Deepest nesting of application JSON the store accepts. orjson refuses documents
#: nested deeper than 255 containers, and application data sits a few levels down in
#: its record; a structure that contains itself reaches this bound instead of spinning.
MAX_JSON_DEPTH = 200

_JSON_LEAVES = (str, int, bool, type(None))


def _check_data(value: Any) -> None:
    """Application JSON must be exactly JSON: dict/list/tuple/str/int/bool/None and
    finite floats (orjson alone would write NaN as null and datetimes as text), nested
    at most :data:`MAX_JSON_DEPTH` deep (which also ends a structure that contains
    itself)."""
    if type(value) in _JSON_LEAVES:
        return
    stack = [(value, 1)]
    pop, push = stack.pop, stack.append
    while stack:
        v, depth = pop()
        t = type(v)
        if t is dict:
            items = v.values()
        elif t is list or t is tuple:
            items = v
        elif t is float:
            if not math.isfinite(v):
                raise SerializationError(f"{v!r} is not representable in JSON")
            continue
        elif t in _JSON_LEAVES:
            continue
        else:
            raise SerializationError(f"{t.__name__} is not JSON data")
        if depth > MAX_JSON_DEPTH:
            raise SerializationError(
                f"JSON data nested deeper than {MAX_JSON_DEPTH} levels (or containing itself)"
            )
        for item in items:
            if type(item) not in _JSON_LEAVES:
                push((item, depth + 1))


def _unstructure_data(value: Any) -> Any:
    """JSON-data fields pass through as they are, once checked (orjson encodes them)."""
    if type(value) not in _JSON_LEAVES:
        _check_data(value)
    return value


def _unstructure_key(owner: str, name: str, kind: type) -> Any:
    """A plain ``str``/``int`` field passes through, once its exact type is checked:
    ids and revisions are keys, and an int execution id would be written and then fail
    every read of the table (cattrs does not check types when unstructuring)."""

    def hook(value: Any) -> Any:
        if type(value) is not kind:
            raise SerializationError(
                f"{owner}.{name} must be {kind.__name__}, got {type(value).__name__} {value!r}"
            )
        return value

    return hook


def _unstructure_stamp(name: str) -> Any:
    """A datetime field, once checked to be timezone-aware, is written in UTC with its
    microseconds always present (``2026-03-01T12:00:00.000000+00:00``), whatever offset
    the caller gave it: one instant has one stored form (issue 11 item 10e; orjson
    alone would keep the caller's offset and drop a zero microsecond field)."""

    def hook(value: datetime) -> datetime | str:
        if not isinstance(value, datetime):
            raise SerializationError(
                f"{name} must be a datetime, got {type(value).__name__} {value!r}"
            )
        if value.tzinfo is UTC and value.microsecond:
            # the common case (the runtime's clock): orjson writes exactly this form,
            # 6x faster than isoformat (this is the commit path)
            return value
        if value.tzinfo is None or value.utcoffset() is None:
            raise SerializationError(
                f"naive datetime {value!r} in {name}: store timezone-aware times only"
            )
        return value.astimezone(UTC).isoformat(timespec="microseconds")

    return hook


def _wrong_record(name: str, cls: type, value: Any) -> SerializationError:
    return SerializationError(
        f"{name} must hold {cls.__name__} records, got {type(value).__name__} {value!r:.80}"
    )


def _unstructure_optional_record(name: str, cls: type, nested: Any) -> Any:
    """``cls | None``: ``None``, or exactly a ``cls`` (its generated hook, called
    directly instead of dispatching on the value's type at run time)."""

    def hook(value: Any) -> Any:
        if value is None:
            return None
        if type(value) is not cls:
            raise _wrong_record(name, cls, value)
        return nested(value)

    return hook


def _unstructure_record_tuple(name: str, cls: type, nested: Any) -> Any:
    """``tuple[cls, ...]``: exactly a tuple of ``cls`` (records are immutable; a list
    inside one could change after it was checked), written as a JSON array."""

    def hook(value: Any) -> list[Any]:
        if type(value) is not tuple:
            raise _wrong_record(name, cls, value)
        out = []
        for item in value:
            if type(item) is not cls:
                raise _wrong_record(name, cls, item)
            out.append(nested(item))
        return out

    return hook


def _unstructure_overrides(conv: cattrs.Converter, cls: type) -> dict[str, Any]:
    """The per-field hooks that make cattrs' generated unstructure function check what
    orjson would otherwise accept silently, in the same single pass over the record.

    Optional scalars pass through as they are (orjson writes ``None`` as null), and
    optional or repeated nested records call their class's generated hook directly
    instead of dispatching on the value's type at run time (this is the commit path,
    see ``docs/store.md`` "Commit latency")."""
    hints = typing.get_type_hints(cls)
    overrides = {}
    for f in attrs.fields(cls):
        tp = hints[f.name]
        args = typing.get_args(tp)
        if tp is str or tp is int:
            hook = _unstructure_key(cls.__name__, f.name, tp)
        elif tp is datetime:
            hook = _unstructure_stamp(f.name)
        elif _is_json_data(tp):
            hook = _unstructure_data
        elif tp in (str | None, bool | None):
            hook = _identity
        elif len(args) == 2 and args[1] is type(None) and args[0] in RECORD_CLASSES:
            hook = _unstructure_optional_record(f.name, args[0], conv.get_unstructure_hook(args[0]))
        elif typing.get_origin(tp) is tuple and args[0] in RECORD_CLASSES:
            hook = _unstructure_record_tuple(f.name, args[0], conv.get_unstructure_hook(args[0]))
        else:
            continue
        overrides[f.name] = override(unstruct_hook=hook)
    return overrides


def _make_converter() -> cattrs.Converter:
    conv = cattrs.Converter(forbid_extra_keys=True)
    conv.register_structure_hook(datetime, _structure_datetime)
    conv.register_unstructure_hook(datetime, _unstructure_stamp("datetime"))
    conv.register_structure_hook(str, _strict(str, "a string"))
    conv.register_structure_hook(int, _strict(int, "an integer"))
    conv.register_structure_hook(bool, _strict(bool, "a boolean"))
    for enum_cls in (ExecutionStatus, AgentLifecycle):
        conv.register_structure_hook(enum_cls, _structure_enum)
    conv.register_structure_hook_func(lambda t: t is Any, lambda v, _: v)
    for cls in RECORD_CLASSES:
        conv.register_structure_hook(
            cls, make_dict_structure_fn(cls, conv, _cattrs_forbid_extra_keys=True)
        )
        # cattrs' generated, type-directed unstructuring, with the checks folded in
        conv.register_unstructure_hook(
            cls,
            make_dict_unstructure_fn(cls, conv, **_unstructure_overrides(conv, cls)),  # type: ignore[arg-type]
        )
    return conv


CONVERTER = _make_converter()

# orjson writes the typed fields (enums as their value; datetimes arrive as UTC text
# from their hook); the unstructure hooks have checked what orjson would accept silently.
_ORJSON_OPTIONS = (
    orjson.OPT_SORT_KEYS | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_SUBCLASS
)
#: The generated unstructure function of each record class, looked up once.
_UNSTRUCTURE = {cls: CONVERTER.get_unstructure_hook(cls) for cls in RECORD_CLASSES}


def _reject(value: Any) -> Any:
    raise TypeError(f"{type(value).__name__} is not JSON data")


def ensure_json(value: Any) -> None:
    """Raise unless the store can write ``value`` as application JSON data.

    The same rules the store applies to data fields at commit time (dict with string
    keys, list, tuple, str, int within 64 bits, bool, None, finite float; strings of
    valid Unicode; at most :data:`MAX_JSON_DEPTH` levels), so a value can be checked
    where it is produced — a tool's result, a provider's answer — and refused there,
    before it reaches a barrier.

    Raises:
        SerializationError: ``value`` is not storable JSON data; the message says why.
    """
    _check_data(value)
    try:
        orjson.dumps(value, default=_reject, option=_ORJSON_OPTIONS)
    except (TypeError, ValueError, orjson.JSONEncodeError) as exc:
        raise SerializationError(f"not storable as JSON: {exc}") from exc


def to_json(record: Any, **replace: Any) -> str:
    """Encode an attrs record as canonical JSON: sorted keys, compact, UTF-8 text,
    datetimes in UTC as ISO 8601 with microseconds (``...T12:00:00.000000+00:00``).

    ``replace`` overrides top-level fields with already-JSON values (the store sets a
    journal record's assigned ``sequence`` this way without copying the record).

    Raises:
        SerializationError: a value is not JSON data (a non-string key, NaN, a set,
            bytes, an integer beyond 64 bits...), or a datetime is naive.
    """
    try:
        unstructure = _UNSTRUCTURE.get(type(record)) or CONVERTER.get_unstructure_hook(type(record))
        data = unstructure(record)
        if replace:
            data.update(replace)
        return orjson.dumps(data, default=_reject, option=_ORJSON_OPTIONS).decode("utf-8")
    except SerializationError:
        raise
    except (TypeError, ValueError, AttributeError, orjson.JSONEncodeError) as exc:
        raise SerializationError(f"cannot encode {type(record).__name__}: {exc}") from exc


def from_json(cls: type[T], text: str | bytes) -> T:
    """Decode canonical JSON into ``cls``; unknown or missing keys fail.

    Raises:
        SerializationError: the text is not JSON or does not match ``cls``.
    """
    try:
        data = orjson.loads(text)
        return CONVERTER.structure(data, cls)
    except (ValueError, TypeError, KeyError, cattrs.BaseValidationError) as exc:
        detail = (
            "; ".join(cattrs.transform_error(exc))
            if isinstance(exc, cattrs.BaseValidationError)
            else str(exc)
        )
        raise SerializationError(f"cannot decode {cls.__name__}: {detail}") from exc


def digest(text: str) -> str:
    """sha256 (hex) of canonical JSON text, as kept in the barrier log."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
