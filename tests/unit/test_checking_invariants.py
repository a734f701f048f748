"""Each invariant of the interleaving checker (``phronomy_fsm.checking.invariants``),
on facts made up to break exactly it: what the store holds after a run, the run's log
and the application's records (the seeded-defect tests in ``tests/checking`` break
them through real runs)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from phronomy_fsm.checking import invariants as inv
from phronomy_fsm.checking.invariants import StoreFacts
from phronomy_fsm.durable.app import SIGNAL_MARK, DurableApp, EffectEntry
from phronomy_fsm.durable.keys import idempotency_key
from phronomy_fsm.durable.records import ExecutionStatus, SignalKind
from tests.runtime.conftest import compile_table

TABLE = compile_table(
    """
spec_format: 1
machine: m
version: 1
fail_closed: recovery_required
events:
  approve: {payload: dict}
  skip: {}
  done: {payload: dict}
  failed_: {}
states:
  start: {kind: auto, initial: true}
  announcing:
    kind: external
    barrier: {name: announce, on_committed: working, on_not_committed: failed}
  working:
    kind: external
    offload: {hook: act, completed: done, failed: failed_, effect: idempotent}
  waiting: {kind: wait}
  dead_end: {kind: wait, timeout: {seconds: 5, event: skip}}
  ok: {kind: final}
  failed: {kind: final}
  recovery_required: {kind: wait}
transitions:
  - {from: start, event: state_completed, to: announcing}
  - {from: working, event: done, to: waiting}
  - {from: working, event: failed_, to: failed}
  - {from: waiting, event: approve, to: ok, actions: [keep]}
  - {from: waiting, event: skip, to: dead_end}
  - {from: dead_end, event: skip, to: ok}
  - {from: recovery_required, event: skip, to: failed}
"""
)
TABLES = {"m": TABLE}


def record(eid: str = "x", status: str = "completed", state: str = "ok", **more: Any) -> Any:
    return SimpleNamespace(
        execution_id=eid,
        machine="m",
        status=ExecutionStatus(status),
        state=state,
        is_finished=status in ("completed", "failed", "cancelled"),
        recovery=more.get("recovery"),
        context=more.get("context", {}),
    )


def log_row(revision: int, barrier: str, status: str = "running") -> Any:
    return SimpleNamespace(revision=revision, barrier=barrier, status=status)


def signal(seq: int, event: str, outcome: str | None, payload: Any = None, **more: Any) -> Any:
    return SimpleNamespace(
        seq=seq,
        signal_id=more.get("signal_id", f"s{seq}"),
        kind=more.get("kind", SignalKind.EVENT),
        event=event,
        payload=payload,
        outcome=outcome,
    )


def facts(*records: Any, logs: Any = None, signals: Any = None) -> StoreFacts:
    by_id = {r.execution_id: r for r in records}
    return StoreFacts(
        by_id,
        logs or {eid: [log_row(0, "@start"), log_row(1, "announce")] for eid in by_id},
        signals or {eid: [] for eid in by_id},
    )


def app(effects: list[EffectEntry] = (), applied: Any = None) -> DurableApp:  # type: ignore[assignment]
    return DurableApp(
        machines=(),
        effects=lambda: list(effects),
        applied_signals=applied,
    )


def names(violations: list[Any]) -> list[str]:
    return [v.invariant for v in violations]


def test_an_acknowledged_start_missing_or_finish_unlike_the_store_is_lost_or_doubled() -> None:
    log = [
        {"what": "started", "execution_id": "gone"},
        {"what": "finished", "execution_id": "x", "status": "completed", "state": "ok"},
        {"what": "finished", "execution_id": "y", "status": "completed", "state": "ok"},
    ]
    got = inv._lifecycle(
        log, facts(record("x", "failed", "failed"), record("y", "running", "working"))
    )
    assert sorted(names(got)) == ["double_terminal", "lost", "lost"]
    two_ends = facts(
        record(),
        logs={"x": [log_row(3, "@final", "completed"), log_row(4, "@cancel", "cancelled")]},
    )
    assert names(inv._lifecycle([], two_ends)) == ["double_terminal"]


def test_at_most_once_effects_run_twice_or_again_without_retry() -> None:
    once = [
        EffectEntry("x", "act", "at_most_once", "k1", 1),
        EffectEntry("x", "act", "at_most_once", "k1", 1),
        EffectEntry("x", "act", "at_most_once", "k1", 2),
    ]
    got = inv._effects(app(once), facts(record()), set())
    assert sorted(names(got)) == ["blind_resends", "duplicate_effects"]
    retried = facts(
        record(),
        signals={
            "x": [signal(1, None, "consumed", {"outcome": "retry"}, kind=SignalKind.RESOLUTION)]
        },
    )
    assert names(inv._effects(app(once[1:]), retried, set())) == []


def test_an_idempotent_effect_under_a_key_no_durable_announcement_gives() -> None:
    keys = inv._announced_keys(facts(record()), TABLES)
    good = idempotency_key("x", 1, "act")
    assert good in keys
    assert idempotency_key("x", 0, "act") in keys  # the start announces too
    assert idempotency_key("x", 2, "act") not in keys  # never committed
    entries = [
        EffectEntry("x", "act", "idempotent", good),
        EffectEntry("x", "act", "idempotent", "act-" + "0" * 32),  # the engine's form
        EffectEntry("x", "act", "idempotent", "ticket-42"),  # the application's own: not judged
    ]
    assert names(inv._effects(app(entries), facts(record()), keys)) == ["idempotent_keys"]
    waited = facts(record(), logs={"x": [log_row(0, "@start"), log_row(1, "@wait")]})
    assert idempotency_key("x", 1, "act") not in inv._announced_keys(waited, TABLES)


def test_a_question_under_an_unknown_key_or_answered_retry_about_an_attempt_that_ran() -> None:
    store = facts(record())
    keys = inv._announced_keys(store, TABLES)
    key = idempotency_key("x", 1, "act")
    ask = {"what": "question", "execution_id": "x", "effect": "act", "attempt": 1, "process": 1}
    unknown = [{**ask, "key": "act-nowhere", "outcome": "succeeded"}]
    assert names(inv._questions(unknown, app(), store, keys)) == ["question_keys"]
    retry = [{**ask, "key": key, "outcome": "retry"}]
    assert names(inv._questions(retry, app(), store, keys)) == []
    ran = [EffectEntry("x", "act", "at_most_once", key, 1)]
    assert names(inv._questions(retry, app(ran), store, keys)) == ["duplicate_effects"]
    succeeded = [{**ask, "key": key, "outcome": "succeeded"}]
    assert names(inv._questions(succeeded, app(ran), store, keys)) == []


def test_a_consumed_signal_whose_change_is_not_reported_exactly_once() -> None:
    mark = {"by": "p", SIGNAL_MARK: "s1"}
    store = facts(record(), signals={"x": [signal(1, "approve", "consumed", mark)]})
    log: list[Any] = []
    assert names(inv._signals(log, app(applied=lambda r: [mark]), store, TABLES)) == []
    assert names(inv._signals(log, app(applied=lambda r: []), store, TABLES)) == ["signals_applied"]
    assert names(inv._signals(log, app(applied=lambda r: [mark, mark]), store, TABLES)) == [
        "signals_applied"
    ]
    # an event some row takes without an action is not asked about
    skipped = facts(record(), signals={"x": [signal(1, "skip", "consumed", {SIGNAL_MARK: "s1"})]})
    assert names(inv._signals(log, app(applied=lambda r: []), skipped, TABLES)) == []


def test_a_signal_acknowledged_but_missing_closed_without_reason_or_pending_on_a_finished_one() -> (
    None
):
    sent = [{"what": "sent", "execution_id": "x", "signal_id": "gone", "event": "approve"}]
    store = facts(
        record(),
        signals={
            "x": [
                signal(1, "approve", "dropped: finished in ok"),
                signal(2, "approve", "rejected: stale (...)"),
                signal(3, "approve", "dropped"),
                signal(4, "approve", None),
            ]
        },
    )
    got = inv._signals(sent, app(), store, TABLES)
    assert names(got) == ["lost_signals"] * 3
    waiting = facts(
        record(status="waiting", state="waiting"), signals={"x": [signal(4, "approve", None)]}
    )
    assert names(inv._signals([], app(), waiting, TABLES)) == []


def test_an_execution_that_neither_ends_nor_waits_for_someone_is_stuck() -> None:
    question = SimpleNamespace(allowed_outcomes=("retry",), subject=SimpleNamespace(effect="act"))
    resting = facts(
        record("a", "waiting", "waiting"),
        record("b", "waiting", "dead_end"),
        record("c", "recovery_required", "working", recovery=question),
    )
    assert names(inv._stuck(resting, TABLES)) == []
    no_question = SimpleNamespace(allowed_outcomes=(), subject=None)
    stuck = facts(
        record("d", "running", "working"),
        record("e", "recovery_required", "working", recovery=no_question),
        record("f", "waiting", "ok"),
    )
    assert names(inv._stuck(stuck, TABLES)) == ["stuck"] * 3
