"""Tests written for mutants of ``durable/`` that survived the rest of ``tests/durable``
and the checker (``tools/mutate_durable.py``; ``docs/operations.md``, "Mutation testing
the engine"). Each names the mutant it kills: the check it guards had no test that
would fail without it.
"""

from __future__ import annotations

import enum
import hashlib
from datetime import UTC, datetime
from pathlib import Path
from typing import Generic, TypeVar

import attrs
import pytest

from phronomy_fsm.durable import (
    BarrierRecords,
    DurableEventKind,
    ExecutionStatus,
    JournalEntry,
    Machine,
)
from phronomy_fsm.durable.app import DurableApp
from phronomy_fsm.durable.machines import (
    MachineFacts,
    effect_kind,
    table_from_json,
    table_to_json,
)
from phronomy_fsm.durable.operations import request_cancel
from phronomy_fsm.durable.records import DurableCommit, EffectKind, Fence, WorkerRecord
from phronomy_fsm.durable.submit import submit_execution
from phronomy_fsm.durable.worker import Worker
from phronomy_fsm.errors import (
    ConflictError,
    ExecutionFinishedError,
    LeaseLostError,
    NotFoundError,
    SignalRefusedError,
)
from phronomy_fsm.runtime.clock import ManualClock
from phronomy_fsm.store.open import is_postgres_dsn, open_store
from phronomy_fsm.testing.deadlines import wait_until

from .conftest import kill_at
from .late_effect_app import create_app as create_late_effect_app
from .order_app import TABLE, Order, OrderHooks, order_machine, read_ledger
from .transition_effect_app import create_app as create_transition_app

TRANSITION_APP = "tests.durable.transition_effect_app:create_app"


class Priority(str, enum.Enum):
    """A str-valued enum in the context: stored as its value only when the codec has
    registered it (without that it reaches the JSON check as itself and is refused)."""

    HIGH = "high"
    LOW = "low"


@attrs.define
class Address:
    """A nested attrs class in the context."""

    city: str
    zone: Priority = Priority.LOW


T = TypeVar("T")


@attrs.define
class Box(Generic[T]):
    """A generic attrs class: ``Box[int]`` is an attrs class to ``attrs.has`` but no
    class to ``attrs.resolve_types``."""

    item: T


@attrs.define
class RichOrder(Order):
    """The order's context with an enum field, a nested attrs class and a generic one,
    annotated as strings (``from __future__ import annotations``)."""

    priority: Priority = Priority.HIGH
    address: Address | None = None
    box: Box[int] | None = None


def _rich_machine(ledger: Path) -> Machine:
    return Machine(
        TABLE,
        OrderHooks(ledger),
        context_type=RichOrder,
        final_status={"rejected": ExecutionStatus.FAILED, "failed": ExecutionStatus.FAILED},
    )


def test_a_context_with_enums_and_nested_classes_survives_a_new_runtime(
    tmp_path, store_target, open_runtime
):
    # kills context.py `_resolve_types` mutants (the early return on `cls in seen or
    # not attrs.has(cls)`, the recursion into nested attrs classes, its `isinstance(hint,
    # type)`): without resolved annotations the str-valued enum reaches the JSON check as
    # itself; a generic alias taken for a class to resolve fails the machine's binding
    ledger = tmp_path / "ledger.jsonl"
    runtime, events = open_runtime([_rich_machine(ledger)])
    context = RichOrder("o-1", 1000, address=Address("Lyon", Priority.HIGH), box=Box(3))
    runtime.start("order_flow", context, execution_id="o-1")
    events.wait_for(lambda e: e.kind is DurableEventKind.WAITING and e.execution_id == "o-1")
    runtime.close(timeout_seconds=5)

    again, events = open_runtime([_rich_machine(ledger)])
    again.recover()
    stored = again.handle("o-1").record().context  # the stored JSON data
    assert stored["priority"] == "high"
    assert stored["address"] == {"city": "Lyon", "zone": "high"}
    assert stored["box"] == {"item": 3}
    again.signal("o-1", "approve", {"by": "ops"})
    result = again.handle("o-1").result(30)
    assert result.status is ExecutionStatus.COMPLETED
    assert result.context.priority is Priority.HIGH
    assert result.context.address == Address("Lyon", Priority.HIGH)
    assert result.context.box == Box(3)


def test_a_cancel_recorded_before_an_effects_announcement_keeps_the_effect_from_starting(
    tmp_path, store_target, open_runtime
):
    # kills engine.py `_Driver.may_start_effect` ignoring the announcement's refusal
    # (`if error is not None: return error` → `pass`): the cancel is recorded by another
    # process and this runtime is not told (its inbox poll is an hour away, PostgreSQL's
    # notifications are off); the approval then leads to `ship`, whose @effect commit the
    # store refuses (cancel_pending) — the effect must not start on its own lease
    quiet = {"notifications": False} if is_postgres_dsn(store_target) else {}
    app = create_late_effect_app(str(tmp_path / "store.db"))
    runtime, events = open_runtime(list(app.machines), poll_seconds=3600, store_options=quiet)
    runtime.start("late_effect", {"order": "late-1"}, execution_id="late-1")
    events.wait_for(lambda e: e.kind is DurableEventKind.WAITING and e.execution_id == "late-1")
    with open_store(store_target) as elsewhere:
        request_cancel(elsewhere, "late-1", reason="the customer cancelled", sender="cli")
    runtime.signal("late-1", "approve", {"by": "ops"})
    result = runtime.handle("late-1").result(30)
    assert result.status is ExecutionStatus.CANCELLED
    assert result.error.message.startswith("the customer cancelled")
    assert [e["effect"] for e in read_ledger(tmp_path / "ledger.jsonl")] == []
    assert "@effect" not in [b.barrier for b in runtime.store.barrier_log("late-1")]


def test_an_announced_transition_effect_is_started_again_from_its_transition(
    tmp_path, store_target, open_runtime
):
    # kills engine.py `Engine.announce` not recording the transition's row
    # (`session.node.offload is not spec` flipped): the process dies right after the
    # @effect commit that announced `ship`, an offload of the `approve` transition; the
    # recovery must start that transition's work again (the state has none of its own)
    kill_at(tmp_path, "barrier:@effect:after", app=TRANSITION_APP, db=store_target)
    assert read_ledger(tmp_path / "ledger.jsonl") == []
    announced = open_store(store_target, read_only=True)
    try:
        record = announced.load_record("tr-1")
    finally:
        announced.close()
    assert record.announced is not None and record.announced.effect == "ship"
    app = create_transition_app(str(tmp_path / "store.db"))
    runtime, _events = open_runtime(list(app.machines))
    runtime.recover()
    result = runtime.handle("tr-1").result(30)
    assert result.status is ExecutionStatus.COMPLETED and result.state == "shipped"
    [shipped] = read_ledger(tmp_path / "ledger.jsonl")
    assert shipped["effect"] == "ship" and shipped["key"] == record.announced.key


def test_a_barrier_lists_the_effects_it_announces_and_no_pure_offload(tmp_path, open_runtime):
    # kills machines.py `MachineFacts._announced_from` counting a transition's pure
    # offload as an effect (`t.offload is not None and self.is_effect(t.offload)` →
    # `t.offload is not None`): the `announce` barrier's record lists `ship` (the
    # idempotent offload of `approve`) and not `quote` (the pure one of `price`)
    app = create_transition_app(str(tmp_path / "store.db"))
    runtime, events = open_runtime(list(app.machines))
    runtime.start("transition_effect", {"order": "tr-1"}, execution_id="tr-1")
    committed = events.wait_for(
        lambda e: e.kind is DurableEventKind.COMMITTED and e.detail.get("barrier") == "announce"
    )
    assert committed.record is not None
    assert committed.record.pending_effects == ("ship",)
    events.wait_for(lambda e: e.kind is DurableEventKind.WAITING and e.execution_id == "tr-1")
    runtime.signal("tr-1", "price", None)
    runtime.signal("tr-1", "approve", {"by": "ops"})
    result = runtime.handle("tr-1").result(30)
    assert result.state == "shipped"
    assert [e["effect"] for e in read_ledger(tmp_path / "ledger.jsonl")] == ["ship"]


def test_an_operators_answer_that_ends_an_execution_is_journaled_by_the_records_hook(
    tmp_path, store_target, open_runtime
):
    # kills engine.py `Engine.engine_commit` not asking the records hook for an
    # `@resolution` commit that ends the execution (`barrier == "@resolution"` flipped):
    # an execution of a spec no worker runs any more is parked `spec_changed`, and the
    # operator's `failed` ends it through @resolution — the hook journals that end, and
    # the error is the operator's text (engine.py `apply_resolution`, `payload.get("error")
    # or info.reason`)
    def records(ctx, commit, state):
        return BarrierRecords(journal=(JournalEntry(commit, {"order": ctx.order_id}),))

    v1 = order_machine(tmp_path / "ledger.jsonl")
    sha = hashlib.sha256(b"order_flow version 2").hexdigest()
    v2 = attrs.evolve(v1, table=v1.table._replace(version=2, spec_sha256=sha), records=records)
    with open_store(store_target) as store:
        submit_execution(store, v1, Order("o-1", 100), execution_id="o-1")
    runtime, events = open_runtime([v2])
    runtime.recover(park_other_specs=True)
    events.wait_for(lambda e: e.kind is DurableEventKind.RECOVERY_REQUIRED)
    parked = runtime.handle("o-1").record()
    assert parked.recovery is not None and parked.recovery.subject is None
    runtime.resolve("o-1", expected_revision=parked.revision, outcome="failed", error="retired")
    result = runtime.handle("o-1").result(30)
    assert result.status is ExecutionStatus.FAILED
    assert (result.error.type, result.error.message) == ("ResolvedFailed", "retired")
    journal = runtime.store.journal_entries("o-1")
    assert [(e.kind, e.data) for e in journal] == [("@resolution", {"order": "o-1"})]
    assert journal[0].revision == runtime.store.load_record("o-1").revision


def test_an_event_that_is_not_a_non_empty_string_is_refused_as_a_bad_event(tmp_path, open_runtime):
    # kills operations.py `send_signal` dropping either half of `not isinstance(event,
    # str) or not event`: an empty or non-string event name is refused as `bad_event`
    # before the machine's events are looked at (a store whose machine no runtime
    # registered has none to look at)
    runtime, events = open_runtime([order_machine(tmp_path / "ledger.jsonl")])
    runtime.start("order_flow", Order("o", 1), execution_id="o")
    events.wait_for(lambda e: e.kind is DurableEventKind.WAITING)
    with pytest.raises(SignalRefusedError, match="non-empty string") as refused:
        runtime.signal("o", "", {})
    assert refused.value.reason == "bad_event"
    with pytest.raises(SignalRefusedError, match="non-empty string") as refused:
        runtime.signal("o", 5, {})  # type: ignore[arg-type]
    assert refused.value.reason == "bad_event"
    assert runtime.store.list_signals("o") == []


def test_a_commit_carries_revision_0_when_it_creates_and_one_more_when_it_updates(
    tmp_path, open_runtime
):
    # kills records.py `DurableCommit.__attrs_post_init__` accepting a creating commit
    # (no expected revision) of a record at another revision, or an update that does
    # not rise by exactly one (the store would write a revision with a gap below it), or
    # a child that is not new or not under the committing parent
    runtime, events = open_runtime([order_machine(tmp_path / "ledger.jsonl")])
    runtime.start("order_flow", Order("o", 1), execution_id="o")
    events.wait_for(lambda e: e.kind is DurableEventKind.WAITING)
    stored = runtime.store.load_record("o")
    assert stored.revision > 0
    with pytest.raises(ValueError, match="a creating commit must carry revision 0"):
        DurableCommit("@start", attrs.evolve(stored, execution_id="o-2"), None)
    DurableCommit("@start", attrs.evolve(stored, execution_id="o-2", revision=0), None)
    for revision in (stored.revision, stored.revision + 2):
        with pytest.raises(ValueError, match="revision must rise by exactly one"):
            DurableCommit("@wait", attrs.evolve(stored, revision=revision), stored.revision)
    DurableCommit("@wait", attrs.evolve(stored, revision=stored.revision + 1), stored.revision)
    # a child created with the commit: at revision 0, under this parent
    nxt = attrs.evolve(stored, revision=stored.revision + 1)
    child = attrs.evolve(stored, execution_id="o-c", revision=0, parent_execution_id="o")
    for wrong in (attrs.evolve(child, revision=1), attrs.evolve(child, parent_execution_id="x")):
        with pytest.raises(ValueError, match="must be at revision 0 under its parent"):
            DurableCommit("spawn", nxt, stored.revision, children=(wrong,))
    DurableCommit("spawn", nxt, stored.revision, children=(child,))


def test_a_stored_table_whose_offload_names_no_effect_kind_runs_it_at_most_once() -> None:
    # kills machines.py `effect_kind` dropping `or _DEFAULT_EFFECT.value`: a machine's
    # table read back from the store with `"effect": null` (or missing) on an offload
    # is the safe default, at_most_once — never an error, never pure
    data = table_to_json(TABLE)
    for state in data["states"]:
        if state.get("offload"):
            state["offload"]["effect"] = None
    facts = MachineFacts(table_from_json(data))
    emailing = facts.effect_of("emailing")  # declared idempotent in the spec
    assert emailing is not None and emailing.effect is None
    assert effect_kind(emailing) is EffectKind.AT_MOST_ONCE
    assert facts.is_effect(emailing)
    del data["states"][4]["offload"]["effect"]  # missing: the field's default
    assert effect_kind(table_from_json(data).states[4].offload) is EffectKind.AT_MOST_ONCE


def test_an_execution_left_for_another_spec_is_not_also_reported_owned_elsewhere(
    tmp_path, store_target, open_runtime
):
    # kills runtime.py `recover` dropping `or row["execution_id"] in skip`: an execution
    # of a newer spec that names an owner with no live lease is reported once, as left
    # for a worker of its spec, not also as owned by another worker
    v1 = order_machine(tmp_path / "ledger.jsonl")
    sha = hashlib.sha256(b"order_flow version 2").hexdigest()
    v2 = attrs.evolve(v1, table=v1.table._replace(version=2, spec_sha256=sha))
    with open_store(store_target) as store:
        submit_execution(store, v2, Order("o-new", 100), execution_id="o-new")
        now = datetime.now(UTC)
        gone = WorkerRecord("gone", "elsewhere.invalid", 1, "gone", now, now, now)
        store.register_worker(gone, lease_seconds=60)
        assert store.claim_execution("o-new", "gone") is not None
        store.retire_worker("gone")  # its lease has ended; the store still names it
        assert store.execution_owner("o-new")[0] == "gone"
    runtime, _events = open_runtime([v1])
    report = runtime.recover()
    assert [e.execution_id for e in report.other_spec] == ["o-new"]
    assert report.owned_elsewhere == ()
    assert report.claimed == ()


def test_a_wait_ended_by_its_timer_is_reported_resumed_by_the_timer(tmp_path, open_runtime):
    # kills engine.py `fire_timer` not emitting RESUMED: a listener sees the wait
    # resumed by its timeout event, marked as the timer's, as it sees a signal's
    clock = ManualClock()
    runtime, events = open_runtime([order_machine(tmp_path / "ledger.jsonl")], clock=clock)
    runtime.start("order_flow", Order("o", 1), execution_id="o")
    events.wait_for(lambda e: e.kind is DurableEventKind.WAITING)
    clock.advance(86_401)  # past the wait's day
    resumed = events.wait_for(lambda e: e.kind is DurableEventKind.RESUMED)
    assert dict(resumed.detail) == {"event": "approval_expired", "timer": True}
    result = runtime.handle("o").result(30)
    assert (result.status, result.state) == (ExecutionStatus.FAILED, "rejected")


def test_a_closed_worker_ends_its_lease_so_another_claims_its_executions_at_once(
    tmp_path, store_target, open_runtime
):
    # kills worker.py `Worker.close` not closing its runtime: the lease would run on (a
    # heartbeat thread keeps renewing it) and its executions stay owned by a worker
    # that has stopped
    machine = order_machine(tmp_path / "ledger.jsonl")
    store = open_store(store_target)
    try:
        worker = Worker(store, DurableApp(machines=(machine,)), scan_seconds=0.1)
        worker.start()
        worker.runtime.start("order_flow", Order("o", 1), execution_id="o")
        wait_until(lambda: store.load_record("o").status is ExecutionStatus.WAITING, 30, "o waits")
        worker.close(timeout_seconds=5)
        runtime, _events = open_runtime([machine])
        report = runtime.recover()
        assert report.claimed == (("o", "waiting"),)
        assert report.owned_elsewhere == ()
    finally:
        store.close()


def test_a_commit_under_another_machines_name_is_a_conflict_that_names_both(tmp_path, open_runtime):
    # kills store/refusals.py `update_refusal` not telling a machine mismatch, a finished
    # execution or a stale revision apart: the store's compare-and-set matches all
    # three, and its refusal says which failed (not "the lease has expired", which is
    # not so)
    runtime, events = open_runtime([order_machine(tmp_path / "ledger.jsonl")])
    runtime.start("order_flow", Order("o", 1), execution_id="o")
    events.wait_for(lambda e: e.kind is DurableEventKind.WAITING)
    store = runtime.store
    stored = store.load_record("o")
    owner, token, _ = store.execution_owner("o")
    wrong = attrs.evolve(stored, machine="another_machine", revision=stored.revision + 1)
    with pytest.raises(ConflictError, match="runs machine order_flow, not another_machine"):
        store.commit(DurableCommit("@wait", wrong, stored.revision, Fence(owner, token)))
    # a stale expected revision, then a finished execution: each refusal says so
    stale = attrs.evolve(stored, revision=stored.revision)
    with pytest.raises(ConflictError, match=f"is at revision {stored.revision}, not the"):
        store.commit(DurableCommit("@wait", stale, stored.revision - 1, Fence(owner, token)))
    assert store.load_record("o").revision == stored.revision
    runtime.signal("o", "reject", {"by": "a person"})
    final = runtime.handle("o").result(30)
    late = attrs.evolve(stored, revision=final.revision + 1)
    with pytest.raises(ExecutionFinishedError, match="has finished"):
        store.commit(DurableCommit("@wait", late, final.revision, Fence(owner, token)))


def test_an_owners_write_under_a_stale_token_or_for_no_execution_is_refused_so(
    tmp_path, open_runtime
):
    # kills store/refusals.py `fence_refusal` flipping `token != fence.token` and
    # `inbox_write_refusal` not telling a missing execution: a worker's copy under an
    # older fencing token of its own execution must drop it (not wait for its lease),
    # and closing signals of an execution that does not exist is NotFoundError
    runtime, events = open_runtime([order_machine(tmp_path / "ledger.jsonl")])
    runtime.start("order_flow", Order("o", 1), execution_id="o")
    events.wait_for(lambda e: e.kind is DurableEventKind.WAITING)
    store = runtime.store
    stored = store.load_record("o")
    owner, token, _ = store.execution_owner("o")
    older = Fence(owner, token - 1)
    nxt = attrs.evolve(stored, revision=stored.revision + 1)
    with pytest.raises(LeaseLostError, match="this worker must drop it"):
        store.commit(DurableCommit("@wait", nxt, stored.revision, older))
    with pytest.raises(LeaseLostError, match="this worker must drop it"):
        store.close_signals("o", [1], "dropped: test", fence=older)
    with pytest.raises(NotFoundError, match="nobody does not exist; nothing was written"):
        store.close_signals("nobody", [1], "dropped: test", fence=Fence(owner, token))
    assert store.load_record("o").revision == stored.revision
