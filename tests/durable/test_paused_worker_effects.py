"""A worker paused past its lease starts none of the effects still queued in its pool
(``docs/scale-out.md``, "Leases and fencing").

A real runtime in a process of its own, with one pool thread, starts two orders: the
first order's ``charge_card`` (``at_most_once``, slow) runs, the second one's waits in
the pool's queue behind it, both announced by their ``charge`` barrier. The process is
paused with SIGSTOP; a second worker takes both executions over after the lease and
parks them (an ``at_most_once`` effect whose outcome it cannot know); the operator,
seeing no charge of the second order in the ledger, answers ``not_performed``. Then the
paused process is resumed: the charge it had under way finishes (no lease stops a call
already running), but the queued one must never start — it would charge an order the
store says was not charged. Real SQLite file, real processes, the effects ledger read
back.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

from phronomy_fsm.durable.records import ExecutionStatus
from phronomy_fsm.store import SqliteBarrierStore

from .order_app import ledger_path, read_ledger

ROOT = Path(__file__).resolve().parents[2]

RUNTIME = textwrap.dedent(
    """
    import sys, time
    from phronomy_fsm.durable import DurableRuntime
    from phronomy_fsm.store import SqliteBarrierStore
    from tests.durable.order_app import Order, create_app

    db = sys.argv[1]
    store = SqliteBarrierStore(db)
    app = create_app(db)
    runtime = DurableRuntime(store, machines=app.machines, max_workers=1, lease_seconds=1.5)
    for i, order_id in enumerate(("q1", "q2")):
        runtime.start("order_flow", Order(order_id, 1000 + i), execution_id=order_id)
    print("started", flush=True)
    time.sleep(600)
    """
)


def _wait_for(predicate: Any, seconds: float, what: str) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "phronomy_fsm.cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_paused_worker_starts_no_queued_effect_after_its_lease(tmp_path: Path) -> None:
    db = str(tmp_path / "orders.db")
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "PHRONOMY_TEST_EFFECT_SECONDS": "2.5",
    }
    env.pop("PHRONOMY_CRASH_AT", None)
    log = open(tmp_path / "a.log", "w")  # noqa: SIM115 - the child keeps it
    a = subprocess.Popen(
        [sys.executable, "-c", RUNTIME, db], cwd=ROOT, env=env, stdout=log, stderr=log
    )
    b: subprocess.Popen[bytes] | None = None
    store: Any = None
    try:
        _wait_for(lambda: Path(db).exists(), 30, "the store")
        store = SqliteBarrierStore(db)

        def announced() -> bool:
            return all(
                any(entry.barrier == "charge" for entry in store.barrier_log(eid))
                for eid in ("q1", "q2")
            )

        _wait_for(announced, 30, "both charges to be announced")
        ledger = ledger_path(db)
        assert not [e for e in read_ledger(ledger) if e["effect"] == "charge_card"]
        a.send_signal(signal.SIGSTOP)  # q1's charge is under way, q2's queued behind it

        fast = {**env, "PHRONOMY_TEST_EFFECT_SECONDS": "0"}
        b = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "phronomy_fsm.cli",
                "worker",
                "--db",
                db,
                "--app",
                "tests.durable.order_app:create_app",
                "--lease-seconds",
                "1.5",
                "--scan-seconds",
                "0.2",
            ],
            cwd=ROOT,
            env=fast,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        parked = _wait_for(
            lambda: all(
                store.load_record(eid).status is ExecutionStatus.RECOVERY_REQUIRED
                for eid in ("q1", "q2")
            ),
            60,
            "the second worker to park both orders",
        )
        assert parked
        q2 = store.load_record("q2")
        assert q2.recovery is not None and q2.recovery.subject is not None
        q2_key = q2.recovery.subject.key
        assert not [e for e in read_ledger(ledger) if e["key"] == q2_key]
        answered = _cli(
            "resolve",
            "q2",
            "--db",
            db,
            "--expected-revision",
            str(q2.revision),
            "--outcome",
            "not_performed",
            env=fast,
        )
        assert answered.returncode == 0, answered.stderr
        _wait_for(lambda: store.load_record("q2").is_finished, 30, "q2 to finish")

        a.send_signal(signal.SIGCONT)
        # q1's charge, under way when a was paused, finishes now; q2's never starts
        _wait_for(
            lambda: any(e["order"] == "q1" for e in read_ledger(ledger)),
            30,
            "q1's charge under way to finish",
        )
        time.sleep(3.0)  # longer than q2's charge would take if it had started
        charges = [e for e in read_ledger(ledger) if e["effect"] == "charge_card"]
        assert [e["order"] for e in charges] == ["q1"], charges
        record = store.load_record("q2")
        assert record.status is ExecutionStatus.FAILED  # not performed: nothing charged
    finally:
        for proc in (a, b):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
                proc.wait(10)
        log.close()
        if store is not None:
            store.close()
