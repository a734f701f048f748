"""Shared by the scale-out fault tests and ``tools/bench.py scale``: worker processes of
the order test app, a driver that answers waiting and parked executions the way a
person and an operator would, and the invariant checks of a multi-worker run.

Invariants (as the crash matrix's, ``tools/durable_crash.py``), on the store and the
application's effects ledger:

- ``lost``: a submitted execution missing from the store;
- ``double_terminal``: more than one finishing commit in an execution's barrier log;
- ``duplicate_effects``: an ``at_most_once`` effect recorded twice with the same key
  and attempt;
- ``blind_resends``: an ``at_most_once`` effect run again (a later attempt) without an
  operator's ``retry`` resolution;
- ``stuck``: an execution still active when the run ended;
- ``zombie_commits``: a commit accepted under a fencing token lower than one an earlier
  commit of the same execution carried (a worker that had been superseded).
"""

from __future__ import annotations

import os
import signal as signals
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from phronomy_fsm.testing.deadlines import scaled_seconds, wait_until

ROOT = Path(__file__).resolve().parent.parent
ORDER_APP = "tests.durable.order_app:create_app"
INVARIANTS = ("lost", "double_terminal", "duplicate_effects", "blind_resends", "stuck")


def start_worker(
    db: str,
    folder: Path,
    name: str,
    *,
    app: str = ORDER_APP,
    concurrency: int = 16,
    lease_seconds: float = 2.0,
    scan_seconds: float | None = None,
    poll_seconds: float | None = None,
    notify: bool = True,
    effect_seconds: float = 0.0,
    extra_env: dict[str, str] | None = None,
    prefix: tuple[str, ...] = (),
) -> subprocess.Popen[bytes]:
    """Start ``phronomy-fsm worker`` in a process of its own; its log goes to
    ``folder/<name>.log``. ``prefix`` runs it under another command (``ip netns exec``)."""
    cmd = [
        *prefix,
        sys.executable,
        "-m",
        "phronomy_fsm.cli",
        "worker",
        "--db",
        db,
        "--app",
        app,
        "--concurrency",
        str(concurrency),
        "--lease-seconds",
        str(lease_seconds),
        "--name",
        name,
        "--notify" if notify else "--no-notify",
    ]
    if scan_seconds is not None:
        cmd += ["--scan-seconds", str(scan_seconds)]
    if poll_seconds is not None:
        cmd += ["--poll-seconds", str(poll_seconds)]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "PHRONOMY_APP_DIR": str(folder),
        "PHRONOMY_TEST_EFFECT_SECONDS": str(effect_seconds),
        **(extra_env or {}),
    }
    log = open(folder / f"{name}.log", "ab")  # noqa: SIM115 - the child keeps it
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=log)


def stop_worker(proc: subprocess.Popen[bytes], timeout: float = 20.0) -> int:
    """SIGTERM (continue it first if stopped), wait; SIGKILL after ``timeout``."""
    if proc.poll() is None:
        proc.send_signal(signals.SIGCONT)
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    return int(proc.returncode)


def drive(
    store: Any, app: Any, ids: list[str], timeout_seconds: float, *, answer: bool = True
) -> dict[str, str]:
    """Until every execution of ``ids`` has finished (or the timeout): approve the
    waiting ones (one signal id per execution and revision: a resend is a no-op) and
    answer parked ones as the app's operator says. Returns ``{id: status}``."""
    from phronomy_fsm.durable.operations import request_resolution, send_signal
    from phronomy_fsm.errors import PhronomyError

    deadline = time.monotonic() + scaled_seconds(timeout_seconds)
    wanted = set(ids)
    while True:
        records = {r.execution_id: r for r in store.list_records() if r.execution_id in wanted}
        active = [r for r in records.values() if r.is_active]
        if not active and len(records) == len(wanted):
            return {eid: r.status.value for eid, r in records.items()}
        if time.monotonic() >= deadline:
            return {eid: r.status.value for eid, r in records.items()}
        for record in active if answer else ():
            try:
                if record.status.value == "waiting":
                    send_signal(
                        store,
                        record.execution_id,
                        "approve",
                        {"by": "driver"},
                        expected_revision=record.revision,
                        signal_id=f"{record.execution_id}-w{record.revision}",
                    )
                elif record.status.value == "recovery_required" and app.operator is not None:
                    reply = app.operator(record)
                    if reply is not None and reply.outcome is not None:
                        request_resolution(
                            store,
                            record.execution_id,
                            expected_revision=record.revision,
                            outcome=reply.outcome,
                            result=reply.result,
                            error=reply.error,
                            signal_id=f"{record.execution_id}-res{record.revision}",
                        )
            except PhronomyError:
                pass  # it moved on meanwhile: look again
        time.sleep(0.05)


def zombie_commits(store: Any, ids: list[str]) -> int:
    """Commits accepted under a fencing token lower than an earlier commit's."""
    zombies = 0
    for eid in ids:
        highest = -1
        for _revision, _barrier, _worker, fence in store.barrier_owners(eid):
            fence = fence or 0
            if fence < highest:
                zombies += 1
            highest = max(highest, fence)
    return zombies


def check(store: Any, app: Any, ids: list[str]) -> dict[str, int]:
    """The invariant counts of a finished run (module docstring), plus
    ``zombie_commits`` where the store records who committed (PostgreSQL)."""
    findings = dict.fromkeys(INVARIANTS, 0)
    records = {r.execution_id: r for r in store.list_records()}
    retries: Counter[str] = Counter()
    for eid in ids:
        record = records.get(eid)
        if record is None:
            findings["lost"] += 1
            continue
        if record.is_active:
            findings["stuck"] += 1
        finishing = [
            b
            for b in store.barrier_log(eid)
            if b.barrier in ("@final", "@cancel", "@resolution")
            and b.status in ("completed", "failed", "cancelled")
        ]
        if len(finishing) > 1:
            findings["double_terminal"] += 1
        for s in store.list_signals(eid):
            if (
                s.kind.value == "resolution"
                and isinstance(s.payload, dict)
                and s.payload.get("outcome") == "retry"
                and s.outcome == "consumed"
            ):
                retries[eid] += 1
    effects = [e for e in (app.effects() if app.effects else []) if e.execution_id in set(ids)]
    once = [e for e in effects if e.kind == "at_most_once"]
    for count in Counter((e.key, e.attempt) for e in once).values():
        findings["duplicate_effects"] += count - 1
    for e in once:
        if e.attempt > 1 and retries[e.execution_id] < e.attempt - 1:
            findings["blind_resends"] += 1
    if hasattr(store, "barrier_owners"):
        findings["zombie_commits"] = zombie_commits(store, ids)
    return findings


def wait_for(predicate: Any, timeout_seconds: float, what: str, poll: float = 0.05) -> Any:
    """Poll ``predicate()`` until it returns something truthy; AssertionError after
    the timeout (naming ``what``), scaled to the machine's load and
    ``PHRONOMY_TEST_TIME_SCALE`` (:mod:`phronomy_fsm.testing.deadlines`): a takeover
    that a quiet machine finishes in seconds may take minutes on a busy one."""
    return wait_until(predicate, timeout_seconds, what, poll_seconds=poll)


__all__ = [
    "INVARIANTS",
    "ORDER_APP",
    "check",
    "drive",
    "start_worker",
    "stop_worker",
    "wait_for",
    "zombie_commits",
]
