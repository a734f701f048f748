"""Translate ``sqlite3`` exceptions into the store's error taxonomy (``docs/store.md``, "Error taxonomy — what each means for the caller").

Owns one rule: a raw ``sqlite3`` exception never leaves the store. Transport and
storage failures (busy/locked after the busy timeout, I/O errors, a full disk, a file
that is not a database, a corrupt file, a closed connection) become
:class:`~phronomy_fsm.errors.StorageError` (a full disk its subclass
:class:`~phronomy_fsm.errors.DiskFullError`); they are **never** relabelled as conflicts.
Constraint violations are classified by the caller, which knows which write failed
(duplicate id → ConflictError, second active execution → AgentBusyError), because only
it can read the row back inside the same transaction.
"""

from __future__ import annotations

import sqlite3

from phronomy_fsm.errors import DiskFullError, StorageError

#: SQLite primary result codes that mean "the database is busy or locked".
_BUSY_NAMES = frozenset({"SQLITE_BUSY", "SQLITE_LOCKED"})


def error_name(exc: BaseException) -> str:
    """The SQLite result code name of ``exc`` (``SQLITE_BUSY``...), or its class name."""
    name = getattr(exc, "sqlite_errorname", None)
    return name if isinstance(name, str) else type(exc).__name__


def is_busy(exc: BaseException) -> bool:
    """True when ``exc`` says the database stayed locked after the busy timeout."""
    name = error_name(exc)
    if any(name.startswith(busy) for busy in _BUSY_NAMES):
        return True
    return "database is locked" in str(exc) or "database table is locked" in str(exc)


def is_full(exc: BaseException) -> bool:
    """True when ``exc`` is SQLite's ``SQLITE_FULL``: the file system, or the page
    limit (``PRAGMA max_page_count``), is full."""
    return error_name(exc).startswith("SQLITE_FULL") or "disk is full" in str(exc)


def nothing_written(exc: BaseException) -> bool:
    """True when a write statement that failed with ``exc`` — a COMMIT, or a statement
    that includes its COMMIT, included — cannot have written anything: it never got
    the write lock (busy), the database is read-only, or it is full.

    Why full: SQLite writes a transaction's pages to the WAL at COMMIT, and the
    transaction commits only with its last frame, written last and checksummed (the
    store runs in WAL mode); a write that ran out of space never completed that
    frame, so the transaction is rolled back, not committed. A full page limit is
    reached while pages are allocated, before COMMIT.
    """
    return is_busy(exc) or error_name(exc).startswith("SQLITE_READONLY") or is_full(exc)


def storage_error(exc: BaseException, *, operation: str, path: str) -> StorageError:
    """Build the :class:`StorageError` for a ``sqlite3`` failure during ``operation``.

    Args:
        exc: the ``sqlite3.Error`` (or ``OSError``) raised.
        operation: what the store was doing (``"commit"``, ``"load_execution"``...).
        path: the database file, named in the message.

    Returns:
        A StorageError (a DiskFullError for ``SQLITE_FULL``) whose ``sqlite_error``
        attribute is the SQLite code name and whose message says what to do next. The
        caller raises it ``from exc``.
    """
    name = error_name(exc)
    text = str(exc)
    if is_busy(exc):
        hint = "the database stayed locked after the busy timeout (another writer holds it); retry later"
    elif "not a database" in text or name == "SQLITE_NOTADB":
        hint = "the file is not a SQLite database; check the --db path"
    elif is_full(exc):
        return DiskFullError(
            f"{operation} on {path} failed: {text} ({name}); the disk (or the database's "
            "page limit) is full; nothing was written: free space and retry",
            operation=operation,
            path=path,
            sqlite_error=name,
            busy=False,
        )
    elif "disk I/O error" in text or name.startswith("SQLITE_IOERR"):
        hint = "an I/O error occurred; check the disk"
    elif "malformed" in text or name.startswith("SQLITE_CORRUPT"):
        hint = "the database file is corrupt; restore it from a backup"
    elif isinstance(exc, sqlite3.ProgrammingError) and "closed" in text:
        hint = "the store is closed"
    elif name.startswith("SQLITE_READONLY") or "readonly" in text:
        hint = "the database is read-only (file permissions or a read-only store)"
    else:
        hint = "storage failure"
    return StorageError(
        f"{operation} on {path} failed: {text} ({name}); {hint}",
        operation=operation,
        path=path,
        sqlite_error=name,
        busy=is_busy(exc),
    )
