"""The shape of the spec format, written down once: every node, its YAML keys, and the
type of each value.

:data:`SHAPES` maps each node label (``machine``, ``state``, ``event``, ``transition``,
``offload``, ``barrier``, ``effect``, ``target``, ``timeout``, ``migration``, ``limit``) to a :class:`NodeShape`:
the model class it becomes and its :class:`Key` rows (the YAML key, the model attribute
it fills, whether it is required, and its :class:`Value` type). A value type knows both
how to read a plain YAML value (``read``, raising :class:`ShapeError`) and its JSON
Schema (``schema``). Everything else is derived from this table:

- :mod:`phronomy_fsm.spec.loader` reads documents with it (allowed keys, renames,
  required keys, conversions, the "did you mean" of unknown keys);
- :mod:`phronomy_fsm.spec.schema` builds ``spec.schema.json`` from it.

Model attributes that no key fills (``loc``, ``name`` from a mapping key, ``index``,
``parent``, ...) are the loader's own. Nothing here knows the semantics of the format
(that is :mod:`phronomy_fsm.spec.validate`); the format is documented in
``docs/spec-format.md``.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from phronomy_fsm.spec.model import (
    BARRIER_OUTCOMES,
    OFFLOAD_OUTCOMES,
    BarrierSpec,
    EffectKind,
    EffectSpec,
    EventSpec,
    GuardRef,
    LimitSpec,
    MachineSpec,
    MigrationSpec,
    OffloadSpec,
    OutcomeTargetSpec,
    StateKind,
    StateSpec,
    TimeoutSpec,
    TransitionSpec,
    UnhandledPolicy,
)

#: A name the validator accepts (ASCII identifier not starting with an underscore).
NAME_PATTERN = "^[A-Za-z][A-Za-z0-9_]*$"
#: A guard reference: a name, optionally preceded by ``not``.
GUARD_PATTERN = r"^\s*(not\s+)?[A-Za-z][A-Za-z0-9_]*\s*$"
#: A limit's key: where it comes from and its name.
LIMIT_KEY_PATTERN = "^(label|context)\\.[A-Za-z][A-Za-z0-9_]*$"
#: A limit's rate: starts per period.
RATE_PATTERN = "^\\s*[0-9]+\\s*(per|/)\\s*(second|minute|hour)s?\\s*$"
#: A payload type name: a dotted identifier with optional ``[...]`` parameters.
PAYLOAD_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*(\[[A-Za-z0-9_., \[\]|]*\])?$"


class ShapeError(Exception):
    """A plain value that does not fit its key: ``code`` is ``WRONG_TYPE`` or
    ``BAD_VALUE``; ``message`` says what was expected and what was found."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def describe(value: Any) -> str:
    """A short description of a plain YAML value for messages: ``a list``,
    ``a number (3)``, ``nothing (null)``, ..."""
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, (int, float)):
        return f"a number ({value!r})"
    if isinstance(value, str):
        return f"a string ({value!r})"
    return type(value).__name__


@attrs.frozen
class Value:
    """A value type: ``read`` turns a plain YAML value into the model's value (raising
    :class:`ShapeError`); ``schema`` is its JSON Schema. ``node`` names the shape of the
    nested node(s) the value holds instead (read by the loader, which keeps paths and
    locations); ``nullable`` values may be written ``null`` (read as ``None``)."""

    schema: Mapping[str, Any]
    read: Callable[[Any], Any] | None = None
    node: str | None = None
    nullable: bool = False


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise ShapeError("WRONG_TYPE", f"expected a string, got {describe(value)}")
    return value


def _integer(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ShapeError("WRONG_TYPE", f"expected an integer, got {describe(value)}")
    return value


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ShapeError("WRONG_TYPE", f"expected a number, got {describe(value)}")
    return float(value)


def _boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ShapeError("WRONG_TYPE", f"expected true or false, got {describe(value)}")
    return value


def _names(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, list):
        raise ShapeError("WRONG_TYPE", f"expected a name or a list of names, got {describe(value)}")
    for index, item in enumerate(value):
        if not isinstance(item, str):
            raise ShapeError("WRONG_TYPE", f"item {index}: expected a name, got {describe(item)}")
    return tuple(value)


def _guard(value: Any) -> GuardRef:
    if not isinstance(value, str):
        raise ShapeError(
            "WRONG_TYPE", f"expected a guard name (optionally 'not name'), got {describe(value)}"
        )
    words = value.split()
    if len(words) == 2 and words[0] == "not":
        return GuardRef(words[1], negated=True)
    if len(words) == 1:
        return GuardRef(words[0])
    return GuardRef(value.strip())  # the validator reports it as an invalid name


def _renames(value: Any) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, dict):
        raise ShapeError(
            "WRONG_TYPE",
            f"expected a mapping of old state name to new state name, got {describe(value)}",
        )
    for old, new in value.items():
        if not isinstance(old, str) or not isinstance(new, str):
            raise ShapeError(
                "WRONG_TYPE", "rename_states maps state names (strings) to state names (strings)"
            )
    return tuple(value.items())


#: A payload field type: a JSON type, optionally ``<type> | None``.
FIELD_TYPE_PATTERN = r"^\s*(str|int|float|bool|dict|list|any)(\s*\|\s*None)?\s*$"


def _payload(value: Any) -> str | tuple[tuple[str, str], ...]:
    """A payload: a type name (documentation), or a mapping field → type (a schema),
    read as ``(field, type)`` pairs; the loader turns a schema into ``fields``."""
    import re

    if isinstance(value, str):
        return value
    if not isinstance(value, dict):
        raise ShapeError(
            "WRONG_TYPE",
            f"expected a type name or a mapping of field to type, got {describe(value)}",
        )
    pairs: list[tuple[str, str]] = []
    for field, kind in value.items():
        if not isinstance(field, str) or not isinstance(kind, str):
            raise ShapeError("WRONG_TYPE", "a payload schema maps field names to type names")
        if not re.match(FIELD_TYPE_PATTERN, kind):
            from phronomy_fsm.spec.suggest import did_you_mean

            types = ("str", "int", "float", "bool", "dict", "list", "any")
            raise ShapeError(
                "BAD_VALUE",
                f"field {field!r}: {kind!r} is not one of {', '.join(types)} (optionally "
                f"'<type> | None'){did_you_mean(kind, types)}",
            )
        pairs.append((field, " | ".join(p.strip() for p in kind.split("|"))))
    return tuple(pairs)


def _choice(enum_type: type[enum.Enum], values: tuple[str, ...]) -> Callable[[Any], Any]:
    from phronomy_fsm.spec.suggest import did_you_mean

    allowed = ", ".join(values)

    def read(value: Any) -> Any:
        if not isinstance(value, str):
            raise ShapeError("WRONG_TYPE", f"expected one of {allowed}, got {describe(value)}")
        if value not in values:
            raise ShapeError(
                "BAD_VALUE", f"{value!r} is not one of {allowed}{did_you_mean(value, values)}"
            )
        return enum_type(value)

    return read


def _enum_value(enum_type: type[enum.Enum], values: tuple[str, ...], doc: str) -> Value:
    return Value({"enum": list(values), "description": doc}, _choice(enum_type, values))


NAME = Value({"$ref": "#/$defs/name"}, _text)
TEXT = Value({"type": "string"}, _text)
NAMES = Value(
    {"oneOf": [{"$ref": "#/$defs/name"}, {"type": "array", "items": {"$ref": "#/$defs/name"}}]},
    _names,
)


def _optional(value: Value) -> Value:
    """``value`` or null (null reads as ``None``)."""
    return Value({"oneOf": [dict(value.schema), {"type": "null"}]}, value.read, value.node, True)


def _node(label: str, *, nullable: bool = True) -> Value:
    ref = {"$ref": f"#/$defs/{label}"}
    schema = {"oneOf": [ref, {"type": "null"}]} if nullable else ref
    return Value(schema, node=label, nullable=nullable)


#: The kinds a state may be written with (compound states have none).
LEAF_KINDS = tuple(k.value for k in StateKind)

#: Barrier shorthand targets: a state name, a {to, ...} mapping, or a list of those.
TARGETS = Value(
    {
        "oneOf": [
            {"$ref": "#/$defs/name"},
            {"$ref": "#/$defs/target"},
            {
                "type": "array",
                "minItems": 1,
                "items": {"oneOf": [{"$ref": "#/$defs/name"}, {"$ref": "#/$defs/target"}]},
            },
        ]
    },
    node="target",
)


@attrs.frozen
class Key:
    """One YAML key of a node: the model attribute it fills (``attr``; ``None`` when the
    loader handles it itself, like a state's child ``states``), whether it is required,
    its value type, and a one-line description (shown by editors from the schema)."""

    key: str
    value: Value
    attr: str | None = attrs.field(default=attrs.Factory(lambda self: self.key, takes_self=True))
    required: bool = False
    doc: str = ""


@attrs.frozen
class NodeShape:
    """One node of the format: its label, the model class it becomes, its keys in
    document order, and extra JSON Schema keywords (conditions between keys)."""

    label: str
    cls: type
    keys: tuple[Key, ...]
    extra_schema: Mapping[str, Any] = attrs.field(factory=dict)

    @property
    def allowed(self) -> tuple[str, ...]:
        """The YAML keys this node may hold, in document order."""
        return tuple(k.key for k in self.keys)

    @property
    def required(self) -> tuple[str, ...]:
        """The YAML keys this node must hold."""
        return tuple(k.key for k in self.keys if k.required)

    def key(self, name: str) -> Key | None:
        """The :class:`Key` written ``name``, or ``None``."""
        for key in self.keys:
            if key.key == name:
                return key
        return None


_EVENTS_MAP = Value(
    {
        "oneOf": [
            {
                "type": "object",
                "propertyNames": {"$ref": "#/$defs/name"},
                "additionalProperties": {"oneOf": [{"$ref": "#/$defs/event"}, {"type": "null"}]},
            },
            {"type": "null"},
        ]
    },
    node="event",
)
_LIMITS_MAP = Value(
    {
        "oneOf": [
            {
                "type": "object",
                "propertyNames": {"$ref": "#/$defs/name"},
                "additionalProperties": {"$ref": "#/$defs/limit"},
            },
            {"type": "null"},
        ]
    },
    node="limit",
)
_STATES_MAP = Value(
    {
        "oneOf": [
            {
                "type": "object",
                "propertyNames": {"$ref": "#/$defs/name"},
                "additionalProperties": {"$ref": "#/$defs/state"},
            },
            {"type": "null"},
        ]
    },
    node="state",
)

SHAPES: dict[str, NodeShape] = {
    "machine": NodeShape(
        "machine",
        MachineSpec,
        (
            Key(
                "spec_format",
                Value({"const": 1}, _integer),
                doc="Version of the spec language; only 1 exists.",
            ),
            Key(
                "machine",
                NAME,
                required=True,
                doc="Machine name; the generated module is <machine>.py.",
            ),
            Key(
                "version",
                Value({"type": "integer", "minimum": 1}, _integer),
                required=True,
                doc="Spec version, raised on every change running executions could notice.",
            ),
            Key("description", TEXT, doc="What the machine is for."),
            Key(
                "fail_closed",
                NAME,
                doc="The state unproven barrier outcomes go to (e.g. recovery_required).",
            ),
            Key(
                "final_commit",
                NAME,
                doc="The name diagrams give the engine's @final commit, drawn as a frame "
                "around the final states (e.g. terminalizing); no state may have it.",
            ),
            Key("events", _EVENTS_MAP, required=True, doc="Events by name."),
            Key("states", _STATES_MAP, required=True, doc="States by name."),
            Key(
                "transitions",
                Value(
                    {"type": "array", "items": {"$ref": "#/$defs/transition"}}, node="transition"
                ),
                required=True,
                doc="The ordered transition table; for a state and event the first row "
                "whose guard passes wins.",
            ),
            Key(
                "migrations",
                Value(
                    {
                        "oneOf": [
                            {"type": "array", "items": {"$ref": "#/$defs/migration"}},
                            {"type": "null"},
                        ]
                    },
                    node="migration",
                ),
                doc="How executions pinned to older spec versions are recovered.",
            ),
            Key(
                "limits",
                _LIMITS_MAP,
                doc="Rate and concurrency limits on effects, by name, held across every "
                "worker of a store.",
            ),
        ),
    ),
    "state": NodeShape(
        "state",
        StateSpec,
        (
            Key(
                "kind",
                _enum_value(StateKind, LEAF_KINDS, "auto, external, wait or final."),
                doc="auto, external, wait or final; required unless the state has child states.",
            ),
            Key(
                "initial", Value({"type": "boolean"}, _boolean), doc="The initial state (or child)."
            ),
            Key("description", TEXT),
            Key("entry", NAMES, doc="Entry actions, by name."),
            Key("offload", _node("offload")),
            Key("barrier", _node("barrier")),
            Key(
                "effect",
                _node("effect"),
                doc="Effect shorthand: a plain effect function run on entry; outcome "
                "events and rows derived (kind defaults to external).",
            ),
            Key("timeout", _node("timeout")),
            Key("states", _STATES_MAP, attr=None, doc="Child states: this is a compound state."),
        ),
        extra_schema={
            "if": {"required": ["states"]},
            "then": {
                "properties": {
                    k: False for k in ("kind", "entry", "offload", "barrier", "effect", "timeout")
                }
            },
            "else": {"anyOf": [{"required": ["kind"]}, {"required": ["effect"]}]},
        },
    ),
    "event": NodeShape(
        "event",
        EventSpec,
        (
            Key("description", TEXT),
            Key(
                "payload",
                _optional(
                    Value(
                        {
                            "oneOf": [
                                {"type": "string", "pattern": PAYLOAD_PATTERN},
                                {
                                    "type": "object",
                                    "propertyNames": {"$ref": "#/$defs/name"},
                                    "additionalProperties": {
                                        "type": "string",
                                        "pattern": FIELD_TYPE_PATTERN,
                                    },
                                },
                            ]
                        },
                        _payload,
                    )
                ),
                doc="Payload type name (documentation), or a schema: field name to type "
                "(str, int, float, bool, dict, list, any; '<type> | None' optional).",
            ),
            Key(
                "unhandled",
                _enum_value(
                    UnhandledPolicy,
                    tuple(p.value for p in UnhandledPolicy),
                    "What happens when the event arrives in a state with no row for it.",
                ),
            ),
            Key(
                "durable",
                Value({"type": "boolean"}, _boolean),
                doc="Posted only after a durable commit by its sender (documentation; no committed edge).",
            ),
        ),
    ),
    "transition": NodeShape(
        "transition",
        TransitionSpec,
        (
            Key(
                "from",
                Value(
                    {
                        "oneOf": [
                            {"$ref": "#/$defs/name"},
                            {"type": "array", "items": {"$ref": "#/$defs/name"}, "minItems": 1},
                        ]
                    },
                    _names,
                ),
                attr="sources",
                required=True,
                doc="Source state(s); a compound state stands for every state inside it.",
            ),
            Key("event", NAME, required=True),
            Key(
                "to",
                _optional(NAME),
                attr="target",
                doc="Target state; omit or null for an internal transition.",
            ),
            Key("guard", _optional(Value({"type": "string", "pattern": GUARD_PATTERN}, _guard))),
            Key("actions", NAMES, doc="Actions run when the row is taken, by name."),
            Key("offload", _node("offload")),
            Key("barrier", _node("barrier")),
            Key("description", TEXT),
        ),
    ),
    "offload": NodeShape(
        "offload",
        OffloadSpec,
        (
            Key("hook", NAME, required=True),
            *(Key(outcome, NAME, required=True) for outcome in OFFLOAD_OUTCOMES),
            Key(
                "effect",
                _enum_value(
                    EffectKind,
                    tuple(k.value for k in EffectKind),
                    "pure, idempotent or at_most_once (default).",
                ),
            ),
        ),
    ),
    "barrier": NodeShape(
        "barrier",
        BarrierSpec,
        (
            Key("name", NAME, required=True),
            *(
                Key(
                    outcome,
                    _optional(NAME),
                    doc=f"Event posted for outcome {outcome} (default <event_prefix>_{outcome}).",
                )
                for outcome in BARRIER_OUTCOMES
            ),
            Key("event_prefix", NAME, doc="Prefix of derived outcome events (default: name)."),
            *(
                Key(
                    f"on_{outcome}",
                    TARGETS,
                    doc=f"Where outcome {outcome} leads: a state, {{to, guard, actions}}, or a list.",
                )
                for outcome in BARRIER_OUTCOMES
            ),
        ),
    ),
    "effect": NodeShape(
        "effect",
        EffectSpec,
        (
            Key(
                "hook", NAME, required=True, doc="The effect function: (snapshot, ectx) -> result."
            ),
            Key(
                "kind",
                _enum_value(
                    EffectKind,
                    tuple(k.value for k in EffectKind),
                    "pure, idempotent or at_most_once (default).",
                ),
            ),
            Key(
                "result",
                Value({"type": "string", "pattern": PAYLOAD_PATTERN}, _text),
                doc="Type name of the result (the completed event's payload).",
            ),
            *(
                Key(
                    outcome,
                    NAME,
                    doc=f"Event posted for outcome {outcome} (default <hook>_{outcome}).",
                )
                for outcome in OFFLOAD_OUTCOMES
            ),
            *(
                Key(
                    f"on_{outcome}",
                    TARGETS,
                    doc=f"Where outcome {outcome} leads: a state, {{to, guard, actions}}, or a list.",
                )
                for outcome in OFFLOAD_OUTCOMES
            ),
        ),
    ),
    "target": NodeShape(
        "target",
        OutcomeTargetSpec,
        (
            Key("to", NAME, required=True),
            Key("guard", _optional(Value({"type": "string", "pattern": GUARD_PATTERN}, _guard))),
            Key("actions", NAMES),
            Key("description", TEXT),
        ),
    ),
    "timeout": NodeShape(
        "timeout",
        TimeoutSpec,
        (
            Key(
                "seconds", Value({"type": "number", "exclusiveMinimum": 0}, _number), required=True
            ),
            Key("event", NAME, required=True),
        ),
    ),
    "limit": NodeShape(
        "limit",
        LimitSpec,
        (
            Key("description", TEXT),
            Key("effects", NAMES, required=True, doc="The offload hooks (effects) it covers."),
            Key(
                "key",
                _optional(Value({"type": "string", "pattern": LIMIT_KEY_PATTERN}, _text)),
                doc="label.<name> (a label of the execution) or context.<field>; "
                "omitted: one key for all.",
            ),
            Key(
                "concurrency",
                Value({"type": "integer", "minimum": 1}, _integer),
                doc="At most this many effects running at once per key.",
            ),
            Key(
                "rate",
                Value({"type": "string", "pattern": RATE_PATTERN}, _text),
                doc="At most this many starts per period per key: '<N> per second|minute|hour'.",
            ),
        ),
        extra_schema={"anyOf": [{"required": ["concurrency"]}, {"required": ["rate"]}]},
    ),
    "migration": NodeShape(
        "migration",
        MigrationSpec,
        (
            Key("from_version", Value({"type": "integer"}, _integer), required=True),
            Key(
                "from_sha256",
                _optional(Value({"type": "string", "pattern": "^[0-9a-f]{64}$"}, _text)),
            ),
            Key(
                "rename_states",
                Value(
                    {
                        "type": "object",
                        "propertyNames": {"$ref": "#/$defs/name"},
                        "additionalProperties": {"$ref": "#/$defs/name"},
                    },
                    _renames,
                ),
            ),
        ),
    ),
}
