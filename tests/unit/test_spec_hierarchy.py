"""Compound states: their meaning (docs/spec-format.md "Compound states"), their lowering
into the flat table, and the validator's hierarchy codes.

The property test compares the lowered table with a direct reading of the priority rule
(SCXML: the rows of the leaf, then of its parent, of its grandparent ...; document order
within one state) on random trees.
"""

from __future__ import annotations

import textwrap
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from phronomy_fsm.codegen import lower

from phronomy_fsm.runtime import bind_machine
from phronomy_fsm.spec.loader import load_spec_text
from phronomy_fsm.spec.model import MachineSpec
from phronomy_fsm.spec.validate import validate_spec
from tests.spec_strategies import dump

NESTED = textwrap.dedent(
    """\
    spec_format: 1
    machine: nested
    version: 1
    events:
      go: {description: Go.}
      stop: {description: Stop.}
      tick: {description: Tick.}
    states:
      start: {kind: external, initial: true, description: Start.}
      outer:
        description: Outer.
        states:
          a: {kind: external, initial: true, description: A.}
          inner:
            description: Inner.
            states:
              b: {kind: external, initial: true, description: B.}
              c: {kind: external, description: C.}
          done_inside: {kind: final, description: Final inside a compound state.}
      stopped: {kind: final, description: Stopped.}
      elsewhere: {kind: external, description: Elsewhere.}
    transitions:
      - {from: start, event: go, to: outer, description: Enters a (the initial child).}
      - {from: a, event: go, to: inner, description: Enters b.}
      - {from: b, event: go, to: c, description: B to c.}
      - {from: c, event: go, to: done_inside, description: Finish inside.}
      - {from: outer, event: stop, to: stopped, description: Stop from anywhere in outer.}
      - {from: inner, event: stop, guard: careful, to: elsewhere, description: Inner first.}
      - {from: c, event: stop, to: elsewhere, description: C overrides both.}
      - {from: [elsewhere, inner], event: tick, to: stopped, description: Mixed depths.}
      - {from: elsewhere, event: go, to: stopped, description: Leave.}
    """
)


def _spec(text: str) -> MachineSpec:
    loaded = load_spec_text(text)
    assert loaded.spec is not None, [i.render() for i in loaded.issues]
    return loaded.spec


def _codes(text: str) -> list[tuple[str, str]]:
    loaded = load_spec_text(text)
    model = loaded.spec if loaded.spec is not None else loaded.partial
    assert model is not None
    return [(i.code, i.path) for i in [*loaded.issues, *validate_spec(model)] if i.is_error]


def _candidates(table: Any) -> dict[tuple[str, str], list[tuple[str | None, str | None]]]:
    out: dict[tuple[str, str], list[tuple[str | None, str | None]]] = {}
    for row in table.transitions:
        for source in row.sources:
            out.setdefault((source, row.event), []).append((row.target, row.guard))
    return out


def test_nested_spec_is_valid_and_lowers_as_documented() -> None:
    spec = _spec(NESTED)
    assert validate_spec(spec) == []
    table = lower(spec)
    assert [s.name for s in table.states] == [
        "start",
        "a",
        "b",
        "c",
        "done_inside",
        "stopped",
        "elsewhere",
    ]
    assert [(s.name, s.parent) for s in table.states if s.parent] == [
        ("a", "outer"),
        ("b", "inner"),
        ("c", "inner"),
        ("done_inside", "outer"),
    ]
    assert [(c.name, c.parent, c.initial) for c in table.compounds] == [
        ("outer", None, "a"),
        ("inner", "outer", "b"),
    ]
    cands = _candidates(table)
    # to: a compound state enters its initial child, recursively
    assert cands[("start", "go")] == [("a", None)]
    assert cands[("a", "go")] == [("b", None)]
    # leaf, then parent, then grandparent
    assert cands[("c", "stop")] == [
        ("elsewhere", None),
        ("elsewhere", "careful"),
        ("stopped", None),
    ]
    assert cands[("b", "stop")] == [("elsewhere", "careful"), ("stopped", None)]
    assert cands[("a", "stop")] == [("stopped", None)]
    # final states inside a compound state are left out of its rows
    assert ("done_inside", "stop") not in cands
    # a row whose from mixes depths is split per depth
    tick = [t for t in table.transitions if t.event == "tick"]
    assert [(t.sources, t.declared_on) for t in tick] == [
        (("elsewhere",), ()),
        (("b", "c"), ("inner",)),
    ]
    # rows on leaves first, then deepest compound first; numbered by position
    assert [t.index for t in table.transitions] == list(range(len(table.transitions)))
    declared = [t.declared_on for t in table.transitions]
    assert declared.index(("inner",)) < declared.index(("outer",))
    assert all(d == () for d in declared[: declared.index(("inner",))])


def test_the_dispatcher_binding_sees_the_priority_order() -> None:
    table = lower(_spec(NESTED))

    class Hooks:
        def careful(self, ctx: Any, payload: Any) -> bool:
            return True

    binding = bind_machine(table, Hooks())
    rows = binding.nodes["b"].rows["stop"]
    assert isinstance(rows, tuple)
    assert [(r.target.name if r.target else None, r.guard_name) for r in rows] == [
        ("elsewhere", "careful"),
        ("stopped", None),
    ]


def test_a_flat_spec_lowers_to_its_rows_as_written() -> None:
    from tests.spec_samples import door

    table = lower(_spec(door()))
    assert [(t.index, t.sources, t.event, t.target) for t in table.transitions] == [
        (0, ("closed",), "open", "opened"),
        (1, ("opened",), "close", "closed"),
        (2, ("closed",), "lock", "locked"),
    ]
    assert table.compounds == () and all(s.parent is None for s in table.states)


def test_hierarchy_errors_have_codes_and_paths() -> None:
    no_initial = NESTED.replace("b: {kind: external, initial: true,", "b: {kind: external,")
    assert ("COMPOUND_NO_INITIAL", "$.states.outer.states.inner") in _codes(no_initial)
    two_initial = NESTED.replace(
        "c: {kind: external, description: C.}",
        "c: {kind: external, initial: true, description: C.}",
    )
    assert ("MULTIPLE_INITIAL_STATES", "$.states.outer.states.inner.states.c.initial") in _codes(
        two_initial
    )
    work = NESTED.replace("    description: Inner.", "    description: Inner.\n        entry: [x]")
    assert ("COMPOUND_STATE_WORK", "$.states.outer.states.inner") in _codes(work)
    clash = NESTED.replace("elsewhere: {kind: external", "a: {kind: external")
    assert ("DUPLICATE_STATE", "$.states.a") in _codes(clash)
    overlap = NESTED.replace("from: [elsewhere, inner]", "from: [outer, inner]")
    assert ("BAD_VALUE", "$.transitions[7].from[1]") in _codes(overlap)
    empty = NESTED.replace(
        "done_inside: {kind: final, description: Final inside a compound state.}",
        "done_inside: {kind: final, description: Final.}\n      hollow: {description: H., states: {}}",
    )
    assert ("COMPOUND_NO_INITIAL", "$.states.outer.states.hollow") in _codes(empty)


def test_a_leaf_without_kind_is_a_missing_key_and_a_compound_needs_none() -> None:
    text = NESTED.replace("c: {kind: external, description: C.}", "c: {description: C.}")
    assert ("MISSING_KEY", "$.states.outer.states.inner.states.c.kind") in _codes(text)


def test_a_row_on_a_compound_state_is_shadowed_only_when_it_never_fires() -> None:
    overridden = NESTED.replace(
        "  - {from: elsewhere, event: go, to: stopped, description: Leave.}",
        "  - {from: elsewhere, event: go, to: stopped, description: Leave.}\n"
        "  - {from: outer, event: go, to: stopped, description: Every leaf has its own go.}",
    )
    assert ("SHADOWED_TRANSITION", "$.transitions[9]") in _codes(overridden)
    assert not [c for c in _codes(NESTED) if c[0] == "SHADOWED_TRANSITION"]


# ------------------------------------------------------------ the priority rule


@st.composite
def trees(draw: st.DrawFn) -> dict[str, Any]:
    """A machine with random nesting and rows on leaves and compound states."""
    leaves = [f"s{i}" for i in range(draw(st.integers(2, 6)))]
    compounds = [f"c{i}" for i in range(draw(st.integers(1, 3)))]
    parent: dict[str, str | None] = {}
    for i, name in enumerate(compounds):
        parent[name] = draw(st.sampled_from([None, *compounds[:i]]))
    for name in leaves:
        parent[name] = draw(st.sampled_from([None, *compounds]))

    def body(name: str) -> dict[str, Any]:
        children = [n for n, p in parent.items() if p == name]
        if name in leaves:
            return {"kind": "external", "description": name}
        out: dict[str, Any] = {"description": name, "states": {}}
        first_leafy = True
        for child in children:
            out["states"][child] = body(child)
            if first_leafy:
                out["states"][child]["initial"] = True
                first_leafy = False
        return out

    states: dict[str, Any] = {"start": {"kind": "external", "initial": True, "description": "go"}}
    states.update({n: body(n) for n, p in parent.items() if p is None})
    states["end"] = {"kind": "final", "description": "end"}
    events = ["e0", "e1"]
    rows = []
    for k in range(draw(st.integers(1, 12))):
        source = draw(st.sampled_from([*leaves, *compounds]))
        row: dict[str, Any] = {
            "from": source,
            "event": draw(st.sampled_from(events)),
            "to": "end",
            "description": f"row {k}",
        }
        if draw(st.booleans()):
            row["guard"] = f"g{k}"
        rows.append(row)
    return {
        "spec_format": 1,
        "machine": "tree",
        "version": 1,
        "events": {e: {"description": e} for e in events},
        "states": states,
        "transitions": rows,
        "_parent": parent,
        "_leaves": leaves,
    }


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trees())
def test_lowering_follows_the_priority_rule(data: dict[str, Any]) -> None:
    parent = data.pop("_parent")
    leaves = data.pop("_leaves")
    spec = _spec(dump(data))
    table = lower(spec)
    cands = _candidates(table)

    def chain(leaf: str) -> list[str]:
        out = [leaf]
        while parent.get(out[-1]) is not None:
            out.append(parent[out[-1]])
        return out

    for leaf in leaves:
        for event in ("e0", "e1"):
            expected = [
                ("end", row.get("guard"))
                for holder in chain(leaf)
                for row in data["transitions"]
                if row["from"] == holder and row["event"] == event
            ]
            assert cands.get((leaf, event), []) == expected, (leaf, event)
