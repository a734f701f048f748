"""What every validation check reads: the spec, its meaning, and what is known to be
missing or mistyped in it.

A :class:`CheckContext` is built once per validation by
:func:`phronomy_fsm.spec.validate.validate_spec`. Besides the spec and its resolved
meaning (:mod:`phronomy_fsm.spec.resolve`) it carries what keeps diagnostics on their
root cause (``docs/spec-format.md`` "Validation codes"):

- ``damaged``: document paths the loader could not read (a bad ``kind``, a malformed
  row); checks that would only report consequences of them skip them;
- ``repaired``: the spec with every unknown state or event name that has a close
  declared match replaced by that match, so that a mistyped target gives one
  ``UNKNOWN_STATE`` ("did you mean ...?") and not a cascade of unreachable states;
  ``unresolved`` is true when some unknown name has no close match (the checks that
  need every row to be known are then skipped).
"""

from __future__ import annotations

from phronomy_fsm.spec.issues import SpecIssue
from phronomy_fsm.spec.model import (
    STATE_COMPLETED,
    EventSpec,
    MachineSpec,
    SourceLoc,
    StateKind,
    StateSpec,
)
from phronomy_fsm.spec.resolve import FlatRow, ResolvedMachine


class CheckContext:
    """The shared state of one validation run (see the module docstring).

    Attributes:
        spec: the spec as written (paths and locations of issues come from it).
        damaged: document paths the loader could not read.
        resolved: the meaning of the repaired spec (every check reads rows from it).
        unresolved: an unknown name had no close match.
        rows_complete: every row is known (see ``__init__``).
        partly_damaged: states some part of which the loader could not read.
        issues: the issues found so far.
    """

    def __init__(
        self,
        spec: MachineSpec,
        resolved: ResolvedMachine,
        *,
        damaged: frozenset[str] = frozenset(),
        unresolved: bool = False,
    ) -> None:
        self.spec = spec
        self.resolved = resolved
        self.damaged = damaged
        self.unresolved = unresolved
        self.states: dict[str, StateSpec] = resolved.states
        self.events: dict[str, EventSpec] = {e.name: e for e in resolved.events}
        self.issues: list[SpecIssue] = []
        self.rows_damaged = any(
            p == "$.transitions" or p.startswith("$.transitions[") for p in damaged
        )
        self.states_damaged = "$.states" in damaged
        self.events_damaged = "$.events" in damaged
        self.kind_unknown = frozenset(
            s.name
            for s in resolved.leaves
            if s.kind is None or (damaged and spec.state_path(s.name) + ".kind" in damaged)
        )
        #: every row is known: none was unreadable, no state or event section was lost,
        #: every unknown name had a close match, every kind was read and every target can
        #: be entered. Checks that conclude from the *absence* of a row (unreachable,
        #: trap, unhandled ...) run only then.
        self.rows_complete = not (
            self.rows_damaged
            or self.states_damaged
            or self.events_damaged
            or unresolved
            or self.kind_unknown
            or any(row.unresolved_target for row in resolved.rows)
        )
        self.partly_damaged = frozenset(
            s.name
            for s in spec.states
            if damaged and any(p.startswith(spec.path_of(s) + ".") for p in damaged)
        )

    # reporting ---------------------------------------------------------------

    def report(self, code: str, message: str, path: str, loc: SourceLoc) -> None:
        """Record one issue."""
        self.issues.append(SpecIssue(code, message, path, loc))

    # questions checks ask -------------------------------------------------------

    def state_path(self, name: str) -> str:
        """The document path of state ``name``."""
        return self.spec.state_path(name)

    def event_known(self, name: str) -> bool:
        """True for a declared, derived or implicit event."""
        return name in self.events

    def candidates(self, state: str, event: str) -> tuple[FlatRow, ...]:
        """The rows tried for ``event`` in leaf ``state``, in priority order."""
        return self.resolved.candidates.get((state, event), ())

    def handled(self, state: str, event: str) -> bool:
        """True when some row (declared on the state or around it) takes ``event``."""
        return bool(self.resolved.candidates.get((state, event)))

    def kind_of(self, name: str) -> StateKind | None:
        """The kind of leaf state ``name`` (``None`` if unknown, compound or damaged)."""
        if name in self.kind_unknown:
            return None
        state = self.states.get(name)
        return state.kind if state is not None else None

    def is_auto(self, name: str) -> bool:
        """True for a leaf state of kind ``auto``."""
        return self.kind_of(name) is StateKind.AUTO

    def implicit_state_completed(self) -> bool:
        """True when ``state_completed`` is known without being declared."""
        return STATE_COMPLETED in self.events and all(
            e.name != STATE_COMPLETED for e in self.spec.events
        )
