"""State diagrams of a spec: a format-neutral diagram IR and its DOT and Mermaid renderers.

The IR (:class:`Diagram`, built by :func:`build_diagram` from a
:class:`~phronomy_fsm.spec.model.MachineSpec`) holds what a picture shows and nothing
about how a format draws it: one :class:`DiagramNode` per state (kind, barrier, offload,
entry actions, timeout, the ``recovery_required`` mark) and one :class:`DiagramEdge` per
``(transition row, source state)`` pair, so every parallel edge and self-loop of the
ordered table is drawn; internal transitions (no target) become self-loops marked
internal. Two renderers read it (python-statemachine's ``contrib/diagram`` split,
``../shared/design/STYLE.md``):

- :func:`render_dot`: DOT text built with the ``graphviz`` package, states styled by
  kind, barrier states / wait states / ``recovery_required`` visibly marked and a legend;
  :func:`render_image` turns it into SVG or PNG through the ``dot`` binary;
- :func:`render_mermaid`: Mermaid ``stateDiagram-v2`` text.

Every name and label is escaped (DOT: quotes, backslashes and ``&``, never HTML-like
``<...>``, a backslash in a tooltip shown as ``⧵``; Mermaid: entity codes), whitespace
is collapsed and control characters are replaced, so any valid spec renders. Output is deterministic: spec order, fixed attributes, no
timestamps. The committed diagrams under ``docs/diagrams/`` and their freshness check
live in :mod:`phronomy_fsm.diagram_files`.

Source of the behaviour: ARCHITECTURE.md "Specs" and "CLI"; issue 2 item 7. The
runtime never imports this module (it imports ``graphviz``).
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Iterable

import attrs
import graphviz

from phronomy_fsm.errors import RenderError
from phronomy_fsm.spec.model import MachineSpec, StateKind, StateSpec, TransitionSpec

#: The state name the diagrams mark as the fail-closed state (ARCHITECTURE.md "Specs").
RECOVERY_STATE = "recovery_required"

#: Image formats :func:`render_image` produces through the ``dot`` binary.
IMAGE_FORMATS = ("svg", "png")

#: Node fill and border per state kind (DOT colours; Mermaid reuses them).
_KIND_STYLE: dict[StateKind, dict[str, str]] = {
    StateKind.AUTO: {"fillcolor": "#dbeafe", "color": "#1e3a8a", "style": "rounded,filled"},
    StateKind.EXTERNAL: {"fillcolor": "#ffffff", "color": "#374151", "style": "rounded,filled"},
    StateKind.WAIT: {"fillcolor": "#fef3c7", "color": "#92400e", "style": "rounded,filled,dashed"},
    StateKind.FINAL: {
        "fillcolor": "#e5e7eb",
        "color": "#111827",
        "style": "rounded,filled",
        "peripheries": "2",
    },
}
_BARRIER_COLOR = "#b91c1c"
_RECOVERY_FILL = "#fecaca"
_RECOVERY_COLOR = "#7f1d1d"
_KIND_NOTE = {
    StateKind.AUTO: "auto",
    StateKind.EXTERNAL: "external",
    StateKind.WAIT: "wait (halts durably)",
    StateKind.FINAL: "final",
}


# ------------------------------------------------------------------------------ IR


@attrs.frozen
class DiagramNode:
    """One state as drawn.

    ``name`` is the state's name; ``details`` are the extra label lines in display order
    (barrier, offload, entry actions, timeout); ``barrier`` / ``offload`` name the work
    started on entry (``None`` when there is none).
    """

    name: str
    kind: StateKind
    description: str = ""
    initial: bool = False
    barrier: str | None = None
    offload: str | None = None
    details: tuple[str, ...] = ()

    @property
    def is_wait(self) -> bool:
        """True for ``wait`` states (halt the session durably)."""
        return self.kind is StateKind.WAIT

    @property
    def is_recovery(self) -> bool:
        """True for the fail-closed ``recovery_required`` state."""
        return self.name == RECOVERY_STATE

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
class DiagramEdge:
    """One drawn edge: transition row ``index`` leaving ``source``.

    ``target`` equals ``source`` for an internal transition (``internal`` is then true:
    actions run, the state is neither exited nor re-entered). ``guard`` is the guard as
    written (``name`` or ``not name``); ``barrier`` is the barrier taking the edge starts
    (the row's own, or the target state's on entry); ``offload`` is the row's own
    offload hook.
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


@attrs.frozen
class Diagram:
    """Everything a state diagram of one machine shows, in spec order;
    ``spec_sha256`` is the sha256 of the spec file it was drawn from (``""`` when
    unknown)."""

    machine: str
    version: int
    description: str
    initial: str | None
    nodes: tuple[DiagramNode, ...]
    edges: tuple[DiagramEdge, ...]
    spec_sha256: str = ""


def build_diagram(spec: MachineSpec) -> Diagram:
    """Build the diagram IR of ``spec``.

    Args:
        spec: a loaded spec. It should be valid; an invalid one still builds (unknown
            targets become edges to nodes that do not exist, which renderers draw as
            plain nodes), but the CLI refuses to draw invalid specs.

    Returns:
        A :class:`Diagram` with one node per state and one edge per
        ``(transition, source)`` pair (``sum(len(t.sources))`` edges, internal
        transitions included as self-loops). Never raises.
    """
    states = {s.name: s for s in spec.states}
    nodes = tuple(_node(s) for s in spec.states)
    edges: list[DiagramEdge] = []
    for t in spec.transitions:
        barrier = _edge_barrier(t, states)
        for source in t.sources:
            edges.append(
                DiagramEdge(
                    index=t.index,
                    source=source,
                    target=t.target if t.target is not None else source,
                    event=t.event,
                    guard=t.guard.render() if t.guard else None,
                    barrier=barrier,
                    offload=t.offload.hook if t.offload else None,
                    actions=t.actions,
                    internal=t.target is None,
                    description=t.description,
                )
            )
    initial = spec.initial_states[0].name if spec.initial_states else None
    return Diagram(
        spec.machine,
        spec.version,
        spec.description,
        initial,
        nodes,
        tuple(edges),
        spec.source_sha256,
    )


def _node(state: StateSpec) -> DiagramNode:
    details: list[str] = []
    if state.barrier:
        details.append(f"barrier: {state.barrier.name}")
    if state.offload:
        details.append(f"offload: {state.offload.hook}")
    if state.entry:
        details.append("entry: " + ", ".join(state.entry))
    if state.timeout:
        details.append(f"timeout: {state.timeout.seconds:g}s -> {state.timeout.event}")
    return DiagramNode(
        name=state.name,
        kind=state.kind,
        description=state.description,
        initial=state.initial,
        barrier=state.barrier.name if state.barrier else None,
        offload=state.offload.hook if state.offload else None,
        details=tuple(details),
    )


def _edge_barrier(t: TransitionSpec, states: dict[str, StateSpec]) -> str | None:
    if t.barrier is not None:
        return t.barrier.name
    target = states.get(t.target) if t.target is not None else None
    return target.barrier.name if target is not None and target.barrier is not None else None


# ------------------------------------------------------------------- text hygiene

_CONTROL_CATEGORIES = frozenset({"Cc", "Cs", "Co", "Cn"})


def clean_text(text: str) -> str:
    """Return ``text`` on one line: every run of whitespace (newlines, tabs, unicode
    line separators) becomes one space, control characters, lone surrogates and
    unassigned code points become U+FFFD, and the ends are stripped. Used for every
    label and tooltip so no spec text can break a diagram's syntax."""
    out = []
    for ch in " ".join(text.split()):
        out.append("\ufffd" if unicodedata.category(ch) in _CONTROL_CATEGORIES else ch)
    return "".join(out)


def dot_escape(text: str) -> str:
    """Escape one line of text for a DOT label or id, so Graphviz draws it exactly.

    After :func:`clean_text`: ``&`` becomes ``&amp;`` (Graphviz turns character
    entities into characters in labels) and ``\\`` becomes ``\\\\`` (labels are
    escStrings, where ``\\N``, ``\\G``, ``\\l``... would be expanded). The result is
    marked as never being an HTML-like label; the ``graphviz`` package adds the
    surrounding quotes and escapes ``"``.
    """
    return graphviz.nohtml(clean_text(text).replace("&", "&amp;").replace("\\", "\\\\"))


#: What a backslash becomes in tooltips (U+29F5 REVERSE SOLIDUS OPERATOR).
TOOLTIP_BACKSLASH = "\u29f5"


def dot_tooltip(text: str) -> str:
    """Escape text for a DOT tooltip (descriptions; shown on hover in SVG).

    Like :func:`dot_escape`, except that a backslash is shown as ``⧵`` (U+29F5):
    Graphviz versions differ in how many times they expand escape sequences in
    tooltips (2.43 does it twice, turning ``\\\\N`` into the node's name), so no
    escaping of a literal backslash is portable.
    """
    return graphviz.nohtml(clean_text(text).replace("&", "&amp;").replace("\\", TOOLTIP_BACKSLASH))


def _dot_text(lines: Iterable[str]) -> str:
    """A DOT string from lines, each escaped by :func:`dot_escape`, joined by ``\\n``
    (centred line breaks)."""
    return graphviz.nohtml("\\n".join(dot_escape(line) for line in lines))


def _dot_id(name: str) -> str:
    """A DOT node id for a state name (escaped; quoted by the graphviz package when it
    is not a plain identifier or is a DOT keyword)."""
    return dot_escape(name or "\ufffd")


# --------------------------------------------------------------------------- DOT


def render_dot(diagram: Diagram, *, legend: bool = True, with_actions: bool = True) -> str:
    """Render ``diagram`` as DOT text (a ``digraph``; parallel edges and self-loops are
    all kept).

    Args:
        diagram: from :func:`build_diagram`.
        legend: add a ``cluster_legend`` subgraph explaining kinds and marks.
        with_actions: add a ``do: ...`` line of actions to edge labels.

    Returns:
        The DOT source, deterministic for a given diagram (ends with a newline). Node
        ids are the state names; each state node has ``id="state:<name>"`` and each
        transition edge ``id="t<index>:<source>"`` (kept in SVG output), the start
        marker is ``__start`` and legend nodes start with ``__legend``.
    """
    comment = f"Generated by phronomy-fsm from machine {clean_text(diagram.machine)!r}"
    if diagram.spec_sha256:
        comment += f" (spec sha256={clean_text(diagram.spec_sha256)})"
    graph = graphviz.Digraph(
        name=_dot_id(diagram.machine),
        comment=comment + ". DO NOT EDIT: edit the spec and regenerate.",
        graph_attr={
            "label": _dot_text([f"{diagram.machine} (spec version {diagram.version})"]),
            "labelloc": "t",
            "fontname": "Helvetica",
            "rankdir": "TB",
            "nodesep": "0.4",
            "ranksep": "0.5",
            "newrank": "true",
        },
        node_attr={"shape": "box", "fontname": "Helvetica", "fontsize": "11"},
        edge_attr={"fontname": "Helvetica", "fontsize": "9"},
    )
    if diagram.initial is not None:
        graph.node("__start", label="", shape="point", width="0.15", id="start")
        graph.edge("__start", _dot_id(diagram.initial), id="initial")
    for node in diagram.nodes:
        graph.node(_dot_id(node.name), **_dot_node_attrs(node))
    for edge in diagram.edges:
        attrs_: dict[str, str] = {
            "label": _dot_text(edge.label_lines(with_actions=with_actions)),
            "id": _dot_text([f"t{edge.index}:{edge.source}"]),
        }
        if edge.description:
            attrs_["tooltip"] = dot_tooltip(edge.description)
        if edge.internal:
            attrs_.update(style="dashed", arrowhead="odot", color="#6b7280", fontcolor="#6b7280")
        elif edge.barrier:
            attrs_.update(color=_BARRIER_COLOR)
        if edge.target == RECOVERY_STATE and not edge.internal:
            attrs_.update(color=_RECOVERY_COLOR, fontcolor=_RECOVERY_COLOR)
        graph.edge(_dot_id(edge.source), _dot_id(edge.target), **attrs_)
    if legend:
        graph.subgraph(_dot_legend())
    return graph.source


def _dot_node_attrs(node: DiagramNode) -> dict[str, str]:
    style = dict(_KIND_STYLE[node.kind])
    lines = [node.name, f"«{node.kind_note}»", *node.details]
    if node.is_barrier:
        style["color"] = _BARRIER_COLOR
        style["penwidth"] = "2.5"
    if node.is_recovery:
        lines.insert(1, "FAIL-CLOSED")
        style.update(fillcolor=_RECOVERY_FILL, color=_RECOVERY_COLOR, penwidth="3")
        style["style"] += ",bold"
    attrs_ = {"label": _dot_text(lines), "id": _dot_text([f"state:{node.name}"]), **style}
    if node.description:
        attrs_["tooltip"] = dot_tooltip(node.description)
    return attrs_


def _dot_legend() -> graphviz.Digraph:
    legend = graphviz.Digraph(
        name="cluster_legend",
        graph_attr={
            "label": "Legend",
            "fontname": "Helvetica",
            "style": "rounded",
            "color": "#9ca3af",
        },
    )
    samples: list[tuple[str, list[str], dict[str, str]]] = [
        (
            "auto",
            ["auto state", "runs entry work, posts state_completed"],
            dict(_KIND_STYLE[StateKind.AUTO]),
        ),
        (
            "external",
            ["external state", "waits for declared events"],
            dict(_KIND_STYLE[StateKind.EXTERNAL]),
        ),
        (
            "wait",
            ["wait state", "halts durably until approve/resolve"],
            dict(_KIND_STYLE[StateKind.WAIT]),
        ),
        ("final", ["final state", "the session ends"], dict(_KIND_STYLE[StateKind.FINAL])),
        (
            "barrier",
            ["barrier state (red border)", "durable commit before the effect"],
            {**_KIND_STYLE[StateKind.EXTERNAL], "color": _BARRIER_COLOR, "penwidth": "2.5"},
        ),
        (
            "recovery",
            ["recovery_required", "FAIL-CLOSED: operator resolves"],
            {
                **_KIND_STYLE[StateKind.WAIT],
                "fillcolor": _RECOVERY_FILL,
                "color": _RECOVERY_COLOR,
                "penwidth": "3",
                "style": "rounded,filled,dashed,bold",
            },
        ),
        (
            "edges",
            [
                "edge label: event [guard] / barrier",
                "do: actions",
                "dashed self-loop: internal transition",
            ],
            {"shape": "plaintext"},
        ),
    ]
    previous = None
    for key, lines, style in samples:
        node_id = f"__legend_{key}"
        legend.node(node_id, label=_dot_text(lines), id=f"legend:{key}", **style)
        if previous is not None:
            legend.edge(previous, node_id, style="invis")
        previous = node_id
    return legend


# ---------------------------------------------------------------------- Mermaid

_MERMAID_ENTITIES = {
    "#": "#35;",
    ";": "#59;",
    ":": "#58;",
    '"': "#quot;",
    "<": "#lt;",
    ">": "#gt;",
    "{": "#123;",
    "}": "#125;",
    "%": "#37;",
    "|": "#124;",
    "`": "#96;",
}
_MERMAID_ID = re.compile(r"[A-Za-z0-9_]+")


def mermaid_text(text: str) -> str:
    """Escape ``text`` for a Mermaid label: one line (see :func:`clean_text`) with the
    characters Mermaid treats specially (``# ; : " < > { } % | ```) as entity codes."""
    return "".join(_MERMAID_ENTITIES.get(ch, ch) for ch in clean_text(text))


def mermaid_id(name: str) -> str:
    """The Mermaid state id of a state name: ``s_<name>`` when the name is made of
    ``[A-Za-z0-9_]`` only (every valid spec), else ``x_`` followed by the hex of its
    UTF-8 bytes. Injective, and never a Mermaid keyword."""
    if _MERMAID_ID.fullmatch(name):
        return "s_" + name
    return "x_" + name.encode("utf-8", "surrogatepass").hex()


def render_mermaid(diagram: Diagram, *, with_actions: bool = True) -> str:
    """Render ``diagram`` as Mermaid ``stateDiagram-v2`` text.

    Each state is declared as ``state "<name>" as s_<name>`` with its kind and work as
    description lines and one class (``recovery`` over ``barrier`` over its kind);
    ``[*] --> initial`` and ``final --> [*]`` mark start and ends; each edge is one
    ``a --> b : label`` line (internal transitions are self-loops whose label starts
    with ``internal:``). Mermaid has no legend, so a ``%%`` comment block explains the
    classes. Deterministic; ends with a newline.
    """
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
    for kind, style in _KIND_STYLE.items():
        dash = ",stroke-dasharray:5 3" if kind is StateKind.WAIT else ""
        out.append(
            f"    classDef {kind.value} fill:{style['fillcolor']},stroke:{style['color']}{dash}"
        )
    out.append(f"    classDef barrier fill:#ffffff,stroke:{_BARRIER_COLOR},stroke-width:3px")
    out.append(
        f"    classDef recovery fill:{_RECOVERY_FILL},stroke:{_RECOVERY_COLOR},stroke-width:4px"
    )
    for node in diagram.nodes:
        ident = mermaid_id(node.name)
        out.append(f'    state "{mermaid_text(node.name)}" as {ident}')
        note = "FAIL-CLOSED " + node.kind_note if node.is_recovery else node.kind_note
        out.append(f"    {ident} : {mermaid_text(note)}")
        for line in node.details:
            out.append(f"    {ident} : {mermaid_text(line)}")
    if diagram.initial is not None:
        out.append(f"    [*] --> {mermaid_id(diagram.initial)}")
    for edge in diagram.edges:
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
    return "\n".join(out) + "\n"


# ----------------------------------------------------------------------- images


def render_image(dot_source: str, fmt: str) -> bytes:
    """Render DOT text to an image through the Graphviz ``dot`` binary.

    Args:
        dot_source: DOT text (from :func:`render_dot`).
        fmt: ``"svg"`` or ``"png"``.

    Returns:
        The image bytes as ``dot`` wrote them.

    Raises:
        ValueError: ``fmt`` is not one of :data:`IMAGE_FORMATS`.
        RenderError: ``dot`` is not installed (``reason="missing"``) or exited with an
            error (``reason="failed"``, with the first line of its stderr).
    """
    if fmt not in IMAGE_FORMATS:
        raise ValueError(f"image format must be one of {IMAGE_FORMATS}, got {fmt!r}")
    try:
        return graphviz.pipe("dot", fmt, dot_source.encode("utf-8"), quiet=True)
    except graphviz.ExecutableNotFound:
        raise RenderError(
            f"cannot render {fmt}: the Graphviz 'dot' program is not installed or not on PATH "
            "(Debian: apt-get install graphviz; or use --format dot or mermaid)",
            format=fmt,
            reason="missing",
        ) from None
    except graphviz.CalledProcessError as exc:
        stderr = (
            exc.stderr.decode("utf-8", "replace")
            if isinstance(exc.stderr, bytes)
            else str(exc.stderr or "")
        )
        first = (
            clean_text(stderr.strip().splitlines()[0])
            if stderr.strip()
            else f"exit status {exc.returncode}"
        )
        raise RenderError(
            f"cannot render {fmt}: dot failed: {first}", format=fmt, reason="failed"
        ) from None
    except OSError as exc:
        raise RenderError(
            f"cannot render {fmt}: cannot run dot: {exc}", format=fmt, reason="failed"
        ) from None


# --------------------------------------------------------------- SVG provenance

_STAMP_PREFIX = "phronomy-fsm rendered-from-dot sha256="
_STAMP_RE = re.compile(rb"<!-- phronomy-fsm rendered-from-dot sha256=([0-9a-f]{64}) -->")


def dot_sha256(dot_source: str) -> str:
    """The sha256 (hex) of DOT text, as UTF-8 bytes."""
    return hashlib.sha256(dot_source.encode("utf-8")).hexdigest()


def stamp_svg(svg: bytes, dot_source: str) -> bytes:
    """Return ``svg`` with an XML comment recording the sha256 of the DOT text it was
    rendered from, inserted after the XML declaration (or at the start). SVG bytes vary
    between Graphviz versions; the stamp lets a freshness check prove provenance
    without re-rendering (issue 2 item 7)."""
    stamp = f"<!-- {_STAMP_PREFIX}{dot_sha256(dot_source)} -->\n".encode("ascii")
    if svg.startswith(b"<?xml"):
        end = svg.find(b"?>")
        if end != -1:
            head = svg[: end + 2]
            rest = svg[end + 2 :].lstrip(b"\r\n")
            return head + b"\n" + stamp + rest
    return stamp + svg


def svg_dot_sha256(svg: bytes) -> str | None:
    """Return the DOT sha256 recorded by :func:`stamp_svg` in ``svg``, or ``None`` when
    there is no stamp (only the first 4 KiB are searched)."""
    match = _STAMP_RE.search(svg[:4096])
    return match.group(1).decode("ascii") if match else None


def render_svg(dot_source: str) -> bytes:
    """Render DOT text to SVG and stamp it with the DOT's sha256.

    Raises:
        RenderError: as :func:`render_image`.
    """
    return stamp_svg(render_image(dot_source, "svg"), dot_source)
