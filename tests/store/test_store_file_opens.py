"""The database file is opened only by SQLite; an empty file is not a store; a store
that went backwards is refused (``store/_files.py``; docs/store.md "Files";
docs/operations.md "A store that went backwards").

Every check of what another process sees runs in a real second process: the defects
these guard against (POSIX locks dropped by a stray ``close``, a deleted ``-wal``)
are invisible from inside the process that caused them.
"""

from __future__ import annotations

import ast
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import phronomy_fsm
from phronomy_fsm.errors import StorageError, StoreRegressedError
from phronomy_fsm.store import SqliteBarrierStore

from .helpers import admit, step

#: Where a file is opened outside SQLite, and why that file is never a store's
#: database: ``(module, enclosing function)`` -> reason. Anything else fails the scan.
ALLOWED_OPENS = {
    ("store/_files.py", "MarkFile.read"): "the commit mark beside the database",
    ("store/_files.py", "MarkFile.advance"): "the commit mark beside the database",
    ("store/_files.py", "MarkFile.reset"): "the commit mark beside the database",
    ("store/postgres/server.py", "LocalPostgres.start"): "a PostgreSQL data folder's config",
    ("store/postgres/server.py", "LocalPostgres.server_log"): "a PostgreSQL server's log",
    ("store/postgres/dev.py", "_saved_port"): "a development PostgreSQL server's port file",
    ("store/postgres/dev.py", "start_dev_postgres"): "a development PostgreSQL server's port file",
    ("runtime/processes.py", "_read_stat"): "/proc",
    ("runtime/processes.py", "_read_text"): "/proc",
    ("spec/loader.py", "load_spec"): "a YAML spec",
    ("spec/schema.py", "load_spec_schema"): "the package's JSON Schema",
    ("spec/schema.py", "main"): "the package's JSON Schema",
    ("project.py", "load_project_config"): "pyproject.toml",
    ("testing/stub_llm.py", "main"): "the stub server's script file",
    ("diagram_files.py", "_read"): "a rendered diagram",
    ("diagram_files.py", "_write"): "a rendered diagram",
    ("cli/spec_commands.py", "diagram_command"): "a rendered diagram",
    ("checking/child.py", "Child.__init__"): "a checker run's trace and alphabet files",
    ("checking/runfiles.py", "RunLog.__init__"): "a checker run's log",
    ("checking/runfiles.py", "read_log"): "a checker run's log",
    ("checking/runfiles.py", "read_trace"): "a checker run's trace",
    ("checking/runfiles.py", "SkewClock.__init__"): "a checker run's shared clock file",
    ("checking/runfiles.py", "SkewClock.advance"): "a checker run's shared clock file",
    ("checking/runner.py", "find_machine"): "a YAML spec (its sha256)",
    ("checking/runner.py", "run_interleaving"): "a checker run's alphabet file",
    ("checking/runner.py", "_child"): "a checker child's output file",
    ("checking/runner.py", "_takeover"): "a checker child's output file",
    ("console/security.py", "read_token_file"): "the console's token file",
    ("demo.py", "demo_tools.issue_refund"): "the demo's refunds ledger (JSON lines)",
    ("testing/mcp_server.py", "Ledger.entries"): "the test MCP server's call ledger",
    ("testing/mcp_server.py", "Ledger.append"): "the test MCP server's call ledger",
    ("testing/mcp_server.py", "Ledger.locked"): "the test MCP server's ledger lock",
    ("testing/mcp_server.py", "_hold"): "the test MCP server's hold marker",
}

#: Calls that open a file by path: any ``open`` (builtin, ``os.open``, ``io.open``,
#: ``Path.open``, an imported alias), the ``pathlib`` shortcuts, and library calls that
#: open paths themselves.
_OPENERS = {
    "open",
    "read_bytes",
    "read_text",
    "write_bytes",
    "write_text",
    "FileIO",
    "fdopen",
    "file_digest",
    "copy",
    "copy2",
    "copyfile",
    "copyfileobj",
    "move",
}
#: Modules whose calls of those names open no file (``webbrowser.open``, ``copy.copy``).
_NOT_FILES = {"webbrowser", "copy"}


def _opens(tree: ast.AST) -> list[tuple[str, int]]:
    """``(enclosing qualified function, line)`` of every call that opens a file, and
    of every import that renames an opener (``from os import open as o``)."""
    found: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if alias.name in _OPENERS and alias.asname not in (None, alias.name):
                    found.append((f"import {alias.name} as {alias.asname}", node.lineno))

    def visit(node: ast.AST, scope: list[str]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                visit(child, [*scope, child.name])
                continue
            if isinstance(child, ast.Call):
                func = child.func
                name = (
                    func.id
                    if isinstance(func, ast.Name)
                    else func.attr
                    if isinstance(func, ast.Attribute)
                    else None
                )
                owner = func.value if isinstance(func, ast.Attribute) else None
                if name in _OPENERS and not (
                    isinstance(owner, ast.Name) and owner.id in _NOT_FILES
                ):
                    found.append((".".join(scope) or "<module>", child.lineno))
            visit(child, scope)

    visit(tree, [])
    return found


def test_no_module_opens_a_file_outside_sqlite_except_the_listed_ones():
    """Closing any descriptor of the database file drops the process's POSIX locks on
    it (acknowledged commits lost): every plain open in the package is listed here
    with the file it opens, so a new one is a decision, not an accident."""
    root = Path(phronomy_fsm.__file__).parent
    unexpected: list[str] = []
    seen: set[tuple[str, str]] = set()
    for path in sorted(root.rglob("*.py")):
        module = path.relative_to(root).as_posix()
        if module.startswith("generated/"):
            continue
        for scope, line in _opens(ast.parse(path.read_text("utf-8"))):
            key = (module, scope)
            seen.add(key)
            if key not in ALLOWED_OPENS:
                unexpected.append(f"{module}:{line} in {scope}")
    assert unexpected == [], "plain opens not known to spare store files"
    assert set(ALLOWED_OPENS) <= seen, "stale entries in ALLOWED_OPENS"


def _run(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )


_READ_REVISION = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1])
row = conn.execute("SELECT revision FROM executions WHERE execution_id = 'ex-1'").fetchone()
print(row[0])
conn.close()
"""


def test_a_second_store_on_one_file_keeps_the_first_ones_commits_visible(tmp_path):
    """Two stores on one file in one process, a reader in another that closes last:
    before the fix the second store's plain open dropped the process's locks, the
    other process deleted the live WAL at its close, and the first store's next
    commit was acknowledged yet invisible to everyone else."""
    path = tmp_path / "s.db"
    first = SqliteBarrierStore(path)
    ex = admit(first, "ex-1")
    second = SqliteBarrierStore(path)
    try:
        assert _run(_READ_REVISION, str(path)).stdout.split() == ["0"]
        first.commit(step(ex))  # acknowledged
        assert _run(_READ_REVISION, str(path)).stdout.split() == ["1"]
        assert (tmp_path / "s.db-wal").exists()
    finally:
        second.close()
        first.close()
    assert _run(_READ_REVISION, str(path)).stdout.split() == ["1"]


def test_an_empty_file_is_refused_naming_it_and_left_as_it_was(tmp_path):
    path = tmp_path / "empty.db"
    path.touch()
    for read_only in (False, True):
        with pytest.raises(StorageError, match=r"empty\.db is empty \(0 bytes\)"):
            SqliteBarrierStore(path, read_only=read_only)
    assert path.stat().st_size == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.db"]


def test_a_new_store_appears_complete_and_owner_only(tmp_path):
    path = tmp_path / "new.db"
    SqliteBarrierStore(path).close()
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".new")]
    out = _run(
        "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]);"
        " print(c.execute(\"SELECT value FROM meta WHERE key='application'\").fetchone()[0])",
        str(path),
    )
    assert out.stdout.strip() == "phronomy_fsm"


_COMMIT_THEN_HANG = """
import sys
from phronomy_fsm.store import SqliteBarrierStore
sys.path.insert(0, sys.argv[2])
from tests.store.helpers import admit
store = SqliteBarrierStore(sys.argv[1])
for i in range(20):
    admit(store, f"ex-{i}")
print("committed", flush=True)
sys.stdin.read()
"""


def _commit_and_kill(path: Path) -> None:
    """Twenty acknowledged executions from a process killed with SIGKILL after them."""
    repo = str(Path(__file__).resolve().parents[2])
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(_COMMIT_THEN_HANG), str(path), repo],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "committed"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)


def test_a_deleted_wal_after_a_kill_is_refused_until_an_operator_accepts_it(tmp_path):
    """The issue's case: a killed process's -wal removed by hand was a silent rollback
    (effects started again). Now the store is refused for writing, still readable,
    and `store check --accept-rollback` lets it open again."""
    from click.testing import CliRunner

    from phronomy_fsm.cli import main

    path = tmp_path / "s.db"
    _commit_and_kill(path)
    for suffix in ("-wal", "-shm"):
        (tmp_path / f"s.db{suffix}").unlink()
    with pytest.raises(StoreRegressedError) as info:
        SqliteBarrierStore(path)
    assert info.value.mark[0] >= 20 and info.value.found[0] < info.value.mark[0]
    assert "store check" in str(info.value)
    with SqliteBarrierStore(path, read_only=True) as ro:  # an operator can still look
        assert len(ro.list_records()) < 20
    check = CliRunner().invoke(main, ["store", "check", "--db", str(path)])
    assert check.exit_code == 1, check.output
    assert "went backwards" in check.output
    accept = CliRunner().invoke(main, ["store", "check", "--db", str(path), "--accept-rollback"])
    assert accept.exit_code == 0, accept.output
    SqliteBarrierStore(path).close()
    again = CliRunner().invoke(main, ["store", "check", "--db", str(path)])
    assert again.exit_code == 0, again.output
    assert "ok" in again.output


def test_a_kill_that_keeps_the_wal_is_not_a_rollback(tmp_path):
    """No false alarm: SQLite replays the WAL of a killed process, and compaction
    that removes the highest rows re-bases the mark."""
    path = tmp_path / "s.db"
    _commit_and_kill(path)
    with SqliteBarrierStore(path) as store:
        assert len(store.list_records()) == 20
        assert store.rebase_mark()[0] >= 20
