"""``phronomy-fsm dev postgres start|stop|status`` (issue 23 item 4): a development
server in a folder of its own, on the distribution's binaries, through the CLI; a real
server, a real connection, data that survives a stop and a start."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from phronomy_fsm.cli import main

RUNNER = CliRunner()


@pytest.fixture
def folder() -> Iterator[Path]:
    """A folder user ``postgres`` can reach when the tests run as root (pytest's
    ``tmp_path`` lies under a private folder); the server is stopped afterwards."""
    psycopg = pytest.importorskip("psycopg")
    del psycopg
    from phronomy_fsm.store.postgres.server import PostgresUnavailable, find_binaries

    try:
        find_binaries()
    except PostgresUnavailable as exc:
        if os.environ.get("CI"):
            raise
        pytest.skip(str(exc))
    base = Path(tempfile.mkdtemp(prefix="phronomy-devpg-test-"))
    base.chmod(0o755)
    try:
        yield base / "pg"
    finally:
        RUNNER.invoke(main, ["dev", "postgres", "stop", "--dir", str(base / "pg")])
        shutil.rmtree(base, ignore_errors=True)


def test_start_connect_stop_start_again(folder: Path) -> None:
    import psycopg

    status = RUNNER.invoke(main, ["dev", "postgres", "status", "--dir", str(folder)])
    assert status.exit_code == 1 and "not running" in status.stderr

    started = RUNNER.invoke(main, ["dev", "postgres", "start", "--dir", str(folder)])
    assert started.exit_code == 0, started.stderr
    dsn = started.stdout.strip()
    assert dsn.startswith("postgresql://postgres@127.0.0.1:") and dsn.endswith("/phronomy")
    assert "started: PostgreSQL in" in started.stderr
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE kept (v int)")
        conn.execute("INSERT INTO kept VALUES (7)")
        listen = conn.execute("SHOW listen_addresses").fetchone()
    assert listen == ("127.0.0.1",)

    again = RUNNER.invoke(main, ["dev", "postgres", "start", "--dir", str(folder)])
    assert again.exit_code == 0 and again.stdout.strip() == dsn
    assert "already running" in again.stderr
    status = RUNNER.invoke(main, ["dev", "postgres", "status", "--dir", str(folder)])
    assert status.exit_code == 0 and status.stdout.strip() == dsn

    stopped = RUNNER.invoke(main, ["dev", "postgres", "stop", "--dir", str(folder)])
    assert stopped.exit_code == 0 and stopped.stdout.startswith("stopped: PostgreSQL in")
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(dsn, connect_timeout=2).close()
    assert RUNNER.invoke(main, ["dev", "postgres", "status", "--dir", str(folder)]).exit_code == 1
    not_running = RUNNER.invoke(main, ["dev", "postgres", "stop", "--dir", str(folder)])
    assert not_running.exit_code == 0 and not_running.stdout.startswith("not running")

    # the same folder starts the same server on the same port, its data kept
    restarted = RUNNER.invoke(main, ["dev", "postgres", "start", "--dir", str(folder)])
    assert restarted.exit_code == 0, restarted.stderr
    assert restarted.stdout.strip() == dsn
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT v FROM kept").fetchall() == [(7,)]


def test_the_default_folder_is_beside_the_project(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from phronomy_fsm.project import dev_postgres_folder

    (tmp_path / "proj" / "src").mkdir(parents=True)
    (tmp_path / "proj" / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    monkeypatch.chdir(tmp_path / "proj" / "src")
    assert dev_postgres_folder() == (tmp_path / "proj" / ".phronomy" / "postgres").resolve()
    monkeypatch.chdir(tmp_path)
    folder = dev_postgres_folder(data_home=str(tmp_path / "data"))
    assert folder == tmp_path / "data" / "phronomy-fsm" / "postgres"
