"""The JSON Schema of the spec language, shipped as ``spec.schema.json`` in this package.

Editors (VS Code's YAML extension, JetBrains IDEs) validate a spec against it with a
modeline such as ``# yaml-language-server: $schema=<path or URL of spec.schema.json>``.

The schema is *derived* from the loader: the keys each node allows come from
:data:`phronomy_fsm.spec.loader.ALLOWED_KEYS`, the required ones from the spec model's
attrs fields without defaults, and only the type of each value is written here
(:data:`VALUE_SCHEMAS`, which must name every allowed key: adding a field to the model
without describing it here fails :func:`build_spec_schema`). A test keeps the shipped
file equal to :func:`build_spec_schema` and checks that the schema and the loader agree.

The schema checks shape and name syntax. What it cannot express is left to the
validator (references, reachability, barrier handling, ...), and so is one thing JSON
cannot see: YAML ``1.0`` is a float the loader refuses where an integer belongs, while
JSON Schema treats ``1.0`` as an integer. Every spec that validates cleanly is accepted
by the schema; every spec the loader rejects for its shape is rejected by it
(issue 2 item 2).

Regenerate the shipped file with ``python -m phronomy_fsm.spec.schema``.
"""

from __future__ import annotations

import json
import sys
from importlib import resources
from typing import Any

import attrs

from phronomy_fsm.spec.loader import ALLOWED_KEYS
from phronomy_fsm.spec.model import (
    BARRIER_OUTCOMES,
    OFFLOAD_OUTCOMES,
    BarrierSpec,
    EffectKind,
    EventSpec,
    MigrationSpec,
    OffloadSpec,
    StateKind,
    StateSpec,
    TimeoutSpec,
    TransitionSpec,
    UnhandledPolicy,
)

SCHEMA_FILE = "spec.schema.json"
SCHEMA_ID = "https://phronomy-fsm.invalid/schemas/spec-format-1.schema.json"

#: A name the validator accepts (ASCII identifier not starting with an underscore).
NAME_PATTERN = "^[A-Za-z][A-Za-z0-9_]*$"
#: A guard reference: a name, optionally preceded by ``not``.
GUARD_PATTERN = r"^\s*(not\s+)?[A-Za-z][A-Za-z0-9_]*\s*$"

_NAME = {"type": "string", "pattern": NAME_PATTERN}
_TEXT = {"type": "string"}
_NAMES = {
    "oneOf": [
        {"$ref": "#/$defs/name"},
        {"type": "array", "items": {"$ref": "#/$defs/name"}},
    ]
}
_OPTIONAL_NAME = {"oneOf": [{"$ref": "#/$defs/name"}, {"type": "null"}]}

#: label (as in ALLOWED_KEYS) → the attrs class of that node.
NODE_CLASSES: dict[str, type] = {
    "state": StateSpec,
    "event": EventSpec,
    "transition": TransitionSpec,
    "offload": OffloadSpec,
    "barrier": BarrierSpec,
    "timeout": TimeoutSpec,
    "migration": MigrationSpec,
}
#: Attributes the loader fills itself (never written in YAML).
_HIDDEN = {"loc", "index"}
#: Keys whose model field has no default but which the loader lets you omit.
_OPTIONAL_ANYWAY = {("transition", "to")}

#: label → key → JSON Schema of its value. Must cover ALLOWED_KEYS exactly.
VALUE_SCHEMAS: dict[str, dict[str, Any]] = {
    "machine": {
        "spec_format": {"const": 1, "description": "Version of the spec language; only 1 exists."},
        "machine": {**_NAME, "description": "Machine name; the generated module is <machine>.py."},
        "version": {
            "type": "integer",
            "minimum": 1,
            "description": "Spec version, raised on every change.",
        },
        "description": {**_TEXT, "description": "What the machine is for."},
        "events": {
            "description": "Events by name.",
            "oneOf": [
                {
                    "type": "object",
                    "propertyNames": {"$ref": "#/$defs/name"},
                    "additionalProperties": {
                        "oneOf": [{"$ref": "#/$defs/event"}, {"type": "null"}]
                    },
                },
                {"type": "null"},
            ],
        },
        "states": {
            "description": "States by name.",
            "oneOf": [
                {
                    "type": "object",
                    "propertyNames": {"$ref": "#/$defs/name"},
                    "additionalProperties": {"$ref": "#/$defs/state"},
                },
                {"type": "null"},
            ],
        },
        "transitions": {
            "description": "The ordered transition table; for a state and event the first row whose guard passes wins.",
            "type": "array",
            "items": {"$ref": "#/$defs/transition"},
        },
        "migrations": {
            "description": "How executions pinned to older spec versions are recovered.",
            "oneOf": [{"type": "array", "items": {"$ref": "#/$defs/migration"}}, {"type": "null"}],
        },
        "fail_closed": {
            **_NAME,
            "description": "The state unproven barrier outcomes go to (e.g. recovery_required).",
        },
    },
    "state": {
        "kind": {
            "enum": [k.value for k in StateKind],
            "description": "auto, external, wait or final.",
        },
        "description": _TEXT,
        "initial": {"type": "boolean", "description": "Exactly one state is initial."},
        "entry": {**_NAMES, "description": "Entry actions, by name."},
        "offload": {"oneOf": [{"$ref": "#/$defs/offload"}, {"type": "null"}]},
        "barrier": {"oneOf": [{"$ref": "#/$defs/barrier"}, {"type": "null"}]},
        "timeout": {"oneOf": [{"$ref": "#/$defs/timeout"}, {"type": "null"}]},
    },
    "event": {
        "description": _TEXT,
        "payload": {
            "oneOf": [
                {
                    "type": "string",
                    "pattern": r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*(\[[A-Za-z0-9_., \[\]|]*\])?$",
                },
                {"type": "null"},
            ],
            "description": "Payload type name (documentation only).",
        },
        "unhandled": {
            "enum": [p.value for p in UnhandledPolicy],
            "description": "What happens when the event arrives in a state with no row for it.",
        },
        "durable": {
            "type": "boolean",
            "description": "Posted only after a durable commit by its sender (a committed edge).",
        },
    },
    "transition": {
        "from": {
            "oneOf": [
                {"$ref": "#/$defs/name"},
                {"type": "array", "items": {"$ref": "#/$defs/name"}, "minItems": 1},
            ],
            "description": "Source state(s).",
        },
        "event": {"$ref": "#/$defs/name"},
        "to": {
            **_OPTIONAL_NAME,
            "description": "Target state; omit or null for an internal transition.",
        },
        "guard": {
            "oneOf": [{"type": "string", "pattern": GUARD_PATTERN}, {"type": "null"}],
            "description": "Guard name, optionally 'not name'.",
        },
        "actions": {**_NAMES, "description": "Actions run when the row is taken, by name."},
        "offload": {"oneOf": [{"$ref": "#/$defs/offload"}, {"type": "null"}]},
        "barrier": {"oneOf": [{"$ref": "#/$defs/barrier"}, {"type": "null"}]},
        "description": _TEXT,
    },
    "offload": {
        "hook": {"$ref": "#/$defs/name"},
        **{outcome: {"$ref": "#/$defs/name"} for outcome in OFFLOAD_OUTCOMES},
        "effect": {
            "enum": [k.value for k in EffectKind],
            "description": "pure, idempotent or at_most_once (default).",
        },
    },
    "barrier": {
        "name": {"$ref": "#/$defs/name"},
        **{
            outcome: {**_OPTIONAL_NAME, "description": f"Event posted for outcome {outcome}."}
            for outcome in BARRIER_OUTCOMES
        },
    },
    "timeout": {
        "seconds": {"type": "number", "exclusiveMinimum": 0},
        "event": {"$ref": "#/$defs/name"},
    },
    "migration": {
        "from_version": {"type": "integer"},
        "from_sha256": {
            "oneOf": [{"type": "string", "pattern": "^[0-9a-f]{64}$"}, {"type": "null"}]
        },
        "rename_states": {
            "type": "object",
            "propertyNames": {"$ref": "#/$defs/name"},
            "additionalProperties": {"$ref": "#/$defs/name"},
        },
    },
}


def required_keys(label: str) -> tuple[str, ...]:
    """The keys a node of kind ``label`` must have, from the spec model: attrs fields
    without a default (``machine``: the loader's required top-level keys)."""
    if label == "machine":
        return ("machine", "version", "events", "states", "transitions")
    cls = NODE_CLASSES[label]
    hidden = _HIDDEN | ({"name"} if cls in (StateSpec, EventSpec) else set())
    fields = [f for f in attrs.fields(cls) if f.name not in hidden]
    keys = ALLOWED_KEYS[label]
    if len(fields) != len(keys):
        raise RuntimeError(
            f"ALLOWED_KEYS[{label!r}] and {cls.__name__} disagree; update phronomy_fsm.spec.schema"
        )
    return tuple(
        key
        for field, key in zip(fields, keys, strict=True)
        if field.default is attrs.NOTHING and (label, key) not in _OPTIONAL_ANYWAY
    )


def _object(label: str) -> dict[str, Any]:
    values = VALUE_SCHEMAS[label]
    keys = ALLOWED_KEYS[label]
    missing = [k for k in keys if k not in values]
    extra = [k for k in values if k not in keys]
    if missing or extra:
        raise RuntimeError(
            f"VALUE_SCHEMAS[{label!r}] does not match the loader: missing {missing}, extra {extra}"
        )
    node: dict[str, Any] = {
        "type": "object",
        "additionalProperties": False,
        "properties": {key: values[key] for key in keys},
    }
    required = required_keys(label)
    if required:
        node["required"] = list(required)
    return node


def build_spec_schema() -> dict[str, Any]:
    """Return the JSON Schema (draft 2020-12) of spec format 1 as a dict.

    Raises:
        RuntimeError: :data:`VALUE_SCHEMAS` and the loader's ``ALLOWED_KEYS`` disagree
            (a model field was added or renamed without updating this module).
    """
    schema: dict[str, Any] = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "phronomy-fsm machine spec (spec_format 1)",
        "description": "One finite-state machine; see docs/spec-format.md. Generated by "
        "python -m phronomy_fsm.spec.schema; do not edit.",
        **_object("machine"),
        "$defs": {"name": {**_NAME, "description": "An ASCII identifier not starting with '_'."}},
    }
    for label in NODE_CLASSES:
        schema["$defs"][label] = _object(label)
    return schema


def render_spec_schema() -> str:
    """The schema as the shipped file holds it: JSON, 2-space indent, sorted keys,
    ASCII, trailing newline (deterministic)."""
    return json.dumps(build_spec_schema(), indent=2, sort_keys=True, ensure_ascii=True) + "\n"


def load_spec_schema() -> dict[str, Any]:
    """Return the schema shipped in the package (``spec.schema.json``).

    Raises:
        FileNotFoundError: the package was installed without its data files.
    """
    text = (resources.files("phronomy_fsm.spec") / SCHEMA_FILE).read_text("utf-8")
    return json.loads(text)  # type: ignore[no-any-return]


def main(argv: list[str] | None = None) -> int:
    """``python -m phronomy_fsm.spec.schema [PATH]``: write the schema to ``PATH``
    (default: the packaged ``spec.schema.json`` next to this module)."""
    args = sys.argv[1:] if argv is None else argv
    from pathlib import Path

    target = Path(args[0]) if args else Path(__file__).with_name(SCHEMA_FILE)
    target.write_text(render_spec_schema(), "utf-8", newline="\n")
    print(target)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
