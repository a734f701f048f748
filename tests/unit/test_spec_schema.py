"""The shipped JSON Schema agrees with the loader: both come from one shape table.

- the packaged ``spec.schema.json`` is exactly what :func:`build_spec_schema` derives
  from :data:`phronomy_fsm.spec.shape.SHAPES` now (a stale schema fails);
- its allowed keys per node are the loader's ``ALLOWED_KEYS`` (derived from the same
  table), and its required keys are the ones whose absence the loader reports as
  ``MISSING_KEY``;
- the three shipped specs pass it; unknown keys, wrong kinds and wrong types fail it
  as they fail the loader;
- for random mutations of the shipped specs: whatever validates cleanly passes the
  schema, and whatever the loader rejects for its shape fails the schema.
"""

from __future__ import annotations

import copy
from typing import Any

import jsonschema_rs
import pytest
from hypothesis import HealthCheck, given, settings

from phronomy_fsm.spec.loader import ALLOWED_KEYS, load_spec_text
from phronomy_fsm.spec.schema import (
    SCHEMA_FILE,
    build_spec_schema,
    load_spec_schema,
    render_spec_schema,
    required_keys,
)
from phronomy_fsm.spec.shape import SHAPES
from phronomy_fsm.spec.validate import validate_spec
from tests.spec_samples import REAL_SPECS, REPO
from tests.spec_strategies import dump, load_plain, mutated_real_specs

VALIDATOR = jsonschema_rs.Draft202012Validator(load_spec_schema())


def _has_non_string_keys(value: Any) -> bool:
    if isinstance(value, dict):
        return any(not isinstance(k, str) or _has_non_string_keys(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_non_string_keys(v) for v in value)
    return False


def _schema_accepts(document: Any) -> bool:
    """The schema's verdict; a YAML document with a non-string key is no JSON document,
    so no JSON schema accepts it (jsonschema-rs refuses to look at one)."""
    return not _has_non_string_keys(document) and VALIDATOR.is_valid(document)


#: loader codes that are about the document's shape (what a schema can see)
SHAPE_CODES = {"WRONG_TYPE", "UNKNOWN_KEY", "MISSING_KEY", "UNSUPPORTED_FORMAT", "BAD_VALUE"}


def _node_schema(label: str) -> dict[str, Any]:
    schema = load_spec_schema()
    return schema if label == "machine" else schema["$defs"][label]


def test_shipped_schema_is_fresh() -> None:
    shipped = (REPO / "src" / "phronomy_fsm" / "spec" / SCHEMA_FILE).read_text("utf-8")
    assert shipped == render_spec_schema(), "run: python -m phronomy_fsm.spec.schema"


def test_schema_is_a_valid_draft_2020_12_schema() -> None:
    jsonschema_rs.meta.validate(build_spec_schema())


@pytest.mark.parametrize("label", sorted(ALLOWED_KEYS))
def test_schema_allows_exactly_the_loader_keys(label: str) -> None:
    node = _node_schema(label)
    assert sorted(node["properties"]) == sorted(ALLOWED_KEYS[label])
    assert node["additionalProperties"] is False


@pytest.mark.parametrize("path", REAL_SPECS, ids=[p.stem for p in REAL_SPECS])
def test_shipped_specs_pass_the_schema(path: Any) -> None:
    errors = [e.message for e in VALIDATOR.iter_errors(load_plain(path.read_text("utf-8")))]
    assert errors == []


def _all_states(states: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for body in states.values():
        out.append(body)
        out.extend(_all_states(body.get("states") or {}))
    return out


# one representative node of each kind inside a real spec, to remove/add keys on
def _sample_nodes(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    states = _all_states(data["states"])
    with_barrier = next(s for s in states if s.get("barrier"))
    with_offload = next(s for s in states if s.get("offload"))
    target = next(
        t
        for s in states
        if s.get("barrier")
        for t in s["barrier"].get("on_committed", [])
        if isinstance(t, dict)
    )
    return {
        "machine": data,
        "state": with_barrier,
        "event": next(e for e in data["events"].values() if e),
        "transition": data["transitions"][1],
        "barrier": with_barrier["barrier"],
        "offload": with_offload["offload"],
        "target": target,
    }


def test_every_shape_is_in_the_schema() -> None:
    schema = load_spec_schema()
    assert set(schema["$defs"]) == {label for label in SHAPES if label != "machine"} | {"name"}
    for label, shape in SHAPES.items():
        node = _node_schema(label)
        assert sorted(node["properties"]) == sorted(shape.allowed)


def _loader_shape_codes(data: Any) -> set[str]:
    loaded = load_spec_text(dump(data))
    return {i.code for i in loaded.issues} & SHAPE_CODES


AGENT = load_plain((REPO / "tests/fixtures/specs/agent_session_v1.yaml").read_text("utf-8"))


LABELS = ["machine", "state", "event", "transition", "barrier", "offload", "target"]


@pytest.mark.parametrize("label", LABELS)
def test_required_keys_agree_with_the_loader(label: str) -> None:
    for key in ALLOWED_KEYS[label]:
        data = copy.deepcopy(AGENT)
        node = _sample_nodes(data)[label]
        if key not in node:
            continue
        del node[key]
        loader_says_missing = "MISSING_KEY" in _loader_shape_codes(data)
        schema_rejects = not VALIDATOR.is_valid(data)
        assert loader_says_missing == (key in required_keys(label)), (label, key)
        if loader_says_missing:
            assert schema_rejects, (label, key)


@pytest.mark.parametrize("label", LABELS)
def test_unknown_keys_fail_both(label: str) -> None:
    data = copy.deepcopy(AGENT)
    _sample_nodes(data)[label]["descripton"] = "typo"
    assert "UNKNOWN_KEY" in _loader_shape_codes(data)
    assert not VALIDATOR.is_valid(data)


@pytest.mark.parametrize(
    ("edit", "code"),
    [
        (lambda d: d["states"]["idle"].__setitem__("kind", "manual"), "BAD_VALUE"),
        (lambda d: d["states"]["idle"].__setitem__("kind", 3), "WRONG_TYPE"),
        (lambda d: d["states"]["idle"].__setitem__("initial", "yes"), "WRONG_TYPE"),
        (lambda d: d["events"]["quiesced"].__setitem__("unhandled", "drop"), "BAD_VALUE"),
        (lambda d: d.__setitem__("spec_format", 2), "UNSUPPORTED_FORMAT"),
        (lambda d: d.__setitem__("version", "one"), "WRONG_TYPE"),
        (lambda d: d.__setitem__("transitions", {"a": 1}), "WRONG_TYPE"),
        (lambda d: d.__setitem__("states", ["idle"]), "WRONG_TYPE"),
        (lambda d: d["transitions"][0].__setitem__("from", 5), "WRONG_TYPE"),
        (lambda d: d["transitions"][0].__setitem__("actions", {"a": 1}), "WRONG_TYPE"),
        (
            lambda d: d["states"]["admitting"]["barrier"].__setitem__("committed", ["x"]),
            "WRONG_TYPE",
        ),
    ],
)
def test_wrong_kinds_and_types_fail_both(edit: Any, code: str) -> None:
    data = copy.deepcopy(AGENT)
    edit(data)
    assert code in _loader_shape_codes(data)
    assert not VALIDATOR.is_valid(data)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_real_specs())
def test_schema_and_loader_agree_on_mutations(data: Any) -> None:
    text = dump(data)
    parsed = load_plain(text)
    loaded = load_spec_text(text)
    schema_ok = _schema_accepts(parsed)
    if loaded.spec is not None and not any(
        i.is_error for i in list(loaded.issues) + validate_spec(loaded.spec)
    ):
        assert schema_ok, [e.message for e in VALIDATOR.iter_errors(parsed)]
    if {i.code for i in loaded.issues} & SHAPE_CODES:
        assert not schema_ok, [i.render() for i in loaded.issues]
