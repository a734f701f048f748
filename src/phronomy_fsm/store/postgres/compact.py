"""Retention for the PostgreSQL store: :class:`PostgresCompaction` (``PostgresStore.compact``) and ``phronomy-fsm
store compact --db postgresql://...`` (``docs/store.md``, "Compaction").

The policy is the SQLite store's (:mod:`phronomy_fsm.store.compact`): finished
executions older than the cutoff (or their machine's own, ``keep_days``) are removed
with their barrier log, journal entries and signals, in chunks of
:data:`~phronomy_fsm.store.compact.CHUNK`, each one transaction; never an active
execution, a finished one whose parent is active or that has an active child, or a
handoff not started yet. A row is deleted only if it is still finished at the revision
selected, so compaction may run while workers commit, and two workers compacting at
once remove each execution once. With an archive, each chunk is copied into the
SQLite archive file, and committed there, before its delete here.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from phronomy_fsm.durable.codec import epoch_ms_to_datetime
from phronomy_fsm.store.compact import (
    ARCHIVE_TABLES,
    CHUNK,
    CompactReport,
    check_policy,
    cutoff_sql,
    open_archive,
)

if TYPE_CHECKING:
    import sqlite_utils


_OLD_AND_FINISHED = "NOT e.active AND e.updated_epoch_ms < {cutoff}"
_PARENT_ACTIVE = (
    "e.parent_execution_id IS NOT NULL AND EXISTS (SELECT 1 FROM executions p"
    " WHERE p.execution_id = e.parent_execution_id AND p.active)"
)
_CHILD_ACTIVE = (
    "EXISTS (SELECT 1 FROM executions c WHERE c.parent_execution_id = e.execution_id AND c.active)"
)
_HANDOFF_TARGET = "(e.body::jsonb #>> '{context,handoff,target_execution_id}')"
_PENDING_HANDOFF = (
    f"e.machine = 'agent_session' AND e.state = 'handed_off' AND {_HANDOFF_TARGET} IS NOT NULL"
    f" AND NOT EXISTS (SELECT 1 FROM executions t WHERE t.execution_id = {_HANDOFF_TARGET})"
)


class PostgresCompaction:
    """``PostgresStore.compact``, mixed into the store class (whose ``_reading`` and
    ``_writing`` run a function on a pooled connection, as in
    :mod:`phronomy_fsm.store.postgres._reads`)."""

    path: str
    read_only: bool

    def _reading(self, operation: str, fn: Callable[[Any], Any]) -> Any:  # from the store
        raise NotImplementedError

    def _writing(  # from the store
        self, operation: str, fn: Callable[[Any], Any], *, execution_id: str | None = None
    ) -> Any:
        raise NotImplementedError

    def server_time_ms(self) -> int:  # from the store's reads
        raise NotImplementedError

    def compact(
        self,
        *,
        older_than_days: float,
        archive_path: str | os.PathLike[str] | None = None,
        now: datetime | None = None,
        keep_days: Mapping[str, float] | None = None,
    ) -> CompactReport:
        """Remove (after copying them to ``archive_path`` when given) finished
        executions whose last commit is older than ``older_than_days`` days (or the
        days ``keep_days`` gives their machine), with their barrier log, journal
        entries and signals (module docstring; ``docs/store.md``, "Compaction").
        Concurrency: any thread and any number of processes; commits of running
        executions go on meanwhile.

        Args:
            older_than_days: age threshold in days (≥ 0; fractions allowed).
        archive_path: copy what is removed to this SQLite file first, or ``None``.
        now: the current time (timezone-aware; default: the server's clock, which
            stamped the commits).
        keep_days: machine name -> its own threshold in days (≥ 0).

        Returns:
            A :class:`~phronomy_fsm.store.compact.CompactReport` (``wal_checkpoint`` is
            ``None``: PostgreSQL's own VACUUM reclaims the space).

        Raises:
            ValueError: a threshold is negative.
            StorageError: a read, write or the archive failed, or the store is
                read-only; chunks committed before the failure stay committed (run it
                again).
        """
        keep = check_policy(older_than_days, keep_days)
        if now is None:
            now = epoch_ms_to_datetime(self.server_time_ms())
        if self.read_only:
            from phronomy_fsm.errors import StorageError

            raise StorageError(f"the store {self.path} was opened read-only", path=self.path)
        expression, params = cutoff_sql(now, older_than_days, keep, "%s")
        old = _OLD_AND_FINISHED.format(cutoff=expression)
        kept = (_PARENT_ACTIVE, _CHILD_ACTIVE, _PENDING_HANDOFF)

        def select(cur: Any) -> tuple[list[tuple[str, int]], list[int]]:
            cur.execute(
                f"SELECT execution_id, revision FROM executions e WHERE {old}"
                + "".join(f" AND NOT ({condition})" for condition in kept)
                + " ORDER BY execution_id",
                params,
            )
            rows = [(str(eid), int(rev)) for eid, rev in cur.fetchall()]
            counts = []
            for condition in kept:
                cur.execute(
                    f"SELECT count(*) FROM executions e WHERE {old} AND {condition}", params
                )
                counts.append(int(cur.fetchone()[0]))
            return rows, counts

        candidates, (kept_parent, kept_child, kept_handoffs) = self._reading("compact", select)
        archive = None
        removed = barriers = journal = signals = archived = 0
        try:
            if archive_path is not None and candidates:
                archive = open_archive(archive_path, self.path)
            for start in range(0, len(candidates), CHUNK):
                chunk = candidates[start : start + CHUNK]
                if archive is not None:
                    archived += _archive_chunk(self, archive, [eid for eid, _ in chunk])
                counts: tuple[int, int, int, int] = self._writing(
                    "compact", functools.partial(_delete, chunk=chunk)
                )
                removed += counts[0]
                barriers += counts[1]
                journal += counts[2]
                signals += counts[3]
        finally:
            if archive is not None:
                archive.close()
        return CompactReport(
            cutoff=now - timedelta(days=older_than_days),
            removed_executions=removed,
            removed_barriers=barriers,
            removed_journal_entries=journal,
            removed_signals=signals,
            archived_executions=archived,
            archive_path=None if archive_path is None else str(Path(archive_path).absolute()),
            kept_parent_active=kept_parent,
            kept_child_active=kept_child,
            kept_pending_handoffs=kept_handoffs,
            wal_checkpoint=None,
            keep_days=keep,
        )


def _delete(cur: Any, chunk: list[tuple[str, int]]) -> tuple[int, int, int, int]:
    """Delete each execution of ``chunk`` still finished at its selected revision, and
    its rows, set-wise (four statements a chunk); returns the counts (executions,
    barriers, journal entries, signals). Run in one transaction (and again, whole,
    after a broken connection)."""
    cur.execute(
        "DELETE FROM executions e USING unnest(%s::text[], %s::bigint[]) AS c(id, rev)"
        " WHERE e.execution_id = c.id AND e.revision = c.rev AND NOT e.active"
        " RETURNING e.execution_id",
        ([eid for eid, _ in chunk], [revision for _, revision in chunk]),
    )
    # the others moved on, or another compaction took them
    gone = [row[0] for row in cur.fetchall()]
    if not gone:
        return 0, 0, 0, 0
    counts = [len(gone)]
    for table in ("barriers", "execution_journal", "signals"):
        cur.execute(f"DELETE FROM {table} WHERE execution_id = ANY(%s)", (gone,))
        counts.append(cur.rowcount)
    return counts[0], counts[1], counts[2], counts[3]


def _archive_chunk(
    store: PostgresCompaction, archive: sqlite_utils.Database, ids: list[str]
) -> int:
    """Copy the rows of executions ``ids`` into ``archive`` in one transaction;
    returns how many executions were copied. (The executions are finished: nothing
    writes their rows between the reads.)"""

    def read(cur: Any) -> dict[str, list[dict[str, Any]]]:
        rows: dict[str, list[dict[str, Any]]] = {}
        for table, (columns, _key) in ARCHIVE_TABLES.items():
            cur.execute(f"SELECT {columns} FROM {table} WHERE execution_id = ANY(%s)", (ids,))
            names = [d[0] for d in cur.description]
            rows[table] = [
                {n: (int(v) if isinstance(v, bool) else v) for n, v in zip(names, row)}
                for row in cur.fetchall()
            ]
        return rows

    rows = store._reading("compact (archive)", read)
    with archive.atomic():
        for table, (_columns, key) in ARCHIVE_TABLES.items():
            if rows[table]:
                archive.table(table).upsert_all(rows[table], pk=key, alter=True)
    return len(rows["executions"])


__all__ = ["PostgresCompaction"]
