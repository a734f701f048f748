"""An internal transition (a row with no target) on a wait state is applied once and
committed, and the execution goes on taking signals — live and after a restart (issue
22 item 11: the execution wedged, nothing committed, every later signal pending for
ever, also after a restart; docs/runtime.md "Sessions")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from phronomy_fsm.durable import DurableRuntime, ExecutionStatus, Machine
from phronomy_fsm.store import SqliteBarrierStore
from phronomy_fsm.testing.deadlines import wait_until
from tests.runtime.conftest import compile_table

TALLY = """
machine: tally
version: 1
events:
  add: {}
  finish: {}
states:
  start: {kind: auto, initial: true}
  counting: {kind: wait}
  done: {kind: final}
transitions:
  - {from: start, event: state_completed, to: counting}
  - {from: counting, event: add, actions: [add_one]}
  - {from: counting, event: finish, to: done}
"""


class Hooks:
    def add_one(self, ctx: dict[str, Any], payload: Any) -> None:
        ctx["n"] += 1


def _runtime(db: Path) -> DurableRuntime:
    machine = Machine(compile_table(TALLY), Hooks())
    return DurableRuntime(SqliteBarrierStore(db), machines=[machine], own_store=True)


def test_each_signal_taken_internally_by_a_wait_state_is_committed_once(tmp_path: Path):
    db = tmp_path / "tally.db"
    with _runtime(db) as runtime:
        handle = runtime.start("tally", {"n": 0}, execution_id="t-1")
        wait_until(lambda: handle.record().status is ExecutionStatus.WAITING, 10, "the wait")
        runtime.signal("t-1", "add", {})
        runtime.signal("t-1", "add", {})
        runtime.signal("t-1", "finish", {})
        result = handle.result(30)
    assert (result.status, result.context) == (ExecutionStatus.COMPLETED, {"n": 2})
    with SqliteBarrierStore(db) as store:
        signals = [(s.event, s.consumed_revision) for s in store.list_signals("t-1")]
        log = [(b.barrier, b.state) for b in store.barrier_log("t-1")]
    assert signals == [("add", 2), ("add", 3), ("finish", 4)]
    assert log == [
        ("@start", "start"),
        ("@wait", "counting"),
        ("@wait", "counting"),
        ("@wait", "counting"),
        ("@final", "done"),
    ]


def test_signals_left_pending_by_a_closed_runtime_are_applied_after_a_restart(tmp_path: Path):
    db = tmp_path / "tally.db"
    with _runtime(db) as runtime:
        handle = runtime.start("tally", {"n": 0}, execution_id="t-1")
        wait_until(lambda: handle.record().status is ExecutionStatus.WAITING, 10, "the wait")
    with SqliteBarrierStore(db) as store:  # sent while no process runs it
        from phronomy_fsm.durable.operations import send_signal

        for event in ("add", "add", "add", "finish"):
            send_signal(store, "t-1", event, {})
    with _runtime(db) as runtime:
        runtime.recover()
        wait_until(
            lambda: runtime.store.load_record("t-1").status is ExecutionStatus.COMPLETED,
            30,
            "the execution to finish",
        )
        record = runtime.store.load_record("t-1")
    assert record.context == {"n": 3}


GUARDED = """
machine: guarded
version: 1
events:
  approve: {payload: dict}
states:
  start: {kind: auto, initial: true}
  waiting: {kind: wait}
  done: {kind: final}
transitions:
  - {from: start, event: state_completed, to: waiting}
  - {from: waiting, event: approve, guard: is_manager, to: done}
"""


class Managers:
    def is_manager(self, ctx: dict[str, Any], payload: Any) -> bool:
        return bool(payload.get("role") == "manager")


def test_a_signal_whose_guards_all_fail_in_a_wait_state_is_consumed_and_the_next_taken(
    tmp_path: Path,
):
    """From the breaker: the resumed session sat in the wait state alive, taking no
    signal and firing no timer, for ever (also after a restart)."""
    db = tmp_path / "guarded.db"
    machine = Machine(compile_table(GUARDED), Managers())
    with DurableRuntime(SqliteBarrierStore(db), machines=[machine], own_store=True) as runtime:
        handle = runtime.start("guarded", {}, execution_id="g-1")
        wait_until(lambda: handle.record().status is ExecutionStatus.WAITING, 10, "the wait")
        runtime.signal("g-1", "approve", {"role": "intern"})  # its guard fails: a no-op
        runtime.signal("g-1", "approve", {"role": "manager"})
        result = handle.result(30)
        signals = [(s.payload["role"], s.outcome) for s in runtime.store.list_signals("g-1")]
    assert (result.status, result.state) == (ExecutionStatus.COMPLETED, "done")
    assert signals == [("intern", "consumed"), ("manager", "consumed")]


REMINDED = """
machine: reminded
version: 1
events:
  note: {}
  expired: {}
  again: {}
states:
  start: {kind: auto, initial: true}
  waiting: {kind: wait, timeout: {seconds: 100, event: expired}}
  timed_out: {kind: final}
transitions:
  - {from: start, event: state_completed, to: waiting}
  - {from: waiting, event: note, actions: [take_note]}
  - {from: waiting, event: again, to: waiting}
  - {from: waiting, event: expired, to: timed_out}
"""


class Notes:
    def take_note(self, ctx: dict[str, Any], payload: Any) -> None:
        ctx["notes"] += 1


def _deadline_after(runtime: DurableRuntime, event: str, revision: int) -> Any:
    runtime.signal("r-1", event, {})
    wait_until(
        lambda: runtime.store.load_record("r-1").revision > revision, 10, f"{event} committed"
    )
    return runtime.store.load_record("r-1")


def test_a_signal_a_wait_takes_without_leaving_keeps_its_timers_deadline(tmp_path: Path):
    """An internal transition (or a signal no row takes) re-commits the wait: its timer
    still counts from entering the state, while a transition back into the state (an
    external self-loop) enters it anew and restarts it (docs/semantics.md "Timers")."""
    from datetime import timedelta

    from phronomy_fsm.runtime.clock import ManualClock

    clock = ManualClock()
    machine = Machine(compile_table(REMINDED), Notes())
    store = SqliteBarrierStore(tmp_path / "r.db")
    with DurableRuntime(store, machines=[machine], clock=clock, own_store=True) as runtime:
        handle = runtime.start("reminded", {"notes": 0}, execution_id="r-1")
        wait_until(lambda: handle.record().status is ExecutionStatus.WAITING, 10, "the wait")
        entered = runtime.store.load_record("r-1")
        assert entered.deadline_at == clock.now() + timedelta(seconds=100)
        clock.advance(60)
        noted = _deadline_after(runtime, "note", entered.revision)
        assert noted.context == {"notes": 1}
        assert noted.deadline_at == entered.deadline_at  # not pushed 60 s later
        clock.advance(30)
        again = _deadline_after(runtime, "again", noted.revision)
        assert again.deadline_at == clock.now() + timedelta(seconds=100)  # entered anew
        clock.advance(99)
        assert runtime.store.load_record("r-1").status is ExecutionStatus.WAITING
        clock.advance(2)
        result = handle.result(30)
    assert (result.status, result.state) == (ExecutionStatus.COMPLETED, "timed_out")
