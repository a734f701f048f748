"""A signal that reached the inbox after a wait's deadline loses to the wait's timer,
live or at recovery (issue 22 item 5; docs/semantics.md "Signals"): "no answer in an
hour → declined" held only while a process ran the execution; an approval recorded
while none did, after the deadline, was applied at recovery."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

from phronomy_fsm.durable import DurableRuntime, ExecutionStatus, Machine
from phronomy_fsm.durable.codec import dumps, loads
from phronomy_fsm.durable.operations import send_signal
from phronomy_fsm.runtime.clock import ManualClock
from phronomy_fsm.store import SqliteBarrierStore
from phronomy_fsm.testing.deadlines import wait_until

from .late_effect_app import TABLE, Hooks


def _runtime(db: Path, **options) -> DurableRuntime:
    machine = Machine(
        TABLE, Hooks(db.parent / "ledger.jsonl"), final_status={"failed": ExecutionStatus.FAILED}
    )
    return DurableRuntime(SqliteBarrierStore(db), machines=[machine], own_store=True, **options)


def _waiting_past_its_deadline(db: Path) -> datetime:
    """``late-1`` waits for approval; its deadline (an hour after it started, on a clock
    two hours behind) has passed in real time. Returns the deadline."""
    two_hours_ago = datetime.now(UTC) - timedelta(hours=2)
    with _runtime(db, clock=ManualClock(start_wall=two_hours_ago)) as runtime:
        handle = runtime.start("late_effect", {"order": "late-1"}, execution_id="late-1")
        wait_until(lambda: handle.record().status is ExecutionStatus.WAITING, 10, "the wait")
        deadline = handle.record().deadline_at
    assert deadline is not None and deadline < datetime.now(UTC)
    return deadline


def test_an_approval_sent_after_the_deadline_while_nobody_ran_it_loses_to_the_timer(
    tmp_path: Path,
) -> None:
    db = tmp_path / "late.db"
    _waiting_past_its_deadline(db)
    with SqliteBarrierStore(db) as store:  # no process runs it
        send_signal(store, "late-1", "approve", {"by": "too late"})
    with _runtime(db) as runtime:
        runtime.recover()
        wait_until(
            lambda: not runtime.store.load_record("late-1").is_active, 30, "the execution to end"
        )
        record = runtime.store.load_record("late-1")
        signals = runtime.store.list_signals("late-1")
    assert (record.status, record.state) == (ExecutionStatus.FAILED, "failed")  # expired
    assert "approved_by" not in record.context
    assert [(s.event, s.outcome) for s in signals] == [("approve", "dropped: finished in failed")]
    assert not (tmp_path / "ledger.jsonl").exists()  # nothing shipped


def test_an_approval_sent_before_the_deadline_wins_over_the_timer_at_recovery(
    tmp_path: Path,
) -> None:
    db = tmp_path / "late.db"
    deadline = _waiting_past_its_deadline(db)
    with SqliteBarrierStore(db) as store:
        signal = send_signal(store, "late-1", "approve", {"by": "in time"})
    # recorded before the deadline (the sender stamps it): rewrite the stamp as a sender
    # a minute before the deadline would have written it
    conn = sqlite3.connect(db)
    body = loads(
        conn.execute("SELECT body FROM signals WHERE seq = ?", (signal.seq,)).fetchone()[0]
    )
    body["created_at"] = (deadline - timedelta(minutes=1)).isoformat()
    conn.execute("UPDATE signals SET body = ? WHERE seq = ?", (dumps(body).decode(), signal.seq))
    conn.commit()
    conn.close()
    with _runtime(db) as runtime:
        runtime.recover()
        wait_until(
            lambda: not runtime.store.load_record("late-1").is_active, 30, "the execution to end"
        )
        record = runtime.store.load_record("late-1")
    assert (record.status, record.state) == (ExecutionStatus.COMPLETED, "shipped")
    assert record.context["approved_by"] == "in time"
