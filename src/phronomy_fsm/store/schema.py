"""The SQLite schema of the store, its version and its migrations (``docs/store.md``,
"Schema").

Owns: the table layout, the schema version kept in ``meta``, the named migrations
(applied with sqlite-utils' :class:`~sqlite_utils.migrations.Migrations` and recorded by
name in its ``_sqlite_migrations`` table), and the checks done before anything is
written to a file: it must be a SQLite database, a phronomy store (or empty), and not
newer than this code. It must not hold connection policy or the commit logic
(``sqlite.py``, ``_commit.py``).

Tables at version 8 (all STRICT; bodies are canonical JSON of the records of
:mod:`phronomy_fsm.durable.records`; times are integer milliseconds since the epoch):

- ``executions(execution_id PK, machine, exclusive_key, parent_execution_id, revision,
  status, state, active, spec_sha256, body, created_epoch_ms, updated_epoch_ms,
  deadline_epoch_ms, owner_id, fence, last_barrier, last_digest, last_barrier_seq)``
  with the partial unique index ``executions_one_active ON executions(exclusive_key)
  WHERE active = 1`` (at most one active execution per exclusive key) and indexes by
  key, creation time, machine and status, parent, and owner.
- ``barriers(seq INTEGER PRIMARY KEY, execution_id, revision, barrier,
  committed_epoch_ms, digest, status, state, previous_seq, body)``: the barrier log, appended
  in commit order by the triggers ``executions_log_insert``/``executions_log_update``
  from the ``last_barrier``/``last_digest`` columns written by the same statement that
  moves the execution; each row links to the execution's previous one
  (``previous_seq``) and the execution keeps its newest (``last_barrier_seq``), so
  :data:`BARRIER_CHAIN` walks an execution's log back. ``body`` is the execution
  record that commit wrote, kept while ``meta.keep_commit_bodies`` is ``on``.
- ``signals(seq INTEGER PRIMARY KEY, signal_id UNIQUE, execution_id, kind, event, body,
  created_epoch_ms, consumed_revision, outcome)``: the durable inbox.
- ``execution_journal(execution_id, revision, position, kind, body)``: the records
  commits add (an agent's conversation), keyed by execution and commit order.
- ``workers(worker_id PK, body, heartbeat_epoch_ms, lease_expires_epoch_ms)``: leases.
- ``machines(machine, spec_sha256, body, registered_epoch_ms)``: compiled tables
  registered by runtimes, for operator tools.
- ``agents(agent_id PK, created_epoch_ms, body)``: the registered agent ids.
- ``schedules(name PK, machine, cron, timezone, overlap, catchup_seconds, context,
  paused, next_slot_epoch_ms, created_epoch_ms, updated_epoch_ms,
  buffered_slot_epoch_ms, last_execution_id, started, skipped, missed, duplicates,
  claim_owner, claim_expires_epoch_ms)``: the schedules (version 6;
  :mod:`phronomy_fsm.store._schedules`, ``docs/operations.md``, "Schedules").
- ``meta(key PK, value)``: ``schema_version`` and ``application = phronomy_fsm``.

Migrations: ``0001_initial`` and ``0002_agent_owners`` (versions 1-2: the agent
layer's tables), ``0003_barrier_log_in_commit_order`` (version 3),
``0004_generic_executions`` (version 4: executions of any machine, the inbox, journal,
workers and machines), ``0005_agents_on_the_engine`` (version 5: the agent layer's
executions converted by :mod:`phronomy_fsm.store.legacy`, its ``journal`` folded
into ``execution_journal``, ``agents`` reduced to the registry, ``agent_owners``
dropped; ``docs/store.md``, "Upgrading to version 5"), ``0006_schedules`` (version
6: the ``schedules`` table, nothing else changes), ``0007_kept_commits`` (version 7:
``barriers.body`` and the ``keep_commit_bodies`` setting), ``0008_effect_limits``
(version 8: ``limit_slots(limit_name, limit_key, effect_key, execution_id, worker_id,
acquired_epoch_ms)``, ``limit_starts(limit_name, limit_key, started_epoch_ms)`` and
``limit_pauses(limit_name, limit_key, paused_until_epoch_ms, reason)``, the state of the
effects' limits: ``docs/semantics.md``, "Limits").
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

import sqlite_utils
from sqlite_utils.migrations import Migrations

from phronomy_fsm.errors import SchemaVersionError

#: The schema version this code writes and understands.
SCHEMA_VERSION = 8

#: Marker stored in ``meta.application``.
APPLICATION = "phronomy_fsm"

#: The first 16 bytes of every SQLite 3 database file.
SQLITE_HEADER = b"SQLite format 3\x00"

MIGRATIONS = Migrations("phronomy_fsm.store")


@MIGRATIONS(name="0001_initial")
def _m0001_initial(db: sqlite_utils.Database) -> None:
    db.table("meta").create({"key": str, "value": str}, pk="key", not_null=["value"], strict=True)
    db.table("agents").create(
        {
            "agent_id": str,
            "revision": int,
            "lifecycle": str,
            "journal_head": int,
            "body": str,
            "created_epoch_ms": int,
            "updated_epoch_ms": int,
        },
        pk="agent_id",
        not_null=[
            "revision",
            "lifecycle",
            "journal_head",
            "body",
            "created_epoch_ms",
            "updated_epoch_ms",
        ],
        strict=True,
    )
    db.table("executions").create(
        {
            "execution_id": str,
            "agent_id": str,
            "revision": int,
            "status": str,
            "phase": str,
            "active": int,
            "spec_sha256": str,
            "body": str,
            "created_epoch_ms": int,
            "updated_epoch_ms": int,
            "last_barrier": str,
            "last_digest": str,
        },
        pk="execution_id",
        not_null=[
            "agent_id",
            "revision",
            "status",
            "phase",
            "active",
            "spec_sha256",
            "body",
            "created_epoch_ms",
            "updated_epoch_ms",
            "last_barrier",
            "last_digest",
        ],
        strict=True,
    )
    # sqlite-utils cannot express a partial index: plain SQL.
    db.execute("CREATE UNIQUE INDEX executions_one_active ON executions(agent_id) WHERE active = 1")
    db.table("executions").create_index(
        ["agent_id", "created_epoch_ms"], index_name="executions_by_agent"
    )
    db.table("executions").create_index(["created_epoch_ms"], index_name="executions_by_created")
    db.table("journal").create(
        {
            "agent_id": str,
            "sequence": int,
            "record_id": str,
            "execution_id": str,
            "kind": str,
            "body": str,
        },
        pk=("agent_id", "sequence"),
        not_null=["record_id", "execution_id", "kind", "body"],
        strict=True,
    )
    db.table("journal").create_index(
        ["agent_id", "record_id"], index_name="journal_record_id", unique=True
    )
    db.table("journal").create_index(["execution_id"], index_name="journal_by_execution")
    # WITHOUT ROWID is not expressible through sqlite-utils either.
    db.execute(
        "CREATE TABLE barriers ("
        " execution_id TEXT NOT NULL, revision INTEGER NOT NULL, barrier TEXT NOT NULL,"
        " committed_epoch_ms INTEGER NOT NULL, digest TEXT NOT NULL, status TEXT NOT NULL,"
        " phase TEXT NOT NULL, PRIMARY KEY (execution_id, revision)) WITHOUT ROWID, STRICT"
    )
    # The barrier log is written by triggers from the same INSERT/UPDATE that moves the
    # execution, so no revision is ever committed without its log row.
    log_row = (
        "INSERT INTO barriers(execution_id, revision, barrier, committed_epoch_ms, digest, status, phase)"
        " VALUES (new.execution_id, new.revision, new.last_barrier, new.updated_epoch_ms,"
        " new.last_digest, new.status, new.phase);"
    )
    db.execute(
        f"CREATE TRIGGER executions_log_insert AFTER INSERT ON executions BEGIN {log_row} END"
    )
    db.execute(
        f"CREATE TRIGGER executions_log_update AFTER UPDATE OF revision ON executions BEGIN {log_row} END"
    )


@MIGRATIONS(name="0002_agent_owners")
def _m0002_agent_owners(db: sqlite_utils.Database) -> None:
    # One row per owned agent; no foreign key, so a claim never blocks agent writes.
    db.table("agent_owners").create(
        {
            "agent_id": str,
            "host": str,
            "pid": int,
            "start_time": int,
            "boot_id": str,
            "pid_namespace": str,
            "owner_token": str,
            "holds": int,
            "claimed_epoch_ms": int,
        },
        pk="agent_id",
        not_null=["host", "pid", "owner_token", "holds", "claimed_epoch_ms"],
        strict=True,
    )


#: Walks an execution's barrier log from its newest row back along ``previous_seq``
#: (one ``?``: the execution id); ``SELECT seq FROM chain`` then names its rows. UNION,
#: not UNION ALL, and the strictly decreasing step end the walk on a damaged chain.
BARRIER_CHAIN = (
    "WITH RECURSIVE chain(seq) AS ("
    " SELECT last_barrier_seq FROM executions"
    " WHERE execution_id = ? AND last_barrier_seq IS NOT NULL"
    " UNION SELECT b.previous_seq FROM barriers b JOIN chain c ON b.seq = c.seq"
    " WHERE b.previous_seq IS NOT NULL AND b.previous_seq < b.seq)"
)


@MIGRATIONS(name="0003_barrier_log_in_commit_order")
def _m0003_barrier_log_in_commit_order(db: sqlite_utils.Database) -> None:
    # Why: clustered by (execution_id, revision), the barrier log put the barriers of 64
    # executions committed together on 64 different pages (about 135 WAL frames per
    # group-commit transaction, docs/store.md "Performance"). Appended in commit order
    # (rowid ``seq``) they share the last page; an execution finds its rows through
    # ``executions.last_barrier_seq`` and each row's ``previous_seq`` (BARRIER_CHAIN).
    # Revisions cannot repeat: the compare-and-set raises them by exactly one.
    db.execute("ALTER TABLE executions ADD COLUMN last_barrier_seq INTEGER")
    db.execute(
        "CREATE TABLE barriers_by_seq ("
        " seq INTEGER PRIMARY KEY, execution_id TEXT NOT NULL, revision INTEGER NOT NULL,"
        " barrier TEXT NOT NULL, committed_epoch_ms INTEGER NOT NULL, digest TEXT NOT NULL,"
        " status TEXT NOT NULL, phase TEXT NOT NULL, previous_seq INTEGER) STRICT"
    )
    # Commit order is approximated by the commit time, but a clock that stepped back
    # (NTP, a resumed VM) must not reorder one execution's revisions: each row sorts at
    # the latest commit time of its execution up to its revision, so ``seq`` rises with
    # the revision within every execution and the chain below is never inverted.
    db.execute(
        "INSERT INTO barriers_by_seq"
        " SELECT seq, execution_id, revision, barrier, committed_epoch_ms, digest, status,"
        " phase, lag(seq) OVER (PARTITION BY execution_id ORDER BY revision) FROM ("
        "  SELECT row_number() OVER (ORDER BY sort_ms, execution_id, revision) AS seq, *"
        "  FROM (SELECT *, max(committed_epoch_ms) OVER (PARTITION BY execution_id"
        "   ORDER BY revision ROWS UNBOUNDED PRECEDING) AS sort_ms FROM barriers))"
    )
    db.execute(
        "UPDATE executions SET last_barrier_seq = last.seq FROM ("
        " SELECT execution_id, max(seq) AS seq FROM barriers_by_seq GROUP BY execution_id"
        ") AS last WHERE executions.execution_id = last.execution_id"
    )
    db.execute("DROP TRIGGER executions_log_insert")
    db.execute("DROP TRIGGER executions_log_update")
    db.execute("DROP TABLE barriers")
    db.execute("ALTER TABLE barriers_by_seq RENAME TO barriers")
    # The same statement that moves the execution appends its log row and links it, so
    # no revision is ever committed without its log row. The inner UPDATE does not
    # touch ``revision``, so it fires no trigger.
    for event, previous in (("INSERT", "NULL"), ("UPDATE OF revision", "old.last_barrier_seq")):
        name = "insert" if event == "INSERT" else "update"
        db.execute(
            f"CREATE TRIGGER executions_log_{name} AFTER {event} ON executions BEGIN"
            " INSERT INTO barriers(execution_id, revision, barrier, committed_epoch_ms, digest,"
            " status, phase, previous_seq) VALUES (new.execution_id, new.revision,"
            f" new.last_barrier, new.updated_epoch_ms, new.last_digest, new.status, new.phase,"
            f" {previous});"
            " UPDATE executions SET last_barrier_seq = last_insert_rowid()"
            " WHERE rowid = new.rowid; END"
        )


@MIGRATIONS(name="0004_generic_executions")
def _m0004_generic_executions(db: sqlite_utils.Database) -> None:
    # Why: the durable engine runs executions of any machine (docs/semantics.md). The
    # executions table was the agent's: agent_id NOT NULL and a free "phase". It is
    # rebuilt with the machine, the state of the durable point, an optional exclusive
    # key (at most one active execution per key; the agent uses its agent id), the
    # parent of a child execution, the deadline of a waiting execution, and the lease
    # columns (owner worker and fencing token). Existing rows are agent executions.
    db.execute(
        "CREATE TABLE executions_v4 ("
        " execution_id TEXT PRIMARY KEY, machine TEXT NOT NULL, exclusive_key TEXT,"
        " parent_execution_id TEXT, revision INTEGER NOT NULL, status TEXT NOT NULL,"
        " state TEXT NOT NULL, active INTEGER NOT NULL, spec_sha256 TEXT NOT NULL,"
        " body TEXT NOT NULL, created_epoch_ms INTEGER NOT NULL,"
        " updated_epoch_ms INTEGER NOT NULL, deadline_epoch_ms INTEGER, owner_id TEXT,"
        " fence INTEGER NOT NULL DEFAULT 0, last_barrier TEXT NOT NULL,"
        " last_digest TEXT NOT NULL, last_barrier_seq INTEGER) STRICT"
    )
    db.execute(
        "INSERT INTO executions_v4(execution_id, machine, exclusive_key, revision, status,"
        " state, active, spec_sha256, body, created_epoch_ms, updated_epoch_ms,"
        " last_barrier, last_digest, last_barrier_seq)"
        " SELECT execution_id, 'agent_session', agent_id, revision, status, phase, active,"
        " spec_sha256, body, created_epoch_ms, updated_epoch_ms, last_barrier, last_digest,"
        " last_barrier_seq FROM executions"
    )
    db.execute("DROP TABLE executions")  # its indexes and triggers go with it
    db.execute("ALTER TABLE executions_v4 RENAME TO executions")
    db.execute("ALTER TABLE barriers RENAME COLUMN phase TO state")
    db.execute(
        "CREATE UNIQUE INDEX executions_one_active ON executions(exclusive_key)"
        " WHERE active = 1 AND exclusive_key IS NOT NULL"
    )
    db.execute("CREATE INDEX executions_by_key ON executions(exclusive_key, created_epoch_ms)")
    db.execute("CREATE INDEX executions_by_created ON executions(created_epoch_ms)")
    db.execute("CREATE INDEX executions_by_machine ON executions(machine, status)")
    db.execute(
        "CREATE INDEX executions_by_parent ON executions(parent_execution_id)"
        " WHERE parent_execution_id IS NOT NULL"
    )
    db.execute("CREATE INDEX executions_by_owner ON executions(owner_id) WHERE active = 1")
    for event, previous in (("INSERT", "NULL"), ("UPDATE OF revision", "old.last_barrier_seq")):
        name = "insert" if event == "INSERT" else "update"
        db.execute(
            f"CREATE TRIGGER executions_log_{name} AFTER {event} ON executions BEGIN"
            " INSERT INTO barriers(execution_id, revision, barrier, committed_epoch_ms, digest,"
            " status, state, previous_seq) VALUES (new.execution_id, new.revision,"
            " new.last_barrier, new.updated_epoch_ms, new.last_digest, new.status, new.state,"
            f" {previous});"
            " UPDATE executions SET last_barrier_seq = last_insert_rowid()"
            " WHERE rowid = new.rowid; END"
        )
    # The durable inbox: one row per signal, consumed by the commit that applies it.
    db.execute(
        "CREATE TABLE signals (seq INTEGER PRIMARY KEY, signal_id TEXT NOT NULL UNIQUE,"
        " execution_id TEXT NOT NULL, kind TEXT NOT NULL, event TEXT, body TEXT NOT NULL,"
        " created_epoch_ms INTEGER NOT NULL, consumed_revision INTEGER, outcome TEXT) STRICT"
    )
    db.execute(
        "CREATE INDEX signals_pending ON signals(execution_id, seq) WHERE consumed_revision IS NULL"
    )
    # Application records added to commits, per execution in commit order.
    db.execute(
        "CREATE TABLE execution_journal (execution_id TEXT NOT NULL, revision INTEGER NOT NULL,"
        " position INTEGER NOT NULL, kind TEXT NOT NULL, body TEXT NOT NULL,"
        " PRIMARY KEY (execution_id, revision, position)) WITHOUT ROWID, STRICT"
    )
    # Workers (runtimes) and their leases; executions.owner_id names one of them.
    db.execute(
        "CREATE TABLE workers (worker_id TEXT PRIMARY KEY, body TEXT NOT NULL,"
        " heartbeat_epoch_ms INTEGER NOT NULL, lease_expires_epoch_ms INTEGER NOT NULL) STRICT"
    )
    # Machines registered by runtimes: the compiled table, for operator tools.
    db.execute(
        "CREATE TABLE machines (machine TEXT NOT NULL, spec_sha256 TEXT NOT NULL,"
        " body TEXT NOT NULL, registered_epoch_ms INTEGER NOT NULL,"
        " PRIMARY KEY (machine, spec_sha256)) WITHOUT ROWID, STRICT"
    )


@MIGRATIONS(name="0005_agents_on_the_engine")
def _m0005_agents_on_the_engine(db: sqlite_utils.Database) -> None:
    # Why: the agent runs on the durable engine (docs/agent.md). Its executions are
    # engine executions (the legacy ones are converted: store/legacy.py), its
    # conversation is the engine's execution journal, who runs an execution is the
    # worker lease, and an agent is just a registered id.
    import json

    from phronomy_fsm.store import legacy

    journals: dict[str, list[dict[str, object]]] = {}
    for (body,) in db.execute("SELECT body FROM journal ORDER BY agent_id, sequence").fetchall():
        record = json.loads(body)
        journals.setdefault(str(record.get("execution_id")), []).append(record)
    rows = db.execute(
        "SELECT execution_id, body FROM executions WHERE json_extract(body, '$.point') IS NULL"
    ).fetchall()
    for execution_id, body in rows:
        old = json.loads(body)
        records = journals.get(execution_id, [])
        new = legacy.convert_execution(old, records)
        db.execute(
            "UPDATE executions SET machine = ?, state = ?, status = ?, active = ?,"
            " spec_sha256 = ?, body = ?, owner_id = NULL WHERE execution_id = ?",
            (
                new.machine,
                new.state,
                new.status.value,
                1 if new.is_active else 0,
                new.spec_sha256,
                legacy.encode(new),
                execution_id,
            ),
        )
        if new.is_active:  # its context holds the conversation; its end journals it
            continue
        in_history = old.get("status") in ("completed", "handed_off")
        for position, (kind, data) in enumerate(legacy.convert_journal(records, in_history)):
            db.execute(
                "INSERT INTO execution_journal(execution_id, revision, position, kind, body)"
                " VALUES (?, 0, ?, ?, ?)",
                (execution_id, position, kind, legacy.encode_entry(kind, data, position)),
            )
    db.execute(
        "CREATE TABLE agents_v5 (agent_id TEXT PRIMARY KEY, created_epoch_ms INTEGER NOT NULL,"
        " body TEXT NOT NULL) STRICT"
    )
    db.execute(
        "INSERT INTO agents_v5(agent_id, created_epoch_ms, body)"
        " SELECT agent_id, created_epoch_ms, '{}' FROM agents"
    )
    db.execute("DROP TABLE agents")
    db.execute("ALTER TABLE agents_v5 RENAME TO agents")
    db.execute("DROP TABLE journal")
    db.execute("DROP TABLE agent_owners")
    # compaction removes an execution's signals, consumed or not (store/compact.py)
    db.execute("CREATE INDEX signals_by_execution ON signals(execution_id)")


@MIGRATIONS(name="0006_schedules")
def _m0006_schedules(db: sqlite_utils.Database) -> None:
    # Why: schedules start executions durably (docs/operations.md, "Schedules"); a
    # worker claims a row (claim_owner and its lease) while it starts the due slots.
    db.execute(
        "CREATE TABLE schedules (name TEXT PRIMARY KEY, machine TEXT NOT NULL,"
        " cron TEXT NOT NULL, timezone TEXT NOT NULL, overlap TEXT NOT NULL,"
        " catchup_seconds REAL, context TEXT NOT NULL, paused INTEGER NOT NULL DEFAULT 0,"
        " next_slot_epoch_ms INTEGER NOT NULL, created_epoch_ms INTEGER NOT NULL,"
        " updated_epoch_ms INTEGER NOT NULL, buffered_slot_epoch_ms INTEGER,"
        " last_execution_id TEXT, started INTEGER NOT NULL DEFAULT 0,"
        " skipped INTEGER NOT NULL DEFAULT 0, missed INTEGER NOT NULL DEFAULT 0,"
        " duplicates INTEGER NOT NULL DEFAULT 0, claim_owner TEXT,"
        " claim_expires_epoch_ms INTEGER NOT NULL DEFAULT 0) STRICT"
    )
    db.execute("CREATE INDEX schedules_by_machine ON schedules(machine)")


#: ``meta`` key of the store's retention setting for commit bodies: ``on`` (the
#: default) keeps each commit's execution record — its context included — with its
#: barrier-log row, for forks and restarts from a past commit (``docs/store.md``,
#: "Kept commits"); ``off`` keeps only its digest.
KEEP_COMMITS = "keep_commit_bodies"


def _log_triggers(db: sqlite_utils.Database) -> None:
    """The barrier-log triggers (module docstring) writing ``body`` too when the
    store keeps commit bodies (:data:`KEEP_COMMITS`)."""
    kept = f"(SELECT value FROM meta WHERE key = '{KEEP_COMMITS}') = 'on'"
    for event, previous in (("INSERT", "NULL"), ("UPDATE OF revision", "old.last_barrier_seq")):
        name = "insert" if event == "INSERT" else "update"
        db.execute(f"DROP TRIGGER IF EXISTS executions_log_{name}")
        db.execute(
            f"CREATE TRIGGER executions_log_{name} AFTER {event} ON executions BEGIN"
            " INSERT INTO barriers(execution_id, revision, barrier, committed_epoch_ms, digest,"
            " status, state, previous_seq, body) VALUES (new.execution_id, new.revision,"
            " new.last_barrier, new.updated_epoch_ms, new.last_digest, new.status, new.state,"
            f" {previous}, CASE WHEN {kept} THEN new.body END);"
            " UPDATE executions SET last_barrier_seq = last_insert_rowid()"
            " WHERE rowid = new.rowid; END"
        )


@MIGRATIONS(name="0007_kept_commits")
def _m0007_kept_commits(db: sqlite_utils.Database) -> None:
    # Why: a fork or restart from a past commit needs the execution as that commit
    # left it, not only its digest (docs/store.md, "Kept commits"). Earlier commits
    # stay without one.
    db.execute("ALTER TABLE barriers ADD COLUMN body TEXT")
    db.execute(
        f"INSERT INTO meta(key, value) VALUES ('{KEEP_COMMITS}', 'on') ON CONFLICT(key) DO NOTHING"
    )
    _log_triggers(db)


#: The tables of the effects' limits (``docs/semantics.md``, "Limits"): the slots held
#: (by which execution, effect and worker), the starts within a rate window, and the
#: pauses an outside service asked for. Self-contained: it reads and changes no other
#: table.
EFFECT_LIMITS_SQL = (
    (
        "CREATE TABLE limit_slots (limit_name TEXT NOT NULL, limit_key TEXT NOT NULL,"
        " effect_key TEXT NOT NULL, execution_id TEXT NOT NULL, worker_id TEXT NOT NULL,"
        " acquired_epoch_ms INTEGER NOT NULL,"
        " PRIMARY KEY (limit_name, limit_key, effect_key)) STRICT"
    ),
    "CREATE INDEX limit_slots_by_execution ON limit_slots(execution_id)",
    (
        "CREATE TABLE limit_starts (limit_name TEXT NOT NULL, limit_key TEXT NOT NULL,"
        " started_epoch_ms INTEGER NOT NULL) STRICT"
    ),
    "CREATE INDEX limit_starts_by_key ON limit_starts(limit_name, limit_key, started_epoch_ms)",
    (
        "CREATE TABLE limit_pauses (limit_name TEXT NOT NULL, limit_key TEXT NOT NULL,"
        " paused_until_epoch_ms INTEGER NOT NULL, reason TEXT NOT NULL,"
        " PRIMARY KEY (limit_name, limit_key)) STRICT"
    ),
)


@MIGRATIONS(name="0008_effect_limits")
def _m0008_effect_limits(db: sqlite_utils.Database) -> None:
    # Why: rate and concurrency limits on effects hold across every worker of a
    # store, so their state lives in it (docs/semantics.md, "Limits").
    for statement in EFFECT_LIMITS_SQL:
        db.execute(statement)


#: Migration names this code knows, in order.
KNOWN_MIGRATIONS = tuple(  # every migration is pending on an empty database
    m.name for m in MIGRATIONS.pending(sqlite_utils.Database(memory=True))
)


def inspect_version(conn: sqlite3.Connection, path: str) -> int | None:
    """Read the schema version without writing anything.

    Returns:
        ``None`` for an empty database (no tables), else the stored schema version.

    Raises:
        SchemaVersionError: the database holds tables but is not a phronomy store, its
            version is newer than :data:`SCHEMA_VERSION`, or it records migrations this
            code does not know (written by newer code).
        sqlite3.Error: the file cannot be read (the caller maps it to StorageError).
    """
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    user_tables = {t for t in tables if not t.startswith("sqlite_")}
    if not user_tables:
        return None
    if "meta" not in tables:
        raise SchemaVersionError(
            f"{path} is a SQLite database but not a phronomy_fsm store (no meta table); nothing "
            "was written. Use a separate file for the store. (Archives written by `phronomy-fsm "
            "store compact` are plain SQLite files: read them with sqlite3 or sqlite-utils.)",
            path=path,
        )
    rows = dict(
        conn.execute("SELECT key, value FROM meta WHERE key IN ('schema_version', 'application')")
    )
    if rows.get("application") != APPLICATION or "schema_version" not in rows:
        raise SchemaVersionError(
            f"{path} is not a phronomy_fsm store (meta table without our marker)", path=path
        )
    try:
        version = int(rows["schema_version"])
    except ValueError:
        raise SchemaVersionError(
            f"{path}: unreadable schema version {rows['schema_version']!r}", path=path
        ) from None
    if version > SCHEMA_VERSION:
        raise SchemaVersionError(
            f"{path} has schema version {version}, newer than this phronomy_fsm understands "
            f"({SCHEMA_VERSION}); nothing was written. Upgrade phronomy_fsm to open it.",
            path=path,
            found=version,
            supported=SCHEMA_VERSION,
        )
    if "_sqlite_migrations" in tables:
        applied = {
            row[0]
            for row in conn.execute(
                "SELECT name FROM _sqlite_migrations WHERE migration_set = ?", (MIGRATIONS.name,)
            )
        }
        unknown = sorted(applied - set(KNOWN_MIGRATIONS))
        if unknown:
            raise SchemaVersionError(
                f"{path} records migrations this phronomy_fsm does not know ({', '.join(unknown)}); "
                "it was written by newer code. Upgrade phronomy_fsm; nothing was written.",
                path=path,
                unknown_migrations=tuple(unknown),
            )
    return version


#: Reads the stored schema version (no parameter); every write transaction of a store
#: runs it first (:func:`check_still_current`).
STORED_VERSION = "SELECT value FROM meta WHERE key = 'schema_version'"


def newer_schema_error(path: str, found: int, supported: int) -> SchemaVersionError:
    """The SchemaVersionError of a store that newer code migrated while it was open
    (``found`` stored, ``supported`` this code's): it writes nothing more."""
    return SchemaVersionError(
        f"{path} has schema version {found}, newer than this phronomy_fsm understands "
        f"({supported}): newer code migrated it while this process had it open; nothing "
        "was written, and this process writes nothing more to it (a worker stops): "
        "upgrade phronomy_fsm and start it again.",
        path=path,
        found=found,
        supported=supported,
    )


def check_still_current(cur: sqlite3.Cursor, path: str) -> None:
    """Inside a write transaction (``BEGIN IMMEDIATE`` holds the write lock, so no
    migration can run until it ends): refuse to write when the stored schema version
    is newer than :data:`SCHEMA_VERSION` — newer code migrated the file after this
    store opened it (``docs/store.md``, "Schema"). One indexed read of ``meta``.

    Raises:
        SchemaVersionError: a newer (or unreadable) version; roll back, nothing written.
        sqlite3.Error: the read failed.
    """
    row = cur.execute(STORED_VERSION).fetchone()
    try:
        found = int(row[0]) if row is not None else -1
    except ValueError:
        found = -1
    if found == -1:
        raise SchemaVersionError(
            f"{path}: the schema version is missing or unreadable ({row!r}); nothing was "
            "written, and this process writes nothing more to it",
            path=path,
        )
    if found > SCHEMA_VERSION:
        raise newer_schema_error(path, found, SCHEMA_VERSION)


def migrate(
    conn: sqlite3.Connection, path: str, *, on_checked: Callable[[], None] | None = None
) -> int:
    """Bring the schema to :data:`SCHEMA_VERSION` in one ``BEGIN IMMEDIATE`` transaction.

    The version is checked again after the write lock is taken (another process may
    have migrated meanwhile), so concurrent first opens of a new file are safe.
    ``conn`` must be in autocommit mode (``isolation_level=None``).

    Returns:
        The schema version now stored.

    Raises:
        SchemaVersionError: as :func:`inspect_version`; the transaction is rolled back.
        sqlite3.Error: for the caller to map (busy after the timeout, I/O...).
    """
    conn.execute("BEGIN IMMEDIATE")
    try:
        version = inspect_version(conn, path)
        if version != SCHEMA_VERSION:
            db = sqlite_utils.Database(conn, execute_plugins=False, recursive_triggers=False)
            MIGRATIONS.apply(db)  # inside our transaction: sqlite-utils uses savepoints
            conn.execute(
                "INSERT INTO meta(key, value) VALUES ('schema_version', ?), ('application', ?) "
                "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                (str(SCHEMA_VERSION), APPLICATION),
            )
        if on_checked is not None:
            on_checked()
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return SCHEMA_VERSION
