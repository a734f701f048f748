"""The crash-injection matrix (issue 6 item 5).

Runs ``tools/crash_app.py`` in subprocesses and kills them with SIGKILL at every crash
point — before, during and after each barrier commit, and right after each offloaded
piece of work (an LLM call, a tool side effect, a filter, an authorization) — then
restarts with ``crash_app.py recover`` until nothing is left to drive, and checks the
invariants of :mod:`crash_checks` on the store and the app's logs.

Crash points come from the generated tables (every module of
``phronomy_fsm.generated``: ``TABLE.barriers`` and ``TABLE.offload_hooks`` through
``faults.points_for``), so a barrier or offload hook added to a spec is covered
without editing this file.

A *run* is one scenario with a *crash plan*: one armed point (or none) per process —
the ``run`` process first, then the ``recover`` processes — so points reached only
while recovering (the resolution barrier) are hit by arming them in the first recover
process after a crash that leads there. Every process records the points it reached
(``PHRONOMY_CRASH_TRACE``), which is how the harness tells *killed* from *never
reached*, and a ``during`` point that is reached by no run while its ``before`` point is
as *not wired*.

Modes:

- default (full): every scenario x every point (and its 2nd..4th hit when a scenario
  passes it several times), plus two-crash plans for every point only a recovery
  reaches;
- ``--quick``: one baseline run per scenario, then every point once with a scenario
  that reaches it (and a two-crash plan for recovery-only points): covers every
  reachable point, a few minutes on two cores.

Usage::

    python tools/crash_matrix.py [--json | --markdown] [--quick] [--jobs N] [--keep-failures DIR]
                                 [--scenario NAME ...] [--plan SCENARIO:POINT[,POINT] ...]
    python tools/crash_matrix.py --spec SPEC --app MODULE:FACTORY [--quick] [--json]
                                 [--jobs N] [--keep-failures DIR]

With ``--spec`` and ``--app`` the matrix runs on any durable machine instead of the
agent: it delegates to :mod:`durable_crash` (``tools/durable_crash.py``), which kills an
application built by ``MODULE:FACTORY`` (a :class:`~phronomy_fsm.durable.app.DurableApp`
factory) at every crash point of the machine generated from ``SPEC`` and checks its
invariants (``docs/operations.md``, "The crash-injection matrix"). The report is that
module's (``points``, ``points_killed``, ``runs``, ``kills``, ``invariants``...).

Exit status: 0 when every invariant holds and every app process ran, 1 otherwise, 2 on
a usage error.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import pkgutil
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import attrs

sys.path.insert(0, str(Path(__file__).resolve().parent))

from crash_app import CRASH_ENV, TRACE_ENV
from crash_checks import EXTRA_CHECKS, INVARIANTS, check_run, snapshot
from crash_scenarios import SCENARIOS

from phronomy_fsm.runtime.faults import points_for

APP = Path(__file__).resolve().parent / "crash_app.py"
#: Most recover processes after the last armed one.
EXTRA_RECOVERS = 3
#: Most hits of one point to target in the full matrix (``point@N``).
NTH_CAP = 4
PROCESS_TIMEOUT_SECONDS = 120


def crash_points() -> list[str]:
    """Every crash point of every generated machine, in table order, without repeats."""
    from phronomy_fsm import generated

    barriers: list[str] = []
    hooks: list[str] = []
    for info in sorted(pkgutil.iter_modules(generated.__path__), key=lambda m: m.name):
        table = getattr(importlib.import_module(f"{generated.__name__}.{info.name}"), "TABLE", None)
        if table is None:
            continue
        barriers += [b for b in table.barriers if b not in barriers]
        hooks += [h for h in table.offload_hooks if h not in hooks]
    return points_for(tuple(barriers), tuple(hooks))


def base_point(spec: str | None) -> str | None:
    """``point@N`` → ``point``."""
    return None if spec is None else spec.partition("@")[0]


@attrs.frozen
class Plan:
    """One run: a scenario and the armed crash point of each process, in order
    (``None``: that process is not armed)."""

    scenario: str
    crashes: tuple[str | None, ...] = ()

    def label(self) -> str:
        """``scenario:point,point`` for messages and folder names."""
        return f"{self.scenario}:" + ",".join(c or "-" for c in self.crashes)


def parse_plan(label: str) -> Plan:
    """The :class:`Plan` of a label as :meth:`Plan.label` writes it
    (``scenario:point,point``; ``-`` for an unarmed process).

    Raises ValueError for an unknown scenario."""
    scenario, _, crashes = label.partition(":")
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown scenario {scenario!r}; known: {', '.join(SCENARIOS)}")
    return Plan(scenario, tuple(None if c == "-" else c for c in crashes.split(",") if c))


def execute(plan: Plan, *, keep_failures: Path | None = None) -> dict[str, Any]:
    """Run one plan in a fresh temporary folder and check it; the folder is removed
    (or moved under ``keep_failures`` when an invariant fails).

    Returns a JSON-ready dict: ``scenario``, ``crashes``, ``stages`` (per process:
    command, armed point, exit code, killed, the points reached), ``killed_points``,
    ``final`` (execution → status at the end), ``operator_actions`` (what the recover
    processes did: resolutions by subject and outcome, handoff targets started), ``counts`` (invariant → number),
    ``violations`` and ``kept`` (the kept folder or None)."""
    folder = Path(tempfile.mkdtemp(prefix="phronomy-crash-"))
    db = folder / "agents.db"
    stages: list[dict[str, Any]] = []
    snapshots: list[dict[str, Any]] = []
    last_summary: dict[str, Any] | None = None
    previous_remaining: Any = None
    actions: list[str] = []
    try:
        for stage in range(len(plan.crashes) + EXTRA_RECOVERS + 1):
            armed = plan.crashes[stage] if stage < len(plan.crashes) else None
            command = ["run", plan.scenario] if stage == 0 else ["recover"]
            record = _run_process(folder, db, stage, command, armed)
            stages.append(record)
            snapshots.append(snapshot(db))
            if record["killed"]:
                continue
            summary = record.pop("summary")
            if summary is not None:
                last_summary = summary
                actions += [
                    f"resolve {r['subject'].get('type')}: {r['outcome']}"
                    for r in summary.get("resolutions", [])
                ]
                actions += ["load handoff target agent"] * len(
                    summary.get("handoff_targets_started", [])
                )
            if summary is not None and summary.get("settled"):
                break
            remaining = None if summary is None else summary.get("remaining")
            if stage >= len(plan.crashes) and stage > 0 and remaining == previous_remaining:
                break  # two unarmed recoveries in a row made no progress
            previous_remaining = remaining
        findings = check_run(db, snapshots=snapshots, last_summary=last_summary)
        for record in stages:
            record.pop("summary", None)
        killed_points = [r["killed_at"] for r in stages if r["killed"]]
        app_errors = [
            {"stage": r["stage"], "returncode": r["returncode"], "stderr_tail": r["stderr_tail"]}
            for r in stages
            if not r["killed"] and r["returncode"] not in (0, 3)
        ]
        result = {
            "scenario": plan.scenario,
            "crashes": list(plan.crashes),
            "stages": stages,
            "killed_points": killed_points,
            "final": {
                eid: row["status"] for eid, row in (snapshots[-1] if snapshots else {}).items()
            },
            "operator_actions": actions,
            "counts": findings.counts,
            "violations": findings.details,
            "app_errors": app_errors,
            "kept": None,
        }
        if (not findings.ok or app_errors) and keep_failures is not None:
            target = keep_failures / plan.label().replace(":", "__").replace(",", "+")
            shutil.rmtree(target, ignore_errors=True)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copytree(folder, target)
            (target / "result.json").write_text(json.dumps(result, indent=2, default=str))
            result["kept"] = str(target)
        return result
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _run_process(
    folder: Path, db: Path, stage: int, command: list[str], armed: str | None
) -> dict[str, Any]:
    trace = folder / f"trace-{stage}.txt"
    env = {k: v for k, v in os.environ.items() if k not in (CRASH_ENV, TRACE_ENV)}
    if armed:  # unarmed processes trace only (the trace file makes the plan)
        env[CRASH_ENV] = armed
    env[TRACE_ENV] = str(trace)
    started = time.monotonic()
    try:
        proc = subprocess.run(
            [sys.executable, str(APP), *command, "--db", str(db)],
            env=env,
            capture_output=True,
            text=True,
            timeout=PROCESS_TIMEOUT_SECONDS,
            check=False,
        )
        returncode, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:
        returncode, stdout, stderr = (
            None,
            exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or ""),
            f"timed out after {PROCESS_TIMEOUT_SECONDS} s",
        )
    reached = trace.read_text("utf-8").splitlines() if trace.exists() else []
    killed = returncode == -signal.SIGKILL
    summary = None
    if not killed and stdout:
        try:
            summary = json.loads(stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            summary = None
    return {
        "stage": stage,
        "command": command[0],
        "armed": armed,
        "returncode": returncode,
        "killed": killed,
        "killed_at": reached[-1] if killed and reached else None,
        "reached": reached,
        "seconds": round(time.monotonic() - started, 2),
        "stderr_tail": stderr[-600:] if (returncode not in (0, -signal.SIGKILL)) else "",
        "summary": summary,
    }


# --------------------------------------------------------------------- planning


def _counts(result: dict[str, Any], stage: int) -> Counter[str]:
    stages = result["stages"]
    return Counter(stages[stage]["reached"]) if stage < len(stages) else Counter()


def _would_reach(reached: Counter[str] | dict[str, int], point: str) -> bool:
    """The trace reached ``point`` — or, for a ``during`` point, its ``before`` point,
    so a run targets it even before the store calls it (it then reports not wired)."""
    return bool(reached.get(point)) or (
        point.endswith(":during") and bool(reached.get(point[: -len("during")] + "before"))
    )


def plan_stage_one(
    points: list[str], scenarios: list[str], baselines: dict[str, dict[str, Any]], *, quick: bool
) -> list[Plan]:
    """Single-crash plans. Quick: each point once, with the scenario reaching it that
    has the fewest plans so far (unreached points: none). Full: every scenario x every
    point, and ``point@N`` for each further hit the baseline saw (up to NTH_CAP)."""
    plans: list[Plan] = []
    if quick:
        load: Counter[str] = Counter()
        for point in points:
            candidates = [s for s in scenarios if _would_reach(_counts(baselines[s], 0), point)]
            if not candidates:
                continue
            chosen = min(candidates, key=lambda s: (load[s], scenarios.index(s)))
            load[chosen] += 1
            plans.append(Plan(chosen, (point,)))
        return plans
    for scenario in scenarios:
        seen = _counts(baselines[scenario], 0)
        for point in points:
            for nth in range(1, max(1, min(seen[point], NTH_CAP)) + 1):
                plans.append(Plan(scenario, (point if nth == 1 else f"{point}@{nth}",)))
    return plans


def plan_stage_two(points: list[str], results: list[dict[str, Any]], *, quick: bool) -> list[Plan]:
    """Two-crash plans: crash first at a single-crash run's point, then again at a
    point that run's recovery process reached, in that process. Full: for points no
    single-crash run killed in the scenario (reached only while recovering), every
    such first point; for the others, one first point per (scenario, point) — a second
    crash while recovering. Quick: one plan per point killed by no run at all."""
    killed_anywhere = {base_point(p) for r in results for p in r["killed_points"]}
    targeted = {base_point(c) for r in results for c in r["crashes"]}
    killed_in: dict[str, set[str]] = defaultdict(set)
    for r in results:
        for p in r["killed_points"]:
            killed_in[r["scenario"]].add(base_point(p) or "")
    plans: list[Plan] = []
    chosen: set[tuple[str, str]] = set()
    second: set[tuple[str, str]] = set()
    for r in results:
        if not r["killed_points"] or len(r["crashes"]) != 1 or not r["stages"][0]["killed"]:
            continue
        for stage in range(1, len(r["stages"])):
            reached = Counter(r["stages"][stage]["reached"])
            for point in points:
                if not (reached[point] or (quick and _would_reach(reached, point))):
                    continue
                if quick and (
                    point in killed_anywhere
                    or any(p == point for _, p in chosen)
                    or (point in targeted and not reached[point])
                ):
                    continue
                if (
                    not quick
                    and point in killed_in[r["scenario"]]
                    and (r["scenario"], point) in second
                ):
                    continue
                second.add((r["scenario"], point))
                if (r["scenario"] + "|" + r["crashes"][0], point) in chosen:
                    continue
                chosen.add((r["scenario"] + "|" + r["crashes"][0], point))
                crashes = (r["crashes"][0],) + (None,) * (stage - 1) + (point,)
                plans.append(Plan(r["scenario"], crashes))
    return plans


def run_plans(
    plans: Iterable[Plan],
    *,
    jobs: int,
    keep_failures: Path | None,
    progress: Callable[[str], None],
) -> list[dict[str, Any]]:
    """Execute plans on a pool of ``jobs`` threads (each drives its subprocesses)."""
    plans = list(plans)
    results: list[dict[str, Any]] = []
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = [pool.submit(execute, p, keep_failures=keep_failures) for p in plans]
        for i, future in enumerate(futures, 1):
            result = future.result()
            results.append(result)
            bad = {k: v for k, v in result["counts"].items() if v}
            progress(
                f"[{i}/{len(plans)}] {plans[i - 1].label()} killed={result['killed_points']} {'VIOLATIONS ' + str(bad) if bad else 'ok'}"
            )
    return results


# ---------------------------------------------------------------------- report


def summarize(
    points: list[str],
    scenarios: list[str],
    results: list[dict[str, Any]],
    *,
    quick: bool,
    elapsed: float,
) -> dict[str, Any]:
    """The matrix report (the ``--json`` output): the counters of the issue, the extra
    checks (``agent_root_inconsistent``), ``app_errors`` (app processes that failed
    otherwise than by the crash point: the run proves nothing; ``app_error_runs``
    lists them), ``killed_runs``, ``not_reached_runs``,
    ``not_wired`` (``during`` points reached by no run while their ``before`` point
    was), ``uncovered`` (other points never killed), ``per_point`` and the first
    violations, and the five ``slowest_processes`` (a hang shows there first).
    ``per_point[p]``: ``runs`` aiming at ``p`` (first or second crash),
    ``killed`` (runs it killed), ``scenarios``, ``violations``, and for the runs
    whose last crash was ``p`` the final ``outcomes`` (status → executions) and the
    ``operator_actions`` recovery took after it."""
    totals = dict.fromkeys(INVARIANTS + EXTRA_CHECKS, 0)
    for r in results:
        for k, v in r["counts"].items():
            totals[k] = totals.get(k, 0) + v
    reached_any = {p for r in results for s in r["stages"] for p in s["reached"]}
    per_point: dict[str, dict[str, Any]] = {}
    for point in points:
        targeting = [r for r in results if any(base_point(c) == point for c in r["crashes"])]
        killed = [r for r in targeting if any(base_point(k) == point for k in r["killed_points"])]
        last = [r for r in killed if base_point(r["crashes"][-1]) == point]
        per_point[point] = {
            "runs": len(targeting),
            "killed": len(killed),
            "scenarios": sorted({r["scenario"] for r in killed}),
            "violations": sum(sum(r["counts"].values()) for r in targeting),
            "outcomes": dict(
                Counter(status for r in last for status in r.get("final", {}).values())
            ),
            "operator_actions": dict(
                Counter(x for r in last for x in r.get("operator_actions", []))
            ),
        }
    not_wired = [
        p
        for p in points
        if p.endswith(":during")
        and p not in reached_any
        and p.replace(":during", ":before") in reached_any
    ]
    uncovered = [p for p in points if per_point[p]["killed"] == 0 and p not in not_wired]
    violations = [
        {
            "scenario": r["scenario"],
            "crashes": r["crashes"],
            "killed_points": r["killed_points"],
            "kept": r["kept"],
            **v,
        }
        for r in results
        for v in r["violations"]
    ]
    return {
        "crash_points": len(points),
        "scenarios": len(scenarios),
        "runs": len(results),
        **totals,
        "mode": "quick" if quick else "full",
        "app_errors": sum(len(r.get("app_errors", [])) for r in results),
        "killed_runs": sum(1 for r in results if r["killed_points"]),
        "not_reached_runs": sum(1 for r in results if r["crashes"] and not r["killed_points"]),
        "baseline_runs": sum(1 for r in results if not r["crashes"]),
        "not_wired": not_wired,
        "uncovered": uncovered,
        "per_point": per_point,
        "violations": violations[:50],
        "app_error_runs": [
            {"run": Plan(r["scenario"], tuple(r["crashes"])).label(), "kept": r["kept"], **e}
            for r in results
            for e in r.get("app_errors", [])
        ][:10],
        "slowest_processes": sorted(
            (
                {
                    "run": Plan(r["scenario"], tuple(r["crashes"])).label(),
                    "stage": st["stage"],
                    "seconds": st["seconds"],
                    "returncode": st["returncode"],
                }
                for r in results
                for st in r["stages"]
            ),
            key=lambda x: -x["seconds"],
        )[:5],
        "elapsed_seconds": round(elapsed, 1),
    }


def render_table(report: dict[str, Any]) -> str:
    """A plain-text table of ``per_point`` and the counters (for humans)."""
    lines = [f"{'crash point':45} {'runs':>5} {'killed':>6} {'viol.':>5}  scenarios killed in"]
    for point, row in report["per_point"].items():
        note = " (not wired)" if point in report["not_wired"] else ""
        lines.append(
            f"{point:45} {row['runs']:>5} {row['killed']:>6} {row['violations']:>5}  {', '.join(row['scenarios'])}{note}"
        )
    lines.append("")
    lines.append(
        ", ".join(
            f"{k}={report[k]}"
            for k in ("crash_points", "scenarios", "runs", *INVARIANTS, *EXTRA_CHECKS)
        )
    )
    return "\n".join(lines)


def render_markdown(report: dict[str, Any]) -> str:
    """The ``per_point`` table as Markdown (for docs/operations.md)."""

    def counted(mapping: dict[str, int]) -> str:
        return (
            ", ".join(f"{k} {v}" for k, v in sorted(mapping.items(), key=lambda kv: -kv[1])) or "-"
        )

    lines = [
        "| crash point | runs | killed | outcomes after recovery (last crash here) | operator actions | violations |",
        "|---|---:|---:|---|---|---:|",
    ]
    for point, row in report["per_point"].items():
        if point in report["not_wired"]:
            lines.append(f"| `{point}` | {row['runs']} | 0 | not wired | - | {row['violations']} |")
            continue
        lines.append(
            f"| `{point}` | {row['runs']} | {row['killed']} | {counted(row['outcomes'])} "
            f"| {counted(row['operator_actions'])} | {row['violations']} |"
        )
    return "\n".join(lines)


def durable_matrix(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """Run :mod:`durable_crash`'s matrix for ``--spec`` and ``--app`` (exit 0 when every
    invariant is 0, 1 otherwise; 2 for options that only the agent's matrix takes or a
    missing ``--spec``/``--app``, after ``parser.error``)."""
    if args.spec is None or args.app is None:
        parser.error("--spec and --app go together")
    if args.scenario or args.plan or args.markdown:
        parser.error("--scenario, --plan and --markdown apply to the agent's matrix, not --spec")
    import durable_crash  # only this mode needs it

    forwarded = ["matrix", "--spec", str(args.spec), "--app", args.app, "--jobs", str(args.jobs)]
    forwarded += ["--quick"] if args.quick else []
    forwarded += ["--json"] if args.json else []
    if args.keep_failures is not None:
        forwarded += ["--keep-failures", str(args.keep_failures)]
    return durable_crash.main(forwarded)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point (see the module docstring)."""
    parser = argparse.ArgumentParser(
        description="Crash-injection matrix over the generated crash points."
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON on stdout")
    parser.add_argument(
        "--markdown",
        action="store_true",
        help="print the per-point table as Markdown (after the JSON with --json)",
    )
    parser.add_argument("--quick", action="store_true", help="cover every crash point once (CI)")
    parser.add_argument("--jobs", type=int, default=2, help="runs in parallel (default 2)")
    parser.add_argument(
        "--keep-failures", type=Path, default=None, help="copy the folder of each failing run here"
    )
    parser.add_argument(
        "--scenario", action="append", choices=sorted(SCENARIOS), help="limit to these scenarios"
    )
    parser.add_argument(
        "--plan",
        action="append",
        metavar="SCENARIO:POINT[,POINT...]",
        help="run only these plans (one armed point per process, '-' for none), e.g. a "
        "failing run's label, to reproduce it",
    )
    parser.add_argument(
        "--spec",
        type=Path,
        help="a durable machine's spec: run its matrix (with --app) instead of the agent's",
    )
    parser.add_argument(
        "--app",
        metavar="MODULE:FACTORY",
        help="with --spec: the DurableApp factory that runs the machine (e.g. "
        "docs.examples.order_workflow:create_app)",
    )
    args = parser.parse_args(argv)
    if args.spec is not None or args.app is not None:
        return durable_matrix(parser, args)
    started = time.monotonic()
    points = crash_points()
    scenarios = args.scenario or list(SCENARIOS)

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    common = {
        "jobs": args.jobs,
        "keep_failures": args.keep_failures,
        "progress": progress,
    }
    if args.plan:
        results = run_plans([parse_plan(label) for label in args.plan], **common)
    else:
        baseline_results = run_plans([Plan(s) for s in scenarios], **common)
        baselines = {r["scenario"]: r for r in baseline_results}
        stage_one = run_plans(
            plan_stage_one(points, scenarios, baselines, quick=args.quick), **common
        )
        stage_two = run_plans(plan_stage_two(points, stage_one, quick=args.quick), **common)
        results = baseline_results + stage_one + stage_two
    report = summarize(
        points,
        scenarios,
        results,
        quick=args.quick,
        elapsed=time.monotonic() - started,
    )
    if args.json:
        print(json.dumps(report, sort_keys=False))
    if args.markdown:
        print(render_markdown(report))
    if not args.json and not args.markdown:
        print(render_table(report))
    return 0 if not any(report[k] for k in (*INVARIANTS, *EXTRA_CHECKS, "app_errors")) else 1


if __name__ == "__main__":
    sys.exit(main())
