"""The spec model: frozen attrs values describing one machine, independent of YAML.

This layer knows nothing of YAML, of code generation or of execution (sismic's
``model/`` split, ``../shared/design/STYLE.md``). :mod:`phronomy_fsm.spec.loader` builds
it from a YAML file; :mod:`phronomy_fsm.spec.validate` checks it;
``phronomy_fsm.codegen`` compiles it; :mod:`phronomy_fsm.diagram` draws it.

Every node keeps a :class:`SourceLoc` (file, 1-based line and column) so that each
validation issue points at the text that caused it. The format itself is documented in
``docs/spec-format.md``; the vocabulary follows ``../shared/design/ARCHITECTURE.md``
("Specs") and reference §1.1 (state categories).
"""

from __future__ import annotations

import enum
from collections.abc import Iterator

import attrs

# STATE_COMPLETED (the one event the engine posts by itself, reference §1.1) and
# BARRIER_OUTCOMES (in the order every barrier declares them) are defined once, in the
# runtime contract the generated code imports; re-exported here for the spec layer.
from phronomy_fsm.table import AT_MOST_ONCE, BARRIER_OUTCOMES, IDEMPOTENT, PURE, STATE_COMPLETED

#: Offload outcomes: the hook's return value or its exception, each posted as an event.
OFFLOAD_OUTCOMES: tuple[str, ...] = ("completed", "failed")


class StateKind(str, enum.Enum):
    """How a state behaves on entry (reference §1.1 "State categories").

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


class UnhandledPolicy(str, enum.Enum):
    """What the dispatcher does with an event that arrives in a state declaring no
    transition for it: ``error`` ends the session with ``UndeclaredEventError``;
    ``ignore`` drops it (for notifications that may arrive in any state, like the
    reference's ``tool_*`` events absorbed by context pre-processing, §1.1 step 2)."""

    ERROR = "error"
    IGNORE = "ignore"


class EffectKind(str, enum.Enum):
    """What an offload's work does to the world, and so what recovery may do with it
    when its outcome was lost (``docs/spec-format.md`` "Effects").

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
    checked for authority first (reference §7.6).
    """

    hook: str
    completed: str
    failed: str
    effect: EffectKind = EffectKind.AT_MOST_ONCE
    loc: SourceLoc = UNKNOWN_LOC


@attrs.frozen
class BarrierSpec:
    """A named durable commit that must succeed before an external effect starts.

    The barrier's hook commits through the store (with reconciliation of a lost
    response, reference §4.4) and its outcome is posted as the event named for it.
    ``None`` means the spec did not name an event for that outcome, which the validator
    reports (``BARRIER_OUTCOME_UNHANDLED``).
    """

    name: str
    committed: str | None = None
    not_committed: str | None = None
    conflict: str | None = None
    outcome_unknown: str | None = None
    loc: SourceLoc = UNKNOWN_LOC

    def outcome_events(self) -> Iterator[tuple[str, str | None]]:
        """Yield ``(outcome, event name or None)`` for the four outcomes, in order."""
        for outcome in BARRIER_OUTCOMES:
            yield outcome, getattr(self, outcome)


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
    in a state with no transition for it. ``durable`` marks an event posted only after a
    durable commit by its sender (e.g. a parent's barrier): a transition on it counts as
    a committed edge for the durability checks."""

    name: str
    description: str = ""
    payload: str | None = None
    unhandled: UnhandledPolicy = UnhandledPolicy.ERROR
    durable: bool = False
    loc: SourceLoc = UNKNOWN_LOC


@attrs.frozen
class StateSpec:
    """A state: its kind, entry actions (names), and at most one offload hook or
    barrier started on entry, plus an optional timeout."""

    name: str
    kind: StateKind
    description: str = ""
    initial: bool = False
    entry: tuple[str, ...] = ()
    offload: OffloadSpec | None = None
    barrier: BarrierSpec | None = None
    timeout: TimeoutSpec | None = None
    loc: SourceLoc = UNKNOWN_LOC

    @property
    def is_final(self) -> bool:
        """True for ``final`` states."""
        return self.kind is StateKind.FINAL


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
    target: str | None
    guard: GuardRef | None = None
    actions: tuple[str, ...] = ()
    offload: OffloadSpec | None = None
    barrier: BarrierSpec | None = None
    description: str = ""
    loc: SourceLoc = UNKNOWN_LOC

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
    is parked in ``recovery_required`` (issue 6, "spec-version pinning").
    """

    from_version: int
    from_sha256: str | None = None
    rename_states: tuple[tuple[str, str], ...] = ()
    loc: SourceLoc = UNKNOWN_LOC


@attrs.frozen
class MachineSpec:
    """One machine: the whole contents of one spec file.

    ``source_sha256`` is the sha256 of the file's bytes (hex), recorded in generated
    code and in executions; ``source_name`` is the path as given to the loader, used in
    diagnostics and in the generated header (never an absolute path when the caller
    passes a relative one). ``fail_closed`` names the state unproven barrier outcomes go
    to (``None``: not declared).
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

    def state(self, name: str) -> StateSpec | None:
        """Return the state called ``name``, or ``None``."""
        for state in self.states:
            if state.name == name:
                return state
        return None

    def event(self, name: str) -> EventSpec | None:
        """Return the event called ``name``, or ``None``."""
        for event in self.events:
            if event.name == name:
                return event
        return None

    @property
    def initial_states(self) -> tuple[StateSpec, ...]:
        """Every state marked ``initial`` (a valid spec has exactly one)."""
        return tuple(s for s in self.states if s.initial)

    def transitions_from(self, state: str) -> tuple[TransitionSpec, ...]:
        """The rows leaving ``state``, in table order."""
        return tuple(t for t in self.transitions if state in t.sources)

    @property
    def implicit_state_completed(self) -> bool:
        """True when the spec has auto states but does not declare ``state_completed``:
        the engine's own event is then added (reference §1.1)."""
        return all(e.name != STATE_COMPLETED for e in self.events) and any(
            s.kind is StateKind.AUTO for s in self.states
        )

    def effective_events(self) -> tuple[EventSpec, ...]:
        """The declared events, with ``state_completed`` first when it is implicit
        (:attr:`implicit_state_completed`) — the events the generated table holds."""
        if not self.implicit_state_completed:
            return self.events
        implicit = EventSpec(
            STATE_COMPLETED, description="posted by the engine after an auto state's entry work"
        )
        return (implicit, *self.events)

    def hook_names(
        self,
    ) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
        """``(guards, actions, offload_hooks, barriers)``: every name the application
        implements, each sorted and without duplicates (entry actions count as actions)."""
        guards = {t.guard.name for t in self.transitions if t.guard}
        actions = {a for t in self.transitions for a in t.actions}
        actions |= {a for s in self.states for a in s.entry}
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
