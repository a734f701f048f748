"""One clock: deadlines are measured on the store's clock, whatever the clock of the
host that wrote them (issue 22 "Time on one clock"; docs/semantics.md "One clock").

A worker whose host clock ran an hour behind wrote a wait's deadline an hour early; the
worker that took the execution over then fired its timer at once. The runtime's default
clock is now this host's clock moved onto the store's (``StoreClock``), so a deadline is
the store's time plus the timeout, and a timer fires no earlier than it — on SQLite and
on PostgreSQL (whose server clock leases and signals already used).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from phronomy_fsm.durable import DurableRuntime, ExecutionStatus, Machine
from phronomy_fsm.runtime.clock import SYSTEM_CLOCK, ManualClock, StoreClock
from phronomy_fsm.store.open import open_store
from phronomy_fsm.testing.deadlines import scaled_seconds, wait_until
from tests.runtime.conftest import compile_table

TIMEOUT_SECONDS = 3

REMINDER = f"""
machine: reminder
version: 1
events:
  expired: {{}}
  answer: {{}}
states:
  start: {{kind: auto, initial: true}}
  waiting: {{kind: wait, timeout: {{seconds: {TIMEOUT_SECONDS}, event: expired}}}}
  answered: {{kind: final}}
  timed_out: {{kind: final}}
transitions:
  - {{from: start, event: state_completed, to: waiting}}
  - {{from: waiting, event: answer, to: answered}}
  - {{from: waiting, event: expired, to: timed_out}}
"""


class Behind:
    """This host's clock, an hour behind (a host whose clock drifted)."""

    def monotonic(self) -> float:
        return SYSTEM_CLOCK.monotonic()

    def now(self) -> datetime:
        return SYSTEM_CLOCK.now() - timedelta(hours=1)

    def on_advance(self, callback: Any) -> None:
        pass


def test_the_store_clock_reads_the_stores_time_on_a_host_clock_that_is_off(store_target: str):
    store = open_store(store_target)
    try:
        local = ManualClock(start_wall=datetime(2020, 1, 1, tzinfo=SYSTEM_CLOCK.now().tzinfo))
        clock = StoreClock(store, local=local)
        assert abs((clock.now() - store.store_time()).total_seconds()) < 2
        local.advance(10)  # the host's clock moves: so does the store clock's reading
        assert abs((clock.now() - store.store_time()).total_seconds() - 10) < 2
        clock.align()
        assert abs((clock.now() - store.store_time()).total_seconds()) < 2
    finally:
        store.close()


def test_a_deadline_written_by_a_host_an_hour_behind_fires_on_time_after_a_takeover(
    store_target: str, tmp_path: Path
):
    machine = Machine(compile_table(REMINDER), object())
    store = open_store(store_target)
    # with Behind() itself as its clock (what the host clock was before), the deadline
    # below was written 3,597 s before the store's time
    behind = DurableRuntime(
        store, machines=[machine], clock=StoreClock(store, local=Behind()), own_store=True
    )
    with behind:
        handle = behind.start("reminder", {}, execution_id="r-1")
        wait_until(lambda: handle.record().status is ExecutionStatus.WAITING, 10, "the wait")
        record = behind.store.load_record("r-1")
        at_store = behind.store.store_time()
    written = (record.deadline_at - at_store).total_seconds()
    assert 0 < written <= TIMEOUT_SECONDS  # not an hour early
    # closed: another worker, on this host's true clock (the default), takes it over
    with DurableRuntime(open_store(store_target), machines=[machine], own_store=True) as taker:
        assert isinstance(taker.clock, StoreClock)
        taker.recover()
        result = taker.handle("r-1").result(scaled_seconds(30))
        assert (result.status, result.state) == (ExecutionStatus.COMPLETED, "timed_out")
        final = taker.store.load_record("r-1")
    assert final.updated_at >= record.deadline_at  # the timer fired no earlier than it
