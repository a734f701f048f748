"""Fault injection for the engine's stores: tests and the crash harness.

Owns :class:`FaultInjectingStore`, an
:class:`~phronomy_fsm.durable.ports.ExecutionStore` that delegates everything to an
inner store and makes chosen commits
(:class:`~phronomy_fsm.durable.records.DurableCommit`) fail in one of these ways
(:class:`FaultKind`):

- ``FAIL_BEFORE``: StorageError before the commit reaches the database; nothing is
  written (any backend).
- ``LOST_RESPONSE``: the inner store commits, then OutcomeUnknownError is raised —
  the data **is** committed, the caller does not know (any backend).
- ``IO_ERROR`` / ``DISK_FULL``: the SQLite engine's error (``disk I/O error`` /
  ``database or disk is full``) is raised inside the transaction, before COMMIT;
  the store's own mapping turns it into StorageError and rolls back (needs an inner
  store with ``install_fault_hook``; otherwise the StorageError is raised directly).
- ``COMMIT_FAILS``: the COMMIT statement fails (``disk I/O error``); the inner store
  reports OutcomeUnknownError, and on the group-commit path so does every commit of
  that batch. Nothing is actually committed (needs ``install_fault_hook``).
- ``LOCK_CONTENTION``: another connection holds the write lock (``BEGIN IMMEDIATE``)
  while the commit runs, so the busy timeout expires for real → StorageError (needs
  an inner SQLite store, with ``path``).

A :class:`Fault` selects commits by barrier name, by the n-th matching call, and/or a
predicate. Faults fire only on ``commit`` and ``submit``: never on reads,
``reconcile``, the inbox (``send_signal``, ``close_signals``), leases and claims, or
the registries. The fault *machinery* lives here, outside the production modules:
a store only offers its seam (``install_fault_hook``).
"""

from __future__ import annotations

import enum
import sqlite3
import threading
from collections.abc import Callable
from concurrent.futures import Future
from datetime import datetime
from typing import Any

import attrs

from phronomy_fsm.durable.claims import Claimable, RunnableSpecs
from phronomy_fsm.durable.records import (
    BarrierLogRecord,
    DurableCommit,
    DurableReceipt,
    ExecutionRecord,
    Fence,
    JournalEntry,
    MachineRecord,
    SignalPoll,
    SignalRecord,
    WorkerRecord,
)
from phronomy_fsm.errors import OutcomeUnknownError, StorageError
from phronomy_fsm.store._sqlerrors import storage_error


class FaultKind(enum.StrEnum):
    """How a selected commit fails (module docstring)."""

    FAIL_BEFORE = "fail_before"
    LOST_RESPONSE = "lost_response"
    IO_ERROR = "io_error"
    DISK_FULL = "disk_full"
    COMMIT_FAILS = "commit_fails"
    LOCK_CONTENTION = "lock_contention"


_ENGINE_MESSAGES = {
    FaultKind.IO_ERROR: "disk I/O error",
    FaultKind.DISK_FULL: "database or disk is full",
    FaultKind.COMMIT_FAILS: "disk I/O error",
}


@attrs.define
class Fault:
    """Which commits fail, and how.

    Args:
        kind: the failure (:class:`FaultKind`).
        barrier: only commits of this barrier name (``None``: any).
        nth: fire only on the n-th (1-based) commit that matches ``barrier`` and
            ``predicate``; ``None``: fire on the first ``times`` matches.
        predicate: an extra filter on the :class:`DurableCommit`.
        times: how many times to fire when ``nth`` is ``None`` (``None``: always).

    ``matched`` and ``fired`` count matching calls and injected failures.
    """

    kind: FaultKind
    barrier: str | None = None
    nth: int | None = None
    predicate: Callable[[DurableCommit], bool] | None = None
    times: int | None = 1
    matched: int = 0
    fired: int = 0

    def consider(self, commit: DurableCommit) -> bool:
        """Count ``commit`` if it matches; True when the fault fires on it."""
        if self.barrier is not None and commit.barrier != self.barrier:
            return False
        if self.predicate is not None and not self.predicate(commit):
            return False
        self.matched += 1
        if self.nth is not None:
            fire = self.matched == self.nth
        else:
            fire = self.times is None or self.fired < self.times
        if fire:
            self.fired += 1
        return fire


class FaultInjectingStore:
    """An :class:`~phronomy_fsm.durable.ports.ExecutionStore` wrapper that injects
    :class:`Fault` s into commits (module docstring).

    Args:
        inner: the real store (SQLite or PostgreSQL); every call is delegated to it.
        faults: initial faults; more with :meth:`add`.

    Attributes:
        injected: ``(kind, commit)`` of every fault fired, in order.

    Concurrency: thread-safe like the inner store; fault selection is serialised.
    """

    def __init__(self, inner: Any, faults: tuple[Fault, ...] | list[Fault] = ()) -> None:
        self.inner = inner
        self.faults: list[Fault] = list(faults)
        self.injected: list[tuple[FaultKind, DurableCommit]] = []
        self._lock = threading.Lock()
        self._armed: dict[int, FaultKind] = {}
        install = getattr(inner, "install_fault_hook", None)
        self._has_hook = install is not None
        if install is not None:
            install(self._hook)

    def add(self, kind: FaultKind | str, **selector: Any) -> Fault:
        """Add and return a :class:`Fault` (``selector``: barrier, nth, predicate, times)."""
        fault = Fault(FaultKind(kind), **selector)
        if fault.kind is FaultKind.LOCK_CONTENTION and not hasattr(self.inner, "path"):
            raise ValueError("lock contention needs a SQLite inner store (with a path)")
        with self._lock:
            self.faults.append(fault)
        return fault

    def clear(self) -> None:
        """Remove every fault."""
        with self._lock:
            self.faults.clear()
            self._armed.clear()

    def _select(self, commit: DurableCommit) -> FaultKind | None:
        with self._lock:
            for fault in self.faults:
                if fault.consider(commit):
                    self.injected.append((fault.kind, commit))
                    return fault.kind
        return None

    def _hook(self, point: str, commits: tuple[DurableCommit, ...]) -> None:
        """The inner store's seam: raise the armed engine error at its point."""
        if not self._armed:
            return
        wanted = "commit" if point == "commit" else "write" if point == "write" else None
        if wanted is None:
            return
        with self._lock:
            for commit in commits:
                kind = self._armed.get(id(commit))
                if kind is None:
                    continue
                if (kind is FaultKind.COMMIT_FAILS) != (point == "commit"):
                    continue
                del self._armed[id(commit)]
                raise sqlite3.OperationalError(_ENGINE_MESSAGES[kind])

    def _before(self, kind: FaultKind, commit: DurableCommit) -> StorageError:
        text = _ENGINE_MESSAGES.get(kind, "injected failure before the write reached the database")
        return StorageError(
            f"injected {kind.value} for execution {commit.execution.execution_id}: {text}; nothing was written",
            injected=kind.value,
        )

    def _lost(self, commit: DurableCommit) -> OutcomeUnknownError:
        return OutcomeUnknownError(
            f"injected lost response: execution {commit.execution.execution_id} revision "
            f"{commit.execution.revision} was committed but the response was lost; reconcile",
            intended=commit,
            injected=FaultKind.LOST_RESPONSE.value,
        )

    def _hold_write_lock(self) -> sqlite3.Connection:
        path = self.inner.path  # type: ignore[attr-defined]
        try:
            conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise storage_error(exc, operation="fault injection (lock holder)", path=path) from exc
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            conn.close()
            raise storage_error(exc, operation="fault injection (lock holder)", path=path) from exc
        return conn

    @staticmethod
    def _release(conn: sqlite3.Connection) -> None:
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass  # closing the connection releases the lock anyway
        finally:
            conn.close()

    # ------------------------------------------------------------------ commits

    def commit(self, commit: DurableCommit) -> DurableReceipt:
        """Delegate, injecting the selected fault (see the module docstring)."""
        kind = self._select(commit)
        if kind is None:
            return self.inner.commit(commit)
        if kind is FaultKind.FAIL_BEFORE or (kind in _ENGINE_MESSAGES and not self._has_hook):
            raise self._before(kind, commit)
        if kind is FaultKind.LOST_RESPONSE:
            self.inner.commit(commit)
            raise self._lost(commit)
        if kind is FaultKind.LOCK_CONTENTION:
            holder = self._hold_write_lock()
            try:
                return self.inner.commit(commit)
            finally:
                self._release(holder)
        with self._lock:
            self._armed[id(commit)] = kind
        try:
            return self.inner.commit(commit)
        finally:
            with self._lock:
                self._armed.pop(id(commit), None)

    def submit(self, commit: DurableCommit) -> Future[DurableReceipt]:
        """Delegate to the inner group-commit path, injecting the selected fault into
        this barrier's future (``COMMIT_FAILS`` fails its whole batch)."""
        kind = self._select(commit)
        if kind is None:
            return self.inner.submit(commit)
        if kind is FaultKind.FAIL_BEFORE or (kind in _ENGINE_MESSAGES and not self._has_hook):
            failed: Future[DurableReceipt] = Future()
            failed.set_exception(self._before(kind, commit))
            return failed
        if kind is FaultKind.LOST_RESPONSE:
            outer: Future[DurableReceipt] = Future()
            inner_future = self.inner.submit(commit)

            def settle(done: Future[DurableReceipt]) -> None:
                exc = done.exception()
                outer.set_exception(exc if exc is not None else self._lost(commit))

            inner_future.add_done_callback(settle)
            return outer
        if kind is FaultKind.LOCK_CONTENTION:
            holder = self._hold_write_lock()
            future = self.inner.submit(commit)
            future.add_done_callback(lambda _: self._release(holder))
            return future
        with self._lock:
            self._armed[id(commit)] = kind
        future = self.inner.submit(commit)

        def disarm(_: Future[DurableReceipt]) -> None:
            with self._lock:
                self._armed.pop(id(commit), None)

        future.add_done_callback(disarm)
        return future

    # ------------------------------------------------------------------ delegation

    def reconcile(self, commit: DurableCommit) -> str:
        """Delegated unchanged (faults never touch reads)."""
        return self.inner.reconcile(commit)  # type: ignore[no-any-return]

    def load_record(self, execution_id: str) -> ExecutionRecord:
        """Delegated unchanged."""
        return self.inner.load_record(execution_id)  # type: ignore[no-any-return]

    def list_records(self, **filters: Any) -> list[ExecutionRecord]:
        """Delegated unchanged."""
        return self.inner.list_records(**filters)  # type: ignore[no-any-return]

    def execution_rows(self, **filters: Any) -> list[dict[str, Any]]:
        """Delegated unchanged."""
        return self.inner.execution_rows(**filters)  # type: ignore[no-any-return]

    def count_by_status(self, **filters: Any) -> dict[str, int]:
        """Delegated unchanged."""
        return self.inner.count_by_status(**filters)  # type: ignore[no-any-return]

    def barrier_log(self, execution_id: str) -> list[BarrierLogRecord]:
        """Delegated unchanged."""
        return self.inner.barrier_log(execution_id)  # type: ignore[no-any-return]

    def journal_entries(self, execution_id: str) -> list[JournalEntry]:
        """Delegated unchanged."""
        return self.inner.journal_entries(execution_id)  # type: ignore[no-any-return]

    def journal_for_key(self, exclusive_key: str, **options: Any) -> list[tuple[str, JournalEntry]]:
        """Delegated unchanged."""
        return self.inner.journal_for_key(exclusive_key, **options)  # type: ignore[no-any-return]

    def send_signal(self, signal: SignalRecord) -> SignalRecord:
        """Delegated unchanged (no faults fire on the inbox)."""
        return self.inner.send_signal(signal)  # type: ignore[no-any-return]

    def pending_signals(self, execution_id: str) -> list[SignalRecord]:
        """Delegated unchanged."""
        return self.inner.pending_signals(execution_id)  # type: ignore[no-any-return]

    def list_signals(self, execution_id: str) -> list[SignalRecord]:
        """Delegated unchanged."""
        return self.inner.list_signals(execution_id)  # type: ignore[no-any-return]

    def signal_cursor(self) -> str:
        """Delegated unchanged."""
        return self.inner.signal_cursor()  # type: ignore[no-any-return]

    def signals_since(self, cursor: str) -> SignalPoll:
        """Delegated unchanged."""
        return self.inner.signals_since(cursor)  # type: ignore[no-any-return]

    def close_signals(
        self, execution_id: str, seqs: list[int], outcome: str, *, fence: Fence
    ) -> int:
        """Delegated unchanged, with the owner's ``fence`` (the inner store checks it)."""
        return self.inner.close_signals(  # type: ignore[no-any-return]
            execution_id, seqs, outcome, fence=fence
        )

    def register_worker(self, worker: WorkerRecord, lease_seconds: float) -> None:
        """Delegated unchanged (no faults fire on leases)."""
        self.inner.register_worker(worker, lease_seconds)

    def renew_lease(self, worker_id: str, lease_seconds: float) -> bool:
        """Delegated unchanged."""
        return self.inner.renew_lease(worker_id, lease_seconds)  # type: ignore[no-any-return]

    def store_time(self) -> datetime:
        """Delegated unchanged."""
        return self.inner.store_time()  # type: ignore[no-any-return]

    def retire_worker(self, worker_id: str) -> None:
        """Delegated unchanged."""
        self.inner.retire_worker(worker_id)

    def list_workers(self) -> list[tuple[WorkerRecord, int, int]]:
        """Delegated unchanged."""
        return self.inner.list_workers()  # type: ignore[no-any-return]

    def execution_owner(self, execution_id: str) -> tuple[str | None, int, int | None]:
        """Delegated unchanged."""
        return self.inner.execution_owner(execution_id)  # type: ignore[no-any-return]

    def execution_fences(self, execution_ids: list[str]) -> dict[str, tuple[str | None, int, bool]]:
        """Delegated unchanged."""
        return self.inner.execution_fences(execution_ids)  # type: ignore[no-any-return]

    def owned_executions(self, worker_id: str, machines: tuple[str, ...]) -> dict[str, int]:
        """Delegated unchanged."""
        return self.inner.owned_executions(worker_id, machines)  # type: ignore[no-any-return]

    def claim_execution(
        self, execution_id: str, worker_id: str, *, runs: RunnableSpecs | None = None
    ) -> int | None:
        """Delegated unchanged."""
        return self.inner.claim_execution(execution_id, worker_id, runs=runs)  # type: ignore[no-any-return]

    def claimable_executions(
        self, machines: tuple[Claimable, ...], *, limit: int = 1000
    ) -> list[tuple[str, str]]:
        """Delegated unchanged."""
        return self.inner.claimable_executions(machines, limit=limit)  # type: ignore[no-any-return]

    def claim_executions(
        self,
        machines: tuple[Claimable, ...],
        worker_id: str,
        *,
        limit: int,
        new_first: bool = False,
        waiting_only: bool = False,
    ) -> list[tuple[str, str, int]]:
        """Delegated unchanged."""
        return self.inner.claim_executions(  # type: ignore[no-any-return]
            machines, worker_id, limit=limit, new_first=new_first, waiting_only=waiting_only
        )

    def other_spec_executions(
        self, specs: tuple[RunnableSpecs, ...], *, limit: int = 1000
    ) -> list[tuple[str, str, int, str]]:
        """Delegated unchanged."""
        return self.inner.other_spec_executions(specs, limit=limit)  # type: ignore[no-any-return]

    def register_agent(self, agent_id: str) -> bool:
        """Delegated unchanged."""
        return self.inner.register_agent(agent_id)  # type: ignore[no-any-return]

    def agent_exists(self, agent_id: str) -> bool:
        """Delegated unchanged."""
        return self.inner.agent_exists(agent_id)  # type: ignore[no-any-return]

    def agent_ids(self) -> list[str]:
        """Delegated unchanged."""
        return self.inner.agent_ids()  # type: ignore[no-any-return]

    def register_machine(self, record: MachineRecord) -> None:
        """Delegated unchanged."""
        self.inner.register_machine(record)

    def load_machine(self, machine: str, spec_sha256: str | None = None) -> MachineRecord:
        """Delegated unchanged."""
        return self.inner.load_machine(machine, spec_sha256)  # type: ignore[no-any-return]

    @property
    def path(self) -> str:
        """The inner store's ``path`` (file or DSN); AttributeError when it has none."""
        return self.inner.path  # type: ignore[no-any-return]

    def close(self) -> None:
        """Remove the seam from the inner store and close it. Idempotent."""
        if self._has_hook:
            self.inner.install_fault_hook(None)
        self.inner.close()
