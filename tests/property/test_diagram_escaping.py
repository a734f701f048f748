"""Any valid spec renders, whatever its names and descriptions hold (issue 2 item 7).

Hypothesis generates valid specs with hostile descriptions (quotes, backslashes,
``\\N``-style escapes, HTML, newlines, unicode line separators, emoji, bidi controls) and
diagram IRs with hostile *names*, renders them through ``dot``, and reads the SVG
back: every state and edge is there, labels show exactly the (cleaned) text, tooltips
show the descriptions. Mermaid output stays one statement per line.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from xml.etree import ElementTree

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from phronomy_fsm.diagram import (
    TOOLTIP_BACKSLASH,
    Diagram,
    DiagramEdge,
    DiagramNode,
    build_diagram,
    clean_text,
    render_dot,
    render_mermaid,
)
from phronomy_fsm.spec.loader import load_spec_text
from phronomy_fsm.spec.model import StateKind
from tests.spec_strategies import NASTY_TEXT, dump, valid_specs

pytestmark = pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz dot is not installed")
SVG = "{http://www.w3.org/2000/svg}"
XLINK = "{http://www.w3.org/1999/xlink}"
DOT_SETTINGS = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def _svg(dot: str) -> ElementTree.Element:
    out = subprocess.run(
        ["dot", "-Tsvg"], input=dot.encode("utf-8"), capture_output=True, timeout=60, check=False
    )
    assert out.returncode == 0, out.stderr.decode("utf-8", "replace")
    return ElementTree.fromstring(out.stdout)


def _groups(root: ElementTree.Element, cls: str) -> list[ElementTree.Element]:
    return [g for g in root.iter(f"{SVG}g") if g.get("class") == cls]


def _texts(group: ElementTree.Element) -> list[str]:
    return [t.text or "" for t in group.iter(f"{SVG}text")]


@DOT_SETTINGS
@given(valid_specs(max_states=6))
def test_valid_specs_with_hostile_descriptions_render(data: dict) -> None:
    loaded = load_spec_text(dump(data))
    assert loaded.spec is not None
    spec = loaded.spec
    root = _svg(render_dot(build_diagram(spec)))
    nodes = {g.get("id"): g for g in _groups(root, "node")}
    for state in spec.states:
        group = nodes[f"state:{state.name}"]
        assert _texts(group)[0] == state.name
        titles = [a.get(f"{XLINK}title") for a in group.iter(f"{SVG}a")]
        expected = clean_text(state.description).replace("\\", TOOLTIP_BACKSLASH)
        if expected:
            assert titles == [expected]
    edges = [g for g in _groups(root, "edge") if re.fullmatch(r"t\d+:\w+", g.get("id") or "")]
    assert len(edges) == sum(len(t.sources) for t in spec.transitions)


NAMES = st.lists(NASTY_TEXT, min_size=1, max_size=5, unique_by=clean_text).filter(
    lambda names: all(clean_text(n) for n in names)
)


@DOT_SETTINGS
@given(NAMES, st.lists(NASTY_TEXT, min_size=1, max_size=3), st.data())
def test_hostile_names_render_exactly(
    names: list[str], labels: list[str], data: st.DataObject
) -> None:
    kinds = list(StateKind)
    nodes = tuple(
        DiagramNode(
            name=n, kind=data.draw(st.sampled_from(kinds)), description=data.draw(NASTY_TEXT)
        )
        for n in names
    )
    edges = []
    for index, label in enumerate(labels):
        source = data.draw(st.sampled_from(names))
        internal = data.draw(st.booleans())
        edges.append(
            DiagramEdge(
                index=index,
                source=source,
                target=source if internal else data.draw(st.sampled_from(names)),
                event=label,
                guard=data.draw(st.one_of(st.none(), NASTY_TEXT)),
                actions=tuple(data.draw(st.lists(NASTY_TEXT, max_size=2))),
                internal=internal,
            )
        )
    diagram = Diagram(
        machine=data.draw(NASTY_TEXT),
        version=1,
        description="",
        initial=names[0],
        nodes=nodes,
        edges=tuple(edges),
    )
    root = _svg(render_dot(diagram))
    first_lines = sorted(
        _texts(g)[0] for g in _groups(root, "node") if (g.get("id") or "").startswith("state:")
    )
    assert first_lines == sorted(clean_text(n) for n in names)
    drawn = [g for g in _groups(root, "edge") if (g.get("id") or "").startswith("t")]
    assert len(drawn) == len(edges)
    shown = sorted(tuple(_texts(g)) for g in drawn)
    expected = [
        tuple(x for x in (clean_text(line) for line in e.label_lines()) if x) for e in edges
    ]
    assert shown == sorted(expected)

    mermaid = render_mermaid(diagram)
    body = mermaid.split("stateDiagram-v2\n", 1)[1].splitlines()
    assert all(line.startswith("    ") for line in body)
    assert sum(" --> " in line and "[*]" not in line for line in body) == len(edges)
