"""Stored times are UTC with microseconds, whatever offset the caller used (issue 11
item 10e; docs/store.md "Schema": "timezone-aware ISO 8601 times with microseconds").

Real components: a SQLite file, read back raw with ``sqlite3``.
"""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

from phronomy_fsm.store import BarrierCommit, SqliteBarrierStore
from phronomy_fsm.store.records import AgentLifecycle, from_json, to_json

from .helpers import journal, new_execution

PLUS_TWO = timezone(timedelta(hours=2))
#: a caller's aware time, whole seconds, two hours east of UTC
LOCAL = datetime(2026, 3, 1, 14, 0, 0, tzinfo=PLUS_TWO)
STORED = "2026-03-01T12:00:00.000000+00:00"


def test_caller_offsets_are_stored_as_utc_with_microseconds(tmp_path: Path) -> None:
    path = tmp_path / "times.db"
    with SqliteBarrierStore(path) as store:
        agent = store.create_agent("a", now=LOCAL)
        ex = new_execution("a", "e", created_at=LOCAL, updated_at=LOCAL)
        root = agent.advance(now=LOCAL, lifecycle=AgentLifecycle.ACTIVE, journal_head=1)
        store.commit(
            BarrierCommit(
                "admission", ex, None, agent=root, journal=(journal("a", "e", occurred_at=LOCAL),)
            )
        )
        loaded = store.load_execution("e")
        assert loaded.created_at == LOCAL and loaded.created_at.utcoffset() == timedelta(0)
        assert store.read_journal("a")[0].occurred_at.tzinfo is not None
    conn = sqlite3.connect(path)
    try:
        bodies = [row[0] for row in conn.execute("SELECT body FROM executions")]
        bodies += [row[0] for row in conn.execute("SELECT body FROM agents")]
        bodies += [row[0] for row in conn.execute("SELECT body FROM journal")]
    finally:
        conn.close()
    stamps = []
    for body in bodies:
        data = json.loads(body)
        stamps += [v for k, v in data.items() if k.endswith(("_at", "occurred_at"))]
    assert stamps and all(stamp == STORED for stamp in stamps), stamps


def test_encoding_normalises_and_keeps_the_instant() -> None:
    ex = new_execution("a", "e", created_at=LOCAL, updated_at=LOCAL.replace(microsecond=5))
    text = to_json(ex)
    assert f'"created_at":"{STORED}"' in text
    assert '"updated_at":"2026-03-01T12:00:00.000005+00:00"' in text
    back = from_json(type(ex), text)
    assert back.created_at == LOCAL and back.created_at.tzinfo is not None
    assert back.created_at.utcoffset() == timedelta(0)
    assert to_json(back) == text
    utc_whole = new_execution("a", "e", created_at=datetime(2026, 1, 1, tzinfo=UTC))
    assert '"created_at":"2026-01-01T00:00:00.000000+00:00"' in to_json(utc_whole)
