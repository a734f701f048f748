"""Retention (issue 4 item 9): compact removes or archives old terminal executions,
keeps active ones and the journal, and truncates the WAL."""

from __future__ import annotations

import os
import stat
from datetime import timedelta

import pytest
import sqlite_utils

from phronomy_fsm.errors import NotFoundError, StorageError
from phronomy_fsm.store import BarrierCommit
from phronomy_fsm.store.records import ExecutionStatus

from .helpers import T0, admission, finish, new_execution, step_with_journal


class Clock:
    """A settable clock for commit times."""

    def __init__(self, now):
        self.now = now

    def __call__(self):
        return self.now


@pytest.fixture
def aged(store_factory):
    """A store with: ex-old (terminal, committed 30 days before T0+30d), ex-old-active
    (active, same age), ex-new (terminal, committed at T0+30d)."""
    clock = Clock(T0)
    store = store_factory(clock=clock)
    agent, ex = admission(store, "a1", "ex-old")
    c = step_with_journal(ex, agent, count=2)
    store.commit(c)
    store.commit(finish(c.execution, store.load_agent("a1")))
    admission(store, "a2", "ex-old-active")
    clock.now = T0 + timedelta(days=30)
    store.commit(BarrierCommit("admission", new_execution("a1", "ex-new"), None))
    store.commit(finish(store.load_execution("ex-new"), store.load_agent("a1")))
    return store, clock


def test_compact_removes_old_terminal_executions_only(aged):
    store, clock = aged
    journal_before = store.read_journal("a1")
    report = store.compact(older_than_days=7, now=clock.now)
    assert (report.removed_executions, report.removed_barriers, report.kept_journal_records) == (
        1,
        3,
        3,
    )
    assert report.cutoff == clock.now - timedelta(days=7)
    with pytest.raises(NotFoundError):
        store.load_execution("ex-old")
    assert store.barrier_history("ex-old") == []
    assert store.load_execution("ex-old-active").revision == 0
    assert store.load_execution("ex-new").is_terminal
    assert store.read_journal("a1") == journal_before  # the journal is never compacted
    assert store.load_agent("a1").journal_head == len(journal_before)
    again = store.compact(older_than_days=7, now=clock.now)
    assert again.removed_executions == 0


def test_compact_truncates_the_wal(aged):
    store, clock = aged
    wal = store.path + "-wal"
    assert os.path.getsize(wal) > 0
    report = store.compact(older_than_days=7, now=clock.now)
    assert report.wal_checkpoint[0] == 0
    assert os.path.getsize(wal) == 0


def test_compact_archives_before_removing(aged, tmp_path):
    store, clock = aged
    old = store.load_execution("ex-old")
    archive = tmp_path / "archive.db"
    report = store.compact(older_than_days=7, archive_path=str(archive), now=clock.now)
    assert report.archived_executions == 1 and report.archive_path == str(archive)
    assert stat.S_IMODE(os.stat(archive).st_mode) == 0o600
    db = sqlite_utils.Database(str(archive))
    rows = list(db["executions"].rows)
    assert [r["execution_id"] for r in rows] == ["ex-old"] and rows[0]["revision"] == old.revision
    assert sorted(r["revision"] for r in db["barriers"].rows) == [0, 1, 2]
    assert db["journal"].count == 3
    db.close()


def test_compact_rejects_bad_arguments(aged, tmp_path):
    store, clock = aged
    with pytest.raises(ValueError):
        store.compact(older_than_days=-1)
    junk = tmp_path / "junk.db"
    junk.write_text("not sqlite")
    with pytest.raises(StorageError):
        store.compact(older_than_days=7, archive_path=str(junk), now=clock.now)
    assert store.load_execution("ex-old").is_terminal  # nothing removed when archiving failed
    with pytest.raises(StorageError):
        store.compact(older_than_days=7, archive_path=store.path, now=clock.now)


def test_compact_keeps_a_handoff_whose_target_was_never_admitted(aged):
    # the handed_off source is the only record of a handoff recovery must still start
    store, clock = aged
    clock.now = T0
    _agent, ex = admission(store, "a3", "ex-source")
    handoff = {"target_agent_id": "a4", "target_execution_id": "ex-target", "arguments": {}}
    source = ex.advance(
        now=T0,
        status=ExecutionStatus.ACTIVE,
        phase="calling_llm",
        metadata={**ex.metadata, "handoff": handoff},
    )
    store.commit(BarrierCommit("handoff", source, ex.revision))
    store.commit(finish(source, store.load_agent("a3"), ExecutionStatus.HANDED_OFF))
    clock.now = T0 + timedelta(days=30)
    report = store.compact(older_than_days=7, now=clock.now)
    assert (report.removed_executions, report.kept_pending_handoffs) == (1, 1)  # ex-old only
    kept = store.load_execution("ex-source")
    assert kept.status is ExecutionStatus.HANDED_OFF and kept.metadata["handoff"] == handoff
    # once the target exists, the source is ordinary history
    store.create_agent("a4", now=T0)
    store.commit(BarrierCommit("admission", new_execution("a4", "ex-target"), None))
    again = store.compact(older_than_days=7, now=clock.now)
    assert (again.removed_executions, again.kept_pending_handoffs) == (1, 0)
    with pytest.raises(NotFoundError):
        store.load_execution("ex-source")
