"""Waiting executions: what a worker pays in memory to hold them, and how fast a signal lands.

A ``phronomy-fsm worker`` process (``_waiting_app``: half the executions wait for a
signal, half for a day-long timer) is started on an empty store and its resident memory
read once it is up (the idle worker). Then ``--executions`` waiting executions
(default 100,000) are written through the store's group commit, unowned, and the worker
claims them as it claims any work; once it owns all of them its memory is read again:

- ``rss_growth_mb_per_100k_waiting``: held minus idle RSS (``/proc/PID/status``
  VmRSS, the median of three readings a second apart), scaled to 100,000 executions;
- ``signal_apply_p50_seconds`` / ``signal_apply_p99_seconds``: this process (not the
  worker) sends ``answer`` to ``--signals`` executions picked at random among those
  waiting for a signal, one at a time, through the store
  (:func:`~phronomy_fsm.durable.operations.send_signal`), and polls the store until the
  execution's commit that applies it (its final state) is visible;
- ``claim_seconds``: until the worker owned them all; ``worker_cpu_seconds_holding``:
  the worker's CPU time (user + system) over ``--hold-seconds`` of holding them idle.

On SQLite (``synchronous=FULL``) and on PostgreSQL (a server it starts itself, as
``tools/bench.py scale`` does, or ``PHRONOMY_TEST_POSTGRES_DSN``); and DBOS Transact
under ``dbos_sqlite``: ``--dbos-executions`` workflows (default 2,000: each blocked
workflow holds a thread of DBOS's executor) blocked in ``DBOS.recv`` in a process of
their own (``_waiting_dbos.py``), scaled to 100,000 the same way (by the number
blocked when its memory was read).

Files go to a hidden folder of ``PHRONOMY_BENCH_DIR`` or of the current directory,
removed at the end. Nothing is asserted: targets are in ``docs/performance.md``.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks import bench_folder, on_postgres, on_sqlite

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
APP = "tools.benchmarks._waiting_app.app:create_app"
MACHINE = "waiting_run"
#: targets of issue 26 item 1 (docs/performance.md, "Waiting executions")
TARGETS = {"rss_growth_mb_per_100k_waiting": 50.0, "signal_apply_p99_seconds": 0.1}


def add_arguments(parser: Any) -> None:
    """The benchmark's options."""
    parser.add_argument("--executions", type=int, default=100_000, help="waiting executions")
    parser.add_argument("--signals", type=int, default=200, help="signals timed per store")
    parser.add_argument("--dbos-executions", type=int, default=2000)
    parser.add_argument("--dbos-signals", type=int, default=50, help="signals timed on DBOS")
    parser.add_argument("--hold-seconds", type=float, default=5.0)
    parser.add_argument("--skip-postgres", action="store_true")
    parser.add_argument("--skip-dbos", action="store_true")


def rss_mb(pid: int) -> float:
    """The resident set of process ``pid``, in MB."""
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far, in seconds."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def settled_rss(pid: int) -> tuple[float, list[float]]:
    """The median of three RSS readings a second apart (and the readings)."""
    readings = []
    for _ in range(3):
        time.sleep(1.0)
        readings.append(rss_mb(pid))
    return statistics.median(readings), readings


def quantile(samples: list[float], q: float) -> float:
    """The ``q`` quantile (nearest rank) of ``samples``."""
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def measure(store: Any, db: str, folder: Path, tag: str, args: Any) -> dict[str, Any]:
    """Hold ``--executions`` waiting executions in one worker on ``store`` (``db`` as
    the worker opens it); the figures of the module docstring."""
    import scale_harness

    from benchmarks._waiting_app.app import seed, waiting_record
    from phronomy_fsm.durable.operations import send_signal

    n = args.executions
    worker = scale_harness.start_worker(db, folder, f"waiting-{tag}", app=APP, lease_seconds=10.0)
    try:
        scale_harness.wait_for(lambda: bool(store.list_workers()), 60, "the worker")
        worker_id = store.list_workers()[0][0].worker_id
        idle, idle_readings = settled_rss(worker.pid)
        now = datetime.now(UTC)
        ids = [f"{tag}-{i:06d}" for i in range(n)]
        started = time.monotonic()
        cpu_before = cpu_seconds(worker.pid)
        seed(
            store,
            (waiting_record(eid, "answer" if i % 2 else "timer", now) for i, eid in enumerate(ids)),
        )
        seeded = time.monotonic() - started
        while len(store.owned_executions(worker_id, (MACHINE,))) < n:
            if worker.poll() is not None:
                raise RuntimeError(f"the worker exited ({worker.returncode}); see its log")
            time.sleep(0.5)
        claimed = time.monotonic() - started
        claim_cpu = cpu_seconds(worker.pid) - cpu_before
        held, held_readings = settled_rss(worker.pid)
        cpu0 = cpu_seconds(worker.pid)
        time.sleep(args.hold_seconds)
        holding_cpu = cpu_seconds(worker.pid) - cpu0
        rng = random.Random(26)
        answers = [eid for i, eid in enumerate(ids) if i % 2]
        latencies = []
        for eid in rng.sample(answers, min(args.signals, len(answers))):
            sent = time.perf_counter()
            send_signal(store, eid, "answer", {"by": "bench"})
            while store.load_record(eid).is_active:
                time.sleep(0.001)
            latencies.append(time.perf_counter() - sent)
        after, _ = settled_rss(worker.pid)
    finally:
        scale_harness.stop_worker(worker)
    growth = (held - idle) * 100_000 / n
    return {
        "executions": n,
        "idle_rss_mb": round(idle, 1),
        "held_rss_mb": round(held, 1),
        "rss_after_signals_mb": round(after, 1),
        "rss_growth_mb_per_100k_waiting": round(growth, 1),
        "signal_apply_p50_seconds": round(statistics.median(latencies), 4),
        "signal_apply_p99_seconds": round(quantile(latencies, 0.99), 4),
        "signal_apply_max_seconds": round(max(latencies), 4),
        "seed_seconds": round(seeded, 1),
        "claim_seconds": round(claimed, 1),
        "worker_cpu_seconds_claiming": round(claim_cpu, 2),
        "worker_cpu_seconds_holding": round(holding_cpu, 3),
        "hold_seconds": args.hold_seconds,
        "samples": {
            "signal_apply_seconds": [round(x, 4) for x in latencies],
            "idle_rss_mb": idle_readings,
            "held_rss_mb": held_readings,
        },
    }


def sqlite_side(folder: Path, args: Any) -> dict[str, Any]:
    """The worker on a SQLite file (``synchronous=FULL``)."""
    return on_sqlite(folder, "waiting", measure, args)


def postgres_side(folder: Path, args: Any) -> dict[str, Any]:
    """The worker on PostgreSQL (``synchronous_commit=on``)."""
    return on_postgres(folder, "waiting", measure, args)


def dbos_side(folder: Path, args: Any) -> dict[str, Any]:
    """DBOS: workflows blocked in ``recv`` (``_waiting_dbos.py``)."""
    n = args.dbos_executions
    out = subprocess.run(
        [
            sys.executable,
            str(Path(__file__).with_name("_waiting_dbos.py")),
            str(folder / "dbos.sqlite"),
            str(n),
            str(args.dbos_signals),
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=1800,
    )
    got = json.loads(out.stdout.strip().splitlines()[-1])
    latencies = got["signal_seconds"]
    blocked = got.get("blocked") or n  # the workflows holding a thread when measured
    return {
        "executions": n,
        "blocked_when_measured": blocked,
        "idle_rss_mb": round(got["idle_rss_mb"], 1),
        "held_rss_mb": round(got["held_rss_mb"], 1),
        "threads": got["threads"],
        "rss_growth_mb_per_100k_waiting": round(
            (got["held_rss_mb"] - got["idle_rss_mb"]) * 100_000 / blocked, 1
        ),
        "signal_apply_p50_seconds": round(statistics.median(latencies), 4),
        "signal_apply_p99_seconds": round(quantile(latencies, 0.99), 4),
        "samples": {"signal_apply_seconds": [round(x, 4) for x in latencies]},
    }


def run(args: Any) -> dict[str, Any]:
    """Run every side (module docstring); returns the JSON report."""
    with bench_folder(".bench-waiting-") as directory:
        folder = Path(directory)
        folder.chmod(0o711)  # the server (user postgres) reaches its data directory
        sides = {"sqlite": sqlite_side(folder, args)}
        if not args.skip_postgres:
            sides["postgres"] = postgres_side(folder, args)
        dbos = None if args.skip_dbos else dbos_side(folder, args)
    keys = (
        "rss_growth_mb_per_100k_waiting",
        "signal_apply_p50_seconds",
        "signal_apply_p99_seconds",
    )
    report: dict[str, Any] = {
        "executions": {side: got["executions"] for side, got in sides.items()},
        **{key: {side: got[key] for side, got in sides.items()} for key in keys},
        "details": {
            side: {k: v for k, v in got.items() if k != "samples"} for side, got in sides.items()
        },
        "samples": {side: got["samples"] for side, got in sides.items()},
        "targets": TARGETS,
        "machine_note": "2 shared cores, loaded by other sessions; RSS is per process",
    }
    if dbos is not None:
        report["dbos_sqlite"] = {k: v for k, v in dbos.items() if k != "samples"}
        report["samples"]["dbos_sqlite"] = dbos["samples"]
    return report
