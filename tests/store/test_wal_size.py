"""The WAL shrinks back after a long reader goes away (docs/store.md "Commit
latency"): a reader holding a transaction open keeps every commit in the WAL, so it grows far past its usual size; once the reader is gone, the next checkpoint and
WAL restart truncate it to the store's limit instead of leaving it at its peak.

Real components: a SQLite file at synchronous=FULL, a second real connection holding a
read transaction, the sizes of the ``-wal`` file on disk.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from phronomy_fsm.store import SqliteBarrierStore

from .helpers import create

PAYLOAD = "x" * 30_000  # about eight pages per execution record


def _admit(store: SqliteBarrierStore, i: int) -> None:
    store.commit(create(f"ex-{i}", context={"text": PAYLOAD}))


def test_the_wal_shrinks_to_its_limit_after_a_long_reader_goes(tmp_path: Path) -> None:
    path = tmp_path / "wal.db"
    wal = Path(f"{path}-wal")
    store = SqliteBarrierStore(path)
    try:
        _admit(store, 0)
        limit = store.wal_size_limit_bytes
        assert 4 << 20 < limit < 16 << 20  # above the prewarmed size, far below a peak
        reader = sqlite3.connect(path)
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM executions").fetchone()  # holds its snapshot
        i = 1
        while wal.stat().st_size < 3 * limit:
            _admit(store, i)
            i += 1
        peak = wal.stat().st_size
        reader.rollback()
        reader.close()
        for j in range(i, i + 3):  # a checkpoint, then a WAL restart, then one more
            _admit(store, j)
        after = wal.stat().st_size
        assert after <= limit < peak / 3, (after, limit, peak)
        assert store.synchronous == "FULL"
        assert len(store.list_records()) == i + 3
    finally:
        store.close()
    assert not os.path.exists(wal) or wal.stat().st_size <= limit
