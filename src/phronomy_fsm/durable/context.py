"""Serialising an execution's context: the application's data, declared by type.

A durable machine declares the type of its context when it is registered
(``docs/semantics.md`` "The context"):

- an **attrs class** (frozen or not), structured and unstructured by a strict cattrs
  converter (unknown keys refused, types checked on the way in);
- a **msgspec Struct**, when msgspec is installed (encoded and decoded by msgspec);
- ``dict``: the context is plain JSON data.

Every barrier encodes the context as canonical JSON on the dispatcher's loop thread;
a value that is not JSON data fails that barrier with a
:class:`~phronomy_fsm.errors.ContextSerializationError` naming the field path
(``$.lines[2].price: Decimal is not JSON data``) and nothing is committed. Recovery
decodes it back into the declared type; a stored context that no longer fits the type
(a renamed field) is reported with every path at fault. Never pickled.
"""

from __future__ import annotations

import enum
import typing
from datetime import UTC, datetime
from typing import Any

import attrs
import cattrs
import orjson

from phronomy_fsm.durable.codec import json_path_error
from phronomy_fsm.errors import ContextSerializationError

_OPTIONS = orjson.OPT_SORT_KEYS


def _opaque_json(hint: Any) -> bool:
    """Whether a field declared as ``hint`` holds JSON data as is: ``Any`` (the
    contexts' ``JSON`` alias), or a ``list``/``dict[str, ...]`` of such. Its value is
    handed to the JSON check and the encoder without a copy (the check then rejects
    what is not JSON data, naming its path)."""
    if hint is Any:
        return True
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is list and len(args) == 1:
        return _opaque_json(args[0])
    if origin is dict and len(args) == 2:
        return args[0] is str and _opaque_json(args[1])
    return False


def _make_converter() -> cattrs.Converter:
    conv = cattrs.Converter(forbid_extra_keys=True)
    conv.register_unstructure_hook_func(_opaque_json, lambda v: v)
    conv.register_unstructure_hook(
        datetime, lambda v: v.astimezone(UTC).isoformat(timespec="microseconds")
    )
    conv.register_structure_hook(datetime, lambda v, _: datetime.fromisoformat(v))
    return conv


_CONVERTER = _make_converter()


def _msgspec() -> Any:
    try:
        import msgspec
    except ImportError:  # pragma: no cover - depends on the environment
        return None
    return msgspec


def _enum_value(member: enum.Enum) -> Any:
    return member.value


def _resolve_types(cls: type, seen: set[type]) -> None:
    """Resolve the string annotations of attrs class ``cls`` and of every attrs class
    its fields name (``from __future__ import annotations``), so the converter
    (un)structures enums and nested classes by their declared types."""
    if cls in seen or not attrs.has(cls):
        return
    seen.add(cls)
    attrs.resolve_types(cls)
    for field in attrs.fields(cls):
        stack = [field.type]
        while stack:
            hint = stack.pop()
            if isinstance(hint, type) and attrs.has(hint):
                _resolve_types(hint, seen)
            elif isinstance(hint, type) and issubclass(hint, enum.Enum):
                # stored as its value: a str-valued enum would otherwise pass as itself
                _CONVERTER.register_unstructure_hook(hint, _enum_value)
            stack.extend(typing.get_args(hint))


class ContextCodec:
    """Encodes and decodes the context of one machine's executions.

    Args:
        context_type: an attrs class, a msgspec ``Struct`` subclass, or ``dict``.
        machine: the machine's name (in error messages).

    Raises:
        TypeError: ``context_type`` is none of the supported kinds.

    Concurrency: stateless after construction; any thread.
    """

    __slots__ = ("_decoder", "context_type", "kind", "machine")

    def __init__(self, context_type: type, machine: str = "?") -> None:
        self.context_type = context_type
        self.machine = machine
        self._decoder: Any = None
        msgspec = _msgspec()
        if context_type is dict:
            self.kind = "json"
        elif attrs.has(context_type):
            self.kind = "attrs"
            _resolve_types(context_type, set())  # fail early on unresolvable annotations
        elif (
            msgspec is not None
            and isinstance(context_type, type)
            and issubclass(context_type, msgspec.Struct)
        ):
            self.kind = "msgspec"
            self._decoder = msgspec.json.Decoder(context_type)
        else:
            raise TypeError(
                f"machine {machine!r}: the context type must be an attrs class, a msgspec "
                f"Struct or dict, not {context_type!r} (docs/semantics.md, 'The context')"
            )

    def __repr__(self) -> str:
        return f"<ContextCodec {self.machine} {self.kind} {self.context_type.__name__}>"

    def check(self, context: Any) -> None:
        """Raise unless ``context`` is an instance of the declared type.

        Raises:
            ContextSerializationError: the value has another type.
        """
        if not isinstance(context, self.context_type):
            raise ContextSerializationError(
                f"machine {self.machine!r} declares its context as {self.context_type.__name__}, "
                f"got {type(context).__name__}",
                machine=self.machine,
                path="$",
            )

    def encode(self, context: Any) -> bytes:
        """Canonical JSON bytes of ``context`` (sorted keys).

        Raises:
            ContextSerializationError: some part is not JSON data; ``path`` names it.
        """
        if self.kind == "msgspec":
            msgspec = _msgspec()
            try:
                data = msgspec.to_builtins(context)
            except (TypeError, ValueError) as exc:
                raise ContextSerializationError(
                    f"machine {self.machine!r}: the context cannot be serialised: {exc}",
                    machine=self.machine,
                    path="$",
                ) from exc
        elif self.kind == "attrs":
            try:
                data = _CONVERTER.unstructure(context, unstructure_as=self.context_type)
            except Exception as exc:
                raise ContextSerializationError(
                    f"machine {self.machine!r}: the context cannot be serialised: "
                    f"{type(exc).__name__}: {exc}",
                    machine=self.machine,
                    path="$",
                ) from exc
        else:
            data = context
        problem = json_path_error(data, "$")
        if problem is not None:
            raise ContextSerializationError(
                f"machine {self.machine!r}: the context is not storable JSON: {problem} "
                "(declare JSON-compatible field types; see docs/semantics.md, 'The context')",
                machine=self.machine,
                path=problem.partition(":")[0],
            )
        return orjson.dumps(data, option=_OPTIONS)

    def decode(self, data: Any) -> Any:
        """The context from its stored JSON data (already parsed).

        Raises:
            ContextSerializationError: the data does not fit the declared type; the
                message lists every path at fault.
        """
        try:
            if self.kind == "msgspec":
                return self._decoder.decode(orjson.dumps(data))
            if self.kind == "attrs":
                return _CONVERTER.structure(data, self.context_type)
            if not isinstance(data, dict):
                raise TypeError(f"expected a JSON object, got {type(data).__name__}")
            return data
        except cattrs.BaseValidationError as exc:
            detail = "; ".join(cattrs.transform_error(exc))
        except Exception as exc:  # noqa: BLE001 - msgspec and cattrs raise assorted errors
            detail = f"{type(exc).__name__}: {exc}"
        raise ContextSerializationError(
            f"machine {self.machine!r}: the stored context does not fit "
            f"{self.context_type.__name__}: {detail}",
            machine=self.machine,
            path="$",
        )


__all__ = ["ContextCodec"]
