"""What only the PostgreSQL store has: its schema versioning and migrations recorded by
name, notifications, the inbox order under concurrent senders, and open_store's
choice of backend."""

from __future__ import annotations

import queue
import threading

import psycopg
import pytest

from phronomy_fsm.errors import SchemaVersionError
from phronomy_fsm.store.open import is_postgres_dsn, open_store
from phronomy_fsm.store.postgres import PostgresStore
from phronomy_fsm.store.postgres.schema import KNOWN_MIGRATIONS, SCHEMA_VERSION
from phronomy_fsm.store.sqlite import SqliteBarrierStore

from .conftest import commit, create, signal


def test_open_store_chooses_the_backend(tmp_path, pg_dsn):
    assert is_postgres_dsn(pg_dsn) and is_postgres_dsn("host=db dbname=x")
    assert not is_postgres_dsn(tmp_path / "x.db")
    with open_store(pg_dsn) as store:
        assert isinstance(store, PostgresStore)
    with open_store(tmp_path / "x.db") as store:
        assert isinstance(store, SqliteBarrierStore)


def test_migrations_are_recorded_by_name_and_a_newer_schema_is_refused(pg_dsn):
    PostgresStore(pg_dsn).close()
    PostgresStore(pg_dsn).close()  # a second open migrates nothing
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        names = [r[0] for r in conn.execute("SELECT name FROM phronomy_migrations ORDER BY name")]
        assert tuple(names) == KNOWN_MIGRATIONS
        conn.execute(
            "UPDATE phronomy_meta SET value = %s WHERE key = 'schema_version'",
            (str(SCHEMA_VERSION + 1),),
        )
        before = conn.execute("SELECT count(*) FROM phronomy_migrations").fetchone()
    with pytest.raises(SchemaVersionError, match="newer"):
        PostgresStore(pg_dsn)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM phronomy_migrations").fetchone() == before
        conn.execute(
            "UPDATE phronomy_meta SET value = %s WHERE key = 'schema_version'",
            (str(SCHEMA_VERSION),),
        )
        conn.execute("INSERT INTO phronomy_migrations(name) VALUES ('9999_from_the_future')")
    with pytest.raises(SchemaVersionError, match="9999_from_the_future"):
        PostgresStore(pg_dsn)


def test_a_database_of_another_application_is_refused(postgres):
    dsn = postgres.database("foreign")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE executions (id int)")
    with pytest.raises(SchemaVersionError, match="not a phronomy_fsm store"):
        PostgresStore(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:  # nothing was written
        assert conn.execute("SELECT to_regclass('phronomy_meta')").fetchone() == (None,)


def test_a_signal_notifies_listeners_and_notifications_can_be_off(pg_dsn):
    heard: queue.Queue[tuple[str, str]] = queue.Queue()
    with PostgresStore(pg_dsn) as store, PostgresStore(pg_dsn, notifications=False) as quiet:
        remove = store.add_listener(lambda channel, payload: heard.put((channel, payload)))
        assert store._notifier is not None and store._notifier.connected.wait(10)
        assert quiet.add_listener(lambda c, p: heard.put(("quiet", p)))() is None
        commit(quiet, create("e1"))  # no owner: runnable by any worker
        assert heard.get(timeout=10) == ("phronomy_work", "m")
        quiet.send_signal(signal("e1", "s-1"))
        assert heard.get(timeout=10) == ("phronomy_signals", "e1")
        remove()


def test_concurrent_senders_never_let_a_poller_skip_a_signal(pg_dsn):
    """Senders to different executions commit in any order; a poller that passes
    each poll's cursor to the next still sees every signal exactly once."""
    with PostgresStore(pg_dsn, pool_max=12) as store:
        for i in range(8):
            commit(store, create(f"e{i}"))
        seen: list[int] = []
        done = threading.Event()

        def poll() -> None:
            cursor = store.signal_cursor()
            while True:
                finished = done.is_set()  # read before the poll: the last one sees all
                found = store.signals_since(cursor)
                seen.extend(s.seq for s in found.signals)
                cursor = found.cursor
                if finished:
                    return

        def send(i: int) -> None:
            for n in range(25):
                store.send_signal(signal(f"e{i}", f"s-{i}-{n}"))

        poller = threading.Thread(target=poll)
        poller.start()
        senders = [threading.Thread(target=send, args=(i,)) for i in range(8)]
        for t in senders:
            t.start()
        for t in senders:
            t.join(60)
        done.set()
        poller.join(60)
        assert sorted(seen) == sorted(s.seq for i in range(8) for s in store.list_signals(f"e{i}"))
        assert len(seen) == 200


def test_a_connection_cut_while_the_schema_is_checked_is_retried(pg_dsn):
    """A server restarting while a worker opens the store cuts the connection in the
    middle of the schema check: the open waits for the server and runs the (rolled
    back) migration again instead of failing the worker's start."""
    from phronomy_fsm.store.postgres.schema import MIGRATION_LOCK

    opened: queue.Queue[object] = queue.Queue()
    with psycopg.connect(pg_dsn, autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK,))

        def open_it() -> None:
            try:
                opened.put(PostgresStore(pg_dsn, application_name="opening"))
            except Exception as exc:  # noqa: BLE001 - handed to the test thread
                opened.put(exc)

        thread = threading.Thread(target=open_it)
        thread.start()
        waiting = "SELECT pid FROM pg_stat_activity WHERE application_name = 'opening' AND wait_event_type = 'Lock'"
        for _ in range(400):  # the open waits for the migration lock the test holds
            rows = holder.execute(waiting).fetchall()
            if rows:
                break
            threading.Event().wait(0.05)
        assert rows, "the open never reached the migration"
        holder.execute("SELECT pg_terminate_backend(%s)", (rows[0][0],))
        holder.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK,))
        thread.join(60)
    store = opened.get_nowait()
    assert isinstance(store, PostgresStore), store
    with store:
        commit(store, create("e1"))
        assert store.load_record("e1").revision == 0
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        names = [r[0] for r in conn.execute("SELECT name FROM phronomy_migrations ORDER BY name")]
    assert tuple(names) == KNOWN_MIGRATIONS  # migrated once, completely


def test_a_missing_password_is_refused_at_once_and_a_printed_dsn_leaves_it_out(postgres, caplog):
    """A DSN without the password its role needs (a printed command run without
    ``PGPASSWORD``) is refused at once; waiting for the server would not help. It was
    retried for ``reconnect_seconds``, one warning per attempt."""
    import logging
    import time

    from phronomy_fsm.errors import StorageError
    from phronomy_fsm.store.open import redact_dsn

    if postgres.local is None:
        pytest.skip("the role is made with the harness's own server")
    hba = postgres.local.data_dir / "pg_hba.conf"
    text = hba.read_text()
    if "pw_role" not in text:
        hba.write_text("host all pw_role 127.0.0.1/32 scram-sha-256\n" + text)
    with psycopg.connect(postgres.admin_dsn, autocommit=True) as admin:
        admin.execute("DROP ROLE IF EXISTS pw_role")
        admin.execute("CREATE ROLE pw_role LOGIN PASSWORD 'pw-s3cret' CREATEDB")
        admin.execute("SELECT pg_reload_conf()")
    dsn = postgres.database("pwdb")
    with psycopg.connect(postgres.admin_dsn, autocommit=True) as admin:
        admin.execute(f"ALTER DATABASE {dsn.rsplit('/', 1)[1]} OWNER TO pw_role")
    with_password = dsn.replace("postgres@", "pw_role:pw-s3cret@", 1)

    def opens() -> bool:  # the reload reaches new connections asynchronously
        try:
            PostgresStore(with_password, reconnect_seconds=0).close()
        except StorageError:
            return False
        return True

    deadline = time.monotonic() + 30
    while not opens():
        assert time.monotonic() < deadline, "the role never got in"
        time.sleep(0.1)
    printed = redact_dsn(with_password)
    assert "pw-s3cret" not in printed and printed.startswith("postgresql://pw_role@")
    caplog.set_level(logging.WARNING, logger="phronomy_fsm.store.postgres")
    with pytest.raises(StorageError, match="no password supplied"):
        PostgresStore(printed, reconnect_seconds=30)
    assert not [r for r in caplog.records if "retrying" in r.getMessage()]


def test_processes_opening_an_empty_database_at_once_migrate_it_once(pg_dsn):
    """Two workers and a submitter started together on a new database (as
    docs/tutorial.md does) each open it read-write: one creates the tables, the others
    wait for it and find them (a transaction-scoped migration lock let a waiter answer
    "no tables" from a cache filled before the wait: DuplicateTable)."""
    import subprocess
    import sys

    script = (
        "import sys\n"
        "from phronomy_fsm.store.open import open_store\n"
        "open_store(sys.argv[1]).close()\n"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", script, pg_dsn], stderr=subprocess.PIPE, text=True)
        for _ in range(6)
    ]
    errors = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [0] * 6, errors
