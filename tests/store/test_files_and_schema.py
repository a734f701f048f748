"""Opening files: schema version, foreign and broken files, permissions, the WAL,
migrations of the barrier log (a newer schema or another application's file is a
clear error and nothing is written)."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import stat
import threading
from pathlib import Path

import pytest
import sqlite_utils

from phronomy_fsm.errors import SchemaVersionError, StorageError
from phronomy_fsm.store import SCHEMA_VERSION, SqliteBarrierStore
from phronomy_fsm.store.schema import KNOWN_MIGRATIONS

from .helpers import T0, admit, create, step


def _fingerprint(path: Path) -> tuple[str, int, int]:
    st = os.stat(path)
    return hashlib.sha256(path.read_bytes()).hexdigest(), st.st_mtime_ns, st.st_size


def _make_store(path: Path) -> None:
    with SqliteBarrierStore(path) as store:
        admit(store, "ex-1")


def test_new_file_is_owner_only_with_wal_and_schema(tmp_path):
    path = tmp_path / "s.db"
    store = SqliteBarrierStore(path)
    admit(store, "ex-1")
    for name in ("s.db", "s.db-wal", "s.db-shm"):
        mode = stat.S_IMODE(os.stat(tmp_path / name).st_mode)
        assert mode & 0o077 == 0, (name, oct(mode))
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    store.close()
    db = sqlite_utils.Database(str(path))
    assert set(db.table_names()) == {
        "agents",
        "executions",
        "barriers",
        "signals",
        "execution_journal",
        "workers",
        "machines",
        "schedules",
        "meta",
        "limit_slots",
        "limit_starts",
        "limit_pauses",
        "_sqlite_migrations",
    }
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert dict(db.execute("SELECT key, value FROM meta").fetchall())["schema_version"] == str(
        SCHEMA_VERSION
    )
    assert [r["name"] for r in db["_sqlite_migrations"].rows] == list(KNOWN_MIGRATIONS)
    partial = db.execute(
        "SELECT sql FROM sqlite_master WHERE name = 'executions_one_active'"
    ).fetchone()[0]
    assert "WHERE active = 1" in partial and "UNIQUE" in partial
    assert db.execute("SELECT count(*) FROM sqlite_master WHERE type = 'trigger'").fetchone() == (
        2,
    )
    db.close()


def test_synchronous_setting_is_applied(tmp_path):
    full = SqliteBarrierStore(tmp_path / "f.db")
    normal = SqliteBarrierStore(tmp_path / "n.db", synchronous="normal")
    try:
        admit(full, "e")
        admit(normal, "e")
        assert full._writer.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
        assert normal._writer.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
    finally:
        full.close()
        normal.close()
    with pytest.raises(ValueError):
        SqliteBarrierStore(tmp_path / "x.db", synchronous="OFF")


def test_reopening_keeps_data_and_does_not_migrate_again(tmp_path):
    path = tmp_path / "s.db"
    _make_store(path)
    with SqliteBarrierStore(path) as store:
        assert store.load_record("ex-1").revision == 0
    db = sqlite_utils.Database(str(path))
    assert db["_sqlite_migrations"].count == len(KNOWN_MIGRATIONS)
    db.close()


def test_newer_schema_version_is_refused_and_the_file_is_unchanged(tmp_path):
    path = tmp_path / "s.db"
    _make_store(path)
    conn = sqlite3.connect(path)
    conn.execute(
        "UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),)
    )
    conn.commit()
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    before = _fingerprint(path)
    with pytest.raises(SchemaVersionError) as info:
        SqliteBarrierStore(path)
    assert "newer" in str(info.value) and info.value.found == SCHEMA_VERSION + 1
    with pytest.raises(SchemaVersionError):
        SqliteBarrierStore(path, read_only=True)
    assert _fingerprint(path) == before


def test_unknown_migration_is_refused_and_the_file_is_unchanged(tmp_path):
    path = tmp_path / "s.db"
    _make_store(path)
    conn = sqlite3.connect(path)
    conn.execute(
        "INSERT INTO _sqlite_migrations(migration_set, name, applied_at) VALUES ('phronomy_fsm.store', '0099_future', 'x')"
    )
    conn.commit()
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    before = _fingerprint(path)
    with pytest.raises(SchemaVersionError, match="0099_future"):
        SqliteBarrierStore(path)
    assert _fingerprint(path) == before


def test_foreign_sqlite_database_is_refused_and_unchanged(tmp_path):
    path = tmp_path / "other.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE notes(id INTEGER PRIMARY KEY, text TEXT)")
    conn.commit()
    conn.close()
    before = _fingerprint(path)
    with pytest.raises(SchemaVersionError, match="not a phronomy_fsm store"):
        SqliteBarrierStore(path)
    assert _fingerprint(path) == before


@pytest.mark.parametrize(
    "content", [b"this is plain text, not a database\n" * 10, os.urandom(8192)]
)
def test_not_a_database_is_a_storage_error_and_unchanged(tmp_path, content):
    path = tmp_path / "junk.db"
    path.write_bytes(content)
    before = _fingerprint(path)
    with pytest.raises(StorageError, match="not a SQLite database"):
        SqliteBarrierStore(path)
    assert _fingerprint(path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["junk.db"]


def test_corrupt_database_body_is_a_storage_error(tmp_path):
    path = tmp_path / "s.db"
    _make_store(path)
    data = bytearray(path.read_bytes())
    data[100:4096] = b"\xff" * (4096 - 100)  # destroy the schema page after the header
    path.write_bytes(bytes(data))
    with pytest.raises(StorageError) as info:
        SqliteBarrierStore(path)
    assert not isinstance(info.value.__cause__, StorageError)


def test_missing_folder_and_read_only_missing_file(tmp_path):
    with pytest.raises(StorageError):
        SqliteBarrierStore(tmp_path / "no" / "such" / "dir.db")
    with pytest.raises(StorageError, match="does not exist"):
        SqliteBarrierStore(tmp_path / "absent.db", read_only=True)
    assert not (tmp_path / "absent.db").exists()


def test_read_only_store_reads_and_refuses_writes(tmp_path):
    path = tmp_path / "s.db"
    _make_store(path)
    with SqliteBarrierStore(path, read_only=True) as ro:
        assert ro.load_record("ex-1").revision == 0
        for write in (
            lambda: ro.commit(create("ex-2")),
            lambda: ro.submit(create("ex-2")).result(10),
            lambda: ro.register_agent("a2"),
            lambda: ro.compact(older_than_days=0),
        ):
            with pytest.raises(StorageError, match="read-only"):
                write()
    with SqliteBarrierStore(path, read_only=True) as ro:
        assert [r.execution_id for r in ro.list_records()] == ["ex-1"]


def test_concurrent_first_open_of_a_new_file(tmp_path):
    path = tmp_path / "race.db"
    errors: list[BaseException] = []
    stores: list[SqliteBarrierStore] = []
    gate = threading.Barrier(4)

    def open_it() -> None:
        gate.wait()
        try:
            stores.append(SqliteBarrierStore(path, busy_timeout_seconds=10))
        except BaseException as exc:  # noqa: BLE001 - nothing may escape this boundary untyped  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=open_it) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    admit(stores[0], "e")
    assert all(s.load_record("e").revision == 0 for s in stores)
    for s in stores:
        s.close()
    db = sqlite_utils.Database(str(path))
    assert db["_sqlite_migrations"].count == len(KNOWN_MIGRATIONS)
    db.close()


def _wal_size(path: Path) -> int:
    return os.path.getsize(str(path) + "-wal")


def test_the_wal_is_grown_once_then_reused_and_nothing_stored_changes(tmp_path):
    """docs/store.md "Commit latency": a FULL writer grows a small WAL to
    wal_prewarm_frames frames and checkpoints it, so commits overwrite it."""
    path = tmp_path / "s.db"
    store = SqliteBarrierStore(path, wal_prewarm_frames=300)
    try:
        ex = admit(store, "ex-1")
        page = store._writer.execute("PRAGMA page_size").fetchone()[0]
        grown = _wal_size(path)
        assert grown >= 32 + 300 * (page + 24)
        commit = step(ex)
        store.commit(commit)
        # the checkpoint let the writer start over at the beginning: no growth
        assert _wal_size(path) == grown
        assert store._writer.execute("PRAGMA user_version").fetchone()[0] == 0
        assert store.load_record("ex-1").revision == 1
    finally:
        store.close()
    with SqliteBarrierStore(path, read_only=True) as again:  # everything reads back
        assert again.load_record("ex-1") == commit.execution
        assert [b.barrier for b in again.barrier_log("ex-1")] == ["@start", "b"]


def test_wal_prewarm_is_skipped_when_disabled_or_not_full(tmp_path):
    for name, options in (
        ("off.db", {"wal_prewarm_frames": 0}),
        ("n.db", {"synchronous": "NORMAL"}),
    ):
        with SqliteBarrierStore(tmp_path / name, **options) as store:
            admit(store, "ex-1")
            assert _wal_size(tmp_path / name) < 100 * 4096, name


def test_wal_prewarm_never_checkpoints_unsynced_and_restores_the_connection(tmp_path):
    """The prewarm writes at synchronous=OFF must not set off an automatic checkpoint
    (it would copy other connections' FULL commits into the database file without
    syncing it), must not wait for another writer's lock, and must leave the writer's
    settings as they were."""
    from phronomy_fsm.store.sqlite import prewarm_wal

    path = tmp_path / "s.db"
    with SqliteBarrierStore(path, wal_prewarm_frames=0) as store:
        admit(store, "ex-1")
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("PRAGMA busy_timeout=60000")
    page = conn.execute("PRAGMA page_size").fetchone()[0]
    # more frames than wal_autocheckpoint (1000): an automatic checkpoint during the
    # prewarm would restart the WAL and keep it near 1000 frames
    assert prewarm_wal(conn, str(path) + "-wal", 1500)
    assert _wal_size(path) >= 32 + 1500 * (page + 24)
    settings = ("synchronous", "busy_timeout", "wal_autocheckpoint")
    assert [conn.execute(f"PRAGMA {name}").fetchone()[0] for name in settings] == [2, 60000, 1000]
    assert not prewarm_wal(conn, str(path) + "-wal", 1500)  # large enough: nothing to do
    conn.close()

    # another writer holds the lock: the prewarm gives up at once instead of waiting
    # its busy timeout (60 s here) before the first commit waits its own
    fresh = tmp_path / "f.db"
    with SqliteBarrierStore(fresh, wal_prewarm_frames=0) as store:
        admit(store, "ex-1")
    holder = sqlite3.connect(fresh, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    conn = sqlite3.connect(fresh, isolation_level=None)
    conn.execute("PRAGMA busy_timeout=60000")
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        prewarm_wal(conn, str(fresh) + "-wal", 50)
    assert [conn.execute(f"PRAGMA {name}").fetchone()[0] for name in settings] == [2, 60000, 1000]
    holder.execute("ROLLBACK")
    holder.close()
    conn.close()
    with SqliteBarrierStore(fresh, read_only=True) as again:
        assert again.load_record("ex-1").revision == 0


def _version_2_store(path: Path, seconds: tuple[int, ...] = (0, 1, 2, 3, 4)) -> None:
    """A store as phronomy_fsm wrote it at schema version 2: migrations 0001 and 0002,
    the barrier log keyed by (execution_id, revision), two agents with one execution
    each, written with the statements of that version (frozen here)."""
    from sqlite_utils.migrations import Migrations

    from phronomy_fsm.store import schema

    v2 = Migrations(schema.MIGRATIONS.name)
    for migration in schema.MIGRATIONS._migrations[:2]:
        v2(name=migration.name)(migration.fn)
    db = sqlite_utils.Database(str(path))
    v2.apply(db)
    db.execute(
        "INSERT INTO meta(key, value) VALUES ('schema_version', '2'), ('application', 'phronomy_fsm')"
    )
    for agent_id in ("a1", "a2"):
        db.execute(
            "INSERT INTO agents(agent_id, revision, lifecycle, journal_head, body,"
            " created_epoch_ms, updated_epoch_ms) VALUES (?, 0, 'idle', 0, '{}', 0, 0)",
            (agent_id,),
        )
    # interleaved, as concurrent executions commit: (execution, revision, barrier, phase)
    barriers = [
        ("ex-1", 0, "admission", "preparing"),
        ("ex-2", 0, "admission", "preparing"),
        ("ex-1", 1, "provider_barrier", "calling_llm"),
        ("ex-2", 1, "provider_barrier", "calling_llm"),
        ("ex-1", 2, "tool_barrier", "dispatching_tools"),
    ]
    cur = db.conn.cursor()
    for (eid, revision, barrier, phase), second in zip(barriers, seconds):
        write_version_2_barrier(cur, eid, revision, barrier, phase, second)
    db.conn.commit()
    db.close()


def write_version_2_barrier(
    cur: sqlite3.Cursor, execution_id: str, revision: int, barrier: str, phase: str, second: int
) -> None:
    """One barrier of an agent execution as the version 1-3 code wrote it (statements
    and body frozen here: the store's own statements follow the current schema)."""
    from datetime import timedelta

    from phronomy_fsm.durable.codec import datetime_to_epoch_ms

    agent_id = {"ex-1": "a1", "ex-2": "a2"}[execution_id]
    status = "preparing" if revision == 0 else "active"
    body = json.dumps(
        {
            "execution_id": execution_id,
            "agent_id": agent_id,
            "revision": revision,
            "status": status,
            "phase": phase,
            "created_at": T0.isoformat(),
            "updated_at": (T0 + timedelta(seconds=second)).isoformat(),
            "input": "hello",
            "tool_batch": [],
            "approval_request": None,
            "error": None,
        },
        sort_keys=True,
    )
    digest = hashlib.sha256(body.encode()).hexdigest()
    now_ms = datetime_to_epoch_ms(T0 + timedelta(seconds=second))
    if revision == 0:
        cur.execute(
            "INSERT INTO executions(execution_id, agent_id, revision, status, phase, active,"
            " spec_sha256, body, created_epoch_ms, updated_epoch_ms, last_barrier, last_digest)"
            " VALUES (?,?,?,?,?,1,?,?,?,?,?,?)",
            (
                execution_id,
                agent_id,
                revision,
                status,
                phase,
                "5" * 64,
                body,
                datetime_to_epoch_ms(T0),
                now_ms,
                barrier,
                digest,
            ),
        )
    else:
        cur.execute(
            "UPDATE executions SET revision=?, status=?, phase=?, body=?, updated_epoch_ms=?,"
            " last_barrier=?, last_digest=? WHERE execution_id=?",
            (revision, status, phase, body, now_ms, barrier, digest, execution_id),
        )


def test_a_version_2_barrier_log_is_migrated_to_commit_order_and_keeps_every_row(tmp_path):
    from phronomy_fsm.store.schema import BARRIER_CHAIN

    path = tmp_path / "v2.db"
    _version_2_store(path)
    with sqlite3.connect(path) as old:
        before = old.execute(
            "SELECT execution_id, revision, barrier, committed_epoch_ms, digest, status, phase"
            " FROM barriers ORDER BY committed_epoch_ms"
        ).fetchall()
    assert len(before) == 5
    with SqliteBarrierStore(path) as store:
        log = {eid: store.barrier_log(eid) for eid in ("ex-1", "ex-2")}
        assert [(b.revision, b.barrier) for b in log["ex-1"]] == [
            (0, "admission"),
            (1, "provider_barrier"),
            (2, "tool_barrier"),
        ]
        assert [(b.revision, b.barrier) for b in log["ex-2"]] == [
            (0, "admission"),
            (1, "provider_barrier"),
        ]
        assert log["ex-1"][0].committed_at == T0.replace(microsecond=123000)  # ms in the log
        # the executions were converted (store/legacy.py); new commits continue each chain
        ex2 = store.load_record("ex-2")
        assert (ex2.machine, ex2.status.value, ex2.revision) == (
            "agent_session",
            "recovery_required",
            1,
        )
        store.commit(step(ex2, "@resolution"))
        assert [b.revision for b in store.barrier_log("ex-2")] == [0, 1, 2]
        assert [b.revision for b in store.barrier_log("ex-1")] == [0, 1, 2]
    with sqlite3.connect(path) as db:
        rows = db.execute(
            "SELECT seq, execution_id, revision, barrier, committed_epoch_ms, digest, status,"
            " state, previous_seq FROM barriers ORDER BY seq"
        ).fetchall()
        assert [r[1:8] for r in rows[:5]] == before  # commit order, nothing changed
        assert [r[0] for r in rows] == [1, 2, 3, 4, 5, 6]
        # each row points at the previous barrier of its own execution
        assert [r[8] for r in rows] == [None, None, 1, 2, 3, 4]
        assert db.execute(
            "SELECT execution_id, last_barrier_seq FROM executions ORDER BY execution_id"
        ).fetchall() == [("ex-1", 5), ("ex-2", 6)]
        assert db.execute(f"{BARRIER_CHAIN} SELECT count(*) FROM chain", ("ex-1",)).fetchone() == (
            3,
        )


def test_a_batch_of_commits_shares_the_last_page_of_the_log(tmp_path):
    """64 executions committed in one group-commit transaction append 64 consecutive
    rows: the log's rows of a batch are neighbours, whatever the execution ids."""
    with SqliteBarrierStore(tmp_path / "s.db") as store:
        executions = [admit(store, f"ex-{i:02d}") for i in range(64)]
        futures = [store.submit(step(ex)) for ex in reversed(executions)]
        for future in futures:
            future.result(10)
        assert all(store.barrier_log(ex.execution_id)[-1].revision == 1 for ex in executions)
    with sqlite3.connect(tmp_path / "s.db") as db:
        last = db.execute("SELECT seq FROM barriers WHERE revision = 1 ORDER BY seq").fetchall()
        assert [s for (s,) in last] == list(range(65, 129))


def test_a_damaged_barrier_chain_ends_the_walk(tmp_path):
    """A row whose previous_seq points forward (hand-edited, corrupted) cannot make the
    log walk loop: the chain stops there."""
    with SqliteBarrierStore(tmp_path / "s.db") as store:
        ex = admit(store, "ex-1")
        for _ in range(3):
            store.commit(step(ex))
            ex = store.load_record("ex-1")
        with sqlite3.connect(tmp_path / "s.db") as db:
            db.execute("UPDATE barriers SET previous_seq = 4 WHERE revision = 2")
        assert [b.revision for b in store.barrier_log("ex-1")] == [2, 3]


def test_a_clock_that_stepped_back_does_not_break_the_migrated_chain(tmp_path):
    """Version 2 ordered nothing by time; if the clock stepped back between two
    barriers of one execution, the migrated log must still link every revision in
    order (a later revision with an earlier commit time)."""
    path = tmp_path / "v2.db"
    # ex-1's revision 2 was committed "before" everything else (clock stepped back)
    _version_2_store(path, seconds=(10, 11, 12, 13, 1))
    with SqliteBarrierStore(path) as store:
        assert [b.revision for b in store.barrier_log("ex-1")] == [0, 1, 2]
        assert [b.revision for b in store.barrier_log("ex-2")] == [0, 1]
        store.commit(step(store.load_record("ex-1"), "@resolution"))
        assert [b.revision for b in store.barrier_log("ex-1")] == [0, 1, 2, 3]
    with sqlite3.connect(path) as db:
        for eid in ("ex-1", "ex-2"):
            seqs = [
                seq
                for (seq,) in db.execute(
                    "SELECT seq FROM barriers WHERE execution_id = ? ORDER BY revision", (eid,)
                )
            ]
            assert seqs == sorted(seqs)
        assert db.execute(
            "SELECT e.revision = b.revision FROM executions e JOIN barriers b"
            " ON b.seq = e.last_barrier_seq WHERE e.execution_id = 'ex-1'"
        ).fetchone() == (1,)


def test_close_waits_for_a_read_in_progress_on_another_thread(tmp_path):
    """close() never closes a reader connection another thread is stepping (that
    crashed the interpreter): the read finishes with its rows, close() returns, and a
    later read is a clean StorageError."""
    store = SqliteBarrierStore(tmp_path / "s.db", wal_prewarm_frames=0)
    admit(store, "ex-1")
    inside, release = threading.Event(), threading.Event()
    rows: list[object] = []

    def reader() -> None:
        with store._reading("test") as conn:
            conn.create_function("hold", 0, lambda: (inside.set(), release.wait(30))[1])
            rows.extend(conn.execute("SELECT hold(), execution_id FROM executions").fetchall())

    read = threading.Thread(target=reader)
    read.start()
    assert inside.wait(30)
    close = threading.Thread(target=store.close)
    close.start()
    release.set()
    read.join(30)
    close.join(30)
    assert rows == [(1, "ex-1")] and not close.is_alive()
    with pytest.raises(StorageError):
        store.load_record("ex-1")
