"""Closing a runtime while work of its helper threads is still in flight is quiet (issue
21): an engine commit whose outcome arrives after the runtime closed — its receipt from
the store's writer thread, or the read-back of a lost response on a reconcile thread —
finds the loop stopped, and is dropped (the execution lives on in the store; whoever
recovers it reads it back) instead of printing a traceback from that thread.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from phronomy_fsm.durable import DurableEventKind, DurableRuntime
from phronomy_fsm.durable.records import DurableCommit, DurableReceipt
from phronomy_fsm.store import FaultInjectingStore, FaultKind, SqliteBarrierStore

from .conftest import Recorder
from .order_app import Order, order_machine


class LateWait(FaultInjectingStore):
    """Holds the outcome of the ``@wait`` commit until :attr:`gate` is set: its receipt
    (``late="receipt"``) or, after a failing COMMIT, its read-back (``late="read-back"``).
    :attr:`held` is set once the outcome is held."""

    def __init__(self, inner: Any, late: str) -> None:
        super().__init__(inner)
        self.late = late
        self.held = threading.Event()
        self.gate = threading.Event()
        self.threads: list[threading.Thread] = []
        if late == "read-back":
            self.add(FaultKind.COMMIT_FAILS, barrier="@wait")

    def submit(self, commit: DurableCommit) -> Future[DurableReceipt]:
        future = super().submit(commit)
        if self.late != "receipt" or commit.barrier != "@wait":
            return future
        late: Future[DurableReceipt] = Future()

        def settle() -> None:  # callbacks run here, as on the store's writer thread
            self.held.set()
            self.gate.wait(10)
            error = future.exception()
            if error is None:
                late.set_result(future.result())
            else:
                late.set_exception(error)

        thread = threading.Thread(target=settle, name="late-receipt")
        self.threads.append(thread)
        thread.start()
        return late

    def reconcile(self, commit: DurableCommit) -> str:
        self.threads.append(threading.current_thread())
        self.held.set()
        self.gate.wait(10)
        return super().reconcile(commit)


@pytest.mark.parametrize("late", ["receipt", "read-back"])
def test_an_outcome_that_arrives_after_close_is_dropped_quietly(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    late: str,
) -> None:
    reported: list[str] = []
    monkeypatch.setattr(
        threading,
        "excepthook",
        lambda args: reported.append(f"{args.thread.name}: {args.exc_type.__name__}"),
    )
    inner = SqliteBarrierStore(tmp_path / "store.db")
    store = LateWait(inner, late)
    events = Recorder()
    runtime = DurableRuntime(
        store, machines=[order_machine(tmp_path / "ledger.jsonl")], listeners=[events]
    )
    try:
        runtime.start("order_flow", Order("o-1", 100), execution_id="o-1")
        assert store.held.wait(10), "the @wait commit never came"
        runtime.close(timeout_seconds=0.2)  # gives up on the commit in flight
        store.gate.set()
        for thread in store.threads:
            thread.join(10)
            assert not thread.is_alive()
        stored = inner.load_record("o-1")
    finally:
        store.gate.set()
        inner.close()
    assert reported == []
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == []
    assert DurableEventKind.WAITING not in [e.kind for e in events.events]  # never settled
    # the store has what it did: the wait committed, or (COMMIT failed) the state before
    assert (stored.status.value, stored.revision) == (
        ("waiting", 3) if late == "receipt" else ("running", 2)
    )
