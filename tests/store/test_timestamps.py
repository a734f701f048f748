"""Stored times are UTC with microseconds, whatever offset the caller used
(``docs/store.md``, "Schema": "timezone-aware ISO 8601 times with microseconds").

Real components: a SQLite file, read back raw with ``sqlite3``.
"""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

from phronomy_fsm.durable.records import MachineRecord, WorkerRecord, from_json, to_json
from phronomy_fsm.store import SqliteBarrierStore

from .helpers import create, new_execution, signal

PLUS_TWO = timezone(timedelta(hours=2))
#: a caller's aware time, whole seconds, two hours east of UTC
LOCAL = datetime(2026, 3, 1, 14, 0, 0, tzinfo=PLUS_TWO)
STORED = "2026-03-01T12:00:00.000000+00:00"


def _stamps(data: object) -> list[str]:
    """Every value of a key ending in ``_at``, at any depth."""
    if isinstance(data, dict):
        found = [v for k, v in data.items() if k.endswith("_at") and isinstance(v, str)]
        return found + [s for v in data.values() for s in _stamps(v)]
    if isinstance(data, list):
        return [s for v in data for s in _stamps(v)]
    return []


def test_caller_offsets_are_stored_as_utc_with_microseconds(tmp_path: Path) -> None:
    path = tmp_path / "times.db"
    with SqliteBarrierStore(path) as store:
        store.commit(create("e", created_at=LOCAL, updated_at=LOCAL, deadline_at=LOCAL))
        store.send_signal(signal("e", "s-1", created_at=LOCAL))
        store.register_worker(WorkerRecord("w", "h", 1, "w", LOCAL, LOCAL, LOCAL), 60)
        store.register_machine(MachineRecord("m", 1, "c" * 64, {}, LOCAL))
        loaded = store.load_record("e")
        assert loaded.created_at == LOCAL and loaded.created_at.utcoffset() == timedelta(0)
        assert store.list_signals("e")[0].created_at.utcoffset() == timedelta(0)
    conn = sqlite3.connect(path)
    try:
        bodies = [
            body
            for table in ("executions", "signals", "workers", "machines")
            for (body,) in conn.execute(f"SELECT body FROM {table}")
        ]
    finally:
        conn.close()
    stamps = [s for body in bodies for s in _stamps(json.loads(body))]
    assert len(stamps) == 8 and all(stamp == STORED for stamp in stamps), stamps


def test_encoding_normalises_and_keeps_the_instant() -> None:
    ex = new_execution("e", created_at=LOCAL, updated_at=LOCAL.replace(microsecond=5))
    text = to_json(ex)
    assert f'"created_at":"{STORED}"' in text
    assert '"updated_at":"2026-03-01T12:00:00.000005+00:00"' in text
    back = from_json(type(ex), text)
    assert back.created_at == LOCAL and back.created_at.tzinfo is not None
    assert back.created_at.utcoffset() == timedelta(0)
    assert to_json(back) == text
    utc_whole = new_execution("e", created_at=datetime(2026, 1, 1, tzinfo=UTC))
    assert '"created_at":"2026-01-01T00:00:00.000000+00:00"' in to_json(utc_whole)
