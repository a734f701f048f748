"""PostgreSQL: an execution whose row another transaction holds stalls no one else
(issue 21 item 2; docs/scale-out.md, "The PostgreSQL store"). Signals to different
executions never wait on each other; a write that waits for a locked row longer than
the store's ``lock_timeout_seconds`` is a LockTimeoutError that wrote nothing; and the
inbox poller misses no signal whose transaction commits after a later one's."""

from __future__ import annotations

import queue
import threading
import time
from typing import Any

import psycopg
import pytest

from phronomy_fsm.errors import LockTimeoutError
from phronomy_fsm.store.open import open_store

from .conftest import commit, create, signal, step

pytestmark = pytest.mark.timeout(120)

#: The store's lock timeout in these tests: long enough that a signal to another
#: execution, sent while a sender waits for the locked row, clearly finishes first.
LOCK_TIMEOUT = 4.0


def _wait_for_lock_wait(dsn: str, application_name: str, deadline_seconds: float = 30.0) -> None:
    """Return once a backend of ``application_name`` waits for a lock (a condition
    polled against the server, never a fixed sleep)."""
    deadline = time.monotonic() + deadline_seconds
    with psycopg.connect(dsn, autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"
                " AND wait_event_type = 'Lock'",
                (application_name,),
            ).fetchone()
            if row and row[0]:
                return
            threading.Event().wait(0.02)
    raise AssertionError(f"no connection of {application_name} ever waited for a lock")


def _in_thread(fn: Any) -> queue.Queue[tuple[float, Any]]:
    """Run ``fn()`` in a thread; the queue gets ``(monotonic time it ended, result or
    exception)``."""
    out: queue.Queue[tuple[float, Any]] = queue.Queue()

    def run() -> None:
        try:
            result = fn()
        except Exception as exc:  # noqa: BLE001 - handed to the test thread
            result = exc
        out.put((time.monotonic(), result))

    threading.Thread(target=run, daemon=True).start()
    return out


def test_a_locked_execution_delays_no_signal_to_another_and_its_own_sender_times_out(
    pg_dsn: str,
) -> None:
    with open_store(pg_dsn, lock_timeout_seconds=LOCK_TIMEOUT, application_name="senders") as store:
        commit(store, create("locked"))
        commit(store, create("free"))
        holder = psycopg.connect(pg_dsn)  # a transaction left open, as a stuck client
        try:
            holder.execute("SELECT 1 FROM executions WHERE execution_id = 'locked' FOR UPDATE")
            started = time.monotonic()
            to_locked = _in_thread(lambda: store.send_signal(signal("locked", "to-locked")))
            _wait_for_lock_wait(pg_dsn, "senders")  # its sender now waits for the row

            to_free = _in_thread(lambda: store.send_signal(signal("free", "to-free")))
            free_done, sent = to_free.get(timeout=30)
            assert not isinstance(sent, BaseException), sent
            assert sent.seq is not None and sent.execution_id == "free"

            locked_done, error = to_locked.get(timeout=30)
            assert free_done < locked_done  # the free one did not wait for the locked one
            assert isinstance(error, LockTimeoutError), error
            assert error.execution_id == "locked" and error.busy
            assert error.lock_timeout_seconds == LOCK_TIMEOUT
            assert "nothing was written" in str(error) and "pg_stat_activity" in str(error)
            assert locked_done - started >= LOCK_TIMEOUT * 0.9
        finally:
            holder.rollback()
            holder.close()
        assert store.list_signals("locked") == []  # the timed-out send wrote nothing
        assert [s.signal_id for s in store.list_signals("free")] == ["to-free"]
        store.send_signal(signal("locked", "to-locked"))  # free again: it goes through
        assert [s.signal_id for s in store.list_signals("locked")] == ["to-locked"]


def test_a_commit_waiting_for_a_locked_row_times_out_and_writes_nothing(pg_dsn: str) -> None:
    with open_store(pg_dsn, lock_timeout_seconds=1.0) as store:
        commit(store, create("locked"))
        previous = store.load_record("locked")
        holder = psycopg.connect(pg_dsn)
        try:
            holder.execute("SELECT 1 FROM executions WHERE execution_id = 'locked' FOR UPDATE")
            with pytest.raises(LockTimeoutError) as caught:
                commit(store, step(previous))
            assert caught.value.execution_id == "locked" and caught.value.busy
        finally:
            holder.rollback()
            holder.close()
        assert store.load_record("locked").revision == previous.revision
        commit(store, step(previous))  # the same commit, once the row is free
        assert store.load_record("locked").revision == previous.revision + 1


def test_the_poller_misses_no_signal_committed_after_a_later_one(pg_dsn: str) -> None:
    """A batch that sends a signal takes its sequence number, then stays open (held
    just before its COMMIT); a sender commits a later number meanwhile. A poll sees the
    later one only; once the batch commits, the next poll sees the earlier one: each
    exactly once."""
    with open_store(pg_dsn) as batches, open_store(pg_dsn) as senders:
        for eid in ("parent", "a", "b"):
            commit(batches, create(eid))
        cursor = senders.signal_cursor()
        inserted, release = threading.Event(), threading.Event()

        def hold(point: str, commits: tuple[Any, ...]) -> None:
            if point == "commit" and any(c.send_signals for c in commits):
                inserted.set()
                assert release.wait(60)

        batches.install_fault_hook(hook=hold)
        parent = batches.load_record("parent")
        held = batches.submit(
            step(parent, commit_options={"send_signals": (signal("a", "early"),)})
        )
        assert inserted.wait(30)
        late = senders.send_signal(signal("b", "late"))

        first = senders.signals_since(cursor)
        assert [s.signal_id for s in first.signals] == ["late"]
        release.set()
        receipt = held.result(timeout=30)
        assert receipt.signal_seqs[0] < late.seq  # committed out of sequence order
        second = senders.signals_since(first.cursor)
        assert [s.signal_id for s in second.signals] == ["early"]
        assert senders.signals_since(second.cursor).signals == ()
