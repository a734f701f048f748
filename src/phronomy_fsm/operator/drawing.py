"""One execution drawn over its machine: the diagram and the path it took.

:func:`execution_diagram` builds the diagram IR of an execution's machine — from the
spec the caller gives, else from the table a runtime registered in the store (so a
store can be drawn without the application's code or YAML) — and the
:class:`~phronomy_fsm.diagram.Highlight` of the execution: its current state and the
states of its durable points in order (one per commit of its barrier log). States the
machine passed through between two commits are not recorded, so only an edge joining
two consecutive durable states directly is drawn as taken (``docs/spec-format.md``,
"Diagrams"). Used by ``phronomy-fsm diagram --execution`` and the console.
"""

from __future__ import annotations

import itertools

import attrs

from phronomy_fsm.diagram import Diagram, Highlight, build_diagram
from phronomy_fsm.durable.machines import table_from_json
from phronomy_fsm.durable.ports import ExecutionStore
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
    names = {node.name for node in diagram.nodes}
    path: list[str] = []
    for entry in store.barrier_log(execution_id):
        if entry.state in names and (not path or path[-1] != entry.state):
            path.append(entry.state)
    current = stored_state if stored_state in names else (path[-1] if path else None)
    edges: set[tuple[str, ...]] = set()
    direct = {(e.source, e.target) for e in diagram.edges}
    for a, b in itertools.pairwise(path):
        if (a, b) in direct:
            edges.add((a, b))
    highlight = Highlight(
        current_state=current,
        visited_states=frozenset(path),
        visited_edges=frozenset(edges),
    )
    return ExecutionDrawing(
        execution_id=execution_id,
        machine=machine,
        diagram=diagram,
        highlight=highlight,
        path=tuple(path),
        same_spec=spec_sha256 is None or spec_sha256 == table.spec_sha256,
    )


__all__ = ["ExecutionDrawing", "execution_diagram"]
