"""``phronomy-fsm migrate --check``: a CI gate for spec changes against the executions in
flight (issue 25 item 3; docs/operations.md, "Checking a spec change against the
executions in flight").

A real store (a SQLite file, and a PostgreSQL database the harness starts) holds
executions waiting in a wait state with a timer; the gate is run as its own process
against new specs and applications that continue them, and against ones that strand
them: a state dropped, a version raised without a migration, a timer taken away, a
context type that no longer loads the stored contexts."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import attrs
import pytest

from phronomy_fsm.durable import DurableRuntime, ExecutionStatus
from phronomy_fsm.store.open import open_store
from phronomy_fsm.testing.deadlines import wait_until

SPEC_V1 = """
spec_format: 1
machine: ticket
version: 1
events:
  close: {payload: {by: str}}
  expired: {}
states:
  opening: {kind: auto, initial: true}
  open: {kind: wait, timeout: {seconds: 3600, event: expired}}
  closed: {kind: final}
transitions:
  - {from: opening, event: state_completed, to: open}
  - {from: open, event: close, to: closed}
  - {from: open, event: expired, to: closed}
"""

APP = '''
"""The ticket application: the machine of the spec named by TICKET_SPEC."""
import os
from types import SimpleNamespace

import attrs

from phronomy_fsm.codegen.lower import lower
from phronomy_fsm.durable import DurableApp, Machine
from phronomy_fsm.spec.loader import load_spec


@attrs.define
class Ticket:
    title: str
    {extra_field}


def create_app(db_path):
    spec = load_spec(os.environ["TICKET_SPEC"]).spec
    return DurableApp(machines=(Machine(lower(spec), SimpleNamespace(), Ticket),))
'''


@attrs.define
class Ticket:
    """The tickets' context as the first version stores it."""

    title: str


def _write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text).lstrip())
    return path


def _fill(tmp_path: Path, db: str) -> None:
    """Three tickets waiting in ``open`` (with a timer) and one closed, in ``db``."""
    from phronomy_fsm.codegen.lower import lower

    from phronomy_fsm.durable import Machine
    from phronomy_fsm.spec.loader import load_spec

    spec = load_spec(_write(tmp_path, "v1.yaml", SPEC_V1)).spec
    assert spec is not None
    machine = Machine(lower(spec), SimpleNamespace(), Ticket)
    runtime = DurableRuntime(open_store(db), machines=[machine])
    try:
        for n in range(4):
            runtime.start("ticket", Ticket(f"t{n}"), execution_id=f"ticket-{n}")
        store = runtime.store

        def all_waiting() -> bool:
            return all(
                store.load_record(f"ticket-{n}").status is ExecutionStatus.WAITING for n in range(4)
            )

        wait_until(all_waiting, 20, "the tickets to wait")
        runtime.signal("ticket-3", "close", {"by": "ann"})
        wait_until(
            lambda: store.load_record("ticket-3").status is ExecutionStatus.COMPLETED,
            20,
            "ticket-3 to close",
        )
    finally:
        runtime.close()


def _gate(tmp_path: Path, db: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "phronomy_fsm.cli", "migrate", "--check", "--db", db, *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "TICKET_SPEC": str(tmp_path / "app.yaml")},
        timeout=120,
        check=False,
    )


def _v2(rename: bool, migration: str, timeout: bool = True) -> str:
    text = SPEC_V1.replace("version: 1", "version: 2")
    if rename:
        text = re.sub(r"\bopen\b", "pending", text)
    if not timeout:
        text = text.replace(", timeout: {seconds: 3600, event: expired}", "")
        text = re.sub(r"  - \{from: \w+, event: expired, to: closed\}\n", "", text)
    return text + migration


def test_the_gate_passes_the_same_spec_and_a_migration_and_fails_what_strands(
    tmp_path: Path,
) -> None:
    db = str(tmp_path / "tickets.db")
    _fill(tmp_path, db)
    before = (tmp_path / "tickets.db").read_bytes()

    same = _gate(tmp_path, db, "v1.yaml")
    assert same.returncode == 0, same.stdout + same.stderr
    assert "executions not finished: 3 — continues 3, stranded 0" in same.stdout

    # a new version that renames the state in use, without a migration: no worker of
    # it would claim the tickets
    _write(tmp_path, "unmigrated.yaml", _v2(rename=True, migration=""))
    unmigrated = _gate(tmp_path, db, "unmigrated.yaml")
    assert unmigrated.returncode == 1, unmigrated.stdout + unmigrated.stderr
    assert "stranded 3" in unmigrated.stdout
    assert "which no migration of the new spec v2" in unmigrated.stdout
    assert "not safe to deploy" in unmigrated.stdout

    # the same with the migration that renames it: continued
    migrated = _write(
        tmp_path,
        "migrated.yaml",
        _v2(
            rename=True,
            migration="migrations:\n  - {from_version: 1, rename_states: {open: pending}}\n",
        ),
    )
    ok = _gate(tmp_path, db, str(migrated), "--json")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    report = json.loads(ok.stdout)
    assert report["ok"] is True
    assert report["counts"] == {"continues": 3, "stranded": 0, "not_checked": 0}
    assert {e["new_state"] for e in report["executions"]} == {"pending"}

    # a migration that forgets the rename: the state in use is dropped
    _write(
        tmp_path,
        "dropped.yaml",
        _v2(rename=True, migration="migrations:\n  - {from_version: 1}\n"),
    )
    dropped = _gate(tmp_path, db, "dropped.yaml", "--json")
    assert dropped.returncode == 1
    reasons = [r for e in json.loads(dropped.stdout)["executions"] for r in e["reasons"]]
    assert len(reasons) == 3
    assert all("its state open is not in the new spec" in r for r in reasons), reasons

    # the wait keeps its name but loses its timer: the armed deadline would never fire
    _write(
        tmp_path,
        "untimed.yaml",
        _v2(rename=False, migration="migrations:\n  - {from_version: 1}\n", timeout=False),
    )
    untimed = _gate(tmp_path, db, "untimed.yaml")
    assert untimed.returncode == 1
    assert "the new spec gives the state no timeout" in untimed.stdout

    # the gate wrote nothing
    assert (tmp_path / "tickets.db").read_bytes() == before


def test_the_gate_loads_every_stored_context_with_the_new_applications_types(
    tmp_path: Path,
) -> None:
    db = str(tmp_path / "tickets.db")
    _fill(tmp_path, db)
    _write(tmp_path, "app.yaml", SPEC_V1)
    _write(tmp_path, "ticket_app.py", APP.replace("{extra_field}", ""))
    _write(tmp_path, "ticket_app2.py", APP.replace("{extra_field}", "priority: int"))
    _write(tmp_path, "ticket_app3.py", APP.replace("{extra_field}", "priority: int = 0"))

    kept = _gate(tmp_path, db, "--app", "ticket_app:create_app")
    assert kept.returncode == 0, kept.stdout + kept.stderr

    # a required field the stored contexts lack: they no longer load
    changed = _gate(tmp_path, db, "--app", "ticket_app2:create_app")
    assert changed.returncode == 1, changed.stdout + changed.stderr
    assert changed.stdout.count("its context no longer loads") == 3
    assert "priority" in changed.stdout

    # with a default it loads
    defaulted = _gate(tmp_path, db, "--app", "ticket_app3:create_app")
    assert defaulted.returncode == 0, defaulted.stdout + defaulted.stderr


def test_the_gate_reads_a_postgresql_store(tmp_path: Path, pg_dsn: str) -> None:
    _fill(tmp_path, pg_dsn)
    assert _gate(tmp_path, pg_dsn, "v1.yaml").returncode == 0
    _write(tmp_path, "unmigrated.yaml", _v2(rename=True, migration=""))
    stranded = _gate(tmp_path, pg_dsn, "unmigrated.yaml", "--json")
    assert stranded.returncode == 1, stranded.stdout + stranded.stderr
    report = json.loads(stranded.stdout)
    assert report["counts"]["stranded"] == 3


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "pass --check"),
        (("--check",), "name the new SPEC files"),
    ],
)
def test_the_gate_says_what_is_missing(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    db = str(tmp_path / "tickets.db")
    _fill(tmp_path, db)
    out = subprocess.run(
        [sys.executable, "-m", "phronomy_fsm.cli", "migrate", "--db", db, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 2
    assert message in out.stderr
