"""One execution drawn over its machine: the diagram and the path it took.

:func:`execution_diagram` builds the diagram IR of an execution's machine — from the
spec the caller gives, else from the table a runtime registered in the store (so a
store can be drawn without the application's code or YAML) — and the
:class:`~phronomy_fsm.diagram.Highlight` of the execution: its current state and the
states of its durable points in order (one per commit of its barrier log). States the
machine passed through between two commits are not recorded; they are inferred as the
shortest route between two consecutive durable states through states that commit
nothing (any other would have left a commit), which is how the effect states it passed
are marked. Its stays in ``recovery_required`` come from the barrier log, and the
drawing's title names the execution and its status (``docs/spec-format.md``,
"Diagrams"). Used by ``phronomy-fsm diagram --execution`` and the console.
"""

from __future__ import annotations

import collections
import itertools

import attrs

from phronomy_fsm.diagram import Diagram, Highlight, build_diagram
from phronomy_fsm.diagram.model import DiagramEdge
from phronomy_fsm.durable.machines import table_from_json
from phronomy_fsm.durable.ports import ExecutionStore
from phronomy_fsm.durable.records import BarrierLogRecord, ExecutionStatus
from phronomy_fsm.table import MachineTable


@attrs.frozen
class ExecutionDrawing:
    """What :func:`execution_diagram` returns: the machine's ``diagram``, the
    execution's ``highlight``, its ``path`` (the states of its barrier log, oldest
    first) and whether the drawn table is the one the execution runs under
    (``same_spec``: False when the given spec's sha256 differs from the execution's)."""

    execution_id: str
    machine: str
    diagram: Diagram
    highlight: Highlight
    path: tuple[str, ...]
    same_spec: bool


def execution_diagram(
    store: ExecutionStore, execution_id: str, *, table: MachineTable | None = None
) -> ExecutionDrawing:
    """The diagram of ``execution_id``'s machine with its path highlighted.

    Args:
        store: the store holding the execution.
        execution_id: the execution (of any machine, agent executions included).
        table: the machine's table (from a spec the caller lowered); by default the
            table a runtime registered in the store for the execution's spec.

    Raises:
        NotFoundError: no such execution, or no table given and none registered.
        SerializationError: the stored execution cannot be read.
        StorageError: the store failed.
    """
    record = store.load_record(execution_id)  # one indexed read (NotFoundError)
    machine, stored_state, spec_sha256 = record.machine, record.state, record.spec_sha256
    if table is None:
        registered = store.load_machine(machine, spec_sha256)
        table = table_from_json(registered.table)
    diagram = build_diagram(table)
    nodes = {node.name: node for node in diagram.nodes}
    log = [entry for entry in store.barrier_log(execution_id) if entry.state in nodes]
    path: list[str] = []
    for entry in log:
        if not path or path[-1] != entry.state:
            path.append(entry.state)
    current = stored_state if stored_state in nodes else (path[-1] if path else None)
    edges: set[tuple[str, ...]] = set()
    passed: set[str] = set()
    for a, b in itertools.pairwise(path):
        steps = _between(diagram, a, b)
        for edge in steps:
            edges.add((edge.source, edge.target))
            passed.add(edge.target)
    info = record.recovery
    if info is not None and info.subject is not None and info.subject.state in nodes:
        # parked at an effect it started: it went from its last durable state to it
        for edge in _between(diagram, path[-1], info.subject.state) if path else ():
            edges.add((edge.source, edge.target))
            passed.add(edge.target)
        passed.add(info.subject.state)
    effects = frozenset(n for n in passed if nodes[n].offload is not None)
    highlight = Highlight(
        current_state=current,
        visited_states=frozenset(path) | frozenset(passed),
        visited_edges=frozenset(edges),
        title=(
            f"execution {execution_id}: {record.status.value} in {record.state} "
            f"at r{record.revision}"
        ),
        effect_states=effects,
        parked_states=_parked(log),
    )
    return ExecutionDrawing(
        execution_id=execution_id,
        machine=machine,
        diagram=diagram,
        highlight=highlight,
        path=tuple(path),
        same_spec=spec_sha256 is None or spec_sha256 == table.spec_sha256,
    )


def _between(diagram: Diagram, source: str, target: str) -> list[DiagramEdge]:
    """The edges of the shortest route from durable state ``source`` to durable state
    ``target`` through states that commit nothing (no barrier, not a wait or final
    state; a barrier on an edge only on the last one, whose commit is ``target``'s): what the execution must have passed between two
    commits, since any other state would have left a commit of its own. ``[]`` when
    there is no such route (or ``source == target``)."""
    if source == target:
        return []
    nodes = {node.name: node for node in diagram.nodes}
    out: dict[str, list[DiagramEdge]] = {}
    for edge in diagram.edges:
        if not edge.internal:
            out.setdefault(edge.source, []).append(edge)
    came: dict[str, DiagramEdge] = {}
    queue = collections.deque([source])
    seen = {source}
    while queue:
        name = queue.popleft()
        for edge in out.get(name, ()):
            nxt = edge.target
            if nxt in seen or (edge.barrier is not None and nxt != target):
                continue  # a barrier on the way would have committed: only into target
            seen.add(nxt)
            came[nxt] = edge
            if nxt == target:
                route = [edge]
                while route[0].source != source:
                    route.insert(0, came[route[0].source])
                return route
            node = nodes.get(nxt)
            if node is not None and not (
                node.is_barrier or node.is_wait or node.kind.value == "final"
            ):
                queue.append(nxt)
    return []


_PARKED = ExecutionStatus.RECOVERY_REQUIRED.value


def _parked(log: list[BarrierLogRecord]) -> tuple[tuple[str, str], ...]:
    """Each stay in ``recovery_required`` of the barrier log: ``(state, "r2 to r3")``
    (``"since r2"`` while it still waits)."""
    stays = []
    for index, entry in enumerate(log):
        if entry.status != _PARKED:
            continue
        if index > 0 and log[index - 1].status == _PARKED:
            continue
        end = next((e.revision for e in log[index + 1 :] if e.status != _PARKED), None)
        when = f"since r{entry.revision}" if end is None else f"r{entry.revision} to r{end}"
        stays.append((entry.state, when))
    return tuple(stays)


__all__ = ["ExecutionDrawing", "execution_diagram"]
