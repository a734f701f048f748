"""What a breaker found in the store's file handling and its commit mark, each checked
the way it was found: real processes, SIGKILL, symbolic links, a full and a read-only
file system in a private mount namespace (``store/_files.py``; docs/store.md "Files").
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from phronomy_fsm.cli import main
from phronomy_fsm.errors import StorageError, StoreRegressedError
from phronomy_fsm.store import SqliteBarrierStore
from phronomy_fsm.store._files import CommitMark, MarkFile, read_mark
from phronomy_fsm.testing.deadlines import scaled_seconds

from .helpers import admit, finish
from .test_store_file_opens import _commit_and_kill

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"


def _child(code: str, *args: str, prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*prefix, sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        timeout=scaled_seconds(120),
        check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def _a_second_on() -> datetime:
    return datetime.now(UTC) + timedelta(seconds=1)


def _private_mounts() -> tuple[str, ...]:
    """A prefix that runs a child in its own mount namespace (its mounts vanish with
    it); skip when this machine cannot make one (not root, no unshare)."""
    prefix = ("unshare", "-m", "--propagation", "private")
    if shutil.which("unshare") is None:
        pytest.skip("no unshare to make a private mount namespace")
    probe = subprocess.run([*prefix, "true"], capture_output=True, check=False)
    if probe.returncode != 0:
        pytest.skip(f"cannot make a private mount namespace: {probe.stderr.decode()[-200:]}")
    return prefix


_FULL_DISK = """
import json, os, subprocess, sys
from phronomy_fsm.errors import StorageError
from phronomy_fsm.store import SqliteBarrierStore
base = sys.argv[1]
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", base], check=True)
outcomes = []
for free_kib in range(150, 330, 20):
    folder = os.path.join(base, f"f{free_kib}")
    os.mkdir(folder)
    st = os.statvfs(base)
    filler = os.path.join(base, "filler")
    with open(filler, "wb") as fh:
        fh.write(b"\\0" * max(0, st.f_bavail * st.f_frsize - free_kib * 1024))
    path = os.path.join(folder, "s.db")
    try:
        SqliteBarrierStore(path).close()
        first = "created"
    except StorageError as exc:
        first = "refused: " + str(exc)
    left = sorted(os.listdir(folder))
    os.unlink(filler)
    try:
        SqliteBarrierStore(path).close()
        second = "ok"
    except Exception as exc:
        second = f"{type(exc).__name__}: {exc}"
    outcomes.append({"free_kib": free_kib, "first": first, "left": left, "second": second})
    for name in os.listdir(folder):
        os.unlink(os.path.join(folder, name))
print(json.dumps(outcomes))
"""


def test_a_store_created_on_a_full_disk_is_refused_and_a_retry_works(tmp_path):
    """Its last checkpoint failed, the close still succeeded, and the incomplete file
    was linked into place with its only copy of the schema deleted: a corrupt store
    for good. Now such a creation is refused, leaves nothing, and works with room."""
    base = tmp_path / "small"
    base.mkdir()
    run = _child(_FULL_DISK, str(base), prefix=_private_mounts())
    assert run.returncode == 0, run.stderr[-2000:]
    outcomes = json.loads(run.stdout)
    for outcome in outcomes:
        assert outcome["second"] == "ok", outcome
        if outcome["first"] != "created":
            assert outcome["left"] == [], outcome  # nothing at the path, no temp files


_READ_ONLY = """
import os, subprocess, sys
from phronomy_fsm.store import SqliteBarrierStore
folder = sys.argv[1]
subprocess.run(["mount", "--bind", folder, folder], check=True)
subprocess.run(["mount", "-o", "remount,bind,ro", folder], check=True)
try:
    SqliteBarrierStore(os.path.join(folder, "new.db"))
except Exception as exc:
    print(type(exc).__name__, exc)
"""


def test_a_store_on_a_read_only_file_system_is_a_typed_error_naming_it(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    run = _child(_READ_ONLY, str(folder), prefix=_private_mounts())
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.startswith("StorageError cannot create the store ")
    assert str(folder / "new.db") in run.stdout


_COMPACT_THEN_DIE = """
import os, signal, sys
from datetime import UTC, datetime, timedelta
from phronomy_fsm.store import SqliteBarrierStore
store = SqliteBarrierStore(sys.argv[1])
def die(*args, **kwargs):  # right after compaction's deletes committed
    os.kill(os.getpid(), signal.SIGKILL)
store.checkpoint = die
store.compact(older_than_days=0, now=datetime.now(UTC) + timedelta(seconds=1))
"""


def test_compaction_that_removes_the_newest_rows_and_dies_leaves_no_false_alarm(tmp_path):
    """The mark was lowered after compaction committed: a kill in between left it
    above the database, and a healthy store was refused."""
    path = tmp_path / "s.db"
    with SqliteBarrierStore(path) as store:
        for i in range(3):
            store.commit(finish(admit(store, f"ex-{i}")))
        before = read_mark(store._writer_cursor())
    run = _child(_COMPACT_THEN_DIE, str(path))
    assert run.returncode == -signal.SIGKILL, run.stderr[-2000:]
    with SqliteBarrierStore(path) as store:  # not refused
        assert store.list_records() == []
        assert read_mark(store._writer_cursor()) == before  # compaction kept the floor
        admit(store, "after")
    # the barrier log's ids start again below the floor; the mark holds at it
    assert MarkFile(str(path)).read() == before


def test_a_store_open_before_the_rollback_does_not_hide_it(tmp_path):
    """A store object opened before another process's -wal was deleted wrote its own
    lower maxima into the mark, and the rollback was never reported."""
    path = tmp_path / "s.db"
    early = SqliteBarrierStore(path)
    try:
        _commit_and_kill(path)
        for suffix in ("-wal", "-shm"):
            (tmp_path / f"s.db{suffix}").unlink()
        with pytest.raises(StoreRegressedError):
            admit(early, "late")  # its writer connects now: refused before writing
    finally:
        early.close()
    with pytest.raises(StoreRegressedError):
        SqliteBarrierStore(path)


def test_a_store_made_again_after_its_files_were_deleted_is_not_refused(tmp_path):
    """``rm app.db app.db-wal app.db-shm`` left the mark, and the new store at that
    path was refused as one that went backwards (tools/run.sh main, run twice)."""
    path = tmp_path / "s.db"
    with SqliteBarrierStore(path) as store:
        for i in range(5):
            admit(store, f"ex-{i}")
    for suffix in ("", "-wal", "-shm"):
        (tmp_path / f"s.db{suffix}").unlink(missing_ok=True)
    assert (tmp_path / "s.db-mark").exists()
    with SqliteBarrierStore(path) as store:
        admit(store, "fresh")
    assert MarkFile(str(path)).read() == CommitMark(1, 0)


def test_a_store_reached_through_a_symbolic_link_keeps_its_mark_beside_the_file(tmp_path):
    real, link = tmp_path / "real.db", tmp_path / "link.db"
    SqliteBarrierStore(real).close()
    link.symlink_to(real)
    _commit_and_kill(link)
    assert (tmp_path / "real.db-mark").exists() and not (tmp_path / "link.db-mark").exists()
    for suffix in ("-wal", "-shm"):
        (tmp_path / f"real.db{suffix}").unlink()
    for name in (real, link):
        with pytest.raises(StoreRegressedError):
            SqliteBarrierStore(name)


def test_a_dangling_symbolic_link_is_refused_at_once(tmp_path):
    link = tmp_path / "link.db"
    link.symlink_to(tmp_path / "missing" / "real.db")
    with pytest.raises(StorageError, match="symbolic link"):
        SqliteBarrierStore(link)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.db"]


def test_an_archive_that_is_not_sqlite_is_named_in_the_refusal(tmp_path):
    path, archive = tmp_path / "s.db", tmp_path / "spec.yaml"
    archive.write_text("machine: not an archive\n" * 50)
    with SqliteBarrierStore(path) as store:
        store.commit(finish(admit(store, "ex-1")))
        with pytest.raises(StorageError, match=r"the archive .*spec\.yaml"):
            # "now" a second on: a commit in the same millisecond is not older than it
            store.compact(older_than_days=0, archive_path=archive, now=_a_second_on())
        assert [r.execution_id for r in store.list_records()] == ["ex-1"]
    assert archive.read_text() == "machine: not an archive\n" * 50


def test_store_check_on_an_older_schema_says_to_migrate(tmp_path):
    path = tmp_path / "v3.db"
    shutil.copy(FIXTURES / "store-v3-demo-suspended.db", path)
    result = CliRunner().invoke(main, ["store", "check", "--db", str(path)])
    assert result.exit_code == 0, result.output
    assert "schema version: 3" in result.output
    assert f"phronomy-fsm store migrate --db {path}" in result.output


def test_an_older_copy_restored_over_a_store_is_refused_before_it_is_migrated(tmp_path):
    path = tmp_path / "s.db"
    shutil.copy(FIXTURES / "store-v4-finished.db", path)
    MarkFile(str(path)).reset(CommitMark(10_000, 10_000))  # the store it replaced
    with pytest.raises(StoreRegressedError):
        SqliteBarrierStore(path)
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        version = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    finally:
        conn.close()
    assert version == ("4",)


def test_the_printed_command_runs_for_a_path_with_a_space(tmp_path):
    folder = tmp_path / "my dir"
    folder.mkdir()
    path = folder / "app.db"
    _commit_and_kill(path)
    for suffix in ("-wal", "-shm"):
        (folder / f"app.db{suffix}").unlink()
    with pytest.raises(StoreRegressedError) as info:
        SqliteBarrierStore(path)
    printed = str(info.value).split("`")[1]
    assert printed.startswith("phronomy-fsm store check --db ")
    args = __import__("shlex").split(printed)[1:]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    SqliteBarrierStore(path).close()
