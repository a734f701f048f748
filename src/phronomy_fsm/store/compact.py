"""Retention for the SQLite barrier store (issue 4 item 9).

Owns the compaction policy behind ``phronomy-fsm store compact``:

- **Eligible**: executions that are not active (a terminal status, reference §2.2)
  whose last commit (``updated_epoch_ms``, the store's commit time) is older than
  ``older_than_days``. Active executions (preparing/active/suspended) are never
  touched, however old, and neither is a ``handed_off`` execution whose target
  execution does not exist yet: it is the only durable record of a handoff that
  recovery must still start (docs/operations.md, "Handoffs after a crash").
- **Removed**: the execution row and its barrier-log rows, in chunks of
  :data:`CHUNK` executions, each chunk one ``BEGIN IMMEDIATE`` transaction. A row is
  only deleted if it is still inactive and at the revision that was selected (and,
  with an archive, copied).
- **Journal**: kept, always. The journal belongs to the agent (reference §2.7): its
  sequences are the agent's ``journal_head`` watermark and its context; deleting an
  execution's records would leave gaps that readers and the head CAS rely on. Journal
  records of removed executions keep their ``execution_id``; ``executions show`` of a
  removed execution reports "not found". The report counts them.
- **Archive** (optional): before deleting, the rows are copied (upsert, so a re-run is
  idempotent) into a separate SQLite file created with owner-only permissions, with
  tables ``executions``, ``barriers`` and ``journal`` (a copy of the removed
  executions' journal records), via sqlite-utils. The archive is committed before the
  store's delete, so a crash in between leaves the rows in both places, never in none.
- **WAL**: finally ``PRAGMA wal_checkpoint(TRUNCATE)`` so the WAL file shrinks to zero
  (when no reader holds an old snapshot; the report says if it was busy).
"""

from __future__ import annotations

import os
import sqlite3
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlite_utils

from phronomy_fsm.errors import StorageError
from phronomy_fsm.store._sqlerrors import storage_error
from phronomy_fsm.store.base import CompactReport
from phronomy_fsm.store.schema import BARRIER_CHAIN

if TYPE_CHECKING:
    from phronomy_fsm.store.sqlite import SqliteBarrierStore

#: Executions removed per write transaction.
CHUNK = 500

_EXECUTION_COLUMNS = "execution_id, machine, exclusive_key, parent_execution_id, revision, status, state, active, spec_sha256, body, created_epoch_ms, updated_epoch_ms"
_BARRIER_COLUMNS = "execution_id, revision, barrier, committed_epoch_ms, digest, status, state"
_JOURNAL_COLUMNS = "agent_id, sequence, record_id, execution_id, kind, body"


#: Terminal executions whose last commit is older than the cutoff (one ``?``).
_ELIGIBLE = "e.active = 0 AND e.updated_epoch_ms < ?"
#: A handed-off execution whose target execution has not been admitted yet.
_PENDING_HANDOFF = (
    "e.status = 'handed_off'"
    " AND json_extract(e.body, '$.metadata.handoff.target_execution_id') IS NOT NULL"
    " AND NOT EXISTS (SELECT 1 FROM executions t WHERE t.execution_id ="
    " json_extract(e.body, '$.metadata.handoff.target_execution_id'))"
)


def _open_archive(path: str, store_path: str) -> sqlite_utils.Database:
    target = Path(path).absolute()
    if target == Path(store_path):
        raise StorageError("the archive must be a different file from the store", path=path)
    if target.exists():
        with open(target, "rb") as fh:
            header = fh.read(16)
        if header and header != b"SQLite format 3\x00":
            raise StorageError(f"the archive {path} exists and is not a SQLite database", path=path)
    else:
        fd = os.open(target, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        os.fchmod(fd, 0o600)
        os.close(fd)
    db = sqlite_utils.Database(str(target), execute_plugins=False)
    db.execute(f"PRAGMA busy_timeout={5000}")
    if not db["executions"].exists():
        with db.atomic():
            db.execute(
                f"CREATE TABLE IF NOT EXISTS executions ({_EXECUTION_COLUMNS}, PRIMARY KEY (execution_id))"
            )
            db.execute(
                f"CREATE TABLE IF NOT EXISTS barriers ({_BARRIER_COLUMNS}, PRIMARY KEY (execution_id, revision))"
            )
            db.execute(
                f"CREATE TABLE IF NOT EXISTS journal ({_JOURNAL_COLUMNS}, PRIMARY KEY (agent_id, sequence))"
            )
    return db


def _barrier_seqs(conn: sqlite3.Connection | sqlite3.Cursor, execution_id: str) -> list[tuple[int]]:
    """The ``seq`` of every barrier-log row of ``execution_id`` (its chain)."""
    return conn.execute(f"{BARRIER_CHAIN} SELECT seq FROM chain", (execution_id,)).fetchall()


def _barrier_rows(conn: sqlite3.Connection, execution_id: str) -> list[dict[str, Any]]:
    """The barrier-log rows of ``execution_id`` (its chain) as column dicts."""
    return _dicts(
        conn.execute(
            f"{BARRIER_CHAIN} SELECT {_BARRIER_COLUMNS} FROM barriers"
            " WHERE seq IN (SELECT seq FROM chain)",
            (execution_id,),
        )
    )


def _rows(conn: sqlite3.Connection, sql: str, ids: list[str]) -> list[dict[str, Any]]:
    marks = ",".join("?" * len(ids))
    return _dicts(conn.execute(sql.format(marks=marks), ids))


def _dicts(cur: sqlite3.Cursor) -> list[dict[str, Any]]:
    """The rows of an executed query as column-name dicts."""
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row)) for row in cur.fetchall()]


def compact_store(
    store: SqliteBarrierStore, *, older_than_days: float, archive_path: str | None, now: datetime
) -> CompactReport:
    """Apply the module's policy to ``store``.

    Args:
        store: an open, writable SqliteBarrierStore.
        older_than_days: age threshold in days (≥ 0; fractions allowed).
        archive_path: copy removed rows to this SQLite file first, or ``None``.
        now: the current time (timezone-aware).

    Returns:
        A :class:`CompactReport`.

    Raises:
        ValueError: ``older_than_days`` is negative.
        StorageError: a read, write, archive or checkpoint failed; chunks committed
            before the failure stay committed (compaction is idempotent, re-run it).
    """
    if older_than_days < 0:
        raise ValueError("older_than_days must not be negative")
    cutoff = now - timedelta(days=older_than_days)
    from phronomy_fsm.store.records import datetime_to_epoch_ms

    cutoff_ms = datetime_to_epoch_ms(cutoff)
    with store._reading("compact") as conn:
        candidates = conn.execute(
            f"SELECT execution_id, revision FROM executions e WHERE {_ELIGIBLE}"
            f" AND NOT ({_PENDING_HANDOFF}) ORDER BY execution_id",
            (cutoff_ms,),
        ).fetchall()
        kept_handoffs = conn.execute(
            f"SELECT count(*) FROM executions e WHERE {_ELIGIBLE} AND {_PENDING_HANDOFF}",
            (cutoff_ms,),
        ).fetchone()[0]
    archive = None
    removed = removed_barriers = archived = kept_journal = 0
    try:
        if archive_path and candidates:
            archive = _open_archive(archive_path, store.path)
        for start in range(0, len(candidates), CHUNK):
            chunk = candidates[start : start + CHUNK]
            ids = [eid for eid, _ in chunk]
            if archive is not None:
                archived += _archive_chunk(store, archive, ids)
            with store._write_transaction("compact") as cur:
                for eid, revision in chunk:
                    seqs = _barrier_seqs(cur, eid)  # the chain starts at the execution row
                    cur.execute(
                        "DELETE FROM executions WHERE execution_id = ? AND revision = ? AND active = 0"
                        " AND updated_epoch_ms < ?",
                        (eid, revision, cutoff_ms),
                    )
                    if cur.rowcount == 1:
                        removed += 1
                        cur.executemany("DELETE FROM barriers WHERE seq = ?", seqs)
                        removed_barriers += len(seqs)
                        row = cur.execute(
                            "SELECT count(*) FROM journal WHERE execution_id = ?", (eid,)
                        ).fetchone()
                        kept_journal += row[0]
    except (sqlite3.Error, OSError) as exc:
        raise storage_error(exc, operation="compact", path=store.path) from exc
    finally:
        if archive is not None:
            archive.close()
    checkpoint = store.checkpoint("TRUNCATE")
    return CompactReport(
        cutoff=cutoff,
        removed_executions=removed,
        removed_barriers=removed_barriers,
        archived_executions=archived,
        archive_path=str(Path(archive_path).absolute()) if archive_path else None,
        kept_journal_records=kept_journal,
        wal_checkpoint=checkpoint,
        kept_pending_handoffs=kept_handoffs,
    )


def _archive_chunk(
    store: SqliteBarrierStore, archive: sqlite_utils.Database, ids: list[str]
) -> int:
    with store._reading("compact archive", snapshot=True) as conn:
        executions = _rows(
            conn,
            f"SELECT {_EXECUTION_COLUMNS} FROM executions WHERE execution_id IN ({{marks}})",
            ids,
        )
        barriers = [row for eid in ids for row in _barrier_rows(conn, eid)]
        journal = _rows(
            conn, f"SELECT {_JOURNAL_COLUMNS} FROM journal WHERE execution_id IN ({{marks}})", ids
        )
    with archive.atomic():
        archive.table("executions").upsert_all(executions, pk="execution_id")
        archive.table("barriers").upsert_all(barriers, pk=("execution_id", "revision"))
        archive.table("journal").upsert_all(journal, pk=("agent_id", "sequence"))
    return len(executions)
