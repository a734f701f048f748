"""Reads of the SQLite barrier store: loads, listings, journal, barrier log, reconcile.

Owns the reader side of :class:`~phronomy_fsm.store.sqlite.SqliteBarrierStore`: one
``query_only`` connection per thread (WAL readers never block the writer), snapshot
reads across several statements, decoding of stored bodies, and the read-back of
reference §4.4 reconciliation. It never writes. Mixed into the store class; relies on
its ``path``, ``_uri``, ``_closed``, ``_connect``, ``_local``, ``_readers`` and
``_readers_lock``.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from phronomy_fsm.durable.records import DurableCommit
from phronomy_fsm.errors import NotFoundError, StorageError
from phronomy_fsm.store._sqlerrors import storage_error
from phronomy_fsm.store.base import COMMITTED, CONFLICT, NOT_COMMITTED
from phronomy_fsm.store.records import (
    AgentRecord,
    BarrierCommit,
    BarrierRecord,
    ExecutionRecord,
    JournalRecord,
    epoch_ms_to_datetime,
    from_json,
    to_json,
)
from phronomy_fsm.store.schema import BARRIER_CHAIN


class SqliteReads:
    """The read methods of the SQLite store (see the module docstring)."""

    path: str
    _uri: str
    _closed: bool
    _local: threading.local
    _readers: list[sqlite3.Connection]
    _readers_lock: threading.Lock

    def _connect(self, uri: str) -> sqlite3.Connection:  # provided by the store
        raise NotImplementedError

    def _reader(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            if self._closed:
                raise StorageError(f"the store {self.path} is closed", path=self.path)
            conn = self._connect(self._uri)
            conn.execute("PRAGMA query_only=1")
            self._local.conn = conn
            with self._readers_lock:
                self._readers.append(conn)
        return conn

    @contextmanager
    def _reading(self, operation: str, *, snapshot: bool = False) -> Iterator[sqlite3.Connection]:
        """A reader connection; sqlite3 errors become StorageError. ``snapshot`` wraps
        the block in one read transaction (a consistent view across statements)."""
        if self._closed:
            raise StorageError(f"the store {self.path} is closed", path=self.path)
        try:
            conn = self._reader()
            if snapshot:
                conn.execute("BEGIN")
            try:
                yield conn
            finally:
                if snapshot and conn.in_transaction:
                    conn.execute("COMMIT")
        except sqlite3.Error as exc:
            raise storage_error(exc, operation=operation, path=self.path) from exc

    def load_agent(self, agent_id: str) -> AgentRecord:
        """The stored agent root. Raises NotFoundError, SerializationError, StorageError."""
        with self._reading("load_agent") as conn:
            row = conn.execute("SELECT body FROM agents WHERE agent_id=?", (agent_id,)).fetchone()
        if row is None:
            raise NotFoundError(f"agent {agent_id} does not exist", agent_id=agent_id)
        return from_json(AgentRecord, row[0])

    def list_agents(self) -> list[AgentRecord]:
        """Every agent root by ``agent_id``. Raises SerializationError, StorageError."""
        with self._reading("list_agents") as conn:
            rows = conn.execute("SELECT body FROM agents ORDER BY agent_id").fetchall()
        return [from_json(AgentRecord, body) for (body,) in rows]

    def load_execution(self, execution_id: str) -> ExecutionRecord:
        """The stored execution. Raises NotFoundError, SerializationError, StorageError."""
        with self._reading("load_execution") as conn:
            row = conn.execute(
                "SELECT body FROM executions WHERE execution_id=?", (execution_id,)
            ).fetchone()
        if row is None:
            raise NotFoundError(
                f"execution {execution_id} does not exist", execution_id=execution_id
            )
        return from_json(ExecutionRecord, row[0])

    def list_executions(
        self,
        *,
        agent_id: str | None = None,
        status: str | None = None,
        active: bool | None = None,
        limit: int | None = None,
        offset: int = 0,
    ) -> list[ExecutionRecord]:
        """Executions matching every given filter, by creation time then id.

        ``status`` is a status value (``"completed"``...); ``limit=None`` means all.
        Raises SerializationError, StorageError.
        """
        where: list[str] = []
        params: list[Any] = []
        if agent_id is not None:
            where.append("exclusive_key = ?")
            params.append(agent_id)
        if status is not None:
            where.append("status = ?")
            params.append(str(getattr(status, "value", status)))
        if active is not None:
            where.append("active = ?")
            params.append(1 if active else 0)
        sql = "SELECT body FROM executions"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY created_epoch_ms, execution_id LIMIT ? OFFSET ?"
        params += [-1 if limit is None else int(limit), int(offset)]
        with self._reading("list_executions") as conn:
            rows = conn.execute(sql, params).fetchall()
        return [from_json(ExecutionRecord, body) for (body,) in rows]

    def active_executions(self, agent_id: str | None = None) -> list[ExecutionRecord]:
        """Executions in preparing/active/suspended, optionally of one agent
        (the recovery scan, reference §6.1)."""
        return self.list_executions(agent_id=agent_id, active=True)

    def read_journal(
        self,
        agent_id: str,
        *,
        after: int = 0,
        limit: int | None = None,
        execution_id: str | None = None,
    ) -> list[JournalRecord]:
        """Journal records of ``agent_id`` with ``sequence > after``, in order; only
        those of ``execution_id`` when given. Raises SerializationError, StorageError."""
        sql = "SELECT body FROM journal WHERE agent_id = ? AND sequence > ?"
        params: list[Any] = [agent_id, int(after)]
        if execution_id is not None:
            sql += " AND execution_id = ?"
            params.append(execution_id)
        sql += " ORDER BY sequence LIMIT ?"
        params.append(-1 if limit is None else int(limit))
        with self._reading("read_journal") as conn:
            rows = conn.execute(sql, params).fetchall()
        return [from_json(JournalRecord, body) for (body,) in rows]

    def execution_journal(self, execution_id: str) -> list[JournalRecord]:
        """Every journal record written by ``execution_id`` (any agent), by sequence."""
        with self._reading("execution_journal") as conn:
            rows = conn.execute(
                "SELECT body FROM journal WHERE execution_id = ? ORDER BY agent_id, sequence",
                (execution_id,),
            ).fetchall()
        return [from_json(JournalRecord, body) for (body,) in rows]

    def barrier_history(self, execution_id: str) -> list[BarrierRecord]:
        """The barrier log of ``execution_id`` by revision (empty when unknown), found
        by walking its chain back from ``executions.last_barrier_seq`` (``schema.py``)."""
        with self._reading("barrier_history") as conn:
            rows = conn.execute(
                f"{BARRIER_CHAIN} SELECT execution_id, revision, barrier, committed_epoch_ms,"
                " digest, status, state FROM barriers WHERE seq IN (SELECT seq FROM chain)"
                " ORDER BY revision",
                (execution_id,),
            ).fetchall()
        return [
            BarrierRecord(eid, rev, barrier, epoch_ms_to_datetime(ms), dig, status, phase)
            for eid, rev, barrier, ms, dig, status, phase in rows
        ]

    def reconcile(self, commit: BarrierCommit) -> str:
        """Classify an uncertain commit by reading back (reference §4.4, issue 4 item 6).

        Returns :data:`COMMITTED` when the stored execution is at
        ``commit.execution.revision`` with byte-identical canonical JSON;
        :data:`NOT_COMMITTED` when it is absent (creating commit) or still at
        ``commit.expected_revision``; :data:`CONFLICT` otherwise.

        Raises:
            StorageError: the read failed (the caller must fail closed).
            SerializationError: ``commit`` cannot be encoded.
        """
        if type(commit) is DurableCommit:
            return self.reconcile_durable(commit)  # type: ignore[attr-defined,no-any-return]
        intended = to_json(commit.execution)
        with self._reading("reconcile") as conn:
            row = conn.execute(
                "SELECT revision, body FROM executions WHERE execution_id=?",
                (commit.execution.execution_id,),
            ).fetchone()
        if row is None:
            return NOT_COMMITTED if commit.expected_revision is None else CONFLICT
        revision, body = row
        if revision == commit.execution.revision and body == intended:
            return COMMITTED
        if commit.expected_revision is not None and revision == commit.expected_revision:
            return NOT_COMMITTED
        return CONFLICT
