"""The JSON-data check every commit runs: the fast check and the path-naming walk agree.

``json_path_error`` first runs a check that builds no paths and only walks again (to
name the offending path) when it fails; the fast check must accept exactly what the
walk accepts, or a commit could store what the rules refuse (``docs/semantics.md``,
"The context"). Contexts whose fields are declared ``Any`` (or lists and dicts of it)
are handed to that check without being copied by the converter, so a value that is not
JSON data inside them is refused with its path, never stringified.
"""

from __future__ import annotations

import datetime
import decimal
import math
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phronomy_fsm.durable.codec import MAX_JSON_DEPTH, json_path_error
from phronomy_fsm.durable.context import ContextCodec
from phronomy_fsm.errors import ContextSerializationError

_bad_scalars = st.sampled_from(
    [
        math.nan,
        math.inf,
        -math.inf,
        2**64,
        -(2**63) - 1,
        "lone \ud800 surrogate",
        decimal.Decimal("1.5"),
        datetime.date(2026, 1, 1),
        b"bytes",
        {1, 2},
        object(),
    ]
)
_good_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(),
)
_values = st.recursive(
    st.one_of(_good_scalars, _good_scalars, _good_scalars, _bad_scalars),
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.lists(children, max_size=4).map(tuple),
        st.dictionaries(st.text(max_size=5), children, max_size=4),
        st.dictionaries(st.integers(), children, min_size=1, max_size=2),
    ),
    max_leaves=20,
)


def _walk_only(value: Any) -> str | None:
    """What the path-naming walk alone says (the fast check switched off)."""
    from phronomy_fsm.durable import codec

    original = codec._is_json
    codec._is_json = lambda v, depth: False  # type: ignore[assignment]
    try:
        return codec.json_path_error(value)
    finally:
        codec._is_json = original  # type: ignore[assignment]


@settings(max_examples=400, deadline=None)
@given(_values)
def test_fast_check_accepts_exactly_what_the_walk_accepts(value: Any) -> None:
    assert (json_path_error(value) is None) == (_walk_only(value) is None)
    assert json_path_error(value) == _walk_only(value)


def test_depth_limit_is_the_same_for_both() -> None:
    ok: Any = 1
    for _ in range(MAX_JSON_DEPTH):
        ok = [ok]
    too_deep: Any = [ok]
    assert json_path_error(ok) is None and _walk_only(ok) is None
    assert json_path_error(too_deep) is not None
    assert json_path_error(too_deep) == _walk_only(too_deep)
    cyclic: list[Any] = []
    cyclic.append(cyclic)
    assert "nested deeper" in (json_path_error(cyclic) or "")


@attrs.define
class _Ctx:
    notes: list[dict[str, Any]] = attrs.Factory(list)
    extra: Any = None


def test_opaque_json_fields_are_checked_not_converted() -> None:
    codec = ContextCodec(_Ctx, "m")
    ctx = _Ctx(notes=[{"a": 1, "b": [1.5, None, "x"]}], extra={"k": (1, 2)})
    assert codec.encode(ctx) == b'{"extra":{"k":[1,2]},"notes":[{"a":1,"b":[1.5,null,"x"]}]}'
    assert codec.decode({"extra": None, "notes": [{"a": 1}]}) == _Ctx([{"a": 1}], None)
    bad = _Ctx(notes=[{"a": 1}, {"when": datetime.datetime(2026, 1, 1)}])
    with pytest.raises(ContextSerializationError) as err:
        codec.encode(bad)
    assert err.value.path == "$.notes[1].when"
    with pytest.raises(ContextSerializationError) as err:
        codec.encode(_Ctx(extra={"x": math.nan}))
    assert err.value.path == "$.extra.x"
