"""Transition-table types: the data the code generator emits and the dispatcher runs.

Generated modules (``phronomy_fsm.generated.<machine>``) import only the standard library
and this module. Everything here is plain immutable data (``NamedTuple`` rows, which are
cheap to build at import time and print as valid Python), so a generated module is data,
not logic.

State kinds, barrier outcomes and offload semantics are those of the spec language
(``docs/spec-format.md``). The table is *flat*: compound states of the spec are lowered
into rows on the leaf states inside them (``TransitionRow.declared_on`` remembers where
a row was declared), and ``MachineTable.compounds`` with ``StateRow.parent`` keep the
hierarchy so that tools can draw it from a generated table alone.

This is the lowest layer of the package (above :mod:`phronomy_fsm.errors` only): the spec
layer, the code generator and the runtime all import its vocabulary, and it imports
none of them. So the rule both a spec's timeouts and the runtime's delays obey
(:func:`check_delay`) lives here too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

#: State kinds as strings (see :class:`phronomy_fsm.spec.model.StateKind`).
AUTO = "auto"
EXTERNAL = "external"
WAIT = "wait"
FINAL = "final"
STATE_KINDS = (AUTO, EXTERNAL, WAIT, FINAL)

#: The event an auto state posts to itself after its entry work.
STATE_COMPLETED = "state_completed"

#: Barrier outcomes (``docs/spec-format.md`` "Barriers" for their meaning).
COMMITTED = "committed"
NOT_COMMITTED = "not_committed"
CONFLICT = "conflict"
OUTCOME_UNKNOWN = "outcome_unknown"
BARRIER_OUTCOMES = (COMMITTED, NOT_COMMITTED, CONFLICT, OUTCOME_UNKNOWN)

#: Effect kinds of an offload (see :class:`phronomy_fsm.spec.model.EffectKind` and
#: ``docs/spec-format.md`` "Effects and durability"): ``pure`` work may be re-run freely
#: (reads, filters, policy checks); ``idempotent`` work is re-run after a crash with the
#: same durable idempotency key; ``at_most_once`` work (the default) is never re-run
#: blindly.
PURE = "pure"
IDEMPOTENT = "idempotent"
AT_MOST_ONCE = "at_most_once"
EFFECT_KINDS = (PURE, IDEMPOTENT, AT_MOST_ONCE)

#: The longest delay or timeout a table or the runtime accepts, in seconds (about 31.7
#: years). Here, below both the spec layer and the runtime, so a spec's timeout is
#: checked by the same rule the runtime applies (``docs/spec-format.md``, "Timeouts").
#: ``Condition.wait`` fails with OverflowError beyond the platform's ``time_t`` range
#: (about 9.2e9 s on Linux), which on the dispatcher loop would end it for every
#: session; waits are also clamped to this, so a later deadline only means "not soon".
MAX_DELAY_SECONDS = 1e9


def check_delay(seconds: object, what: str) -> float:
    """Check a delay or timeout given by an application or a spec and return it as a float.

    Args:
        seconds: the delay in seconds (an int or a float; not a bool).
        what: how the value is named in the error message (``"timeout_seconds"``).

    Returns:
        ``seconds`` as a float.

    Raises:
        ValueError: ``seconds`` is not a real number, or not finite, greater than 0 and
            at most :data:`MAX_DELAY_SECONDS` (the message names ``what`` and the range).
    """
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        message = f"{what} must be a number of seconds, got {type(seconds).__name__}"
        raise ValueError(message)  # noqa: TRY004 - one error type for every bad delay
    if not 0 < seconds <= MAX_DELAY_SECONDS:  # also refuses NaN and infinities
        raise ValueError(
            f"{what} must be greater than 0 and at most {MAX_DELAY_SECONDS:g} seconds, "
            f"got {seconds!r}; use None for no timeout"
        )
    return float(seconds)


class OffloadRow(NamedTuple):
    """Work run on the offload pool: the hook prepares it on the loop thread; its value
    is posted as ``completed``, its exception as ``failed``. ``effect`` is one of
    :data:`EFFECT_KINDS` (what recovery may do with work whose outcome was lost).
    ``direct`` marks an effect declared with the spec's ``effect:`` shorthand: its hook
    is a plain function ``hook(snapshot, ectx) -> result`` run on the worker itself
    (``docs/spec-format.md``, "Effect shorthand"), not a hook returning the work."""

    hook: str
    completed: str
    failed: str
    effect: str = AT_MOST_ONCE
    direct: bool = False


class BarrierRow(NamedTuple):
    """A durable commit started on entry; each outcome is posted as its event."""

    name: str
    committed: str
    not_committed: str
    conflict: str
    outcome_unknown: str

    def event_for(self, outcome: str) -> str:
        """Return the event posted for ``outcome`` (one of :data:`BARRIER_OUTCOMES`).

        Raises ``ValueError`` for any other outcome."""
        if outcome not in BARRIER_OUTCOMES:
            raise ValueError(
                f"unknown barrier outcome {outcome!r}; expected one of {BARRIER_OUTCOMES}"
            )
        return getattr(self, outcome)  # type: ignore[no-any-return]


class TimeoutRow(NamedTuple):
    """A timer armed on entry: ``event`` is posted after ``seconds`` unless the state
    was left first."""

    seconds: float
    event: str


class StateRow(NamedTuple):
    """One (leaf) state: kind (one of :data:`STATE_KINDS`), entry actions, optional
    work, and the compound state it sits in (``parent``, ``None`` at the top level)."""

    name: str
    kind: str
    entry: tuple[str, ...] = ()
    offload: OffloadRow | None = None
    barrier: BarrierRow | None = None
    timeout: TimeoutRow | None = None
    description: str = ""
    parent: str | None = None


class CompoundRow(NamedTuple):
    """A compound state of the spec: its ``parent`` (``None`` at the top level), the
    child a row into it enters (``initial``), and its description. It is never a state
    a session is in; it is kept to draw the machine's hierarchy."""

    name: str
    parent: str | None
    initial: str
    description: str = ""


class EventRow(NamedTuple):
    """One event; ``unhandled`` is ``"error"`` or ``"ignore"``; ``durable`` is true for
    an event posted only after a durable commit by its sender (e.g. a parent's barrier),
    so a transition on it counts as a committed edge (``docs/spec-format.md`` "Events").
    ``fields`` is the declared payload schema, ``(field, type)`` pairs (empty when the
    spec names no schema): a signal's payload is checked against it before anything is
    written (``docs/spec-format.md``, "Payload schemas")."""

    name: str
    payload: str | None = None
    unhandled: str = "error"
    description: str = ""
    durable: bool = False
    fields: tuple[tuple[str, str], ...] = ()


class TransitionRow(NamedTuple):
    """One row of the ordered table. ``target`` is ``None`` for an internal transition;
    ``guard`` names a guard hook (``negated`` inverts it). ``declared_on`` names the
    compound states the spec declared the row on (its ``sources`` are the states inside
    them); it is empty for a row declared on its sources themselves."""

    index: int  # type: ignore[assignment]  # the row's position; shadows tuple.index by design
    sources: tuple[str, ...]
    event: str
    target: str | None
    guard: str | None = None
    negated: bool = False
    actions: tuple[str, ...] = ()
    offload: OffloadRow | None = None
    barrier: BarrierRow | None = None
    description: str = ""
    declared_on: tuple[str, ...] = ()


class MigrationRow(NamedTuple):
    """How durable state names of executions started under an older spec map to this
    one (see ``docs/spec-format.md`` "Migrations")."""

    from_version: int
    from_sha256: str | None
    rename_states: tuple[tuple[str, str], ...]

    def covers(self, spec_version: int, spec_sha256: str) -> bool:
        """True when this migration applies to an execution pinned to spec
        ``spec_version`` with sha256 ``spec_sha256``: the version matches, and so does
        the sha256 when the migration names one. The one rule both the engine (which
        renames states) and a worker's claims (which executions it can run) follow."""
        return self.from_version == spec_version and self.from_sha256 in (None, spec_sha256)


class LimitRow(NamedTuple):
    """A rate or concurrency limit on effects, shared by every worker of a store
    (``docs/spec-format.md``, "Limits"): the offload hooks it covers (``effects``), where
    its key comes from (``key_source``: ``"label"`` — a label of the execution —,
    ``"context"`` — a field of the context — or ``None``: one key for all, and
    ``key_name``), at most ``concurrency`` effects at once per key (``None``: no bound)
    and at most ``rate`` starts per ``per_seconds`` per key (``None``: no rate)."""

    name: str
    effects: tuple[str, ...]
    key_source: str | None = None
    key_name: str | None = None
    concurrency: int | None = None
    rate: int | None = None
    per_seconds: float | None = None


class MachineTable(NamedTuple):
    """A compiled machine: everything the dispatcher needs, in deterministic order.

    ``guards``, ``actions``, ``offload_hooks`` and ``barriers`` list the hook names the
    application must provide (the generated ``Hooks`` Protocol declares them as methods).
    ``fail_closed`` names the state unproven barrier outcomes go to (``None`` when the
    spec declares none). ``compounds`` are the spec's compound states, parents before
    their children (empty for a flat machine). ``final_commit`` is the name diagrams
    give the engine's ``@final`` commit (``None`` when the spec declares none); the
    runtime does not read it. ``limits`` are the spec's limits on effects (empty when
    it declares none).
    """

    machine: str
    version: int
    spec_sha256: str
    initial: str
    states: tuple[StateRow, ...]
    events: tuple[EventRow, ...]
    transitions: tuple[TransitionRow, ...]
    guards: tuple[str, ...] = ()
    actions: tuple[str, ...] = ()
    offload_hooks: tuple[str, ...] = ()
    barriers: tuple[str, ...] = ()
    migrations: tuple[MigrationRow, ...] = ()
    fail_closed: str | None = None
    compounds: tuple[CompoundRow, ...] = ()
    final_commit: str | None = None
    limits: tuple[LimitRow, ...] = ()

    def state(self, name: str) -> StateRow:
        """Return the row of state ``name``; ``KeyError`` if there is none."""
        for row in self.states:
            if row.name == name:
                return row
        raise KeyError(name)

    def hook_names(self) -> tuple[str, ...]:
        """Every hook name the application must provide, sorted."""
        return tuple(sorted({*self.guards, *self.actions, *self.offload_hooks, *self.barriers}))

    def migrated_state(self, spec_version: int, spec_sha256: str, state: str) -> str:
        """The name in this table of ``state``, as stored by an execution pinned to spec
        ``spec_version`` with sha256 ``spec_sha256``: renamed by the declared migration
        covering that spec (:meth:`MigrationRow.covers`), unchanged otherwise.

        The engine renames an execution's state when it recovers it, but commits the
        new name only with the execution's next commit (``docs/spec-format.md``
        "Migrations"): until then a reader of the store (an approval check, the
        console) sees the old name and maps it here.
        """
        if spec_sha256 == self.spec_sha256:
            return state
        for migration in self.migrations:
            if migration.covers(spec_version, spec_sha256):
                return dict(migration.rename_states).get(state, state)
        return state


class BarrierOutcome(NamedTuple):
    """What a barrier hook's work reports back.

    ``outcome`` is one of :data:`BARRIER_OUTCOMES` (after reconciliation of a lost
    response: ``outcome_unknown`` means the read-back could not prove either way);
    ``revision`` is the durable revision after a commit (``None`` when nothing was
    committed); ``value`` is whatever the barrier wants to hand to the next step (the
    committed record); ``error`` explains a non-committed outcome.
    """

    outcome: str
    revision: int | None = None
    value: Any = None
    error: BaseException | None = None


#: What an offload hook returns: a callable run on a worker thread with an
#: ``phronomy_fsm.runtime.OffloadContext`` — its return value becomes the payload of the
#: ``completed`` event, its exception the payload of ``failed`` — or a :class:`Settled`
#: outcome when there is nothing to run.
OffloadWork = Any


class Settled(NamedTuple):
    """What an offload hook returns when the outcome is already known and nothing
    needs to run outside (no approval policy to ask, no filter to apply): the
    dispatcher posts ``completed`` with ``value`` — or ``failed`` with ``error`` —
    through the queue, without a round trip to the offload pool."""

    value: Any = None
    error: BaseException | None = None


class PendingBarrier(NamedTuple):
    """Barrier work already started elsewhere (e.g. queued on the store's group-commit
    writer): ``subscribe(report)`` arranges for ``report(outcome)`` to be called exactly
    once, from any thread, with the :class:`BarrierOutcome`."""

    subscribe: Callable[[Callable[[BarrierOutcome], None]], None]


#: What a barrier hook returns: a zero-argument callable run on a worker thread that
#: returns a :class:`BarrierOutcome`; a :class:`PendingBarrier`; a
#: ``concurrent.futures.Future`` or ``phronomy_fsm.runtime.Task`` that settles with a
#: :class:`BarrierOutcome`; or a :class:`BarrierOutcome` decided at once.
BarrierWork = Any


#: The field types a payload schema may name: JSON types, each optionally written
#: ``<type> | None`` (``docs/spec-format.md``, "Payload schemas").
PAYLOAD_FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "str": (str,),
    "int": (int,),
    "float": (int, float),
    "bool": (bool,),
    "dict": (dict,),
    "list": (list,),
    "any": (object,),
}


def split_field_type(declared: str) -> tuple[str, bool]:
    """Split a field type as written into ``(base type, optional)``: ``"str | None"``
    gives ``("str", True)``, ``"int"`` gives ``("int", False)``."""
    parts = [p.strip() for p in declared.split("|")]
    optional = "None" in parts
    base = [p for p in parts if p != "None"]
    return (base[0] if len(base) == 1 else declared.strip()), optional


def payload_problems(
    fields: tuple[tuple[str, str], ...], payload: Any, *, extra_keys: frozenset[str] = frozenset()
) -> list[str]:
    """Every way ``payload`` (JSON data) misses the payload schema ``fields``
    (``(field, type)`` pairs from :attr:`EventRow.fields`); empty when it fits or when
    there is no schema.

    A payload fits when it is a mapping holding every field not declared
    ``<type> | None``, each of its declared JSON type (``bool`` is no ``int``), and no
    other key but ``extra_keys`` (the interleaving checker's mark). Used by
    ``send_signal`` before anything is written (``docs/semantics.md``, "Signals").
    """
    if not fields:
        return []
    if not isinstance(payload, dict):
        names = ", ".join(f for f, _ in fields)
        return [f"expected a mapping with fields {names}, got {type(payload).__name__}"]
    problems: list[str] = []
    declared = dict(fields)
    for name, written in fields:
        base, optional = split_field_type(written)
        if name not in payload:
            if not optional:
                problems.append(f"field {name!r} ({written}) is missing")
            continue
        value = payload[name]
        if value is None and optional:
            continue
        kinds = PAYLOAD_FIELD_TYPES.get(base, (object,))
        wrong_bool = isinstance(value, bool) and bool not in kinds and base != "any"
        if wrong_bool or not isinstance(value, kinds):
            problems.append(f"field {name!r} must be {written}, got {type(value).__name__}")
    problems.extend(
        f"unexpected field {key!r} (declared: {', '.join(declared)})"
        for key in payload
        if key not in declared and key not in extra_keys
    )
    return problems
