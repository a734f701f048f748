"""Recovery by the durable engine after SIGKILL (docs/semantics.md "Recovery"): an
at_most_once effect whose outcome is unknown parks the execution, each operator answer
does what it says, an idempotent effect runs again with its key, waits survive."""

from __future__ import annotations

from pathlib import Path

import pytest

from phronomy_fsm.durable import DurableEventKind, ExecutionStatus
from phronomy_fsm.durable.operations import request_cancel, request_resolution
from phronomy_fsm.errors import ResolutionError
from phronomy_fsm.store.open import is_postgres_dsn, open_store

from .conftest import kill_at
from .order_app import order_machine, read_ledger


def _ledger(tmp_path: Path) -> list[dict]:
    return read_ledger(tmp_path / "ledger.jsonl")


def _parked_order(tmp_path, store_target, open_runtime):
    """``order-a`` killed right after its card was charged, then recovered by a new
    runtime, which parks it for an operator; ``(runtime, events)``."""
    kill_at(tmp_path, "offload:charge_card:after", db=store_target)
    runtime, events = open_runtime([order_machine(tmp_path / "ledger.jsonl")])
    runtime.recover()
    events.wait_for(lambda e: e.kind is DurableEventKind.RECOVERY_REQUIRED)
    return runtime, events


def test_an_at_most_once_effect_that_may_have_run_parks_the_execution(
    tmp_path, store_target, open_runtime
):
    kill_at(tmp_path, "offload:charge_card:after", db=store_target)  # charged, result not applied
    assert [e["effect"] for e in _ledger(tmp_path)] == ["charge_card"]
    runtime, events = open_runtime([order_machine(tmp_path / "ledger.jsonl")])
    report = runtime.recover()
    assert report.claimed == (("order-a", "running"),)
    events.wait_for(lambda e: e.kind is DurableEventKind.RECOVERY_REQUIRED)
    record = runtime.handle("order-a").record()
    assert record.status is ExecutionStatus.RECOVERY_REQUIRED
    assert record.state == "announcing_charge"  # the replay origin is kept
    assert record.recovery.subject.effect == "charge_card"
    assert record.recovery.subject.key == _ledger(tmp_path)[0]["key"]
    assert set(record.recovery.allowed_outcomes) == {
        "succeeded",
        "failed",
        "not_performed",
        "retry",
    }
    assert [e["effect"] for e in _ledger(tmp_path)] == ["charge_card"]  # never re-sent


@pytest.mark.parametrize(
    ("outcome", "material", "final_state", "charges"),
    [
        ("succeeded", {"result": {"charged_cents": 1500, "key": "from-operator"}}, "shipped", 1),
        ("failed", {"error": "the bank refused it"}, "failed", 1),
        ("not_performed", {}, "failed", 1),
        ("retry", {}, "shipped", 2),
    ],
)
def test_each_operator_answer_does_what_it_says(
    tmp_path, store_target, open_runtime, outcome, material, final_state, charges
):
    runtime, events = _parked_order(tmp_path, store_target, open_runtime)
    parked = runtime.handle("order-a").record()
    runtime.resolve("order-a", expected_revision=parked.revision, outcome=outcome, **material)
    events.wait_for(
        lambda e: (
            e.kind in (DurableEventKind.WAITING, DurableEventKind.FINISHED)
            and e.execution_id == "order-a"
        )
    )
    if runtime.handle("order-a").record().status is ExecutionStatus.WAITING:
        runtime.signal("order-a", "approve", {"by": "ops"})
    result = runtime.handle("order-a").result(10)
    assert result.state == final_state
    ledger = [e for e in _ledger(tmp_path) if e["effect"] == "charge_card"]
    assert len(ledger) == charges
    if outcome == "succeeded":
        assert result.context.receipt == material["result"]
    if outcome == "failed":
        assert result.context.errors == ["EffectFailedError: the bank refused it"]
    if outcome == "not_performed":
        assert result.context.errors[0].startswith("EffectNotPerformedError")
    if outcome == "retry":
        assert [e["attempt"] for e in ledger] == [1, 2]
        assert ledger[0]["key"] == ledger[1]["key"]  # the retry keeps the idempotency key
    with open_store(store_target, read_only=True) as store:
        log = [b.barrier for b in store.barrier_log("order-a")]
        assert log[:4] == ["@start", "charge", "@recovery", "@resolution"]
        resolution = [s for s in store.list_signals("order-a") if s.kind.value == "resolution"]
        assert [(s.outcome, s.consumed_revision) for s in resolution] == [("consumed", 3)]


def test_a_cancel_recorded_before_an_operators_retry_wins_and_nothing_runs_again(
    tmp_path, store_target, open_runtime
):
    # the cancel is recorded by another process and this runtime is not told (no poll
    # for an hour, no notifications); then the operator's `retry` arrives through the
    # runtime: the store refuses the @resolution that would charge the card again, and
    # the order ends cancelled with its card charged once
    kill_at(tmp_path, "offload:charge_card:after", db=store_target)
    quiet = {"notifications": False} if is_postgres_dsn(store_target) else {}
    runtime, events = open_runtime(
        [order_machine(tmp_path / "ledger.jsonl")], poll_seconds=3600, store_options=quiet
    )
    runtime.recover()
    events.wait_for(lambda e: e.kind is DurableEventKind.RECOVERY_REQUIRED)
    parked = runtime.handle("order-a").record()
    with open_store(store_target) as elsewhere:
        request_cancel(elsewhere, "order-a", reason="the customer cancelled", sender="cli")
    runtime.resolve("order-a", expected_revision=parked.revision, outcome="retry")
    result = runtime.handle("order-a").result(15)
    assert result.status is ExecutionStatus.CANCELLED
    assert len([e for e in _ledger(tmp_path) if e["effect"] == "charge_card"]) == 1
    with open_store(store_target, read_only=True) as store:
        log = [b.barrier for b in store.barrier_log("order-a")]
        assert log[-1] == "@cancel" and "@resolution" not in log


def test_a_second_answer_while_one_waits_is_refused(tmp_path, store_target, open_runtime):
    # the execution is parked and nobody runs it: a first answer waits in its inbox; a
    # second one (another operator, or a change of mind) is refused and writes nothing,
    # while resending the first (same signal id) stays a no-op
    runtime, _events = _parked_order(tmp_path, store_target, open_runtime)
    revision = runtime.handle("order-a").record().revision
    runtime.close(timeout_seconds=5)
    with open_store(store_target) as store:
        first = request_resolution(
            store, "order-a", expected_revision=revision, outcome="not_performed", signal_id="a1"
        )
        again = request_resolution(
            store, "order-a", expected_revision=revision, outcome="not_performed", signal_id="a1"
        )
        assert again.seq == first.seq
        with pytest.raises(ResolutionError, match="already has an answer") as refused:
            request_resolution(store, "order-a", expected_revision=revision, outcome="retry")
        assert refused.value.reason == "already_answered"
        assert [s.signal_id for s in store.list_signals("order-a")] == ["a1"]


def test_cancelling_an_execution_parked_on_an_effect_keeps_the_question(
    tmp_path, store_target, open_runtime
):
    # an operator cancels instead of answering: the cancelled record still says that
    # the charge may have happened, with its idempotency key to look it up by
    runtime, _events = _parked_order(tmp_path, store_target, open_runtime)
    parked = runtime.handle("order-a").record()
    assert parked.recovery is not None and parked.recovery.subject is not None
    runtime.cancel("order-a", reason="the customer gave up")
    result = runtime.handle("order-a").result(10)
    assert result.status is ExecutionStatus.CANCELLED
    message = result.error.message
    assert message.startswith("the customer gave up; left unanswered: ")
    assert "charge_card" in message and parked.recovery.subject.key in message
    with open_store(store_target, read_only=True) as store:
        assert store.load_record("order-a").error.message == message


def test_a_stale_or_malformed_resolution_writes_nothing(tmp_path, store_target, open_runtime):
    runtime, _events = _parked_order(tmp_path, store_target, open_runtime)
    revision = runtime.handle("order-a").record().revision
    with pytest.raises(ResolutionError, match="revision"):
        runtime.resolve("order-a", expected_revision=revision - 1, outcome="retry")
    with pytest.raises(ResolutionError, match="needs a result"):
        runtime.resolve("order-a", expected_revision=revision, outcome="succeeded")
    with pytest.raises(ResolutionError, match="not allowed"):
        runtime.resolve("order-a", expected_revision=revision, outcome="maybe")
    with pytest.raises(ResolutionError, match="takes no error"):
        runtime.resolve("order-a", expected_revision=revision, outcome="retry", error="x")
    with pytest.raises(ResolutionError, match="storable JSON"):
        runtime.resolve("order-a", expected_revision=revision, outcome="succeeded", result={1: 2})
    store = runtime.store
    assert store.list_signals("order-a") == []
    assert store.load_record("order-a").revision == revision


def test_an_idempotent_effect_runs_again_with_the_same_key(tmp_path, store_target, open_runtime):
    kill_at(tmp_path, "offload:send_email:after", db=store_target)  # sent, result not applied
    runtime, events = open_runtime([order_machine(tmp_path / "ledger.jsonl")])
    runtime.recover()
    events.wait_for(lambda e: e.kind is DurableEventKind.WAITING and e.execution_id == "order-a")
    emails = [e for e in _ledger(tmp_path) if e["effect"] == "send_email"]
    assert len(emails) == 2 and emails[0]["key"] == emails[1]["key"]
    assert [e["effect"] for e in _ledger(tmp_path)].count("charge_card") == 1
    assert DurableEventKind.RECOVERY_REQUIRED.value not in events.kinds("order-a")


def test_a_waiting_execution_waits_again_and_takes_its_signal(tmp_path, store_target, open_runtime):
    kill_at(
        tmp_path, "barrier:@wait:after", db=store_target
    )  # the wait is durable; the process dies
    runtime, _events = open_runtime([order_machine(tmp_path / "ledger.jsonl")])
    runtime.recover()
    record = runtime.handle("order-a").record()
    assert record.status is ExecutionStatus.WAITING and record.state == "awaiting_approval"
    runtime.signal("order-a", "approve", {"by": "ops"})
    assert runtime.handle("order-a").result(10).state == "shipped"
    assert [e["effect"] for e in _ledger(tmp_path)] == ["charge_card", "send_email", "ship_parcel"]


def test_a_crash_before_a_barrier_commits_replays_from_the_previous_one(
    tmp_path, store_target, open_runtime
):
    kill_at(tmp_path, "barrier:ship:during", db=store_target)  # the ship barrier never committed
    runtime, _ = open_runtime([order_machine(tmp_path / "ledger.jsonl")])
    runtime.recover()
    # the approval was consumed only by the ship barrier: it is delivered again
    assert runtime.handle("order-a").result(10).state == "shipped"
    assert [e["effect"] for e in _ledger(tmp_path)] == ["charge_card", "send_email", "ship_parcel"]


def test_an_effect_policy_may_declare_an_effect_safe_to_send_again(
    tmp_path, open_runtime, store_target
):
    import attrs

    from phronomy_fsm.durable import EffectKind

    kill_at(tmp_path, "offload:charge_card:after", db=store_target)
    seen = []

    def policy(ctx, effect, declared):
        seen.append((ctx.order_id, effect, declared))
        return EffectKind.IDEMPOTENT if effect == "charge_card" else declared

    machine = attrs.evolve(order_machine(tmp_path / "ledger.jsonl"), effect_policy=policy)
    runtime, events = open_runtime([machine])
    runtime.recover()
    events.wait_for(lambda e: e.kind is DurableEventKind.WAITING and e.execution_id == "order-a")
    charges = [e for e in _ledger(tmp_path) if e["effect"] == "charge_card"]
    assert len(charges) == 2 and charges[0]["key"] == charges[1]["key"]
    assert ("order-a", "charge_card", EffectKind.AT_MOST_ONCE) in seen
    assert DurableEventKind.RECOVERY_REQUIRED.value not in events.kinds("order-a")
