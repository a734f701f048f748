"""The engine port's writes outside commits on SQLite: the inbox, leases, registries.

Owns the SQL of the writes that are not an execution's commit: sending a signal to an
execution's inbox (checked against the execution in the same transaction; a signal id
already stored is a no-op only for the same signal), closing signals without applying
them (fenced like a commit: only the execution's owner, under its current fencing
token and lease), workers and their leases, claims of executions (the fencing token
rises by one), and the registries of agent ids and compiled machines.
Each is one ``BEGIN IMMEDIATE`` transaction through the store's
``maintenance_transaction`` (a failing COMMIT is reported as StorageError: every one of
these writes is idempotent or re-checked, so a retry is safe). Mixed into
:class:`~phronomy_fsm.store.sqlite.SqliteBarrierStore`. Semantics:
``docs/semantics.md`` ("Signals", "Leases and fencing"); schema: ``docs/store.md``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from phronomy_fsm.durable.claims import Claimable, RunnableSpecs, spec_keys
from phronomy_fsm.durable.codec import datetime_to_epoch_ms
from phronomy_fsm.durable.records import (
    Fence,
    MachineRecord,
    SignalRecord,
    WorkerRecord,
    to_json,
)
from phronomy_fsm.errors import ExecutionFinishedError, NotFoundError, SignalRefusedError
from phronomy_fsm.store._commit import INSERT_SIGNAL, LEASE_OK, check_fence
from phronomy_fsm.store._reads import (
    NO_LIVE_OWNER,
    SIGNAL_COLUMNS,
    machines_sql,
    runs_sql,
    signal_from_row,
)
from phronomy_fsm.store.refusals import reused_signal_id_refusal

#: The rank of an execution in a claim (lower first), without and with ``new_first``:
#: one that was running (its worker died mid-way) before one that waits (it only needs
#: holding), and with ``new_first`` one nobody ever claimed (new work) before both. A
#: worker alternates the two, so new work is claimed at once and never starves the
#: recovery of a backlog (``docs/scale-out.md``, "Running workers").
#: What ``waiting_only`` adds to a claim's condition.
WAITING_ONLY = " AND status = 'waiting'"
CLAIM_ORDER = {
    False: "CASE WHEN status = 'waiting' THEN 1 ELSE 0 END",
    True: "CASE WHEN status = 'waiting' THEN 2 WHEN fence = 0 THEN 0 ELSE 1 END",
}


class SqliteWrites:
    """The non-commit writes of the SQLite store (module docstring)."""

    path: str

    def maintenance_transaction(self, operation: str) -> Any:  # provided by the store
        raise NotImplementedError

    def _commit_time(self) -> tuple[int, datetime]:  # provided by the store
        raise NotImplementedError

    # ------------------------------------------------------------------ inbox

    def send_signal(self, signal: SignalRecord) -> SignalRecord:
        """Write ``signal`` to its execution's inbox, in one transaction that checks
        the execution: it exists, is active, and (with ``expected_revision``) is at
        that revision. A signal id stored before is checked first: the same signal
        sent again (execution, kind, event and payload; ``docs/semantics.md``,
        "Signals") returns the stored one and writes nothing — a retried send is a
        no-op, even once the execution has moved on or finished — and any other
        signal with that id is refused.

        Raises:
            NotFoundError: no such execution.
            ExecutionFinishedError: it has finished.
            SignalRefusedError: ``expected_revision`` is stale, or the signal id
                belongs to another signal (``reason``: ``stale_revision``,
                ``signal_id_reused``).
            SerializationError, StorageError: nothing was written.
        """
        body = to_json(signal)
        now_ms, _ = self._commit_time()
        with self.maintenance_transaction("send_signal") as cur:
            existing = cur.execute(
                f"SELECT {SIGNAL_COLUMNS} FROM signals WHERE signal_id=?", (signal.signal_id,)
            ).fetchone()
            if existing is not None:
                stored = signal_from_row(existing)
                refusal = reused_signal_id_refusal(stored, signal)
                if refusal is not None:
                    raise refusal
                return stored
            row = cur.execute(
                "SELECT revision, active, status FROM executions WHERE execution_id=?",
                (signal.execution_id,),
            ).fetchone()
            if row is None:
                raise NotFoundError(
                    f"execution {signal.execution_id} does not exist; nothing was sent",
                    execution_id=signal.execution_id,
                )
            revision, active, status = row
            if not active:
                raise ExecutionFinishedError(
                    f"execution {signal.execution_id} has finished ({status}); nothing was sent",
                    execution_id=signal.execution_id,
                    status=status,
                )
            if signal.expected_revision is not None and revision != signal.expected_revision:
                raise SignalRefusedError(
                    f"execution {signal.execution_id} is at revision {revision}, not "
                    f"{signal.expected_revision}; read it again (nothing was sent)",
                    execution_id=signal.execution_id,
                    reason="stale_revision",
                    stored_revision=revision,
                )
            cur.execute(
                INSERT_SIGNAL,
                (
                    signal.signal_id,
                    signal.execution_id,
                    signal.kind.value,
                    signal.event,
                    body,
                    now_ms,
                ),
            )
            seq = int(cur.lastrowid or 0)
        return signal_from_row((seq, body, None, None))

    def set_keep_commit_bodies(self, keep: bool) -> None:
        """Turn the store's retention setting for commit bodies on or off
        (``docs/store.md``, "Kept commits"): from the next commit of any process on,
        each commit keeps the record it writes, or only its digest. Raises
        StorageError."""
        from phronomy_fsm.store.schema import KEEP_COMMITS

        with self.maintenance_transaction("set_keep_commit_bodies") as cur:
            cur.execute(
                "INSERT INTO meta(key, value) VALUES (?, ?)"
                " ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                (KEEP_COMMITS, "on" if keep else "off"),
            )

    def close_signals(
        self, execution_id: str, seqs: list[int], outcome: str, *, fence: Fence
    ) -> int:
        """Mark pending signals of ``execution_id`` consumed without applying them
        (``outcome`` says why: ``rejected: ...``, ``dropped: ...``) as its owner
        holding ``fence``; returns how many were still pending. The execution's
        revision does not move. Fenced as a commit is (``docs/semantics.md``, "Leases
        and fencing"), in the same transaction: a worker whose lease passed and whose
        execution another worker took over cannot close the new owner's signals.

        Raises:
            NotFoundError: no such execution.
            LeaseLostError: ``fence`` is not the stored owner and fencing token, or
                the owner's lease has passed; nothing was written (the worker drops
                its copy of the execution).
            StorageError: nothing was written.
        """
        if not seqs:
            return 0
        now_ms, _ = self._commit_time()
        marks = ",".join("?" * len(seqs))
        with self.maintenance_transaction("close_signals") as cur:
            # only while the fence still holds: a stale copy must not close the new
            # owner's signals (it would take a current approval for a stale one)
            revision = check_fence(cur, execution_id, fence, now_ms)
            cur.execute(
                f"UPDATE signals SET consumed_revision = ?, outcome = ? WHERE execution_id = ?"
                f" AND consumed_revision IS NULL AND seq IN ({marks})",
                [revision, outcome, execution_id, *seqs],
            )
            return int(cur.rowcount)

    # ------------------------------------------------------------------ workers

    def register_worker(self, worker: WorkerRecord, lease_seconds: float) -> None:
        """Insert (or replace) the row of a live worker; its lease runs for
        ``lease_seconds`` from now on the store's clock (the database's time is the
        one every worker's lease is measured against)."""
        now_ms, _ = self._commit_time()
        with self.maintenance_transaction("register_worker") as cur:
            cur.execute(
                "INSERT INTO workers(worker_id, body, heartbeat_epoch_ms, lease_expires_epoch_ms)"
                " VALUES (?,?,?,?) ON CONFLICT(worker_id) DO UPDATE SET body=excluded.body,"
                " heartbeat_epoch_ms=excluded.heartbeat_epoch_ms,"
                " lease_expires_epoch_ms=excluded.lease_expires_epoch_ms",
                (worker.worker_id, to_json(worker), now_ms, now_ms + int(lease_seconds * 1000)),
            )

    def renew_lease(self, worker_id: str, lease_seconds: float) -> bool:
        """Heartbeat: the worker's lease now runs ``lease_seconds`` from now (store
        clock). Returns False when the worker row is gone (retired, or removed by an
        operator): the worker must register again."""
        now_ms, _ = self._commit_time()
        with self.maintenance_transaction("renew_lease") as cur:
            cur.execute(
                "UPDATE workers SET heartbeat_epoch_ms=?, lease_expires_epoch_ms=? WHERE worker_id=?",
                (now_ms, now_ms + int(lease_seconds * 1000), worker_id),
            )
            return cur.rowcount == 1

    def store_time(self) -> datetime:
        """Now on the store's clock (aware UTC, milliseconds): this host's, the host
        every process on a SQLite file shares (``docs/semantics.md``, "One clock")."""
        return self._commit_time()[1]

    def retire_worker(self, worker_id: str) -> None:
        """End a worker's lease at once (its executions become claimable)."""
        with self.maintenance_transaction("retire_worker") as cur:
            cur.execute(
                "UPDATE workers SET lease_expires_epoch_ms=0 WHERE worker_id=?", (worker_id,)
            )

    def claim_execution(
        self, execution_id: str, worker_id: str, *, runs: RunnableSpecs | None = None
    ) -> int | None:
        """Make ``worker_id`` the owner of an active execution whose owner is none,
        itself, or a worker whose lease has passed — and, with ``runs``, whose spec
        that machine runs (``docs/scale-out.md``, "Rolling upgrades"); the fencing
        token rises by one. Returns the new token, or ``None`` when a live worker owns
        it, it is not active, ``runs`` does not run it, or ``worker_id``'s own lease
        is not valid."""
        now_ms, _ = self._commit_time()
        spec, params = ("1", []) if runs is None else runs_sql(spec_keys((runs,)))
        with self.maintenance_transaction("claim_execution") as cur:
            row = cur.execute(
                "UPDATE executions SET owner_id=?, fence=fence+1 WHERE execution_id=? AND active=1"
                " AND (owner_id IS NULL OR owner_id=? OR NOT EXISTS (SELECT 1 FROM workers o"
                " WHERE o.worker_id = executions.owner_id AND o.lease_expires_epoch_ms >= ?))"
                f" AND {spec} AND {LEASE_OK} RETURNING fence",
                (worker_id, execution_id, worker_id, now_ms, *params, worker_id, now_ms),
            ).fetchone()
        return None if row is None else int(row[0])

    def claim_executions(
        self,
        machines: tuple[Claimable, ...],
        worker_id: str,
        *,
        limit: int,
        new_first: bool = False,
        waiting_only: bool = False,
    ) -> list[tuple[str, str, int]]:
        """Claim up to ``limit`` active executions with no live owner that ``machines``
        run (a name: every spec of it; a
        :class:`~phronomy_fsm.durable.claims.RunnableSpecs`: the specs it runs) for
        ``worker_id`` in one write transaction (writers are serialised, so racing
        workers take disjoint sets); ``[(execution_id, machine, new fencing token)]``,
        in claim order (:data:`CLAIM_ORDER`: those that were running before those
        that wait; with ``new_first``, executions nobody ever claimed before both);
        ``waiting_only``: only executions that wait (a worker takes those in large
        batches: they use none of its capacity). Empty when ``worker_id``'s own lease
        is not valid."""
        if not machines or limit <= 0:
            return []
        keys = spec_keys(machines)
        now_ms, _ = self._commit_time()
        among, names = machines_sql(keys)
        runs, params = runs_sql(keys)
        claimed: list[tuple[str, str, int]] = []
        with self.maintenance_transaction("claim_executions") as cur:
            rows = cur.execute(
                f"SELECT execution_id, machine FROM executions WHERE active=1 AND {among}"
                f" AND {NO_LIVE_OWNER} AND {runs} AND {LEASE_OK}"
                f"{WAITING_ONLY if waiting_only else ''}"
                f" ORDER BY {CLAIM_ORDER[new_first]}, created_epoch_ms, execution_id LIMIT ?",
                (*names, now_ms, *params, worker_id, now_ms, int(limit)),
            ).fetchall()
            for eid, machine in rows:
                (fence,) = cur.execute(
                    "UPDATE executions SET owner_id=?, fence=fence+1 WHERE execution_id=?"
                    " RETURNING fence",
                    (worker_id, eid),
                ).fetchone()
                claimed.append((eid, machine, int(fence)))
        return claimed

    # ------------------------------------------------------------------ agents

    def register_agent(self, agent_id: str) -> bool:
        """Record agent ``agent_id``; False when it exists already (nothing written).
        Raises StorageError."""
        now_ms, _ = self._commit_time()
        with self.maintenance_transaction("register_agent") as cur:
            row = cur.execute(
                "INSERT INTO agents(agent_id, created_epoch_ms, body) VALUES (?, ?, '{}')"
                " ON CONFLICT(agent_id) DO NOTHING RETURNING agent_id",
                (agent_id, now_ms),
            ).fetchone()
        return row is not None

    def register_machine(self, record: MachineRecord) -> None:
        """Keep a machine's compiled table (once per spec sha256; idempotent)."""
        with self.maintenance_transaction("register_machine") as cur:
            cur.execute(
                "INSERT INTO machines(machine, spec_sha256, body, registered_epoch_ms)"
                " VALUES (?,?,?,?) ON CONFLICT DO NOTHING",
                (
                    record.machine,
                    record.spec_sha256,
                    to_json(record),
                    datetime_to_epoch_ms(record.registered_at),
                ),
            )


__all__ = ["SqliteWrites"]
