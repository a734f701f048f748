"""Signals and group commits take PostgreSQL's locks in one order (the signal lock, then
an execution's row), so a sender and a batch never wait for each other in a cycle: the
server detects no deadlock while senders signal an execution that batches keep moving,
in batches that also send signals (docs/scale-out.md, "The PostgreSQL store")."""

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
        for eid in ("X", "P", "A"):
            store.commit(create(eid))
        records = {"X": store.load_record("X"), "A": store.load_record("A")}
        before = _deadlocks(pg_dsn)
        stop = threading.Event()
        sent = [0]
        errors: list[Any] = []

        def sender() -> None:
            i = 0
            while not stop.is_set():
                i += 1
                try:
                    other.send_signal(signal("X", f"{threading.get_ident()}-{i}"))
                    sent[0] += 1
                except Exception as exc:  # noqa: BLE001 - collected and asserted below
                    errors.append(exc)

        threads = [threading.Thread(target=sender) for _ in range(3)]
        for thread in threads:
            thread.start()
        batches = 0
        deadline = time.monotonic() + 3.0
        try:
            while time.monotonic() < deadline:
                batches += 1
                a = step(
                    records["A"],
                    "b",
                    commit_options={"send_signals": (signal("P", f"p-{batches}"),)},
                )
                x = step(records["X"], "b")
                futures = [(name, store.submit(c), c) for name, c in (("A", a), ("X", x))]
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
