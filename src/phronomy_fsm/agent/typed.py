"""Python types as JSON Schemas, and JSON values converted to those types.

This module owns the one mapping between the annotations of a typed tool's parameters
(or an agent's ``output_type``) and JSON: :class:`TypeSchema` derives a Draft 2020-12
schema from a type once, at definition time, and converts a JSON value that the
schema accepted into an instance of the type (``docs/agent.md``, "Typed tools" and
"Structured output"). It knows nothing of tools, agents or the machines.

Supported types (anything else raises :class:`TypeSchemaError` naming where it sits):

==========================================  =================================================
annotation                                  schema
==========================================  =================================================
``str`` / ``int`` / ``float`` / ``bool``    ``{"type": "string" | "integer" | "number" |
                                            "boolean"}``
``None``                                    ``{"type": "null"}``
``Any``                                     ``{}`` (any JSON; passed through)
``list[X]``, ``set[X]``, ``tuple[X, ...]``  ``{"type": "array", "items": X}`` (sets add
                                            ``"uniqueItems": true``)
``tuple[X, Y]``                             ``{"type": "array", "prefixItems": [X, Y],
                                            "minItems": 2, "maxItems": 2}``
``dict[str, X]``                            ``{"type": "object", "additionalProperties": X}``
``X | None``, ``X | Y``                     ``{"anyOf": [X, Y]}`` (at most one structured
                                            member: a class, list, dict, enum...)
``Literal["a", 1]``                         ``{"enum": ["a", 1]}``
an ``enum.Enum`` of str/int values          ``{"$ref": "#/$defs/Name"}`` → ``{"enum": [...]}``
an attrs class, a ``TypedDict``             ``{"$ref": "#/$defs/Name"}`` → an object of its
                                            fields (``required``: those without a default;
                                            ``additionalProperties: false``)
a Pydantic model                            its ``model_json_schema()`` under ``$defs``
==========================================  =================================================

Named types (enums, attrs classes, TypedDicts, Pydantic models) go under the root's
``$defs`` so that recursive types and types used twice are written once.

Conversion uses one cattrs converter: attrs classes and TypedDicts are structured by
cattrs, Pydantic models by ``model_validate``, enums by value; a Pydantic model, an
attrs instance or an enum returned by a tool is unstructured back to JSON the same way.
Pydantic is never imported here: a class is a Pydantic model when ``pydantic`` is
already imported and the class derives from its ``BaseModel``.
"""

from __future__ import annotations

import enum
import sys
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal, Union

import attrs
import cattrs
import jsonschema_rs

from phronomy_fsm.errors import TypeSchemaError

JSON_PRIMITIVES: dict[type, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}

SUPPORTED = (
    "str, int, float, bool, None, Any, list[...], set[...], tuple[...], dict[str, ...], "
    "X | None, Literal[...], an Enum, an attrs class, a TypedDict or a Pydantic model"
)


def is_pydantic_model(tp: Any) -> bool:
    """True when ``tp`` is a Pydantic (v2) model class. Never imports pydantic: a model
    cannot exist unless pydantic was imported already."""
    pydantic = sys.modules.get("pydantic")
    if pydantic is None or not isinstance(tp, type):
        return False
    base = getattr(pydantic, "BaseModel", None)
    return base is not None and issubclass(tp, base) and hasattr(tp, "model_json_schema")


def is_typeddict(tp: Any) -> bool:
    """True when ``tp`` is a ``TypedDict`` class."""
    return isinstance(tp, type) and issubclass(tp, dict) and hasattr(tp, "__required_keys__")


def _is_union(origin: Any) -> bool:
    return origin is Union or origin is types.UnionType


def _structured(tp: Any) -> bool:
    """Whether values of ``tp`` need conversion beyond JSON's own (a member of a union
    that must be told apart from the others)."""
    if tp in JSON_PRIMITIVES or tp is type(None) or tp is Any:
        return False
    origin = typing.get_origin(tp)
    return origin is not Literal


def _is_plain_value(value: Any, member: Any) -> bool:
    """Whether JSON ``value`` is of the plain union member ``member`` (a JSON primitive
    type, None, Any or a Literal)."""
    if member is Any:
        return True
    if member is type(None):
        return value is None
    if member is bool:
        return type(value) is bool
    if member is int:
        return type(value) is int
    if member is float:
        return type(value) in (int, float)
    if member is str:
        return isinstance(value, str)
    if typing.get_origin(member) is Literal:
        return any(value == v and type(value) is type(v) for v in typing.get_args(member))
    return False


def _def_name(tp: Any) -> str:
    return str(getattr(tp, "__name__", None) or repr(tp))


class _Builder:
    """One schema derivation: the named types met so far go to ``defs``."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.defs: dict[str, Any] = {}
        self.names: dict[Any, str] = {}

    def refuse(self, tp: Any, why: str = "") -> TypeSchemaError:
        shown = getattr(tp, "__name__", None) if isinstance(tp, type) else None
        shown = shown or repr(tp)
        return TypeSchemaError(
            f"{self.where}: {why or f'the type {shown} has no JSON Schema'}; use {SUPPORTED}",
            where=self.where,
            annotation=shown,
        )

    def schema(self, tp: Any) -> dict[str, Any]:
        if tp is Any:
            return {}
        if tp is None or tp is type(None):
            return {"type": "null"}
        if tp in JSON_PRIMITIVES:
            return {"type": JSON_PRIMITIVES[tp]}
        alias = getattr(typing, "TypeAliasType", None)  # Python 3.12's `type X = ...`
        if alias is not None and isinstance(tp, alias):
            return self.schema(tp.__value__)
        origin, args = typing.get_origin(tp), typing.get_args(tp)
        if origin is typing.Annotated:
            return self.schema(args[0])
        if origin is Literal:
            values = list(args)
            for value in values:
                if not isinstance(value, str | int | bool) and value is not None:
                    raise self.refuse(tp, f"Literal value {value!r} is not a string, int or bool")
            return {"enum": [v.value if isinstance(v, enum.Enum) else v for v in values]}
        if _is_union(origin):
            structured = [a for a in args if _structured(a)]
            if len(structured) > 1:
                raise self.refuse(
                    tp,
                    f"the union {tp} has several structured members "
                    f"({', '.join(map(str, structured))}) that a JSON value cannot tell apart",
                )
            return {"anyOf": [self.schema(a) for a in args]}
        if origin in (list, set, frozenset, typing.Sequence) or tp in (list, set, frozenset):
            schema: dict[str, Any] = {"type": "array"}
            if args:
                schema["items"] = self.schema(args[0])
            if origin in (set, frozenset) or tp in (set, frozenset):
                schema["uniqueItems"] = True
            return schema
        if origin is tuple or tp is tuple:
            if not args:
                return {"type": "array"}
            if len(args) == 2 and args[1] is Ellipsis:
                return {"type": "array", "items": self.schema(args[0])}
            return {
                "type": "array",
                "prefixItems": [self.schema(a) for a in args],
                "minItems": len(args),
                "maxItems": len(args),
            }
        if origin in (dict, Mapping, typing.Mapping) or tp is dict:
            if not args:
                return {"type": "object"}
            if args[0] is not str:
                raise self.refuse(tp, f"the keys of {tp} must be str (JSON object keys are)")
            return {"type": "object", "additionalProperties": self.schema(args[1])}
        if isinstance(tp, type) and (
            issubclass(tp, enum.Enum) or attrs.has(tp) or is_typeddict(tp) or is_pydantic_model(tp)
        ):
            return {"$ref": f"#/$defs/{self.named(tp)}"}
        raise self.refuse(tp)

    def named(self, tp: type) -> str:
        """The ``$defs`` name of ``tp``, deriving its schema the first time."""
        if tp in self.names:
            return self.names[tp]
        name = _def_name(tp)
        if name in self.defs:  # another type of the same name: qualify it
            name = f"{tp.__module__}.{tp.__qualname__}".replace("<", "_").replace(">", "_")
        self.names[tp] = name
        self.defs[name] = {}  # a placeholder: a recursive reference finds the name
        if issubclass(tp, enum.Enum):
            values = [m.value for m in tp]
            if not all(isinstance(v, str | int) for v in values):
                raise self.refuse(tp, f"the enum {name} has values that are not str or int")
            self.defs[name] = {"enum": values}
        elif is_pydantic_model(tp):
            schema = dict(tp.model_json_schema(ref_template="#/$defs/{model}"))  # type: ignore[attr-defined]
            for sub, body in schema.pop("$defs", {}).items():
                if sub in self.defs and self.defs[sub] != body and sub != name:
                    raise self.refuse(tp, f"two different types are both called {sub!r}")
                self.defs.setdefault(sub, body)
            self.defs[name] = schema
        elif is_typeddict(tp):
            hints = self.hints(tp)
            required: frozenset[str] = getattr(tp, "__required_keys__", frozenset())
            self.defs[name] = self.object_schema(
                [(key, hint, key in required) for key, hint in hints.items()]
            )
        else:
            hints = self.hints(tp)
            fields = [
                (a.name, hints.get(a.name, a.type), a.default is attrs.NOTHING)
                for a in attrs.fields(typing.cast(Any, tp))
                if a.init
            ]
            self.defs[name] = self.object_schema(fields)
        return name

    def hints(self, tp: type) -> dict[str, Any]:
        try:
            return typing.get_type_hints(tp)
        except Exception as exc:  # noqa: BLE001 - any failure to resolve is the same refusal
            raise self.refuse(tp, f"the annotations of {_def_name(tp)} cannot be resolved ({exc})")

    def object_schema(self, fields: list[tuple[str, Any, bool]]) -> dict[str, Any]:
        properties: dict[str, Any] = {}
        required: list[str] = []
        outer = self.where
        for field_name, hint, is_required in fields:
            self.where = f"{outer}, field {field_name!r}"
            try:
                properties[field_name] = self.schema(hint)
            finally:
                self.where = outer
            if is_required:
                required.append(field_name)
        schema: dict[str, Any] = {"type": "object", "properties": properties}
        if required:
            schema["required"] = required
        schema["additionalProperties"] = False
        return schema


def _converter() -> cattrs.Converter:
    conv = cattrs.Converter(forbid_extra_keys=True)
    conv.register_structure_hook_func(is_pydantic_model, lambda value, tp: tp.model_validate(value))
    conv.register_unstructure_hook_func(
        is_pydantic_model, lambda model: model.model_dump(mode="json")
    )

    def is_union(tp: Any) -> bool:
        return _is_union(typing.get_origin(tp))

    def structure_union(value: Any, tp: Any) -> Any:
        # The schema accepted the value and a union has at most one structured member
        # (checked at definition), so a value of a plain member's JSON type is that
        # member's; anything else is the structured member's.
        args = typing.get_args(tp)
        for member in args:
            if not _structured(member) and _is_plain_value(value, member):
                return float(value) if member is float else value
        structured = [a for a in args if _structured(a)]
        if not structured:
            return value
        return conv.structure(value, structured[0])

    conv.register_structure_hook_func(is_union, structure_union)
    conv.register_structure_hook(Any, lambda value, _tp: value)
    return conv


#: The converter of every typed tool and output type (cattrs converters are safe to
#: share between threads once their hooks are registered).
CONVERTER = _converter()


@attrs.frozen
class TypeSchema:
    """A type, its JSON Schema and how a JSON value becomes an instance of it.

    Build one with :meth:`of`.
    """

    annotation: Any
    schema: dict[str, Any]
    _validator: Any = attrs.field(init=False, eq=False, repr=False, default=None)

    def __attrs_post_init__(self) -> None:
        # compiled once: answers are checked against it on a worker, per answer
        object.__setattr__(self, "_validator", jsonschema_rs.Draft202012Validator(self.schema))

    @classmethod
    def of(cls, tp: Any, *, where: str) -> TypeSchema:
        """The schema of ``tp`` as a root document (named types under ``$defs``; a
        named root type is inlined at the root).

        Args:
            tp: the type (module docstring lists the supported kinds).
            where: what holds it, for errors (``agent 'triage', output_type``).

        Raises:
            TypeSchemaError: ``tp`` (or a type inside it) is not supported.
        """
        builder = _Builder(where)
        schema = builder.schema(tp)
        return cls(tp, root_document(schema, builder.defs))

    def problems(self, value: Any) -> str | None:
        """None when the schema accepts ``value``, else what is wrong (at most five
        problems, each ``path: message``)."""
        if self._validator.is_valid(value):
            return None
        errors = sorted(
            self._validator.iter_errors(value), key=lambda e: list(map(str, e.instance_path))
        )
        return "; ".join(
            f"{'/'.join(map(str, e.instance_path)) or '(root)'}: {e.message}" for e in errors[:5]
        )

    def convert(self, value: Any) -> Any:
        """``value`` (JSON the schema accepted) as an instance of the type.

        Raises whatever cattrs or ``model_validate`` raise when it does not convert
        (``cattrs.ClassValidationError``, ``pydantic.ValidationError``...)."""
        return CONVERTER.structure(value, self.annotation)


def root_document(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with ``defs`` as its ``$defs``; a root that is only a reference to a
    definition referenced nowhere else is replaced by that definition. Pure."""
    import json

    ref = schema.get("$ref") if len(schema) == 1 else None
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        name = ref.removeprefix("#/$defs/")
        others = {k: v for k, v in defs.items() if k != name}
        text = json.dumps([defs[name], others])
        if f'"{ref}"' not in text:
            root = dict(defs[name])
            if others:
                root["$defs"] = others
            return root
    if not defs:
        return schema
    return {**schema, "$defs": defs}


def parameters_schema(
    params: list[tuple[str, Any, bool, Any, str | None]], *, where: str
) -> dict[str, Any]:
    """The JSON Schema of a function's arguments object: one property per parameter.

    Args:
        params: ``(name, annotation, required, default, description)`` in order;
            ``default`` is written when it is a JSON scalar (or an enum member: its
            value) and the parameter is not required.
        where: what the parameters belong to, for errors (``tool 'search'``).

    Raises:
        TypeSchemaError: an annotation is not supported (the message names the
            parameter).
    """
    builder = _Builder(where)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for name, annotation, is_required, default, description in params:
        builder.where = f"{where}, parameter {name!r}"
        prop = dict(builder.schema(annotation))
        if description:
            prop["description"] = description
        if not is_required:
            shown = default.value if isinstance(default, enum.Enum) else default
            if shown is None or isinstance(shown, str | int | float | bool):
                prop["default"] = shown
        else:
            required.append(name)
        properties[name] = prop
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    schema["additionalProperties"] = False
    if builder.defs:
        schema["$defs"] = builder.defs
    return schema


def to_json(value: Any) -> Any:
    """``value`` as JSON data: attrs instances, TypedDicts, Pydantic models, enums,
    tuples and sets unstructured (the inverse of :meth:`TypeSchema.convert`); JSON data
    is returned as it is."""
    if (
        value is None
        or isinstance(value, str | int | float | bool)
        and not isinstance(value, enum.Enum)
    ):
        return value
    return _plain_json(CONVERTER.unstructure(value))


def _plain_json(value: Any) -> Any:
    # cattrs keeps the class of containers it meets without an annotation (a set
    # inside a dict stays a set): make every one a list, at any depth
    if isinstance(value, dict):
        return {k: _plain_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_plain_json(v) for v in value]
    return value


def describe(exc: BaseException) -> str:
    """A one-paragraph text of a conversion error, cattrs' nested errors flattened
    with their paths (what the LLM and the caller are told)."""
    if isinstance(exc, cattrs.BaseValidationError):
        notes = cattrs.transform_error(exc)
        return "; ".join(notes)
    return f"{type(exc).__name__}: {exc}".replace("\n", " ")


__all__ = [
    "CONVERTER",
    "TypeSchema",
    "describe",
    "is_pydantic_model",
    "is_typeddict",
    "parameters_schema",
    "root_document",
    "to_json",
]
