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


_PASSWORD_KEYVALUE = re.compile(r"\s*\bpassword\s*=\s*('(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE)


def redact_dsn(target: str | os.PathLike[str]) -> str:
    """``target`` as the commands this library prints should show it: a DSN without
    its password (from the URL's user part, a ``password`` query parameter or a
    ``password=`` key), so that output pasted into a ticket or a log does not carry
    it; libpq then takes the password from ``PGPASSWORD`` or ``~/.pgpass``. The rest
    is kept character for character (nothing re-encoded), and a URL's user part ends
    where libpq ends it: at the first ``@`` before any ``/``. A SQLite path is
    returned unchanged. Never raises."""
    text = os.fspath(target)
    if not is_postgres_dsn(text):
        return text
    scheme, sep, rest = text.partition("://")
    if not sep:  # key/value
        return _PASSWORD_KEYVALUE.sub("", text).strip()
    at, slash = rest.find("@"), rest.find("/")
    if at >= 0 and (slash < 0 or at < slash):
        user = rest[:at].partition(":")[0]
        rest = f"{user}@{rest[at + 1 :]}" if user else rest[at + 1 :]
    base, question, query = rest.partition("?")
    if question:
        kept = [p for p in query.split("&") if p.partition("=")[0].lower() != "password"]
        rest = base + ("?" + "&".join(kept) if kept else "")
    return f"{scheme}://{rest}"


def command_target(store: Any) -> str:
    """What ``--db`` names ``store`` as in a command this library prints: a
    PostgreSQL store's DSN less its password (:func:`redact_dsn`; its ``path`` is
    ``host:port/database``, which ``--db`` cannot open), a SQLite store's file path."""
    return redact_dsn(str(getattr(store, "dsn", None) or getattr(store, "path", "DB")))


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
