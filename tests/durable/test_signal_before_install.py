"""A signal sent as soon as a start is durable, before this runtime has installed the
new execution, is applied (issue 22; docs/semantics.md "Signals").

The watcher may read such a signal and move its cursor past it before the install: the
runtime used to drop it (no live execution yet), so it stayed pending while the
execution waited, or finished, without it. The interleaving checker found it
(``signal:EVENT=barrier:@start:after``).
"""

from __future__ import annotations

import threading
from pathlib import Path

from phronomy_fsm.durable import DurableRuntime, ExecutionStatus, Machine
from phronomy_fsm.durable.operations import send_signal
from phronomy_fsm.runtime.faults import FaultPlan
from phronomy_fsm.store import SqliteBarrierStore
from phronomy_fsm.testing.deadlines import scaled_seconds, wait_until
from tests.runtime.conftest import compile_table

GATE = """
spec_format: 1
machine: gate
version: 1
events:
  open: {}
states:
  start: {kind: auto, initial: true}
  waiting: {kind: wait}
  opened: {kind: final}
transitions:
  - {from: start, event: state_completed, to: waiting}
  - {from: waiting, event: open, to: opened}
"""


def test_a_signal_the_watcher_reads_before_the_install_is_applied(tmp_path: Path) -> None:
    db = tmp_path / "gate.db"
    sender = SqliteBarrierStore(db)  # another handle: no in-process wake-up
    runtime: DurableRuntime | None = None
    sent = threading.Event()

    def at_point(point: str) -> None:
        # on the store's writer thread, after the start's commit, before the install
        if point != "barrier:@start:after" or runtime is None:
            return
        send_signal(sender, "g-1", "open", signal_id="early-open")
        cursor = runtime.watcher.cursor
        runtime.watcher.wake.set()
        # the watcher reads it (and queues its delivery on the loop) before the install
        wait_until(lambda: runtime.watcher.cursor != cursor, 10, "the watcher's poll")
        sent.set()

    runtime = DurableRuntime(
        SqliteBarrierStore(db),
        machines=[Machine(compile_table(GATE), object())],
        faults=FaultPlan(None, trace=at_point),
        poll_seconds=0.05,
        own_store=True,
    )
    try:
        with runtime:
            handle = runtime.start("gate", {}, execution_id="g-1")
            assert sent.wait(scaled_seconds(10))
            result = handle.result(scaled_seconds(20))
            assert result.status is ExecutionStatus.COMPLETED
            assert result.state == "opened"
        reader = SqliteBarrierStore(db)
        try:
            (signal,) = reader.list_signals("g-1")
            assert signal.signal_id == "early-open"
            assert signal.consumed_revision is not None
        finally:
            reader.close()
    finally:
        sender.close()
