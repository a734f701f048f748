"""What the durable engine needs from a store: the :class:`ExecutionStore` protocol.

The engine (:mod:`phronomy_fsm.durable.runtime`) programs against this protocol only;
the agent layer adds :class:`AgentRegistry` (the ids of its agents), its own port.
:class:`~phronomy_fsm.store.sqlite.SqliteBarrierStore` and
:class:`~phronomy_fsm.store.postgres.PostgresStore` implement both (mypy checks each
against both: ``_CHECKED_PORT`` in their modules), and every backend must pass the
store conformance suite (``tests/store``). Every method is synchronous
and thread-safe, raises only errors of the store taxonomy (``docs/store.md``), and must
not be called on the dispatcher's loop thread (they block on I/O).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

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


@runtime_checkable
class ExecutionStore(Protocol):
    """Durable storage of engine executions, their inbox, leases and machines.

    Implemented by :class:`~phronomy_fsm.store.SqliteBarrierStore` and
    :class:`~phronomy_fsm.store.postgres.PostgresStore`; open one from a ``--db`` value
    (a SQLite path or a ``postgresql://`` DSN) with
    :func:`phronomy_fsm.store.open_store`.

    **What an application may call** (the rest belongs to the engine and its workers):
    the reads :meth:`load_record`, :meth:`list_records`, :meth:`execution_rows`,
    :meth:`count_by_status`, :meth:`barrier_log`, :meth:`journal_entries`,
    :meth:`list_signals`, :meth:`pending_signals`, :meth:`execution_owner` and
    :meth:`load_machine`; :meth:`close` on a store it opened. To write, an application
    goes through the checked calls, never :meth:`submit` or :meth:`send_signal`
    directly: :func:`phronomy_fsm.durable.submit_execution` (start an execution for a
    worker), :func:`phronomy_fsm.durable.send_signal`,
    :func:`phronomy_fsm.durable.request_resolution` and
    :func:`phronomy_fsm.durable.request_cancel` (or the operator's
    :mod:`phronomy_fsm.operator`), and a :class:`~phronomy_fsm.durable.DurableRuntime`
    over the store to run executions itself.
    """

    def submit(self, commit: DurableCommit) -> Future[DurableReceipt]:
        """Queue ``commit`` for group commit; the future is set after COMMIT (or with
        the typed refusal: NotFoundError, ConflictError, LeaseLostError,
        AgentBusyError, ExecutionFinishedError, SerializationError, StorageError,
        OutcomeUnknownError; SchemaVersionError — for this and every other write —
        once newer code migrated the store's schema). Durability: set only once
        durable."""
        ...

    def reconcile(self, commit: DurableCommit) -> str:
        """After OutcomeUnknownError: ``committed``, ``not_committed`` or
        ``conflict`` by reading back. Raises StorageError."""
        ...

    def load_record(self, execution_id: str) -> ExecutionRecord:
        """The stored execution. Raises NotFoundError, SerializationError, StorageError."""
        ...

    def list_records(
        self,
        *,
        machine: str | None = None,
        status: str | None = None,
        state: str | None = None,
        exclusive_key: str | None = None,
        parent_execution_id: str | None = None,
        active: bool | None = None,
        owner_id: str | None = None,
        limit: int | None = None,
        offset: int = 0,
    ) -> list[ExecutionRecord]:
        """Executions matching every given filter (``None``: any), oldest first."""
        ...

    def execution_rows(
        self,
        *,
        machine: str | None = None,
        status: str | None = None,
        exclusive_key: str | None = None,
        limit: int | None = None,
        offset: int = 0,
    ) -> list[dict[str, Any]]:
        """Column summaries of the executions matching every given filter (engine and
        agent rows), without decoding their bodies."""
        ...

    def count_by_status(
        self, *, machine: str | None = None, exclusive_key: str | None = None
    ) -> dict[str, int]:
        """``{status: count}`` of every execution (of ``machine``, with
        ``exclusive_key``, when given): the operator's listings. Raises StorageError."""
        ...

    def barrier_log(self, execution_id: str) -> list[BarrierLogRecord]:
        """The barrier log by revision (empty when unknown)."""
        ...

    def journal_entries(self, execution_id: str) -> list[JournalEntry]:
        """The application records of one execution, in commit order."""
        ...

    def journal_for_key(
        self,
        exclusive_key: str,
        *,
        statuses: tuple[str, ...] = ("completed",),
        kinds: tuple[str, ...] | None = None,
    ) -> list[tuple[str, JournalEntry]]:
        """Journal entries of the executions of one exclusive key, in order."""
        ...

    def send_signal(self, signal: SignalRecord) -> SignalRecord:
        """Write to the inbox after checking the execution (exists, active, at the
        expected revision). A signal id stored before is checked first: the same
        signal again (execution, kind, event, payload as canonical JSON) returns the
        stored one and writes nothing; another signal with that id is refused
        (SignalRefusedError ``signal_id_reused``, naming the id, the execution it
        belongs to and what differs; ``docs/semantics.md``, "Signals"). Signals to
        one execution are stored in the order sent; senders to different executions
        do not wait on each other. Raises NotFoundError, ExecutionFinishedError,
        SignalRefusedError (``stale_revision``, ``signal_id_reused``),
        SerializationError, StorageError (LockTimeoutError on PostgreSQL when the
        execution stays locked)."""
        ...

    def pending_signals(self, execution_id: str) -> list[SignalRecord]:
        """Unconsumed signals of one execution, in order."""
        ...

    def list_signals(self, execution_id: str) -> list[SignalRecord]:
        """Every signal of one execution, in order."""
        ...

    def signal_cursor(self) -> str:
        """Where a poller of the whole inbox starts: an opaque cursor behind every
        signal committed so far (and, on PostgreSQL, ahead of none still being
        committed). Raises StorageError."""
        ...

    def signals_since(self, cursor: str) -> SignalPoll:
        """Every unconsumed signal of any execution that became visible since
        ``cursor``, in sequence order, with the cursor to pass next: a poller that
        passes each poll's cursor to the next sees every signal once, even one whose
        transaction committed after that of a signal with a higher ``seq``. Raises
        ValueError (not a cursor of this store), SerializationError, StorageError."""
        ...

    def close_signals(
        self, execution_id: str, seqs: list[int], outcome: str, *, fence: Fence
    ) -> int:
        """Consume pending signals without applying them (rejected or dropped; the
        ``outcome`` text says which and why) as the execution's owner holding
        ``fence``; returns how many were still pending. Fenced as a commit is, in
        the same transaction: refused unless the stored owner and fencing token are
        the fence's and the owner's lease has not passed (``docs/semantics.md``,
        "Leases and fencing"). Raises NotFoundError, LeaseLostError (nothing was
        written: the worker drops its copy of the execution), StorageError."""
        ...

    def register_worker(self, worker: WorkerRecord, lease_seconds: float) -> None:
        """Insert or replace a worker row; its lease runs ``lease_seconds`` from now
        on the store's clock."""
        ...

    def renew_lease(self, worker_id: str, lease_seconds: float) -> bool:
        """Heartbeat (store clock); False when the worker row is gone."""
        ...

    def store_time(self) -> datetime:
        """Now on the store's clock (aware UTC, milliseconds): the clock leases,
        signals' ``created_at`` and — through the runtime's default clock — deadlines
        are measured on (``docs/semantics.md``, "One clock"). Raises StorageError."""
        ...

    def retire_worker(self, worker_id: str) -> None:
        """End a worker's lease now."""
        ...

    def execution_owner(self, execution_id: str) -> tuple[str | None, int, int | None]:
        """``(owner worker, fencing token, owner's lease expiry epoch ms)``."""
        ...

    def execution_fences(self, execution_ids: list[str]) -> dict[str, tuple[str | None, int, bool]]:
        """``{execution_id: (owner, fencing token, active)}`` of existing executions."""
        ...

    def owned_executions(self, worker_id: str, machines: tuple[str, ...]) -> dict[str, int]:
        """``{execution_id: fencing token}`` of the active executions of ``machines``
        that ``worker_id`` owns."""
        ...

    def claim_execution(
        self, execution_id: str, worker_id: str, *, runs: RunnableSpecs | None = None
    ) -> int | None:
        """Take an active execution whose owner is none, self or dead (and, with
        ``runs``, whose spec that machine runs); the new fencing token, or None."""
        ...

    def claimable_executions(
        self, machines: tuple[Claimable, ...], *, limit: int = 1000
    ) -> list[tuple[str, str]]:
        """Active executions with no live owner that ``machines`` run: a machine's
        name runs every spec of it, a RunnableSpecs the specs it names
        (``docs/scale-out.md``, "Rolling upgrades")."""
        ...

    def claim_executions(
        self,
        machines: tuple[Claimable, ...],
        worker_id: str,
        *,
        limit: int,
        new_first: bool = False,
        waiting_only: bool = False,
    ) -> list[tuple[str, str, int]]:
        """Claim up to ``limit`` active executions with no live owner that
        ``machines`` run (as :meth:`claimable_executions`) for ``worker_id`` at once
        (workers racing for them take disjoint sets);
        ``[(execution_id, machine, new fencing token)]``: those that were running
        before those that wait, and with ``new_first`` those nobody ever claimed (new
        work) before both; oldest first within each (``docs/scale-out.md``, "Running
        workers"). ``waiting_only``: only executions that wait. Empty when
        ``worker_id``'s own lease is not valid."""
        ...

    def other_spec_executions(
        self, specs: tuple[RunnableSpecs, ...], *, limit: int = 1000
    ) -> list[tuple[str, str, int, str]]:
        """``(execution_id, machine, spec_version, spec_sha256)`` of active executions
        of the machines of ``specs`` with no live owner whose spec none of ``specs``
        runs (what a worker with them leaves for another), oldest first."""
        ...

    def list_workers(self) -> list[tuple[WorkerRecord, int, int]]:
        """Every worker: ``(record, heartbeat epoch ms, lease expiry epoch ms)``."""
        ...

    def register_machine(self, record: MachineRecord) -> None:
        """Keep a machine's compiled table (idempotent)."""
        ...

    def load_machine(self, machine: str, spec_sha256: str | None = None) -> MachineRecord:
        """A registered table. Raises NotFoundError."""
        ...

    def close(self) -> None:
        """Release the store's connections and threads (a runtime calls it only for a
        store it owns). Idempotent."""
        ...


@runtime_checkable
class AgentRegistry(Protocol):
    """The ids of the agents created in a store (``docs/agent.md``, "Agents"): the
    agent layer's own port, apart from the engine's :class:`ExecutionStore`. Every
    method is synchronous and thread-safe and raises only errors of the store
    taxonomy (``docs/store.md``); not on the dispatcher's loop thread."""

    def register_agent(self, agent_id: str) -> bool:
        """Record an agent id; False when it exists already (nothing written).
        Raises SchemaVersionError, StorageError."""
        ...

    def agent_exists(self, agent_id: str) -> bool:
        """True when the agent id was registered. Raises StorageError."""
        ...

    def agent_ids(self) -> list[str]:
        """Every registered agent id, sorted. Raises StorageError."""
        ...


@runtime_checkable
class AgentStore(ExecutionStore, AgentRegistry, Protocol):
    """A store that holds executions and the agent registry (both stores do): what
    an agent runtime needs."""


@runtime_checkable
class NotifyingStore(Protocol):
    """Optional: a store that can tell a runtime at once that something changed, so
    it need not wait for its next poll (PostgreSQL ``LISTEN/NOTIFY``). Polling stays
    the fallback: a notification only says *look now*."""

    def add_listener(self, callback: Callable[[str, str], None]) -> Callable[[], None]:
        """Call ``callback(channel, payload)`` on every notification (from a store
        thread; it must not block); returns the function that removes it."""
        ...


__all__ = ["AgentRegistry", "AgentStore", "ExecutionStore", "NotifyingStore"]
