"""The diagram IR: what a picture of a machine shows, independent of any format.

:func:`build_diagram` builds a :class:`Diagram` from a generated
:class:`~phronomy_fsm.table.MachineTable` (``TABLE`` of a generated module, so operator
tools can draw machines whose YAML is not installed) or from a spec (lowered first by
the compiler, :func:`phronomy_fsm.codegen.lower.lower`, so both give the same picture):

- one :class:`DiagramNode` per state (kind, barrier, offload, entry actions, timeout,
  the fail-closed mark) and one :class:`DiagramCluster` per compound state;
- one :class:`DiagramEdge` per ``(table row, source state)``, except a row declared on
  compound states, which is one edge per compound state, drawn from its cluster;
- each edge has a ``role``: ``main``, or what the main-path view folds into its legend
  (``compound``: a row declared on a compound state; ``detour``: another edge into a
  state such a row leads to, like the guarded detours into ``cancelling``;
  ``fail_closed``: into the fail-closed state; ``not_committed``: a barrier outcome
  other than committed; ``offload_failed``: an offload's failure; ``internal``: an
  internal transition).

``final_commit`` is the name the spec gives the engine's ``@final`` commit (the
terminal commit): the renderers draw it as a frame around the top-level final states,
since reaching any of them is that one commit. :class:`Highlight` marks one execution's
current state and path. The renderers live in
:mod:`phronomy_fsm.diagram.dot` and :mod:`phronomy_fsm.diagram.mermaid`. Nothing here
raises for a valid table.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import attrs

from phronomy_fsm.spec.model import MachineSpec, StateKind
from phronomy_fsm.table import (
    BARRIER_OUTCOMES,
    BarrierRow,
    MachineTable,
    OffloadRow,
    StateRow,
    TransitionRow,
)

#: The state name drawn as fail-closed when a table declares no ``fail_closed``.
RECOVERY_STATE = "recovery_required"

#: Edge roles the main-path view folds into its legend, in legend order.
FOLDED_ROLES = (
    "compound",
    "detour",
    "fail_closed",
    "not_committed",
    "offload_failed",
    "internal",
)

_KIND_NOTE = {
    StateKind.AUTO: "auto",
    StateKind.EXTERNAL: "external",
    StateKind.WAIT: "wait (halts durably)",
    StateKind.FINAL: "final",
}


@attrs.frozen
class DiagramNode:
    """One state as drawn.

    ``name`` is the state's name; ``details`` are the extra label lines in display order
    (barrier, offload and its effect, entry actions, timeout); ``barrier`` / ``offload``
    name the work started on entry (``None`` when there is none); ``parent`` is the
    compound state it is drawn in; ``fail_closed`` marks the machine's fail-closed state.
    """

    name: str
    kind: StateKind
    description: str = ""
    initial: bool = False
    barrier: str | None = None
    offload: str | None = None
    details: tuple[str, ...] = ()
    parent: str | None = None
    fail_closed: bool = False

    @property
    def is_wait(self) -> bool:
        """True for ``wait`` states (halt the session durably)."""
        return self.kind is StateKind.WAIT

    @property
    def is_recovery(self) -> bool:
        """True for the fail-closed state (``recovery_required`` in the shipped specs)."""
        return self.fail_closed

    @property
    def is_barrier(self) -> bool:
        """True when entering the state starts a durable barrier."""
        return self.barrier is not None

    @property
    def kind_note(self) -> str:
        """The kind line of the label: ``auto``, ``external``, ``wait (halts durably)``,
        ``final``."""
        return _KIND_NOTE[self.kind]


@attrs.frozen
class DiagramCluster:
    """A compound state, drawn as a cluster around its states: its ``parent`` cluster
    (``None`` at the top level), the child a row into it enters, and its description."""

    name: str
    parent: str | None
    initial: str
    description: str = ""


@attrs.frozen
class DiagramEdge:
    """One drawn edge: table row ``index`` leaving ``source``.

    ``source`` is a compound state's name when the row was declared on it
    (``from_cluster``). ``target`` equals ``source`` for an internal transition
    (``internal``). ``guard`` is the guard as written (``name`` or ``not name``);
    ``barrier`` is the barrier taking the edge starts (the row's own, or the target
    state's on entry); ``offload`` is the row's own offload hook. ``role`` says what the
    main-path view does with it (see the module docstring); ``outcome`` names the work
    outcome the event is in its source state (``committed``, ``conflict``, ...,
    ``completed``, ``failed``), ``None`` for other events.
    """

    index: int
    source: str
    target: str
    event: str
    guard: str | None = None
    barrier: str | None = None
    offload: str | None = None
    actions: tuple[str, ...] = ()
    internal: bool = False
    description: str = ""
    from_cluster: bool = False
    role: str = "main"
    outcome: str | None = None

    @property
    def title(self) -> str:
        """The first label line: ``event [guard] / barrier`` (``internal:`` first for
        internal transitions, ``/ offload hook`` for a row's own offload)."""
        text = self.event
        if self.guard:
            text += f" [{self.guard}]"
        if self.barrier:
            text += f" / {self.barrier}"
        if self.offload:
            text += f" / offload {self.offload}"
        return f"internal: {text}" if self.internal else text

    def label_lines(self, *, with_actions: bool = True) -> tuple[str, ...]:
        """The label as lines: the title, then ``do: a, b`` when there are actions."""
        if with_actions and self.actions:
            return (self.title, "do: " + ", ".join(self.actions))
        return (self.title,)

    @property
    def key(self) -> tuple[str, str, str]:
        """``(source, event, target)``: how a :class:`Highlight` names the edge."""
        return (self.source, self.event, self.target)


@attrs.frozen
class Diagram:
    """Everything a state diagram of one machine shows, in table order;
    ``spec_sha256`` is the sha256 of the spec it was drawn from (``""`` when unknown);
    ``final_commit`` names the engine's ``@final`` commit when the spec does (module
    docstring)."""

    machine: str
    version: int
    description: str
    initial: str | None
    nodes: tuple[DiagramNode, ...]
    edges: tuple[DiagramEdge, ...]
    spec_sha256: str = ""
    clusters: tuple[DiagramCluster, ...] = ()
    fail_closed: str | None = None
    final_commit: str | None = None

    @property
    def final_commit_members(self) -> tuple[str, ...]:
        """The states drawn inside the ``final_commit`` frame: the top-level final
        states, in order (empty when the spec names no final commit; a final state
        inside a compound state is drawn in its compound state)."""
        if self.final_commit is None:
            return ()
        return tuple(n.name for n in self.nodes if n.kind is StateKind.FINAL and n.parent is None)

    def node(self, name: str) -> DiagramNode | None:
        """The node of state ``name``, or ``None``."""
        for node in self.nodes:
            if node.name == name:
                return node
        return None


@attrs.frozen
class Highlight:
    """One execution drawn over its machine: the state it is in (``current_state``),
    the states it went through (``visited_states``), and the edges it took
    (``visited_edges``: ``(source, target)`` pairs, or ``(source, event, target)``
    triples to single out one of several parallel edges). The renderers draw them in a
    distinct colour and keep visited edges that the main-path view would fold. The DOT
    renderer also draws ``title`` (the execution and its status), the effect states it
    passed (``effect_states``) and its stays in ``recovery_required``
    (``parked_states``: ``(state, note)`` pairs).
    """

    current_state: str | None = None
    visited_states: frozenset[str] = frozenset()
    visited_edges: frozenset[tuple[str, ...]] = frozenset()
    #: A line naming the execution and its status, drawn under the diagram's title.
    title: str | None = None
    #: Effect states (an offload on entry) the execution passed, marked ``EFFECT PASSED``.
    effect_states: frozenset[str] = frozenset()
    #: States where it stayed in ``recovery_required``, each with a note (``r2 to r3``).
    parked_states: tuple[tuple[str, str], ...] = ()

    def has_state(self, name: str) -> bool:
        """True when the execution was in (or is in) state ``name``."""
        return name in self.visited_states or name == self.current_state

    def has_edge(self, edge: DiagramEdge) -> bool:
        """True when the execution took ``edge``."""
        return (edge.source, edge.target) in self.visited_edges or edge.key in self.visited_edges


def highlight_path(states: Sequence[str], *, events: Sequence[str] | None = None) -> Highlight:
    """The :class:`Highlight` of an execution that went through ``states`` in order (the
    last is the current state), e.g. the states of its barrier history. With ``events``
    (one per step, ``len(states) - 1``), edges are matched by event too."""
    edges: set[tuple[str, ...]] = set()
    for i in range(len(states) - 1):
        if events is not None and i < len(events):
            edges.add((states[i], events[i], states[i + 1]))
        else:
            edges.add((states[i], states[i + 1]))
    return Highlight(
        current_state=states[-1] if states else None,
        visited_states=frozenset(states),
        visited_edges=frozenset(edges),
    )


def build_diagram(source: MachineSpec | MachineTable) -> Diagram:
    """Build the diagram IR of a spec or of a generated table.

    Args:
        source: a valid :class:`~phronomy_fsm.spec.model.MachineSpec` (lowered first by
            the compiler) or a :class:`~phronomy_fsm.table.MachineTable`.

    Returns:
        A :class:`Diagram` (see the module docstring).

    Raises:
        ValueError: a spec without an initial state that can be entered.
    """
    if isinstance(source, MachineTable):
        table, description = source, ""
    else:
        from phronomy_fsm.codegen.lower import lower

        table, description = lower(source), source.description
    fail_closed = table.fail_closed
    names = {s.name for s in table.states}
    if fail_closed is None and RECOVERY_STATE in names:
        fail_closed = RECOVERY_STATE
    states = {s.name: s for s in table.states}
    nodes = tuple(_node(s, table.initial, fail_closed) for s in table.states)
    roles = _Roles(table, fail_closed)
    edges: list[DiagramEdge] = []
    for t in table.transitions:
        target_state = states.get(t.target) if t.target is not None else None
        barrier = t.barrier.name if t.barrier is not None else None
        if barrier is None and target_state is not None and target_state.barrier is not None:
            barrier = target_state.barrier.name
        for origin in t.declared_on or t.sources:
            edges.append(
                DiagramEdge(
                    index=t.index,
                    source=origin,
                    target=t.target if t.target is not None else origin,
                    event=t.event,
                    guard=(f"not {t.guard}" if t.negated else t.guard) if t.guard else None,
                    barrier=barrier,
                    offload=t.offload.hook if t.offload else None,
                    actions=t.actions,
                    internal=t.target is None,
                    description=t.description,
                    from_cluster=bool(t.declared_on),
                    role=roles.role(t, origin),
                    outcome=roles.outcome(t, origin),
                )
            )
    return Diagram(
        table.machine,
        table.version,
        description,
        table.initial,
        nodes,
        tuple(edges),
        table.spec_sha256,
        tuple(DiagramCluster(c.name, c.parent, c.initial, c.description) for c in table.compounds),
        fail_closed,
        table.final_commit,
    )


class _Roles:
    """Classifies rows for the main-path view (see the module docstring)."""

    def __init__(self, table: MachineTable, fail_closed: str | None) -> None:
        self.fail_closed = fail_closed
        self.detours = {t.target for t in table.transitions if t.declared_on and t.target}
        #: state -> event -> the outcome it is of the work running in the state
        self.outcomes: dict[str, dict[str, str]] = {}
        for state in table.states:
            self._work(state.name, state.offload, state.barrier)
        for t in table.transitions:
            if t.target is not None:
                self._work(t.target, t.offload, t.barrier)

    def _work(self, state: str, offload: OffloadRow | None, barrier: BarrierRow | None) -> None:
        events = self.outcomes.setdefault(state, {})
        if offload is not None:
            events[offload.completed] = "completed"
            events[offload.failed] = "failed"
        if barrier is not None:
            for outcome in BARRIER_OUTCOMES:
                events[barrier.event_for(outcome)] = outcome

    def outcome(self, row: TransitionRow, source: str) -> str | None:
        """The work outcome ``row.event`` is in ``source``, or ``None``."""
        return self.outcomes.get(source, {}).get(row.event)

    def role(self, row: TransitionRow, source: str) -> str:
        """The edge's role (see the module docstring)."""
        if row.declared_on:
            return "compound"
        if row.target is None:
            return "internal"
        if row.target == self.fail_closed and source != row.target:
            return "fail_closed"
        outcome = self.outcome(row, source)
        if outcome in BARRIER_OUTCOMES[1:]:
            return "not_committed"
        if outcome == "failed":
            return "offload_failed"
        if row.target in self.detours:
            return "detour"
        return "main"


def _node(state: StateRow, initial: str, fail_closed: str | None) -> DiagramNode:
    details: list[str] = []
    if state.barrier:
        details.append(f"barrier: {state.barrier.name}")
    if state.offload:
        effect = "" if state.offload.effect == "at_most_once" else f" ({state.offload.effect})"
        details.append(f"offload: {state.offload.hook}{effect}")
    if state.entry:
        details.append("entry: " + ", ".join(state.entry))
    if state.timeout:
        details.append(f"timeout: {state.timeout.seconds:g}s -> {state.timeout.event}")
    return DiagramNode(
        name=state.name,
        kind=StateKind(state.kind),
        description=state.description,
        initial=state.name == initial,
        barrier=state.barrier.name if state.barrier else None,
        offload=state.offload.hook if state.offload else None,
        details=tuple(details),
        parent=state.parent,
        fail_closed=state.name == fail_closed,
    )


def cluster_leaves(diagram: Diagram, name: str) -> tuple[str, ...]:
    """The states drawn inside cluster ``name`` (nested clusters included), in order."""
    inside = {name}
    changed = True
    while changed:
        changed = False
        for cluster in diagram.clusters:
            if cluster.parent in inside and cluster.name not in inside:
                inside.add(cluster.name)
                changed = True
    return tuple(n.name for n in diagram.nodes if n.parent in inside)


def edges_of(diagram: Diagram, roles: Iterable[str]) -> tuple[DiagramEdge, ...]:
    """The edges whose role is one of ``roles``, in order."""
    wanted = set(roles)
    return tuple(e for e in diagram.edges if e.role in wanted)
