"""Retention on both stores (issue 25 item 5; docs/store.md, "Compaction"):
``store compact`` with a policy — finished executions older than N days removed, the
machines named by ``--keep`` kept longer — on SQLite and on a PostgreSQL server the
harness starts, read back from another process; and two worker processes compacting a
PostgreSQL store on a schedule while they run executions: every finished one goes,
no active one is touched, every execution still ends as it should."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import attrs
import pytest
from phronomy_fsm.codegen.lower import lower

from phronomy_fsm.durable import DurableRuntime, ExecutionStatus, Machine, submit_execution
from phronomy_fsm.spec.loader import load_spec_text
from phronomy_fsm.store.open import open_store
from phronomy_fsm.testing.deadlines import scaled_seconds, wait_until

QUICK = """
spec_format: 1
machine: quick
version: 1
events: {}
states:
  starting: {kind: auto, initial: true}
  done: {kind: final}
transitions:
  - {from: starting, event: state_completed, to: done}
"""

TICKET = """
spec_format: 1
machine: ticket
version: 1
events:
  close: {}
states:
  open: {kind: wait, initial: true}
  closed: {kind: final}
transitions:
  - {from: open, event: close, to: closed}
"""

APP = '''
"""Two machines: quick (finishes at once) and ticket (waits for ``close``)."""
from types import SimpleNamespace

from phronomy_fsm.codegen.lower import lower
from phronomy_fsm.durable import DurableApp, Machine
from phronomy_fsm.spec.loader import load_spec_text

SPECS = {specs!r}


def create_app(db_path):
    return DurableApp(
        machines=tuple(
            Machine(lower(load_spec_text(text).spec), SimpleNamespace(), dict)
            for text in SPECS
        )
    )
'''


@attrs.frozen
class Machines:
    """The two machines, as the test process submits them."""

    quick: Machine
    ticket: Machine


def _machines() -> Machines:
    def machine(text: str) -> Machine:
        spec = load_spec_text(textwrap.dedent(text)).spec
        assert spec is not None
        return Machine(lower(spec), SimpleNamespace(), dict)

    return Machines(machine(QUICK), machine(TICKET))


def _cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "phronomy_fsm.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=scaled_seconds(120),
        check=False,
    )


def _statuses(cwd: Path, db: str) -> dict[str, str]:
    """Every execution's status, read by another process."""
    out = _cli(cwd, "executions", "list", "--db", db, "--json", "--limit", "100000")
    assert out.returncode == 0, out.stderr
    return {row["execution_id"]: row["status"] for row in json.loads(out.stdout)}


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "store.db")
    return str(request.getfixturevalue("pg_dsn"))


def test_compact_follows_the_policy_on_both_stores(tmp_path: Path, db: str) -> None:
    machines = _machines()
    runtime = DurableRuntime(open_store(db), machines=[machines.quick, machines.ticket])
    try:
        for n in range(5):
            runtime.start("quick", {}, execution_id=f"q-{n}").result(scaled_seconds(20))
        runtime.start("ticket", {}, execution_id="t-open")
        closing = runtime.start("ticket", {}, execution_id="t-closed")
        wait_until(
            lambda: runtime.store.load_record("t-closed").status is ExecutionStatus.WAITING,
            20,
            "the ticket to wait",
        )
        runtime.signal("t-closed", "close", {})
        assert closing.result(scaled_seconds(20)).status is ExecutionStatus.COMPLETED
    finally:
        runtime.close()

    refused = _cli(
        tmp_path, "store", "compact", "--db", db, "--older-than-days", "0", "--keep", "ticket"
    )
    assert refused.returncode == 2 and "MACHINE=DAYS" in refused.stderr
    assert len(_statuses(tmp_path, db)) == 7  # nothing removed by the refusal

    out = _cli(
        tmp_path,
        "store",
        "compact",
        "--db",
        db,
        "--older-than-days",
        "0",
        "--keep",
        "ticket=30",
        "--json",
    )
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["removed_executions"] == 5
    assert report["keep_days"] == {"ticket": 30.0}
    # the finished ticket is kept for its machine's 30 days, the open one always
    assert _statuses(tmp_path, db) == {"t-open": "waiting", "t-closed": "completed"}

    again = _cli(tmp_path, "store", "compact", "--db", db, "--older-than-days", "0")
    assert again.returncode == 0, again.stderr
    assert "removed 1 executions" in again.stdout
    assert _statuses(tmp_path, db) == {"t-open": "waiting"}


def _start_worker(cwd: Path, dsn: str, name: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "phronomy_fsm.cli",
            "worker",
            "--db",
            dsn,
            "--app",
            "retention_app:create_app",
            "--name",
            name,
            "--compact-older-than-days",
            "0",
            "--compact-every-seconds",
            "0.3",
            "--log-level",
            "warning",
        ],
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(cwd) + os.pathsep + os.environ.get("PYTHONPATH", "")},
    )


def test_two_workers_compact_a_postgresql_store_on_a_schedule_while_they_run(
    tmp_path: Path, pg_dsn: str
) -> None:
    (tmp_path / "retention_app.py").write_text(
        APP.format(specs=[textwrap.dedent(QUICK), textwrap.dedent(TICKET)])
    )
    machines = _machines()
    workers = [_start_worker(tmp_path, pg_dsn, f"w{n}") for n in range(2)]
    store: Any = open_store(pg_dsn)
    try:
        waiting = [f"t-{n}" for n in range(10)]
        for eid in waiting:
            submit_execution(store, machines.ticket, {}, execution_id=eid)
        for n in range(200):
            submit_execution(store, machines.quick, {}, execution_id=f"q-{n}")

        def quick_left() -> int:
            return len(store.list_records(machine="quick"))

        # the quick ones finish, and the workers' compactions remove every one of them
        wait_until(lambda: quick_left() == 0, 60, "the workers to run and compact them")
        # never an active one: the tickets wait on, and still take their signal
        assert {r.execution_id: r.status for r in store.list_records(machine="ticket")} == {
            eid: ExecutionStatus.WAITING for eid in waiting
        }
        from phronomy_fsm.operator import signal_execution

        for eid in waiting[:5]:
            signal_execution(store, eid, "close", {})
        wait_until(
            lambda: (
                sorted(r.execution_id for r in store.list_records(machine="ticket")) == waiting[5:]
            ),
            60,
            "the closed tickets to finish and be compacted",
        )
        assert all(w.poll() is None for w in workers), [w.stderr for w in workers]
    finally:
        store.close()
        for w in workers:
            w.send_signal(signal.SIGTERM)
        for w in workers:
            try:
                w.wait(scaled_seconds(30))
            except subprocess.TimeoutExpired:
                w.kill()
    for w in workers:
        assert w.stderr is not None
        errors = w.stderr.read()
        assert "Traceback" not in errors, errors
