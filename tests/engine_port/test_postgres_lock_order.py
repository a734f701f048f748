"""Signals and group commits take PostgreSQL's locks in one order (the inbox locks of the
executions they signal, in key order, then rows; ``_commit.lock_inboxes``), so a sender
and a batch never wait for each other in a cycle: the server detects no deadlock while
senders signal an execution that batches keep moving and executions that batches
signal, while two writers' batches signal the same two executions, naming them in
opposite orders (docs/scale-out.md, "The PostgreSQL store")."""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
import pytest

from phronomy_fsm.store.open import open_store

from .conftest import create, signal, step

pytestmark = pytest.mark.timeout(120)


def _deadlocks(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_force_next_flush()")
        row = conn.execute(
            "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
    return int(row[0]) if row else 0


def test_senders_and_batches_that_send_signals_never_deadlock(pg_dsn: str) -> None:
    store, other = open_store(pg_dsn), open_store(pg_dsn)
    try:
        for eid in ("X", "P", "Q", "A", "B"):
            store.commit(create(eid))
        records = {eid: store.load_record(eid) for eid in ("X", "A", "B")}
        before = _deadlocks(pg_dsn)
        stop = threading.Event()
        sent = [0]
        errors: list[Any] = []

        def sender(target: str) -> None:
            i = 0
            while not stop.is_set():
                i += 1
                try:
                    other.send_signal(signal(target, f"{target}-{threading.get_ident()}-{i}"))
                    sent[0] += 1
                except Exception as exc:  # noqa: BLE001 - collected and asserted below
                    errors.append(exc)

        threads = [threading.Thread(target=sender, args=(t,)) for t in ("X", "X", "P", "Q")]
        for thread in threads:
            thread.start()
        batches = 0
        deadline = time.monotonic() + 3.0
        try:
            while time.monotonic() < deadline:
                batches += 1
                # two writers (one per store) signal P and Q, naming them in opposite
                # orders: the inbox locks are still taken in one order
                targets = ("P", "Q") if batches % 2 else ("Q", "P")
                a_sends = tuple(signal(t, f"{t}-a-{batches}") for t in targets)
                b_sends = tuple(signal(t, f"{t}-b-{batches}") for t in reversed(targets))
                a = step(records["A"], "b", commit_options={"send_signals": a_sends})
                b = step(records["B"], "b", commit_options={"send_signals": b_sends})
                x = step(records["X"], "b")
                futures = [
                    (name, writer.submit(c), c)
                    for name, writer, c in (("A", store, a), ("X", store, x), ("B", other, b))
                ]
                for name, future, c in futures:
                    future.result(timeout=60)
                    records[name] = c.execution
        finally:
            stop.set()
            for thread in threads:
                thread.join()
        assert errors == []
        assert batches > 10 and sent[0] > 10  # both sides really ran against each other
        assert _deadlocks(pg_dsn) == before
    finally:
        store.close()
        other.close()
