"""Migration entries are checked against the spec they belong to (docs/spec-format.md,
"Migrations")."""

from __future__ import annotations

from phronomy_fsm.spec.loader import load_spec_text
from phronomy_fsm.spec.validate import validate_spec

SPEC = """
machine: m
version: 2
events: {{go: {{description: go}}}}
states:
  a: {{kind: external, initial: true, description: a}}
  b: {{kind: final, description: b}}
transitions:
  - {{from: a, event: go, to: b, description: t}}
migrations:
  - {{from_version: {version}, rename_states: {{old_a: {target}}}}}
"""


def issues(version: int, target: str) -> list[tuple[str, str]]:
    spec = load_spec_text(SPEC.format(version=version, target=target), source_name="m.yaml").spec
    assert spec is not None
    return [(i.code, i.path) for i in validate_spec(spec)]


def test_a_migration_from_an_older_version_to_known_states_is_valid() -> None:
    assert issues(1, "a") == []


def test_a_migration_from_a_newer_version_is_refused() -> None:
    assert issues(3, "a") == [("BAD_VALUE", "$.migrations[0].from_version")]


def test_a_migration_to_an_unknown_state_is_refused() -> None:
    assert issues(1, "nowhere") == [("UNKNOWN_STATE", "$.migrations[0].rename_states.old_a")]
