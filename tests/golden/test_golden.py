"""Golden tests: the generated module, DOT (full and main-path views) and Mermaid of a
small spec that uses every feature of the format are compared byte for byte with
checked-in expectations.

After an intended change of the template or the renderers, refresh the expectations
with ``PHRONOMY_UPDATE_GOLDEN=1 pytest tests/golden`` and review the diff.
"""

from __future__ import annotations

import os
import types
from pathlib import Path

import pytest
from phronomy_fsm.codegen import compile_spec

from phronomy_fsm.diagram_files import diagram_texts, main_view_text
from phronomy_fsm.interop import table_from_spec
from phronomy_fsm.spec.model import MachineSpec
from phronomy_fsm.spec.validate import check_spec_file

DATA = Path(__file__).parent / "data"
SPEC = DATA / "golden_machine.yaml"
SOURCE_NAME = "tests/golden/data/golden_machine.yaml"
UPDATE = os.environ.get("PHRONOMY_UPDATE_GOLDEN") == "1"


@pytest.fixture(scope="module")
def spec() -> MachineSpec:
    result = check_spec_file(SPEC)
    assert result.ok and result.issues == (), [i.render() for i in result.issues]
    assert result.spec is not None
    return result.spec


def _compare(name: str, actual: str) -> None:
    expected_path = DATA / name
    if UPDATE:
        expected_path.write_text(actual, "utf-8", newline="\n")
    assert expected_path.exists(), f"missing golden file {name}; run with PHRONOMY_UPDATE_GOLDEN=1"
    assert actual == expected_path.read_text("utf-8"), (
        f"{name} differs; review and refresh the golden file"
    )


def test_golden_module(spec: MachineSpec) -> None:
    text = compile_spec(spec, source_name=SOURCE_NAME)
    _compare("golden_machine.py.expected", text)
    module = types.ModuleType("golden_machine")
    exec(compile(text, "golden_machine.py", "exec"), module.__dict__)  # noqa: S102 - our own output
    assert module.TABLE == table_from_spec(spec)
    assert module.MACHINE == "golden_machine" and module.SPEC_VERSION == 3
    assert module.SPEC_SHA256 == spec.source_sha256
    hooks = sorted(n for n in vars(module.Hooks) if not n.startswith("_"))
    assert hooks == list(module.TABLE.hook_names())
    assert [m.value for m in module.State] == [s.name for s in spec.states if not s.compound]
    assert [c.name for c in module.TABLE.compounds] == ["busy", "storing"]
    assert (
        module.TABLE.state("saving").description
        == "Durable commit before the effect (unicode: é ✓)."
    )


def test_golden_diagrams(spec: MachineSpec) -> None:
    dot, mermaid = diagram_texts(spec)
    _compare("golden_machine.dot.expected", dot)
    _compare("golden_machine.mmd.expected", mermaid)
    _compare("golden_machine.main.dot.expected", main_view_text(spec))


def test_regenerating_gives_the_same_bytes(spec: MachineSpec) -> None:
    again = check_spec_file(SPEC).spec
    assert again is not None
    first = compile_spec(spec, source_name=SOURCE_NAME)
    assert compile_spec(again, source_name=SOURCE_NAME) == first
    assert diagram_texts(again) == diagram_texts(spec)
