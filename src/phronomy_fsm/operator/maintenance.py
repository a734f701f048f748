"""Store maintenance an operator runs: bringing a store file to this version's schema.

:func:`migrate_store` calls the store's own migration
(:func:`phronomy_fsm.store.sqlite.migrate_store`: one transaction, nothing else written)
after the checks an operator needs first — the path names an existing, non-empty file,
not a mistyped path — and reports the versions before and after
(``docs/operations.md``, "Upgrading a store").

Must not: print, exit or parse command-line text.
"""

from __future__ import annotations

import os

from phronomy_fsm.errors import NotFoundError, PhronomyError, StorageError
from phronomy_fsm.operator.views import MigrationReport


def migrate_store(path: str, *, busy_timeout_seconds: float = 60.0) -> MigrationReport:
    """Bring the store at ``path`` to this version's schema.

    Args:
        path: an existing store file (never created here), or a PostgreSQL DSN of a
            database that holds a store (``docs/scale-out.md``).
        busy_timeout_seconds: how long to wait for other processes' writes (a large
            migration holds the write lock for seconds).

    Returns:
        A :class:`MigrationReport` with the schema version before and after.

    Raises:
        NotFoundError: no file at ``path``, or an empty one, or a database without a
            store (nothing is created).
        StorageError: not a SQLite database, an empty database, or it cannot be read.
        SchemaVersionError: the file was written by a newer phronomy_fsm, or holds
            another application's tables.

    Durability: the store migrates in one transaction (a kill part way leaves the old
    version intact); nothing else is written. Concurrency: two processes migrating
    at once migrate once.
    """
    from phronomy_fsm.store.open import is_postgres_dsn

    if is_postgres_dsn(path):
        return _migrate_postgres(path)
    from phronomy_fsm.store.sqlite import migrate_store as migrate_file

    absolute = os.path.abspath(path)
    try:
        size = os.stat(absolute).st_size
    except FileNotFoundError:
        raise NotFoundError(
            f"no store at {path} (the file does not exist); nothing was written", path=path
        ) from None
    except OSError as exc:
        raise StorageError(f"cannot open the store {path}: {exc}", path=path) from exc
    if size == 0 and not os.path.isdir(absolute):
        raise NotFoundError(
            f"{path} is empty (0 bytes), not a phronomy_fsm store; nothing was written",
            path=path,
        )
    try:
        result = migrate_file(absolute, busy_timeout_seconds=busy_timeout_seconds)
    except PhronomyError:
        raise
    except (OSError, ValueError) as exc:
        raise StorageError(f"cannot migrate {absolute}: {exc}", path=path) from exc
    return MigrationReport(result.path, result.before, result.after)


def _migrate_postgres(dsn: str) -> MigrationReport:
    """:func:`migrate_store` for a PostgreSQL database: read its version, then open it
    read-write (which migrates it in one transaction) only when it holds a store."""
    import psycopg

    from phronomy_fsm.store.postgres import PostgresStore
    from phronomy_fsm.store.postgres import schema as pg_schema
    from phronomy_fsm.store.postgres.store import describe_dsn

    where = describe_dsn(dsn)
    try:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
            before = pg_schema.inspect_version(conn.cursor(), where)
    except psycopg.Error as exc:
        raise StorageError(f"cannot connect to PostgreSQL at {where}: {exc}", path=where) from exc
    if before is None:
        raise NotFoundError(
            f"no phronomy_fsm store in the PostgreSQL database {where}; nothing was written",
            path=where,
        )
    PostgresStore(dsn, must_exist=True, pool_min=0).close()
    return MigrationReport(where, before, pg_schema.SCHEMA_VERSION)


__all__ = ["migrate_store"]
