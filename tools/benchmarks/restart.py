"""Restarts: one worker started on a store with a large backlog of unfinished executions.

The store holds ``--executions`` unfinished executions (default 100,000) of
``_waiting_app``, all owned by a worker whose lease has ended (its process died):
``--running`` of them (default 10,000) were running — mid-way, their step announced,
so recovery resumes each from that barrier, runs the step and commits its end — and
the rest wait for a signal or a day-long timer. They are written through the store's
group commit; running and waiting ones are interleaved in age. Then one
``phronomy-fsm worker`` process (default options) is started and, right after it, one
new execution is submitted from this process:

- ``resume_all_running_seconds``: from the worker's start until every running one has
  been resumed — claimed and its next commit made (its end: ``completed``);
- ``first_new_claim_seconds``: from the submit of the new execution (right after the
  worker's start) until the worker owns it; ``first_new_done_seconds``: until it
  finished; ``new_claimed_before_backlog``: whether it was claimed while running ones
  were still waiting to be resumed;
- ``all_claimed_seconds``: until the worker owned every execution;
- ``peak_rss_mb``: the worker's peak resident memory (``VmHWM``), and its RSS once it
  holds them all; ``worker_cpu_seconds``: its CPU time (user + system) until then.

On SQLite (``synchronous=FULL``), and on PostgreSQL unless ``--skip-postgres`` (a server
it starts itself, or ``PHRONOMY_TEST_POSTGRES_DSN``). Files go to a hidden folder of
``PHRONOMY_BENCH_DIR`` or of the current directory, removed at the end. Nothing is
asserted: targets are in ``docs/performance.md``.
"""

from __future__ import annotations

import os
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from benchmarks import bench_folder, on_postgres, on_sqlite

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
APP = "tools.benchmarks._waiting_app.app:create_app"
MACHINE = "waiting_run"
#: targets of issue 26 item 2 (docs/performance.md, "Restarts")
TARGETS = {
    "resume_all_running_seconds": 30.0,
    "first_new_claim_seconds": "at once (well under a second)",
    "peak_rss_mb": "bounded (see rss_growth_mb_per_100k_waiting of the waiting benchmark)",
}


def add_arguments(parser: Any) -> None:
    """The benchmark's options."""
    parser.add_argument("--executions", type=int, default=100_000, help="unfinished executions")
    parser.add_argument("--running", type=int, default=10_000, help="of them, running")
    parser.add_argument("--skip-postgres", action="store_true")


def _status_value(pid: int, key: str) -> float:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    return 0.0


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _backlog(store: Any, args: Any) -> tuple[list[str], str]:
    """Write the backlog owned by a dead worker; (running ids, dead worker id)."""
    from benchmarks._waiting_app.app import running_record, seed, waiting_record
    from phronomy_fsm.durable.records import WorkerRecord

    now = datetime.now(UTC) - timedelta(minutes=5)
    dead = WorkerRecord(
        worker_id="dead-worker",
        host="gone",
        pid=1,
        name="dead",
        started_at=now,
        heartbeat_at=now,
        lease_expires_at=now + timedelta(seconds=10),
    )
    store.register_worker(dead, 3600)
    every = max(1, args.executions // max(1, args.running))
    running: list[str] = []

    def records() -> Any:
        for i in range(args.executions):
            at = now + timedelta(milliseconds=i)
            if i % every == 0 and len(running) < args.running:
                running.append(f"run-{i:06d}")
                yield running_record(running[-1], at)
            else:
                yield waiting_record(f"wait-{i:06d}", "answer" if i % 2 else "timer", at)

    seed(store, records(), owner=dead.worker_id)
    store.retire_worker(dead.worker_id)  # its lease has ended: all of it is claimable
    return running, dead.worker_id


def measure(store: Any, db: str, folder: Path, tag: str, args: Any) -> dict[str, Any]:
    """Start one worker on the backlog in ``store`` (``db`` as the worker opens it)."""
    import scale_harness

    from benchmarks._waiting_app.app import machine
    from phronomy_fsm.durable.submit import submit_execution

    started_seed = time.monotonic()
    running, _dead = _backlog(store, args)
    seed_seconds = time.monotonic() - started_seed
    start = time.monotonic()
    worker = scale_harness.start_worker(db, folder, f"restart-{tag}", app=APP, lease_seconds=10.0)
    submitted_at = time.monotonic()
    new_id, _ = submit_execution(store, machine(), {"kind": "step"}, execution_id="new-work")
    first_claim = first_done = all_running = all_claimed = None
    backlog_left_at_claim = None
    peak = 0.0
    deadline = time.monotonic() + 900
    try:
        while time.monotonic() < deadline:
            if worker.poll() is not None:
                raise RuntimeError(f"the worker exited ({worker.returncode}); see its log")
            now = time.monotonic()
            if first_claim is None and store.execution_owner(new_id)[0] is not None:
                first_claim = now - submitted_at
                counts = store.count_by_status()
                backlog_left_at_claim = args.running - counts.get("completed", 0)
            if first_done is None and not store.load_record(new_id).is_active:
                first_done = now - submitted_at
            if all_running is None:
                done = store.count_by_status().get("completed", 0) - (first_done is not None)
                if done >= len(running):
                    all_running = now - start
            if all_running is not None and first_claim is not None and all_claimed is None:
                workers = [w for w, _h, exp in store.list_workers() if exp > 0]
                if workers:
                    owned = store.owned_executions(workers[0].worker_id, (MACHINE,))
                    if len(owned) >= args.executions - len(running):
                        all_claimed = now - start
            if all_claimed is not None and first_done is not None:
                break
            time.sleep(0.005 if first_claim is None else 0.25)
        peak = _status_value(worker.pid, "VmHWM")
        rss = _status_value(worker.pid, "VmRSS")
        cpu = _cpu_seconds(worker.pid)
    finally:
        scale_harness.stop_worker(worker)
    return {
        "executions": args.executions,
        "running": len(running),
        "seed_seconds": round(seed_seconds, 1),
        "resume_all_running_seconds": None if all_running is None else round(all_running, 2),
        "first_new_claim_seconds": None if first_claim is None else round(first_claim, 3),
        "first_new_done_seconds": None if first_done is None else round(first_done, 3),
        "running_left_when_new_claimed": backlog_left_at_claim,
        "new_claimed_before_backlog": bool(backlog_left_at_claim and backlog_left_at_claim > 0),
        "all_claimed_seconds": None if all_claimed is None else round(all_claimed, 2),
        "peak_rss_mb": round(peak, 1),
        "rss_holding_all_mb": round(rss, 1),
        "worker_cpu_seconds": round(cpu, 2),
    }


def sqlite_side(folder: Path, args: Any) -> dict[str, Any]:
    """The worker on a SQLite file (``synchronous=FULL``)."""
    return on_sqlite(folder, "restart", measure, args)


def postgres_side(folder: Path, args: Any) -> dict[str, Any]:
    """The worker on PostgreSQL (``synchronous_commit=on``)."""
    return on_postgres(folder, "restart", measure, args)


def run(args: Any) -> dict[str, Any]:
    """Run every side (module docstring); returns the JSON report."""
    with bench_folder(".bench-restart-") as directory:
        folder = Path(directory)
        folder.chmod(0o711)  # the server (user postgres) reaches its data directory
        sides = {"sqlite": sqlite_side(folder, args)}
        if not args.skip_postgres:
            sides["postgres"] = postgres_side(folder, args)
    keys = (
        "resume_all_running_seconds",
        "first_new_claim_seconds",
        "peak_rss_mb",
        "all_claimed_seconds",
        "new_claimed_before_backlog",
    )
    return {
        "executions": args.executions,
        "running": args.running,
        **{key: {side: got[key] for side, got in sides.items()} for key in keys},
        "samples": sides,
        "targets": TARGETS,
        "machine_note": "2 shared cores, loaded by other sessions",
    }
