"""The CLI starts without the heavy layers (issue 23 item 6; ``docs/performance.md``,
"CLI start-up"): ``phronomy-fsm --help`` and ``phronomy-fsm executions list`` on a
store, each run in a new interpreter, import neither the agent layer, the HTTP client,
the diagram and spec code, the web console, OpenTelemetry, the checker, nor the
durable engine and runtime. Checked by the modules the process has imported when the
command ends, never by a time."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from phronomy_fsm.durable import DurableEventKind, DurableRuntime
from phronomy_fsm.store import SqliteBarrierStore
from tests.durable.order_app import Order, create_app

ROOT = Path(__file__).resolve().parents[2]

#: Modules (and everything under them) that neither command may import.
HEAVY = (
    "httpx",
    "jinja2",
    "yaml",
    "graphviz",
    "starlette",
    "uvicorn",
    "opentelemetry",
    "phronomy_fsm.agent",
    "phronomy_fsm.checking",
    "phronomy_fsm.console",
    "phronomy_fsm.diagram",
    "phronomy_fsm.spec",
    "phronomy_fsm.tracing",
    "phronomy_fsm.durable.engine",
    "phronomy_fsm.durable.runtime",
    "phronomy_fsm.durable.worker",
    "phronomy_fsm.runtime.dispatcher",
    "codegen",
    "phronomy_fsm.codegen",
)

#: Runs the CLI as ``phronomy-fsm`` does, then prints the imported modules as JSON.
PROBE = """\
import json, sys
from phronomy_fsm.cli import main
try:
    main(sys.argv[1:], prog_name="phronomy-fsm")
except SystemExit as exc:
    code = exc.code
else:
    code = 0
print(json.dumps({"exit": code, "modules": sorted(sys.modules)}), file=sys.stderr)
"""


def imported_by(*args: str) -> tuple[str, list[str]]:
    """Run the CLI with ``args`` in a new interpreter: (its stdout, modules imported)."""
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    report = json.loads(proc.stderr.strip().splitlines()[-1])
    assert report["exit"] in (0, None), proc.stdout + proc.stderr
    return proc.stdout, report["modules"]


def heavy(modules: list[str]) -> list[str]:
    return [m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY)]


@pytest.fixture(scope="module")
def store_with_a_waiting_execution(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store holding one order execution that waits for its approval."""
    db = tmp_path_factory.mktemp("startup") / "orders.db"
    waiting = threading.Event()

    def listen(event: Any) -> None:
        if event.kind is DurableEventKind.WAITING:
            waiting.set()

    app = create_app(str(db))
    runtime = DurableRuntime(
        SqliteBarrierStore(db), machines=app.machines, listeners=[listen], own_store=True
    )
    try:
        runtime.start("order_flow", Order("o-1", 1000), execution_id="o-1")
        assert waiting.wait(20)
    finally:
        runtime.close(timeout_seconds=5)
    return db


def test_top_level_help_imports_no_command_module() -> None:
    out, modules = imported_by("--help")
    assert re.search(r"executions +Inspect ", out)
    assert heavy(modules) == []
    commands = [m for m in modules if m.startswith("phronomy_fsm.cli.") and "commands" in m]
    assert commands == []
    assert "phronomy_fsm.store.sqlite" not in modules


def test_executions_list_imports_the_store_and_nothing_heavy(
    store_with_a_waiting_execution: Path,
) -> None:
    out, modules = imported_by("executions", "list", "--db", str(store_with_a_waiting_execution))
    assert "o-1" in out and "order_flow" in out  # the command did read the store
    assert "phronomy_fsm.store.sqlite" in modules  # the check is not blind
    assert heavy(modules) == []


def test_executions_list_help_imports_nothing_heavy() -> None:
    out, modules = imported_by("executions", "list", "--help")
    assert "--waiting-for" in out
    assert heavy(modules) == []
