"""A store notices that newer code migrated its database and stops writing
(``docs/store.md``, "Schema"; ``docs/scale-out.md``, "Rolling upgrades"). The schema
version was checked only when a store was opened, so a worker of older code went on
writing rows in its own format after newer code had migrated the tables. Now every
write transaction reads the stored version first and refuses with SchemaVersionError,
writing nothing, once it is newer than the code's. Real components: a SQLite file and a
PostgreSQL database, bumped by another connection as a newer migration would; what
the store holds is read back through another connection."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any

import pytest

from phronomy_fsm.durable.records import Fence, MachineRecord
from phronomy_fsm.errors import SchemaVersionError

from .conftest import T0, commit, create, signal, step, worker

TABLES = ("executions", "barriers", "signals", "execution_journal", "workers", "machines")


def _sqlite(store: Any) -> bool:
    return not hasattr(store, "dsn")


def bump_schema(store: Any) -> int:
    """Raise the stored schema version by one through another connection, as a
    migration of newer code would; returns the new version."""
    if _sqlite(store):
        from phronomy_fsm.store.schema import SCHEMA_VERSION

        with sqlite3.connect(store.path) as conn:
            conn.execute(
                "UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),)
            )
        return SCHEMA_VERSION + 1
    import psycopg

    from phronomy_fsm.store.postgres.schema import SCHEMA_VERSION as PG_VERSION

    with psycopg.connect(store.dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE phronomy_meta SET value = %s WHERE key = 'schema_version'",
            (str(PG_VERSION + 1),),
        )
    return PG_VERSION + 1


def dump(store: Any) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of the store's tables, read through a connection of its own."""
    out: dict[str, list[tuple[Any, ...]]] = {}
    if _sqlite(store):
        with sqlite3.connect(store.path) as conn:
            for table in TABLES:
                out[table] = sorted(map(tuple, conn.execute(f"SELECT * FROM {table}")), key=repr)
        return out
    import psycopg

    with psycopg.connect(store.dsn, autocommit=True) as conn:
        for table in TABLES:
            out[table] = sorted(map(tuple, conn.execute(f"SELECT * FROM {table}")), key=repr)
    return out


def test_every_write_is_refused_once_newer_code_migrated_the_store(store: Any) -> None:
    store.register_worker(worker("w1"), 60)
    commit(store, create("e1"))
    commit(store, create("e2"))
    assert store.claim_execution("e1", "w1") == 1
    e1 = store.load_record("e1")
    newer = bump_schema(store)
    before = dump(store)
    machine = MachineRecord(
        machine="m", spec_version=2, spec_sha256="b" * 64, table={}, registered_at=T0
    )
    attempts: dict[str, Callable[[], Any]] = {
        "a commit (group commit)": lambda: commit(store, step(e1, fence=Fence("w1", 1))),
        "a commit (direct)": lambda: store.commit(step(e1, fence=Fence("w1", 1))),
        "a start": lambda: commit(store, create("e3")),
        "a claim": lambda: store.claim_execution("e2", "w1"),
        "a batch claim": lambda: store.claim_executions(("m",), "w1", limit=5),
        "a lease renewal": lambda: store.renew_lease("w1", 60),
        "a worker registration": lambda: store.register_worker(worker("w2"), 60),
        "a retirement": lambda: store.retire_worker("w1"),
        "a signal": lambda: store.send_signal(signal("e1", "s1")),
        "a machine registration": lambda: store.register_machine(machine),
        "an agent registration": lambda: store.register_agent("a1"),
    }
    for what, attempt in attempts.items():
        with pytest.raises(SchemaVersionError, match=f"schema version {newer}") as raised:
            attempt()
        assert "nothing was written" in str(raised.value), what
        assert dump(store) == before, what
    # reads go on: an operator can still look
    assert store.load_record("e1") == e1
