"""The durable runtime's API on real SQLite files: starting (twice, with an exclusive
key, with a context that is not JSON), signals and their refusals (nothing written),
signals from another process, cancel, child executions, timers from durable deadlines,
hooks that are only the Protocol's stubs."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from datetime import timedelta
from pathlib import Path

import pytest

from phronomy_fsm.durable import DurableEventKind, DurableRuntime, ExecutionStatus, Machine
from phronomy_fsm.durable.operations import request_cancel
from phronomy_fsm.errors import (
    AgentBusyError,
    ContextSerializationError,
    ExecutionExistsError,
    ExecutionFinishedError,
    InvalidIdError,
    MissingHookError,
    NotFoundError,
    SignalRefusedError,
)
from phronomy_fsm.runtime.clock import ManualClock
from phronomy_fsm.store.faults import FaultInjectingStore, FaultKind
from phronomy_fsm.store.open import is_postgres_dsn, open_store

from .batch_app import Batch, batch_machines
from .conftest import ROOT, Recorder
from .order_app import TABLE, Order, OrderHooks, order_machine, read_ledger


def _order(tmp_path: Path, **options) -> Machine:
    return order_machine(tmp_path / "ledger.jsonl", **options)


def test_starting_an_existing_id_returns_it_and_another_machine_is_refused(tmp_path, open_runtime):
    runtime, events = open_runtime([_order(tmp_path), *batch_machines(tmp_path / "items.jsonl")])
    first = runtime.start("order_flow", Order("o", 1), execution_id="o")
    events.wait_for(lambda e: e.kind is DurableEventKind.WAITING)
    again = runtime.start("order_flow", Order("o", 999), execution_id="o")
    assert (first.created, again.created) == (True, False)
    assert again.record().revision == first.record().revision  # nothing written
    with pytest.raises(ExecutionExistsError, match="order_flow"):
        runtime.start("batch_flow", Batch(["a"]), execution_id="o")
    with pytest.raises(InvalidIdError, match="whitespace"):
        runtime.start("order_flow", Order("x", 1), execution_id="bad\u202eid")


def test_an_exclusive_key_admits_one_active_execution(tmp_path, open_runtime):
    runtime, _events = open_runtime([_order(tmp_path)])
    runtime.start("order_flow", Order("a", 1), execution_id="a", exclusive_key="customer-7")
    with pytest.raises(AgentBusyError, match="customer-7"):
        runtime.start("order_flow", Order("b", 1), execution_id="b", exclusive_key="customer-7")
    with pytest.raises(NotFoundError):
        runtime.store.load_record("b")


def test_a_context_that_is_not_json_fails_the_barrier_naming_the_path(tmp_path, open_runtime):
    class Leaky(OrderHooks):
        def price_order(self, ctx, payload):
            ctx.errors.append(object())  # not JSON

    runtime, _ = open_runtime(
        [Machine(TABLE, Leaky(tmp_path / "ledger.jsonl"), context_type=Order)]
    )
    with pytest.raises(ContextSerializationError, match=r"\$\.errors\[0\]"):
        runtime.start("order_flow", Order("o", 1, errors=[object()]), execution_id="start-refused")
    with pytest.raises(NotFoundError):
        runtime.store.load_record("start-refused")
    result = runtime.start("order_flow", Order("o", 1), execution_id="o").result(10)
    assert result.status is ExecutionStatus.FAILED
    assert "$.errors[0]" in result.error.message
    log = [b.barrier for b in runtime.store.barrier_log("o")]
    assert log == ["@start", "@final"]  # the charge barrier committed nothing
    assert read_ledger(tmp_path / "ledger.jsonl") == []  # and no card was charged


def test_signals_that_are_refused_write_nothing(tmp_path, open_runtime):
    runtime, events = open_runtime([_order(tmp_path)])
    runtime.start("order_flow", Order("o", 1), execution_id="o")
    events.wait_for(lambda e: e.kind is DurableEventKind.WAITING)
    revision = runtime.store.load_record("o").revision
    with pytest.raises(SignalRefusedError, match="did you mean 'approve'"):
        runtime.signal("o", "aprove")
    with pytest.raises(SignalRefusedError, match="posted by the engine"):
        runtime.signal("o", "charged", {})
    with pytest.raises(SignalRefusedError, match=r"\$\.when"):
        runtime.signal("o", "approve", {"when": {1, 2}})
    with pytest.raises(SignalRefusedError, match="revision"):
        runtime.signal("o", "approve", {}, expected_revision=revision - 1)
    with pytest.raises(NotFoundError):
        runtime.signal("nobody", "approve")
    assert runtime.store.list_signals("o") == []
    assert runtime.store.load_record("o").revision == revision
    runtime.signal("o", "approve", {}, signal_id="once")
    runtime.signal("o", "approve", {}, signal_id="once")  # a retried send is a no-op
    assert runtime.handle("o").result(10).state == "shipped"
    assert len(runtime.store.list_signals("o")) == 1
    with pytest.raises(ExecutionFinishedError):
        runtime.signal("o", "approve", {})


def test_a_signal_sent_by_another_process_reaches_the_live_owner(
    tmp_path, store_target, open_runtime
):
    runtime, events = open_runtime([_order(tmp_path)], poll_seconds=0.02)
    runtime.start("order_flow", Order("o", 1), execution_id="o")
    events.wait_for(lambda e: e.kind is DurableEventKind.WAITING)
    script = textwrap.dedent(
        f"""
        from phronomy_fsm.durable import send_signal
        from phronomy_fsm.store.open import open_store
        with open_store({store_target!r}) as store:
            print(send_signal(store, "o", "approve", {{"by": "another process"}}).seq)
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script],
        check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    result = runtime.handle("o").result(10)
    assert result.state == "shipped"
    assert result.context.decision == {"by": "another process"}


def test_cancel_finishes_a_waiting_execution_and_drops_what_it_had_not_taken(
    tmp_path, open_runtime
):
    runtime, events = open_runtime([_order(tmp_path)])
    runtime.start("order_flow", Order("o", 1), execution_id="o")
    events.wait_for(lambda e: e.kind is DurableEventKind.WAITING)
    runtime.cancel("o", reason="customer changed their mind")
    result = runtime.handle("o").result(10)
    assert result.status is ExecutionStatus.CANCELLED
    assert result.error.message == "customer changed their mind"
    assert [b.barrier for b in runtime.store.barrier_log("o")][-1] == "@cancel"
    assert [e["effect"] for e in read_ledger(tmp_path / "ledger.jsonl")] == [
        "charge_card",
        "send_email",
    ]


def test_a_cancel_recorded_before_the_executions_end_wins_over_that_end(
    tmp_path, store_target, open_runtime
):
    # the cancel is recorded by another process (a store of its own) and this runtime
    # is not told (its inbox poll is an hour away, PostgreSQL's notifications are off);
    # then a person's rejection makes the execution end by itself: the store refuses
    # that end, and it ends cancelled
    quiet = {"notifications": False} if is_postgres_dsn(store_target) else {}
    runtime, events = open_runtime([_order(tmp_path)], poll_seconds=3600, store_options=quiet)
    runtime.start("order_flow", Order("o", 1), execution_id="o")
    events.wait_for(lambda e: e.kind is DurableEventKind.WAITING)
    with open_store(store_target) as elsewhere:
        cancel = request_cancel(elsewhere, "o", reason="the customer cancelled", sender="cli")
    runtime.signal("o", "reject", {"by": "a person"})
    result = runtime.handle("o").result(15)
    assert result.status is ExecutionStatus.CANCELLED
    assert result.error.message == "the customer cancelled"
    log = [b.barrier for b in runtime.store.barrier_log("o")]
    assert log[-1] == "@cancel" and "@final" not in log  # the refused end wrote nothing
    [stored] = [s for s in runtime.store.list_signals("o") if s.seq == cancel.seq]
    assert stored.consumed_revision == runtime.store.load_record("o").revision
    # the rejection it took, never committed, is closed by the @cancel commit, not
    # left pending for ever
    [reject] = [s for s in runtime.store.list_signals("o") if s.event == "reject"]
    assert reject.outcome == f"dropped: finished in {result.state}"


def test_a_cancel_recorded_before_the_executions_deadline_wins_over_it(
    tmp_path, store_target, open_runtime
):
    # the same, with the execution's own deadline as the end: the engine ends it
    # through @cancel as failed (DeadlineExceededError), which the store refused only
    # when that end was not a @cancel — so it ended failed though cancel() said True
    quiet = {"notifications": False} if is_postgres_dsn(store_target) else {}
    runtime, events = open_runtime([_order(tmp_path)], poll_seconds=3600, store_options=quiet)
    runtime.start("order_flow", Order("o", 1), execution_id="o", timeout_seconds=2)
    events.wait_for(lambda e: e.kind is DurableEventKind.WAITING)
    with open_store(store_target) as elsewhere:
        cancel = request_cancel(elsewhere, "o", reason="the customer cancelled", sender="cli")
    result = runtime.handle("o").result(15)  # the deadline passes meanwhile
    assert result.status is ExecutionStatus.CANCELLED
    assert result.error.message == "the customer cancelled"
    stored = runtime.store.load_record("o")
    assert stored.status is ExecutionStatus.CANCELLED
    [signal] = [s for s in runtime.store.list_signals("o") if s.seq == cancel.seq]
    assert signal.consumed_revision == stored.revision  # applied, not left unconsumed


def test_a_cancel_whose_commit_failed_is_applied_before_anything_resumes(
    tmp_path, store_target, monkeypatch
):
    # the @cancel commit fails before it reaches the database; the engine recovers the
    # execution from the store, where the cancel still waits: it is cancelled again at
    # once, never replayed from its last barrier (which would park the charge)
    monkeypatch.setenv("PHRONOMY_TEST_EFFECT_SECONDS", "0.3")
    store = FaultInjectingStore(open_store(store_target))
    store.add(FaultKind.FAIL_BEFORE, barrier="@cancel", times=1)
    events = Recorder()
    runtime = DurableRuntime(store, machines=[_order(tmp_path)], listeners=[events], own_store=True)
    try:
        runtime.start("order_flow", Order("o", 1), execution_id="o")
        events.wait_for(
            lambda e: e.kind is DurableEventKind.EFFECT_STARTED and e.execution_id == "o"
        )
        runtime.cancel("o", reason="stop")
        result = runtime.handle("o").result(15)
        assert result.status is ExecutionStatus.CANCELLED
        assert [k for k, c in store.injected] == [FaultKind.FAIL_BEFORE]
        assert [b.barrier for b in store.inner.barrier_log("o")] == ["@start", "charge", "@cancel"]
        # the charge ran once, or never when the cancel stopped it before it started
        assert [e["effect"] for e in read_ledger(tmp_path / "ledger.jsonl")] in (
            [],
            ["charge_card"],
        )
    finally:
        runtime.close(timeout_seconds=5)


def test_a_cancel_that_arrives_after_the_end_is_refused(tmp_path, open_runtime):
    runtime, events = open_runtime([_order(tmp_path)])
    runtime.start("order_flow", Order("o", 1), execution_id="o")
    events.wait_for(lambda e: e.kind is DurableEventKind.WAITING)
    runtime.signal("o", "reject", {"by": "a person"})
    assert runtime.handle("o").result(10).status is ExecutionStatus.FAILED  # rejected
    with pytest.raises(ExecutionFinishedError):
        runtime.cancel("o")


def test_a_barrier_starts_child_executions_and_the_parent_hears_each_finish(tmp_path, open_runtime):
    runtime, _ = open_runtime(batch_machines(tmp_path / "items.jsonl"))
    result = runtime.start("batch_flow", Batch(["x", "y", "z"]), execution_id="batch").result(10)
    assert result.status is ExecutionStatus.COMPLETED and result.state == "done"
    assert result.context.results == {
        name: {"item": name.upper(), "key": result.context.results[name]["key"]} for name in "xyz"
    }
    children = runtime.store.list_records(parent_execution_id="batch")
    assert len(children) == 3 and all(c.status is ExecutionStatus.COMPLETED for c in children)
    assert all(c.revision == 2 for c in children)  # @start 0, announce 1, @final 2
    signals = runtime.store.list_signals("batch")
    assert sorted(s.payload["child_execution_id"] for s in signals) == sorted(
        c.execution_id for c in children
    )
    assert all(s.consumed_revision is not None for s in signals)
    journal = runtime.store.journal_entries("batch")
    assert [(j.kind, j.data, j.revision) for j in journal] == [
        ("launched", {"items": ["x", "y", "z"]}, 1)
    ]


def test_a_wait_timer_counts_from_its_durable_deadline_across_a_restart(tmp_path, open_runtime):
    clock = ManualClock()
    first, events = open_runtime([_order(tmp_path)], clock=clock)
    first.start("order_flow", Order("o", 1), execution_id="o")
    events.wait_for(lambda e: e.kind is DurableEventKind.WAITING)
    deadline = first.store.load_record("o").deadline_at
    assert deadline == clock.now() + timedelta(days=1)
    first.close()
    clock.advance(86_000)  # the process was down for most of the day
    second, events = open_runtime([_order(tmp_path)], clock=clock)
    second.recover()
    assert second.store.load_record("o").status is ExecutionStatus.WAITING
    clock.advance(401)  # past the stored deadline (a restarted timer would wait a day)
    result = second.handle("o").result(10)
    assert (result.status, result.state) == (ExecutionStatus.FAILED, "rejected")


def test_a_hook_that_is_only_the_protocols_stub_is_missing(tmp_path, open_runtime):
    from .order_app import Hooks

    # subclasses the generated Protocol and forgets one offload hook
    methods = {k: v for k, v in vars(OrderHooks).items() if k != "charge_card"}
    forgetful = type("Forgetful", (Hooks,), methods)
    with pytest.raises(MissingHookError, match="charge_card") as caught:
        open_runtime([Machine(TABLE, forgetful(tmp_path / "l"), context_type=Order)])
    assert caught.value.missing == ("charge_card",)


def test_a_worker_whose_lease_passed_commits_nothing_after_another_took_over(
    tmp_path, open_runtime
):
    from phronomy_fsm.errors import LeaseLostError

    old, old_events = open_runtime([_order(tmp_path)], lease_seconds=60)
    handle = old.start("order_flow", Order("o", 1), execution_id="o")
    old_events.wait_for(lambda e: e.kind is DurableEventKind.WAITING)
    waiter = old.dispatcher.call(old._waiter, "o").result(5)  # a caller waits on the old one
    old.store.retire_worker(old.worker_id)  # its lease passed (a long pause, a partition)
    new, _ = open_runtime([_order(tmp_path)], poll_seconds=0.02)
    assert new.recover().claimed == (("o", "waiting"),)
    new.signal("o", "approve", {"by": "ops"})
    assert new.handle("o").result(10).state == "shipped"
    old.watcher.verify_ownership()  # what its watcher does at its next heartbeat
    with pytest.raises(LeaseLostError, match="owned by worker"):
        waiter.result(10)  # the old runtime let the execution go
    old_events.wait_for(lambda e: e.kind is DurableEventKind.RELEASED)
    assert handle.result(10).state == "shipped"  # a later wait reads the outcome
    ships = [e for e in read_ledger(tmp_path / "ledger.jsonl") if e["effect"] == "ship_parcel"]
    assert len(ships) == 1
    assert [b.barrier for b in new.store.barrier_log("o")].count("ship") == 1


def test_a_stale_worker_that_resumes_mid_run_is_fenced(tmp_path, open_runtime):
    """The old owner is still running the execution (not waiting) when another worker
    takes it over: its next commit is refused and it drops the execution."""
    from phronomy_fsm.errors import LeaseLostError

    old, old_events = open_runtime([_order(tmp_path)], lease_seconds=60)
    old.start("order_flow", Order("o", 1), execution_id="o")
    old_events.wait_for(lambda e: e.kind is DurableEventKind.WAITING)
    waiter = old.dispatcher.call(old._waiter, "o").result(5)  # a caller waits on the old one
    old.store.retire_worker(old.worker_id)
    new, _ = open_runtime([_order(tmp_path)], lease_seconds=60)
    new.recover()
    old.signal("o", "approve", {"by": "old"})  # reaches the old owner at once
    with pytest.raises(LeaseLostError):
        waiter.result(10)
    old_commits = [e for e in old_events.events if e.kind is DurableEventKind.COMMITTED]
    assert [e.detail["barrier"] for e in old_commits] == ["charge", "paid", "@wait"]
    result = new.handle("o").result(10)
    assert result.state == "shipped"
    ships = [e for e in read_ledger(tmp_path / "ledger.jsonl") if e["effect"] == "ship_parcel"]
    assert len(ships) == 1


def test_a_records_hook_journals_engine_commits_and_history_reads_across_executions(
    tmp_path, open_runtime
):
    import attrs as _attrs

    from phronomy_fsm.durable import BarrierRecords, JournalEntry

    def records(ctx, commit, state):
        return BarrierRecords(
            journal=(JournalEntry(commit, {"state": state, "order": ctx.order_id}),)
        )

    machine = _attrs.evolve(_order(tmp_path), records=records)
    runtime, events = open_runtime([machine])
    for order_id in ("first", "second"):
        runtime.start("order_flow", Order(order_id, 1), execution_id=order_id, exclusive_key="cust")
        events.wait_for(
            lambda e, o=order_id: e.kind is DurableEventKind.WAITING and e.execution_id == o
        )
        runtime.signal(order_id, "approve", {})
        runtime.handle(order_id).result(10)
    entries = runtime.store.journal_for_key("cust")
    assert [(eid, e.kind, e.data["state"]) for eid, e in entries] == [
        ("first", "@wait", "awaiting_approval"),
        ("first", "@final", "shipped"),
        ("second", "@wait", "awaiting_approval"),
        ("second", "@final", "shipped"),
    ]
    assert entries[1][1].revision == runtime.store.load_record("first").revision


def test_cancel_as_failure_cascades_to_children_and_waits_for_running_work(tmp_path, open_runtime):
    import threading

    from .batch_app import Batch, ItemHooks, batch_machines

    release = threading.Event()
    original = ItemHooks.do_item

    def slow(self, ctx, payload):
        work = original(self, ctx, payload)

        def held(octx):
            release.wait(10)
            return work(octx)

        return held

    ItemHooks.do_item = slow
    try:
        runtime, events = open_runtime(batch_machines(tmp_path / "items.jsonl"))
        runtime.start("batch_flow", Batch(["a", "b"]), execution_id="batch")
        events.wait_for(
            lambda e: e.kind is DurableEventKind.EFFECT_STARTED and e.execution_id != "batch"
        )
        runtime.cancel("batch", reason="too slow", as_failure=True, error_type="Timeout")
        release.set()
        result = runtime.handle("batch").result(10)
    finally:
        ItemHooks.do_item = original
    assert (result.status, result.error.type, result.error.message) == (
        ExecutionStatus.FAILED,
        "Timeout",
        "too slow",
    )
    children = runtime.store.list_records(parent_execution_id="batch")
    assert {c.status for c in children} == {ExecutionStatus.FAILED}
    assert all(
        [b.barrier for b in runtime.store.barrier_log(c.execution_id)][-1] == "@cancel"
        for c in children
    )


def test_an_execution_deadline_survives_a_restart(tmp_path, open_runtime):
    clock = ManualClock()
    first, events = open_runtime([_order(tmp_path)], clock=clock)
    first.start("order_flow", Order("o", 1), execution_id="o", timeout_seconds=600)
    events.wait_for(lambda e: e.kind is DurableEventKind.WAITING)
    first.close()
    clock.advance(599)
    second, _ = open_runtime([_order(tmp_path)], clock=clock)
    second.recover()
    assert second.store.load_record("o").status is ExecutionStatus.WAITING
    clock.advance(2)  # past the stored deadline, not 600 s after the restart
    result = second.handle("o").result(10)
    assert (result.status, result.error.type) == (ExecutionStatus.FAILED, "DeadlineExceededError")
