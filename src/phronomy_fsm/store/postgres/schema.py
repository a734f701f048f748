"""The PostgreSQL schema of the engine's store port, its version and its migrations.

Owns the table layout of :class:`~phronomy_fsm.store.postgres.store.PostgresStore`,
the schema version kept in ``phronomy_meta``, and the named migrations, each recorded
by name in ``phronomy_migrations`` when applied (as SQLite's ``_sqlite_migrations``).
Migrations run in one transaction under an advisory lock, so several workers starting
at once migrate once. A database whose version is newer than this code, or that records
migrations this code does not know, is refused before anything is written — when it is
opened, and by every write transaction after (:data:`WRITE_CHECK`): a store that newer
code migrated while it was open writes nothing more.

Tables (JSON bodies are canonical JSON text from :func:`phronomy_fsm.durable.records.to_json`,
byte-identical to what SQLite keeps, so a read-back compares bytes):

- ``executions(execution_id PK, machine, exclusive_key, parent_execution_id, revision,
  status, state, active, spec_sha256, body, created_epoch_ms, updated_epoch_ms,
  deadline_epoch_ms, owner_id, fence, last_barrier, last_digest)`` with the partial
  unique index ``executions_one_active(exclusive_key) WHERE active`` and
  ``executions_runnable(machine, created_epoch_ms) WHERE active`` (the claim scan);
- ``barriers(execution_id, revision, barrier, committed_epoch_ms, digest, status,
  state, worker_id, fence, body)``, PK ``(execution_id, revision)``: the barrier log, with the
  worker and fencing token each commit was made under (who committed what) and, while
  ``phronomy_meta.keep_commit_bodies`` is ``on`` (version 5), the record it wrote;
- ``signals(seq identity PK, signal_id UNIQUE, execution_id, kind, event, body,
  created_epoch_ms, consumed_revision, outcome, xact_id)``: the durable inbox;
  ``xact_id`` (version 3) is the 64-bit id of the transaction that added the row
  (``txid_current()``), which a poller compares with its last snapshot so that it
  misses no signal whose transaction commits after a later one's (see
  :meth:`~phronomy_fsm.store.postgres.store.PostgresStore.signals_since`);
- ``execution_journal(execution_id, revision, position, kind, body)``;
- ``workers(worker_id PK, body, heartbeat_epoch_ms, lease_expires_epoch_ms)``;
- ``machines(machine, spec_sha256, body, registered_epoch_ms)``;
- ``agents(agent_id PK, created_epoch_ms, body)`` (version 2): the agents created;
- ``schedules(name PK, machine, cron, timezone, overlap, catchup_seconds, context,
  paused, next_slot_epoch_ms, ..., claim_owner, claim_expires_epoch_ms)`` (version 4):
  the schedules (:mod:`phronomy_fsm.store._schedules`; ``docs/operations.md``,
  "Schedules");
- ``limit_slots``, ``limit_starts`` and ``limit_pauses`` (version 6, migration
  ``0006_effect_limits``): the state of the effects' rate and concurrency limits, as on
  SQLite (``docs/semantics.md``, "Limits");
- ``phronomy_meta(key PK, value)`` and ``phronomy_migrations(name PK, applied_at)``.

Every time in a ``*_epoch_ms`` column that a lease depends on is the **server's**
clock: :data:`NOW_MS` (``phronomy_now_ms()``), never a worker's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from phronomy_fsm.errors import SchemaVersionError

#: The schema version this code writes and understands.
SCHEMA_VERSION = 6

#: Marker stored in ``phronomy_meta.application``.
APPLICATION = "phronomy_fsm"

#: The server's clock in epoch milliseconds (SQL expression).
NOW_MS = "phronomy_now_ms()"

#: The advisory lock key held while migrating (any constant unique to this project).
MIGRATION_LOCK = 0x70687230

#: The seed of ``hashtextextended(execution_id, seed)``, the key of an execution's
#: **inbox lock**: the transaction-scoped advisory lock every transaction that adds
#: signals to that execution takes first (lock order:
#: :func:`~phronomy_fsm.store.postgres._commit.lock_inboxes`). Until schema version 3
#: one global key (``0x70687231``) serialised every such transaction in the database.
INBOX_LOCK_SEED = 0x70687232

_0001 = """
CREATE TABLE phronomy_meta (key text PRIMARY KEY, value text NOT NULL);
CREATE OR REPLACE FUNCTION phronomy_now_ms() RETURNS bigint LANGUAGE sql VOLATILE
    AS $$ SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint $$;
CREATE TABLE executions (
    execution_id text PRIMARY KEY,
    machine text NOT NULL,
    exclusive_key text,
    parent_execution_id text,
    revision bigint NOT NULL,
    status text NOT NULL,
    state text NOT NULL,
    active boolean NOT NULL,
    spec_sha256 text NOT NULL,
    body text NOT NULL,
    created_epoch_ms bigint NOT NULL,
    updated_epoch_ms bigint NOT NULL,
    deadline_epoch_ms bigint,
    owner_id text,
    fence bigint NOT NULL DEFAULT 0,
    last_barrier text NOT NULL,
    last_digest text NOT NULL
);
CREATE UNIQUE INDEX executions_one_active ON executions (exclusive_key)
    WHERE active AND exclusive_key IS NOT NULL;
CREATE INDEX executions_by_created ON executions (created_epoch_ms, execution_id);
CREATE INDEX executions_by_machine ON executions (machine, status);
CREATE INDEX executions_by_parent ON executions (parent_execution_id)
    WHERE parent_execution_id IS NOT NULL;
CREATE INDEX executions_runnable ON executions (machine, created_epoch_ms) WHERE active;
CREATE INDEX executions_by_owner ON executions (owner_id) WHERE active;
CREATE TABLE barriers (
    execution_id text NOT NULL,
    revision bigint NOT NULL,
    barrier text NOT NULL,
    committed_epoch_ms bigint NOT NULL,
    digest text NOT NULL,
    status text NOT NULL,
    state text NOT NULL,
    worker_id text,
    fence bigint,
    PRIMARY KEY (execution_id, revision)
);
CREATE TABLE signals (
    seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    signal_id text NOT NULL UNIQUE,
    execution_id text NOT NULL,
    kind text NOT NULL,
    event text,
    body text NOT NULL,
    created_epoch_ms bigint NOT NULL,
    consumed_revision bigint,
    outcome text
);
CREATE INDEX signals_pending ON signals (execution_id, seq) WHERE consumed_revision IS NULL;
CREATE INDEX signals_unconsumed ON signals (seq) WHERE consumed_revision IS NULL;
CREATE INDEX signals_by_execution ON signals (execution_id, seq);
CREATE TABLE execution_journal (
    execution_id text NOT NULL,
    revision bigint NOT NULL,
    position integer NOT NULL,
    kind text NOT NULL,
    body text NOT NULL,
    PRIMARY KEY (execution_id, revision, position)
);
CREATE TABLE workers (
    worker_id text PRIMARY KEY,
    body text NOT NULL,
    heartbeat_epoch_ms bigint NOT NULL,
    lease_expires_epoch_ms bigint NOT NULL
);
CREATE TABLE machines (
    machine text NOT NULL,
    spec_sha256 text NOT NULL,
    body text NOT NULL,
    registered_epoch_ms bigint NOT NULL,
    PRIMARY KEY (machine, spec_sha256)
);
"""

_0002 = """
CREATE TABLE agents (
    agent_id text PRIMARY KEY,
    created_epoch_ms bigint NOT NULL,
    body text NOT NULL
);
"""

# rows written before have xact_id 0: older than any snapshot, so no poller reads
# them as new (a constant default first: adding the column rewrites no row). The
# txid_* functions (a bigint id with its epoch) rather than PostgreSQL 13's
# pg_current_xact_id() (xid8), whose values are the same: they run on PostgreSQL 12 too.
_0003 = """
ALTER TABLE signals ADD COLUMN xact_id bigint NOT NULL DEFAULT 0;
ALTER TABLE signals ALTER COLUMN xact_id SET DEFAULT txid_current();
CREATE INDEX signals_unconsumed_by_xact ON signals (xact_id) WHERE consumed_revision IS NULL;
DROP INDEX signals_unconsumed;
"""

# Schedules (docs/operations.md, "Schedules"): one row per schedule; a worker claims
# a row (claim_owner, a lease on the server's clock) while it starts its due slots.
_0004 = """
CREATE TABLE schedules (
    name text PRIMARY KEY,
    machine text NOT NULL,
    cron text NOT NULL,
    timezone text NOT NULL,
    overlap text NOT NULL,
    catchup_seconds double precision,
    context text NOT NULL,
    paused boolean NOT NULL DEFAULT false,
    next_slot_epoch_ms bigint NOT NULL,
    created_epoch_ms bigint NOT NULL,
    updated_epoch_ms bigint NOT NULL,
    buffered_slot_epoch_ms bigint,
    last_execution_id text,
    started bigint NOT NULL DEFAULT 0,
    skipped bigint NOT NULL DEFAULT 0,
    missed bigint NOT NULL DEFAULT 0,
    duplicates bigint NOT NULL DEFAULT 0,
    claim_owner text,
    claim_expires_epoch_ms bigint NOT NULL DEFAULT 0
);
CREATE INDEX schedules_by_machine ON schedules (machine);
"""

#: Version 5: each barrier-log row keeps the record its commit wrote while
#: ``phronomy_meta.keep_commit_bodies`` is ``on`` (the default; ``docs/store.md``,
#: "Kept commits"), for forks and restarts from a past commit.
_0005 = """
ALTER TABLE barriers ADD COLUMN body text;
INSERT INTO phronomy_meta(key, value) VALUES ('keep_commit_bodies', 'on')
    ON CONFLICT (key) DO NOTHING;
"""

# The state of the effects' limits (docs/semantics.md, "Limits"): slots held, starts
# within a rate window, pauses. Self-contained: no other table changes.
_0006 = """
CREATE TABLE limit_slots (
    limit_name text NOT NULL,
    limit_key text NOT NULL,
    effect_key text NOT NULL,
    execution_id text NOT NULL,
    worker_id text NOT NULL,
    acquired_epoch_ms bigint NOT NULL,
    PRIMARY KEY (limit_name, limit_key, effect_key)
);
CREATE INDEX limit_slots_by_execution ON limit_slots (execution_id);
CREATE TABLE limit_starts (
    limit_name text NOT NULL,
    limit_key text NOT NULL,
    started_epoch_ms bigint NOT NULL
);
CREATE INDEX limit_starts_by_key ON limit_starts (limit_name, limit_key, started_epoch_ms);
CREATE TABLE limit_pauses (
    limit_name text NOT NULL,
    limit_key text NOT NULL,
    paused_until_epoch_ms bigint NOT NULL,
    reason text NOT NULL,
    PRIMARY KEY (limit_name, limit_key)
);
"""

#: The named migrations, in order: ``(name, SQL)``.
MIGRATIONS: tuple[tuple[str, str], ...] = (
    ("0001_engine_port", _0001),
    ("0002_agents", _0002),
    ("0003_signal_xact_id", _0003),
    ("0004_schedules", _0004),
    ("0005_kept_commits", _0005),
    ("0006_effect_limits", _0006),
)

#: Migration names this code knows, in order.
KNOWN_MIGRATIONS = tuple(name for name, _ in MIGRATIONS)


def inspect_version(cur: Any, where: str) -> int | None:
    """Read the schema version without writing anything.

    Returns:
        ``None`` for a database without our tables, else the stored version.

    Raises:
        SchemaVersionError: tables named like ours but not a phronomy store, a version
            newer than :data:`SCHEMA_VERSION`, or migrations this code does not know.
        psycopg.Error: the read failed (the caller maps it).
    """
    cur.execute(
        "SELECT to_regclass('phronomy_meta') IS NOT NULL, to_regclass('executions') IS NOT NULL"
    )
    has_meta, has_executions = cur.fetchone()
    if not has_meta:
        if has_executions:
            raise SchemaVersionError(
                f"{where} has an executions table but is not a phronomy_fsm store (no "
                "phronomy_meta table); nothing was written. Use a database of its own.",
                path=where,
            )
        return None
    cur.execute("SELECT key, value FROM phronomy_meta")
    rows = dict(cur.fetchall())
    if rows.get("application") != APPLICATION or "schema_version" not in rows:
        raise SchemaVersionError(
            f"{where} is not a phronomy_fsm store (phronomy_meta without our marker)", path=where
        )
    version = int(rows["schema_version"])
    if version > SCHEMA_VERSION:
        raise SchemaVersionError(
            f"{where} has schema version {version}, newer than this code's {SCHEMA_VERSION}; "
            "nothing was written: upgrade phronomy_fsm",
            path=where,
            version=version,
        )
    cur.execute("SELECT name FROM phronomy_migrations ORDER BY name")
    unknown = [name for (name,) in cur.fetchall() if name not in KNOWN_MIGRATIONS]
    if unknown:
        raise SchemaVersionError(
            f"{where} records migrations this code does not know ({', '.join(unknown)}); "
            "it was written by newer code: upgrade phronomy_fsm",
            path=where,
        )
    return version


#: Run by every write transaction of a store right after its ``BEGIN`` (one round
#: trip with it): a **shared** hold of :data:`MIGRATION_LOCK`, which :func:`migrate`
#: takes exclusively, then the stored version, read only once the lock is held (each
#: statement of the string has its own snapshot). So a migration by newer code either
#: committed before — the version read is its, and :func:`check_still_current`
#: refuses — or waits for this transaction to end: no write of older code lands after
#: a migration.
WRITE_CHECK = (
    f"SELECT pg_advisory_xact_lock_shared({MIGRATION_LOCK});"
    " SELECT value FROM phronomy_meta WHERE key = 'schema_version'"
)


def check_still_current(cur: Any, where: str) -> None:
    """After a statement string ending in :data:`WRITE_CHECK` ran on ``cur``: refuse
    to write when the stored version is newer than :data:`SCHEMA_VERSION` (newer code
    migrated the database after this store opened it; ``docs/scale-out.md``,
    "Rolling upgrades").

    Raises:
        SchemaVersionError: a newer, missing or unreadable version (the caller rolls
            back: nothing written).
    """
    while cur.nextset():  # to the result of the last statement: the version
        pass
    row = cur.fetchone()
    try:
        found = int(row[0]) if row is not None else -1
    except (TypeError, ValueError):
        found = -1
    if found == -1:
        raise SchemaVersionError(
            f"{where}: the schema version is missing or unreadable ({row!r}); nothing was "
            "written, and this process writes nothing more to it",
            path=where,
        )
    if found > SCHEMA_VERSION:
        raise SchemaVersionError(
            f"{where} has schema version {found}, newer than this code's {SCHEMA_VERSION}: "
            "newer code migrated it while this process had it open; nothing was written, "
            "and this process writes nothing more to it (a worker stops): upgrade "
            "phronomy_fsm and start it again.",
            path=where,
            version=found,
        )


def migrate(conn: Any, where: str, *, log: Callable[[str], None] | None = None) -> list[str]:
    """Bring the database to :data:`SCHEMA_VERSION` in one transaction under
    :data:`MIGRATION_LOCK`; returns the names of the migrations applied (empty when
    current). ``conn`` is a psycopg connection outside any transaction.

    Raises:
        SchemaVersionError: see :func:`inspect_version`.
        psycopg.Error: the server refused (the caller maps it; nothing was written).
    """
    applied: list[str] = []
    # a current store is only read: taking MIGRATION_LOCK would make every write
    # transaction (WRITE_CHECK) wait while a worker starts
    with conn.transaction():
        if inspect_version(conn.cursor(), where) == SCHEMA_VERSION:
            return applied
    # The lock is the session's, taken before the migrating transaction starts: a
    # transaction started once it is granted sees — its catalog caches included — what
    # a migration that held it before committed. Under a transaction-scoped lock taken
    # inside, to_regclass answered from a cache filled before the wait, and two
    # processes opening an empty database at once both created the tables
    # (DuplicateTable).
    conn.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK,))
    try:
        return _migrate_locked(conn, where, log)
    finally:
        conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK,))


def _migrate_locked(conn: Any, where: str, log: Callable[[str], None] | None) -> list[str]:
    """The migration itself, in one transaction, with :data:`MIGRATION_LOCK` held by
    the session (:func:`migrate`)."""
    applied: list[str] = []
    with conn.transaction():
        cur = conn.cursor()
        version = inspect_version(cur, where)
        if version is None:
            cur.execute(
                "CREATE TABLE phronomy_migrations (name text PRIMARY KEY,"
                " applied_at timestamptz NOT NULL DEFAULT clock_timestamp())"
            )
            done: set[str] = set()
        else:
            cur.execute("SELECT name FROM phronomy_migrations")
            done = {name for (name,) in cur.fetchall()}
        for name, sql in MIGRATIONS:
            if name in done:
                continue
            cur.execute(sql)
            cur.execute("INSERT INTO phronomy_migrations(name) VALUES (%s)", (name,))
            applied.append(name)
            if log is not None:
                log(name)
        if applied:
            cur.execute(
                "INSERT INTO phronomy_meta(key, value) VALUES ('application', %s),"
                " ('schema_version', %s) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (APPLICATION, str(SCHEMA_VERSION)),
            )
    return applied


__all__ = [
    "APPLICATION",
    "INBOX_LOCK_SEED",
    "KNOWN_MIGRATIONS",
    "MIGRATIONS",
    "MIGRATION_LOCK",
    "NOW_MS",
    "SCHEMA_VERSION",
    "WRITE_CHECK",
    "check_still_current",
    "inspect_version",
    "migrate",
]
