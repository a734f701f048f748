"""The PostgreSQL store of the durable engine: :class:`PostgresStore`.

Implements :class:`~phronomy_fsm.durable.ports.ExecutionStore` with the semantics of
the SQLite store (``docs/semantics.md``, ``docs/scale-out.md``): every commit is one
transaction under a compare-and-set on the revision, the owner, the fencing token and
the owner's lease (measured on the **server's** clock); refusals are typed and write
nothing; a COMMIT whose response is lost is an
:class:`~phronomy_fsm.errors.OutcomeUnknownError` that :meth:`PostgresStore.reconcile`
settles by reading back.

Connections (psycopg 3): one **writer** connection owned by the group-commit thread
(commits queued by :meth:`~PostgresStore.submit` while a transaction is being flushed
form the next batch: one fsync for many commits), a **pool** for reads and the small
maintenance transactions (signals, leases, claims), and — with notifications on — one
``LISTEN`` connection (:mod:`~phronomy_fsm.store.postgres.listen`). A broken connection
is replaced; reads and idempotent writes are retried until ``reconnect_seconds`` pass
(a server restart), commits are not (their outcome is reported).

Locks: a write transaction (a commit's, a signal's, a claim's...) waits at most
``lock_timeout_seconds`` for each lock another transaction holds (``SET LOCAL
lock_timeout``), so an execution whose row a stuck transaction holds delays its own
writes by that much, then fails them with LockTimeoutError, and nobody else's
signals: transactions adding signals queue on a lock of the execution they signal
(its inbox lock), not on one for the whole database. The lock order that keeps
senders and batches from deadlocking is argued at
:func:`~phronomy_fsm.store.postgres._commit.lock_inboxes`.

Errors: NotFoundError, ConflictError, LeaseLostError, AgentBusyError,
ExecutionFinishedError and SerializationError as on SQLite; StorageError for a failure
known to have happened before COMMIT (``busy`` set for a deadlock or serialisation
failure: nothing was written, the engine submits it again); LockTimeoutError (a busy
StorageError) when a lock wait passed ``lock_timeout_seconds``; OutcomeUnknownError
when the COMMIT itself failed or its response was lost; SchemaVersionError for every
write once newer code has migrated the database (each write transaction checks:
:data:`~phronomy_fsm.store.postgres.schema.WRITE_CHECK`; ``docs/scale-out.md``, "Rolling
upgrades").
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Self
from urllib.parse import urlsplit

import psycopg
from psycopg import errors as pgerrors
from psycopg_pool import ConnectionPool

from phronomy_fsm.durable.records import DurableCommit
from phronomy_fsm.errors import (
    LockTimeoutError,
    NotFoundError,
    OutcomeUnknownError,
    PhronomyError,
    SchemaVersionError,
    SerializationError,
    StorageError,
)
from phronomy_fsm.runtime.faults import FaultPlan
from phronomy_fsm.store._schedules import ScheduleSql
from phronomy_fsm.store.group import GroupCommitWriter
from phronomy_fsm.store.limits import PostgresLimits
from phronomy_fsm.store.postgres import schema
from phronomy_fsm.store.postgres._commit import (
    PreparedCommit,
    apply_commit,
    lock_inboxes,
    signal_targets,
)
from phronomy_fsm.store.postgres._reads import PostgresReads
from phronomy_fsm.store.postgres.compact import PostgresCompaction
from phronomy_fsm.store.postgres.listen import Notifier

log = logging.getLogger("phronomy_fsm.store.postgres")

#: A fault-injection seam, as on SQLite: ``hook(point, commits)`` at ``"write"``,
#: ``"commit"`` (just before COMMIT) and ``"committed"`` (after COMMIT returned).
FaultHook = Callable[[str, tuple[Any, ...]], None]

#: Largest ``group_max_batch``.
MAX_GROUP_BATCH = 1000

#: Default ``lock_timeout_seconds``: how long a write waits for one lock another
#: transaction holds before it fails with LockTimeoutError.
DEFAULT_LOCK_TIMEOUT_SECONDS = 5.0

#: SQLSTATE classes of failures that wrote nothing and may simply be retried.
_BUSY_ERRORS = (
    pgerrors.SerializationFailure,
    pgerrors.DeadlockDetected,
    pgerrors.LockNotAvailable,
)


def describe_dsn(dsn: str) -> str:
    """``host:port/database`` of a DSN, without user or password (for messages)."""
    try:
        info = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.Error:
        parts = urlsplit(dsn)
        return f"{parts.hostname}:{parts.port}{parts.path}"
    return f"{info.get('host', 'localhost')}:{info.get('port', 5432)}/{info.get('dbname', '')}"


#: What a refused connection says when waiting for the server would not help: no such
#: database or role, a wrong or missing password (a printed command run without
#: ``PGPASSWORD``: ``fe_sendauth: no password supplied``).
_HOPELESS = ("does not exist", "authentication", "no password supplied")


def is_connection_error(exc: BaseException) -> bool:
    """True for a failure of the connection itself (server gone, restarted, network
    cut): the transaction was lost with it."""
    return isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError)) and not isinstance(
        exc, _BUSY_ERRORS + (pgerrors.QueryCanceled,)
    )


class PostgresStore(PostgresReads, PostgresCompaction, ScheduleSql, PostgresLimits):
    """The engine's store on a PostgreSQL database (module docstring).

    Args:
        dsn: a libpq connection string or ``postgresql://`` URL. The database must
            exist; its tables are created or migrated on open (unless ``read_only``).
        pool_min / pool_max: bounds of the connection pool for reads and maintenance.
        group_max_batch: most commits per group-commit transaction (1 to
            :data:`MAX_GROUP_BATCH`; 1 disables grouping).
        group_window_seconds: extra wait for a batch to fill (0: flush when idle).
        notifications: open a ``LISTEN`` connection on the first
            :meth:`add_listener` (off: callers fall back to polling; for example
            behind a transaction pooler, where LISTEN does not work).
        reconnect_seconds: how long opening (connecting and checking the schema),
            reads and idempotent writes keep retrying while the server cannot be
            reached (a restart) before StorageError.
        connect_timeout_seconds: libpq ``connect_timeout``.
        lock_timeout_seconds: how long a write transaction (a commit, a signal, a
            claim, a lease renewal...) waits for any one lock another transaction
            holds — an execution's row, or its inbox lock — before it gives up with
            LockTimeoutError, having written nothing (PostgreSQL's ``lock_timeout``,
            set for each write transaction; greater than 0). Reads take no such
            locks and are not limited.
        tcp_user_timeout_ms: libpq ``tcp_user_timeout``: how long unacknowledged data
            may stay in flight before the connection counts as broken (a network cut).
        read_only: open an existing, current store for reading only.
        must_exist: refuse a database that holds no phronomy_fsm store yet (operator
            commands: a mistyped DSN or another application's database must not get
            our tables) with NotFoundError, writing nothing; a current or older store
            is migrated as usual.
        faults: crash points (``barrier:<name>:during``, before COMMIT); tests and the
            crash harness only.
        application_name: shown in ``pg_stat_activity``.

    Raises:
        StorageError: the server cannot be reached or refuses (message names it).
        NotFoundError: ``must_exist`` and the database holds no store.
        SchemaVersionError: the schema is newer than this code, or the database holds
            another application's tables; nothing was written.
        ValueError: ``group_max_batch`` out of range, or ``lock_timeout_seconds`` not
            above 0.

    Concurrency: every method is thread-safe.
    """

    def __init__(
        self,
        dsn: str,
        *,
        pool_min: int = 1,
        pool_max: int = 8,
        group_max_batch: int = 64,
        group_window_seconds: float = 0.0,
        notifications: bool = True,
        reconnect_seconds: float = 30.0,
        connect_timeout_seconds: float = 5.0,
        lock_timeout_seconds: float = DEFAULT_LOCK_TIMEOUT_SECONDS,
        tcp_user_timeout_ms: int = 10_000,
        read_only: bool = False,
        must_exist: bool = False,
        faults: FaultPlan | None = None,
        application_name: str = "phronomy_fsm",
    ) -> None:
        if not 1 <= group_max_batch <= MAX_GROUP_BATCH:
            raise ValueError(
                f"group_max_batch must be between 1 and {MAX_GROUP_BATCH}, not {group_max_batch}"
            )
        if not lock_timeout_seconds > 0:
            raise ValueError(f"lock_timeout_seconds must be above 0, not {lock_timeout_seconds}")
        self.dsn = dsn
        self.path = describe_dsn(dsn)  # what messages and operator tools name
        self.read_only = read_only
        self.must_exist = must_exist
        self.notifications = notifications
        self.reconnect_seconds = float(reconnect_seconds)
        self.lock_timeout_seconds = float(lock_timeout_seconds)
        #: opens every write transaction: bounded lock waits (whole milliseconds)
        self._lock_timeout_sql = (
            f"SET LOCAL lock_timeout = {max(1, round(self.lock_timeout_seconds * 1000))}"
        )
        self.faults = faults
        self._connect_kwargs: dict[str, Any] = {
            "autocommit": True,
            "connect_timeout": max(1, int(connect_timeout_seconds)),
            "application_name": application_name,
            "keepalives": 1,
            "keepalives_idle": 5,
            "keepalives_interval": 2,
            "keepalives_count": 3,
            "tcp_user_timeout": int(tcp_user_timeout_ms),
        }
        if read_only:
            self._connect_kwargs["options"] = "-c default_transaction_read_only=on"
        self._closed = False
        #: set once a write found the schema migrated by newer code
        self._schema_refusal: SchemaVersionError | None = None
        self._fault_hook: FaultHook | None = None
        self._write_lock = threading.Lock()
        self._writer: psycopg.Connection[Any] | None = None
        self._notifier: Notifier | None = None
        self._notifier_lock = threading.Lock()
        self._open()
        self._pool = ConnectionPool(
            dsn,
            min_size=max(0, pool_min),
            max_size=max(1, pool_max, pool_min),
            kwargs=dict(self._connect_kwargs),
            timeout=max(5.0, self.reconnect_seconds),
            reconnect_timeout=max(60.0, self.reconnect_seconds * 2),
            name=f"phronomy-pool-{self.path}",
            open=True,
        )
        self._group = GroupCommitWriter(
            self._flush_batch,
            self._fail_item,
            max_batch=group_max_batch,
            window_seconds=group_window_seconds,
            name="phronomy-pg-group-commit",
        )

    # ------------------------------------------------------------------ opening

    def _connect(self) -> psycopg.Connection[Any]:
        return psycopg.connect(self.dsn, **self._connect_kwargs)

    def _open(self) -> None:
        """Connect, then check or migrate the schema. A server that is (re)starting —
        it refuses the connection, or cuts it while the schema is checked — is waited
        for up to ``reconnect_seconds`` (the migrations are transactional: one cut
        short is rolled back and run again). Raises StorageError, NotFoundError,
        SchemaVersionError."""
        deadline = time.monotonic() + self.reconnect_seconds
        delay = 0.1
        while True:
            try:
                conn = self._connect()
            except psycopg.Error as exc:
                hopeless = any(w in str(exc) for w in _HOPELESS)
                if hopeless or time.monotonic() + delay >= deadline:
                    raise StorageError(
                        f"cannot connect to PostgreSQL at {self.path}: {exc}".strip(),
                        path=self.path,
                    ) from exc
                log.warning("cannot connect to PostgreSQL at %s (%s); retrying", self.path, exc)
            else:
                try:
                    self._check_schema(conn)
                    return
                except psycopg.Error as exc:
                    if not is_connection_error(exc) or time.monotonic() + delay >= deadline:
                        raise self._storage(exc, "open") from exc
                    log.warning(
                        "PostgreSQL at %s went away while its schema was checked (%s); retrying",
                        self.path,
                        str(exc).strip(),
                    )
                finally:
                    conn.close()
            time.sleep(delay)
            delay = min(delay * 2, 2.0)

    def _check_schema(self, conn: psycopg.Connection[Any]) -> None:
        if self.must_exist and schema.inspect_version(conn.cursor(), self.path) is None:
            raise NotFoundError(
                f"no phronomy_fsm store in the PostgreSQL database {self.path} (it has "
                "none of our tables); nothing was written. Check the DSN: a store is "
                "made by the first worker or runtime that opens the database",
                path=self.path,
            )
        if self.read_only:
            version = schema.inspect_version(conn.cursor(), self.path)
            if version != schema.SCHEMA_VERSION:
                raise SchemaVersionError(
                    f"{self.path} has schema version {version}, this code needs "
                    f"{schema.SCHEMA_VERSION}; open it read-write once to migrate it",
                    path=self.path,
                )
        else:
            schema.migrate(conn, self.path, log=lambda name: log.info("migrated: %s", name))

    # ------------------------------------------------------------------ errors

    def _storage(self, exc: BaseException, operation: str) -> StorageError:
        busy = isinstance(exc, _BUSY_ERRORS)
        sqlstate = getattr(exc, "sqlstate", None)
        if isinstance(exc, pgerrors.ReadOnlySqlTransaction):
            text = f"the store {self.path} was opened read-only"
        else:
            text = f"PostgreSQL {operation} failed on {self.path}: {type(exc).__name__}: {exc}"
        return StorageError(text.strip(), path=self.path, busy=busy, sqlstate=sqlstate)

    def _lock_timeout(
        self, exc: BaseException, operation: str, execution_id: str | None, held: str = ""
    ) -> LockTimeoutError:
        """The LockTimeoutError of a lock wait that passed ``lock_timeout_seconds``
        (``held``: what the lock guards, when known better than "execution X")."""
        what = held or (f"execution {execution_id}" if execution_id else "the rows it writes")
        said = (str(exc).strip().splitlines() or [""])[0]  # without the CONTEXT lines
        return LockTimeoutError(
            f"PostgreSQL {operation} on {self.path} waited more than "
            f"{self.lock_timeout_seconds:g} s (lock_timeout_seconds) for a lock that another "
            f"transaction holds on {what}; nothing was written. Retry later; if it keeps "
            "timing out, look in pg_stat_activity for a transaction left open on it "
            f"({type(exc).__name__}: {said})",
            path=self.path,
            busy=True,
            sqlstate=getattr(exc, "sqlstate", None),
            execution_id=execution_id,
            lock_timeout_seconds=self.lock_timeout_seconds,
        )

    def _failure(self, exc: BaseException, operation: str) -> BaseException:
        if isinstance(exc, PhronomyError):
            return exc
        if isinstance(exc, (psycopg.Error, OSError)):
            mapped = self._storage(exc, operation)
            mapped.__cause__ = exc
            return mapped
        return exc

    def _unknown(self, exc: BaseException, commit: Any, *, lost: bool) -> OutcomeUnknownError:
        what = "the response was lost after COMMIT" if lost else "the COMMIT failed"
        err = OutcomeUnknownError(
            f"outcome unknown for {commit.execution.execution_id} on {self.path}: {what} "
            f"({type(exc).__name__}: {str(exc).strip()}); call reconcile() to read back whether "
            "it committed",
            intended=commit,
            path=self.path,
        )
        err.__cause__ = exc
        return err

    # ------------------------------------------------------------------ pool access

    @contextmanager
    def _conn(self) -> Iterator[psycopg.Connection[Any]]:
        if self._closed:
            raise StorageError(f"the store {self.path} is closed", path=self.path)
        with self._pool.connection() as conn:
            yield conn

    def _retrying(
        self,
        operation: str,
        fn: Callable[[Any], Any],
        *,
        write: bool,
        execution_id: str | None = None,
    ) -> Any:
        """Run ``fn(cursor)`` on a pooled connection (in a transaction whose lock waits
        are bounded by ``lock_timeout_seconds`` when ``write``), retrying a broken
        connection until ``reconnect_seconds`` pass. ``fn`` must be safe to run again
        (a read, or an idempotent write). A lock wait that timed out is not retried
        (the lock is likely still held): LockTimeoutError naming ``execution_id``.

        Raises: its typed refusals; LockTimeoutError; StorageError."""
        deadline = time.monotonic() + self.reconnect_seconds
        delay = 0.05
        while True:
            try:
                with self._conn() as conn:
                    if write:
                        with conn.transaction(), conn.cursor() as cur:
                            cur.execute(f"{self._lock_timeout_sql}; {schema.WRITE_CHECK}")
                            self._check_still_current(cur)
                            return fn(cur)
                    with conn.cursor() as cur:
                        return fn(cur)
            except PhronomyError:
                raise
            except pgerrors.LockNotAvailable as exc:
                raise self._lock_timeout(exc, operation, execution_id) from exc
            except Exception as exc:
                retry = is_connection_error(exc) or isinstance(exc, _BUSY_ERRORS)
                if isinstance(exc, psycopg_pool_timeout()):
                    retry = True
                if not retry or self._closed or time.monotonic() >= deadline:
                    raise self._failure(exc, operation) from exc
                log.warning(
                    "PostgreSQL %s on %s: %s: %s; retrying",
                    operation,
                    self.path,
                    type(exc).__name__,
                    str(exc).strip(),
                )
                self._pool.check()
                time.sleep(delay)
                delay = min(delay * 2, 1.0)

    def _reading(self, operation: str, fn: Callable[[Any], Any]) -> Any:
        return self._retrying(operation, fn, write=False)

    def _writing(
        self, operation: str, fn: Callable[[Any], Any], *, execution_id: str | None = None
    ) -> Any:
        if self.read_only:
            raise StorageError(f"the store {self.path} was opened read-only", path=self.path)
        if self._schema_refusal is not None:  # newer code migrated it: never write again
            raise copy.copy(self._schema_refusal)
        return self._retrying(operation, fn, write=True, execution_id=execution_id)

    def _schedule_sql(
        self, operation: str, sql: str, params: tuple[Any, ...], *, write: bool
    ) -> list[tuple[Any, ...]]:
        """Run one statement of :class:`~phronomy_fsm.store._schedules.ScheduleSql`:
        ``?`` becomes ``%s`` and ``{now}`` the server's clock (leases are measured
        on it)."""
        text = sql.replace("?", "%s").replace("{now}", schema.NOW_MS)

        def run(cur: Any) -> list[tuple[Any, ...]]:
            cur.execute(text, params)
            return list(cur.fetchall()) if cur.description is not None else []

        if write:
            return self._writing(operation, run)  # type: ignore[no-any-return]
        return self._reading(operation, run)  # type: ignore[no-any-return]

    def _check_still_current(self, cur: Any) -> None:
        """After :data:`~phronomy_fsm.store.postgres.schema.WRITE_CHECK` ran in a write
        transaction: refuse it when newer code migrated the database, and remember
        that, so every later write is refused at once. Raises SchemaVersionError."""
        try:
            schema.check_still_current(cur, self.path)
        except SchemaVersionError as exc:
            self._schema_refusal = exc
            raise

    # ------------------------------------------------------------------ commits

    def install_fault_hook(self, hook: FaultHook | None) -> None:
        """Install (or remove) the fault-injection seam (:data:`FaultHook`)."""
        self._fault_hook = hook

    def _crash_point(self, point: str) -> None:
        if self.faults is not None:
            self.faults.hit(point)

    def submit(self, commit: DurableCommit) -> Future[Any]:
        """Queue ``commit`` for group commit. Returns at once; the future is set once
        the batch's COMMIT returned (a DurableReceipt) or with the typed refusal
        (``docs/semantics.md`` "Barrier outcomes")."""
        future: Future[Any] = Future()
        try:
            self._group.put((commit, future))
        except StorageError as exc:
            future.set_exception(exc)
        return future

    def commit(self, commit: DurableCommit) -> Any:
        """Commit synchronously (``submit(commit).result()``); raises its refusal."""
        return self.submit(commit).result()

    @staticmethod
    def _fail_item(item: tuple[Any, Future[Any]], exc: BaseException) -> None:
        future = item[1]
        if not future.done():
            if not isinstance(exc, PhronomyError):
                exc = StorageError(f"group commit writer failed: {type(exc).__name__}: {exc}")
            future.set_exception(exc)

    def _writer_conn(self) -> psycopg.Connection[Any]:
        if self._closed:
            raise StorageError(f"the store {self.path} is closed", path=self.path)
        if self.read_only:
            raise StorageError(f"the store {self.path} was opened read-only", path=self.path)
        if self._writer is None or self._writer.closed or self._writer.broken:
            self._drop_writer()
            self._writer = self._connect()
        return self._writer

    def _drop_writer(self) -> None:
        conn, self._writer = self._writer, None
        if conn is not None:
            try:
                conn.close()
            except psycopg.Error:
                pass

    def _rollback(self) -> None:
        conn = self._writer
        if conn is None:
            return
        try:
            conn.execute("ROLLBACK")
        except psycopg.Error:
            self._drop_writer()

    def _flush_batch(self, batch: list[tuple[DurableCommit, Future[Any]]]) -> None:
        """Commit one batch in one transaction (one savepoint per commit that has
        more than one statement, when the batch holds several); settle every future
        only after COMMIT returned. A batch that hits an SQL error is replayed one
        commit per transaction, so only the failing commit fails."""
        live: list[PreparedCommit] = []
        for commit, future in batch:
            if not future.set_running_or_notify_cancel():
                continue
            try:
                p = PreparedCommit(commit)
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
        with self._write_lock:
            results = self._transaction(live)
            if results is None:  # an SQL error aborted the batch: one by one
                results = []
                for p in live:
                    one = self._transaction([p])
                    results.append(one[0] if one is not None else StorageError("unreachable"))
        for p, result in zip(live, results):
            if isinstance(result, BaseException):
                p.future.set_exception(result)
            else:
                p.future.set_result(result)

    def _transaction(self, live: list[PreparedCommit]) -> list[Any] | None:
        """One transaction for ``live``; the result (receipt or error) of each, or
        ``None`` when an SQL error aborted a multi-commit batch (replay singly)."""
        hook = self._fault_hook
        results: list[Any] = [None] * len(live)
        ok: list[int] = []
        notes: list[str] = []
        grouped = len(live) > 1
        inboxes: list[str] = []  # the inbox locks being taken (named by a lock timeout)
        try:
            if self._schema_refusal is not None:
                raise copy.copy(self._schema_refusal)
            conn = self._writer_conn()
            cur = conn.cursor()
            cur.execute(f"BEGIN; {self._lock_timeout_sql}; {schema.WRITE_CHECK}")
            self._check_still_current(cur)
            # the inbox locks of every execution the batch signals, before any other
            # lock: the lock order of _commit.lock_inboxes, which send_signal keeps too
            inboxes = sorted(signal_targets(live))
            lock_inboxes(cur, inboxes)
            inboxes = []  # taken: a later lock wait is for a row
            if hook is not None:
                hook("write", tuple(p.commit for p in live))
            for i, p in enumerate(live):
                guard = grouped and not p.simple
                if guard:
                    cur.execute("SAVEPOINT c")
                try:
                    receipt, more = apply_commit(cur, p)
                except PhronomyError as exc:
                    results[i] = exc
                    if guard:
                        cur.execute("ROLLBACK TO SAVEPOINT c")
                    elif not p.simple:  # alone in its transaction: undo it all
                        raise
                    continue
                if guard:
                    cur.execute("RELEASE SAVEPOINT c")
                results[i] = receipt
                notes += more
                ok.append(i)
            if not ok:
                cur.execute("ROLLBACK")
                return results
            if notes:
                channels, payloads = zip(*(n.split("\0", 1) for n in sorted(set(notes))))
                cur.execute(
                    "SELECT pg_notify(c, p) FROM unnest(%s::text[], %s::text[]) AS n(c, p)",
                    (list(channels), list(payloads)),
                )
        except SchemaVersionError as exc:  # newer code migrated it: the whole batch
            self._rollback()
            return [copy.copy(exc) for _ in live]
        except PhronomyError as exc:  # a refused commit alone in its transaction
            self._rollback()
            return [exc]
        except BaseException as exc:  # noqa: BLE001 - nothing may escape this boundary untyped
            self._rollback()
            if grouped and isinstance(exc, psycopg.Error) and not is_connection_error(exc):
                return None
            if isinstance(exc, pgerrors.LockNotAvailable):  # alone in its transaction
                execution_id = live[0].commit.execution.execution_id
                held = f"the inbox of {', '.join(inboxes)}" if inboxes else ""
                failure: BaseException = self._lock_timeout(exc, "commit", execution_id, held)
                failure.__cause__ = exc
            else:
                failure = self._failure(exc, "commit")
            if not isinstance(failure, PhronomyError):
                failure = StorageError(
                    f"commit failed before COMMIT: {type(exc).__name__}: {exc}", path=self.path
                )
            return [
                copy.copy(failure) if results[i] is None or i in ok else results[i]
                for i in range(len(live))
            ]
        try:
            if hook is not None:
                hook("commit", tuple(live[i].commit for i in ok))
            for i in ok:
                self._crash_point(f"barrier:{live[i].commit.barrier}:during")
            cur.execute("COMMIT")
        except BaseException as exc:  # noqa: BLE001 - nothing may escape this boundary untyped
            self._drop_writer()
            for i in ok:
                results[i] = self._unknown(exc, live[i].commit, lost=False)
            return results
        if hook is not None:
            try:
                hook("committed", tuple(live[i].commit for i in ok))
            except BaseException as exc:  # noqa: BLE001 - a lost response
                for i in ok:
                    results[i] = self._unknown(exc, live[i].commit, lost=True)
        return results

    # ------------------------------------------------------------------ notifications

    def add_listener(self, callback: Callable[[str, str], None]) -> Callable[[], None]:
        """Call ``callback(channel, payload)`` for every notification of this
        database (``phronomy_signals``: a signal was added for the execution named by
        the payload; ``phronomy_work``: an execution of the machine named by the
        payload became runnable; ``phronomy_reconnected``: the listener reconnected,
        so notifications may have been missed: poll). Returns the function that
        removes it. With ``notifications=False`` nothing is ever called (poll)."""
        if not self.notifications or self.read_only:
            return lambda: None
        with self._notifier_lock:
            if self._notifier is None:
                self._notifier = Notifier(self.dsn, self._connect_kwargs, self.path)
            return self._notifier.add(callback)

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Flush queued commits, then close every connection. Idempotent."""
        if self._closed:
            return
        self._group.close()
        with self._write_lock:
            self._closed = True
            self._drop_writer()
        if self._notifier is not None:
            self._notifier.close()
        self._pool.close()

    def __enter__(self) -> Self:
        """Use the store as a context manager; :meth:`close` on exit."""
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"PostgresStore({self.path!r})"


def psycopg_pool_timeout() -> type[BaseException]:
    """The pool's timeout error class (no connection could be had in time)."""
    from psycopg_pool import PoolTimeout

    return PoolTimeout


__all__ = ["MAX_GROUP_BATCH", "PostgresStore", "describe_dsn", "is_connection_error"]


if TYPE_CHECKING:  # the port is a type every store is checked against (mypy)
    from phronomy_fsm.durable.limits import LimitStore
    from phronomy_fsm.durable.ports import AgentRegistry, ExecutionStore

    _CHECKED_PORT: type[ExecutionStore] = PostgresStore
    _CHECKED_AGENT_PORT: type[AgentRegistry] = PostgresStore
    _CHECKED_LIMIT_PORT: type[LimitStore] = PostgresStore
