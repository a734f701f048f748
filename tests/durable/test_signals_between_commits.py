"""Signals are applied only between commits: never while a barrier's commit is in
flight (issue 22 items 2 and 3; docs/semantics.md "Signals").

- A signal waiting in the inbox when a session entered a barrier state was applied
  there while the barrier's commit was being written: the commit marked it consumed
  but stored the context from before its action ran, so a crash after the commit lost
  the signal's change (applied zero times).
- A signal that arrived while the barrier's commit was in flight moved the session out
  of the barrier state before the commit's outcome: the live run took a path a replay
  from that commit never takes.

Both now wait: a barrier state takes no signal until its commit's outcome has moved
the session, and the state it moves to takes it if it handles it.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from phronomy_fsm.durable import DurableRuntime, ExecutionStatus, Machine
from phronomy_fsm.store import SqliteBarrierStore
from phronomy_fsm.testing.deadlines import scaled_seconds, wait_until
from tests.runtime.conftest import compile_table

PAY = """
spec_format: 1
machine: pay
version: 1
fail_closed: recovery_required
events:
  note: {}
  skip: {}
  prepared: {payload: dict}
  prepare_failed: {}
  charged: {payload: dict}
  charge_failed: {}
  abandon: {}
states:
  start: {kind: auto, initial: true}
  preparing:
    kind: external
    offload: {hook: prepare, completed: prepared, failed: prepare_failed, effect: pure}
  announcing:
    kind: external
    barrier: {name: announce, on_committed: charging, on_not_committed: failed}
  charging:
    kind: external
    offload: {hook: charge, completed: charged, failed: charge_failed, effect: idempotent}
  rerouting:
    kind: external
    barrier: {name: reroute, on_committed: charging, on_not_committed: failed}
  done: {kind: final}
  failed: {kind: final}
  recovery_required: {kind: wait}
transitions:
  - {from: start, event: state_completed, to: preparing}
  - {from: preparing, event: prepared, to: announcing}
  - {from: preparing, event: prepare_failed, to: failed}
  - {from: announcing, event: note, actions: [take_note]}
  - {from: announcing, event: skip, to: rerouting}
  - {from: charging, event: charged, to: done}
  - {from: charging, event: charge_failed, to: failed}
  - {from: recovery_required, event: abandon, to: failed}
"""


class Hooks:
    """``prepare`` waits for ``prepared_gate``; ``charge`` records the stored record it
    runs behind and waits for ``charge_gate``."""

    def __init__(self, store: SqliteBarrierStore) -> None:
        self.store = store
        self.prepared_gate = threading.Event()
        self.charge_gate = threading.Event()
        self.behind: list[Any] = []

    def take_note(self, ctx: dict[str, Any], payload: Any) -> None:
        ctx["notes"] += 1

    def prepare(self, ctx: dict[str, Any], payload: Any) -> Any:
        def work(octx: Any) -> dict[str, Any]:
            assert self.prepared_gate.wait(scaled_seconds(10))
            return {}

        return work

    def charge(self, ctx: dict[str, Any], payload: Any) -> Any:
        def work(octx: Any) -> dict[str, Any]:
            self.behind.append(
                (self.store.load_record("p-1"), self.store.list_signals("p-1"), octx.effect.key)
            )
            assert self.charge_gate.wait(scaled_seconds(10))
            return {"charged": True}

        return work


def _runtime(db: Path) -> tuple[DurableRuntime, Hooks, SqliteBarrierStore]:
    store = SqliteBarrierStore(db)
    hooks = Hooks(store)
    # the validator refuses PAY's rows on note and skip in announcing
    # (EVENT_IN_BARRIER_STATE); the engine must hold where it cannot see
    table = compile_table(PAY, validated=False)
    runtime = DurableRuntime(store, machines=[Machine(table, hooks)], own_store=True)
    return runtime, hooks, store


def _through_the_loop(runtime: DurableRuntime, rounds: int = 3) -> None:
    """Let the loop run what it has queued (the runtime's reaction to a signal)."""
    for _ in range(rounds):
        done = threading.Event()
        runtime.dispatcher.call_soon(done.set)
        assert done.wait(scaled_seconds(10))


def test_a_signal_waiting_when_a_barrier_state_is_entered_is_not_consumed_without_its_change(
    tmp_path: Path,
) -> None:
    runtime, hooks, _store = _runtime(tmp_path / "pay.db")
    with runtime:
        handle = runtime.start("pay", {"notes": 0}, execution_id="p-1")
        runtime.signal("p-1", "note", {})  # preparing does not take it: it waits
        _through_the_loop(runtime)
        hooks.prepared_gate.set()  # -> announcing, with the note pending
        wait_until(lambda: hooks.behind, 10, "the charge to start")
        record, signals, _ = hooks.behind[0]
        consumed_notes = sum(
            1
            for s in signals
            if s.event == "note"
            and s.consumed_revision is not None
            and s.consumed_revision <= record.revision
        )
        # whatever the stored record marks consumed, its change is in its context
        assert record.context["notes"] == consumed_notes
        hooks.charge_gate.set()
        result = handle.result(scaled_seconds(30))
    assert result.status is ExecutionStatus.COMPLETED
    assert result.context == {"notes": 0}  # announcing never took it: its commit was in flight


def test_a_signal_arriving_while_the_barrier_commits_waits_for_its_outcome(
    tmp_path: Path,
) -> None:
    runtime, hooks, store = _runtime(tmp_path / "pay.db")
    held = threading.Event()
    release = threading.Event()

    def hold_the_outcome(point: str, commits: tuple[Any, ...]) -> None:
        # after COMMIT, before its outcome is reported: the barrier is in flight
        if point == "committed" and any(c.barrier == "announce" for c in commits):
            held.set()
            assert release.wait(scaled_seconds(30))

    store.install_fault_hook(hold_the_outcome)
    moves: list[str] = []
    with runtime:
        runtime.dispatcher.add_observer(lambda step: moves.append(step.target))
        handle = runtime.start("pay", {"notes": 0}, execution_id="p-1")
        hooks.prepared_gate.set()
        assert held.wait(scaled_seconds(10))
        runtime.signal("p-1", "skip", {})
        _through_the_loop(runtime)  # the runtime has read it and decided
        release.set()
        wait_until(lambda: hooks.behind, 10, "the charge to start")
        hooks.charge_gate.set()
        result = handle.result(scaled_seconds(30))
        log = [(b.barrier, b.state) for b in store.barrier_log("p-1")]
        skip = [s for s in store.list_signals("p-1") if s.event == "skip"]
    assert result.status is ExecutionStatus.COMPLETED
    # the live run took the path a replay from the barrier's commit takes
    assert moves == ["preparing", "announcing", "charging", "done"]
    assert log == [("@start", "start"), ("announce", "announcing"), ("@final", "done")]
    # never taken (charging ignores it): closed unapplied by the commit that finished it
    assert [s.outcome for s in skip] == ["dropped: finished in done"]
    _, _, key = hooks.behind[0]
    assert key.startswith("charge-")
