"""Open the engine's store named by a path or a DSN: :func:`open_store`.

A ``postgresql://`` (or ``postgres://``) URL, or a libpq key/value string
(``host=... dbname=...``), opens a
:class:`~phronomy_fsm.store.postgres.PostgresStore`; anything else is a SQLite file
path and opens a :class:`~phronomy_fsm.store.sqlite.SqliteBarrierStore`. Both
implement :class:`~phronomy_fsm.durable.ports.ExecutionStore`.
"""

from __future__ import annotations

import os
import re
from typing import Any

_KEYVALUE = re.compile(r"^\s*(host|hostaddr|dbname|user|port|service)\s*=", re.IGNORECASE)


def is_postgres_dsn(target: str | os.PathLike[str]) -> bool:
    """True when ``target`` names a PostgreSQL database rather than a file."""
    text = os.fspath(target)
    return text.startswith(("postgresql://", "postgres://")) or bool(_KEYVALUE.match(text))


def open_store(target: str | os.PathLike[str], **options: Any) -> Any:
    """The store for ``target`` (module docstring); ``options`` go to its constructor.

    Raises:
        StorageError, SchemaVersionError: as the store's constructor.
        ConfigurationError: a DSN was given but psycopg is not installed.
    """
    if is_postgres_dsn(target):
        try:
            from phronomy_fsm.store.postgres import PostgresStore
        except ImportError as exc:
            from phronomy_fsm.errors import ConfigurationError

            raise ConfigurationError(
                "a PostgreSQL store needs psycopg 3 and psycopg-pool: "
                "pip install 'phronomy-fsm[postgres]' (from a clone: pip install -e '.[postgres]')"
            ) from exc
        return PostgresStore(os.fspath(target), **options)
    from phronomy_fsm.store.sqlite import SqliteBarrierStore

    return SqliteBarrierStore(target, **options)


__all__ = ["is_postgres_dsn", "open_store"]
