"""The ``schedules`` table on both stores (``docs/store.md``, "Schema";
``docs/operations.md``, "Schedules"): one claim at a time, taken over only once it
lapses on the store's clock; the tick recorded by a compare-and-set that a worker
whose claim was taken over cannot win; pause and resume; and the migration that adds
the table to a store of the previous version, keeping what it holds."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg
import pytest
import sqlite_utils

from phronomy_fsm.durable.schedules import ScheduleTick, new_schedule
from phronomy_fsm.errors import NotFoundError
from phronomy_fsm.testing.deadlines import wait_until

from .conftest import commit, create


def due_schedule(store: Any, name: str = "s") -> Any:
    now = store.store_time()
    schedule = new_schedule(
        name, "m", "* * * * * *", overlap="allow", context={"a": 1}, now=now - timedelta(seconds=3)
    )
    assert store.add_schedule(schedule) and not store.add_schedule(schedule)
    return schedule


def test_one_claim_at_a_time_and_the_tick_is_a_compare_and_set(store: Any) -> None:
    schedule = due_schedule(store)
    first = store.claim_schedule("s", "w1", 0.3)
    assert first is not None and first.claim_owner == "w1"
    assert first.next_slot_at == schedule.next_slot_at
    assert store.claim_schedule("s", "w2", 30) is None  # w1's claim holds
    # once it lapses on the store's clock, w2 takes the row over
    second = wait_until(lambda: store.claim_schedule("s", "w2", 30), 10, "w1's claim lapses")
    assert second.claim_owner == "w2"
    tick = ScheduleTick(
        next_slot_at=schedule.next_slot_at + timedelta(seconds=4),
        buffered_slot_at=None,
        last_execution_id="sched:s:x",
        started=2,
        missed=1,
    )
    # w1 comes back: its tick is refused (not its claim)
    assert not store.advance_schedule("s", "w1", schedule.next_slot_at, tick)
    # an operator's resume moved the next slot meanwhile: w2's tick, computed from
    # the slot it read, is refused too; from the new one it lands, once
    moved = schedule.next_slot_at + timedelta(seconds=1)
    assert store.set_schedule_paused("s", False, moved)
    assert not store.advance_schedule("s", "w2", schedule.next_slot_at, tick)
    assert store.advance_schedule("s", "w2", moved, tick)
    assert not store.advance_schedule("s", "w2", moved, tick)
    store.count_schedule_starts("s", 0, 2)  # what w1 found already started
    after = store.load_schedule("s")
    assert (after.started, after.missed, after.duplicates) == (2, 1, 2)
    assert after.claim_owner is None and after.last_execution_id == "sched:s:x"
    assert after.next_slot_at == tick.next_slot_at


def test_pause_resume_remove_and_list_by_machine(store: Any) -> None:
    schedule = due_schedule(store, "a")
    due_schedule(store, "b")
    assert store.set_schedule_paused("a", True, schedule.next_slot_at)
    assert store.claim_schedule("a", "w", 30) is None  # a paused schedule is never claimed
    later = schedule.next_slot_at + timedelta(hours=1)
    assert store.set_schedule_paused("a", False, later)
    resumed = store.load_schedule("a")
    assert not resumed.paused and resumed.next_slot_at == later
    assert store.claim_schedule("a", "w", 30) is None  # its next slot is not due yet
    assert [s.name for s in store.list_schedules(("m",))] == ["a", "b"]
    assert store.list_schedules(("other",)) == []
    assert store.remove_schedule("b") and not store.remove_schedule("b")
    with pytest.raises(NotFoundError):
        store.load_schedule("b")
    assert not store.set_schedule_paused("b", True, later)


def test_a_store_of_the_previous_version_gets_the_table_and_keeps_its_executions(
    store_opener: Any,
) -> None:
    store = store_opener()
    commit(store, create("kept"))
    target = getattr(store, "dsn", store.path)  # PostgreSQL: the DSN (path hides it)
    store.close()
    if hasattr(store, "dsn"):
        with psycopg.connect(target, autocommit=True) as conn:
            conn.execute("DROP TABLE schedules")
            conn.execute("DELETE FROM phronomy_migrations WHERE name = '0004_schedules'")
            conn.execute("UPDATE phronomy_meta SET value = '3' WHERE key = 'schema_version'")
    else:
        db = sqlite_utils.Database(target)
        db.execute("DROP TABLE schedules")
        db.execute("DELETE FROM _sqlite_migrations WHERE name = '0006_schedules'")
        db.execute("UPDATE meta SET value = '5' WHERE key = 'schema_version'")
        db.conn.commit()
        db.close()
    reopened = store_opener()
    assert reopened.load_record("kept").revision == 0
    assert reopened.list_schedules() == []
    due_schedule(reopened)
    assert reopened.load_schedule("s").context == '{"a":1}'
