"""Round trips of every durable record: canonical JSON and through the SQLite store.

Covers multi-MB contexts, unicode, timezone-aware datetimes at a daylight-saving edge
(``zoneinfo`` with ``fold``), strict decoding, values that are not JSON data, and a
wrongly typed field failing only its own commit of a group-commit batch.
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import attrs
import pytest

from phronomy_fsm.durable.records import (
    DurableCommit,
    DurablePoint,
    EffectKind,
    EffectRef,
    ErrorInfo,
    ExecutionRecord,
    ExecutionStatus,
    JournalEntry,
    MachineRecord,
    RecoveryInfo,
    ResolutionInfo,
    ResolutionOutcome,
    SignalKind,
    WorkerRecord,
    from_json,
    to_json,
)
from phronomy_fsm.errors import SerializationError

from .helpers import T0, admit, advance, create, new_execution, signal, step

NEW_YORK = ZoneInfo("America/New_York")
# 2026-11-01 01:30 happens twice in New York: EDT (-04:00, fold=0) then EST (-05:00, fold=1).
AMBIGUOUS_FIRST = datetime(2026, 11, 1, 1, 30, 0, 250001, tzinfo=NEW_YORK, fold=0)
AMBIGUOUS_SECOND = datetime(2026, 11, 1, 1, 30, 0, 250001, tzinfo=NEW_YORK, fold=1)
#: The same instants with fixed-offset tzinfo: what a decoder can rebuild from ISO 8601.
FIRST_FIXED = AMBIGUOUS_FIRST.astimezone(timezone(timedelta(hours=-4)))
SECOND_FIXED = AMBIGUOUS_SECOND.astimezone(timezone(timedelta(hours=-5)))
UNICODE = 'naïve café — 日本語 — 🚀 — \u0000 NUL — \u2028 line sep — "quoted" \\ backslash'
EFFECT = EffectRef("charge", EffectKind.AT_MOST_ONCE, "charging", "key-ü", attempt=2)


def test_the_dst_edge_is_really_ambiguous():
    assert AMBIGUOUS_FIRST.utcoffset() == timedelta(hours=-4)
    assert AMBIGUOUS_SECOND.utcoffset() == timedelta(hours=-5)
    assert AMBIGUOUS_SECOND - AMBIGUOUS_FIRST == timedelta(0)  # same wall clock, naive subtraction
    assert AMBIGUOUS_SECOND.astimezone(UTC) - AMBIGUOUS_FIRST.astimezone(UTC) == timedelta(hours=1)


def test_zoneinfo_datetimes_at_the_fold_keep_their_instants():
    """Times are stored in UTC, so the zone name and offset are not kept, the instant
    is: both folds stay distinct and exact. (PEP 495: an aware datetime inside a fold
    never compares equal to one with another tzinfo, so compare normalised values.)"""
    ex = new_execution("e", created_at=AMBIGUOUS_FIRST, updated_at=AMBIGUOUS_SECOND)
    back = from_json(ExecutionRecord, to_json(ex))
    assert back.created_at.utcoffset() == timedelta(0) == back.updated_at.utcoffset()
    assert back.updated_at - back.created_at == timedelta(hours=1)
    assert back.created_at.astimezone(UTC) == AMBIGUOUS_FIRST.astimezone(UTC)
    assert back.updated_at.astimezone(UTC) == AMBIGUOUS_SECOND.astimezone(UTC)
    assert back == attrs.evolve(ex, created_at=FIRST_FIXED, updated_at=SECOND_FIXED)
    assert to_json(back) == to_json(ex)


def _full_execution() -> ExecutionRecord:
    """An execution with every optional field set."""
    return new_execution(
        "ex-ü",
        machine="payout-ü",
        state="charging",
        point=DurablePoint.WAIT,
        status=ExecutionStatus.RECOVERY_REQUIRED,
        revision=3,
        created_at=FIRST_FIXED,
        updated_at=SECOND_FIXED,
        context={"text": UNICODE, "nested": [1, 2.5, None, True, {"k": ["v"]}]},
        point_revision=2,
        resume_event="charged",
        pending_effects=("charge", "notify"),
        deadline_at=SECOND_FIXED + timedelta(hours=1),
        expires_at=SECOND_FIXED + timedelta(days=1),
        parent_execution_id="parent-ü",
        notify_event="child_done",
        exclusive_key="agent-ü",
        recovery=RecoveryInfo(
            "outcome unknown", EFFECT, ("succeeded", "failed", "not_performed"), SECOND_FIXED
        ),
        resolution=ResolutionInfo(
            ResolutionOutcome.SUCCEEDED, EFFECT, SECOND_FIXED, "sig-1", result={"ok": UNICODE}
        ),
        error=ErrorInfo("IOError", UNICODE, {"errno": 5, "a": [1, {"b": None}]}),
        labels={"agent_id": "agent-ü", "ratio": 0.1},
    )


@pytest.mark.parametrize(
    "record",
    [
        _full_execution(),
        signal(
            "ex-ü",
            "sig-ü",
            kind=SignalKind.RESOLUTION,
            created_at=SECOND_FIXED,
            payload={"text": UNICODE},
            expected_revision=3,
            sender="operator",
            seq=7,
            consumed_revision=4,
            outcome="consumed",
        ),
        JournalEntry("assistant_message", {"message": {"content": UNICODE}}, 3, 1),
        WorkerRecord("w-ü", "host", 42, "worker", FIRST_FIXED, SECOND_FIXED, SECOND_FIXED, 9, "b"),
        MachineRecord("m", 2, "f" * 64, {"states": [UNICODE]}, FIRST_FIXED),
        ErrorInfo("E", UNICODE, {"a": [1, {"b": None}]}),
    ],
    ids=lambda r: type(r).__name__,
)
def test_json_round_trip_is_exact(record):
    text = to_json(record)
    back = from_json(type(record), text)
    assert back == record
    for field in attrs.fields(type(record)):  # the instant survives, read back in UTC
        value = getattr(record, field.name)
        if isinstance(value, datetime):
            assert getattr(back, field.name).utcoffset() == timedelta(0)
            assert getattr(back, field.name) == value
    assert to_json(back) == text  # canonical: stable on re-encoding


def test_decoding_is_strict():
    data = json.loads(to_json(_full_execution()))
    with pytest.raises(SerializationError):
        from_json(ExecutionRecord, json.dumps({**data, "surprise": 1}))
    missing = dict(data)
    del missing["state"]
    with pytest.raises(SerializationError):
        from_json(ExecutionRecord, json.dumps(missing))
    with pytest.raises(SerializationError):
        from_json(ExecutionRecord, json.dumps({**data, "status": "bogus"}))
    with pytest.raises(SerializationError):
        from_json(ExecutionRecord, json.dumps({**data, "created_at": "2026-01-01T00:00:00"}))
    with pytest.raises(SerializationError):
        from_json(ExecutionRecord, json.dumps({**data, "revision": "3"}))
    assert from_json(ExecutionRecord, json.dumps(data)).status is ExecutionStatus.RECOVERY_REQUIRED


def test_store_round_trip_of_every_stored_record(store_factory):
    store = store_factory()
    store.commit(create("parent-ü", exclusive_key="other"))
    base = new_execution("ex-ü", machine="payout-ü", exclusive_key="agent-ü")
    store.commit(DurableCommit("@start", base, None))
    full = attrs.evolve(_full_execution(), revision=1, point_revision=1)
    entry = JournalEntry("user_message", {"text": UNICODE})
    receipt = store.commit(
        DurableCommit(
            "charge",
            full,
            0,
            journal=(entry,),
            send_signals=(signal("parent-ü", "sig-ü", payload={"text": UNICODE}),),
        )
    )
    loaded = store.load_record("ex-ü")
    assert loaded == full and loaded.updated_at.utcoffset() == timedelta(0)
    assert store.journal_entries("ex-ü") == [attrs.evolve(entry, revision=1, position=0)]
    (sent,) = store.list_signals("parent-ü")
    assert (sent.seq, sent.payload) == (receipt.signal_seqs[0], {"text": UNICODE})
    logged = store.barrier_log("ex-ü")[-1]
    assert (logged.revision, logged.barrier, logged.committed_at, logged.status, logged.state) == (
        1,
        "charge",
        receipt.committed_at,
        "recovery_required",
        "charging",
    )
    worker = WorkerRecord("w-ü", "host", 1, "n", FIRST_FIXED, FIRST_FIXED, FIRST_FIXED)
    store.register_worker(worker, 60)
    assert store.list_workers()[0][0] == worker
    machine = MachineRecord("payout-ü", 1, "c" * 64, {"states": [UNICODE]}, SECOND_FIXED)
    store.register_machine(machine)
    assert store.load_machine("payout-ü") == machine


def test_a_multi_megabyte_context_round_trips(store_factory):
    store = store_factory()
    ex = admit(store, "ex-big")
    blob = ("0123456789abcdef" * 4096) * 48  # 3 MiB of text
    big = step(ex, context={"blob": blob, "u": UNICODE}, journal=(JournalEntry("b", blob),))
    store.commit(big)
    loaded = store.load_record("ex-big")
    assert loaded == big.execution and len(loaded.context["blob"]) == 3 * 1024 * 1024
    assert store.journal_entries("ex-big")[0].data == blob


@pytest.mark.parametrize(
    "context",
    [
        {"f": 1.5, "neg": -0.0, "int": 2**63 - 1},
        {"tuple": (1, 2), "list": [{"a": (3,)}], "unicode": "é 漢字 \u2028"},
    ],
)
def test_json_data_round_trips_exactly(context):
    ex = new_execution("e", context=context)
    back = from_json(ExecutionRecord, to_json(ex))
    assert back.context == json.loads(json.dumps(context))  # tuples come back as lists


@pytest.mark.parametrize(
    "bad",
    [
        {1: "int key"},
        {"nan": math.nan},
        {"inf": [math.inf]},
        {"set": {1}},
        {"bytes": b"x"},
        {"when": T0},  # a datetime is not JSON data: say so instead of silently stringifying
        {"big": 2**70},  # JSON integers are limited to 64 bits here
        {"surrogate": "\ud800"},
    ],
)
def test_values_that_are_not_json_data_are_refused_with_their_path(bad):
    ex = new_execution("e", context=bad)
    with pytest.raises(SerializationError, match=r"\$\.context"):
        to_json(ex)


def test_a_naive_datetime_is_refused_and_nothing_is_written(store_factory):
    store = store_factory()
    ex = admit(store, "ex-1")
    naive = attrs.evolve(advance(ex), updated_at=datetime(2026, 1, 1))
    with pytest.raises(SerializationError, match="naive"):
        store.commit(DurableCommit("b", naive, 0))
    assert store.load_record("ex-1") == ex


@pytest.mark.parametrize(
    "changes",
    [
        {"recovery": "unresolved"},  # text where a record belongs
        {"error": ValueError("boom")},
        {"state": 5},  # an int where a str belongs
        {"created_at": "2026-01-01T00:00:00+00:00"},  # text where a datetime belongs
        {"updated_at": 1_767_225_600},
        {"labels": {"k": {1, 2}}},
    ],
    ids=lambda c: f"{next(iter(c))}={type(next(iter(c.values()))).__name__}",
)
def test_a_wrongly_typed_field_fails_only_its_own_commit_of_a_batch(changes, store_factory):
    """Encoding refuses a value of the wrong type with SerializationError (never a raw
    AttributeError or TypeError), and in a group-commit batch it fails only its own
    commit."""
    store = store_factory(group_max_batch=2, group_window_seconds=30.0)
    one, two = admit(store, "ex-1"), admit(store, "ex-2")
    bad = attrs.evolve(advance(one), **changes)
    with pytest.raises(SerializationError):
        to_json(bad)
    with pytest.raises(SerializationError):
        store.commit(DurableCommit("b", bad, 0))
    good = advance(two)
    futures = [
        store.submit(DurableCommit("b", good, 0)),
        store.submit(DurableCommit("b", bad, 0)),
    ]
    assert futures[0].result(timeout=30).revision == 1
    with pytest.raises(SerializationError):
        futures[1].result(timeout=30)
    assert store.load_record("ex-1") == one
    assert store.load_record("ex-2") == good
