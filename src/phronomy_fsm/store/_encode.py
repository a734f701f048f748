"""A faster, output-identical path to :func:`records.to_json` for the commit hot path.

Owns one promise: :func:`encode` returns exactly ``records.to_json(record)`` (the same
canonical text, the same SerializationError), only faster in the common case. It
builds the JSON-ready dict from the attrs fields itself (plain values pass through,
datetimes via the converter's own hook, nested attrs values via the converter) and
checks it with an iterative walk that accepts only exact builtin JSON types. Anything
unusual (a datetime or attrs value inside a JSON field, a subclass of str, a float,
a non-string key...) falls back to ``to_json``, which decides. ``tests/store`` checks
the equality on many records. Source: issue 4 item 8 ("minimal JSON work").
"""

from __future__ import annotations

import enum
import json
import typing
from datetime import datetime
from typing import Any

import attrs

from phronomy_fsm.store import records
from phronomy_fsm.store.records import CONVERTER, to_json

_PASS, _DATETIME, _ENUM, _CONVERT = range(4)
_PLAIN_TYPES = (str, int, bool, type(None))
_DUMPS = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False, check_circular=True
).encode


class _Fallback(Exception):
    """Internal: the fast path met something only ``to_json`` may judge."""


def _field_kind(tp: Any) -> int:
    if tp is Any:
        return _PASS
    if tp in _PLAIN_TYPES:
        return _PASS
    if tp is datetime:
        return _DATETIME
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return _ENUM
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is dict and args and args[0] is str and args[1] is Any:
        return _PASS
    if (
        args
        and all(a in _PLAIN_TYPES for a in args)
        and origin in (typing.Union, __import__("types").UnionType)
    ):
        return _PASS
    return _CONVERT


def _plan(cls: type) -> tuple[tuple[str, int], ...]:
    hints = typing.get_type_hints(cls, vars(records))
    return tuple((f.name, _field_kind(hints[f.name])) for f in attrs.fields(cls))


_PLANS: dict[type, tuple[tuple[str, int], ...]] = {}


def _check(value: Any) -> None:
    """Accept only exact dict/list/tuple/str/int/bool/None trees with str keys."""
    stack = [value]
    pop = stack.pop
    push = stack.append
    while stack:
        v = pop()
        t = type(v)
        if t is dict:
            for k, item in v.items():
                if type(k) is not str:
                    raise _Fallback
                it = type(item)
                if it is str or it is int or it is bool or item is None:
                    continue
                if it is dict or it is list or it is tuple:
                    push(item)
                else:
                    raise _Fallback
        elif t is list or t is tuple:
            for item in v:
                it = type(item)
                if it is str or it is int or it is bool or item is None:
                    continue
                if it is dict or it is list or it is tuple:
                    push(item)
                else:
                    raise _Fallback
        elif not (t is str or t is int or t is bool or v is None):
            raise _Fallback


def encode(record: Any) -> str:
    """``records.to_json(record)``, faster. Raises SerializationError like it."""
    cls = type(record)
    plan = _PLANS.get(cls)
    if plan is None:
        plan = _PLANS[cls] = _plan(cls)
    data: dict[str, Any] = {}
    try:
        for name, kind in plan:
            value = getattr(record, name)
            if kind == _PASS:
                data[name] = value
            elif kind == _DATETIME:
                if type(value) is not datetime or value.tzinfo is None or value.utcoffset() is None:
                    raise _Fallback
                data[name] = value.isoformat(timespec="microseconds")
            elif kind == _ENUM:
                if value is None:
                    data[name] = None
                else:
                    data[name] = value.value
                    if type(data[name]) is not str:
                        raise _Fallback
            else:
                data[name] = None if value is None else CONVERTER.unstructure(value)
        _check(data)
        return _DUMPS(data)
    except _Fallback:
        return to_json(record)
    except (TypeError, ValueError, AttributeError):
        return to_json(record)
