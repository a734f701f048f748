"""Retention (``docs/store.md``, "Compaction"): ``compact`` removes — or archives, then
removes — old finished executions with their barrier log, journal entries and
signals; it never touches an active execution, a finished one whose parent is active
or that has an active child, or a handoff whose target was never started; it
truncates the WAL. Every test reads the store (and the archive) back."""

from __future__ import annotations

import os
import sqlite3
import stat
from datetime import timedelta
from typing import Any

import pytest
import sqlite_utils

from phronomy_fsm.durable.records import (
    DurablePoint,
    ExecutionRecord,
    ExecutionStatus,
    JournalEntry,
    MachineRecord,
    WorkerRecord,
    from_json,
)
from phronomy_fsm.errors import NotFoundError, SchemaVersionError, StorageError
from phronomy_fsm.store import SqliteBarrierStore

from .helpers import T0, admit, create, finish, journal, new_execution, signal, step

#: What the ``aged`` store holds, by what compaction must do with it.
REMOVED = ("old-done", "old-pending", "old-child-of-done")
KEPT = ("old-active", "parent", "old-child", "done-parent", "live-child", "source", "new-done")


class Clock:
    """A settable clock for commit times."""

    def __init__(self, now: Any) -> None:
        self.now = now

    def __call__(self) -> Any:
        return self.now


def _done(store: Any, execution_id: str, **fields: Any) -> None:
    store.commit(finish(admit_with(store, execution_id, **fields)))


def admit_with(store: Any, execution_id: str, **fields: Any) -> ExecutionRecord:
    store.commit(create(execution_id, **fields))
    return store.load_record(execution_id)  # type: ignore[no-any-return]


@pytest.fixture
def aged(store_factory):
    """At T0: old-done (finished: 3 commits, 3 journal entries, one consumed signal),
    old-pending (finished with a signal nobody will consume), old-active (running),
    parent (running) with old-child (finished), done-parent (finished) with live-child
    (running) and old-child-of-done (finished), source (an agent session handed off to
    an execution never started). At T0 + 30 days: new-done (finished). The clock is
    left at T0 + 30 days."""
    clock = Clock(T0)
    store = store_factory(clock=clock)
    ex = admit(store, "old-done", "k")
    sent = store.send_signal(signal("old-done", "s-1"))
    c = step(ex, journal=journal(2), consume_signals=(sent.seq,))
    store.commit(c)
    store.commit(finish(c.execution))
    pending = admit(store, "old-pending")
    store.send_signal(signal("old-pending", "s-late"))  # never consumed
    store.commit(finish(pending))
    admit(store, "old-active", "k2")
    parent = admit(store, "parent")
    store.commit(step(parent, children=(new_execution("old-child", parent_execution_id="parent"),)))
    store.commit(finish(store.load_record("old-child")))
    done_parent = admit(store, "done-parent")
    kids = (
        new_execution("live-child", parent_execution_id="done-parent"),
        new_execution("old-child-of-done", parent_execution_id="done-parent"),
    )
    store.commit(step(done_parent, children=kids))
    store.commit(finish(store.load_record("old-child-of-done")))
    store.commit(finish(store.load_record("done-parent")))
    handoff = {"target_agent_id": "b", "target_execution_id": "target", "arguments": {}}
    source = admit_with(
        store, "source", machine="agent_session", context={"handoff": handoff}, exclusive_key="a"
    )
    final = {"status": ExecutionStatus.COMPLETED, "point": DurablePoint.FINAL}
    store.commit(step(source, "@final", state="handed_off", **final))
    clock.now = T0 + timedelta(days=30)
    _done(store, "new-done")
    store.register_agent("a")
    store.register_worker(WorkerRecord("w", "h", 1, "w", T0, T0, T0), 60)
    store.register_machine(MachineRecord("m", 1, "c" * 64, {}, T0))
    return store, clock


def _raw_counts(store: Any, execution_id: str) -> tuple[int, int, int, int]:
    """Rows mentioning ``execution_id`` in executions, barriers, journal and signals."""
    with sqlite3.connect(store.path) as db:
        return tuple(  # type: ignore[return-value]
            db.execute(
                f"SELECT count(*) FROM {table} WHERE execution_id = ?", (execution_id,)
            ).fetchone()[0]
            for table in ("executions", "barriers", "execution_journal", "signals")
        )


def test_compact_removes_old_finished_executions_with_their_rows_and_keeps_the_rest(aged):
    store, clock = aged
    before = {eid: store.load_record(eid) for eid in KEPT}
    logs = {eid: store.barrier_log(eid) for eid in KEPT}
    assert store.journal_entries("old-done") and store.list_signals("old-done")
    report = store.compact(older_than_days=7, now=clock.now)
    assert report.cutoff == clock.now - timedelta(days=7)
    assert report.removed_executions == 3
    # old-done 3 + old-pending 2 + old-child-of-done 2 barrier rows; 3 + 1 + 1 entries
    assert (report.removed_barriers, report.removed_journal_entries) == (7, 5)
    assert report.removed_signals == 2  # one consumed, one that never will be
    assert (report.kept_parent_active, report.kept_child_active) == (1, 1)
    assert report.kept_pending_handoffs == 1
    assert (report.archived_executions, report.archive_path) == (0, None)
    for eid in REMOVED:
        with pytest.raises(NotFoundError):
            store.load_record(eid)
        assert store.barrier_log(eid) == [] and store.journal_entries(eid) == []
        assert store.list_signals(eid) == []
        assert _raw_counts(store, eid) == (0, 0, 0, 0)
    for eid in KEPT:
        assert store.load_record(eid) == before[eid]
        assert store.barrier_log(eid) == logs[eid]
    assert store.agent_ids() == ["a"] and len(store.list_workers()) == 1
    assert store.load_machine("m").spec_sha256 == "c" * 64
    again = store.compact(older_than_days=7, now=clock.now)
    assert again.removed_executions == 0 and again.kept_parent_active == 1


def test_compact_removes_them_once_nothing_holds_them_any_more(aged):
    store, clock = aged
    store.compact(older_than_days=7, now=clock.now)
    store.commit(create("target", machine="agent_session", exclusive_key="b"))
    store.commit(finish(store.load_record("parent")))
    store.commit(finish(store.load_record("live-child")))
    report = store.compact(older_than_days=7, now=clock.now)
    # source (its target exists), old-child (its parent finished), done-parent (no
    # active child); parent, live-child and target finished just now
    assert report.removed_executions == 3
    assert (report.kept_parent_active, report.kept_child_active) == (0, 0)
    assert report.kept_pending_handoffs == 0
    remaining = [r.execution_id for r in store.list_records()]
    assert sorted(remaining) == ["live-child", "new-done", "old-active", "parent", "target"]


def test_compact_archives_before_removing_and_the_archive_reads_back(aged, tmp_path):
    store, clock = aged
    removed = {eid: store.load_record(eid) for eid in REMOVED}
    journals = {eid: store.journal_entries(eid) for eid in REMOVED}
    logs = {eid: store.barrier_log(eid) for eid in REMOVED}
    signals = store.list_signals("old-done") + store.list_signals("old-pending")
    archive = tmp_path / "archive.db"
    report = store.compact(older_than_days=7, archive_path=archive, now=clock.now)
    assert report.archived_executions == 3 and report.archive_path == str(archive)
    assert stat.S_IMODE(os.stat(archive).st_mode) == 0o600
    db = sqlite_utils.Database(str(archive))
    rows = {r["execution_id"]: r for r in db["executions"].rows}
    assert {eid: from_json(ExecutionRecord, r["body"]) for eid, r in rows.items()} == removed
    assert rows["old-done"]["status"] == "completed" and rows["old-done"]["exclusive_key"] == "k"
    for eid in REMOVED:
        archived_log = db.execute(
            "SELECT revision, barrier, digest FROM barriers WHERE execution_id = ?"
            " ORDER BY revision",
            (eid,),
        ).fetchall()
        assert archived_log == [(b.revision, b.barrier, b.digest) for b in logs[eid]]
        entries = [
            from_json(JournalEntry, body)
            for (body,) in db.execute(
                "SELECT body FROM execution_journal WHERE execution_id = ?"
                " ORDER BY revision, position",
                (eid,),
            )
        ]
        assert entries == journals[eid]
    archived_signals = list(db.query("SELECT * FROM signals ORDER BY seq"))
    assert [(s["signal_id"], s["consumed_revision"]) for s in archived_signals] == [
        (s.signal_id, s.consumed_revision) for s in signals
    ]
    db.close()
    with pytest.raises(SchemaVersionError, match="not a phronomy_fsm store"):
        SqliteBarrierStore(archive)  # an archive is not a store
    # a second compaction into the same archive adds to it
    later = store.compact(older_than_days=0, archive_path=archive, now=clock.now + timedelta(1))
    assert later.archived_executions == later.removed_executions == 1  # new-done
    with sqlite_utils.Database(str(archive)) as again:
        assert again["executions"].count == 4
    assert "old-done" not in {r.execution_id for r in store.list_records()}


def test_compact_truncates_the_wal(aged):
    store, clock = aged
    wal = store.path + "-wal"
    assert os.path.getsize(wal) > 0
    report = store.compact(older_than_days=7, now=clock.now)
    assert report.wal_checkpoint[0] == 0
    assert os.path.getsize(wal) == 0


def test_compact_refuses_bad_arguments_and_removes_nothing(aged, tmp_path):
    store, clock = aged
    with pytest.raises(ValueError):
        store.compact(older_than_days=-1)
    junk = tmp_path / "junk.db"
    junk.write_text("not sqlite")
    with pytest.raises(StorageError, match="not a SQLite database"):
        store.compact(older_than_days=7, archive_path=junk, now=clock.now)
    with pytest.raises(StorageError, match="different file"):
        store.compact(older_than_days=7, archive_path=store.path, now=clock.now)
    assert store.load_record("old-done").is_finished  # nothing removed
    assert junk.read_text() == "not sqlite"


def test_a_read_only_store_is_not_compacted_and_no_archive_is_made(aged, tmp_path):
    store, clock = aged
    store.close()
    reader = SqliteBarrierStore(store.path, read_only=True)
    with reader, pytest.raises(StorageError, match="read-only"):
        reader.compact(older_than_days=7, archive_path=tmp_path / "a.db", now=clock.now)
    assert not (tmp_path / "a.db").exists()


def test_compact_with_nothing_eligible_creates_no_archive(store_factory, tmp_path):
    store = store_factory()
    admit(store, "live")
    report = store.compact(older_than_days=0, archive_path=tmp_path / "a.db")
    assert report.removed_executions == 0 and not (tmp_path / "a.db").exists()
    assert [r.execution_id for r in store.list_records()] == ["live"]


def test_an_archive_written_by_an_earlier_version_is_extended(aged, tmp_path):
    """Archives of schema 4 had ``executions`` without ``deadline_epoch_ms`` and a
    ``journal`` table: compacting into one adds the missing column and tables and
    keeps what it held."""
    store, clock = aged
    archive = tmp_path / "old-archive.db"
    with sqlite3.connect(archive) as db:
        db.execute(
            "CREATE TABLE executions (execution_id, machine, exclusive_key,"
            " parent_execution_id, revision, status, state, active, spec_sha256, body,"
            " created_epoch_ms, updated_epoch_ms, PRIMARY KEY (execution_id))"
        )
        db.execute(
            "CREATE TABLE journal (agent_id, sequence, body, PRIMARY KEY (agent_id, sequence))"
        )
        db.execute("INSERT INTO journal VALUES ('a', 1, '{}')")
    report = store.compact(older_than_days=7, archive_path=archive, now=clock.now)
    assert report.archived_executions == 3
    with sqlite_utils.Database(str(archive)) as db:
        assert "deadline_epoch_ms" in db["executions"].columns_dict
        assert db["executions"].count == 3 and db["journal"].count == 1
        assert db["execution_journal"].count == 5 and db["signals"].count == 2
