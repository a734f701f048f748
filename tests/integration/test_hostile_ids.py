"""Hostile ids cannot forge CLI output (issue 11 item 9): agent and execution ids are
validated where they are created, and whatever a store already holds is printed
escaped by ``executions list|show`` — in tables, in ``--json`` and in ``error:`` lines.

Real components: SQLite files under tmp_path, the CLI through click's CliRunner and as
a subprocess, the runtime's loop.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import unicodedata
from typing import Any

import pytest
from click.testing import CliRunner

from phronomy_fsm.agent import Agent, AgentRuntime, Reply, ScriptedProvider
from phronomy_fsm.cli import main
from phronomy_fsm.errors import ConfigurationError, InvalidInputError
from phronomy_fsm.store import SqliteBarrierStore

HOSTILE = [
    pytest.param("a\nb", id="newline"),
    pytest.param("a\rb", id="carriage-return"),
    pytest.param("\x1b[31mred\x1b[0m", id="escape-sequence"),
    pytest.param("a\x00b", id="nul"),
    pytest.param("safe\u202eexe.txt", id="bidi-override"),
    pytest.param("zero\u200bwidth", id="zero-width-space"),
    pytest.param("a\u2028b", id="line-separator"),
    pytest.param("a\x85b", id="next-line-c1"),
    pytest.param("x" * 10_000, id="ten-thousand-chars"),
    pytest.param("   ", id="whitespace-only"),
    pytest.param("two words", id="inner-space"),
    pytest.param("", id="empty"),
]


@pytest.fixture
def store(tmp_path: Any) -> Any:
    s = SqliteBarrierStore(tmp_path / "agents.db")
    yield s
    s.close()


@pytest.fixture
def runtime(store: Any) -> Any:
    rt = AgentRuntime(store, max_workers=2)
    yield rt
    rt.close(timeout_seconds=5)


def _unsafe(text: str) -> list[str]:
    """Characters a terminal may act on: controls, format (bidi) and separators."""
    return [
        ch
        for ch in text
        if ch not in "\n" and unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp")
    ]


@pytest.mark.parametrize("agent_id", HOSTILE)
def test_agent_create_refuses_a_hostile_agent_id(store: Any, runtime: Any, agent_id: str) -> None:
    with pytest.raises(ConfigurationError, match="printable characters") as refused:
        Agent.create(agent_id, runtime=runtime, provider=ScriptedProvider([Reply("x")]))
    assert "\n" not in str(refused.value) and not _unsafe(str(refused.value))
    assert store.agent_ids() == []


@pytest.mark.parametrize("execution_id", HOSTILE)
def test_invoke_refuses_a_hostile_execution_id(store: Any, runtime: Any, execution_id: str) -> None:
    agent = Agent.create("a", runtime=runtime, provider=ScriptedProvider([Reply("x")]))
    with pytest.raises(InvalidInputError, match="printable characters"):
        agent.invoke("hi", execution_id=execution_id, wait_seconds=10)
    assert store.list_records() == []


def test_ordinary_ids_are_still_accepted(store: Any, runtime: Any) -> None:
    agent = Agent.create(
        "support-agent.eu:1/ümlaut", runtime=runtime, provider=ScriptedProvider([Reply("x")])
    )
    result = agent.invoke("hi", execution_id="order-42:retry.1#é", wait_seconds=10)
    assert result.status == "completed"


def _forge(db: Any, execution_id: str, agent_id: str, new_id: str, new_agent: str) -> None:
    """Rename an agent's execution and agent below the library, as an older version or
    another tool could have written them (the library refuses such ids itself)."""
    conn = sqlite3.connect(db)
    try:
        with conn:
            conn.execute(
                "UPDATE executions SET execution_id = ?, exclusive_key = ?, body = json_set(body,"
                " '$.execution_id', ?, '$.exclusive_key', ?, '$.labels.agent_id', ?,"
                " '$.context.agent_id', ?, '$.context.execution_id', ?) WHERE execution_id = ?",
                (new_id, new_agent, new_id, new_agent, new_agent, new_agent, new_id, execution_id),
            )
            conn.execute(
                "UPDATE barriers SET execution_id = ? WHERE execution_id = ?",
                (new_id, execution_id),
            )
            conn.execute(
                "UPDATE execution_journal SET execution_id = ? WHERE execution_id = ?",
                (new_id, execution_id),
            )
    finally:
        conn.close()


@pytest.fixture
def hostile_db(tmp_path: Any) -> str:
    """A store that already holds hostile ids (written below the agent layer, as an
    older version or another tool could have)."""
    path = tmp_path / "hostile.db"
    with AgentRuntime(SqliteBarrierStore(path), own_store=True) as rt:
        for agent_id in ("a1", "a2"):
            agent = Agent.create(agent_id, runtime=rt, provider=ScriptedProvider([Reply("x")]))
            agent.invoke("hi", execution_id=f"ex-{agent_id}", wait_seconds=10)
    _forge(path, "ex-a1", "a1", "ex\x1b[2J\u202e1", "agent\nFORGED  a2  completed  completed  9  x")
    _forge(path, "ex-a2", "a2", "ex\r\x00\u2028two", "a\u202ebad")
    return str(path)


def _forged(text: str) -> None:
    assert not _unsafe(text), [hex(ord(c)) for c in _unsafe(text)]
    assert "FORGED" not in [line.split()[0] for line in text.splitlines() if line.split()]


def test_executions_list_prints_hostile_ids_escaped(hostile_db: str) -> None:
    result = CliRunner().invoke(main, ["executions", "list", "--db", hostile_db])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    # the header, one row per execution, then the summary line: nothing forged
    assert len(lines) == 4 and lines[3].startswith("1-2 of 2 execution(s)"), lines
    assert all(not line.startswith(("agent", "FORGED")) for line in lines[3:])
    _forged(result.stdout)
    assert "agent\\nFORGED" in result.stdout and "\\x1b[2J\\u202e1" in result.stdout
    assert "a\\u202ebad" in result.stdout


def test_executions_list_json_escapes_but_round_trips(hostile_db: str) -> None:
    result = CliRunner().invoke(main, ["executions", "list", "--db", hostile_db, "--json"])
    assert result.exit_code == 0, result.output
    _forged(result.stdout)
    rows = json.loads(result.stdout)
    assert {r["execution_id"] for r in rows} == {"ex\x1b[2J\u202e1", "ex\r\x00\u2028two"}
    assert {r["agent_id"] for r in rows} == {
        "agent\nFORGED  a2  completed  completed  9  x",
        "a\u202ebad",
    }


def test_executions_show_prints_hostile_ids_escaped(hostile_db: str) -> None:
    for execution_id in ("ex\x1b[2J\u202e1", "ex\r\x00\u2028two"):
        text = CliRunner().invoke(main, ["executions", "show", execution_id, "--db", hostile_db])
        assert text.exit_code == 0, text.output
        _forged(text.stdout)
        assert text.stdout.splitlines()[0].startswith("execution_id: ex\\")
        as_json = CliRunner().invoke(
            main, ["executions", "show", execution_id, "--db", hostile_db, "--json"]
        )
        _forged(as_json.stdout)
        assert json.loads(as_json.stdout)["execution_id"] == execution_id


def test_error_lines_escape_the_ids_they_name(hostile_db: str) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "phronomy_fsm.cli",
            "executions",
            "show",
            "nope\n\x1b[31mFORGED\u202e",
            "--db",
            hostile_db,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 1
    assert len(result.stderr.splitlines()) == 1 and result.stderr.startswith("error: ")
    _forged(result.stderr)
    assert "nope\\n\\x1b[31mFORGED\\u202e" in result.stderr
