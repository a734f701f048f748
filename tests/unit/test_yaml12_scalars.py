"""Specs read numbers and booleans by the YAML 1.2 core schema (docs/spec-format.md)."""

from __future__ import annotations

import pytest

from phronomy_fsm.spec.loader import load_spec_text

TEMPLATE = """
machine: m
version: {version}
events: {{go: {{}}}}
states:
  a: {{kind: external, initial: true, timeout: {{seconds: {seconds}, event: go}}}}
  {name}: {{kind: final}}
transitions:
  - {{from: a, event: go, to: {name}}}
"""


@pytest.mark.parametrize(
    ("text", "value"),
    [("010", 10), ("0o17", 15), ("0x1F", 31), ("-3", -3), ("+4", 4)],
)
def test_integers(text: str, value: int) -> None:
    spec = load_spec_text(TEMPLATE.format(version=text, seconds=1, name="done")).spec
    assert spec is not None and spec.version == value


@pytest.mark.parametrize(
    ("text", "value"), [("1e3", 1000.0), (".5", 0.5), ("2.", 2.0), ("1.5E-1", 0.15)]
)
def test_floats(text: str, value: float) -> None:
    spec = load_spec_text(TEMPLATE.format(version=1, seconds=text, name="done")).spec
    assert spec is not None and spec.states[0].timeout.seconds == value


@pytest.mark.parametrize("text", ["1_000", "0b101", "1:30", "0o8"])
def test_yaml11_only_numbers_are_strings(text: str) -> None:
    loaded = load_spec_text(TEMPLATE.format(version=text, seconds=1, name="done"))
    assert loaded.spec is None
    assert [(i.code, i.path) for i in loaded.issues] == [("WRONG_TYPE", "$.version")]
    assert "got a string" in loaded.issues[0].message


@pytest.mark.parametrize("name", ["on", "off", "yes", "no", "y", "n"])
def test_yaml11_booleans_stay_names(name: str) -> None:
    spec = load_spec_text(TEMPLATE.format(version=1, seconds=1, name=name)).spec
    assert spec is not None and spec.states[1].name == name
