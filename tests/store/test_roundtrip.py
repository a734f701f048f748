"""Round trips of every record type: JSON and through the store (issue 4 "Tests").

Covers multi-MB payloads, unicode, timezone-aware datetimes at a daylight-saving edge
(``zoneinfo`` with ``fold``), and the output identity of the store's fast encoder with
``records.to_json``.
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import attrs
import pytest

from phronomy_fsm.errors import SerializationError
from phronomy_fsm.store import BarrierCommit, ExecutionStatus
from phronomy_fsm.store.records import (
    AgentLifecycle,
    AgentRecord,
    ApprovalItem,
    ApprovalRequest,
    BarrierRecord,
    CommitReceipt,
    ErrorInfo,
    ExecutionRecord,
    RecoveryDescriptor,
    RecoverySubject,
    ToolBatchEntry,
    from_json,
    to_json,
)

from .helpers import T0, admission, journal, new_execution

NEW_YORK = ZoneInfo("America/New_York")
# 2026-11-01 01:30 happens twice in New York: EDT (-04:00, fold=0) then EST (-05:00, fold=1).
AMBIGUOUS_FIRST = datetime(2026, 11, 1, 1, 30, 0, 250001, tzinfo=NEW_YORK, fold=0)
AMBIGUOUS_SECOND = datetime(2026, 11, 1, 1, 30, 0, 250001, tzinfo=NEW_YORK, fold=1)
#: The same instants with fixed-offset tzinfo: what a decoder can rebuild from ISO 8601.
FIRST_FIXED = AMBIGUOUS_FIRST.astimezone(timezone(timedelta(hours=-4)))
SECOND_FIXED = AMBIGUOUS_SECOND.astimezone(timezone(timedelta(hours=-5)))
UNICODE = 'naïve café — 日本語 — 🚀 — \u0000 NUL — \u2028 line sep — "quoted" \\ backslash'


def test_the_dst_edge_is_really_ambiguous():
    assert AMBIGUOUS_FIRST.utcoffset() == timedelta(hours=-4)
    assert AMBIGUOUS_SECOND.utcoffset() == timedelta(hours=-5)
    assert AMBIGUOUS_SECOND - AMBIGUOUS_FIRST == timedelta(0)  # same wall clock, naive subtraction
    assert AMBIGUOUS_SECOND.astimezone(UTC) - AMBIGUOUS_FIRST.astimezone(UTC) == timedelta(hours=1)


def test_zoneinfo_datetimes_at_the_fold_keep_their_instants():
    """Times are stored in UTC (issue 11 item 10e), so the zone name and offset are not
    kept, the instant is: both folds stay distinct and exact. (PEP 495: an aware
    datetime inside a fold never compares equal to one with another tzinfo, so compare
    normalised values; records meant to be compared should carry UTC or fixed
    offsets.)"""
    ex = new_execution("a", "e", created_at=AMBIGUOUS_FIRST, updated_at=AMBIGUOUS_SECOND)
    back = from_json(ExecutionRecord, to_json(ex))
    assert back.created_at.utcoffset() == timedelta(0) == back.updated_at.utcoffset()
    assert back.updated_at - back.created_at == timedelta(hours=1)
    assert back.created_at.astimezone(UTC) == AMBIGUOUS_FIRST.astimezone(UTC)
    assert back.updated_at.astimezone(UTC) == AMBIGUOUS_SECOND.astimezone(UTC)
    assert back == attrs.evolve(ex, created_at=FIRST_FIXED, updated_at=SECOND_FIXED)
    assert to_json(back) == to_json(ex)


def _full_execution() -> ExecutionRecord:
    return new_execution(
        "agent-ü",
        "ex-ü",
        status=ExecutionStatus.SUSPENDED,
        phase="approval",
        created_at=FIRST_FIXED,
        updated_at=SECOND_FIXED,
        input={"text": UNICODE, "nested": [1, 2.5, None, True, {"k": ["v"]}]},
        pending_llm_call_id="llm-1",
        llm_call_count=3,
        tool_batch=(
            ToolBatchEntry(
                "ti-1", "call-1", "search", "llm-1", {"q": UNICODE}, "awaiting_approval"
            ),
            ToolBatchEntry(
                "ti-2",
                "call-2",
                "fetch",
                "llm-1",
                [1, 2],
                "completed",
                result={"ok": 1},
                error=None,
            ),
        ),
        approval_request=ApprovalRequest(
            "req-1",
            "ex-ü",
            (ApprovalItem("ti-1", "call-1", "search", {"q": "x"}, reason="needs approval"),),
            SECOND_FIXED,
        ),
        recovery=RecoveryDescriptor(
            "outcome unknown",
            (
                RecoverySubject(
                    "tool_invocation",
                    llm_call_id="llm-1",
                    tool_invocation_id="ti-2",
                    arguments={"a": 1},
                ),
            ),
            failure=ErrorInfo("IOError", "boom", {"errno": 5}),
        ),
        output={"text": UNICODE},
        error=ErrorInfo("ValueError", UNICODE),
        terminal_reason=None,
        metadata={
            "recovery_contract_version": 1,
            "coordination": {"kind": "team", "slot": 2},
            "ratio": 0.1,
        },
    )


@pytest.mark.parametrize(
    "record",
    [
        _full_execution(),
        AgentRecord(
            "agent-ü", 7, AgentLifecycle.SUSPENDED, 12, FIRST_FIXED, SECOND_FIXED, {"x": UNICODE}
        ),
        journal(
            "agent-ü",
            "ex-ü",
            role="assistant",
            content={"text": UNICODE},
            sequence=4,
            occurred_at=SECOND_FIXED,
        ),
        BarrierRecord(
            "ex-ü", 3, "tool_barrier", SECOND_FIXED, "f" * 64, "active", "dispatching_tools"
        ),
        CommitReceipt("ex-ü", 3, (4, 5), FIRST_FIXED),
        ErrorInfo("E", UNICODE, {"a": [1, {"b": None}]}),
    ],
    ids=lambda r: type(r).__name__,
)
def test_json_round_trip_is_exact(record):
    text = to_json(record)
    back = from_json(type(record), text)
    assert back == record
    # the instant survives, read back in UTC (issue 11 item 10e)
    for field in attrs.fields(type(record)):
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
    del missing["phase"]
    with pytest.raises(SerializationError):
        from_json(ExecutionRecord, json.dumps(missing))
    with pytest.raises(SerializationError):
        from_json(ExecutionRecord, json.dumps({**data, "status": "bogus"}))
    with pytest.raises(SerializationError):
        from_json(
            ExecutionRecord, json.dumps({**data, "created_at": "2026-01-01T00:00:00"})
        )  # naive
    assert from_json(ExecutionRecord, json.dumps(data)).status is ExecutionStatus.SUSPENDED


def test_store_round_trip_of_every_stored_record(store):
    agent, _ex = admission(store, "agent-ü", "ex-ü")
    full = attrs.evolve(_full_execution(), revision=1, status=ExecutionStatus.ACTIVE)
    record = journal(
        "agent-ü", "ex-ü", role="user", content={"text": UNICODE}, occurred_at=SECOND_FIXED
    )
    root = attrs.evolve(agent.advance(now=SECOND_FIXED, journal_head=1), metadata={"note": UNICODE})
    receipt = store.commit(
        BarrierCommit("provider_barrier", full, 0, agent=root, journal=(record,))
    )
    assert store.load_execution("ex-ü") == full
    assert store.load_execution("ex-ü").updated_at.utcoffset() == timedelta(0)  # UTC
    assert store.load_agent("agent-ü") == root
    assert store.read_journal("agent-ü") == [attrs.evolve(record, sequence=1)]
    history = store.barrier_history("ex-ü")
    assert history[-1] == BarrierRecord(
        "ex-ü",
        1,
        "provider_barrier",
        receipt.committed_at,
        history[-1].digest,
        "active",
        "approval",
    )


def test_multi_megabyte_payload_round_trips(store):
    agent, ex = admission(store, "a1", "ex-big")
    blob = ("0123456789abcdef" * 4096) * 48  # 3 MiB of text
    big = ex.advance(
        now=T0,
        status=ExecutionStatus.ACTIVE,
        phase="calling_llm",
        input={"blob": blob, "u": UNICODE},
    )
    store.commit(BarrierCommit("provider_barrier", big, 0))
    loaded = store.load_execution("ex-big")
    assert loaded == big and len(loaded.input["blob"]) == 3 * 1024 * 1024
    rec = journal("a1", "ex-big", content=blob)
    store.commit(
        BarrierCommit(
            "tool_barrier",
            big.advance(now=T0, phase="dispatching_tools"),
            1,
            agent=agent.advance(journal_head=1),
            journal=(rec,),
        )
    )
    assert store.read_journal("a1")[0].content == blob


@pytest.mark.parametrize(
    "metadata",
    [
        {"f": 1.5, "neg": -0.0, "int": 2**63 - 1},
        {"tuple": (1, 2), "list": [{"a": (3,)}], "unicode": "é 漢字 \u2028"},
    ],
)
def test_json_data_round_trips_exactly(metadata):
    ex = new_execution("a", "e", metadata=metadata)
    back = from_json(ExecutionRecord, to_json(ex))
    assert back.metadata == json.loads(json.dumps(metadata))  # tuples come back as lists


@pytest.mark.parametrize(
    "bad",
    [
        {1: "int key"},
        {"nan": math.nan},
        {"inf": [math.inf]},
        {"set": {1}},
        {"bytes": b"x"},
        {"when": T0},  # a datetime is not JSON data: say so instead of silently stringifying
        {"enum": ExecutionStatus.ACTIVE},  # nor is an enum member (a str subclass)
        {"big": 2**70},  # JSON integers are limited to 64 bits here
    ],
)
def test_values_that_are_not_json_data_are_refused(bad):
    ex = new_execution("a", "e", metadata=bad)
    with pytest.raises(SerializationError):
        to_json(ex)


def test_naive_datetime_is_refused_and_nothing_is_written(store):
    _agent, ex = admission(store, "a1", "ex-1")
    naive = attrs.evolve(
        ex.advance(now=T0, status=ExecutionStatus.ACTIVE), updated_at=datetime(2026, 1, 1)
    )
    with pytest.raises(SerializationError):
        store.commit(BarrierCommit("provider_barrier", naive, 0))
    assert store.load_execution("ex-1") == ex


ENTRY = ToolBatchEntry("t-1", "call-1", "lookup", "llm-1", {"q": 1}, "authorized")


@pytest.mark.parametrize(
    "changes",
    [
        {"approval_request": {"request_id": "r"}},  # a dict where a record belongs
        {"recovery": "unresolved"},
        {"error": ValueError("boom")},
        {"tool_batch": [ENTRY]},  # a list: records hold tuples
        {"tool_batch": ({"tool_invocation_id": "t-1"},)},
        {"created_at": "2026-01-01T00:00:00+00:00"},  # text where a datetime belongs
        {"updated_at": 1_767_225_600},
    ],
    ids=lambda c: f"{next(iter(c))}={type(next(iter(c.values()))).__name__}",
)
def test_a_wrongly_typed_field_is_a_serialization_error_for_that_barrier_only(
    changes, store_factory
):
    """Encoding refuses a value of the wrong type with SerializationError (never a raw
    AttributeError), and in a group-commit batch it fails only its own barrier."""
    store = store_factory(group_max_batch=2, group_window_seconds=30.0)
    _, one = admission(store, "a1", "ex-1")
    _, two = admission(store, "a2", "ex-2")
    bad = attrs.evolve(one.advance(now=T0, status=ExecutionStatus.ACTIVE), **changes)
    with pytest.raises(SerializationError):
        to_json(bad)
    with pytest.raises(SerializationError):
        store.commit(BarrierCommit("provider_barrier", bad, 0))
    good = two.advance(now=T0, status=ExecutionStatus.ACTIVE)
    futures = [
        store.submit(BarrierCommit("provider_barrier", good, 0)),
        store.submit(BarrierCommit("provider_barrier", bad, 0)),
    ]
    assert futures[0].result(timeout=30).revision == 1
    with pytest.raises(SerializationError):
        futures[1].result(timeout=30)
    assert store.load_execution("ex-1") == one
    assert store.load_execution("ex-2") == good
