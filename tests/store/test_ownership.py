"""The ``agent_owners`` claim of the store (docs/operations.md "Who owns an agent";
``store/ownership.py``): claim, re-entry and release, the liveness rule on forged rows,
the schema migration from version 1, and what it is on a read-only store."""

from __future__ import annotations

import os
import pickle
import sqlite3
import subprocess
import sys
from pathlib import Path

import attrs
import pytest
import sqlite_utils
from sqlite_utils.migrations import Migrations

from phronomy_fsm.errors import AgentOwnedError, NotFoundError, StorageError
from phronomy_fsm.store import SCHEMA_VERSION, FaultInjectingStore, SqliteBarrierStore, schema
from phronomy_fsm.store import ownership as own

from .helpers import admission


@pytest.fixture
def store(tmp_path: Path):
    s = SqliteBarrierStore(tmp_path / "o.db")
    s.create_agent("a")
    yield s
    s.close()


def _forge(store: SqliteBarrierStore, **process: object) -> None:
    """Replace the owner row of agent ``a`` by one of another process."""
    me = own.current_process()
    values = attrs.asdict(me) | process
    conn = sqlite3.connect(store.path)
    with conn:
        conn.execute(
            "INSERT OR REPLACE INTO agent_owners(agent_id, host, pid, start_time, boot_id,"
            " pid_namespace, owner_token, holds, claimed_epoch_ms) VALUES ('a',?,?,?,?,?,'forged',1,0)",
            (
                values["host"],
                values["pid"],
                values["start_time"],
                values["boot_id"],
                values["pid_namespace"],
            ),
        )
    conn.close()


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_claim_reenter_and_release_count_holds(store: SqliteBarrierStore) -> None:
    first = store.claim_agent("a")
    assert not first.reentered and first.replaced is None
    second = store.claim_agent("a")
    assert second.reentered and second.owner_token == first.owner_token
    row = store.agent_owner("a")
    assert row is not None and row.holds == 2 and row.process == own.current_process()
    assert store.release_agent("a", first.owner_token) is True
    assert store.agent_owner("a").holds == 1  # type: ignore[union-attr]
    assert store.release_agent("a", second.owner_token) is True
    assert store.agent_owner("a") is None
    assert store.release_agent("a", first.owner_token) is False


def test_claim_of_an_unknown_agent_writes_nothing(store: SqliteBarrierStore) -> None:
    with pytest.raises(NotFoundError):
        store.claim_agent("ghost")
    conn = sqlite3.connect(store.path)
    assert conn.execute("SELECT count(*) FROM agent_owners").fetchone() == (0,)
    conn.close()


def test_release_with_a_foreign_token_changes_nothing(store: SqliteBarrierStore) -> None:
    claim = store.claim_agent("a")
    assert store.release_agent("a", "not-" + claim.owner_token) is False
    assert store.agent_owner("a").owner_token == claim.owner_token  # type: ignore[union-attr]


def test_a_gone_pid_is_taken_over_with_a_reason(store: SqliteBarrierStore) -> None:
    dead = _dead_pid()
    _forge(store, pid=dead, start_time=123)
    claim = store.claim_agent("a")
    assert claim.replaced is not None and claim.replaced.process.pid == dead
    assert claim.reason == f"no process {dead} exists"
    assert store.agent_owner("a").owner_token == claim.owner_token  # type: ignore[union-attr]


def test_pid_reuse_is_seen_from_the_start_time(store: SqliteBarrierStore) -> None:
    parent = os.getppid()
    _forge(store, pid=parent, start_time=own.process_start_time(parent) + 5)  # type: ignore[operator]
    claim = store.claim_agent("a")
    assert claim.reason == f"pid {parent} now belongs to another process (pid reuse)"


def test_a_live_process_is_refused_even_with_takeover(store: SqliteBarrierStore) -> None:
    parent = os.getppid()
    _forge(store, pid=parent, start_time=own.process_start_time(parent))
    with pytest.raises(AgentOwnedError) as info:
        store.claim_agent("a", takeover=True)
    err = info.value
    assert (err.agent_id, err.pid, err.verifiable) == ("a", parent, True)
    assert store.agent_owner("a").owner_token == "forged"  # type: ignore[union-attr]
    again = pickle.loads(pickle.dumps(err))
    assert isinstance(again, AgentOwnedError) and again.pid == parent and str(again) == str(err)


def test_an_earlier_boot_is_dead(store: SqliteBarrierStore) -> None:
    if own.current_process().boot_id is None:
        pytest.skip("no boot id on this platform")
    parent = os.getppid()
    _forge(store, pid=parent, start_time=own.process_start_time(parent), boot_id="old-boot")
    assert store.claim_agent("a").reason == "the host has rebooted since it claimed the agent"


@pytest.mark.parametrize(
    "process",
    [
        {"host": "elsewhere.example"},
        {"pid_namespace": "pid:[1]"},
        {"start_time": None},
    ],
    ids=["other_host", "other_pid_namespace", "no_start_time"],
)
def test_an_unverifiable_owner_needs_takeover(
    store: SqliteBarrierStore, process: dict[str, object]
) -> None:
    _forge(store, pid=os.getppid(), **process)
    with pytest.raises(AgentOwnedError) as info:
        store.claim_agent("a")
    assert info.value.verifiable is False and "--takeover" in str(info.value)
    assert store.agent_owner("a").owner_token == "forged"  # type: ignore[union-attr]
    claim = store.claim_agent("a", takeover=True)
    assert claim.replaced is not None and claim.reason.startswith("takeover requested")  # type: ignore[union-attr]


def test_the_fault_wrapper_delegates_claims(store: SqliteBarrierStore) -> None:
    wrapped = FaultInjectingStore(store)
    claim = wrapped.claim_agent("a")
    assert wrapped.agent_owner("a").owner_token == claim.owner_token  # type: ignore[union-attr]
    assert wrapped.release_agent("a", claim.owner_token) is True
    assert store.agent_owner("a") is None


def test_read_only_store_reads_the_owner_and_refuses_to_claim(store: SqliteBarrierStore) -> None:
    claim = store.claim_agent("a")
    with SqliteBarrierStore(store.path, read_only=True) as ro:
        assert ro.agent_owner("a").owner_token == claim.owner_token  # type: ignore[union-attr]
        with pytest.raises(StorageError):
            ro.claim_agent("a")


def test_a_version_1_store_is_migrated_and_keeps_its_data(tmp_path: Path) -> None:
    path = tmp_path / "v1.db"
    v1 = Migrations(schema.MIGRATIONS.name)
    v1(name="0001_initial")(schema.MIGRATIONS._migrations[0].fn)
    db = sqlite_utils.Database(str(path))
    v1.apply(db)
    db.execute(
        "INSERT INTO meta(key, value) VALUES ('schema_version', '1'), ('application', 'phronomy_fsm')"
    )
    db.conn.commit()
    db.close()
    with pytest.raises(Exception, match="open it read-write once"):
        SqliteBarrierStore(path, read_only=True)
    with SqliteBarrierStore(path) as store:
        admission(store, "a1", "ex-1")
        assert store.claim_agent("a1").reentered is False
    db = sqlite_utils.Database(str(path))
    assert SCHEMA_VERSION == 4
    assert db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == ("4",)
    assert [r["name"] for r in db["_sqlite_migrations"].rows] == [
        "0001_initial",
        "0002_agent_owners",
        "0003_barrier_log_in_commit_order",
        "0004_generic_executions",
    ]
    assert db["agent_owners"].count == 1 and db["executions"].count == 1
    db.close()
