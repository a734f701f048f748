"""Retention: ``phronomy-fsm store compact`` (``docs/store.md``, "Compaction") — the
policy both stores follow, :class:`CompactReport`, the archive, and the SQLite store's
compaction (the PostgreSQL store's is :mod:`phronomy_fsm.store.postgres.compact`).

The policy:

- **Eligible**: finished executions (``completed``, ``failed``, ``cancelled``) whose
  last commit (``updated_epoch_ms``, the store's commit time) is older than
  ``older_than_days`` days — or, for a machine named in ``keep_days``, older than its
  own number of days (keep an agent's conversations a year, its tool calls a week).
- **Never removed**, however old: an active execution (``running``, ``waiting``,
  ``recovery_required``); a finished execution whose **parent is active** (the parent
  may still read it: a tool call of a running agent session); a finished execution
  with an **active child** (the child still reports to it); and a finished
  ``agent_session`` execution that ended ``handed_off`` while its target execution
  does not exist yet — it is the only durable record of a handoff that loading the
  target agent must still start (``docs/agent.md``). The report counts each kind.
- **Removed with it**: its barrier-log rows, its journal entries, and its signals —
  the consumed ones, and any still pending, which nothing can consume any more (the
  execution has finished). Executions are removed in chunks of :data:`CHUNK`, each
  chunk one ``BEGIN IMMEDIATE`` transaction; a row is deleted only if it is still
  finished at the revision that was selected (and archived). The registered agents,
  workers and machines are kept. An agent's conversation history is the journal of
  its finished executions, so compaction also shortens what later executions of the
  agent see.
- **Archive** (optional): before deleting a chunk, its rows are copied (upserted, so a
  re-run is idempotent) into a separate SQLite file created owner-only, with the
  tables ``executions``, ``barriers``, ``execution_journal`` and ``signals`` holding
  the same columns and canonical JSON bodies as the store (decode them with
  :func:`phronomy_fsm.durable.records.from_json`). The archive is committed before the
  store's delete, so a crash in between leaves the rows in both places, never in none.
  An archive is a plain SQLite file: opening it as a store is refused.
- **WAL** (SQLite): finally ``PRAGMA wal_checkpoint(TRUNCATE)``, so the WAL file shrinks to zero
  when no reader holds an old snapshot (the report says whether it was busy).
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Mapping
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import sqlite_utils

from phronomy_fsm.durable.codec import datetime_to_epoch_ms
from phronomy_fsm.errors import StorageError
from phronomy_fsm.store._files import create_database_file, raise_mark_floor
from phronomy_fsm.store._sqlerrors import storage_error
from phronomy_fsm.store.schema import BARRIER_CHAIN

if TYPE_CHECKING:
    from phronomy_fsm.store.sqlite import SqliteBarrierStore

#: Executions removed per write transaction.
CHUNK = 500

#: The archive's tables: name → (columns copied from the store's table, primary key).
ARCHIVE_TABLES: dict[str, tuple[str, tuple[str, ...]]] = {
    "executions": (
        (
            "execution_id, machine, exclusive_key, parent_execution_id, revision, status,"
            " state, active, spec_sha256, body, created_epoch_ms, updated_epoch_ms,"
            " deadline_epoch_ms"
        ),
        ("execution_id",),
    ),
    "barriers": (
        "execution_id, revision, barrier, committed_epoch_ms, digest, status, state",
        ("execution_id", "revision"),
    ),
    "execution_journal": (
        "execution_id, revision, position, kind, body",
        ("execution_id", "revision", "position"),
    ),
    "signals": (
        (
            "seq, signal_id, execution_id, kind, event, body, created_epoch_ms,"
            " consumed_revision, outcome"
        ),
        ("signal_id",),
    ),
}

#: Finished executions whose last commit is older than the cutoff (the cutoff's
#: expression: :func:`cutoff_sql`).
_OLD_AND_FINISHED = "e.active = 0 AND e.updated_epoch_ms < {cutoff}"
#: ... whose parent is still active.
_PARENT_ACTIVE = (
    "e.parent_execution_id IS NOT NULL AND EXISTS (SELECT 1 FROM executions p"
    " WHERE p.execution_id = e.parent_execution_id AND p.active = 1)"
)
#: ... that have a child still active.
_CHILD_ACTIVE = (
    "EXISTS (SELECT 1 FROM executions c WHERE c.parent_execution_id = e.execution_id"
    " AND c.active = 1)"
)
#: ... an agent session that handed off to an execution not started yet.
_HANDOFF_TARGET = "json_extract(e.body, '$.context.handoff.target_execution_id')"
_PENDING_HANDOFF = (
    f"e.machine = 'agent_session' AND e.state = 'handed_off' AND {_HANDOFF_TARGET} IS NOT NULL"
    f" AND NOT EXISTS (SELECT 1 FROM executions t WHERE t.execution_id = {_HANDOFF_TARGET})"
)


@attrs.frozen
class CompactReport:
    """What :func:`compact_store` did (``SqliteBarrierStore.compact``).

    Attributes:
        cutoff: finished executions whose last commit is older than this (UTC) were
            eligible.
        removed_executions: executions deleted from the store.
        removed_barriers / removed_journal_entries / removed_signals: their
            barrier-log rows, journal entries and signals deleted with them.
        archived_executions: executions copied to ``archive_path`` (0 without one).
        archive_path: the archive file (absolute), or ``None``.
        kept_parent_active: eligible executions kept because their parent is active.
        kept_child_active: eligible executions kept because a child is active.
        kept_pending_handoffs: eligible ``handed_off`` agent sessions kept because
            their target execution does not exist yet.
        wal_checkpoint: ``(busy, wal_frames, checkpointed_frames)`` of the final
            ``wal_checkpoint(TRUNCATE)``; ``busy == 1`` means a reader prevented the
            truncation (a later checkpoint truncates it). ``None`` on PostgreSQL.
        keep_days: the machines kept longer, and for how many days.
    """

    cutoff: datetime
    removed_executions: int
    removed_barriers: int
    removed_journal_entries: int
    removed_signals: int
    archived_executions: int
    archive_path: str | None
    kept_parent_active: int
    kept_child_active: int
    kept_pending_handoffs: int
    wal_checkpoint: tuple[int, int, int] | None
    keep_days: dict[str, float] = attrs.field(factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (the cutoff as ISO 8601, the checkpoint as a list)."""
        data = attrs.asdict(self)
        data["cutoff"] = self.cutoff.isoformat()
        if self.wal_checkpoint is not None:
            data["wal_checkpoint"] = list(self.wal_checkpoint)
        return data


def check_policy(older_than_days: float, keep_days: Mapping[str, float] | None) -> dict[str, float]:
    """The policy's numbers checked; returns ``keep_days`` as a plain dict.

    Raises:
        ValueError: a negative number of days, or an empty machine name.
    """
    if older_than_days < 0:
        raise ValueError("older_than_days must not be negative")
    kept = dict(keep_days or {})
    for machine, days in kept.items():
        if not machine:
            raise ValueError("keep_days names an empty machine")
        if days < 0:
            raise ValueError(f"keep_days[{machine!r}] must not be negative")
    return kept


def cutoff_sql(
    now: datetime, older_than_days: float, keep_days: Mapping[str, float], mark: str
) -> tuple[str, list[Any]]:
    """The SQL expression of an execution's cutoff (epoch ms) under the policy, with
    its parameters: ``CASE e.machine WHEN m THEN cutoff_m ... ELSE cutoff END``;
    ``mark`` is the driver's placeholder (``?`` or ``%s``)."""
    default = datetime_to_epoch_ms(now - timedelta(days=older_than_days))
    if not keep_days:
        return mark, [default]
    params: list[Any] = []
    cases = []
    for machine, days in sorted(keep_days.items()):
        cases.append(f"WHEN {mark} THEN {mark}")
        params += [machine, datetime_to_epoch_ms(now - timedelta(days=days))]
    params.append(default)
    return f"(CASE e.machine {' '.join(cases)} ELSE {mark} END)", params


def open_archive(path: str | os.PathLike[str], store_path: str) -> sqlite_utils.Database:
    """The archive database (created owner-only when missing) with its tables.

    Raises:
        StorageError: it is the store itself, or an existing file that is not SQLite.
        OSError, sqlite3.Error: for the caller to map.
    """
    target = Path(path).absolute()
    if target == Path(store_path):
        raise StorageError("the archive must be a different file from the store", path=str(path))
    if not target.exists():
        # made by SQLite under a temporary name and linked in place: the file is never
        # opened outside SQLite (store/_files.py), and is owner-only from the start
        create_database_file(str(target), lambda conn: None, connect_timeout=5.0)
    db = sqlite_utils.Database(str(target), execute_plugins=False)
    try:
        db.execute("PRAGMA busy_timeout=5000")
        with db.atomic():
            for table, (columns, key) in ARCHIVE_TABLES.items():
                db.execute(
                    f"CREATE TABLE IF NOT EXISTS {table} ({columns}, PRIMARY KEY ({', '.join(key)}))"
                )
    except sqlite3.DatabaseError as exc:
        db.close()
        raise StorageError(
            f"the archive {path} cannot be used: {exc} (it exists and is not a SQLite "
            "database of archives?); nothing was removed",
            path=str(path),
        ) from exc
    return db


def _count(conn: sqlite3.Connection, old: str, params: list[Any], condition: str) -> int:
    row = conn.execute(
        f"SELECT count(*) FROM executions e WHERE {old} AND {condition}", params
    ).fetchone()
    return int(row[0])


def compact_store(
    store: SqliteBarrierStore,
    *,
    older_than_days: float,
    archive_path: str | os.PathLike[str] | None,
    now: datetime,
    keep_days: Mapping[str, float] | None = None,
) -> CompactReport:
    """Apply the module's policy to ``store``.

    Args:
        store: an open, writable :class:`~phronomy_fsm.store.sqlite.SqliteBarrierStore`.
        older_than_days: age threshold in days (≥ 0; fractions allowed).
        archive_path: copy what is removed to this SQLite file first, or ``None``.
        now: the current time (timezone-aware).
        keep_days: machine name -> its own threshold in days (≥ 0), instead of
            ``older_than_days``.

    Returns:
        A :class:`CompactReport`.

    Raises:
        ValueError: a threshold is negative.
        StorageError: a read, write, archive or checkpoint failed, the archive is the
            store itself or not a SQLite file, or the store is read-only; chunks
            committed before the failure stay committed (compaction is idempotent:
            run it again).

    Durability: each chunk is one committed transaction (archive first).
    """
    keep = check_policy(older_than_days, keep_days)
    if store.read_only:  # before anything is read or an archive created
        raise StorageError(f"the store {store.path} was opened read-only", path=store.path)
    cutoff = now - timedelta(days=older_than_days)
    expression, params = cutoff_sql(now, older_than_days, keep, "?")
    old = _OLD_AND_FINISHED.format(cutoff=expression)
    kept = (_PARENT_ACTIVE, _CHILD_ACTIVE, _PENDING_HANDOFF)
    with store.snapshot("compact") as conn:
        candidates = conn.execute(
            f"SELECT execution_id, revision FROM executions e WHERE {old}"
            + "".join(f" AND NOT ({condition})" for condition in kept)
            + " ORDER BY execution_id",
            params,
        ).fetchall()
        kept_parent, kept_child, kept_handoffs = (_count(conn, old, params, c) for c in kept)
    archive = None
    removed = barriers = journal = signals = archived = 0
    try:
        if archive_path is not None and candidates:
            archive = open_archive(archive_path, store.path)
        for start in range(0, len(candidates), CHUNK):
            chunk = candidates[start : start + CHUNK]
            if archive is not None:
                archived += _archive_chunk(store, archive, [eid for eid, _ in chunk])
            with store.maintenance_transaction("compact") as cur:
                raise_mark_floor(cur)  # the newest rows may go: the mark must not
                for eid, revision in chunk:
                    seqs = cur.execute(f"{BARRIER_CHAIN} SELECT seq FROM chain", (eid,)).fetchall()
                    cur.execute(
                        "DELETE FROM executions WHERE execution_id = ? AND revision = ?"
                        " AND active = 0",
                        (eid, revision),
                    )
                    if cur.rowcount != 1:
                        continue
                    removed += 1
                    cur.executemany("DELETE FROM barriers WHERE seq = ?", seqs)
                    barriers += len(seqs)
                    cur.execute("DELETE FROM execution_journal WHERE execution_id = ?", (eid,))
                    journal += cur.rowcount
                    cur.execute("DELETE FROM signals WHERE execution_id = ?", (eid,))
                    signals += cur.rowcount
    except (sqlite3.Error, OSError) as exc:
        raise storage_error(exc, operation="compact", path=store.path) from exc
    finally:
        if archive is not None:
            archive.close()
    checkpoint = store.checkpoint("TRUNCATE")
    return CompactReport(
        cutoff=cutoff,
        removed_executions=removed,
        removed_barriers=barriers,
        removed_journal_entries=journal,
        removed_signals=signals,
        archived_executions=archived,
        archive_path=None if archive_path is None else str(Path(archive_path).absolute()),
        kept_parent_active=kept_parent,
        kept_child_active=kept_child,
        kept_pending_handoffs=kept_handoffs,
        wal_checkpoint=checkpoint,
        keep_days=keep,
    )


def _dicts(cur: sqlite3.Cursor) -> list[dict[str, Any]]:
    """The rows of an executed query as column-name dicts."""
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row)) for row in cur.fetchall()]


def _archive_chunk(
    store: SqliteBarrierStore, archive: sqlite_utils.Database, ids: list[str]
) -> int:
    """Copy the rows of executions ``ids`` into ``archive`` in one transaction (read
    from one snapshot of the store); returns how many executions were copied."""
    marks = ",".join("?" * len(ids))
    rows: dict[str, list[dict[str, Any]]] = {}
    with store.snapshot("compact (archive)") as conn:
        for table in ("executions", "execution_journal", "signals"):
            columns = ARCHIVE_TABLES[table][0]
            rows[table] = _dicts(
                conn.execute(f"SELECT {columns} FROM {table} WHERE execution_id IN ({marks})", ids)
            )
        rows["barriers"] = [
            row
            for eid in ids
            for row in _dicts(
                conn.execute(
                    f"{BARRIER_CHAIN} SELECT {ARCHIVE_TABLES['barriers'][0]} FROM barriers"
                    " WHERE seq IN (SELECT seq FROM chain)",
                    (eid,),
                )
            )
        ]
    with archive.atomic():
        for table, (_columns, key) in ARCHIVE_TABLES.items():
            if rows[table]:
                archive.table(table).upsert_all(rows[table], pk=key, alter=True)
    return len(rows["executions"])


__all__ = [
    "ARCHIVE_TABLES",
    "CHUNK",
    "CompactReport",
    "check_policy",
    "compact_store",
    "cutoff_sql",
    "open_archive",
]
