"""Crash injection is passed in explicitly (issue 14 item 5): a FaultPlan kills at the
N-th hit of its point and refuses malformed names; no production module reads the
environment for it; the CLI turns ``--crash-at`` / ``PHRONOMY_CRASH_AT`` into a plan.

(Replaces ``test_crashpoint_env.py``, which tested the environment-armed module
``runtime/crashpoints.py`` that this change removed.)"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from phronomy_fsm.cli._faults import crash_at_option
from phronomy_fsm.runtime.faults import FaultPlan, points_for

SRC = Path(__file__).resolve().parents[2] / "src" / "phronomy_fsm"

#: Modules of ``src/`` that may read the environment, and why. Nothing else may.
ENVIRONMENT_READERS = {
    # the providers' documented configuration (base URL, API key, model), read where the
    # HTTP providers share it, not test machinery
    "agent/http_provider.py",
    # the throwaway test server's "use this server instead" DSN (test support shipped
    # in the package; it starts nothing in production code paths)
    "store/postgres/server.py",
    # the console's documented write token ($PHRONOMY_CONSOLE_TOKEN), read where the
    # console is prepared; tests pass their own mapping
    "console/security.py",
    "console/server.py",
    # test support shipped in the package: how much longer a test's waits may take on
    # a busy machine ($PHRONOMY_TEST_TIME_SCALE); nothing in the library imports it
    "testing/deadlines.py",
}


def test_plan_kills_only_on_the_nth_hit() -> None:
    code = (
        "from phronomy_fsm.runtime.faults import FaultPlan\n"
        "plan = FaultPlan.parse('barrier:x:before@2')\n"
        "plan.hit('barrier:x:before')\n"
        "print('first', flush=True)\n"
        "plan.hit('barrier:y:before')\n"
        "print('other point', flush=True)\n"
        "plan.hit('barrier:x:before')\n"
        "print('second', flush=True)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=60
    )
    assert result.returncode == -9
    assert result.stdout.split() == ["first", "other", "point"]


def test_plan_traces_every_point_before_it_may_kill() -> None:
    seen: list[str] = []
    plan = FaultPlan("offload:call_llm:after", nth=3, trace=seen.append)
    plan.hit("barrier:a:before")
    plan.hit("offload:call_llm:after")
    assert seen == ["barrier:a:before", "offload:call_llm:after"]


@pytest.mark.parametrize(
    "value", ["barrier:tool_dispatch:middle", "offload:call_llm:before", "tool_dispatch"]
)
def test_malformed_point_names_are_refused(value: str) -> None:
    with pytest.raises(ValueError, match="is not a crash point name"):
        FaultPlan.parse(value)


def test_parse_reads_the_hit_count() -> None:
    plan = FaultPlan.parse("barrier:@wait:during@3")
    assert (plan.crash_at, plan.nth) == ("barrier:@wait:during", 3)
    assert FaultPlan.parse("").crash_at is None


def test_points_for_lists_every_point_in_table_order() -> None:
    assert points_for(("a", "b"), ("h",)) == [
        "barrier:a:before",
        "barrier:a:during",
        "barrier:a:after",
        "barrier:b:before",
        "barrier:b:during",
        "barrier:b:after",
        "offload:h:after",
    ]


def test_the_cli_option_builds_a_plan_from_the_option_or_the_environment() -> None:
    got: list[FaultPlan | None] = []

    @click.command()
    @crash_at_option
    def probe(faults: FaultPlan | None) -> None:
        got.append(faults)

    runner = CliRunner()
    assert runner.invoke(probe, []).exit_code == 0
    assert runner.invoke(probe, ["--crash-at", "barrier:b:after@2"]).exit_code == 0
    env = {"PHRONOMY_CRASH_AT": "offload:call_llm:after"}
    assert runner.invoke(probe, [], env=env).exit_code == 0
    bad = runner.invoke(probe, ["--crash-at", "nonsense"])
    assert bad.exit_code == 2
    assert "is not a crash point name" in bad.output
    assert got[0] is None
    assert got[1] is not None and (got[1].crash_at, got[1].nth) == ("barrier:b:after", 2)
    assert got[2] is not None and got[2].crash_at == "offload:call_llm:after"


def _reads_environment(tree: ast.AST) -> list[int]:
    lines = []
    for node in ast.walk(tree):
        name = (
            node.attr
            if isinstance(node, ast.Attribute)
            else node.id
            if isinstance(node, ast.Name)
            else None
        )
        if name in ("environ", "environb", "getenv"):
            lines.append(node.lineno)
    return lines


def test_no_production_module_reads_the_environment() -> None:
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        relative = path.relative_to(SRC).as_posix()
        if relative in ENVIRONMENT_READERS or relative.startswith("cli/"):
            continue  # the CLI is the entry point that may turn variables into options
        lines = _reads_environment(ast.parse(path.read_text("utf-8")))
        offenders += [f"{relative}:{line}" for line in lines]
    assert offenders == []


def test_importing_the_library_with_the_variable_set_arms_nothing() -> None:
    code = (
        "from phronomy_fsm.runtime.dispatcher import Dispatcher\n"
        "from phronomy_fsm.store import SqliteBarrierStore\n"
        "print(Dispatcher().faults)\n"
    )
    env = dict(os.environ, PHRONOMY_CRASH_AT="barrier:x:before")
    result = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "None"
