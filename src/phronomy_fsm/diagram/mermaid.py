"""The Mermaid renderer of the diagram IR (``stateDiagram-v2`` text).

Compound states become composite states (``state s_x { ... }``) holding their states,
and so does the spec's named ``@final`` commit, around the top-level final states;
the main-path view leaves out the same edges as the DOT renderer and lists them in
``%%`` comments (Mermaid has no legend). Deterministic; see
:func:`render_mermaid`.
"""

from __future__ import annotations

from phronomy_fsm.diagram.dot import (
    BARRIER_COLOR,
    KIND_STYLE,
    RECOVERY_COLOR,
    RECOVERY_FILL,
    VIEWS,
)
from phronomy_fsm.diagram.model import FOLDED_ROLES, Diagram, DiagramNode
from phronomy_fsm.diagram.text import mermaid_id, mermaid_text
from phronomy_fsm.spec.model import StateKind


def render_mermaid(diagram: Diagram, *, with_actions: bool = True, view: str = "full") -> str:
    """Render ``diagram`` as Mermaid ``stateDiagram-v2`` text.

    Each state is declared as ``state "<name>" as s_<name>`` with its kind and work as
    description lines and one class (``recovery`` over ``barrier`` over its kind); a
    compound state is a composite state around its states; ``[*] --> initial`` and
    ``final --> [*]`` mark start and ends; each edge is one ``a --> b : label`` line
    (internal transitions are self-loops whose label starts with ``internal:``; a row
    declared on a compound state leaves the composite state). Mermaid has no legend, so
    a ``%%`` comment block explains the classes. With ``view="main"`` the edges the
    main-path view folds are listed in ``%%`` comments instead of drawn.

    Raises:
        ValueError: ``view`` is not one of ``full``, ``main``.
    """
    if view not in VIEWS:
        raise ValueError(f"view must be one of {VIEWS}, got {view!r}")
    out = [
        "---",
        f"title: {mermaid_text(f'{diagram.machine} (spec version {diagram.version})')}",
        "---",
        "stateDiagram-v2",
        "    direction TB",
        "    %% Legend: blue = auto, white = external, yellow dashed = wait (halts durably),",
        "    %% grey = final, red border = barrier state (durable commit before the effect),",
        "    %% red fill = recovery_required (fail-closed). Edge labels: event [guard] / barrier;",
        "    %% a self-loop labelled internal: is an internal transition (no exit, no entry).",
    ]
    if diagram.clusters:
        out.append(
            "    %% A composite state is a compound state: its rows apply to every state in it."
        )
    if diagram.final_commit is not None:
        out.append(
            f"    %% The composite state {mermaid_text(diagram.final_commit)} is the @final "
            "commit: reaching a final state in it commits the outcome."
        )
    for kind, style in KIND_STYLE.items():
        dash = ",stroke-dasharray:5 3" if kind is StateKind.WAIT else ""
        out.append(
            f"    classDef {kind.value} fill:{style['fillcolor']},stroke:{style['color']}{dash}"
        )
    out.append(f"    classDef barrier fill:#ffffff,stroke:{BARRIER_COLOR},stroke-width:3px")
    out.append(
        f"    classDef recovery fill:{RECOVERY_FILL},stroke:{RECOVERY_COLOR},stroke-width:4px"
    )
    _declare(diagram, None, out, "    ")
    if diagram.initial is not None:
        out.append(f"    [*] --> {mermaid_id(diagram.initial)}")
    for edge in diagram.edges:
        if view == "main" and edge.role in FOLDED_ROLES:
            continue
        label = edge.title
        if with_actions and edge.actions:
            label += " do " + ", ".join(edge.actions)
        out.append(
            f"    {mermaid_id(edge.source)} --> {mermaid_id(edge.target)} : {mermaid_text(label)}"
        )
    for node in diagram.nodes:
        if node.kind is StateKind.FINAL:
            out.append(f"    {mermaid_id(node.name)} --> [*]")
    for node in diagram.nodes:
        css = "recovery" if node.is_recovery else "barrier" if node.is_barrier else node.kind.value
        out.append(f"    class {mermaid_id(node.name)} {css}")
    if view == "main":
        for edge in diagram.edges:
            if edge.role in FOLDED_ROLES:
                text = f"folded ({edge.role}): {edge.source} --> {edge.target} : {edge.title}"
                out.append(f"    %% {mermaid_text(text)}")
    return "\n".join(out) + "\n"


def _declare_node(node: DiagramNode, out: list[str], indent: str) -> None:
    """Declare one state: its name, kind note and work lines."""
    ident = mermaid_id(node.name)
    out.append(f'{indent}state "{mermaid_text(node.name)}" as {ident}')
    note = "FAIL-CLOSED " + node.kind_note if node.is_recovery else node.kind_note
    out.append(f"{indent}{ident} : {mermaid_text(note)}")
    for line in node.details:
        out.append(f"{indent}{ident} : {mermaid_text(line)}")


def _declare(diagram: Diagram, parent: str | None, out: list[str], indent: str) -> None:
    """Declare the states and composite states inside ``parent`` (``None``: top level)."""
    framed = set(diagram.final_commit_members) if parent is None else set()
    for node in diagram.nodes:
        if node.parent == parent and node.name not in framed:
            _declare_node(node, out, indent)
    if framed and diagram.final_commit is not None:
        ident = mermaid_id(diagram.final_commit)
        label = f"{diagram.final_commit} «@final commit»"
        out.append(f'{indent}state "{mermaid_text(label)}" as {ident}')
        out.append(f"{indent}state {ident} {{")
        for node in diagram.nodes:
            if node.name in framed:
                _declare_node(node, out, indent + "    ")
        out.append(f"{indent}}}")
    for cluster in diagram.clusters:
        if cluster.parent != parent:
            continue
        ident = mermaid_id(cluster.name)
        out.append(f'{indent}state "{mermaid_text(cluster.name)}" as {ident}')
        out.append(f"{indent}state {ident} {{")
        _declare(diagram, cluster.name, out, indent + "    ")
        if cluster.initial:
            out.append(f"{indent}    [*] --> {mermaid_id(cluster.initial)}")
        out.append(f"{indent}}}")
