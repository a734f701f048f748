"""Scale-out on PostgreSQL: runs/s with 1, 2 and 4 worker processes, SQLite, DBOS; takeover and zombies.

The workload is the seven-step scripted agent run (LLM, tool, LLM, tool, LLM, tool,
LLM; ``_scale_app``) with simulated latency (``--llm-ms``, default 20 ms per LLM call;
``--tool-ms``, 5 ms per tool call), so concurrency matters. Every figure comes from one
run of this command on a PostgreSQL server it starts itself (or
``PHRONOMY_TEST_POSTGRES_DSN``) with ``synchronous_commit=on``:

- ``runs_per_second``: ``--runs`` executions submitted from this process (which runs
  none of them) and run by 1, 2 and 4 ``phronomy-fsm worker`` processes
  (``--concurrency`` each); one process on SQLite (``synchronous=FULL``) starting and
  running the same number; and DBOS Transact (its system database on the same server,
  the same seven steps as a workflow, the better of a queue with the same concurrency
  and ``start_workflow`` for every run at once);
- the kill-a-worker run: ``--kill-runs`` executions across 3 workers, one killed with
  SIGKILL mid-run; the invariant counts (``tools/scale_harness.py``);
- ``takeover_seconds_median``: after SIGKILL of a worker holding executions, the time
  until another worker owns all of them, with the same-host process probe off (the
  lease path, as for a worker on another host), over ``--takeover-trials`` trials;
  ``takeover_lease_multiple`` is it divided by ``lease_seconds``; the same-host figure
  (the probe notices the dead process at once) is reported beside it;
- ``zombie_commits_accepted``: a worker paused with SIGSTOP for twice its lease while
  another takes its executions over, then resumed: commits accepted from it afterwards.

Its files (the SQLite database, the workers' logs and the data directory of the server
it starts) are in a hidden folder of ``PHRONOMY_BENCH_DIR`` or of the current directory,
removed at the end (``benchmarks.bench_folder``), so the disk measured is the one you
run from.

Nothing is asserted: targets are in ``docs/scale-out.md``.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import bench_folder

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
APP = "tools.benchmarks._scale_app.app:create_app"


def add_arguments(parser: Any) -> None:
    """The benchmark's options."""
    parser.add_argument("--runs", type=int, default=200, help="executions per throughput run")
    parser.add_argument("--concurrency", type=int, default=32, help="executions per worker")
    parser.add_argument("--llm-ms", type=float, default=20.0)
    parser.add_argument("--tool-ms", type=float, default=5.0)
    parser.add_argument("--lease-seconds", type=float, default=2.0)
    parser.add_argument("--kill-runs", type=int, default=200)
    parser.add_argument("--takeover-trials", type=int, default=5)
    parser.add_argument("--skip-dbos", action="store_true")


class _Bench:
    def __init__(self, args: Any, admin_dsn: str, folder: Path) -> None:
        self.args = args
        self.admin_dsn = admin_dsn
        self.folder = folder
        self.n = 0
        os.environ["SCALE_LLM_SECONDS"] = str(args.llm_ms / 1000)
        os.environ["SCALE_TOOL_SECONDS"] = str(args.tool_ms / 1000)

    def database(self, name: str) -> str:
        from phronomy_fsm.store.postgres.server import create_database

        self.n += 1
        return create_database(self.admin_dsn, f"scale_{name}_{os.getpid()}_{self.n}")

    def workers(self, dsn: str, count: int, tag: str, **options: Any) -> list[Any]:
        import scale_harness

        options.setdefault("concurrency", self.args.concurrency)
        options.setdefault("lease_seconds", self.args.lease_seconds)
        env = {
            "SCALE_LLM_SECONDS": os.environ["SCALE_LLM_SECONDS"],
            "SCALE_TOOL_SECONDS": os.environ["SCALE_TOOL_SECONDS"],
            **options.pop("extra_env", {}),
        }
        return [
            scale_harness.start_worker(
                dsn, self.folder, f"{tag}-{i}", app=APP, extra_env=env, **options
            )
            for i in range(count)
        ]

    def submit(self, store: Any, app: Any, prefix: str, count: int) -> list[str]:
        from benchmarks._scale_app.app import Run
        from phronomy_fsm.durable.submit import submit_execution

        ids = [f"{prefix}-{i:04d}" for i in range(count)]
        for eid in ids:
            submit_execution(store, app.machines[0], Run(eid), execution_id=eid)
        return ids

    @staticmethod
    def wait_workers(store: Any, count: int) -> None:
        import scale_harness

        scale_harness.wait_for(
            lambda: sum(1 for _w, _h, exp in store.list_workers() if exp > 0) >= count,
            60,
            f"{count} workers",
        )

    @staticmethod
    def wait_done(store: Any, ids: list[str], timeout: float) -> float:
        deadline = time.monotonic() + timeout
        while True:
            counts = store.count_by_status()
            if sum(counts.get(s, 0) for s in ("completed", "failed", "cancelled")) >= len(ids):
                return time.monotonic()
            if time.monotonic() > deadline:
                raise TimeoutError(f"not finished: {counts}")
            time.sleep(0.02)

    # ------------------------------------------------------------------ throughput

    def postgres_runs(self, count: int) -> float:
        import scale_harness

        from benchmarks._scale_app.app import create_app
        from phronomy_fsm.store.postgres import PostgresStore

        dsn = self.database(f"w{count}")
        with PostgresStore(dsn) as store:
            procs = self.workers(dsn, count, f"tp{count}")
            try:
                self.wait_workers(store, count)
                app = create_app(dsn)
                started = time.monotonic()
                ids = self.submit(store, app, "run", self.args.runs)
                ended = self.wait_done(store, ids, 600)
            finally:
                for p in procs:
                    scale_harness.stop_worker(p)
        return self.args.runs / (ended - started)

    def sqlite_runs(self) -> float:
        from benchmarks._scale_app.app import Run, create_app
        from phronomy_fsm.durable import DurableRuntime
        from phronomy_fsm.store.sqlite import SqliteBarrierStore

        app = create_app(str(self.folder / "scale.db"))
        store = SqliteBarrierStore(self.folder / "scale.db")
        runtime = DurableRuntime(
            store, machines=app.machines, own_store=True, max_workers=self.args.concurrency
        )
        try:
            started = time.monotonic()
            handles = [
                runtime.start("scripted_run", Run(f"run-{i}"), execution_id=f"run-{i}")
                for i in range(self.args.runs)
            ]
            for handle in handles:
                handle.result(600)
            return self.args.runs / (time.monotonic() - started)
        finally:
            runtime.close()

    def dbos_runs(self) -> dict[str, float]:
        out = {}
        for mode in ("queue", "direct"):
            dsn = self.database(f"dbos_{mode}")
            proc = subprocess.run(
                [
                    sys.executable,
                    str(Path(__file__).with_name("_scale_dbos.py")),
                    dsn,
                    str(self.args.runs),
                    str(self.args.concurrency),
                    mode,
                ],
                capture_output=True,
                text=True,
                timeout=900,
                check=False,
            )
            if proc.returncode != 0:
                raise RuntimeError(f"DBOS peer failed: {proc.stderr[-2000:]}")
            result = json.loads(proc.stdout.strip().splitlines()[-1])
            out[mode] = result["completed"] / result["seconds"]
        return out

    # ------------------------------------------------------------------ faults

    def kill_run(self) -> dict[str, Any]:
        import scale_harness

        from benchmarks._scale_app.app import create_app
        from phronomy_fsm.store.postgres import PostgresStore

        dsn = self.database("kill")
        ledger = self.folder / "kill-ledger.jsonl"
        os.environ["SCALE_LEDGER"] = str(ledger)
        try:
            app = create_app(dsn)
            with PostgresStore(dsn) as store:
                procs = self.workers(
                    dsn, 3, "kill", extra_env={"SCALE_LEDGER": str(ledger)}, concurrency=24
                )
                try:
                    self.wait_workers(store, 3)
                    started = time.monotonic()
                    ids = self.submit(store, app, "kill", self.args.kill_runs)
                    scale_harness.wait_for(
                        lambda: store.count_by_status().get("completed", 0) >= len(ids) // 3,
                        300,
                        "a third of the runs",
                        poll=0.01,
                    )
                    procs[0].send_signal(signal.SIGKILL)
                    procs[0].wait(10)
                    statuses = scale_harness.drive(store, app, ids, 300)
                    seconds = time.monotonic() - started
                    findings = scale_harness.check(store, app, ids)
                    return {
                        "executions": len(ids),
                        "workers": 3,
                        "killed": 1,
                        "final": sum(1 for s in statuses.values() if s in ("completed", "failed")),
                        "completed": sum(1 for s in statuses.values() if s == "completed"),
                        "parked_and_resolved": sum(
                            1
                            for eid in ids
                            if any(b.barrier == "@recovery" for b in store.barrier_log(eid))
                        ),
                        "seconds": round(seconds, 2),
                        **findings,
                    }
                finally:
                    for p in procs:
                        scale_harness.stop_worker(p)
        finally:
            os.environ.pop("SCALE_LEDGER", None)

    def takeover(self, probe: bool) -> list[float]:
        """Seconds from SIGKILL of a worker holding executions until another owns all
        of them; ``probe``: the same-host process probe on (else the lease path)."""
        import scale_harness

        from benchmarks._scale_app.app import create_app
        from phronomy_fsm.store.postgres import PostgresStore

        times = []
        extra = {} if probe else {"PHRONOMY_WORKER_PROBE_PROCESSES": "0"}
        held = 8
        # Room for all of them at once whatever --concurrency says: the victim holds every
        # one when killed, and the survivor takes every one over.
        room = max(self.args.concurrency, held)
        for trial in range(self.args.takeover_trials):
            dsn = self.database(f"takeover{'p' if probe else 'l'}{trial}")
            env = {**extra, "SCALE_LLM_SECONDS": "0.5"}  # long steps: still held when killed
            with PostgresStore(dsn) as store:
                victim = self.workers(dsn, 1, f"victim{trial}", extra_env=env, concurrency=room)[0]
                survivor = []
                try:
                    self.wait_workers(store, 1)
                    app = create_app(dsn)
                    ids = self.submit(store, app, "t", held)
                    scale_harness.wait_for(
                        lambda ids=ids: all(
                            o for o, _f, _a in store.execution_fences(ids).values()
                        ),
                        30,
                        "the victim to hold them",
                    )
                    survivor = self.workers(
                        dsn, 1, f"survivor{trial}", extra_env=env, concurrency=room
                    )
                    self.wait_workers(store, 2)
                    victim_id = next(o for o, _f, _a in store.execution_fences(ids).values())
                    victim.send_signal(signal.SIGKILL)
                    killed = time.monotonic()
                    scale_harness.wait_for(
                        lambda ids=ids, victim_id=victim_id: all(
                            o not in (None, victim_id)
                            for o, _f, _a in store.execution_fences(ids).values()
                        ),
                        10 * self.args.lease_seconds + 30,
                        "the takeover",
                        poll=0.01,
                    )
                    times.append(time.monotonic() - killed)
                finally:
                    for p in (victim, *survivor):
                        scale_harness.stop_worker(p)
        return times

    def zombie(self) -> dict[str, Any]:
        import scale_harness

        from benchmarks._scale_app.app import create_app
        from phronomy_fsm.store.postgres import PostgresStore

        dsn = self.database("zombie")
        env = {"SCALE_LLM_SECONDS": "0.3", "PHRONOMY_WORKER_PROBE_PROCESSES": "0"}
        held = 16
        room = max(self.args.concurrency, held)  # the zombie holds every one when paused
        with PostgresStore(dsn) as store:
            zombie = self.workers(dsn, 1, "zombie", extra_env=env, concurrency=room)[0]
            others = []
            try:
                self.wait_workers(store, 1)
                app = create_app(dsn)
                ids = self.submit(store, app, "z", held)
                scale_harness.wait_for(
                    lambda: all(o for o, _f, _a in store.execution_fences(ids).values()),
                    30,
                    "the zombie to hold them",
                )
                zombie_id = next(o for o, _f, _a in store.execution_fences(ids).values())
                zombie.send_signal(signal.SIGSTOP)
                others = self.workers(dsn, 1, "heir", extra_env=env, concurrency=room)
                time.sleep(2 * self.args.lease_seconds)  # the pause itself is the fault
                zombie.send_signal(signal.SIGCONT)
                statuses = scale_harness.drive(store, app, ids, 120)
                taken = sum(
                    1
                    for eid in ids
                    if any(
                        w not in (None, zombie_id) for _r, _b, w, _f in store.barrier_owners(eid)
                    )
                )
                return {
                    "zombie_commits_accepted": scale_harness.zombie_commits(store, ids),
                    "executions_taken_over": taken,
                    "final": sum(1 for s in statuses.values() if s in ("completed", "failed")),
                    "zombie_let_go": (self.folder / "zombie-0.log")
                    .read_text(errors="replace")
                    .count("let go of execution"),
                }
            finally:
                for p in (zombie, *others):
                    scale_harness.stop_worker(p)


def run(args: Any) -> dict[str, Any]:
    """Run every part (module docstring); returns the JSON report."""
    with bench_folder(".bench-scale-") as directory:
        folder = Path(directory)
        # As root the server runs as user postgres, who must get through this folder to
        # the data directory made (and given to it) inside; listing it stays private.
        folder.chmod(0o711)
        return _run_in(args, folder)


def _run_in(args: Any, folder: Path) -> dict[str, Any]:
    from phronomy_fsm.store.postgres.server import LocalPostgres, server_from_environment

    admin = server_from_environment()
    server = None
    if admin is None:
        server = LocalPostgres(settings={"max_connections": "300"}, base_dir=folder).start()
        admin = server.dsn
    try:
        bench = _Bench(args, admin, folder)
        rps = {
            "postgres_1_worker": bench.postgres_runs(1),
            "postgres_2_workers": bench.postgres_runs(2),
            "postgres_4_workers": bench.postgres_runs(4),
            "sqlite_1_process": bench.sqlite_runs(),
        }
        dbos = {} if args.skip_dbos else bench.dbos_runs()
        if dbos:
            rps["dbos_postgres"] = max(dbos.values())
        kill = bench.kill_run()
        lease_path = bench.takeover(probe=False)
        same_host = bench.takeover(probe=True)
        zombie = bench.zombie()
        median = statistics.median(lease_path)
        best_pg = max(rps[k] for k in rps if k.startswith("postgres"))
        return {
            "runs": args.runs,
            "concurrency_per_worker": args.concurrency,
            "llm_ms": args.llm_ms,
            "tool_ms": args.tool_ms,
            "synchronous_commit": "on",
            "runs_per_second": {k: round(v, 1) for k, v in rps.items()},
            "dbos_modes_runs_per_second": {k: round(v, 1) for k, v in dbos.items()},
            "postgres_best_over_dbos": round(best_pg / rps["dbos_postgres"], 2) if dbos else None,
            "lease_seconds": args.lease_seconds,
            "takeover_seconds_median": round(median, 3),
            "takeover_lease_multiple": round(median / args.lease_seconds, 2),
            "takeover_seconds": [round(t, 3) for t in lease_path],
            "takeover_seconds_median_same_host_probe": round(statistics.median(same_host), 3),
            "zombie_commits_accepted": zombie["zombie_commits_accepted"],
            "zombie_run": zombie,
            "kill_a_worker_run": kill,
            "lost": kill["lost"],
            "double_terminal": kill["double_terminal"],
            "duplicate_effects": kill["duplicate_effects"],
            "blind_resends": kill["blind_resends"],
            "stuck": kill["stuck"],
        }
    finally:
        if server is not None:
            server.stop()
