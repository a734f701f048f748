"""A start on a file system that is really full (a small tmpfs): SQLite fails the COMMIT
with SQLITE_FULL — the WAL frames are written at COMMIT, and the transaction's last
frame never was — so nothing was written. ``start`` raises DiskFullError saying so,
not OutcomeUnknownError (issue 21), and starts once there is space again.

Mounting a tmpfs needs root: without it the test is skipped
(``tests/store/test_outcome_unknown.py`` covers SQLITE_FULL through SQLite's page limit
on any machine).
"""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from phronomy_fsm.durable import DurableRuntime
from phronomy_fsm.errors import DiskFullError, NotFoundError
from phronomy_fsm.store import SqliteBarrierStore

from .order_app import Order, order_machine


@pytest.fixture
def small_file_system(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs mounted at ``tmp_path/fs`` for the test, unmounted after."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount = tmp_path / "fs"
    mount.mkdir()
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {proc.stderr.strip()}")
    try:
        yield mount
    finally:
        if subprocess.run(["umount", str(mount)], check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(mount)], check=False)


def _fill(folder: Path) -> Path:
    """Write a file in ``folder`` until its file system has no space left; return it."""
    filler = folder / "filler"
    with filler.open("wb") as f:
        chunk = bytes(65536)
        try:
            while True:
                f.write(chunk)
                f.flush()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
    return filler


def test_a_start_on_a_full_disk_says_so_and_writes_nothing(small_file_system: Path) -> None:
    # no prewarmed WAL: the start's COMMIT must grow the WAL into the full file system
    store = SqliteBarrierStore(small_file_system / "store.db", wal_prewarm_frames=0)
    runtime = DurableRuntime(store, machines=[order_machine(small_file_system / "ledger.jsonl")])
    try:
        filler = _fill(small_file_system)
        big = Order("o-1", 100, errors=["x" * 300_000])  # 300 KB: more than the WAL holds
        with pytest.raises(DiskFullError, match="full; nothing was written") as info:
            runtime.start("order_flow", big, execution_id="o-1")
        assert info.value.sqlite_error == "SQLITE_FULL"
        with pytest.raises(NotFoundError):
            store.load_record("o-1")
        filler.unlink()
        handle = runtime.start("order_flow", big, execution_id="o-1")
        assert handle.created and store.load_record("o-1").revision >= 0
    finally:
        runtime.close(timeout_seconds=10)
        store.close()
