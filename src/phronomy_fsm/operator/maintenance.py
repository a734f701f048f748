"""Store maintenance an operator runs: bringing a store file to this version's schema.

:func:`migrate_store` only reads the schema version and then opens the store, whose
own migrations (:mod:`phronomy_fsm.store.schema`, applied in one transaction by the
store when it is opened read-write) do the work; this module adds the checks an
operator needs first — the path is a SQLite file of this project, not a mistyped path,
an empty file or another program's database — and the before/after report
(``docs/operations.md``, "Upgrading a store").

Must not: print, exit or parse command-line text.
"""

from __future__ import annotations

import os
import sqlite3

from phronomy_fsm.errors import NotFoundError, PhronomyError, StorageError
from phronomy_fsm.operator.views import MigrationReport


def migrate_store(path: str, *, busy_timeout_seconds: float = 60.0) -> MigrationReport:
    """Bring the SQLite store at ``path`` to this version's schema.

    Args:
        path: an existing store file (never created here).
        busy_timeout_seconds: how long to wait for other processes' writes (a large
            migration holds the write lock for seconds).

    Returns:
        A :class:`MigrationReport` with the schema version before and after.

    Raises:
        NotFoundError: no file at ``path``, or an empty one (nothing is created).
        StorageError: not a SQLite database, an empty database, or it cannot be read.
        SchemaVersionError: the file was written by a newer phronomy_fsm, or holds
            another application's tables.

    Durability: the store migrates in one transaction (a kill part way leaves the old
    version intact); nothing else is written. Concurrency: two processes migrating
    at once migrate once.
    """
    from phronomy_fsm.store import schema
    from phronomy_fsm.store.sqlite import SqliteBarrierStore

    absolute = os.path.abspath(path)
    try:
        size = os.stat(absolute).st_size
    except FileNotFoundError:
        raise NotFoundError(
            f"no store at {path} (the file does not exist); nothing was written", path=path
        ) from None
    except OSError as exc:
        raise StorageError(f"cannot open the store {path}: {exc}", path=path) from exc
    if os.path.isdir(absolute):
        raise StorageError(f"{path} is a directory, not a store file", path=path)
    if size == 0:
        raise NotFoundError(
            f"{path} is empty (0 bytes), not a phronomy_fsm store; nothing was written",
            path=path,
        )
    try:
        with open(absolute, "rb") as fh:
            header = fh.read(len(schema.SQLITE_HEADER))
        if header != schema.SQLITE_HEADER:
            raise StorageError(
                f"{absolute} is not a SQLite database (bad header); nothing was written",
                path=path,
            )
        conn = sqlite3.connect(f"file:{absolute}?mode=ro", uri=True)
        try:
            before = schema.inspect_version(conn, absolute)
        finally:
            conn.close()
    except (sqlite3.Error, OSError) as exc:
        raise StorageError(
            f"cannot read {absolute}: {exc}; nothing was written", path=path
        ) from exc
    if before is None:
        raise StorageError(
            f"{path} is an empty database, not a phronomy_fsm store; nothing was written",
            path=path,
        )
    try:
        SqliteBarrierStore(
            absolute, busy_timeout_seconds=busy_timeout_seconds, wal_prewarm_frames=0
        ).close()
    except PhronomyError:
        raise
    except (OSError, ValueError) as exc:
        raise StorageError(f"cannot migrate {absolute}: {exc}", path=path) from exc
    return MigrationReport(absolute, int(before), int(schema.SCHEMA_VERSION))


__all__ = ["migrate_store"]
