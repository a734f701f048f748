"""The spec model: frozen attrs values describing one machine, independent of YAML.

This layer knows nothing of YAML, of code generation or of execution.
:mod:`phronomy_fsm.spec.loader` builds it from a YAML file (the YAML keys of every node
are listed once, in :mod:`phronomy_fsm.spec.shape`); :mod:`phronomy_fsm.spec.resolve`
works out what it means (the state tree, derived events, the rows barrier shorthands
and compound states stand for); :mod:`phronomy_fsm.spec.validate` checks it;
``phronomy_fsm.codegen`` lowers it to a table; :mod:`phronomy_fsm.diagram` draws it.

The model holds the spec *as written*: compound states keep their children (each
state records its ``parent``), barrier shorthands keep their targets. Every node keeps
a :class:`SourceLoc` (file, 1-based line and column) so that each validation issue
points at the text that caused it. The format is documented in ``docs/spec-format.md``.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Iterator

import attrs

# STATE_COMPLETED (the one event the engine posts by itself) and
# BARRIER_OUTCOMES (in the order every barrier declares them) are defined once, in the
# runtime contract the generated code imports; re-exported here for the spec layer.
from phronomy_fsm.table import AT_MOST_ONCE, BARRIER_OUTCOMES, IDEMPOTENT, PURE, STATE_COMPLETED

#: Offload outcomes: the hook's return value or its exception, each posted as an event.
OFFLOAD_OUTCOMES: tuple[str, ...] = ("completed", "failed")


class StateKind(enum.StrEnum):
    """How a state behaves on entry (``docs/spec-format.md`` "States").

    - ``auto``: runs its entry work, then posts ``state_completed`` to itself through
      the queue, so the next step is a separate queued turn;
    - ``external``: waits for the events its transitions declare;
    - ``wait``: halts the session durably; a later outside call (approve, resolve)
      starts a new session incarnation there and fires one event;
    - ``final``: finishes the session; nothing leaves it.
    """

    AUTO = "auto"
    EXTERNAL = "external"
    WAIT = "wait"
    FINAL = "final"


class UnhandledPolicy(enum.StrEnum):
    """What the dispatcher does with an event that arrives in a state declaring no
    transition for it: ``error`` ends the session with ``UndeclaredEventError``;
    ``ignore`` drops it (for notifications that may arrive in any state, like the
    reference's ``tool_*`` events absorbed by context pre-processing, §1.1 step 2)."""

    ERROR = "error"
    IGNORE = "ignore"


class EffectKind(enum.StrEnum):
    """What an offload's work does to the world, and so what recovery may do with it
    when its outcome was lost (``docs/spec-format.md`` "Effects and durability").

    - ``pure``: may be re-run freely (reads, filters, policy checks);
    - ``idempotent``: re-run after a crash with the same durable idempotency key;
    - ``at_most_once`` (the default): never re-run blindly; an unproven outcome parks
      the execution in the fail-closed state for an operator.
    """

    PURE = PURE
    IDEMPOTENT = IDEMPOTENT
    AT_MOST_ONCE = AT_MOST_ONCE


@attrs.frozen(order=True)
class SourceLoc:
    """Where a node was written: ``file`` as given to the loader, 1-based ``line`` and
    ``column``. ``line == 0`` means unknown (a spec built in code)."""

    file: str = "<memory>"
    line: int = 0
    column: int = 0

    def render(self) -> str:
        """Return ``file:line:col``."""
        return f"{self.file}:{self.line}:{self.column}"


UNKNOWN_LOC = SourceLoc()


@attrs.frozen
class GuardRef:
    """A guard referenced by name, optionally negated (``guard: not input_blocked``)."""

    name: str
    negated: bool = False
    loc: SourceLoc = UNKNOWN_LOC

    def render(self) -> str:
        """Return the guard as written: ``name`` or ``not name``."""
        return f"not {self.name}" if self.negated else self.name


@attrs.frozen
class OffloadSpec:
    """Work run on the offload pool (an LLM call, a tool side effect, a filter).

    On entry (or when the owning transition is taken) the dispatcher asks the hook
    ``hook`` to prepare the work on the loop thread, runs it on a worker, and posts
    ``completed`` with the returned value or ``failed`` with the exception, each
    checked for authority first. ``direct`` is true for an offload an
    :class:`EffectSpec` stands for: its hook is then a plain function
    ``effect(snapshot, ectx) -> result`` run on the worker.
    """

    hook: str
    completed: str
    failed: str
    effect: EffectKind = EffectKind.AT_MOST_ONCE
    direct: bool = False
    loc: SourceLoc = UNKNOWN_LOC


@attrs.frozen
class OutcomeTargetSpec:
    """Where one barrier outcome leads, in the barrier shorthand
    (``on_committed: calling_llm`` or ``{to, guard, actions, description}``): one row
    from the barrier's state on the outcome's event (``docs/spec-format.md``
    "Barrier shorthand")."""

    to: str
    guard: GuardRef | None = None
    actions: tuple[str, ...] = ()
    description: str = ""
    loc: SourceLoc = UNKNOWN_LOC


@attrs.frozen
class EffectSpec:
    """The effect shorthand of a state (``effect: {hook, kind, on_completed, on_failed}``,
    ``docs/spec-format.md`` "Effect shorthand").

    The state runs ``hook`` as an offload of kind ``kind``; its hook is a plain function
    ``effect(snapshot, ectx) -> result``. ``completed`` and ``failed`` name the outcome
    events (long form) or are ``None``: derived as ``<hook>_completed`` and
    ``<hook>_failed`` (:meth:`event_for`), declared for you with payload types
    ``result`` (default ``Any``) and ``Exception``. ``on_completed`` and ``on_failed``
    hold the shorthand targets (rows from the state on the outcome's event; ``None``
    when not given: then a row of the ``transitions`` list must handle it). A state
    with an effect and no ``kind`` is ``external``.
    """

    hook: str
    kind: EffectKind = EffectKind.AT_MOST_ONCE
    result: str | None = None
    completed: str | None = None
    failed: str | None = None
    on_completed: tuple[OutcomeTargetSpec, ...] | None = None
    on_failed: tuple[OutcomeTargetSpec, ...] | None = None
    loc: SourceLoc = UNKNOWN_LOC

    def event_for(self, outcome: str) -> str:
        """The event posted for ``outcome`` (``completed`` or ``failed``): the one named
        in the spec, else ``<hook>_<outcome>``."""
        named: str | None = getattr(self, outcome)
        return named if named is not None else f"{self.hook}_{outcome}"

    def is_derived(self, outcome: str) -> bool:
        """True when the event of ``outcome`` is derived rather than named."""
        return getattr(self, outcome) is None

    def targets_for(self, outcome: str) -> tuple[OutcomeTargetSpec, ...] | None:
        """The shorthand targets of ``outcome`` (``None`` when not given)."""
        targets: tuple[OutcomeTargetSpec, ...] | None = getattr(self, f"on_{outcome}")
        return targets

    def as_offload(self) -> OffloadSpec:
        """The offload this effect stands for (``direct``: a plain effect function)."""
        return OffloadSpec(
            self.hook,
            self.event_for("completed"),
            self.event_for("failed"),
            self.kind,
            direct=True,
            loc=self.loc,
        )


@attrs.frozen
class BarrierSpec:
    """A named durable commit that must succeed before an external effect starts.

    The barrier's hook commits through the store (with reconciliation of a lost
    response) and its outcome is posted as the event named for it: ``committed``,
    ``not_committed``, ``conflict`` and ``outcome_unknown`` name the events (long form);
    ``None`` means the event is derived, ``<event_prefix>_<outcome>`` with the prefix
    defaulting to the barrier's ``name`` (:meth:`event_for`). ``on_<outcome>`` holds
    the shorthand targets of that outcome (``None``: not given; ``conflict`` and
    ``outcome_unknown`` then default to the machine's ``fail_closed`` state unless a
    transition handles them).
    """

    name: str
    committed: str | None = None
    not_committed: str | None = None
    conflict: str | None = None
    outcome_unknown: str | None = None
    event_prefix: str | None = None
    on_committed: tuple[OutcomeTargetSpec, ...] | None = None
    on_not_committed: tuple[OutcomeTargetSpec, ...] | None = None
    on_conflict: tuple[OutcomeTargetSpec, ...] | None = None
    on_outcome_unknown: tuple[OutcomeTargetSpec, ...] | None = None
    loc: SourceLoc = UNKNOWN_LOC

    def event_for(self, outcome: str) -> str:
        """The event posted for ``outcome`` (one of ``BARRIER_OUTCOMES``): the one named
        in the spec, else ``<event_prefix or name>_<outcome>``."""
        named: str | None = getattr(self, outcome)
        if named is not None:
            return named
        return f"{self.event_prefix or self.name}_{outcome}"

    def is_derived(self, outcome: str) -> bool:
        """True when the event of ``outcome`` is derived rather than named."""
        return getattr(self, outcome) is None

    def targets_for(self, outcome: str) -> tuple[OutcomeTargetSpec, ...] | None:
        """The shorthand targets of ``outcome`` (``None`` when not given)."""
        targets: tuple[OutcomeTargetSpec, ...] | None = getattr(self, f"on_{outcome}")
        return targets

    def outcome_events(self) -> Iterator[tuple[str, str]]:
        """Yield ``(outcome, event)`` for the four outcomes, in order (named or derived)."""
        for outcome in BARRIER_OUTCOMES:
            yield outcome, self.event_for(outcome)


@attrs.frozen
class TimeoutSpec:
    """A timer armed on entry to an ``external`` or ``wait`` state: after ``seconds``
    (wall time from the injectable clock) ``event`` is posted unless the state was left."""

    seconds: float
    event: str
    loc: SourceLoc = UNKNOWN_LOC


@attrs.frozen
class EventSpec:
    """A declared event. ``payload`` names the payload type (documentation and the
    generated Protocol's comments only); ``unhandled`` says what happens when it arrives
    in a state with no transition for it. ``durable`` documents an event posted only
    after a durable commit by its sender (e.g. a parent's barrier); it is carried into
    the table but is no committed edge for the durability checks: the sender's commit
    does not announce this execution's effect (``docs/spec-format.md``, "Effects and
    durability"). ``fields`` is a payload schema, ``(field, type)`` pairs, when the spec
    wrote ``payload`` as a mapping (``payload`` is then the generated class's name,
    ``<Event>Payload``): signals are checked against it (``docs/spec-format.md``,
    "Payload schemas")."""

    name: str
    description: str = ""
    payload: str | None = None
    unhandled: UnhandledPolicy = UnhandledPolicy.ERROR
    durable: bool = False
    fields: tuple[tuple[str, str], ...] = ()
    loc: SourceLoc = UNKNOWN_LOC


@attrs.frozen
class StateSpec:
    """A state: its kind, entry actions (names), and at most one offload hook or
    barrier started on entry, plus an optional timeout.

    A *compound* state contains states (``states:`` in YAML); its children name it as
    their ``parent``. A compound state has no kind (``None``) and no work of its own:
    it groups the transitions declared on it (``docs/spec-format.md`` "Compound
    states"). ``kind`` is ``None`` only for compound states (and for a state whose kind
    could not be read). ``effect`` is the effect shorthand as written; the loader also
    sets ``offload`` to the offload it stands for (:meth:`EffectSpec.as_offload`), so
    every check reads one offload. ``initial`` marks the machine's initial state at the top level
    and the initial child inside a compound state. ``compound`` is true when the spec
    wrote ``states:`` in this state (even an empty mapping); ``parent`` names the
    compound state it sits in (``None`` at the top level).
    """

    name: str
    kind: StateKind | None = None
    description: str = ""
    initial: bool = False
    entry: tuple[str, ...] = ()
    offload: OffloadSpec | None = None
    barrier: BarrierSpec | None = None
    timeout: TimeoutSpec | None = None
    parent: str | None = None
    compound: bool = False
    effect: EffectSpec | None = None
    loc: SourceLoc = UNKNOWN_LOC

    @property
    def is_final(self) -> bool:
        """True for ``final`` states."""
        return self.kind is StateKind.FINAL

    @property
    def has_work(self) -> bool:
        """True when the state declares entry actions, an offload, a barrier or a timeout."""
        return bool(self.entry or self.offload or self.barrier or self.timeout)


@attrs.frozen
class TransitionSpec:
    """One row of the ordered transition list.

    ``sources`` are the states it leaves; ``target`` is ``None`` for an internal
    transition (actions run, the state is neither exited nor re-entered). For a given
    state and event the rows are tried in ``index`` order and the first whose guard
    passes wins. A transition may carry its own offload or barrier, started when it is
    taken (after its actions, before the target's entry actions).
    """

    index: int
    sources: tuple[str, ...]
    event: str
    target: str | None = None
    guard: GuardRef | None = None
    actions: tuple[str, ...] = ()
    offload: OffloadSpec | None = None
    barrier: BarrierSpec | None = None
    description: str = ""
    path: str = ""
    loc: SourceLoc = UNKNOWN_LOC

    @property
    def where(self) -> str:
        """The document path of the row: ``path`` for a row a barrier shorthand stands
        for (``$.states.s.barrier.on_committed[0]``), else ``$.transitions[index]``."""
        return self.path or f"$.transitions[{self.index}]"

    def render(self) -> str:
        """Return a one-line human form: ``a, b --event [guard]--> target``."""
        guard = f" [{self.guard.render()}]" if self.guard else ""
        target = self.target if self.target is not None else "(internal)"
        return f"{', '.join(self.sources)} --{self.event}{guard}--> {target}"


@attrs.frozen
class MigrationSpec:
    """How executions pinned to an older spec are recovered under this one.

    An execution started under spec version ``from_version`` (and, when given, exactly
    the spec whose sha256 is ``from_sha256``) is recovered with its durable state names
    mapped through ``rename_states`` (old name → new name); a name absent from the map
    must still exist. Without a matching migration an execution pinned to another spec
    is parked in ``recovery_required`` (``docs/spec-format.md`` "Migrations").
    """

    from_version: int
    from_sha256: str | None = None
    rename_states: tuple[tuple[str, str], ...] = ()
    loc: SourceLoc = UNKNOWN_LOC


#: Seconds in each period a limit's ``rate`` may be written per.
RATE_PERIODS: dict[str, float] = {"second": 1.0, "minute": 60.0, "hour": 3600.0}

#: Where a limit's key may come from: a label of the execution or a context field.
LIMIT_KEY_SOURCES: tuple[str, ...] = ("label", "context")


def parse_rate(text: str) -> tuple[int, float] | None:
    """``"600 per minute"`` → ``(600, 60.0)``: starts and the period in seconds
    (``second``, ``minute`` or ``hour``, plural accepted; ``/`` for ``per``). ``None``
    when ``text`` is not of that form; the count is not checked here (the validator
    reports a count below 1: ``docs/spec-format.md``, "Limits")."""
    import re

    match = re.fullmatch(r"\s*(-?\d+)\s*(?:per|/)\s*(second|minute|hour)s?\s*", text)
    if match is None:
        return None
    return int(match.group(1)), RATE_PERIODS[match.group(2)]


@attrs.frozen
class LimitSpec:
    """A rate or concurrency limit on effects, held across every worker of a store
    (``docs/spec-format.md``, "Limits").

    ``name`` identifies the limit in the store (machines that declare the same name
    share it); ``effects`` are the offload hooks it covers; ``key`` is where a key comes
    from — ``label.<name>`` (a label of the execution) or ``context.<field>`` — or
    ``None`` (one key for all); ``concurrency`` is the most effects running at once per
    key; ``rate`` the most starts per period per key, as written (``"600 per
    minute"``; :func:`parse_rate`).
    """

    name: str
    effects: tuple[str, ...] = ()
    key: str | None = None
    concurrency: int | None = None
    rate: str | None = None
    description: str = ""
    loc: SourceLoc = UNKNOWN_LOC

    @property
    def key_parts(self) -> tuple[str, str] | None:
        """``(source, name)`` of a well-formed :attr:`key` (``("label", "agent_id")``),
        else ``None``."""
        if self.key is None or "." not in self.key:
            return None
        source, _, name = self.key.partition(".")
        return (source, name) if source in LIMIT_KEY_SOURCES and name else None


#: Descriptions of derived barrier outcome events, by outcome.
_DERIVED_EVENT_TEXT = {
    "committed": "Barrier {barrier} committed.",
    "not_committed": "Barrier {barrier} is known not to have committed.",
    "conflict": "Barrier {barrier} lost its compare-and-set.",
    "outcome_unknown": "The response of barrier {barrier} was lost and could not be reconciled.",
}


#: Descriptions of derived effect outcome events, by outcome.
_DERIVED_EFFECT_TEXT = {
    "completed": "Effect {hook} returned; the payload is its result.",
    "failed": "Effect {hook} raised; the payload is the exception.",
}


@attrs.frozen
class MachineSpec:
    """One machine: the whole contents of one spec file.

    ``source_sha256`` is the sha256 of the file's bytes (hex), recorded in generated
    code and in executions; ``source_name`` is the path as given to the loader, used in
    diagnostics and in the generated header (never an absolute path when the caller
    passes a relative one). ``fail_closed`` names the state unproven barrier outcomes go
    to (``None``: not declared); ``fail_closed_loc`` is where it was written.
    ``final_commit`` is the name diagrams give the engine's ``@final`` commit (``None``:
    not declared; ``docs/spec-format.md`` "Top-level keys"); ``final_commit_loc`` is where it
    was written. ``limits`` are its limits on effects (``docs/spec-format.md``,
    "Limits").
    """

    machine: str
    version: int
    states: tuple[StateSpec, ...]
    events: tuple[EventSpec, ...]
    transitions: tuple[TransitionSpec, ...]
    description: str = ""
    spec_format: int = 1
    migrations: tuple[MigrationSpec, ...] = ()
    fail_closed: str | None = None
    source_name: str = "<memory>"
    source_sha256: str = ""
    loc: SourceLoc = UNKNOWN_LOC
    fail_closed_loc: SourceLoc = UNKNOWN_LOC
    final_commit: str | None = None
    final_commit_loc: SourceLoc = UNKNOWN_LOC
    limits: tuple[LimitSpec, ...] = ()

    @functools.cached_property
    def _state_index(self) -> dict[str, StateSpec]:
        """State name → its first declaration (computed once per spec)."""
        index: dict[str, StateSpec] = {}
        for state in self.states:
            index.setdefault(state.name, state)
        return index

    @functools.cached_property
    def _paths(self) -> dict[int, str]:
        """``id`` of each state declaration → its document path (computed once)."""
        paths: dict[int, str] = {}
        latest: dict[str, str] = {}
        for state in self.states:  # parents come before their children
            base = latest.get(state.parent, "$") if state.parent is not None else "$"
            path = f"{base}.states.{state.name}"
            paths[id(state)] = path
            latest.setdefault(state.name, path)
        return paths

    def state(self, name: str) -> StateSpec | None:
        """Return the state called ``name`` (its first declaration), or ``None``."""
        return self._state_index.get(name)

    def event(self, name: str) -> EventSpec | None:
        """Return the event called ``name``, or ``None``."""
        for event in self.events:
            if event.name == name:
                return event
        return None

    @property
    def initial_states(self) -> tuple[StateSpec, ...]:
        """Every top-level state marked ``initial`` (a valid spec has exactly one)."""
        return tuple(s for s in self.states if s.initial and s.parent is None)

    def children(self, name: str | None) -> tuple[StateSpec, ...]:
        """The states directly inside ``name`` (``None``: the top-level states)."""
        return tuple(s for s in self.states if s.parent == name)

    def state_path(self, name: str) -> str:
        """The document path of state ``name``: ``$.states.a.states.b`` for a child (the
        first declaration when the name is declared twice; see :meth:`path_of`)."""
        state = self.state(name)
        return self.path_of(state) if state is not None else f"$.states.{name}"

    def path_of(self, state: StateSpec) -> str:
        """The document path of the state declaration ``state`` (one of :attr:`states`)."""
        path = self._paths.get(id(state))
        if path is not None:
            return path
        return f"$.states.{state.name}"

    @property
    def implicit_state_completed(self) -> bool:
        """True when the spec has auto states but does not declare ``state_completed``:
        the engine's own event is then added."""
        return all(e.name != STATE_COMPLETED for e in self.events) and any(
            s.kind is StateKind.AUTO for s in self.states
        )

    def effective_events(self) -> tuple[EventSpec, ...]:
        """The events the generated table holds: the declared events, with
        ``state_completed`` first when it is implicit (:attr:`implicit_state_completed`),
        then the derived outcome events of barriers that the spec does not declare
        (payload ``BarrierOutcome``; ``docs/spec-format.md`` "Barrier shorthand"), then
        those of effect shorthands (``<hook>_completed`` with the effect's ``result``
        type, ``<hook>_failed`` with ``Exception``; "Effect shorthand")."""
        declared = {e.name for e in self.events}
        derived: list[EventSpec] = []
        for _, barrier, _ in self.barriers():
            for outcome in BARRIER_OUTCOMES:
                name = barrier.event_for(outcome)
                if barrier.is_derived(outcome) and name not in declared:
                    declared.add(name)
                    derived.append(
                        EventSpec(
                            name,
                            description=_DERIVED_EVENT_TEXT[outcome].format(barrier=barrier.name),
                            payload="BarrierOutcome",
                            loc=barrier.loc,
                        )
                    )
        for state in self.states:
            effect = state.effect
            if effect is None:
                continue
            for outcome, payload in (
                ("completed", effect.result or "Any"),
                ("failed", "Exception"),
            ):
                name = effect.event_for(outcome)
                if effect.is_derived(outcome) and name not in declared:
                    declared.add(name)
                    derived.append(
                        EventSpec(
                            name,
                            description=_DERIVED_EFFECT_TEXT[outcome].format(hook=effect.hook),
                            payload=payload,
                            loc=effect.loc,
                        )
                    )
        if not self.implicit_state_completed:
            return (*self.events, *derived)
        implicit = EventSpec(
            STATE_COMPLETED, description="posted by the engine after an auto state's entry work"
        )
        return (implicit, *self.events, *derived)

    def hook_names(
        self,
    ) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
        """``(guards, actions, offload_hooks, barriers)``: every name the application
        implements, each sorted and without duplicates (entry actions count as actions,
        and so do the guards and actions of barrier shorthand targets)."""
        guards = {t.guard.name for t in self.transitions if t.guard}
        actions = {a for t in self.transitions for a in t.actions}
        actions |= {a for s in self.states for a in s.entry}
        for target in self.outcome_targets():
            if target.guard:
                guards.add(target.guard.name)
            actions.update(target.actions)
        offloads = {s.offload.hook for s in self.states if s.offload}
        offloads |= {t.offload.hook for t in self.transitions if t.offload}
        barriers = {s.barrier.name for s in self.states if s.barrier}
        barriers |= {t.barrier.name for t in self.transitions if t.barrier}
        return (
            tuple(sorted(guards)),
            tuple(sorted(actions)),
            tuple(sorted(offloads)),
            tuple(sorted(barriers)),
        )

    def barriers(self) -> Iterator[tuple[str, BarrierSpec, str | None]]:
        """Yield ``(document path, barrier, owner)`` for every barrier: a state's (owner:
        the state) and a transition's (owner: its target, where the outcomes arrive;
        ``None`` for an internal row)."""
        for state in self.states:
            if state.barrier is not None:
                yield self.state_path(state.name) + ".barrier", state.barrier, state.name
        for t in self.transitions:
            if t.barrier is not None:
                yield t.where + ".barrier", t.barrier, t.target

    def effects(self) -> Iterator[tuple[str, EffectSpec, str]]:
        """Yield ``(document path, effect, state)`` for every effect shorthand."""
        for state in self.states:
            if state.effect is not None:
                yield self.state_path(state.name) + ".effect", state.effect, state.name

    def outcome_targets(self) -> Iterator[OutcomeTargetSpec]:
        """Every barrier and effect shorthand target, in document order."""
        for _, barrier, _ in self.barriers():
            for outcome in BARRIER_OUTCOMES:
                yield from barrier.targets_for(outcome) or ()
        for _, effect, _ in self.effects():
            for outcome in OFFLOAD_OUTCOMES:
                yield from effect.targets_for(outcome) or ()
