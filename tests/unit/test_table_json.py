"""A machine's table survives its trip through the store as JSON: the engine registers
each machine's table with the store (``table_to_json``) and operator tools, the console
and recovery elsewhere rebuild it (``table_from_json``) to draw and act on executions —
compound states included, which the console draws as clusters."""

from __future__ import annotations

import orjson
import pytest
from phronomy_fsm.codegen import lower

from phronomy_fsm.diagram.model import build_diagram
from phronomy_fsm.durable.machines import table_from_json, table_to_json
from phronomy_fsm.spec.validate import check_spec_file
from tests.spec_samples import REPO

SPECS = sorted(
    [
        *(REPO / "fsm_specs").glob("*.yaml"),
        *(REPO / "docs" / "examples").glob("*.yaml"),
        REPO / "tests" / "fixtures" / "specs" / "agent_session_v1.yaml",
        REPO / "tests" / "durable" / "specs" / "limited_flow.yaml",  # its limits too
    ]
)


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.stem)
def test_a_table_rebuilt_from_its_stored_json_is_equal(path) -> None:
    result = check_spec_file(path)
    assert result.spec is not None, [i.render() for i in result.issues]
    table = lower(result.spec)
    stored = orjson.loads(orjson.dumps(table_to_json(table)))  # as the store keeps it
    rebuilt = table_from_json(stored)
    assert rebuilt == table
    assert build_diagram(rebuilt) == build_diagram(table)


def test_the_shipped_agent_session_has_compound_states_to_rebuild() -> None:
    result = check_spec_file(REPO / "fsm_specs" / "agent_session.yaml")
    assert result.spec is not None
    table = lower(result.spec)
    assert [c.name for c in table.compounds] == ["llm_turn", "using_tools"]
    assert table_from_json(table_to_json(table)).compounds == table.compounds
