"""Canonical JSON for durable records and application data.

Owns the rules every durable value follows (``docs/semantics.md`` "What is stored"):
records are frozen attrs values written as canonical JSON (sorted keys, compact,
UTF-8, timestamps as ISO 8601 in UTC with microseconds); application data (an
execution's context, a signal's payload, an effect's result) must be exactly JSON —
dicts with string keys, lists, strings, 64-bit integers, finite floats, booleans and
null — and a value that is not is refused with the **path** of the offending part
(``$.items[2].price``). Nothing is ever pickled.

Must not import the store, the agent or the spec layers: it is the lowest layer of the
durable engine, shared by :mod:`phronomy_fsm.durable.records` and the stores.
"""

from __future__ import annotations

import enum
import hashlib
import math
import types
import typing
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import attrs
import cattrs
import orjson
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

from phronomy_fsm.errors import SerializationError

T = TypeVar("T")

#: The Unix epoch; stores keep times as integer milliseconds since it.
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

#: Deepest nesting of application JSON accepted (orjson refuses more than 255 levels;
#: data sits a few levels down inside its record). A structure that contains itself
#: reaches this bound instead of spinning.
MAX_JSON_DEPTH = 200

_LEAVES = (str, int, bool, type(None))


class EncodedJSON:
    """JSON data already encoded as canonical bytes (an execution's context encoded
    once on the loop thread): records hold it in a JSON field and it is written as is,
    so a later change to the live object cannot reach a commit in flight."""

    __slots__ = ("raw",)

    def __init__(self, raw: bytes) -> None:
        self.raw = raw

    def data(self) -> Any:
        """The decoded JSON data."""
        return orjson.loads(self.raw)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, EncodedJSON) and other.raw == self.raw

    def __hash__(self) -> int:
        return hash(self.raw)

    def __repr__(self) -> str:
        return f"EncodedJSON({self.raw[:60]!r})"


def json_data(value: Any) -> Any:
    """``value`` as plain JSON data (decoding an :class:`EncodedJSON`)."""
    return value.data() if type(value) is EncodedJSON else value


def _default(value: Any) -> Any:
    if type(value) is EncodedJSON:
        return orjson.Fragment(value.raw)
    raise TypeError(f"{type(value).__name__} is not JSON data")


_INT_RANGE = (-(2**63), 2**64 - 1)

_ORJSON_OPTIONS = orjson.OPT_SORT_KEYS | orjson.OPT_PASSTHROUGH_DATACLASS


def utc_now() -> datetime:
    """The current wall time, timezone-aware in UTC."""
    return datetime.now(UTC)


def datetime_to_epoch_ms(value: datetime) -> int:
    """Integer milliseconds since the epoch of an aware datetime (truncated)."""
    return (value - EPOCH) // timedelta(milliseconds=1)


def epoch_ms_to_datetime(epoch_ms: int) -> datetime:
    """The UTC datetime of integer epoch milliseconds (exact, no float rounding)."""
    return EPOCH + timedelta(milliseconds=epoch_ms)


def _is_json_items(items: Iterable[Any], depth: int) -> bool:
    """True when every value of ``items`` (inside a container at ``depth``) is JSON
    data by the rules of :func:`json_path_error`; leaves are checked inline."""
    lo, hi = _INT_RANGE
    for x in items:
        tx = type(x)
        if tx is str:
            if not x.isascii():
                try:
                    x.encode("utf-8")
                except UnicodeEncodeError:
                    return False
        elif tx is int:
            if not lo <= x <= hi:
                return False
        elif tx is float:
            if x - x != 0.0:  # inf - inf and nan - nan are nan
                return False
        elif x is None or tx is bool:
            pass
        elif tx is dict or tx is list or tx is tuple:
            if not _is_json(x, depth + 1):
                return False
        else:
            return False
    return True


def _is_json(value: Any, depth: int) -> bool:
    """The fast yes/no form of :func:`json_path_error` (no paths are built)."""
    t = type(value)
    if t is dict:
        if depth >= MAX_JSON_DEPTH:
            return False
        for key in value:
            if type(key) is not str:
                return False
        return _is_json_items(value.values(), depth)
    if t is list or t is tuple:
        return depth < MAX_JSON_DEPTH and _is_json_items(value, depth)
    return _is_json_items((value,), depth)


def json_path_error(value: Any, root: str = "$") -> str | None:
    """Where ``value`` stops being JSON data, or ``None`` when all of it is.

    Returns a message naming the first offending path, e.g.
    ``"$.lines[2].price: Decimal is not JSON data"``. Checks types (dict with string
    keys, list, tuple, str, int within 64 bits, finite float, bool, None), depth (at
    most :data:`MAX_JSON_DEPTH`) and strings (valid Unicode, no lone surrogates).

    Valid data (the common case, at every barrier) is recognised by a recursive walk
    that builds no paths (:func:`_is_json`); only data that fails it is walked again
    to name the path (:func:`_json_path_walk`).
    """
    if _is_json(value, 0):
        return None
    return _json_path_walk(value, root)


def _json_path_walk(value: Any, root: str) -> str | None:
    """The walk of :func:`json_path_error` that names the first offending path."""
    stack: list[tuple[Any, str, int]] = [(value, root, 0)]
    pop, push = stack.pop, stack.append
    while stack:
        v, path, depth = pop()
        t = type(v)
        if t is str:
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                return f"{path}: the string is not valid Unicode (a lone surrogate)"
            continue
        if t is int:
            if not _INT_RANGE[0] <= v <= _INT_RANGE[1]:
                return f"{path}: the integer {v} does not fit in 64 bits"
            continue
        if t is bool or v is None:
            continue
        if t is float:
            if not math.isfinite(v):
                return f"{path}: {v!r} is not representable in JSON"
            continue
        if depth >= MAX_JSON_DEPTH:
            return f"{path}: nested deeper than {MAX_JSON_DEPTH} levels (or contains itself)"
        if t is dict:
            for key, item in reversed(list(v.items())):
                if type(key) is not str:
                    return f"{path}: the key {key!r} is {type(key).__name__}, not a string"
                push(
                    (item, f"{path}.{key}" if key.isidentifier() else f"{path}[{key!r}]", depth + 1)
                )
            continue
        if t is list or t is tuple:
            for i in range(len(v) - 1, -1, -1):
                push((v[i], f"{path}[{i}]", depth + 1))
            continue
        return f"{path}: {t.__name__} is not JSON data"
    return None


def ensure_json(value: Any, *, what: str = "value", root: str = "$") -> None:
    """Raise unless ``value`` is storable JSON data (see :func:`json_path_error`).

    Raises:
        SerializationError: naming ``what`` and the offending path; ``path`` is set.
    """
    problem = json_path_error(value, root)
    if problem is not None:
        raise SerializationError(f"{what} is not storable JSON: {problem}", path=problem)


def dumps(value: Any) -> bytes:
    """Canonical JSON bytes of checked JSON data (sorted keys, compact).

    Raises:
        SerializationError: ``value`` is not JSON data (checked with paths first).
    """
    ensure_json(value)
    return orjson.dumps(value, option=_ORJSON_OPTIONS)


def loads(text: str | bytes) -> Any:
    """Parse JSON text. Raises SerializationError for malformed text."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise SerializationError(f"malformed JSON: {exc}") from exc


def digest(text: str | bytes) -> str:
    """sha256 (hex) of canonical JSON text, as kept in the barrier log."""
    return hashlib.sha256(text.encode("utf-8") if isinstance(text, str) else text).hexdigest()


# ------------------------------------------------------------------ record converter


def _structure_datetime(value: Any, _: Any) -> datetime:
    if not isinstance(value, str):
        raise TypeError(f"expected an ISO 8601 timestamp string, got {type(value).__name__}")
    parsed = datetime.fromisoformat(value)
    if parsed.tzinfo is None:
        raise ValueError(f"timestamp {value!r} has no UTC offset")
    return parsed.astimezone(UTC)


def _unstructure_datetime(name: str) -> Any:
    def hook(value: datetime) -> str:
        if not isinstance(value, datetime):
            raise SerializationError(f"{name} must be a datetime, got {type(value).__name__}")
        if value.tzinfo is None or value.utcoffset() is None:
            raise SerializationError(f"naive datetime {value!r} in {name}: use aware times")
        return value.astimezone(UTC).isoformat(timespec="microseconds")

    return hook


def _unstructure_optional_datetime(name: str) -> Any:
    stamp = _unstructure_datetime(name)

    def hook(value: datetime | None) -> str | None:
        return None if value is None else stamp(value)

    return hook


def _strict(kind: type, label: str) -> Any:
    def hook(value: Any, _: Any) -> Any:
        if isinstance(value, bool) and kind is not bool:
            raise TypeError(f"expected {label}, got a boolean")
        if not isinstance(value, kind):
            raise TypeError(f"expected {label}, got {type(value).__name__}")
        return value

    return hook


def _structure_enum(value: Any, cls: type[enum.Enum]) -> Any:
    if not isinstance(value, str):
        raise TypeError(f"expected a {cls.__name__} string, got {type(value).__name__}")
    return cls(value)


def _unstructure_data(owner: str, name: str) -> Any:
    def hook(value: Any) -> Any:
        if type(value) in _LEAVES:
            return value
        if type(value) is EncodedJSON:
            return value
        problem = json_path_error(value, f"$.{name}")
        if problem is not None:
            raise SerializationError(
                f"{owner}.{name} is not storable JSON: {problem}", path=problem
            )
        return value

    return hook


def _unstructure_key(owner: str, name: str, kind: type) -> Any:
    def hook(value: Any) -> Any:
        if type(value) is not kind:
            raise SerializationError(
                f"{owner}.{name} must be {kind.__name__}, got {type(value).__name__} {value!r:.80}"
            )
        return value

    return hook


def make_converter(
    classes: Iterable[type], enums: Iterable[type[enum.Enum]] = ()
) -> tuple[cattrs.Converter, dict[type, Any]]:
    """A strict converter for the attrs record ``classes`` and the unstructure hook of
    each, looked up once.

    Structuring refuses unknown and missing keys and wrongly typed scalars; datetimes
    must carry an offset and come back in UTC. Unstructuring checks what orjson would
    otherwise accept silently: exact ``str``/``int`` for keys, aware datetimes
    (written in UTC with microseconds), and JSON data (with its path) in fields typed
    ``Any`` or ``dict[str, Any]``.

    Returns:
        ``(converter, {cls: unstructure_fn})``.
    """
    classes = tuple(classes)
    conv = cattrs.Converter(forbid_extra_keys=True)
    conv.register_structure_hook(datetime, _structure_datetime)
    conv.register_structure_hook(str, _strict(str, "a string"))
    conv.register_structure_hook(int, _strict(int, "an integer"))
    conv.register_structure_hook(bool, _strict(bool, "a boolean"))
    conv.register_structure_hook(float, lambda v, _: float(_strict((int, float), "a number")(v, _)))  # type: ignore[arg-type]
    for enum_cls in enums:
        conv.register_structure_hook(enum_cls, _structure_enum)
        conv.register_unstructure_hook(enum_cls, lambda v: v.value)
    conv.register_structure_hook_func(lambda t: t is Any, lambda v, _: v)
    for cls in classes:
        conv.register_structure_hook(
            cls, make_dict_structure_fn(cls, conv, _cattrs_forbid_extra_keys=True)
        )
    for cls in classes:
        hints = typing.get_type_hints(cls)
        overrides: dict[str, Any] = {}
        for f in attrs.fields(cls):
            tp = hints[f.name]
            if tp is str or tp is int:
                overrides[f.name] = override(
                    unstruct_hook=_unstructure_key(cls.__name__, f.name, tp)
                )
            elif tp is datetime:
                overrides[f.name] = override(unstruct_hook=_unstructure_datetime(f.name))
            elif tp == datetime | None:
                overrides[f.name] = override(unstruct_hook=_unstructure_optional_datetime(f.name))
            elif tp is Any or tp == dict[str, Any]:
                overrides[f.name] = override(unstruct_hook=_unstructure_data(cls.__name__, f.name))
        conv.register_unstructure_hook(cls, make_dict_unstructure_fn(cls, conv, **overrides))  # type: ignore[arg-type]
    enum_set = frozenset(enums)
    return conv, {cls: _fast_unstructure_fn(cls, conv, enum_set, classes) for cls in classes}


class _Slow(Exception):
    """The fast unstructure function met something it leaves to cattrs."""


#: Stored texts of recent UTC datetimes: an execution's ``created_at`` (and a wait's
#: deadline) is written again at every commit, and a datetime caches its hash, so a
#: hit costs ~0.03 us against ~0.9 us for ``isoformat``. Bounded: cleared when full.
_STAMPS: dict[datetime, str] = {}
_STAMPS_MAX = 1024


def _utc_stamp(value: Any) -> str:
    """The stored text of an aware UTC datetime (the common case); anything else
    raises :class:`_Slow` so the checking hook decides."""
    if type(value) is not datetime or value.tzinfo is not UTC:
        raise _Slow
    stamp = _STAMPS.get(value)
    if stamp is None:
        stamp = value.isoformat(timespec="microseconds")
        if len(_STAMPS) >= _STAMPS_MAX:
            _STAMPS.clear()
        _STAMPS[value] = stamp
    return stamp


def _fast_data(value: Any) -> Any:
    """A JSON-data field as is when it passes the fast check, else :class:`_Slow`."""
    if type(value) in _LEAVES or type(value) is EncodedJSON or _is_json(value, 0):
        return value
    raise _Slow


def _fast_unstructure_fn(
    cls: type, conv: cattrs.Converter, enums: frozenset[type], classes: tuple[type, ...]
) -> Any:
    """The unstructure function of record class ``cls``: generated code that reads
    each field once and inlines the common cases (exact ``str``/``int`` keys, UTC
    datetimes, enums, valid JSON data, nested records, optional scalars), falling back
    to the checking cattrs hook for the whole record on anything else — so the output
    and every error are those of the cattrs hook, at about a third of its cost (every
    barrier encodes an execution record; ``docs/store.md`` "Performance"). Tests
    compare both on generated records."""
    slow = conv.get_unstructure_hook(cls)
    hints = typing.get_type_hints(cls)
    env: dict[str, Any] = {"_Slow": _Slow, "_stamp": _utc_stamp, "_data": _fast_data}
    lines = [f"def fast_{cls.__name__}(r):"]
    items = []
    for i, f in enumerate(attrs.fields(cls)):
        tp = hints[f.name]
        v = f"v{i}"
        lines.append(f"    {v} = r.{f.name}")
        args = typing.get_args(tp)
        inner = next((a for a in args if a is not type(None)), None)
        optional = (
            typing.get_origin(tp) is types.UnionType and len(args) == 2 and type(None) in args
        )
        if tp is str or tp is int:
            lines.append(f"    if type({v}) is not {tp.__name__}: raise _Slow")
            expr = v
        elif tp is datetime:
            expr = f"_stamp({v})"
        elif optional and inner is datetime:
            expr = f"None if {v} is None else _stamp({v})"
        elif tp is Any or tp == dict[str, Any]:
            expr = f"_data({v})"
        elif tp in enums:
            expr = f"{v}.value"
        elif optional and inner in (str, int):
            expr = v  # cattrs passes optional scalars through unchecked
        elif optional and inner in classes:
            env[f"h{i}"] = f"_fast_{inner.__name__}"  # resolved below
            expr = f"None if {v} is None else h{i}({v})"
        else:
            env[f"h{i}"] = conv.get_unstructure_hook(tp)
            expr = f"h{i}({v})"
        items.append(f"{f.name!r}: {expr}")
    lines.append("    return {" + ", ".join(items) + "}")
    for key, value in list(env.items()):
        if isinstance(value, str) and value.startswith("_fast_"):
            env[key] = _FAST_BY_NAME[value[len("_fast_") :]]
    exec("\n".join(lines), env)  # noqa: S102 - code generated from the record's own fields
    fast = env[f"fast_{cls.__name__}"]

    def unstructure(record: Any) -> Any:
        try:
            return fast(record)
        except Exception:  # noqa: BLE001 - the checking hook decides (and raises)
            return slow(record)

    unstructure.__qualname__ = unstructure.__name__ = f"unstructure_{cls.__name__}"
    _FAST_BY_NAME[cls.__name__] = unstructure
    return unstructure


#: The fast unstructure functions made so far, by class name (nested records refer to
#: them; :data:`RECORD_CLASSES` lists every nested class before its container).
_FAST_BY_NAME: dict[str, Any] = {}


def record_to_json(unstructure: Any, record: Any) -> str:
    """Canonical JSON text of ``record`` through its unstructure hook.

    Raises:
        SerializationError: a field is not storable (the message names it).
    """
    return record_to_json_bytes(unstructure, record).decode("utf-8")


def record_to_json_bytes(unstructure: Any, record: Any) -> bytes:
    """Canonical JSON of ``record`` as UTF-8 bytes (see :func:`record_to_json`).

    Raises:
        SerializationError: a field is not storable (the message names it).
    """
    try:
        data = unstructure(record)
        return orjson.dumps(data, default=_default, option=_ORJSON_OPTIONS)
    except SerializationError:
        raise
    except (TypeError, ValueError, AttributeError, orjson.JSONEncodeError) as exc:
        raise SerializationError(f"cannot encode {type(record).__name__}: {exc}") from exc


def record_from_json(conv: cattrs.Converter, cls: type[T], text: str | bytes) -> T:
    """Decode canonical JSON into ``cls``; unknown or missing keys fail.

    Raises:
        SerializationError: the text is not JSON or does not match ``cls`` (the
            message lists every problem with its path).
    """
    try:
        return conv.structure(orjson.loads(text), cls)
    except (ValueError, TypeError, KeyError, cattrs.BaseValidationError) as exc:
        detail = (
            "; ".join(cattrs.transform_error(exc))
            if isinstance(exc, cattrs.BaseValidationError)
            else str(exc)
        )
        raise SerializationError(f"cannot decode {cls.__name__}: {detail}") from exc


__all__ = [
    "EPOCH",
    "MAX_JSON_DEPTH",
    "EncodedJSON",
    "datetime_to_epoch_ms",
    "digest",
    "dumps",
    "ensure_json",
    "epoch_ms_to_datetime",
    "json_data",
    "json_path_error",
    "loads",
    "make_converter",
    "record_from_json",
    "record_to_json",
    "record_to_json_bytes",
    "utc_now",
]
