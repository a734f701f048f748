"""Fuzzing the loader, validator and compiler (issue 2 "Bad input").

Generated documents, raw text and bytes, and mutations of the three shipped specs go
through ``load_spec_text`` + ``validate_spec`` (of the partial model too, when the
document has shape errors): nothing may raise, every issue must be located and carry a
catalogued code. Whatever validates must compile to a module that imports and whose
``TABLE`` equals :func:`phronomy_fsm.interop.table_from_spec`.
Failing examples found while writing these tests are kept as explicit regression tests
at the end.
"""

from __future__ import annotations

import types
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from phronomy_fsm.codegen import compile_spec

from phronomy_fsm.interop import table_from_spec
from phronomy_fsm.spec.issues import CODES
from phronomy_fsm.spec.loader import load_spec_text
from phronomy_fsm.spec.validate import validate_spec
from tests.spec_strategies import dump, mutated_real_specs, spec_documents, valid_specs

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _import_module(text: str, name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    exec(compile(text, f"<generated {name}>", "exec"), module.__dict__)  # noqa: S102 - our own output
    return module


def check_text(text: str | bytes) -> list[Any]:
    """Load + validate; assert the invariants; compile and import when valid."""
    loaded = load_spec_text(text, source_name="fuzz.yaml")
    issues = list(loaded.issues)
    model = loaded.spec if loaded.spec is not None else loaded.partial
    if model is not None:
        issues += validate_spec(model, damaged=loaded.damaged)
    if loaded.spec is None:
        assert any(i.is_error for i in issues), "no model and no error"
    for issue in issues:
        assert issue.code in CODES
        assert issue.loc.file == "fuzz.yaml"
        assert issue.loc.line >= 1 and issue.loc.column >= 1, issue.render()
        assert issue.path.startswith("$")
        assert "\n" not in issue.code
    if loaded.spec is not None and not any(i.is_error for i in issues):
        module = _import_module(compile_spec(loaded.spec), loaded.spec.machine)
        assert module.TABLE == table_from_spec(loaded.spec)
        leaves = [s.name for s in loaded.spec.states if not s.compound]
        assert [s.value for s in module.State] == leaves
    return issues


@FUZZ
@given(spec_documents())
def test_generated_documents_never_raise(data: Any) -> None:
    try:
        text = dump(data)
    except yaml.YAMLError:  # pragma: no cover - safe_dump handles all generated data
        return
    check_text(text)


@FUZZ
@given(mutated_real_specs())
def test_mutations_of_real_specs_never_raise(data: Any) -> None:
    check_text(dump(data))


@FUZZ
@given(st.text(max_size=300))
def test_arbitrary_text_never_raises(text: str) -> None:
    check_text(text)


@FUZZ
@given(st.binary(max_size=300))
def test_arbitrary_bytes_never_raise(raw: bytes) -> None:
    check_text(raw)


YAML_PIECES = st.sampled_from(
    ["a:", " b", "\n", "- ", "[", "]", "{", "}", ",", ": ", "&x ", "*x", "!!str ", "? ", "|\n", ">-\n",
     '"', "'", "#", "---\n", "...\n", "<<: ", "  ", "\t", "states:", "kind: auto", "on", "~", "1e9"]
)  # fmt: skip


@FUZZ
@given(st.lists(YAML_PIECES, max_size=40).map("".join))
def test_yaml_shaped_noise_never_raises(text: str) -> None:
    check_text(text)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(valid_specs())
def test_valid_specs_compile_and_import(data: dict[str, Any]) -> None:
    issues = check_text(dump(data))
    assert not any(i.is_error for i in issues), [i.render() for i in issues]


# ---------------------------------------------------------------- regressions


def test_regression_null_document_is_a_located_wrong_type() -> None:
    # a document that is only "~" used to be easy to confuse with an empty file
    issues = check_text("~\n")
    assert [(i.code, i.loc.line, i.loc.column) for i in issues] == [("WRONG_TYPE", 1, 1)]


def test_regression_control_character_is_located_on_its_line() -> None:
    # found by fuzzing: YAML's ReaderError carries no mark; it used to be reported at 1:1
    issues = check_text("machine: door\nversion: 1\ndescription: a\x07b\n")
    assert [(i.code, i.loc.line, i.loc.column) for i in issues] == [("YAML_SYNTAX", 3, 15)]


def test_regression_non_ascii_before_a_bad_byte() -> None:
    issues = check_text("description: é\x00\n".encode())
    assert [(i.code, i.loc.line, i.loc.column) for i in issues] == [("NOT_UTF8", 1, 16)]


def test_regression_alias_to_a_mapping_used_as_a_key() -> None:
    issues = check_text("a: &x {b: 1}\n*x : 2\n")
    assert [i.code for i in issues] == ["WRONG_TYPE"]


def test_regression_integral_float_version() -> None:
    issues = check_text(
        "spec_format: 1.0\nmachine: m\nversion: 1.0\nevents: {}\nstates: {}\ntransitions: []\n"
    )
    # the shape errors, and what is wrong with the rest of the document regardless
    assert {i.code for i in issues} == {"WRONG_TYPE", "NO_INITIAL_STATE", "NO_FINAL_STATE"}


def test_regression_astral_characters_round_trip_into_the_table() -> None:
    # found by test_valid_specs_compile_and_import: py_literal used JSON escapes, which
    # write U+10000 as the surrogate pair \ud800\udc00; Python reads that back as two
    # lone surrogates, so TABLE held different (and unprintable) text than the spec
    from tests.spec_samples import door

    text = door({11: '  opened: {kind: external, description: "open \\U0001F600 \\U00010000"}'})
    loaded = load_spec_text(text)
    assert loaded.spec is not None
    module = _import_module(compile_spec(loaded.spec), "door")
    assert module.TABLE.state("opened").description == "open \U0001f600 \U00010000"
    assert module.TABLE == table_from_spec(loaded.spec)
