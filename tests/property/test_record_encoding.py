"""The fast encoders of durable records agree with the checking ones they shortcut.

``codec.json_path_error`` first runs a walk that builds no paths (``_is_json``), and
every record class is unstructured by generated code that falls back to the checking
cattrs hook on anything unusual: both must accept exactly what the checking code
accepts, produce the same data, and raise the same errors.
"""

from __future__ import annotations

import enum
import uuid
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

import attrs
import hypothesis.strategies as st
from hypothesis import given, settings

from phronomy_fsm.durable import codec
from phronomy_fsm.durable.codec import EncodedJSON
from phronomy_fsm.durable.records import (
    CONVERTER,
    RECORD_CLASSES,
    DurablePoint,
    EffectKind,
    EffectRef,
    ErrorInfo,
    ExecutionRecord,
    ExecutionStatus,
    RecoveryInfo,
    ResolutionInfo,
    ResolutionOutcome,
    SignalKind,
    SignalRecord,
    unstructure,
)


class Color(enum.Enum):
    RED = "red"


LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.sampled_from(["\ud800", "é", "a\udfff", "日本"]),
    st.sampled_from([Decimal(1), datetime(2020, 1, 1), Color.RED, uuid.UUID(int=1), b"x"]),
)
KEYS = st.one_of(st.text(max_size=4), st.integers(0, 3), st.none())
JSONISH = st.recursive(
    LEAVES,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.tuples(children, children),
        st.dictionaries(KEYS, children, max_size=4),
    ),
    max_leaves=30,
)


@settings(max_examples=3000, deadline=None)
@given(JSONISH)
def test_the_fast_json_check_accepts_exactly_what_the_path_walk_accepts(value: Any) -> None:
    walked = codec._json_path_walk(value, "$")
    assert codec._is_json(value, 0) == (walked is None)
    assert codec.json_path_error(value) == walked


def _nested(depth: int, container: str) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value] if container == "list" else {"k": value}
    return value


def test_the_depth_limit_is_the_same_on_both_walks() -> None:
    for depth in (codec.MAX_JSON_DEPTH - 1, codec.MAX_JSON_DEPTH, codec.MAX_JSON_DEPTH + 1):
        for container in ("list", "dict"):
            value = _nested(depth, container)
            assert codec._is_json(value, 0) == (codec._json_path_walk(value, "$") is None)
    loop: dict[str, Any] = {}
    loop["self"] = loop
    assert codec.json_path_error(loop) is not None


T0 = datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)
EFFECT = EffectRef("charge", EffectKind.AT_MOST_ONCE, "charging", "key-1", 2)

#: A valid value and some unusual or invalid ones per field of ExecutionRecord.
FIELD_VARIANTS: dict[str, list[Any]] = {
    "execution_id": ["ex-1", 5, None],
    "state": ["s", 5],
    "revision": [3, True, "3"],
    "point": [DurablePoint.BARRIER, "barrier"],
    "status": [ExecutionStatus.WAITING, None],
    "created_at": [
        T0,
        T0.astimezone(timezone(timedelta(hours=2))),
        T0.replace(tzinfo=ZoneInfo("UTC")),
        T0.replace(tzinfo=None),
        "2026-01-01T00:00:00+00:00",
    ],
    "deadline_at": [None, T0, T0.replace(tzinfo=ZoneInfo("Europe/Paris")), 5],
    "context": [
        None,
        {"a": [1, 2.5, None, True, "x"]},
        EncodedJSON(b'{"b":1}'),
        {"bad": {1, 2}},
        {"nan": float("nan")},
        "text",
    ],
    "labels": [{}, {"agent_id": "a"}, {"k": Decimal(1)}, None],
    "pending_effects": [(), ("a", "b")],
    "resume_event": [None, "go", 7],
    "recovery": [
        None,
        RecoveryInfo("unknown", EFFECT, ("succeeded", "failed"), T0),
        RecoveryInfo("unknown", None, (), T0.replace(tzinfo=None)),
        "unresolved",
    ],
    "resolution": [
        None,
        ResolutionInfo(ResolutionOutcome.SUCCEEDED, EFFECT, T0, "sig-1", {"r": 1}, None),
        ResolutionInfo(ResolutionOutcome.FAILED, None, T0, "sig-2", {"r": {1}}, "boom"),
    ],
    "error": [None, ErrorInfo("ValueError", "boom", {"x": 1}), ValueError("boom")],
}

BASE = ExecutionRecord(
    execution_id="ex-1",
    machine="m",
    spec_version=1,
    spec_sha256="ab" * 32,
    state="s",
    point=DurablePoint.START,
    status=ExecutionStatus.RUNNING,
    revision=0,
    created_at=T0,
    updated_at=T0,
)


def _outcome(fn: Any, record: Any) -> Any:
    try:
        return ("ok", fn(record))
    except Exception as exc:  # noqa: BLE001 - the test compares errors
        return ("error", type(exc), str(exc))


@settings(max_examples=600, deadline=None)
@given(
    st.fixed_dictionaries(
        {name: st.sampled_from(values) for name, values in FIELD_VARIANTS.items()}
    )
)
def test_generated_unstructure_matches_the_checking_hook(changes: dict[str, Any]) -> None:
    record = attrs.evolve(BASE, **changes)
    slow = CONVERTER.get_unstructure_hook(ExecutionRecord)
    assert _outcome(unstructure, record) == _outcome(slow, record)


def test_every_record_class_has_a_generated_unstructure_equal_to_cattrs() -> None:
    samples = [
        ErrorInfo("E", "m"),
        EFFECT,
        RecoveryInfo("r", EFFECT, ("retry",), T0),
        ResolutionInfo(ResolutionOutcome.RETRY, None, T0, "s"),
        BASE,
        SignalRecord("s", "ex-1", SignalKind.EVENT, T0, "go", {"p": 1}, 2, "me", 4, None, None),
    ]
    assert {type(s) for s in samples} <= set(RECORD_CLASSES)
    for sample in samples:
        slow = CONVERTER.get_unstructure_hook(type(sample))
        assert unstructure(sample) == slow(sample)
