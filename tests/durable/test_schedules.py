"""Schedules, tick by tick on a SQLite store with a clock the test moves
(``docs/operations.md``, "Schedules"): the overlap policies, the catch-up window after
downtime (no storm), a start of a slot another worker made first refused by the
execution id and counted, validation that names every bad field, and a runtime that
runs the schedules of its machines by itself. The races between worker processes, on
SQLite and PostgreSQL, are ``tests/integration/test_schedule_workers.py``."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from phronomy_fsm.durable.runtime import DurableRuntime
from phronomy_fsm.durable.schedules import (
    MAX_SLOTS_PER_TICK,
    ScheduleRunner,
    due_slots,
    execution_id_for,
    new_schedule,
)
from phronomy_fsm.errors import ScheduleError
from phronomy_fsm.operator.schedules import add_schedule, pause_schedule, resume_schedule
from phronomy_fsm.store.sqlite import SqliteBarrierStore
from phronomy_fsm.testing.deadlines import wait_until

from .order_app import order_machine

T0 = datetime(2026, 1, 1, 0, 0, 0, 500_000, tzinfo=UTC)
ORDER = {"order_id": "scheduled", "amount_cents": 700}


class MovableClock:
    """The store's clock: ``now`` until the test moves it."""

    def __init__(self, now: datetime) -> None:
        self.now = now
        self.lock = threading.Lock()

    def __call__(self) -> datetime:
        with self.lock:
            return self.now

    def at(self, seconds: float) -> None:
        with self.lock:
            self.now = T0 + timedelta(seconds=seconds)


def slot(seconds: int) -> datetime:
    return datetime(2026, 1, 1, 0, 0, seconds, tzinfo=UTC)


@pytest.fixture
def rig(tmp_path: Path) -> Any:
    clock = MovableClock(T0)
    store = SqliteBarrierStore(tmp_path / "s.db", clock=clock)
    machine = order_machine(tmp_path / "ledger.jsonl")
    runtime = DurableRuntime(store, machines=[machine], lease_seconds=4 * 3600)

    def start(machine: Any, context: Any, eid: str, labels: dict[str, Any]) -> bool:
        return runtime.start(machine.name, context, execution_id=eid, labels=labels).created

    def runner(name: str = "w1", **options: Any) -> ScheduleRunner:
        return ScheduleRunner(
            store, lambda: {machine.name: machine}, name, starter=start, **options
        )

    class Rig:
        pass

    r = Rig()
    r.clock, r.store, r.runtime, r.runner = clock, store, runtime, runner
    yield r
    runtime.close(timeout_seconds=5)
    store.close()


def ids_of(store: Any, name: str) -> list[str]:
    return sorted(r.execution_id for r in store.list_records() if r.labels.get("schedule") == name)


def reject(rig: Any, eid: str) -> None:
    wait_until(lambda: rig.store.load_record(eid).status.value == "waiting", 20, f"{eid} waits")
    rig.runtime.signal(eid, "reject", {"by": "test"})
    wait_until(lambda: not rig.store.load_record(eid).is_active, 20, f"{eid} ends")


def test_overlap_policies_skip_allow_and_buffer_one(rig: Any) -> None:
    for policy in ("skip", "allow", "buffer_one"):
        add_schedule(rig.store, policy, "order_flow", "* * * * * *", overlap=policy, context=ORDER)
    runner = rig.runner()
    for at in (1.0, 2.0, 3.0):  # 00:00:01.5, :02.5, :03.5; each execution waits
        rig.clock.at(at)
        runner.tick()
    assert ids_of(rig.store, "allow") == [execution_id_for("allow", slot(s)) for s in (1, 2, 3)]
    assert ids_of(rig.store, "skip") == [execution_id_for("skip", slot(1))]
    assert ids_of(rig.store, "buffer_one") == [execution_id_for("buffer_one", slot(1))]
    buffered = rig.store.load_schedule("buffer_one")
    assert buffered.buffered_slot_at == slot(2) and buffered.skipped == 1  # slot 3
    assert rig.store.load_schedule("skip").skipped == 2
    # the first executions end: the buffered slot starts at once, skip waits for a slot
    reject(rig, execution_id_for("skip", slot(1)))
    reject(rig, execution_id_for("buffer_one", slot(1)))
    rig.clock.at(3.2)
    runner.tick()
    assert ids_of(rig.store, "buffer_one") == [
        execution_id_for("buffer_one", slot(s)) for s in (1, 2)
    ]
    assert rig.store.load_schedule("buffer_one").buffered_slot_at is None
    assert ids_of(rig.store, "skip") == [execution_id_for("skip", slot(1))]
    rig.clock.at(4.0)
    runner.tick()
    assert ids_of(rig.store, "skip") == [execution_id_for("skip", slot(s)) for s in (1, 4)]
    # the slot's execution carries the schedule's context and its slot
    record = rig.store.load_record(execution_id_for("skip", slot(4)))
    assert record.labels == {"schedule": "skip", "slot": "2026-01-01T00:00:04+00:00"}
    assert record.context["order_id"] == "scheduled" and record.context["amount_cents"] == 700


def test_catch_up_after_downtime_starts_the_newest_slot_or_the_window_never_a_storm(
    rig: Any,
) -> None:
    add_schedule(rig.store, "latest", "order_flow", "* * * * * *", overlap="allow", context=ORDER)
    add_schedule(
        rig.store,
        "window",
        "order_flow",
        "* * * * * *",
        overlap="allow",
        catchup_seconds=3,
        context=ORDER,
    )
    runner = rig.runner()
    rig.clock.at(1.0)
    runner.tick()
    rig.clock.at(10.0)  # no worker ran from 00:00:02 to 00:00:10
    runner.tick()
    assert ids_of(rig.store, "latest") == [execution_id_for("latest", slot(s)) for s in (1, 10)]
    assert rig.store.load_schedule("latest").missed == 8
    assert ids_of(rig.store, "window") == [
        execution_id_for("window", slot(s)) for s in (1, 8, 9, 10)
    ]
    assert rig.store.load_schedule("window").missed == 6
    rig.clock.at(2 * 3600 + 10.0)  # two hours down: still one start, three with the window
    runner.tick()
    assert len(ids_of(rig.store, "latest")) == 3
    assert ids_of(rig.store, "window")[4:] == [
        execution_id_for("window", slot(s) + timedelta(hours=2)) for s in (8, 9, 10)
    ]
    assert rig.store.load_schedule("latest").next_slot_at == slot(11) + timedelta(hours=2)


def test_a_slot_started_by_another_worker_is_refused_by_its_id_and_counted(rig: Any) -> None:
    add_schedule(
        rig.store,
        "race",
        "order_flow",
        "* * * * * *",
        overlap="allow",
        catchup_seconds=60,
        context=ORDER,
    )
    rig.clock.at(1.0)
    slow = rig.runner("slow")
    claimed = rig.store.claim_schedule("race", "slow", 0.5)
    assert claimed is not None and rig.store.claim_schedule("race", "fast", 0.5) is None
    rig.clock.at(2.0)  # the slow worker's claim lapsed before it started anything
    assert rig.runner("fast").tick() == [execution_id_for("race", slot(s)) for s in (1, 2)]
    assert slow._run(claimed, rig.runtime.registration("order_flow").machine) == []
    record = rig.store.load_schedule("race")
    assert (record.started, record.duplicates) == (2, 2)
    assert record.next_slot_at == slot(3) and record.claim_owner is None
    assert ids_of(rig.store, "race") == [execution_id_for("race", slot(s)) for s in (1, 2)]


def test_pause_starts_nothing_and_resume_starts_from_the_next_slot(rig: Any) -> None:
    add_schedule(rig.store, "p", "order_flow", "* * * * * *", overlap="allow", context=ORDER)
    runner = rig.runner()
    rig.clock.at(1.0)
    runner.tick()
    pause_schedule(rig.store, "p")
    rig.clock.at(5.0)
    assert runner.tick() == []
    resumed = resume_schedule(rig.store, "p")
    assert not resumed.paused and resumed.next_slot_at == slot(6)
    rig.clock.at(6.0)
    assert runner.tick() == [execution_id_for("p", slot(6))]
    assert rig.store.load_schedule("p").missed == 0  # paused slots are not missed ones


def test_a_context_that_does_not_fit_the_machine_skips_the_slot_and_goes_on(rig: Any) -> None:
    add_schedule(rig.store, "unfit", "order_flow", "* * * * * *", context={"order_id": "o"})
    runner = rig.runner()
    rig.clock.at(1.0)
    assert runner.tick() == []  # amount_cents is missing: nothing started, no error
    record = rig.store.load_schedule("unfit")
    assert (record.skipped, record.started, record.claim_owner) == (1, 0, None)
    assert record.next_slot_at == slot(2) and ids_of(rig.store, "unfit") == []


def test_bad_fields_are_all_named_and_nothing_is_stored(rig: Any) -> None:
    with pytest.raises(ScheduleError) as info:
        add_schedule(
            rig.store,
            "bad name",
            "order_flow",
            "61 * * * *",
            timezone="Mars/Olympus",
            overlap="sometimes",
            catchup_seconds=-1,
            context=[1],
        )
    problems = info.value.problems
    assert [p.split(" ")[0] for p in problems] == [
        "name",
        "cron",
        "timezone",
        "overlap",
        "catchup_seconds",
        "context:",
    ]
    assert rig.store.list_schedules() == []
    add_schedule(rig.store, "once", "order_flow", "0 9 * * *", context=ORDER)
    with pytest.raises(ScheduleError, match="exists already"):
        add_schedule(rig.store, "once", "order_flow", "0 10 * * *", context=ORDER)
    assert rig.store.load_schedule("once").cron == "0 9 * * *"


def test_slots_follow_the_time_zone_across_daylight_saving() -> None:
    # 09:00 in Paris is 08:00 UTC in winter and 07:00 UTC in summer
    record = new_schedule(
        "paris",
        "m",
        "0 9 * * *",
        timezone="Europe/Paris",
        now=datetime(2026, 3, 28, 12, tzinfo=UTC),
    )
    assert record.next_slot_at == datetime(2026, 3, 29, 7, tzinfo=UTC)
    slots, missed, following = due_slots(record, datetime(2026, 3, 31, 8, tzinfo=UTC))
    assert slots == [datetime(2026, 3, 31, 7, tzinfo=UTC)] and missed == 2
    assert following == datetime(2026, 4, 1, 7, tzinfo=UTC)


def test_a_long_window_is_cut_to_its_newest_slots_without_stepping_through_the_rest() -> None:
    record = new_schedule(
        "s", "m", "* * * * * *", catchup_seconds=86_400, now=T0 - timedelta(hours=30)
    )
    slots, missed, following = due_slots(record, T0)
    assert len(slots) == MAX_SLOTS_PER_TICK and slots[-1] == T0 - timedelta(microseconds=500_000)
    assert slots[0] == slots[-1] - timedelta(seconds=MAX_SLOTS_PER_TICK - 1)
    assert missed == MAX_SLOTS_PER_TICK  # counted up to the cap
    assert following == slots[-1] + timedelta(seconds=1)


def test_a_runtime_running_an_app_runs_the_due_schedules_itself(tmp_path: Path) -> None:
    store = SqliteBarrierStore(tmp_path / "r.db")
    machine = order_machine(tmp_path / "ledger.jsonl")
    runtime = DurableRuntime(store, machines=[machine])
    try:
        add_schedule(store, "here", "order_flow", "* * * * * *", overlap="allow", context=ORDER)
        runner = runtime.run_schedules(poll_seconds=0.2)
        started = wait_until(
            lambda: ids_of(store, "here")[:2] if len(ids_of(store, "here")) >= 2 else None,
            20,
            "two slots",
        )
        owners = store.execution_fences(started)
        # each runs in this runtime (its owner), waiting for approval
        assert {owner for owner, _f, _a in owners.values()} == {runtime.worker_id}
        # counted once start() returned, a moment after the store shows the execution
        wait_until(lambda: runner.started_total >= 2, 10, "two starts counted")
    finally:
        runtime.close(timeout_seconds=5)
        store.close()
