"""Fault injection for barrier stores (issue 4 item 7): tests and the crash harness.

Owns :class:`FaultInjectingStore`, a :class:`~phronomy_fsm.store.base.BarrierStore`
that delegates everything to an inner store and makes chosen commits fail in one of
these ways (:class:`FaultKind`):

- ``FAIL_BEFORE``: StorageError before the commit reaches the database; nothing is
  written (any backend).
- ``LOST_RESPONSE``: the inner store commits, then OutcomeUnknownError is raised —
  the data **is** committed, the caller does not know (reference §5.3 "F1"; any backend).
- ``IO_ERROR`` / ``DISK_FULL``: the SQLite engine's error (``disk I/O error`` /
  ``database or disk is full``) is raised inside the transaction, before COMMIT;
  the store's own mapping turns it into StorageError and rolls back (needs an inner
  store with ``install_fault_hook``; otherwise the StorageError is raised directly).
- ``COMMIT_FAILS``: the COMMIT statement fails (``disk I/O error``); the inner store
  reports OutcomeUnknownError, and on the group-commit path so does every barrier of
  that batch. Nothing is actually committed (needs ``install_fault_hook``).
- ``LOCK_CONTENTION``: another connection holds the write lock (``BEGIN IMMEDIATE``)
  while the commit runs, so the busy timeout expires for real → StorageError (needs
  an inner store with ``path``; SQLite only).

A :class:`Fault` selects commits by barrier name, by the n-th matching call, and/or a
predicate. Faults never fire on reads, ``reconcile``, ``create_agent`` or the
ownership claims (``claim_agent``, ``release_agent``).
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

from phronomy_fsm.errors import OutcomeUnknownError, StorageError
from phronomy_fsm.store._sqlerrors import storage_error
from phronomy_fsm.store.base import BarrierStore, CompactReport
from phronomy_fsm.store.ownership import AgentClaim, OwnerRecord
from phronomy_fsm.store.records import (
    AgentRecord,
    BarrierCommit,
    BarrierRecord,
    CommitReceipt,
    ExecutionRecord,
    JournalRecord,
)


class FaultKind(str, enum.Enum):
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
        predicate: an extra filter on the :class:`BarrierCommit`.
        times: how many times to fire when ``nth`` is ``None`` (``None``: always).

    ``matched`` and ``fired`` count matching calls and injected failures.
    """

    kind: FaultKind
    barrier: str | None = None
    nth: int | None = None
    predicate: Callable[[BarrierCommit], bool] | None = None
    times: int | None = 1
    matched: int = 0
    fired: int = 0

    def consider(self, commit: BarrierCommit) -> bool:
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
    """A :class:`BarrierStore` wrapper that injects :class:`Fault` s into commits.

    Args:
        inner: the real store (every call is delegated to it).
        faults: initial faults; more with :meth:`add`.

    Concurrency: thread-safe like the inner store; fault selection is serialised.
    Source: issue 4 item 7.
    """

    def __init__(self, inner: BarrierStore, faults: tuple[Fault, ...] | list[Fault] = ()) -> None:
        self.inner = inner
        self.faults: list[Fault] = list(faults)
        self.injected: list[tuple[FaultKind, BarrierCommit]] = []
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

    def _select(self, commit: BarrierCommit) -> FaultKind | None:
        with self._lock:
            for fault in self.faults:
                if fault.consider(commit):
                    self.injected.append((fault.kind, commit))
                    return fault.kind
        return None

    def _hook(self, point: str, commits: tuple[BarrierCommit, ...]) -> None:
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

    def _before(self, kind: FaultKind, commit: BarrierCommit) -> StorageError:
        text = _ENGINE_MESSAGES.get(kind, "injected failure before the write reached the database")
        return StorageError(
            f"injected {kind.value} for execution {commit.execution.execution_id}: {text}; nothing was written",
            injected=kind.value,
        )

    def _lost(self, commit: BarrierCommit) -> OutcomeUnknownError:
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

    def commit(self, commit: BarrierCommit) -> CommitReceipt:
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

    def submit(self, commit: BarrierCommit) -> Future[CommitReceipt]:
        """Delegate to the inner group-commit path, injecting the selected fault into
        this barrier's future (``COMMIT_FAILS`` fails its whole batch)."""
        kind = self._select(commit)
        if kind is None:
            return self.inner.submit(commit)
        if kind is FaultKind.FAIL_BEFORE or (kind in _ENGINE_MESSAGES and not self._has_hook):
            failed: Future[CommitReceipt] = Future()
            failed.set_exception(self._before(kind, commit))
            return failed
        if kind is FaultKind.LOST_RESPONSE:
            outer: Future[CommitReceipt] = Future()
            inner_future = self.inner.submit(commit)

            def settle(done: Future[CommitReceipt]) -> None:
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

        def disarm(_: Future[CommitReceipt]) -> None:
            with self._lock:
                self._armed.pop(id(commit), None)

        future.add_done_callback(disarm)
        return future

    # ------------------------------------------------------------------ delegation

    def create_agent(
        self, agent_id: str, *, metadata: dict[str, Any] | None = None, now: datetime | None = None
    ) -> AgentRecord:
        """Delegated unchanged."""
        return self.inner.create_agent(agent_id, metadata=metadata, now=now)

    def load_agent(self, agent_id: str) -> AgentRecord:
        """Delegated unchanged."""
        return self.inner.load_agent(agent_id)

    def list_agents(self) -> list[AgentRecord]:
        """Delegated unchanged."""
        return self.inner.list_agents()

    def reconcile(self, commit: BarrierCommit) -> str:
        """Delegated unchanged (faults never touch reads)."""
        return self.inner.reconcile(commit)

    def load_execution(self, execution_id: str) -> ExecutionRecord:
        """Delegated unchanged."""
        return self.inner.load_execution(execution_id)

    def list_executions(self, **filters: Any) -> list[ExecutionRecord]:
        """Delegated unchanged."""
        return self.inner.list_executions(**filters)

    def active_executions(self, agent_id: str | None = None) -> list[ExecutionRecord]:
        """Delegated unchanged."""
        return self.inner.active_executions(agent_id)

    def read_journal(self, agent_id: str, **options: Any) -> list[JournalRecord]:
        """Delegated unchanged."""
        return self.inner.read_journal(agent_id, **options)

    def barrier_history(self, execution_id: str) -> list[BarrierRecord]:
        """Delegated unchanged."""
        return self.inner.barrier_history(execution_id)

    def compact(self, **options: Any) -> CompactReport:
        """Delegated unchanged."""
        return self.inner.compact(**options)

    def claim_agent(self, agent_id: str, *, takeover: bool = False) -> AgentClaim:
        """Delegated (no faults fire on claims)."""
        return self.inner.claim_agent(agent_id, takeover=takeover)

    def release_agent(self, agent_id: str, owner_token: str) -> bool:
        """Delegated (no faults fire on releases)."""
        return self.inner.release_agent(agent_id, owner_token)

    def agent_owner(self, agent_id: str) -> OwnerRecord | None:
        """Delegated."""
        return self.inner.agent_owner(agent_id)

    def close(self) -> None:
        """Remove the seam from the inner store and close it."""
        if self._has_hook:
            self.inner.install_fault_hook(None)  # type: ignore[attr-defined]
        self.inner.close()
