"""The crash-injection matrix for any durable machine (``tools/crash_matrix.py --spec --app``).

Takes a spec and an application (``--app MODULE:FACTORY``, a
:class:`~phronomy_fsm.durable.app.DurableApp` factory) and kills the application with
SIGKILL at every crash point its generated table defines — before, during and after
each barrier of the spec and each engine commit (``@start``, ``@wait``, ``@final``,
``@recovery``, ``@resolution``), before each effect starts (every offload that is not
``pure``) and right after each offloaded piece of work returns — then restarts it
(``recover``) until its executions finish, and checks on the store and the
application's own record of effects:

- ``lost``: an execution whose start was acknowledged is missing, or was acknowledged
  finished while the store says otherwise;
- ``double_terminal``: more than one finishing commit, or two different outcomes
  acknowledged;
- ``duplicate_effects``: an ``at_most_once`` effect recorded twice with the same key
  and attempt;
- ``blind_resends``: an ``at_most_once`` effect run again (a later attempt) without an
  operator's ``retry`` resolution;
- ``stuck``: an execution still active when nothing is left to drive;
- ``app_errors``: a process that failed for another reason than the planned kill.

Each run uses a fresh folder; the application's scenarios say how to start executions
and how a person answers a waiting one, and its ``operator`` how an operator who knows
the truth answers one in ``recovery_required`` (``docs/operations.md``, "The
crash-injection matrix"). ``--quick`` kills once at every point some scenario reaches;
the full matrix kills at every hit of every point (up to 4) in every scenario. Both add
two-kill plans: a kill at an ``at_most_once`` effect (which parks the execution) followed
by a second kill in the first recovery process at every point only recovery reaches,
and, for each ``at_most_once`` effect of the spec, a second kill during the attempt an
operator's ``retry`` started (before it starts, and after its work returned).

``phronomy-fsm check`` (``phronomy_fsm.checking``) does all of this and more — a
signal, a cancel, the timers or a takeover at every point, and more invariants — and
shares its crash points with this harness.

Usage::

    python tools/crash_matrix.py --spec SPEC --app MODULE:FACTORY [--quick] [--json]
    python tools/durable_crash.py child run|recover --app M:F --db DB --scenario NAME
        [--crash-at POINT[@N]] [--trace FILE]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import attrs

ROOT = Path(__file__).resolve().parent.parent
INVARIANTS = (
    "lost",
    "double_terminal",
    "duplicate_effects",
    "blind_resends",
    "stuck",
    "app_errors",
)
ENGINE_BARRIERS = ("@start", "@wait", "@final", "@recovery", "@resolution")
#: Most recover processes after the last armed one.
EXTRA_RECOVERS = 4
NTH_CAP = 4
PROCESS_TIMEOUT_SECONDS = 60
DRIVE_SECONDS = 20.0
ACKS = "acks.jsonl"


# ------------------------------------------------------------------ the child process


def _child(args: argparse.Namespace) -> int:
    from phronomy_fsm.durable import DurableEventKind, DurableRuntime
    from phronomy_fsm.durable.app import attach_app, load_app
    from phronomy_fsm.errors import PhronomyError
    from phronomy_fsm.runtime.faults import FaultPlan
    from phronomy_fsm.store.open import is_postgres_dsn, open_store

    folder = Path(args.dir).resolve() if args.dir else Path(args.db).resolve().parent
    if is_postgres_dsn(args.db):
        os.environ.setdefault("PHRONOMY_APP_DIR", str(folder))
    trace_fd = (
        os.open(args.trace, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600) if args.trace else None
    )
    acks_fd = os.open(folder / ACKS, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    def trace(point: str) -> None:
        if trace_fd is not None:
            os.write(trace_fd, (point + "\n").encode())

    def ack(event: Any) -> None:
        if event.kind is DurableEventKind.STARTED:
            entry = {"started": event.execution_id}
        elif event.kind is DurableEventKind.FINISHED and event.record is not None:
            entry = {
                "finished": event.execution_id,
                "status": event.record.status.value,
                "state": event.record.state,
            }
        else:
            return
        os.write(acks_fd, (json.dumps(entry) + "\n").encode())

    faults = FaultPlan.parse(args.crash_at, trace=trace)
    app = load_app(args.app, args.db)
    scenario = app.scenarios[args.scenario]
    store = open_store(args.db, faults=faults)
    runtime = DurableRuntime(
        store,
        machines=app.machines,
        faults=faults,
        listeners=[ack, *app.listeners],
        own_store=True,
        lease_seconds=5.0,
    )
    detach = attach_app(app, runtime)
    try:
        if args.mode == "run":
            scenario.start(runtime)
        else:
            runtime.recover(accept=app.accept)
        deadline = time.monotonic() + args.drive_seconds
        machines = set(runtime.machines)
        while time.monotonic() < deadline:
            if scenario.drive is not None:
                try:
                    scenario.drive(runtime)
                except PhronomyError:
                    pass  # it moved on meanwhile: again at the next round
            active = [r for r in store.list_records(active=True) if r.machine in machines]
            if not active:
                return 0
            for record in active:
                try:
                    if record.status.value == "waiting":
                        answer = scenario.on_waiting(record)
                        if answer is not None and answer.event is not None:
                            runtime.signal(
                                record.execution_id,
                                answer.event,
                                answer.payload,
                                expected_revision=record.revision,
                                signal_id=f"{record.execution_id}-w{record.revision}",
                            )
                    elif record.status.value == "recovery_required" and app.operator is not None:
                        answer = app.operator(record)
                        if answer is not None and answer.outcome is not None:
                            runtime.resolve(
                                record.execution_id,
                                expected_revision=record.revision,
                                outcome=answer.outcome,
                                result=answer.result,
                                error=answer.error,
                                signal_id=f"{record.execution_id}-res{record.revision}",
                            )
                except PhronomyError:
                    pass  # it moved on meanwhile: look again
            time.sleep(0.02)
        return 3
    finally:
        detach()
        runtime.close(timeout_seconds=5)


# ------------------------------------------------------------------ the harness


@attrs.frozen
class Plan:
    """One run: a scenario and the armed point of each process (run, then recovers)."""

    scenario: str
    crashes: tuple[str | None, ...] = ()

    def label(self) -> str:
        """``scenario:point,point`` (``-`` for an unarmed process)."""
        return f"{self.scenario}:" + ",".join(c or "-" for c in self.crashes)


def offload_effects(table: Any) -> dict[str, str]:
    """The declared effect kind of each offload hook of ``table`` (``at_most_once``
    unless the spec says otherwise): :func:`phronomy_fsm.checking.interleavings.effect_kinds`."""
    from phronomy_fsm.checking.interleavings import effect_kinds

    return effect_kinds(table)


def crash_points(table: Any, engine_barriers: Iterable[str] = ENGINE_BARRIERS) -> list[str]:
    """Every crash point of a machine's table, in a stable order: before, during and
    after each of ``engine_barriers`` (the engine's commits the application reaches;
    ``@effect`` added for a machine with effect shorthands) and of the table's barriers, and the points of its offloads (``effect:<hook>:before``
    only for one that is not ``pure``: the engine starts no effect for it). The
    checker's :func:`phronomy_fsm.checking.interleavings.crash_points`, whose default
    engine commits also include ``@effect`` and ``@cancel``."""
    from phronomy_fsm.checking.interleavings import crash_points as points_of

    barriers = tuple(engine_barriers)
    if "@effect" not in barriers and _announces_by_effect_commits(table):
        barriers += ("@effect",)
    return points_of(table, barriers)


def _announces_by_effect_commits(table: Any) -> bool:
    """True when a machine declares effects with the effect shorthand (no barrier state
    in front: the engine announces them by its own ``@effect`` commits, so a kill
    before, during and after one belongs to its matrix)."""
    offloads = [s.offload for s in table.states] + [t.offload for t in table.transitions]
    return any(o is not None and getattr(o, "direct", False) for o in offloads)


def parking_points(tables: Iterable[Any]) -> list[str]:
    """``effect:<hook>:before`` of every ``at_most_once`` offload of ``tables``: a kill
    there leads the next process to ``recovery_required`` (so to ``@recovery`` and
    ``@resolution``): :func:`phronomy_fsm.checking.interleavings.parking_points`."""
    from phronomy_fsm.checking.interleavings import parking_points as parking_of

    return parking_of(tables)


def _run_child(
    mode: str,
    app: str,
    folder: Path,
    scenario: str,
    crash: str | None,
    trace: Path,
    db: str | None = None,
) -> int:
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "child",
        mode,
        "--app",
        app,
        "--db",
        db or str(folder / "store.db"),
        "--dir",
        str(folder),
        "--scenario",
        scenario,
        "--trace",
        str(trace),
    ]
    if crash is not None:
        cmd += ["--crash-at", crash]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    env.pop("PHRONOMY_CRASH_AT", None)
    with open(folder / f"{mode}.log", "ab") as log:
        try:
            proc = subprocess.run(
                cmd,
                check=False,
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=log,
                timeout=PROCESS_TIMEOUT_SECONDS,
            )
        except subprocess.TimeoutExpired:
            return -999
    return proc.returncode


@attrs.frozen
class Checks:
    """Invariants an application adds to the generic ones: their names, and
    ``run(db, folder) -> {name: count}`` called after each run (the store ``db`` and the
    run's folder, where it may leave what it found)."""

    invariants: tuple[str, ...]
    run: Callable[[str, Path], Mapping[str, int]]


def run_plan(
    app: str, plan: Plan, folder: Path, db: str | None = None, checks: Checks | None = None
) -> dict[str, Any]:
    """Run ``plan`` in ``folder`` (on the store ``db``: default ``folder/store.db``):
    the run process, then recover processes until the executions are done; return the
    findings (the generic ones, and ``checks``')."""
    folder.mkdir(parents=True, exist_ok=True)
    codes = []
    killed = 0
    crashes = list(plan.crashes) or [None]
    for i, crash in enumerate(crashes):
        trace = folder / f"trace-{i}.txt"
        code = _run_child(
            "run" if i == 0 else "recover", app, folder, plan.scenario, crash, trace, db
        )
        codes.append(code)
        killed += code == -signal.SIGKILL
    extra = 0
    while codes[-1] != 0 and extra < EXTRA_RECOVERS:
        trace = folder / f"trace-{len(codes)}.txt"
        codes.append(_run_child("recover", app, folder, plan.scenario, None, trace, db))
        killed += codes[-1] == -signal.SIGKILL
        extra += 1
    findings = check_run(app, folder, db)
    findings["app_errors"] += sum(1 for c in codes if c not in (0, 3, -signal.SIGKILL))
    if checks is not None:
        own = dict.fromkeys(checks.invariants, 0)
        try:
            own.update(checks.run(db or str(folder / "store.db"), folder))
        except Exception as exc:  # noqa: BLE001 - a checker that fails is a finding
            (folder / "checks-error.txt").write_text(f"{type(exc).__name__}: {exc}\n")
            findings["app_errors"] += 1
        findings.update(own)
    reached = [_read_trace(folder / f"trace-{i}.txt") for i in range(len(codes))]
    return {
        "plan": plan.label(),
        "codes": codes,
        "killed": killed,
        "reached": [sorted(r) for r in reached],
        "findings": findings,
        "folder": str(folder),
    }


def _read_trace(path: Path) -> Counter[str]:
    if not path.exists():
        return Counter()
    return Counter(line for line in path.read_text().splitlines() if line)


def check_run(app_spec: str, folder: Path, db: str | None = None) -> dict[str, int]:
    """The invariant counts of one finished run (module docstring)."""
    from phronomy_fsm.durable.app import load_app
    from phronomy_fsm.errors import SchemaVersionError
    from phronomy_fsm.store.open import open_store

    findings = dict.fromkeys(INVARIANTS, 0)
    acks = _read_acks(folder / ACKS)
    if db is None:
        db = str(folder / "store.db")
        if not Path(db).exists():
            findings["lost"] += len(acks["started"])
            return findings
        app = load_app(app_spec, db)
    else:  # a PostgreSQL store has no folder: the app finds its files through this
        previous = os.environ.get("PHRONOMY_APP_DIR")
        os.environ["PHRONOMY_APP_DIR"] = str(folder)
        try:
            app = load_app(app_spec, db)
        finally:
            if previous is None:
                os.environ.pop("PHRONOMY_APP_DIR", None)
            else:
                os.environ["PHRONOMY_APP_DIR"] = previous
    try:
        store = open_store(db, read_only=True)
    except SchemaVersionError:  # a database the run never initialised
        findings["lost"] += len(acks["started"])
        return findings
    with store:
        records = {r.execution_id: r for r in store.list_records()}
        finishing = {
            eid: [
                b
                for b in store.barrier_log(eid)
                if b.barrier in ("@final", "@cancel", "@resolution")
                and b.status in ("completed", "failed", "cancelled")
            ]
            for eid in records
        }
        retries: Counter[str] = Counter()
        for eid in records:
            for s in store.list_signals(eid):
                if (
                    s.kind.value == "resolution"
                    and isinstance(s.payload, dict)
                    and s.payload.get("outcome") == "retry"
                    and s.outcome == "consumed"
                ):
                    retries[eid] += 1
    for eid in acks["started"]:
        if eid not in records:
            findings["lost"] += 1
    for eid, outcomes in acks["finished"].items():
        record = records.get(eid)
        if record is None or not record.is_finished:
            findings["lost"] += 1
        elif {(record.status.value, record.state)} != outcomes:
            findings["double_terminal"] += 1
    for eid, record in records.items():
        if record.is_active:
            findings["stuck"] += 1
        if len(finishing[eid]) > 1:
            findings["double_terminal"] += 1
    effects = list(app.effects()) if app.effects is not None else []
    once = [e for e in effects if e.kind == "at_most_once"]
    for count in Counter((e.key, e.attempt) for e in once).values():
        findings["duplicate_effects"] += count - 1
    for e in once:
        if e.attempt > 1 and retries[e.execution_id] < e.attempt - 1:
            findings["blind_resends"] += 1
    return findings


def _read_acks(path: Path) -> dict[str, Any]:
    started: set[str] = set()
    finished: dict[str, set[tuple[str, str]]] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
            except ValueError:
                continue  # a line cut by the kill
            if "started" in entry:
                started.add(entry["started"])
            elif "finished" in entry:
                finished.setdefault(entry["finished"], set()).add((entry["status"], entry["state"]))
    return {"started": started, "finished": finished}


def plans_for(
    points: list[str],
    baselines: dict[str, list[Counter[str]]],
    *,
    quick: bool,
    parking: list[str] | None = None,
) -> list[Plan]:
    """The plans of the matrix from the baseline runs' traces (what each scenario
    reaches in its run process and in its recover processes).

    ``parking`` (:func:`parking_points` of the application's machines) are the first
    kills of the two-kill plans: for points only a recovery reaches, a kill that leads
    to one (an ``at_most_once`` effect parks the execution; the operator's resolution
    follows); and for every ``at_most_once`` effect of the spec's machine, a second
    kill during the attempt an operator's ``retry`` started (before it, and after its
    work returned), which must park the execution again, never run it a third time.
    """
    plans: list[Plan] = []
    covered: set[str] = set()
    order = list(baselines)
    if quick:  # each point once, spread over the scenarios that reach it
        load: Counter[str] = Counter()
        for point in points:
            reaching = [s for s in order if baselines[s][0].get(point)]
            if not reaching:
                continue
            chosen = min(reaching, key=lambda s: (load[s], order.index(s)))
            load[chosen] += 1
            covered.add(point)
            plans.append(Plan(chosen, (point,)))
    else:
        for scenario, traces in baselines.items():
            for point in points:
                hits = traces[0].get(point, 0)
                if hits:
                    covered.add(point)
                for nth in range(1, min(hits, NTH_CAP) + 1):
                    plans.append(Plan(scenario, (point if nth == 1 else f"{point}@{nth}",)))
    reached_in_run = {p for traces in baselines.values() for p in traces[0]}
    parking = [p for p in parking or () if p in reached_in_run]
    # a second kill during an operator's retry of an at_most_once effect
    for point in parking:
        if point not in points:
            continue
        scenario = next(s for s, traces in baselines.items() if traces[0].get(point))
        hook = point.split(":")[1]
        for second in (point, f"offload:{hook}:after"):
            plans.append(Plan(scenario, (point, second)))
    # points only a recovery reaches: kill the run at a point that leads to recovery,
    # then at that point in the first recover process
    recovery_only = [p for p in points if p not in covered]
    if recovery_only:
        leaders = (
            parking
            or [p for p in points if p.startswith("effect:")]
            or [p for p in points if p in covered]
        )
        for point in recovery_only:
            for scenario, traces in baselines.items():
                reached = [leader for leader in leaders if traces[0].get(leader)]
                for leader in reached[: 1 if quick else len(reached)]:
                    plans.append(Plan(scenario, (leader, point)))
                if quick and reached:
                    break
    return plans


def matrix(
    spec: Path | Sequence[Path],
    app: str,
    *,
    quick: bool,
    jobs: int,
    keep: Path | None,
    postgres: str | None = None,
    checks: Checks | None = None,
    engine_barriers: Sequence[str] = ENGINE_BARRIERS,
    scenarios: Sequence[str] | None = None,
    plans: Sequence[Plan] | None = None,
) -> dict[str, Any]:
    """Run the whole matrix; return the JSON report.

    Args:
        spec: the spec — or specs: an application of several machines (the agent's
            session and tool call) — whose crash points are killed; ``app`` must
            register a machine generated from each.
        app: the application factory, ``MODULE:FACTORY``.
        quick / jobs / keep: the quick form, runs in parallel, where to copy the
            folder of each failing run.
        postgres: an admin DSN: every run gets a database of its own on that server
            instead of a SQLite file.
        checks: the application's own invariants, checked after each run.
        engine_barriers: the engine commits whose points are killed (``@cancel`` too
            for an application that cancels).
        scenarios: only these scenarios (default: every one of the application).
        plans: run only these plans (after their scenarios' baselines), e.g. a failing
            run's label to reproduce it.

    The report: ``machine``, ``mode``, ``points`` (how many), ``points_reached``,
    ``points_killed``, ``points_never_reached``, ``scenarios``, ``runs``, ``kills``,
    ``per_point`` (runs aiming at each point and kills there), ``seconds``,
    ``invariants`` (each count) and ``failures`` (the plans with a finding).
    """

    def db_for(label: str) -> str | None:
        if postgres is None:
            return None
        from phronomy_fsm.store.postgres.server import create_database

        return create_database(postgres, f"crash_{os.getpid()}_{label}")

    from phronomy_fsm.durable.app import load_app

    specs = [spec] if isinstance(spec, Path) else list(spec)
    invariants = INVARIANTS + (checks.invariants if checks is not None else ())
    base = Path(tempfile.mkdtemp(prefix="phronomy-durable-crash-"))
    try:
        loaded = load_app(app, str(base / "probe.db"))
        machines = []
        for path in specs:
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            machine = next((m for m in loaded.machines if m.table.spec_sha256 == digest), None)
            if machine is None:
                raise SystemExit(
                    f"--app {app} registers no machine generated from {path} (sha256 "
                    f"{digest[:12]}...); regenerate the app's tables from this spec"
                )
            machines.append(machine)
        points: list[str] = []
        for machine in machines:
            points += [p for p in crash_points(machine.table, engine_barriers) if p not in points]
        names = sorted(scenarios if scenarios is not None else loaded.scenarios)
        unknown = sorted(set(names) - set(loaded.scenarios))
        if unknown:
            raise SystemExit(f"unknown scenario(s) {unknown}; known: {sorted(loaded.scenarios)}")
        started = time.monotonic()
        baselines: dict[str, list[Counter[str]]] = {}
        results = []
        for name in names if plans is None else sorted({p.scenario for p in plans}):
            outcome = run_plan(
                app, Plan(name), base / f"baseline-{name}", db_for(f"b_{name}"), checks
            )
            results.append(outcome)
            baselines[name] = [
                _read_trace(base / f"baseline-{name}" / f"trace-{i}.txt")
                for i in range(len(outcome["codes"]))
            ]
        if plans is None:
            parking = parking_points(
                [m.table for m in machines]
                + [m.table for m in loaded.machines if m not in machines]
            )
            plans = plans_for(points, baselines, quick=quick, parking=parking)

        def one(indexed: tuple[int, Plan]) -> dict[str, Any]:
            i, plan = indexed
            return run_plan(app, plan, base / f"run-{i:04d}", db_for(f"r{i:04d}"), checks)

        with ThreadPoolExecutor(max_workers=jobs) as pool:
            results += list(pool.map(one, enumerate(plans)))
        report = _report(
            machines, points, names, results, invariants, quick, keep, time.monotonic() - started
        )
        return {"spec": str(spec) if isinstance(spec, Path) else [str(p) for p in specs], **report}
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _bare(point: str) -> str:
    """``point@N`` → ``point``."""
    name, _, nth = point.rpartition("@")
    return name if name and nth.isdigit() else point


def _report(
    machines: list[Any],
    points: list[str],
    scenarios: list[str],
    results: list[dict[str, Any]],
    invariants: tuple[str, ...],
    quick: bool,
    keep: Path | None,
    elapsed: float,
) -> dict[str, Any]:
    """The JSON report of :func:`matrix` (its docstring), failing runs copied to ``keep``."""
    reached_any: set[str] = set()
    killed_at: set[str] = set()
    per_point = {p: {"runs": 0, "kills": 0} for p in points}
    for outcome in results:
        for reached in outcome["reached"]:
            reached_any |= set(reached)
        crashes = outcome["plan"].split(":", 1)[1].split(",")
        for crash in {_bare(c) for c in crashes if c not in ("", "-")}:
            if crash in per_point:
                per_point[crash]["runs"] += 1
        for crash, code in zip(crashes, outcome["codes"]):
            if code == -signal.SIGKILL and crash != "-":
                killed_at.add(_bare(crash))
                if _bare(crash) in per_point:
                    per_point[_bare(crash)]["kills"] += 1
    totals = dict.fromkeys(invariants, 0)
    failures = []
    for outcome in results:
        bad = {k: v for k, v in outcome["findings"].items() if v}
        for k, v in outcome["findings"].items():
            totals[k] = totals.get(k, 0) + v
        if bad:
            failures.append({"plan": outcome["plan"], "findings": bad, "codes": outcome["codes"]})
            if keep is not None:
                target = keep / outcome["plan"].replace(":", "_").replace(",", "+")
                shutil.copytree(outcome["folder"], target, dirs_exist_ok=True)
    return {
        "machine": "+".join(m.table.machine for m in machines),
        "mode": "quick" if quick else "full",
        "points": len(points),
        "points_reached": sorted(p for p in points if p in reached_any),
        "points_killed": sorted(p for p in points if p in killed_at),
        "points_never_reached": sorted(p for p in points if p not in reached_any),
        "scenarios": scenarios,
        "runs": len(results),
        "kills": sum(o["killed"] for o in results),
        "per_point": per_point,
        "seconds": round(elapsed, 1),
        "invariants": totals,
        "failures": failures,
    }


def parse_plan(label: str) -> Plan:
    """The :class:`Plan` of a label as :meth:`Plan.label` writes it
    (``scenario:point,point``; ``-`` for an unarmed process)."""
    scenario, _, crashes = label.partition(":")
    return Plan(scenario, tuple(None if c == "-" else c for c in crashes.split(",") if c))


def render_markdown(report: dict[str, Any]) -> str:
    """The report's ``per_point`` table as Markdown (for ``docs/operations.md``)."""
    lines = ["| crash point | runs | kills |", "|---|---:|---:|"]
    for point, row in report["per_point"].items():
        lines.append(f"| `{point}` | {row['runs']} | {row['kills']} |")
    return "\n".join(lines)


def main(argv: Iterable[str] | None = None) -> int:
    """The command line (module docstring). Exit 0 when every invariant is 0."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command")
    child = sub.add_parser("child")
    child.add_argument("mode", choices=("run", "recover"))
    child.add_argument("--app", required=True)
    child.add_argument("--db", required=True, help="a SQLite file or a postgresql:// DSN")
    child.add_argument("--dir", help="the run's folder (acks; default: the db's folder)")
    child.add_argument("--scenario", required=True)
    child.add_argument("--crash-at")
    child.add_argument("--trace")
    child.add_argument("--drive-seconds", type=float, default=DRIVE_SECONDS)
    grid = sub.add_parser("matrix")
    grid.add_argument("--spec", required=True, type=Path)
    grid.add_argument("--app", required=True)
    grid.add_argument("--quick", action="store_true")
    grid.add_argument("--json", action="store_true")
    grid.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2)))
    grid.add_argument("--keep-failures", type=Path)
    grid.add_argument(
        "--postgres", help="an admin DSN: run every plan on a PostgreSQL database of its own"
    )
    args = parser.parse_args(list(argv) if argv is not None else None)
    if args.command == "child":
        return _child(args)
    if args.command != "matrix":
        parser.print_usage()
        return 2
    report = matrix(
        args.spec,
        args.app,
        quick=args.quick,
        jobs=args.jobs,
        keep=args.keep_failures,
        postgres=args.postgres,
    )
    print(json.dumps(report, indent=2) if args.json else render_summary(report))
    return 0 if not any(report["invariants"].values()) else 1


def render_summary(report: dict[str, Any]) -> str:
    """The report for a person: the figures, each invariant count, each failing plan."""
    killed = f"{len(report['points_killed'])}/{report['points']}"
    lines = [
        f"{report['machine']}: {report['runs']} runs, {report['kills']} kills, "
        + f"{killed} points killed in {report['seconds']} s"
    ]
    lines += [f"  {name}: {count}" for name, count in report["invariants"].items()]
    if report["points_never_reached"]:
        lines.append(f"  never reached: {', '.join(report['points_never_reached'])}")
    lines += [
        f"  FAILED {f['plan']}: {f['findings']} (exit codes {f['codes']})"
        for f in report["failures"]
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
