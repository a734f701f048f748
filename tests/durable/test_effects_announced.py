"""Every non-pure effect is announced by its own commit (issue 22 item 1;
docs/semantics.md "Effects"): an at_most_once effect that comes after a wait — the
validator accepts it, a barrier precedes the wait — is never run again after a crash
that followed it; recovery parks the execution with the key the attempt used."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from phronomy_fsm.durable import DurableEventKind, ExecutionStatus
from phronomy_fsm.durable.operations import request_resolution
from phronomy_fsm.store.open import open_store
from phronomy_fsm.testing.deadlines import scaled_seconds

from .conftest import Recorder, kill_at
from .late_effect_app import create_app
from .order_app import read_ledger

APP = "tests.durable.late_effect_app:create_app"
ROOT = Path(__file__).resolve().parents[2]


def _recovered(tmp_path: Path, open_runtime: Any) -> Any:
    """``late-1`` as a new runtime's recovery leaves it: parked or finished."""
    app = create_app(str(tmp_path / "store.db"))
    runtime, events = open_runtime(list(app.machines))
    runtime.recover()
    events.wait_for(
        lambda e: e.kind in (DurableEventKind.RECOVERY_REQUIRED, DurableEventKind.FINISHED)
    )
    return runtime.handle("late-1").record()


def test_a_crash_after_an_effect_that_followed_a_wait_parks_instead_of_running_it_again(
    tmp_path, store_target, open_runtime
):
    kill_at(tmp_path, "offload:ship:after", app=APP, db=store_target)
    ledger = tmp_path / "ledger.jsonl"
    assert [e["effect"] for e in read_ledger(ledger)] == ["ship"]
    record = _recovered(tmp_path, open_runtime)
    shipped = read_ledger(ledger)
    assert [e["effect"] for e in shipped] == ["ship"], "ran again after the crash"
    assert record.status is ExecutionStatus.RECOVERY_REQUIRED
    assert record.recovery.subject.effect == "ship"
    assert record.recovery.subject.key == shipped[0]["key"]  # the key the attempt used


_DURABLE_CHILD = """
import sys, threading
from phronomy_fsm.durable import DurableEventKind, DurableRuntime
from phronomy_fsm.runtime.faults import FaultPlan
from phronomy_fsm.store.open import open_store
from tests.durable.late_effect_app import create_app

noted = threading.Event()

def listen(event):
    if event.kind is DurableEventKind.EFFECT_FINISHED and event.detail.get("effect") == "note":
        noted.set()

app = create_app(sys.argv[1])
faults = FaultPlan.parse("offload:ship:after")
runtime = DurableRuntime(
    open_store(sys.argv[1], faults=faults),
    machines=app.machines,
    faults=faults,
    listeners=[listen],
    own_store=True,
)
runtime.start("late_effect_durable", {"order": "late-1"}, execution_id="late-1")
assert noted.wait(60)
runtime.signal("late-1", "approve", {"by": "ops"})  # shipping: killed after its work
threading.Event().wait(60)
sys.exit(5)  # not killed
"""


def test_a_durable_flag_on_a_persons_signal_does_not_make_the_effect_after_it_run_twice(
    tmp_path, store_target, open_runtime
):
    """Issue 22 item 4: ``durable: true`` on a person's signal made the validator count
    it as a committed edge, so an at_most_once effect after it passed validation with
    no barrier since an earlier effect, and ran again after a crash (the replay from
    the start took the earlier effect for the one the start announced)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PHRONOMY_APP_DIR": str(tmp_path)}
    child = subprocess.run(
        [sys.executable, "-c", _DURABLE_CHILD, store_target],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=scaled_seconds(120),
        check=False,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr[-2000:]
    ledger = tmp_path / "ledger.jsonl"
    assert [e["effect"] for e in read_ledger(ledger)] == ["note", "ship"]
    record = _recovered(tmp_path, open_runtime)
    assert [e["effect"] for e in read_ledger(ledger)] == ["note", "ship"], "ran again"
    assert record.status is ExecutionStatus.RECOVERY_REQUIRED
    assert record.recovery.subject.effect == "ship"


def test_an_idempotent_effect_recovered_at_its_announcement_runs_again_with_its_key(
    tmp_path, store_target, open_runtime
):
    """From the breaker: recovery from an ``effect`` point announced the effect again,
    under a new key (revision + 1): an idempotent service saw two effects."""
    kill_at(
        tmp_path, "offload:ship:after", app=APP, db=store_target, scenario="idempotent_approved"
    )
    app = create_app(str(tmp_path / "store.db"))
    runtime, events = open_runtime(list(app.machines))
    runtime.recover()
    events.wait_for(lambda e: e.kind is DurableEventKind.FINISHED)
    assert runtime.handle("late-1").record().status is ExecutionStatus.COMPLETED
    keys = [e["key"] for e in read_ledger(tmp_path / "ledger.jsonl")]
    assert len(keys) == 2 and keys[0] == keys[1], keys
    barriers = [b.barrier for b in runtime.store.barrier_log("late-1")]
    assert barriers.count("@effect") == 1, barriers


_ANSWERED_THEN_SHIP = """
import sys, threading
from phronomy_fsm.durable import DurableRuntime
from phronomy_fsm.runtime.faults import FaultPlan
from phronomy_fsm.store.open import open_store
from tests.durable.late_effect_app import create_app

app = create_app(sys.argv[1])
faults = FaultPlan.parse(sys.argv[2])
runtime = DurableRuntime(
    open_store(sys.argv[1], faults=faults), machines=app.machines, faults=faults, own_store=True
)
if sys.argv[3] == "start":
    runtime.start("late_effect_durable", {"order": "late-1"}, execution_id="late-1")
    runtime.signal("late-1", "approve", {"by": "ops"})
else:
    runtime.recover()
threading.Event().wait(60)
sys.exit(5)  # not killed
"""


def test_an_effect_after_an_answered_one_is_announced_and_never_runs_twice(tmp_path):
    """From the breaker: after an operator answered ``succeeded`` for a parked effect,
    the next at_most_once effect was taken as covered by the replayed commit, ran
    unannounced, and ran again after a crash. (The engine's rule; on SQLite.)"""
    from phronomy_fsm.durable import DurableRuntime

    store_target = str(tmp_path / "store.db")
    opened: list[DurableRuntime] = []

    def open_runtime(machines: list) -> tuple[DurableRuntime, Recorder]:
        recorder = Recorder()
        runtime = DurableRuntime(
            open_store(store_target), machines=machines, listeners=[recorder], own_store=True
        )
        opened.append(runtime)
        return runtime, recorder

    def child(point: str, mode: str) -> None:
        run = subprocess.run(
            [sys.executable, "-c", _ANSWERED_THEN_SHIP, store_target, point, mode],
            env={**os.environ, "PYTHONPATH": str(ROOT), "PHRONOMY_APP_DIR": str(tmp_path)},
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=scaled_seconds(120),
            check=False,
        )
        assert run.returncode == -signal.SIGKILL, run.stderr[-2000:]

    child("offload:note:after", "start")  # noted (at_most_once here), then killed
    app = create_app(str(tmp_path / "store.db"))
    runtime, events = open_runtime(list(app.machines))
    runtime.recover()
    events.wait_for(lambda e: e.kind is DurableEventKind.RECOVERY_REQUIRED)
    parked = runtime.handle("late-1").record()
    runtime.close(timeout_seconds=5)
    with open_store(store_target) as store:
        request_resolution(
            store, "late-1", expected_revision=parked.revision, outcome="succeeded", result={}
        )
    child("offload:ship:after", "recover")  # the answer applied, shipped, killed
    runtime, events = open_runtime(list(app.machines))
    runtime.recover()
    events.wait_for(
        lambda e: (
            e.kind in (DurableEventKind.RECOVERY_REQUIRED, DurableEventKind.FINISHED)
            and e.execution_id == "late-1"
        )
    )
    ships = [e for e in read_ledger(tmp_path / "ledger.jsonl") if e["effect"] == "ship"]
    assert len(ships) == 1, ships
    record = runtime.handle("late-1").record()
    for each in opened:
        each.close(timeout_seconds=5)
    assert record.status is ExecutionStatus.RECOVERY_REQUIRED
    assert record.recovery.subject.effect == "ship"
