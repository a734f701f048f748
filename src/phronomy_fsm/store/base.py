"""The barrier store interface the agent layer programs against (issue 4, reference §5.1).

Owns: the :class:`BarrierStore` protocol, the reconciliation dispositions
(:data:`COMMITTED`, :data:`NOT_COMMITTED`, :data:`CONFLICT`; reference §4.4) and the
:class:`CompactReport` value. It knows nothing about SQLite; backends live in sibling
modules (``sqlite.py``) and must pass the conformance suite in ``tests/store``.

Error taxonomy (reference §5.1, ``errors.py``) shared by every backend:

- :class:`~phronomy_fsm.errors.NotFoundError`: the agent or execution does not exist.
- :class:`~phronomy_fsm.errors.ConflictError`: a compare-and-set failed (stale
  revision, journal head moved, duplicate id). Nothing was written. Reload and decide.
- :class:`~phronomy_fsm.errors.AgentBusyError`: the agent already has an active
  execution. Nothing was written. Its subclass
  :class:`~phronomy_fsm.errors.AgentOwnedError`: another live process owns the agent
  (:meth:`BarrierStore.claim_agent`).
- :class:`~phronomy_fsm.errors.SerializationError`: a record cannot be encoded or a
  stored body cannot be decoded. Nothing was written.
- :class:`~phronomy_fsm.errors.StorageError`: transport/storage failure known to have
  happened **before** the write could commit (busy after the timeout, I/O error, full
  disk, not a database). Nothing was written; a retry is safe.
- :class:`~phronomy_fsm.errors.OutcomeUnknownError`: the failure happened after the
  write was issued (the COMMIT itself failed, or the response was lost). ``intended``
  carries the :class:`~phronomy_fsm.store.records.BarrierCommit`; call
  :meth:`BarrierStore.reconcile` to learn whether it committed.
- :class:`~phronomy_fsm.errors.SchemaVersionError`: the database is newer than the
  code (or not a phronomy store); raised when opening, nothing written.
"""

from __future__ import annotations

from concurrent.futures import Future
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

import attrs

from phronomy_fsm.store.ownership import AgentClaim, OwnerRecord
from phronomy_fsm.store.records import (
    AgentRecord,
    BarrierCommit,
    BarrierRecord,
    CommitReceipt,
    ExecutionRecord,
    JournalRecord,
)

#: Reconciliation: the intended commit is durably stored (reference §4.4).
COMMITTED = "committed"
#: Reconciliation: the stored execution is still at the base revision (or absent for a
#: creating commit); the intended commit did not happen.
NOT_COMMITTED = "not_committed"
#: Reconciliation: something else is stored; fail closed (``recovery_required``).
CONFLICT = "conflict"

DISPOSITIONS = (COMMITTED, NOT_COMMITTED, CONFLICT)


@attrs.frozen
class CompactReport:
    """What :meth:`BarrierStore.compact` did.

    Attributes:
        cutoff: executions whose last commit is older than this were eligible.
        removed_executions: terminal executions deleted from the store.
        removed_barriers: barrier-log rows deleted with them.
        archived_executions: executions copied to ``archive_path`` (0 without archive).
        archive_path: the archive file, or ``None``.
        kept_journal_records: journal records of removed executions that were kept
            (the journal belongs to the agent and is never compacted).
        wal_checkpoint: ``(busy, wal_frames, checkpointed_frames)`` of the final
            ``wal_checkpoint(TRUNCATE)``; ``busy == 1`` means a reader prevented the
            truncation (the WAL is truncated on a later checkpoint).
        kept_pending_handoffs: eligible ``handed_off`` executions kept because their
            target execution does not exist yet (recovery still has to start it).
    """

    cutoff: datetime
    removed_executions: int
    removed_barriers: int
    archived_executions: int
    archive_path: str | None
    kept_journal_records: int
    wal_checkpoint: tuple[int, int, int]
    kept_pending_handoffs: int = 0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (the cutoff as ISO 8601)."""
        data = attrs.asdict(self)
        data["cutoff"] = self.cutoff.isoformat()
        data["wal_checkpoint"] = list(self.wal_checkpoint)
        return data


@runtime_checkable
class BarrierStore(Protocol):
    """Durable storage of agents, executions, the journal and the barrier log.

    All methods are synchronous and thread-safe; call them from worker threads (the
    offload pool), never from the dispatcher's event-loop thread, because they block
    on disk I/O. Every method raises only errors of the store taxonomy (module
    docstring); no backend exception escapes.
    """

    def create_agent(
        self, agent_id: str, *, metadata: dict[str, Any] | None = None, now: datetime | None = None
    ) -> AgentRecord:
        """Create the agent root at revision 0, lifecycle ``idle``, journal head 0.

        Raises: ConflictError (exists), SerializationError, StorageError.
        Durability: committed before it returns.
        """
        ...

    def load_agent(self, agent_id: str) -> AgentRecord:
        """The stored agent root. Raises NotFoundError, SerializationError, StorageError."""
        ...

    def list_agents(self) -> list[AgentRecord]:
        """Every agent root, ordered by ``agent_id``. Raises StorageError."""
        ...

    def commit(self, commit: BarrierCommit) -> CommitReceipt:
        """Commit one barrier atomically: create or compare-and-set the execution, save
        the agent root (CAS on ``agent.revision - 1``), append the journal records, and
        log the barrier — all or nothing (reference §5.1, §5.2; issue 4 item 4).

        Raises:
            NotFoundError: updating an execution (or agent) that does not exist, or
                creating an execution for an unknown agent.
            ConflictError: stale revision, journal head mismatch, duplicate execution or
                journal record id.
            AgentBusyError: creating an active execution while the agent has one.
            SerializationError, StorageError: nothing was written.
            OutcomeUnknownError: the write may have committed; ``intended`` is
                ``commit``. Use :meth:`reconcile`.

        Durability: when it returns, the barrier is durable per the backend's
        synchronous setting. A retry after a typed error other than
        OutcomeUnknownError is safe; after OutcomeUnknownError reconcile first.
        """
        ...

    def submit(self, commit: BarrierCommit) -> Future[CommitReceipt]:
        """The group-commit form of :meth:`commit`: queue the barrier for the writer,
        which commits many barriers in one transaction (each in its own savepoint).

        Returns a future set only after the transaction's COMMIT (the fsync) returned,
        with the receipt or the same typed error :meth:`commit` would raise. A failing
        COMMIT fails every barrier of that batch with OutcomeUnknownError.

        Concurrency: cancelling the future before the writer takes it withdraws the
        barrier (never written); afterwards it cannot be cancelled.
        """
        ...

    def reconcile(self, commit: BarrierCommit) -> str:
        """Read back after OutcomeUnknownError and classify (reference §4.4):
        :data:`COMMITTED` when the stored execution has ``commit.execution.revision``
        and exactly the intended canonical JSON; :data:`NOT_COMMITTED` when the row is
        absent (creating commit) or still at ``expected_revision``; otherwise
        :data:`CONFLICT`. Raises StorageError if it cannot read.
        """
        ...

    def load_execution(self, execution_id: str) -> ExecutionRecord:
        """The stored execution. Raises NotFoundError, SerializationError, StorageError."""
        ...

    def list_executions(
        self,
        *,
        agent_id: str | None = None,
        status: str | None = None,
        active: bool | None = None,
        limit: int | None = None,
        offset: int = 0,
    ) -> list[ExecutionRecord]:
        """Executions matching every given filter, ordered by creation time (then id).
        Raises StorageError, SerializationError."""
        ...

    def active_executions(self, agent_id: str | None = None) -> list[ExecutionRecord]:
        """Executions in preparing/active/suspended (recovery scan, reference §6.1)."""
        ...

    def read_journal(
        self,
        agent_id: str,
        *,
        after: int = 0,
        limit: int | None = None,
        execution_id: str | None = None,
    ) -> list[JournalRecord]:
        """Journal records with ``sequence > after`` in sequence order, optionally only
        those of one execution; each carries its assigned sequence."""
        ...

    def barrier_history(self, execution_id: str) -> list[BarrierRecord]:
        """The barrier log of one execution, by revision (empty if unknown)."""
        ...

    def compact(
        self,
        *,
        older_than_days: float,
        archive_path: str | None = None,
        now: datetime | None = None,
    ) -> CompactReport:
        """Remove (or archive, then remove) terminal executions whose last commit is
        older than ``older_than_days`` days, with their barrier rows; keep active
        executions and the whole journal; checkpoint the WAL (issue 4 item 9)."""
        ...

    def claim_agent(self, agent_id: str, *, takeover: bool = False) -> AgentClaim:
        """Record that this process owns ``agent_id``, in one transaction that checks
        the current owner and writes the claim.

        The rule (docs/operations.md "Who owns an agent";
        :func:`~phronomy_fsm.store.ownership.decide_claim`):

        - no owner → claimed (fresh random ``owner_token``);
        - this same process (host, boot, PID namespace, pid, start time) → re-entered:
          the same token, one more hold (release once per claim);
        - a process on this host that is gone (no such pid, a zombie, pid reuse seen
          as another start time, an earlier boot) → taken over (logged at WARNING;
          ``replaced`` and ``reason`` say from whom and why);
        - a live process on this host → AgentOwnedError, whatever ``takeover`` says;
        - a process on another host or PID namespace, or whose liveness cannot be
          proven → AgentOwnedError (``verifiable=False``) unless ``takeover`` is true.

        Returns an :class:`~phronomy_fsm.store.ownership.AgentClaim`.

        Raises:
            NotFoundError: no such agent (nothing written).
            AgentOwnedError: owned by another process (nothing written).
            StorageError: nothing was written.

        Durability: committed before it returns. Concurrency: racing claimants in any
        number of processes are serialised; exactly one wins a free agent.
        """
        ...

    def release_agent(self, agent_id: str, owner_token: str) -> bool:
        """Release one claim made by :meth:`claim_agent` (its ``owner_token``): one hold
        less; the owner row is deleted with the last hold, so another process may
        claim the agent. Returns False, writing nothing, when no row carries the token
        (already released, or taken over since). Raises StorageError."""
        ...

    def agent_owner(self, agent_id: str) -> OwnerRecord | None:
        """The :class:`~phronomy_fsm.store.ownership.OwnerRecord` of the process owning
        ``agent_id``, or ``None`` when nobody holds it. A read: writes nothing.
        Raises StorageError."""
        ...

    def close(self) -> None:
        """Flush queued group commits, stop the writer and close every connection.
        Idempotent."""
        ...
