"""The SQLite store of the durable engine (``docs/store.md``; ``docs/semantics.md``).

Owns: connections and their policy (WAL, ``BEGIN IMMEDIATE`` for every write, busy
timeout, ``synchronous``), the commit paths of
:class:`~phronomy_fsm.durable.records.DurableCommit` (one commit on the caller's thread,
or group commit on the writer thread), error mapping into the store taxonomy,
outcome-unknown reporting, the fault seam for tests and the crash harness, and the
maintenance entry points (compaction, WAL checkpoint). The statements live in
``_commit.py`` (commits), ``_reads.py`` and ``_writes.py`` (the rest of the engine
port, :class:`~phronomy_fsm.durable.ports.ExecutionStore`); schema and migrations in
``schema.py``; batching in ``group.py``; retention in ``compact.py``. Must not import
the runtime's dispatcher, the agent or the spec layers.

Connections: one writer connection, used under a lock by whichever thread commits
(the caller's thread for :meth:`SqliteBarrierStore.commit`, the group-commit thread
for :meth:`SqliteBarrierStore.submit`) — measured faster than handing every commit
to a dedicated thread, see ``docs/store.md``; one reader connection per thread
(``query_only``). Several processes may open the same file: SQLite's file locks plus
``BEGIN IMMEDIATE`` and the busy timeout serialise their writers. Every write
transaction first checks that the schema version is still this code's: once newer
code has migrated the file, every write is refused with SchemaVersionError
(``docs/store.md``, "Schema").
"""

from __future__ import annotations

import copy
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

import attrs

from phronomy_fsm.durable.codec import datetime_to_epoch_ms, epoch_ms_to_datetime
from phronomy_fsm.durable.records import DurableCommit, DurableReceipt
from phronomy_fsm.errors import (
    OutcomeUnknownError,
    PhronomyError,
    SchemaVersionError,
    SerializationError,
    StorageError,
)
from phronomy_fsm.runtime.faults import FaultPlan
from phronomy_fsm.store import schema
from phronomy_fsm.store._commit import (
    PreparedDurable,
    apply_batch,
    apply_durable,
    apply_run_autocommit,
    is_single_run,
)
from phronomy_fsm.store._files import (
    MarkFile,
    check_existing_file,
    create_database_file,
    read_mark,
)
from phronomy_fsm.store._reads import SqliteReads
from phronomy_fsm.store._schedules import ScheduleSql
from phronomy_fsm.store._sqlerrors import nothing_written, storage_error
from phronomy_fsm.store._writes import SqliteWrites
from phronomy_fsm.store.group import CommitFuture, GroupCommitWriter
from phronomy_fsm.store.limits import SqliteLimits

if TYPE_CHECKING:
    from phronomy_fsm.store.compact import CompactReport

#: A fault-injection seam: ``hook(point, commits)`` is called at ``"write"`` (inside
#: the transaction, before a commit's statements), ``"commit"`` (just before the
#: COMMIT statement; anything it raises is treated exactly like a failing COMMIT) and
#: ``"committed"`` (after COMMIT returned; anything it raises is a lost response).
FaultHook = Callable[[str, tuple[DurableCommit, ...]], None]

#: One queued group commit: the commit and the future its caller waits on.
_Item = tuple[DurableCommit, "CommitFuture[DurableReceipt]"]

_SYNCHRONOUS = ("FULL", "NORMAL")

#: Largest ``group_max_batch``: a batch's multi-row UPDATE binds
#: :data:`~phronomy_fsm.store._commit.BULK_WIDTH` (14) parameters per commit (one more
#: on the one-statement path), which must stay under SQLite's default limit of 32,766.
MAX_GROUP_BATCH = 1000

#: Frames the WAL is grown to before the first FULL commit: SQLite's default
#: ``wal_autocheckpoint`` (1000 pages), so the WAL is reused, never grown, in steady state.
WAL_PREWARM_FRAMES = 1000

#: The writer's ``PRAGMA journal_size_limit``, in WAL frames: twice the prewarmed size,
#: so the steady-state WAL (about one autocheckpoint's worth of frames, plus the last
#: batch) is never cut, while a WAL that a long reader let grow to hundreds of MB is
#: truncated back to this size by the first commit after the WAL restarts — one
#: ``ftruncate`` after such a peak, no extra fsync on ordinary commits
#: (docs/store.md "Commit latency: the WAL is grown once, then reused").
WAL_SIZE_LIMIT_FRAMES = 2 * WAL_PREWARM_FRAMES


def prewarm_wal(conn: sqlite3.Connection, wal_path: str, frames: int) -> bool:
    """Grow a small WAL file to ``frames`` frames, then checkpoint it so later commits
    overwrite it from the start.

    Why: on ext4 (and most file systems) an fsync of a file that grew must also commit
    its new size, which costs about a second device flush; measured on this project's
    CI machine, a FULL barrier commit into a growing WAL took 540–710 µs against
    310–390 µs into a reused one (``docs/store.md``, "Commit latency: the WAL is grown
    once, then reused"). SQLite reuses the WAL after a complete checkpoint but deletes
    it when the last connection closes, so every process would otherwise pay the
    growth again.

    How: ``frames`` autocommit writes of ``PRAGMA user_version`` (one page each; the
    store keeps its version in ``meta`` and never reads ``user_version``) at
    ``synchronous=OFF`` with the automatic checkpoint off (a checkpoint at OFF would
    copy other connections' FULL commits into the database file without syncing it,
    and the WAL restart would then overwrite their only synced copy), then a PASSIVE
    checkpoint at the connection's own level (FULL: the WAL is synced before the copy,
    the database after it). Nothing the store holds changes, and a crash part way
    leaves a valid database: each write is a whole transaction. The writes do not wait
    for locks (busy timeout 0 meanwhile): if another connection is writing, the
    prewarm stops there and the first commit waits its normal busy timeout. If a
    reader elsewhere blocks the checkpoint, the WAL simply keeps growing as it would
    have.

    Args:
        conn: the writer connection, in autocommit mode, outside any transaction.
        wal_path: the WAL file (``<database>-wal``).
        frames: target size in frames (page size + 24 bytes each); 0 disables.

    Returns:
        True when the WAL was grown, False when it was already that large.

    Raises:
        sqlite3.Error: from SQLite (the caller maps it to StorageError).
    """
    if frames <= 0:
        return False
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    target = 32 + frames * (page_size + 24)
    try:
        if os.path.getsize(wal_path) >= target:
            return False
    except OSError:
        pass  # no WAL yet: SQLite creates it on the first write
    sync = conn.execute("PRAGMA synchronous").fetchone()[0]
    autocheckpoint = conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0]
    busy = conn.execute("PRAGMA busy_timeout").fetchone()[0]
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    conn.execute("PRAGMA wal_autocheckpoint=0")
    conn.execute("PRAGMA busy_timeout=0")
    conn.execute("PRAGMA synchronous=OFF")
    try:
        for _ in range(frames):
            conn.execute(f"PRAGMA user_version={int(version)}")
    finally:
        conn.execute(f"PRAGMA synchronous={int(sync)}")
        conn.execute(f"PRAGMA wal_autocheckpoint={int(autocheckpoint)}")
        conn.execute(f"PRAGMA busy_timeout={int(busy)}")
    conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
    return True


class SqliteBarrierStore(SqliteReads, SqliteWrites, ScheduleSql, SqliteLimits):
    """The engine's :class:`~phronomy_fsm.durable.ports.ExecutionStore` on one SQLite file.

    Args:
        path: the database file. Created (owner-only, 0600) if missing unless
            ``read_only``; its folder must exist.
        synchronous: ``"FULL"`` (default; a returned commit survives power loss) or
            ``"NORMAL"`` (WAL without fsync per commit: survives a process crash but
            the last commits may be lost on power loss or an OS crash).
        busy_timeout_seconds: how long a write waits for another connection's write
            lock before failing with StorageError.
        group_window_seconds: extra wait for a group-commit batch to fill (0: flush as
            soon as the writer is idle).
        group_max_batch: most commits per group-commit transaction, 1 to
            :data:`MAX_GROUP_BATCH` (a batch's multi-row statements must stay within
            SQLite's default limit of 32,766 bound parameters).
        clock: returns the current timezone-aware time (commit times, defaults); the
            system clock when ``None``.
        read_only: open an existing, current store for reading only (nothing is
            created, migrated or written; writes raise StorageError).
        wal_prewarm_frames: with ``synchronous="FULL"``, grow a smaller WAL to this
            many frames when the writer connection opens (about 4 MiB and 25 ms for
            the default), so FULL commits overwrite the WAL instead of growing it;
            see :func:`prewarm_wal`. 0 disables.
        faults: crash points to honour (``barrier:<name>:during``, inside the
            transaction before COMMIT); tests and the crash harness only.
        check_mark: refuse to open for writing a database that is behind its commit
            mark (``<db>-mark``: it went backwards, see
            :mod:`phronomy_fsm.store._files`); False only for ``store check
            --accept-rollback``, which looks at such a store to re-base the mark.

    Attributes:
        wal_size_limit_bytes: the WAL size the writer truncates back to after it grew
            past it (``PRAGMA journal_size_limit``: twice the larger of
            ``wal_prewarm_frames`` and :data:`WAL_PREWARM_FRAMES` frames, about 8 MiB
            with 4 KiB pages). A reader holding a transaction open keeps every commit
            in the WAL; once it is gone, the next checkpoint and WAL restart cut the
            file back to this size (docs/store.md, "Commit latency: the WAL is grown
            once, then reused").

    Raises:
        StorageError: the file is not a SQLite database, cannot be created or opened,
            or stays locked past the busy timeout while the schema is checked.
        SchemaVersionError: the schema is newer than this code, or the file is a
            SQLite database of some other application; nothing was written.
        StoreRegressedError: opened for writing, the database holds fewer commits
            than were acknowledged from it (docs/operations.md "A store that went
            backwards"); nothing was written.

    Concurrency: every method is thread-safe. Writes are serialised on one writer
    connection; reads use one connection per thread.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: str = "FULL",
        busy_timeout_seconds: float = 5.0,
        group_window_seconds: float = 0.0,
        group_max_batch: int = 64,
        clock: Callable[[], datetime] | None = None,
        read_only: bool = False,
        wal_prewarm_frames: int = WAL_PREWARM_FRAMES,
        faults: FaultPlan | None = None,
        check_mark: bool = True,
    ) -> None:
        sync = synchronous.upper()
        if sync not in _SYNCHRONOUS:
            raise ValueError(f"synchronous must be FULL or NORMAL, not {synchronous!r}")
        if busy_timeout_seconds < 0:
            raise ValueError("busy_timeout_seconds must not be negative")
        if not 1 <= group_max_batch <= MAX_GROUP_BATCH:
            raise ValueError(
                f"group_max_batch must be between 1 and {MAX_GROUP_BATCH}, not {group_max_batch}"
            )
        self.path = str(Path(path).absolute())
        self.synchronous = sync
        self.busy_timeout_seconds = float(busy_timeout_seconds)
        self.read_only = read_only
        self.wal_prewarm_frames = int(wal_prewarm_frames) if sync == "FULL" else 0
        self._wal_limit_frames = 2 * max(self.wal_prewarm_frames, WAL_PREWARM_FRAMES)
        self.wal_size_limit_bytes = 32 + self._wal_limit_frames * (4096 + 24)  # set at open
        self._clock = clock
        self._uri = Path(self.path).as_uri() + ("?mode=ro" if read_only else "?mode=rw")
        self._write_lock = threading.Lock()
        self._writer: sqlite3.Connection | None = None
        self._wcur: sqlite3.Cursor | None = None
        self._local = threading.local()
        self._readers: list[tuple[sqlite3.Connection, threading.RLock]] = []
        self._readers_lock = threading.Lock()
        self._closed = False
        #: set once a write found the schema migrated by newer code (see _begin)
        self._schema_refusal: SchemaVersionError | None = None
        self._fault_hook: FaultHook | None = None
        self.faults = faults
        self.check_mark = check_mark
        # beside the file SQLite opens (it follows a symbolic link; so does the mark)
        self._mark = MarkFile(os.path.realpath(self.path))
        self._group = GroupCommitWriter(
            self._flush_batch,
            self._fail_item,
            max_batch=group_max_batch,
            window_seconds=group_window_seconds,
        )
        self._open()

    # ------------------------------------------------------------------ opening

    def _open(self) -> None:
        self._check_or_create_file()
        try:
            conn = self._connect(self._uri)
        except sqlite3.Error as exc:
            raise storage_error(exc, operation="open", path=self.path) from exc
        try:
            page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])
            self.wal_size_limit_bytes = 32 + self._wal_limit_frames * (page_size + 24)
            version = schema.inspect_version(conn, self.path)  # read-only: nothing written yet
            if self.read_only:
                if version is None:
                    raise SchemaVersionError(
                        f"{self.path} is an empty database, not an initialised phronomy_fsm store",
                        path=self.path,
                    )
                if version != schema.SCHEMA_VERSION:
                    raise SchemaVersionError(
                        f"{self.path} has schema version {version}, this code needs "
                        f"{schema.SCHEMA_VERSION}; open it read-write once to migrate it "
                        f"(`phronomy-fsm store migrate --db {self.path}`)",
                        path=self.path,
                    )
                return
            # a database behind the commits acknowledged from it (a deleted -wal, an
            # older copy restored) is refused before anything is written to it — a
            # migration included — or any effect can start again
            checked = not self.check_mark or self._check_mark(conn)
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise StorageError(
                    f"{self.path}: cannot switch to WAL (journal_mode is {mode})", path=self.path
                )
            schema.migrate(conn, self.path)
            if not checked:  # an older schema: its tables are comparable only now
                self._mark.check(read_mark(conn))
        except sqlite3.Error as exc:
            raise storage_error(exc, operation="open", path=self.path) from exc
        finally:
            conn.close()

    def _check_mark(self, conn: sqlite3.Connection) -> bool:
        """Compare the database with its commit mark; False when its schema is too old
        to compare before migrating it.

        Raises:
            StoreRegressedError: it went backwards.
        """
        try:
            found = read_mark(conn)
        except sqlite3.OperationalError:  # no such table/column: an older schema
            return False
        self._mark.check(found)
        return True

    def _check_or_create_file(self) -> None:
        """Check the database file with ``stat`` only, or create it complete; never
        open it outside SQLite (``store/_files.py`` says why)."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            if os.path.lexists(self.path):
                raise StorageError(
                    f"{self.path} is a symbolic link to {os.path.realpath(self.path)}, which "
                    "does not exist; create the store at its target or remove the link",
                    path=self.path,
                ) from None
            if self.read_only:
                raise StorageError(
                    f"no store at {self.path} (the file does not exist)", path=self.path
                ) from None
            if create_database_file(
                self.path, self._initialise, connect_timeout=self.busy_timeout_seconds
            ):
                return
            try:  # another process made it meanwhile
                st = os.stat(self.path)
            except OSError as exc:
                raise StorageError(
                    f"cannot open the store {self.path}: {exc}", path=self.path
                ) from exc
        except OSError as exc:
            raise StorageError(f"cannot open the store {self.path}: {exc}", path=self.path) from exc
        check_existing_file(self.path, st)

    def _initialise(self, conn: sqlite3.Connection) -> None:
        """Set up a new database: WAL and the current schema."""
        conn.execute(f"PRAGMA busy_timeout={int(self.busy_timeout_seconds * 1000)}")
        conn.execute("PRAGMA journal_mode=WAL")
        schema.migrate(conn, self.path)

    def _connect(self, uri: str) -> sqlite3.Connection:
        conn = sqlite3.connect(
            uri,
            uri=True,
            timeout=self.busy_timeout_seconds,
            isolation_level=None,
            check_same_thread=False,
            cached_statements=256,
        )
        conn.execute(f"PRAGMA busy_timeout={int(self.busy_timeout_seconds * 1000)}")
        return conn

    def _connect_writer(self) -> sqlite3.Connection:
        """A new writer connection at the store's ``synchronous`` level, with the WAL
        size limit (:attr:`wal_size_limit_bytes`) that lets SQLite truncate a WAL that
        grew past it when the WAL next restarts."""
        conn = self._connect(self._uri)
        conn.execute(f"PRAGMA synchronous={self.synchronous}")
        conn.execute(f"PRAGMA journal_size_limit={int(self.wal_size_limit_bytes)}")
        return conn

    def _writer_cursor(self) -> sqlite3.Cursor:
        """The writer's cursor; (re)opens the writer connection. Call under the lock."""
        if self._closed:
            raise StorageError(f"the store {self.path} is closed", path=self.path)
        if self.read_only:
            raise StorageError(f"the store {self.path} was opened read-only", path=self.path)
        if self._schema_refusal is not None:  # newer code migrated it: never write again
            raise copy.copy(self._schema_refusal)
        if self._wcur is None:
            conn = self._connect_writer()
            try:
                prewarm_wal(conn, self.path + "-wal", self.wal_prewarm_frames)
            except sqlite3.Error:
                # an optimisation only (another writer holds the lock, a read-only
                # WAL): start over on a fresh connection, whatever state it left
                conn.close()
                conn = self._connect_writer()
            if self.check_mark:
                # the database may have gone backwards since the store was opened (a
                # -wal deleted after another process died): refuse before writing
                try:
                    self._mark.check(read_mark(conn))
                except BaseException:
                    conn.close()
                    raise
            self._writer = conn
            self._wcur = conn.cursor()
        return self._wcur

    def _begin(self, cur: sqlite3.Cursor) -> None:
        """``BEGIN IMMEDIATE`` on the writer, then check that the schema is still this
        code's (:func:`~phronomy_fsm.store.schema.check_still_current`): every write
        transaction starts here. A newer version is remembered: every later write is
        refused without touching the file.

        Raises:
            SchemaVersionError: newer code migrated the file (the caller rolls back).
            sqlite3.Error: for the caller to map.
        """
        cur.execute("BEGIN IMMEDIATE")
        try:
            schema.check_still_current(cur, self.path)
        except SchemaVersionError as exc:
            self._schema_refusal = exc
            raise

    def _reset_writer(self) -> None:
        """Drop the writer connection after an error that leaves its state unknown."""
        conn, self._writer, self._wcur = self._writer, None, None
        if conn is not None:
            try:
                conn.close()
            except sqlite3.Error:
                pass

    def _rollback_quietly(self) -> None:
        conn = self._writer
        if conn is None:
            return
        try:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
        except sqlite3.Error:
            self._reset_writer()  # closing the connection rolls back

    def _advance_mark(self, cur: sqlite3.Cursor) -> None:
        """After a COMMIT, under the write lock: record the committed maxima in the
        commit mark (one indexed read and one ``pwrite``; skipped when unchanged). A
        failure here never fails the commit that happened."""
        try:
            mark = read_mark(cur)
        except sqlite3.Error:
            return
        self._mark.advance(mark)

    def rebase_mark(self) -> tuple[int, int]:
        """Set the commit mark to what the database holds now, even if lower: what
        an operator does who accepted a rollback (``store check --accept-rollback``).
        Returns ``(barrier_seq, signal_seq)``.

        Raises:
            StorageError: the database cannot be read or the mark file written.
        """
        with self._write_lock:
            try:
                mark = read_mark(self._writer_cursor())
            except BaseException as exc:  # noqa: BLE001 - nothing may escape this boundary untyped
                raise self._failure(exc, "rebase_mark")
            self._mark.reset(mark)
        return (mark.barrier_seq, mark.signal_seq)

    def _crash_point(self, point: str) -> None:
        if self.faults is not None:
            self.faults.hit(point)

    def install_fault_hook(self, hook: FaultHook | None) -> None:
        """Install (or remove, with ``None``) the fault-injection seam (see
        :data:`FaultHook`). For tests and the crash harness only; used by
        :class:`~phronomy_fsm.store.faults.FaultInjectingStore`."""
        self._fault_hook = hook

    # ------------------------------------------------------------------ helpers

    def _commit_time(self) -> tuple[int, datetime]:
        """The commit time as ``(epoch_ms, datetime)``, truncated to milliseconds."""
        now_ms = (
            time.time_ns() // 1_000_000
            if self._clock is None
            else datetime_to_epoch_ms(self._clock())
        )
        return now_ms, epoch_ms_to_datetime(now_ms)

    def _now(self) -> datetime:
        return self._clock() if self._clock is not None else datetime.now(UTC)

    def _failure(self, exc: BaseException, operation: str) -> BaseException:
        """The typed error for a failure known to have happened before COMMIT."""
        if isinstance(exc, PhronomyError):
            return exc
        if isinstance(exc, (sqlite3.Error, OSError)):
            mapped = storage_error(exc, operation=operation, path=self.path)
            mapped.__cause__ = exc
            return mapped
        return exc

    def _unknown(
        self, exc: BaseException, commit: DurableCommit, *, lost: bool
    ) -> OutcomeUnknownError:
        what = "the response was lost after COMMIT" if lost else "the COMMIT statement failed"
        err = OutcomeUnknownError(
            f"outcome unknown for execution {commit.execution.execution_id} revision "
            f"{commit.execution.revision} on {self.path}: {what} ({type(exc).__name__}: {exc}); "
            "call reconcile() to read back whether it committed",
            intended=commit,
            path=self.path,
        )
        err.__cause__ = exc
        return err

    # ------------------------------------------------------------------ commits

    def commit(self, commit: DurableCommit) -> DurableReceipt:
        """Commit one :class:`~phronomy_fsm.durable.records.DurableCommit` in one
        ``BEGIN IMMEDIATE`` transaction on the caller's thread: the execution's
        compare-and-set, its barrier-log row, consumed signals, children, signals sent
        and journal entries, all or nothing (``docs/semantics.md``, "Barrier
        outcomes").

        Returns:
            The :class:`~phronomy_fsm.durable.records.DurableReceipt` (new revision,
            the sent signals' sequence numbers, the commit time).

        Raises:
            NotFoundError: updating an execution that does not exist.
            ConflictError: stale revision, another machine, a duplicate execution id,
                consumed signals no longer pending, a signal id sent already.
            LeaseLostError: the fence does not match the stored owner and token, or
                the owner's lease has passed.
            AgentBusyError: another active execution holds the exclusive key.
            ExecutionFinishedError: the execution has finished.
            SerializationError: a record cannot be encoded.
            StorageError: nothing was written (busy after the timeout, I/O, closed or
                read-only store).
            DiskFullError: (a StorageError) the disk or the page limit is full;
                nothing was written, even when it was the COMMIT that failed.
            OutcomeUnknownError: the COMMIT failed (but for a full disk) or its
                response was lost; it may have committed (``intended`` is
                ``commit``): call :meth:`reconcile`.

        Durability: with ``synchronous="FULL"`` the WAL is fsynced before it returns.
        A retry after any typed error but OutcomeUnknownError is safe.
        Concurrency: any thread; writers are serialised on the writer connection.
        """
        p = PreparedDurable(commit)
        hook = self._fault_hook
        with self._write_lock:
            try:
                cur = self._writer_cursor()
                self._begin(cur)
                if hook is not None:
                    hook("write", (commit,))
                receipt = apply_durable(cur, p, *self._commit_time())
            except BaseException as exc:  # noqa: BLE001 - nothing may escape this boundary untyped
                self._rollback_quietly()
                raise self._failure(exc, "commit")
            try:
                if hook is not None:
                    hook("commit", (commit,))
                if self.faults is not None:
                    self._crash_point(f"barrier:{commit.barrier}:during")
                cur.execute("COMMIT")
            except BaseException as exc:  # noqa: BLE001 - nothing may escape this boundary untyped
                self._rollback_quietly()
                if isinstance(exc, sqlite3.Error) and nothing_written(exc):  # e.g. disk full
                    raise self._failure(exc, "commit")
                self._reset_writer()
                raise self._unknown(exc, commit, lost=False)
            self._advance_mark(cur)
        if hook is not None:
            try:
                hook("committed", (commit,))
            except BaseException as exc:  # noqa: BLE001 - nothing may escape this boundary untyped
                raise self._unknown(exc, commit, lost=True)
        return receipt

    def submit(self, commit: DurableCommit) -> Future[DurableReceipt]:
        """Queue ``commit`` for group commit: the writer thread commits every queued
        commit (up to ``group_max_batch``) in one transaction, each in its own
        savepoint when it has several statements, so a refused commit fails only
        itself (``docs/store.md``, "Group commit").

        Returns:
            A future (a :class:`~phronomy_fsm.store.group.CommitFuture`) set only
            after the batch's COMMIT returned, with the receipt or the typed error
            :meth:`commit` would raise (encoding happens on the writer thread: a
            SerializationError comes back in the future). A failing COMMIT fails every
            commit of that batch with OutcomeUnknownError — with DiskFullError when it
            failed for a full disk (nothing written).

        Durability: the future resolves only once the batch is durable.
        Concurrency: any thread. Cancelling the future before the writer takes it
        withdraws the commit (never written); afterwards it cannot be cancelled.
        """
        future: CommitFuture[DurableReceipt] = CommitFuture()
        try:
            self._group.put((commit, future))
        except StorageError as exc:
            future.set_exception(exc)
        return future

    @staticmethod
    def _fail_item(item: _Item, exc: BaseException) -> None:
        future = item[1]
        if not future.done():
            if not isinstance(exc, PhronomyError):
                exc = StorageError(f"group commit writer failed: {type(exc).__name__}: {exc}")
            future.set_exception(exc)

    def _flush_batch(self, batch: list[_Item]) -> None:
        """Commit one group-commit batch and settle every future only after its COMMIT
        returned: as one all-or-nothing statement when every commit only moves its own
        execution and no fault hook is installed (:meth:`_flush_one_statement`), else
        (or when that statement was refused) in one transaction, each multi-statement
        commit in its own savepoint."""
        live: list[PreparedDurable] = []
        for commit, future in batch:
            if not future.set_running_or_notify_cancel():
                continue  # cancelled before the writer took it: never written
            try:
                p = PreparedDurable(commit)
            except PhronomyError as exc:
                future.set_exception(exc)
                continue
            except Exception as exc:  # noqa: BLE001 - fails this commit alone, typed
                error = SerializationError(f"cannot encode the commit: {type(exc).__name__}: {exc}")
                error.__cause__ = exc
                future.set_exception(error)
                continue
            p.future = future
            live.append(p)
        if not live:
            return
        hook = self._fault_hook
        if hook is None and is_single_run(live):
            if self._flush_one_statement(live):
                return
            # refused, nothing written: say which commit failed (their crash points
            # were hit already)
            self._flush_transaction(live, None, bulk=False, crash_points=False)
            return
        self._flush_transaction(live, hook, bulk=True, crash_points=True)

    def _flush_one_statement(self, live: list[PreparedDurable]) -> bool:
        """Commit ``live`` with :func:`~phronomy_fsm.store._commit.apply_run_autocommit`
        (BEGIN, the multi-row UPDATE and COMMIT in one SQLite call, so the writer gives
        up the GIL once per batch instead of at every statement) and settle it.
        Returns False, having written nothing and settled nothing, when a commit of
        it was refused."""
        results: list[Any]
        with self._write_lock:
            try:
                cur = self._writer_cursor()
                now_ms, committed_at = self._commit_time()
            except BaseException as exc:  # noqa: BLE001 - nothing may escape this boundary untyped
                failure = self._failure(exc, "commit")
                results = [self._copy_failure(failure, exc) for _ in live]
            else:
                try:
                    if self.faults is not None:  # a kill here leaves nothing written, as
                        for p in live:  # inside the transaction of the other path
                            self._crash_point(f"barrier:{p.commit.barrier}:during")
                    if not apply_run_autocommit(cur, live, now_ms):
                        return False
                    self._advance_mark(cur)
                except BaseException as exc:  # noqa: BLE001 - nothing may escape this boundary untyped
                    self._rollback_quietly()
                    if isinstance(exc, sqlite3.Error) and nothing_written(exc):
                        failure = self._failure(exc, "commit")
                        results = [self._copy_failure(failure, exc) for _ in live]
                    else:  # the statement includes its COMMIT: it may have committed
                        self._reset_writer()
                        results = [self._unknown(exc, p.commit, lost=False) for p in live]
                else:
                    results = [
                        DurableReceipt(ex.execution_id, ex.revision, (), committed_at)
                        for ex in (p.commit.execution for p in live)
                    ]
        for p, result in zip(live, results):
            if isinstance(result, BaseException):
                p.future.set_exception(result)
            else:
                p.future.set_result(result)
        return True

    def _copy_failure(self, failure: BaseException, exc: BaseException) -> BaseException:
        """One instance of a batch-wide failure per caller (typed)."""
        if isinstance(failure, PhronomyError):
            return copy.copy(failure)
        return StorageError(
            f"group commit failed before COMMIT: {type(exc).__name__}: {exc}", path=self.path
        )

    def _flush_transaction(
        self, live: list[PreparedDurable], hook: Any, *, bulk: bool, crash_points: bool
    ) -> None:
        """Commit ``live`` in one ``BEGIN IMMEDIATE`` transaction
        (:func:`~phronomy_fsm.store._commit.apply_batch`) and settle every future;
        ``crash_points``: hit each commit's ``barrier:<name>:during`` before COMMIT."""
        results: list[Any] = [None] * len(live)
        ok: list[int] = []
        with self._write_lock:
            try:
                cur = self._writer_cursor()
                self._begin(cur)
                now_ms, committed_at = self._commit_time()
                results, ok = apply_batch(cur, live, now_ms, committed_at, hook, bulk=bulk)
            except BaseException as exc:  # noqa: BLE001 - nothing may escape this boundary untyped
                self._rollback_quietly()
                failure = self._failure(exc, "commit")
                for i in range(len(live)):
                    if i in ok or results[i] is None:
                        results[i] = self._copy_failure(failure, exc)
                ok = []
            if ok:
                try:
                    if hook is not None:
                        hook("commit", tuple(live[i].commit for i in ok))
                    if self.faults is not None and crash_points:
                        for i in ok:
                            self._crash_point(f"barrier:{live[i].commit.barrier}:during")
                    cur.execute("COMMIT")
                except BaseException as exc:  # noqa: BLE001 - nothing may escape this boundary untyped
                    self._rollback_quietly()
                    if isinstance(exc, sqlite3.Error) and nothing_written(exc):  # disk full
                        failure = self._failure(exc, "commit")
                        for i in ok:
                            results[i] = self._copy_failure(failure, exc)
                    else:
                        self._reset_writer()
                        for i in ok:
                            results[i] = self._unknown(exc, live[i].commit, lost=False)
                    ok = []
                else:
                    self._advance_mark(cur)
            elif self._writer is not None and self._writer.in_transaction:
                self._rollback_quietly()
        if ok and hook is not None:
            try:
                hook("committed", tuple(live[i].commit for i in ok))
            except BaseException as exc:  # noqa: BLE001 - nothing may escape this boundary untyped
                for i in ok:
                    results[i] = self._unknown(exc, live[i].commit, lost=True)
        for p, result in zip(live, results):
            if isinstance(result, BaseException):
                p.future.set_exception(result)
            else:
                p.future.set_result(result)

    # ------------------------------------------------------------------ maintenance

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
        days ``keep_days`` gives their machine), with
        their barrier-log rows, journal entries and signals; then checkpoint the WAL
        (``TRUNCATE``). The policy — what is never removed — and the errors are those
        of :func:`phronomy_fsm.store.compact.compact_store` (``docs/store.md``,
        "Compaction").

        Durability: each chunk of removals is one committed transaction; with an
        archive, a chunk is committed to the archive before it is deleted here.
        Concurrency: any thread; commits of running executions go on meanwhile.
        """
        from phronomy_fsm.store.compact import compact_store

        return compact_store(
            self,
            older_than_days=older_than_days,
            archive_path=archive_path,
            now=now or self._now(),
            keep_days=keep_days,
        )

    @contextmanager
    def maintenance_transaction(self, operation: str) -> Iterator[sqlite3.Cursor]:
        """``BEGIN IMMEDIATE`` ... ``COMMIT`` on the writer for the writes outside an
        execution's commit (the inbox, leases, registries, compaction); any failure
        rolls back and raises StorageError (each of those writes is idempotent or
        re-checked, so a COMMIT failure is reported as StorageError, not outcome
        unknown). Never for an execution's commits (``submit``/``commit``)."""
        with self._write_lock:
            try:
                cur = self._writer_cursor()
                self._begin(cur)
                yield cur
                cur.execute("COMMIT")
            except BaseException as exc:  # noqa: BLE001 - nothing may escape this boundary untyped
                self._rollback_quietly()
                raise self._failure(exc, operation)
            self._advance_mark(cur)

    def _schedule_sql(
        self, operation: str, sql: str, params: tuple[Any, ...], *, write: bool
    ) -> list[tuple[Any, ...]]:
        """Run one statement of :class:`~phronomy_fsm.store._schedules.ScheduleSql`:
        ``{now}`` is this host's clock (the one every process on the file shares)."""
        text = sql.replace("{now}", str(self._commit_time()[0]))
        if write:
            with self.maintenance_transaction(operation) as cur:
                return list(cur.execute(text, params).fetchall())
        with self._reading(operation) as conn:
            return list(conn.execute(text, params).fetchall())

    @contextmanager
    def snapshot(self, operation: str) -> Iterator[sqlite3.Connection]:
        """A reader connection inside one read transaction for the block (a consistent
        snapshot while commits go on; maintenance: compaction, archives). Raises
        StorageError, named after ``operation``."""
        with self._reading(operation, snapshot=True) as conn:
            yield conn

    def checkpoint(self, mode: str = "TRUNCATE") -> tuple[int, int, int]:
        """Run ``PRAGMA wal_checkpoint(mode)`` on the writer; returns ``(busy,
        wal_frames, checkpointed_frames)``. Raises StorageError."""
        if mode not in ("PASSIVE", "FULL", "RESTART", "TRUNCATE"):
            raise ValueError(f"unknown checkpoint mode {mode!r}")
        with self._write_lock:
            try:
                row = self._writer_cursor().execute(f"PRAGMA wal_checkpoint({mode})").fetchone()
            except BaseException as exc:  # noqa: BLE001 - nothing may escape this boundary untyped
                raise self._failure(exc, "checkpoint")
        return (int(row[0]), int(row[1]), int(row[2]))

    def close(self) -> None:
        """Flush queued group commits, then close every connection. Idempotent."""
        if self._closed:
            return
        self._group.close()
        with self._write_lock:
            self._closed = True
            self._reset_writer()
            self._mark.close()
        with self._readers_lock:
            readers, self._readers = self._readers, []
        for conn, in_use in readers:
            with in_use:  # a read in progress on another thread finishes first
                try:
                    conn.close()
                except sqlite3.Error:
                    pass

    def __enter__(self) -> Self:
        """Use the store as a context manager; :meth:`close` on exit."""
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SqliteBarrierStore({self.path!r}, synchronous={self.synchronous!r})"


@attrs.frozen
class SchemaMigration:
    """What :func:`migrate_store` found and left: the store file, its schema version
    before, and the version now stored (:data:`~phronomy_fsm.store.schema.SCHEMA_VERSION`)."""

    path: str
    before: int
    after: int

    @property
    def is_migrated(self) -> bool:
        """True when the schema was changed (it was older than this code)."""
        return self.before != self.after


def migrate_store(
    path: str | os.PathLike[str], *, busy_timeout_seconds: float = 60.0
) -> SchemaMigration:
    """Bring an existing store file to this code's schema in one transaction; nothing
    else is written (``docs/store.md``, "Schema"; at version 5 the agent layer's
    executions are converted: "Upgrading to version 5"). A current store is left as it
    is.

    Args:
        path: the store file; it must exist and hold a phronomy_fsm store.
        busy_timeout_seconds: how long to wait for other processes' writes (a large
            migration holds the write lock for its whole transaction).

    Returns:
        A :class:`SchemaMigration`.

    Raises:
        StorageError: no such file, not a regular file, not a SQLite database, or
            unreadable; nothing was written.
        SchemaVersionError: an empty database, another application's database, or a
            schema newer than this code; nothing was written.

    Durability: the migration commits (or rolls back) as one transaction.
    """
    target = str(Path(path).absolute())
    try:
        st = os.stat(target)
    except FileNotFoundError:
        raise StorageError(
            f"no store at {target} (the file does not exist); nothing was written", path=target
        ) from None
    except OSError as exc:
        raise StorageError(
            f"cannot read {target}: {exc}; nothing was written", path=target
        ) from exc
    check_existing_file(target, st)  # stat only: see store/_files.py
    try:
        conn = sqlite3.connect(f"{Path(target).as_uri()}?mode=ro", uri=True)
        try:
            before = schema.inspect_version(conn, target)
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise storage_error(exc, operation="migrate", path=target) from exc
    if before is None:
        raise SchemaVersionError(
            f"{target} is an empty database, not a phronomy_fsm store; nothing was written",
            path=target,
        )
    SqliteBarrierStore(
        target, busy_timeout_seconds=busy_timeout_seconds, wal_prewarm_frames=0
    ).close()
    return SchemaMigration(target, before, schema.SCHEMA_VERSION)


@attrs.frozen
class StoreCheck:
    """What :func:`check_store` found in one SQLite store.

    Attributes:
        path: the database file.
        schema_version: the stored schema version (None: an empty database).
        integrity: ``PRAGMA quick_check``'s answer (``"ok"`` when sound).
        wal_bytes: the size of the ``-wal`` beside it (0: none).
        mark: ``(barrier_seq, signal_seq)`` acknowledged by writers (None: no mark
            recorded yet).
        found: the same, as the database holds them now (None: its schema is older
            than this code's, so they are not compared; ``store migrate`` first).
        accepted: True when ``accept_rollback`` re-based the mark to ``found``.
    """

    path: str
    schema_version: int | None
    integrity: str
    wal_bytes: int
    mark: tuple[int, int] | None
    found: tuple[int, int] | None
    accepted: bool = False

    @property
    def went_backwards(self) -> bool:
        """True when the database holds fewer commits than were acknowledged."""
        if self.mark is None or self.found is None or self.accepted:
            return False
        return self.found[0] < self.mark[0] or self.found[1] < self.mark[1]

    @property
    def is_ok(self) -> bool:
        """True when the store is sound and has not gone backwards."""
        return self.integrity == "ok" and not self.went_backwards


def check_store(path: str | os.PathLike[str], *, accept_rollback: bool = False) -> StoreCheck:
    """Check a SQLite store without writing to it: its schema version, ``PRAGMA
    quick_check``, and its commits against the commit mark (a store that went
    backwards: docs/operations.md "A store that went backwards").

    Args:
        path: the store file; it must exist.
        accept_rollback: an operator has looked at a store that went backwards and
            accepts what it holds: re-base the mark to it (the only write), so the
            store opens for writing again. Executions whose effects the lost commits
            may have started are for the operator to reconcile first.

    Returns:
        A :class:`StoreCheck`.

    Raises:
        StorageError: no such file, not a regular file, empty, not a SQLite database,
            unreadable; nothing was written.
        SchemaVersionError: another application's database or a newer schema.
    """
    target = str(Path(path).absolute())
    try:
        st = os.stat(target)
    except OSError as exc:
        raise StorageError(f"no store at {target}: {exc.strerror or exc}", path=target) from None
    check_existing_file(target, st)
    real = os.path.realpath(target)  # SQLite follows a link; its companions sit there
    marks = MarkFile(real)
    try:
        conn = sqlite3.connect(f"{Path(target).as_uri()}?mode=ro", uri=True)
        try:
            version = schema.inspect_version(conn, target)
            integrity = str(conn.execute("PRAGMA quick_check").fetchone()[0])
            current = version == schema.SCHEMA_VERSION
            found = read_mark(conn) if current else None
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise storage_error(exc, operation="check", path=target) from exc
    try:
        wal_bytes = os.stat(real + "-wal").st_size
    except OSError:
        wal_bytes = 0
    mark = marks.read()
    found_pair = (found.barrier_seq, found.signal_seq) if found is not None else None
    if accept_rollback and found is not None:
        marks.reset(found)
    return StoreCheck(
        target,
        version,
        integrity,
        wal_bytes,
        None if mark is None else (mark.barrier_seq, mark.signal_seq),
        found_pair,
        accepted=accept_rollback and found is not None,
    )


if TYPE_CHECKING:  # the port is a type every store is checked against (mypy)
    from phronomy_fsm.durable.limits import LimitStore
    from phronomy_fsm.durable.ports import AgentRegistry, ExecutionStore

    _CHECKED_PORT: type[ExecutionStore] = SqliteBarrierStore
    _CHECKED_AGENT_PORT: type[AgentRegistry] = SqliteBarrierStore
    _CHECKED_LIMIT_PORT: type[LimitStore] = SqliteBarrierStore
