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
  another takes its executions over, then resumed: commits accepted from it afterwards;
- ``cpu_seconds_per_step``: for each PostgreSQL throughput configuration, the CPU time
  (user + system, from ``/proc``) of the ``worker`` processes and of the ``server``
  (the postmaster and every process under it: backends, WAL writer, checkpointer)
  spent during the run, divided by its durable steps (barrier commits of the run's
  executions, read from the ``barriers`` table) — only when this command started the
  server, so that its processes are known;
- ``notify_commits_per_second``: two threads committing the store's commit-shaped
  transaction (an insert and an update) as fast as they can, ``with_notify`` (one
  ``pg_notify`` in each transaction, as a commit that sends a signal does) and
  ``without_notify``: PostgreSQL serialises the commits of transactions that notify.

With ``--rounds N`` the throughput configurations run N times, interleaved; each
figure is the median and ``samples`` holds every round's.

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
    parser.add_argument("--rounds", type=int, default=3, help="interleaved throughput rounds")
    parser.add_argument("--notify-seconds", type=float, default=3.0)


#: What the issue asks of PostgreSQL scale-out (docs/performance.md).
TARGETS = {"postgres_2_vs_1_workers": 1.6}

_TICKS = os.sysconf("SC_CLK_TCK")


def _proc_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (0.0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICKS


def _server_pids(data_dir: Path) -> list[int]:
    """The postmaster of ``data_dir`` and every process under it."""
    try:
        root = int((data_dir / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return []
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            parents[int(entry.name)] = ppid
    found, frontier = {root}, [root]
    while frontier:
        parent = frontier.pop()
        for pid, ppid in parents.items():
            if ppid == parent and pid not in found:
                found.add(pid)
                frontier.append(pid)
    return sorted(found)


class _ServerCpu:
    """CPU seconds of a server's processes between ``start()`` and ``stop()``
    (a process that ended in between is missed: backends of the run's workers live
    as long as the workers)."""

    def __init__(self, data_dir: Path | None) -> None:
        self.data_dir = data_dir
        self.before: dict[int, float] = {}

    def start(self) -> None:
        if self.data_dir is not None:
            self.before = {p: _proc_cpu_seconds(p) for p in _server_pids(self.data_dir)}

    def stop(self) -> float | None:
        if self.data_dir is None:
            return None
        after = {p: _proc_cpu_seconds(p) for p in _server_pids(self.data_dir)}
        return sum(max(0.0, cpu - self.before.get(p, 0.0)) for p, cpu in after.items())


class _Bench:
    def __init__(
        self, args: Any, admin_dsn: str, folder: Path, data_dir: Path | None = None
    ) -> None:
        self.args = args
        self.data_dir = data_dir
        #: per PostgreSQL configuration: (worker CPU s, server CPU s or None, steps)
        self.cpu: dict[str, list[tuple[float, float | None, int]]] = {}
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
        server = _ServerCpu(self.data_dir)
        with PostgresStore(dsn) as store:
            procs = self.workers(dsn, count, f"tp{count}")
            try:
                self.wait_workers(store, count)
                app = create_app(dsn)
                worker_cpu = sum(_proc_cpu_seconds(p.pid) for p in procs)
                server.start()
                started = time.monotonic()
                ids = self.submit(store, app, "run", self.args.runs)
                ended = self.wait_done(store, ids, 600)
                server_cpu = server.stop()
                worker_cpu = sum(_proc_cpu_seconds(p.pid) for p in procs) - worker_cpu
            finally:
                for p in procs:
                    scale_harness.stop_worker(p)
            steps = _barrier_commits(dsn)
        key = f"postgres_{count}_worker" + ("s" if count > 1 else "")
        self.cpu.setdefault(key, []).append((worker_cpu, server_cpu, steps))
        return self.args.runs / (ended - started)

    def sqlite_runs(self) -> float:
        from benchmarks._scale_app.app import Run, create_app
        from phronomy_fsm.durable import DurableRuntime
        from phronomy_fsm.store.sqlite import SqliteBarrierStore

        self.n += 1  # a new file each round: the same ids in a used one are finished
        path = self.folder / f"scale-{self.n}.db"
        app = create_app(str(path))
        store = SqliteBarrierStore(path)
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


def _barrier_commits(dsn: str) -> int:
    """The durable steps of a run: rows of its database's ``barriers`` table."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM barriers").fetchone()
    return int(row[0]) if row else 0


def _cpu_per_step(cpu: dict[str, list[tuple[float, float | None, int]]]) -> dict[str, Any]:
    """``{"worker": s, "server": s | None, "by_configuration": {...}}`` per durable step:
    medians over rounds; the headline is the 2-worker configuration."""
    by: dict[str, dict[str, Any]] = {}
    for key, rounds in cpu.items():
        worker = [w / n for w, _s, n in rounds if n]
        server = [s / n for _w, s, n in rounds if n and s is not None]
        by[key] = {
            "worker": round(statistics.median(worker), 7) if worker else None,
            "server": round(statistics.median(server), 7) if server else None,
            "steps": rounds[0][2],
        }
    head = by.get("postgres_2_workers", {})
    return {
        "worker": head.get("worker"),
        "server": head.get("server"),
        "by_configuration": by,
        "what": "CPU seconds (user+system) per barrier commit, median over rounds; "
        "worker = the worker processes, server = the postmaster and its children",
    }


def _notify_commits(dsn: str, seconds: float) -> dict[str, Any]:
    """Commits/s of two threads committing a commit-shaped transaction, with one
    ``pg_notify`` in each and without (alternating, ``seconds`` each, twice)."""
    import threading

    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS bench_notify")
        conn.execute("CREATE TABLE bench_notify (id bigserial PRIMARY KEY, n int, body text)")
        conn.execute(
            "INSERT INTO bench_notify (n, body) SELECT g, 'x' FROM generate_series(1, 64) g"
        )

    def committer(notify: bool, until: float, counts: list[int], i: int) -> None:
        with psycopg.connect(dsn) as c:
            cur = c.cursor()
            while time.monotonic() < until:
                cur.execute("INSERT INTO bench_notify (n, body) VALUES (%s, %s)", (i, "y" * 200))
                cur.execute("UPDATE bench_notify SET n = n + 1 WHERE id = %s", (i + 1,))
                if notify:
                    cur.execute("SELECT pg_notify('bench_notify', %s)", (str(i),))
                c.commit()
                counts[i] += 1

    samples: dict[str, list[float]] = {"with_notify": [], "without_notify": []}
    for _ in range(2):
        for notify in (True, False):
            counts = [0, 0]
            until = time.monotonic() + seconds
            threads = [
                threading.Thread(target=committer, args=(notify, until, counts, i))
                for i in range(2)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            key = "with_notify" if notify else "without_notify"
            samples[key].append(round(sum(counts) / seconds, 1))
    return {
        "with_notify": statistics.median(samples["with_notify"]),
        "without_notify": statistics.median(samples["without_notify"]),
        "samples": samples,
        "committers": 2,
    }


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
        bench = _Bench(args, admin, folder, server.data_dir if server is not None else None)
        samples: dict[str, list[float]] = {}
        for _ in range(max(1, args.rounds)):  # interleaved, so load drifts hit each alike
            for key, measure in (
                ("postgres_1_worker", lambda: bench.postgres_runs(1)),
                ("postgres_2_workers", lambda: bench.postgres_runs(2)),
                ("postgres_4_workers", lambda: bench.postgres_runs(4)),
                ("sqlite_1_process", bench.sqlite_runs),
            ):
                samples.setdefault(key, []).append(round(measure(), 1))
        rps = {k: statistics.median(v) for k, v in samples.items()}
        notify = _notify_commits(admin, args.notify_seconds)
        dbos = {} if args.skip_dbos else bench.dbos_runs()
        if dbos:
            rps["dbos_postgres"] = max(dbos.values())
        kill = bench.kill_run()
        lease_path = bench.takeover(probe=False)
        same_host = bench.takeover(probe=True)
        zombie = bench.zombie()
        median = statistics.median(lease_path)
        best_pg = max(rps[k] for k in rps if k.startswith("postgres"))
        two_vs_one = rps["postgres_2_workers"] / rps["postgres_1_worker"]
        return {
            "targets": TARGETS,
            "ratios": {"postgres_2_vs_1_workers": round(two_vs_one, 2)},
            "samples": samples,
            "rounds": max(1, args.rounds),
            "cpu_seconds_per_step": _cpu_per_step(bench.cpu),
            "notify_commits_per_second": notify,
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
