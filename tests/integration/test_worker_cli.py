"""``phronomy-fsm worker`` as an operator runs it: its log lines carry a time, and
each is printed once (the short ``warning: ...`` lines of the other commands are not
added on top). Real components: worker processes on a SQLite file, one killed with
SIGKILL so that the next one has something to warn about."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from phronomy_fsm.store.open import open_store

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))

import scale_harness

pytestmark = pytest.mark.timeout(120)


def test_a_workers_warnings_are_logged_once_with_their_time(tmp_path: Path) -> None:
    db = str(tmp_path / "orders.db")
    first = scale_harness.start_worker(db, tmp_path, "first")
    try:
        with open_store(db) as store:
            scale_harness.wait_for(
                lambda: [w for w, _hb, _exp in store.list_workers() if w.name == "first"],
                60,
                "the first worker to register",
            )
    finally:
        first.kill()
        first.wait(10)
    second = scale_harness.start_worker(db, tmp_path, "second")
    log = tmp_path / "second.log"
    try:
        scale_harness.wait_for(lambda: "is gone" in log.read_text(), 60, "the dead worker noticed")
    finally:
        assert scale_harness.stop_worker(second) == 0
    lines = [line for line in log.read_text().splitlines() if "is gone" in line]
    assert len(lines) == 1, lines
    assert re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} WARNING phronomy_fsm\.", lines[0])
