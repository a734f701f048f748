"""What a spec means: the state tree, the rows barrier and effect shorthands stand for, and the
flat, prioritised table of ``(leaf state, event)`` candidates the dispatcher runs.

:func:`resolve_spec` is the one place that gives compound states and barrier shorthands
their meaning (``docs/spec-format.md`` "Compound states", "Barrier shorthand"); the
validator checks the result and the code generator lowers it to a
:class:`~phronomy_fsm.table.MachineTable`, so both read the same semantics.

- **Rows a barrier stands for.** Each shorthand target (``on_committed: calling_llm``)
  is a row from the barrier's state on the outcome's event. An outcome ``conflict`` or
  ``outcome_unknown`` with no target and no written row from the barrier's state (or a
  compound state around it) on its event goes to the machine's ``fail_closed`` state.
- **Rows an effect stands for.** Each effect shorthand target (``on_completed: done``)
  is a row from the effect's state on the outcome's event (``<hook>_completed`` or
  ``<hook>_failed`` unless named); an effect has no unproven outcome event: the engine
  parks an effect whose outcome was lost (``docs/semantics.md``, "Effects").
- **Compound states.** A row declared on a compound state applies to every leaf state
  inside it except final states (nothing leaves a final state); a row entering a
  compound state enters its initial child, recursively.
- **Priority** (SCXML's rule: descendants before ancestors, then document order). For
  a leaf state and an event, the candidate rows are those declared on the leaf, in
  document order, then those declared on its parent, then its grandparent's, and so
  on; the first whose guard passes wins.
- **Lowering.** The flat table lists the rows declared on leaf states in document
  order, then the rows declared on compound states, deepest compound first, each depth
  in document order. A row whose ``from`` mixes depths is split, one flat row per
  depth. A spec without compound states lowers to its rows exactly as written.

"Document order" is the order of the rows' locations in the file; the rows a barrier
stands for are where the barrier is written, in outcome order (committed,
not_committed, conflict, outcome_unknown), each outcome's targets in the order given.
Rows built in memory (no location) keep their enumeration order: barrier rows, in state
order, before the ``transitions`` list. Nothing here raises: unknown names are kept as they
are (the validator reports them), and a row whose target cannot be entered keeps
``target=None`` with ``unresolved_target`` set.
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from phronomy_fsm.spec.model import (
    BARRIER_OUTCOMES,
    OFFLOAD_OUTCOMES,
    BarrierSpec,
    EffectSpec,
    EventSpec,
    MachineSpec,
    StateSpec,
    TransitionSpec,
)

#: Outcomes that default to the machine's fail_closed state.
FAIL_CLOSED_OUTCOMES = ("conflict", "outcome_unknown")

#: Descriptions of the rows shorthand targets stand for when the spec gives none.
_ROW_TEXT = {
    "committed": "Barrier {barrier} committed.",
    "not_committed": "Barrier {barrier} did not commit.",
    "conflict": "Barrier {barrier} lost its compare-and-set; fail closed.",
    "outcome_unknown": "Barrier {barrier} is unproven; fail closed.",
}


#: Descriptions of the rows effect shorthand targets stand for when the spec gives none.
_EFFECT_ROW_TEXT = {
    "completed": "Effect {hook} returned.",
    "failed": "Effect {hook} raised.",
}


@attrs.frozen
class FlatRow:
    """One row of the flat table.

    ``spec`` is the row as declared (written in ``transitions``, or standing for a
    barrier shorthand target or a fail-closed default: see ``origin``); ``sources`` are
    the leaf states it leaves; ``target`` the leaf state it enters (``None`` for an
    internal row, or when ``unresolved_target``); ``declared_on`` the compound states
    it was declared on (empty for rows declared on leaf states).
    """

    spec: TransitionSpec
    sources: tuple[str, ...]
    target: str | None
    declared_on: tuple[str, ...] = ()
    origin: str = "transition"
    unresolved_target: bool = False

    @property
    def event(self) -> str:
        """The triggering event."""
        return self.spec.event

    @property
    def internal(self) -> bool:
        """True for an internal row (no target written)."""
        return self.spec.target is None


@attrs.frozen
class DeclaredRow:
    """A row as declared, with where it came from: ``origin`` is ``transition`` (the
    ``transitions`` list), ``shorthand`` (a barrier target) or ``fail_closed`` (the
    default of an unhandled ``conflict``/``outcome_unknown``)."""

    spec: TransitionSpec
    origin: str
    order: tuple[int, int, int]


class ResolvedMachine:
    """A spec with its meaning worked out (see the module docstring).

    Attributes:
        spec: the spec as written.
        states: every state by name (the first declaration wins for a repeated name).
        leaves: the leaf states (no child states), in document order.
        compounds: the compound states, in document order.
        events: the effective events (declared, implicit ``state_completed``, derived).
        declared: every row as declared (:class:`DeclaredRow`), in document order.
        rows: the flat table (:class:`FlatRow`), in lowered order.
        candidates: ``(leaf, event)`` → the rows tried, in priority order.
        events_from: leaf → the events some row takes in it.
        initial: the leaf a new session starts in (``None`` when it cannot be entered).
    """

    def __init__(self, spec: MachineSpec) -> None:
        self.spec = spec
        self.states: dict[str, StateSpec] = {}
        for state in spec.states:
            self.states.setdefault(state.name, state)
        self.children: dict[str | None, list[str]] = {}
        for state in spec.states:
            if self.states[state.name] is state:
                self.children.setdefault(state.parent, []).append(state.name)
        self.compounds = tuple(s for s in self.states.values() if self.is_compound(s.name))
        self.leaves = tuple(s for s in self.states.values() if not self.is_compound(s.name))
        self.events: tuple[EventSpec, ...] = spec.effective_events()
        self.event_names = frozenset(e.name for e in self.events)
        self._leaves_under: dict[str, tuple[str, ...]] = {}
        self._written = {(s, t.event) for t in spec.transitions for s in t.sources}
        self.declared = tuple(self._declared_rows())
        self.rows = tuple(self._lower())
        self.candidates: dict[tuple[str, str], tuple[FlatRow, ...]] = {}
        grouped: dict[tuple[str, str], list[FlatRow]] = {}
        #: leaf state -> the events some row takes in it
        self.events_from: dict[str, set[str]] = {}
        for row in self.rows:
            for source in row.sources:
                grouped.setdefault((source, row.event), []).append(row)
                self.events_from.setdefault(source, set()).add(row.event)
        self.candidates = {key: tuple(rows) for key, rows in grouped.items()}
        top = spec.initial_states
        self.initial = self.enter(top[0].name) if top else None

    # the state tree ------------------------------------------------------------

    def is_compound(self, name: str) -> bool:
        """True for a state written with child ``states``."""
        state = self.states.get(name)
        return state is not None and (state.compound or bool(self.children.get(name)))

    def ancestors(self, name: str) -> tuple[str, ...]:
        """The compound states around ``name``, innermost first (cycles cut)."""
        out: list[str] = []
        state = self.states.get(name)
        while state is not None and state.parent is not None and state.parent not in out:
            out.append(state.parent)
            state = self.states.get(state.parent)
        return tuple(out)

    def depth(self, name: str) -> int:
        """How many compound states are around ``name`` (0 at the top level)."""
        return len(self.ancestors(name))

    def leaves_under(self, name: str) -> tuple[str, ...]:
        """The leaf states inside ``name`` in document order (``(name,)`` for a leaf)."""
        cached = self._leaves_under.get(name)
        if cached is not None:
            return cached
        if not self.is_compound(name):
            result: tuple[str, ...] = (name,)
        else:
            found: list[str] = []
            stack = list(reversed(self.children.get(name, [])))
            seen = {name}
            while stack:
                child = stack.pop()
                if child in seen:
                    continue
                seen.add(child)
                if self.is_compound(child):
                    stack.extend(reversed(self.children.get(child, [])))
                else:
                    found.append(child)
            result = tuple(found)
        self._leaves_under[name] = result
        return result

    def initial_child(self, name: str) -> str | None:
        """The child of compound ``name`` marked initial (the first, if several)."""
        for child in self.children.get(name, []):
            if self.states[child].initial:
                return child
        return None

    def enter(self, name: str) -> str | None:
        """The leaf entered by a row to ``name``: ``name`` itself for a leaf, else its
        initial child, recursively; ``None`` when a compound on the way has no initial
        child or ``name`` is unknown."""
        seen: set[str] = set()
        probe: str | None = name
        while probe is not None and probe in self.states and self.is_compound(probe):
            if probe in seen:
                return None
            seen.add(probe)
            probe = self.initial_child(probe)
        return probe if probe is not None and probe in self.states else None

    # rows ----------------------------------------------------------------------

    def handled_by_written(self, state: str, event: str) -> bool:
        """True when a row of the ``transitions`` list leaves ``state`` (or a compound
        state around it) on ``event``."""
        return any((s, event) in self._written for s in (state, *self.ancestors(state)))

    def _declared_rows(self) -> Iterable[DeclaredRow]:
        rows: list[DeclaredRow] = []
        seq = 0
        for path, barrier, owner in self.spec.barriers():
            if owner is None:
                continue
            for row, origin in self._barrier_rows(path, barrier, owner):
                where = (barrier.loc.line, barrier.loc.column, seq)
                rows.append(DeclaredRow(row, origin, where))
                seq += 1
        for path, effect, owner in self.spec.effects():
            for row in self._effect_rows(path, effect, owner):
                where = (effect.loc.line, effect.loc.column, seq)
                rows.append(DeclaredRow(row, "shorthand", where))
                seq += 1
        for t in self.spec.transitions:
            rows.append(DeclaredRow(t, "transition", (t.loc.line, t.loc.column, seq)))
            seq += 1
        rows.sort(key=lambda r: r.order)
        return rows

    def _barrier_rows(
        self, path: str, barrier: BarrierSpec, owner: str
    ) -> Iterable[tuple[TransitionSpec, str]]:
        for outcome in BARRIER_OUTCOMES:
            event = barrier.event_for(outcome)
            targets = barrier.targets_for(outcome)
            if targets is not None:
                for i, target in enumerate(targets):
                    text = target.description or _ROW_TEXT[outcome].format(barrier=barrier.name)
                    yield (
                        TransitionSpec(
                            -1,
                            (owner,),
                            event,
                            target.to,
                            guard=target.guard,
                            actions=target.actions,
                            description=text,
                            path=f"{path}.on_{outcome}[{i}]",
                            loc=target.loc,
                        ),
                        "shorthand",
                    )
            elif (
                outcome in FAIL_CLOSED_OUTCOMES
                and self.spec.fail_closed is not None
                and not self.handled_by_written(owner, event)
            ):
                yield (
                    TransitionSpec(
                        -1,
                        (owner,),
                        event,
                        self.spec.fail_closed,
                        description=_ROW_TEXT[outcome].format(barrier=barrier.name),
                        path=f"{path}.on_{outcome}",
                        loc=barrier.loc,
                    ),
                    "fail_closed",
                )

    def _effect_rows(self, path: str, effect: EffectSpec, owner: str) -> Iterable[TransitionSpec]:
        for outcome in OFFLOAD_OUTCOMES:
            for i, target in enumerate(effect.targets_for(outcome) or ()):
                text = target.description or _EFFECT_ROW_TEXT[outcome].format(hook=effect.hook)
                yield TransitionSpec(
                    -1,
                    (owner,),
                    effect.event_for(outcome),
                    target.to,
                    guard=target.guard,
                    actions=target.actions,
                    description=text,
                    path=f"{path}.on_{outcome}[{i}]",
                    loc=target.loc,
                )

    def _lower(self) -> Iterable[FlatRow]:
        leaf_rows: list[FlatRow] = []
        compound_rows: list[tuple[int, int, FlatRow]] = []
        for n, declared in enumerate(self.declared):
            row = declared.spec
            target: str | None = None
            unresolved = False
            if row.target is not None:
                target = self.enter(row.target)
                unresolved = target is None
            covered: set[str] = set()
            leaves: list[str] = []
            for source in row.sources:
                known_leaf = source in self.states and not self.is_compound(source)
                if known_leaf and source not in covered:
                    covered.add(source)
                    leaves.append(source)
            if leaves:
                leaf_rows.append(
                    FlatRow(row, tuple(leaves), target, (), declared.origin, unresolved)
                )
            by_depth: dict[int, list[str]] = {}
            for source in row.sources:
                if source in self.states and self.is_compound(source):
                    parents = by_depth.setdefault(self.depth(source), [])
                    if source not in parents:
                        parents.append(source)
            for depth, parents in sorted(by_depth.items(), key=lambda item: -item[0]):
                members: list[str] = []
                for parent in parents:
                    for leaf in self.leaves_under(parent):
                        if leaf not in covered and not self.states[leaf].is_final:
                            covered.add(leaf)
                            members.append(leaf)
                if members:
                    flat = FlatRow(
                        row, tuple(members), target, tuple(parents), declared.origin, unresolved
                    )
                    compound_rows.append((-depth, n, flat))
        yield from leaf_rows
        compound_rows.sort(key=lambda item: (item[0], item[1]))
        yield from (flat for _, _, flat in compound_rows)


def resolve_spec(spec: MachineSpec) -> ResolvedMachine:
    """Work out what ``spec`` means (see the module docstring); never raises."""
    return ResolvedMachine(spec)
