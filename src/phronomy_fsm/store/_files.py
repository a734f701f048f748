"""The SQLite store's files outside its connections (``docs/store.md``, "Files").

Owns three rules:

- **The database file is opened only by SQLite.** POSIX record locks belong to a
  process and an inode, and closing *any* descriptor of the file drops every lock the
  process holds on it — including those of the SQLite connections it still has open.
  Another process then takes the database as unused at its last close, checkpoints
  and deletes the live ``-wal``, and this process goes on committing into a WAL nobody
  else can see (acknowledged commits lost). So nothing here opens the database file:
  it is checked with ``stat`` (which takes no descriptor), a new store is built under a
  temporary name by SQLite and put in place with ``link`` (atomic, never over an
  existing file), and "is it a SQLite database?" is answered by SQLite itself.
  ``tests/store/test_store_file_opens.py`` scans the package for any other open.
- **A zero-byte file is not a store**: it is refused, naming the file, as the CLI
  does, instead of becoming a fresh empty store.
- **The commit mark**: a small file beside the database (``<db>-mark``, never opened
  by SQLite) holding the highest barrier-log and inbox sequence numbers any writer
  has seen committed. Written after each commit (one ``pwrite``, no fsync: it guards
  against a deleted ``-wal``, not against power loss), compared when a store is
  opened for writing. A database behind its mark went backwards — its ``-wal`` was
  deleted after a crash, or an older copy was restored — and effects it already
  started would run again, so it is refused (:class:`StoreRegressedError`) until an
  operator confirms (``phronomy-fsm store check --accept-rollback``).

Must not import the runtime, the durable engine or the agent.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import shlex
import sqlite3
import stat
import threading
from collections.abc import Callable
from pathlib import Path

import attrs

from phronomy_fsm.errors import StorageError, StoreRegressedError

log = logging.getLogger("phronomy_fsm.store")

#: The suffix of the commit-mark file beside a store's database file.
MARK_SUFFIX = "-mark"

#: Bytes the mark occupies at the start of its file: fixed, so each ``pwrite``
#: replaces the whole record in one system call.
_MARK_WIDTH = 64

#: SQLite's companion files of a database (rolled back or replayed by SQLite itself).
_COMPANIONS = ("-wal", "-shm", "-journal")


def check_existing_file(path: str, st: os.stat_result) -> None:
    """Refuse an existing ``path`` that cannot be a store, without opening it.

    Args:
        path: the database file (absolute).
        st: its ``os.stat`` result.

    Raises:
        StorageError: not a regular file; not readable by this process; or zero
            bytes long with no WAL beside it (an empty file is not a store: a new one
            is made by opening a path that does not exist). Nothing was written.
    """
    if not stat.S_ISREG(st.st_mode):
        raise StorageError(f"{path} is not a regular file", path=path)
    if not os.access(path, os.R_OK):  # SQLite would say only "unable to open"
        raise StorageError(f"cannot open the store {path}: Permission denied", path=path)
    if st.st_size == 0 and _size(os.path.realpath(path) + "-wal") == 0:
        raise StorageError(
            f"{path} is empty (0 bytes), not a phronomy_fsm store; nothing was written. "
            "Remove it, or name a path that does not exist to create a new store.",
            path=path,
        )


def create_database_file(
    path: str, initialise: Callable[[sqlite3.Connection], None], *, connect_timeout: float
) -> bool:
    """Create the SQLite database ``path`` (owner-only, 0600) fully initialised, or
    leave it to whoever created it first.

    The database is built under a temporary name in the same folder — SQLite creates
    and writes it, ``initialise(conn)`` sets it up, a ``TRUNCATE`` checkpoint folds its
    WAL into the file and must complete — and is then linked to ``path``. ``link``
    never replaces an existing file, so two processes (or threads) creating one store
    at once end with one of the two, complete, and nobody ever sees a half-made or
    empty store. Temporary files left by a process killed while creating (their pid is
    in their name) are removed first. A commit mark left beside ``path`` by a store
    whose files were all deleted belongs to no database any more and is removed once
    this call has linked the new one.

    Args:
        path: the database file to create (absolute); its folder must exist.
        initialise: called with an autocommit connection to the new database.
        connect_timeout: the busy timeout of that connection, in seconds.

    Returns:
        True when this call created ``path``; False when it existed already.

    Raises:
        StorageError: the folder does not exist or is not writable, the disk is full,
            or SQLite failed; nothing is left at ``path``.
    """
    folder, name = os.path.split(path)
    _sweep_abandoned(folder, name)
    temp = os.path.join(folder, f".{name}.{os.getpid()}.{secrets.token_hex(4)}.new")
    try:
        conn = sqlite3.connect(Path(temp).as_uri() + "?mode=rwc", uri=True, timeout=connect_timeout)
        try:
            conn.isolation_level = None
            os.chmod(temp, 0o600)  # before a byte is written; the WAL takes its mode
            initialise(conn)
            # the temporary WAL is deleted below: everything must be in the file first
            busy, frames, copied = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            if busy or frames not in (-1, copied):
                raise StorageError(
                    f"cannot create the store {path}: its first checkpoint did not complete "
                    f"({copied} of {frames} pages copied); the disk may be full",
                    path=path,
                )
        finally:
            conn.close()
        if _size(temp + "-wal"):
            raise StorageError(
                f"cannot create the store {path}: its WAL could not be folded into the "
                "file (the disk may be full); nothing was written",
                path=path,
            )
        try:
            os.link(temp, path)
        except FileExistsError:
            return False
        except OSError:  # a file system without hard links: rename, unless it appeared
            if os.path.lexists(path):
                return False
            os.rename(temp, path)
        with contextlib.suppress(OSError):
            os.unlink(path + MARK_SUFFIX)  # a mark of deleted files: not of this store
        return True
    except (OSError, sqlite3.Error) as exc:
        raise StorageError(f"cannot create the store {path}: {exc}", path=path) from exc
    finally:
        for suffix in ("", *_COMPANIONS):
            with contextlib.suppress(OSError):  # EROFS too: never hide the real error
                os.unlink(temp + suffix)


def _sweep_abandoned(folder: str, name: str) -> None:
    """Remove temporary files of :func:`create_database_file` whose creator is dead
    (a kill between the link and the clean-up leaves a hidden second name of the
    store; an unlink opens nothing, so no lock is dropped)."""
    prefix = f".{name}."
    try:
        entries = os.listdir(folder)
    except OSError:
        return
    for entry in entries:
        if not entry.startswith(prefix) or ".new" not in entry:
            continue
        try:
            pid = int(entry[len(prefix) :].split(".", 1)[0])
        except ValueError:
            continue
        if pid == os.getpid() or _is_alive(pid):
            continue
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(folder, entry))


def _is_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's: alive
        return True
    return True


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


@attrs.frozen
class CommitMark:
    """The highest sequence numbers known committed to one store.

    Attributes:
        barrier_seq: the barrier log's highest ``seq`` (0: none).
        signal_seq: the inbox's highest ``seq`` (0: none).
    """

    barrier_seq: int = 0
    signal_seq: int = 0

    def is_behind(self, other: CommitMark) -> bool:
        """True when this mark is lower than ``other`` in either sequence."""
        return self.barrier_seq < other.barrier_seq or self.signal_seq < other.signal_seq

    def encode(self) -> bytes:
        """The fixed-width record written to the mark file."""
        text = f"phronomy-mark 1 {self.barrier_seq} {self.signal_seq}\n"
        return text.encode("ascii").ljust(_MARK_WIDTH, b" ")

    @classmethod
    def decode(cls, data: bytes) -> CommitMark | None:
        """The mark in ``data``, or None when it is empty or unreadable."""
        parts = data.decode("ascii", "replace").split()
        if len(parts) != 4 or parts[:2] != ["phronomy-mark", "1"]:
            return None
        try:
            return cls(int(parts[2]), int(parts[3]))
        except ValueError:
            return None


#: ``meta`` keys where compaction keeps the highest sequence numbers it removed
#: (written in its delete's own transaction), so removing the newest rows never
#: lowers a store's mark.
BARRIER_FLOOR_KEY = "mark_barrier_floor"
SIGNAL_FLOOR_KEY = "mark_signal_floor"

#: The one statement that reads a store's mark: each maximum is the rightmost entry
#: of its primary key or compaction's floor in ``meta``, whichever is higher.
MARK_QUERY = (
    "SELECT max(coalesce((SELECT max(seq) FROM barriers), 0),"
    f" coalesce((SELECT CAST(value AS INTEGER) FROM meta WHERE key = '{BARRIER_FLOOR_KEY}'), 0)),"
    " max(coalesce((SELECT max(seq) FROM signals), 0),"
    f" coalesce((SELECT CAST(value AS INTEGER) FROM meta WHERE key = '{SIGNAL_FLOOR_KEY}'), 0))"
)


def raise_mark_floor(cur: sqlite3.Cursor) -> None:
    """Inside a transaction that is about to delete barrier-log or inbox rows:
    remember the highest sequence numbers now in ``meta``, so the store's mark does
    not go down with the rows (compaction).

    Raises:
        sqlite3.Error: for the caller to map.
    """
    mark = read_mark(cur)
    cur.executemany(
        "INSERT INTO meta(key, value) VALUES (?, ?)"
        " ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        [(BARRIER_FLOOR_KEY, str(mark.barrier_seq)), (SIGNAL_FLOOR_KEY, str(mark.signal_seq))],
    )


def read_mark(conn: sqlite3.Connection | sqlite3.Cursor) -> CommitMark:
    """The mark of the database behind ``conn`` (its committed maxima now).

    Raises:
        sqlite3.Error: for the caller to map.
    """
    barrier_seq, signal_seq = conn.execute(MARK_QUERY).fetchone()
    return CommitMark(int(barrier_seq or 0), int(signal_seq or 0))


class MarkFile:
    """The commit-mark file of one store (``<db>-mark``), kept open by its writer.

    Args:
        database_path: the store's database file (absolute).

    Concurrency: :meth:`advance` is called under the store's write lock; the other
    methods from any thread.
    """

    def __init__(self, database_path: str) -> None:
        self.path = database_path + MARK_SUFFIX
        self._fd: int | None = None
        self._last: CommitMark | None = None
        self._warned = False
        self._lock = threading.Lock()

    def read(self) -> CommitMark | None:
        """The mark stored in the file, or None when there is none (no file yet, or
        an unreadable one: nothing is known, so nothing is refused)."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except OSError:
            return None
        try:
            return CommitMark.decode(os.pread(fd, _MARK_WIDTH, 0))
        finally:
            os.close(fd)

    def check(self, database: CommitMark) -> None:
        """Refuse a database that is behind its mark.

        Raises:
            StoreRegressedError: ``database`` is lower than the stored mark; its
                ``mark`` and ``found`` fields hold both. Nothing was written.
        """
        mark = self.read()
        if mark is not None and database.is_behind(mark):
            store = self.path[: -len(MARK_SUFFIX)]
            raise StoreRegressedError(
                f"{store} went backwards: commits up to barrier {mark.barrier_seq} and "
                f"signal {mark.signal_seq} were acknowledged, the database holds "
                f"{database.barrier_seq} and {database.signal_seq} (its -wal was deleted "
                "after a crash, or an older copy was restored). Effects started by the "
                "lost commits could run again, so nothing is written. See docs/operations.md "
                f'"A store that went backwards"; then `phronomy-fsm store check --db '
                f"{shlex.quote(store)} --accept-rollback`.",
                path=store,
                mark=(mark.barrier_seq, mark.signal_seq),
                found=(database.barrier_seq, database.signal_seq),
            )

    def advance(self, mark: CommitMark) -> None:
        """Record ``mark`` (read after a COMMIT, so it is committed) when it moved.

        The mark only ever rises: each sequence number written is the higher of
        ``mark``'s and the file's. A database found *below* the file while this store
        writes went backwards under it (a ``-wal`` deleted while it ran); the higher
        mark is kept so that the next open refuses it, and a warning is logged.

        A failure to write is ignored: the mark is a guard, and a commit that
        happened must not be reported as failed because of it.
        """
        if mark == self._last:
            return
        try:
            if self._fd is None:
                self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
            stored = CommitMark.decode(os.pread(self._fd, _MARK_WIDTH, 0))
            if stored is not None:
                if mark.is_behind(stored) and not self._warned:
                    self._warned = True
                    log.warning(
                        "%s: the database holds fewer commits (%s) than were acknowledged "
                        "(%s): it went backwards while this process used it; it will be "
                        "refused when opened next (see docs/operations.md, "
                        '"A store that went backwards")',
                        self.path[: -len(MARK_SUFFIX)],
                        mark,
                        stored,
                    )
                mark = CommitMark(
                    max(mark.barrier_seq, stored.barrier_seq),
                    max(mark.signal_seq, stored.signal_seq),
                )
            if mark != stored:
                os.pwrite(self._fd, mark.encode(), 0)
            self._last = mark
        except OSError:
            self._last = None

    def reset(self, mark: CommitMark) -> None:
        """Replace the stored mark with ``mark``, even if lower (an operator accepted
        a rollback).

        Raises:
            StorageError: the file cannot be written.
        """
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                os.pwrite(fd, mark.encode(), 0)
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            raise StorageError(f"cannot write {self.path}: {exc}", path=self.path) from exc
        self._last = mark

    def close(self) -> None:
        """Close the kept descriptor. Idempotent."""
        with self._lock:
            fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)
