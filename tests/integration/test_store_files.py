"""Commands and functions that expect an existing store refuse a missing, empty or
unreadable file instead of turning it into a fresh store (issue 11 items 10a, 10b):
a zero-length file is not "a store with 0 active executions", a mistyped path is not
created, and every such refusal is one ``error:`` line with exit code 1 (the docs'
"invalid input or failure"), never click's usage code 2.

Real components: files under tmp_path, the CLI through click's CliRunner and as a
subprocess, the agent layer.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from phronomy_fsm.agent import Agent, Reply, ScriptedProvider
from phronomy_fsm.cli import main
from phronomy_fsm.errors import NotFoundError, StorageError

APP = "phronomy_fsm.demo:create_app"

COMMANDS = [
    pytest.param(["recover", "--app", APP], id="recover"),
    pytest.param(["store", "compact", "--older-than-days", "1"], id="compact"),
    pytest.param(["store", "migrate"], id="migrate"),
    pytest.param(["executions", "list"], id="list"),
    pytest.param(["executions", "show", "x"], id="show"),
    pytest.param(["approve", "x", "--request", "r"], id="approve"),
    pytest.param(
        [
            "resolve",
            "x",
            "--app",
            APP,
            "--expected-revision",
            "1",
            "--subject",
            "execution:x",
            "--outcome",
            "not_performed",
        ],
        id="resolve",
    ),
]


def _run(args: list[str], db: Path) -> Any:
    return CliRunner().invoke(main, [*args, "--db", str(db)])


def _one_error_line(result: Any) -> str:
    assert result.exit_code == 1, (result.exit_code, result.output)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.output
    return lines[0]


@pytest.mark.parametrize("args", COMMANDS)
def test_a_zero_length_store_file_is_refused_and_left_alone(
    tmp_path: Path, args: list[str]
) -> None:
    db = tmp_path / "empty.db"
    db.touch()
    line = _one_error_line(_run(args, db))
    assert "empty" in line and str(db) in line
    assert db.stat().st_size == 0 and not Path(f"{db}-wal").exists()


@pytest.mark.parametrize("args", COMMANDS)
def test_a_missing_store_file_is_refused_and_not_created(tmp_path: Path, args: list[str]) -> None:
    db = tmp_path / "mistyped.db"
    line = _one_error_line(_run(args, db))
    assert "does not exist" in line
    assert not db.exists()


@pytest.mark.parametrize("args", COMMANDS)
def test_a_directory_given_as_the_store_exits_1_not_2(tmp_path: Path, args: list[str]) -> None:
    folder = tmp_path / "a-folder"
    folder.mkdir()
    line = _one_error_line(_run(args, folder))
    assert "directory" in line or "not a regular file" in line


def _unprivileged_prefix() -> list[str]:
    """The command prefix that runs a child without root's right to read any file:
    nothing when not root; when root, ``setpriv`` keeping the user but dropping every
    capability (so file permissions bind root too). It stays root, so it can still
    read a clone that sits in a private (0700) folder, as ``mktemp -d`` makes them:
    switching to ``nobody`` could not import the package from there. Skipped, with
    the reason, when the child cannot import the CLI even so."""
    if os.geteuid() != 0:
        return []
    prefix = ["setpriv", "--bounding-set=-all", "--inh-caps=-all"]
    if not shutil.which("setpriv"):
        pytest.skip("running as root without setpriv to drop root's capabilities")
    probe = subprocess.run(
        [*prefix, sys.executable, "-c", "import phronomy_fsm.cli"],
        cwd="/",
        check=False,
        capture_output=True,
        text=True,
    )
    if probe.returncode != 0:
        pytest.skip(f"a child without capabilities cannot import the CLI: {probe.stderr[-300:]}")
    return prefix


def test_an_unreadable_store_file_exits_1_with_one_line() -> None:
    """The file exists and can be seen, but not read: click's own readable check made
    this a usage error (exit 2); the docs say 1, with one ``error:`` line."""
    prefix = _unprivileged_prefix()
    folder = Path(tempfile.mkdtemp(prefix="phronomy-unreadable-"))
    try:
        folder.chmod(0o711)  # others may pass through, not list or read
        db = folder / "secret.db"
        db.write_bytes(b"SQLite format 3\x00" + b"\x00" * 100)
        db.chmod(0)  # nobody may read it, root without its capabilities included
        result = subprocess.run(
            [*prefix, sys.executable, "-m", "phronomy_fsm.cli", "executions", "list"]
            + ["--db", str(db)],
            capture_output=True,
            text=True,
            check=False,
            cwd="/",
        )
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    assert result.returncode == 1, (result.returncode, result.stderr)
    assert result.stderr.startswith("error: ") and len(result.stderr.splitlines()) == 1
    assert "Permission denied" in result.stderr


def test_recover_on_an_empty_file_does_not_report_an_all_clear(tmp_path: Path) -> None:
    db = tmp_path / "empty.db"
    db.touch()
    result = subprocess.run(
        [sys.executable, "-m", "phronomy_fsm.cli", "recover", "--db", str(db), "--app", APP],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 1
    assert "0 active execution" not in result.stdout
    assert db.stat().st_size == 0


def _provider() -> ScriptedProvider:
    return ScriptedProvider([Reply(content="hi")])


def test_agent_load_refuses_a_missing_file_and_does_not_create_it(tmp_path: Path) -> None:
    db = tmp_path / "mistyped.db"
    with pytest.raises(NotFoundError, match="does not exist"):
        Agent.load("a", store=str(db), provider=_provider())
    assert not db.exists()


def test_agent_load_refuses_an_empty_file_and_leaves_it_empty(tmp_path: Path) -> None:
    db = tmp_path / "empty.db"
    db.touch()
    with pytest.raises(NotFoundError, match="empty"):
        Agent.load("a", store=db, provider=_provider())
    assert db.stat().st_size == 0


def test_agent_create_still_makes_a_new_store_and_load_then_finds_it(tmp_path: Path) -> None:
    fresh = tmp_path / "fresh.db"
    agent = Agent.create("a", store=fresh, provider=_provider())
    try:
        assert agent.invoke("hello", wait_seconds=10).output == "hi"
        agent.close()
        again = Agent.load("a", store=fresh, provider=_provider())
        assert again.invoke("hello", wait_seconds=10).status == "completed"
    finally:
        agent.runtime.close(timeout_seconds=5)


def test_agent_create_refuses_an_empty_file_as_the_cli_does(tmp_path: Path) -> None:
    """Issue 21 item 3: the library made a zero-byte file a fresh store, the CLI
    refused it; both refuse it now, naming the file, and leave it as it was."""
    empty = tmp_path / "empty.db"
    empty.touch()
    with pytest.raises(StorageError, match=r"empty\.db is empty \(0 bytes\)"):
        Agent.create("a", store=empty, provider=_provider())
    assert empty.stat().st_size == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.db"]
