"""Run a check: baselines, then every planned interleaving, each in fresh processes.

Owns the processes of a check (``docs/operations.md``, "The interleaving checker").
:func:`check_app` finds the spec's machine in the application, runs each scenario once
undisturbed (its baseline: what it reaches, which signals a person sends in it — the
signal alphabet), plans the interleavings (:mod:`phronomy_fsm.checking.plans`) and runs
them, ``jobs`` at a time. One interleaving is run in a folder of its own, on a SQLite
store there: a process per step (:mod:`phronomy_fsm.checking.child`: the run, then
recovers), more recovers until the executions rest, then the invariants
(:mod:`phronomy_fsm.checking.invariants`). A takeover step needs two processes at
once: the runner waits until the first one paused itself at the step's point, lets its
lease pass, starts a second that claims its executions, and resumes the first while the
second runs.

Must not: print or exit (the CLI formats the :class:`CheckReport` and chooses the exit
status).
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import attrs

from phronomy_fsm.checking.interleavings import (
    Action,
    Interleaving,
    Step,
    crash_points,
    max_timeout_seconds,
    parking_points,
    parse_interleaving,
)
from phronomy_fsm.checking.invariants import INVARIANTS, Violation, check_run, load_run_app
from phronomy_fsm.checking.plans import QUICK, Baseline, Budget, plan_interleavings
from phronomy_fsm.checking.runfiles import ALPHABET, BLOCKED, output_path, read_log, read_trace
from phronomy_fsm.durable.app import DurableApp
from phronomy_fsm.errors import ConfigurationError

#: Most recover processes after the last step.
EXTRA_RECOVERS = 4
#: Longest one process may run.
PROCESS_TIMEOUT_SECONDS = 90
#: The lease of the processes of a run (a takeover's: :data:`TAKEOVER_LEASE_SECONDS`).
LEASE_SECONDS = 5.0
TAKEOVER_LEASE_SECONDS = 2.0
#: How long past the lease the runner keeps a paused process stopped.
LEASE_MARGIN_SECONDS = 0.5
#: Longest the runner lets the process that took over act before it resumes the
#: paused one.
TAKEOVER_HEAD_START_SECONDS = 2.0
#: Exit status the runner gives a process that ran out of time.
TIMED_OUT = -999


@attrs.frozen
class CheckOptions:
    """How to check (see :func:`check_app`).

    Args:
        full: every interleaving the plans name, instead of the quick form's sample.
        seed: the quick form's sample (:func:`phronomy_fsm.checking.plans.plan_interleavings`).
        jobs: interleavings run at once.
        budget: the quick form's sample size per kind of step.
        only: run these interleavings (labels, :meth:`Interleaving.label`) after the
            baselines, instead of the planned ones: a violation's replay.
        keep: copy the folder of each run with a violation here.
        cwd: where the application is imported from (default: the working directory).
        drive_seconds: longest one process drives its executions.
    """

    full: bool = False
    seed: int = 1
    jobs: int = 2
    budget: Budget = QUICK
    only: tuple[str, ...] = ()
    keep: Path | None = None
    cwd: Path | None = None
    drive_seconds: float = 20.0


@attrs.frozen
class RunResult:
    """One interleaving as it ran: the exit status of each process, whether its steps
    fired, the points its processes reached and what broke."""

    label: str
    kind: str
    codes: tuple[int, ...]
    fired: int
    steps: int
    reached: frozenset[str]
    violations: tuple[Violation, ...]
    folder: str


@attrs.frozen
class CheckReport:
    """What a check found (:meth:`to_dict` is the ``--json`` form).

    ``interleavings`` counts the runs (baselines included), ``by_kind`` them by their
    first step's action, ``fired`` the runs whose every step fired (a step at a point
    its process did not reach does nothing), ``invariants`` the violations of each
    invariant, ``violations`` each with its interleaving and the command replaying it.
    """

    spec: str
    app: str
    machine: str
    mode: str
    seed: int
    points: tuple[str, ...]
    points_reached: tuple[str, ...]
    signals: tuple[str, ...]
    interleavings: int
    by_kind: dict[str, int]
    fired: dict[str, int]
    seconds: float
    invariants: dict[str, int]
    violations: tuple[dict[str, Any], ...]

    @property
    def is_clean(self) -> bool:
        """True when no invariant was broken."""
        return not any(self.invariants.values())

    @property
    def points_never_reached(self) -> tuple[str, ...]:
        """Crash points of the spec no run reached."""
        return tuple(p for p in self.points if p not in self.points_reached)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form."""
        return {
            "spec": self.spec,
            "app": self.app,
            "machine": self.machine,
            "mode": self.mode,
            "seed": self.seed,
            "points": len(self.points),
            "points_reached": list(self.points_reached),
            "points_never_reached": list(self.points_never_reached),
            "signals": list(self.signals),
            "interleavings": self.interleavings,
            "by_kind": self.by_kind,
            "fired": self.fired,
            "seconds": self.seconds,
            "invariants": self.invariants,
            "violations": list(self.violations),
        }


@attrs.frozen
class _Context:
    spec: Path
    app: str
    cwd: Path
    alphabet: dict[str, dict[str, Any]]
    drive_seconds: float


def find_machine(app: DurableApp, spec: Path) -> Any:
    """The machine of ``app`` generated from ``spec`` (by the spec's sha256).

    Raises:
        ConfigurationError: the application registers none.
    """
    digest = hashlib.sha256(spec.read_bytes()).hexdigest()
    machine = next((m for m in app.machines if m.table.spec_sha256 == digest), None)
    if machine is None:
        raise ConfigurationError(
            f"the application registers no machine generated from {spec} (sha256 "
            f"{digest[:12]}...): regenerate its table from this spec"
        )
    return machine


def replay_command(spec: Path, app: str, label: str) -> str:
    """The command that runs one interleaving again."""
    return shlex.join(["phronomy-fsm", "check", str(spec), "--app", app, "--only", label])


def check_app(
    spec: Path,
    app: str,
    options: CheckOptions = CheckOptions(),
    *,
    progress: Callable[[int, int], None] | None = None,
) -> CheckReport:
    """Check the application ``app`` (``MODULE:FACTORY``) on the machine generated
    from ``spec`` (module docstring).

    Args:
        spec: the spec file; the application must register a machine generated from it.
        app: the application factory, imported with ``options.cwd`` (default: the
            working directory) first on the path.
        options: quick or full, the sample's seed, runs at once, ``only`` these
            interleaving labels (to replay one), where to copy failing runs' folders.
        progress: called with (runs done, runs planned) after each run.

    Returns:
        The :class:`CheckReport`.

    Raises:
        ConfigurationError: the application cannot be loaded, registers no machine
            from ``spec``, or ``only`` names an unknown scenario or a malformed label.
    """
    cwd = (options.cwd or Path.cwd()).resolve()
    shown = spec  # as given: the replay commands run from the same folder
    spec = spec if spec.is_absolute() else cwd / spec
    started = time.monotonic()
    base = Path(tempfile.mkdtemp(prefix="phronomy-check-"))
    try:
        loaded = load_run_app(app, str(base / "probe.db"))
        machine = find_machine(loaded, spec)
        points = crash_points(machine.table)
        try:
            only = [parse_interleaving(label) for label in options.only]
        except ValueError as exc:
            raise ConfigurationError(f"--only: {exc}") from exc
        unknown = sorted({i.scenario for i in only} - set(loaded.scenarios))
        if unknown or not loaded.scenarios:
            raise ConfigurationError(
                f"unknown scenario(s) {unknown}; the application has {sorted(loaded.scenarios)}"
                if unknown
                else f"--app {app} declares no scenarios (DurableApp.scenarios) to check"
            )
        names = sorted(loaded.scenarios)
        context = _Context(spec, app, cwd, {}, options.drive_seconds)
        results = [
            run_interleaving(context, Interleaving(name), base / f"baseline-{name}")
            for name in names
        ]
        alphabet = signal_alphabet(loaded, [Path(r.folder) for r in results])
        context = attrs.evolve(context, alphabet=alphabet)
        baselines = [
            Baseline(r.label.split(":")[0], read_trace(Path(r.folder), 0)) for r in results
        ]
        plans = only or plan_interleavings(
            points,
            baselines,
            sorted(alphabet),
            parking=parking_points([m.table for m in loaded.machines]),
            full=options.full,
            budget=options.budget,
            has_timers=max_timeout_seconds(m.table for m in loaded.machines) > 0,
            seed=options.seed,
        )
        done = len(results)
        total = done + len(plans)

        def one(indexed: tuple[int, Interleaving]) -> RunResult:
            nonlocal done
            i, plan = indexed
            result = run_interleaving(context, plan, base / f"run-{i:04d}")
            done += 1
            if progress is not None:
                progress(done, total)
            return result

        with ThreadPoolExecutor(max_workers=max(1, options.jobs)) as pool:
            results += list(pool.map(one, enumerate(plans)))
        if options.keep is not None:
            for r in results:
                if r.violations:
                    target = options.keep / _folder_name(r.label)
                    shutil.copytree(r.folder, target, dirs_exist_ok=True)
        return _report(
            shown,
            app,
            machine.table.machine,
            options,
            points,
            sorted(alphabet),
            results,
            round(time.monotonic() - started, 1),
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _folder_name(label: str) -> str:
    return "".join(c if c.isalnum() or c in "-_.@#" else "_" for c in label)[:200]


def signal_alphabet(app: DurableApp, baselines: Sequence[Path]) -> dict[str, dict[str, Any]]:
    """The signals a check may send, by name (``event``, or ``event#k`` when one event
    comes with several payloads): every answer a person gave in a baseline and every
    signal a scenario declares (``Scenario.signals``)."""
    found: set[tuple[str, str]] = set()
    for folder in baselines:
        for entry in read_log(folder):
            if entry["what"] == "sent" and entry.get("by") == "answer":
                found.add((entry["event"], json.dumps(entry.get("payload"), sort_keys=True)))
    for scenario in app.scenarios.values():
        for answer in scenario.signals:
            if answer.event is not None:
                found.add((answer.event, json.dumps(answer.payload, sort_keys=True)))
    by_event: dict[str, list[str]] = {}
    for event, payload in sorted(found):
        by_event.setdefault(event, []).append(payload)
    out = {}
    for event, payloads in by_event.items():
        for k, payload in enumerate(payloads):
            name = event if k == 0 else f"{event}#{k}"
            out[name] = {"event": event, "payload": json.loads(payload)}
    return out


def run_interleaving(context: _Context, plan: Interleaving, folder: Path) -> RunResult:
    """Run ``plan`` in ``folder`` (module docstring) and check it."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / ALPHABET).write_text(json.dumps(context.alphabet))
    db = str(folder / "store.db")
    steps: list[Step | None] = list(plan.steps) or [None]
    lease = (
        TAKEOVER_LEASE_SECONDS
        if any(s is not None and s.action is Action.TAKEOVER for s in steps)
        else LEASE_SECONDS
    )
    codes: list[int] = []
    process = 0
    for i, step in enumerate(steps):
        mode = "run" if i == 0 else "recover"
        if step is not None and step.action is Action.TAKEOVER:
            codes += _takeover(context, plan.scenario, folder, db, mode, step, process, lease)
            process += 2
        else:
            codes.append(_child(context, plan.scenario, folder, db, mode, step, process, lease))
            process += 1
    extra = 0
    while codes[-1] != 0 and extra < EXTRA_RECOVERS:
        codes.append(_child(context, plan.scenario, folder, db, "recover", None, process, lease))
        process += 1
        extra += 1
    violations = check_run(context.app, db, folder)
    expected = {0, 3, BLOCKED, -signal.SIGKILL}
    violations += [
        Violation("app_errors", None, f"process {i} exited {code} (see process-{i}.log)")
        for i, code in enumerate(codes)
        if code not in expected
    ]
    fired = _fired(read_log(folder), steps, codes)
    reached: set[str] = set()
    for i in range(process):
        reached |= set(read_trace(folder, i))
    return RunResult(
        plan.label(),
        plan.kind,
        tuple(codes),
        fired,
        sum(1 for s in steps if s is not None),
        frozenset(reached),
        tuple(violations),
        str(folder),
    )


def _fired(log: list[dict[str, Any]], steps: Sequence[Step | None], codes: list[int]) -> int:
    """How many of the steps did something: a kill killed its process, a takeover's
    second process claimed executions, any other step reached its point."""
    kills = sum(
        1
        for i, step in enumerate(steps)
        if step is not None and step.action is Action.KILL and codes[i : i + 1] == [-signal.SIGKILL]
    )
    takeovers = sum(1 for e in log if e["what"] == "claimed" and e.get("executions"))
    others = sum(
        1 for e in log if e["what"] == "injected" and not e["step"].startswith("takeover=")
    )
    return kills + takeovers + others


def _command(  # run from context.cwd: ``python -m`` puts it first on sys.path
    context: _Context,
    scenario: str,
    folder: Path,
    db: str,
    mode: str,
    step: Step | None,
    process: int,
    lease: float,
) -> list[str]:
    cmd = [sys.executable, "-m", "phronomy_fsm.checking.child", mode, "--app", context.app]
    cmd += ["--db", db, "--dir", str(folder), "--scenario", scenario]
    cmd += ["--process", str(process), "--lease-seconds", str(lease)]
    cmd += ["--drive-seconds", str(context.drive_seconds)]
    if step is not None:
        cmd += ["--step", step.label()]
    return cmd


def _child(
    context: _Context,
    scenario: str,
    folder: Path,
    db: str,
    mode: str,
    step: Step | None,
    process: int,
    lease: float,
) -> int:
    cmd = _command(context, scenario, folder, db, mode, step, process, lease)
    with open(output_path(folder, process), "ab") as out:
        try:
            proc = subprocess.run(
                cmd,
                check=False,
                cwd=context.cwd,
                stdout=out,
                stderr=out,
                timeout=PROCESS_TIMEOUT_SECONDS,
            )
        except subprocess.TimeoutExpired:
            return TIMED_OUT
    return proc.returncode


def _acted_after_claim(folder: Path, process: int) -> bool:
    """True once ``process`` logged something after it claimed executions (a
    question, an effect's start, a finish, a signal sent)."""
    claimed = False
    for entry in read_log(folder):
        if entry.get("process") != process:
            continue
        if entry["what"] == "claimed":
            claimed = True
        elif claimed and entry["what"] in ("effect_started", "finished", "sent"):
            return True
    return False


def _logged(folder: Path, what: str, process: int) -> bool:
    return any(e["what"] == what and e.get("process") == process for e in read_log(folder))


def _takeover(
    context: _Context,
    scenario: str,
    folder: Path,
    db: str,
    mode: str,
    step: Step,
    process: int,
    lease: float,
) -> list[int]:
    """Process ``process`` pauses at ``step``'s point; once its lease passed, process
    ``process + 1`` claims its executions; then the first is resumed (module
    docstring). Returns both exit statuses."""
    outputs = [open(output_path(folder, n), "ab") for n in (process, process + 1)]  # noqa: SIM115
    first = second = None
    try:
        first = subprocess.Popen(
            _command(context, scenario, folder, db, mode, step, process, lease),
            cwd=context.cwd,
            stdout=outputs[0],
            stderr=outputs[0],
        )
        deadline = time.monotonic() + PROCESS_TIMEOUT_SECONDS
        while first.poll() is None and time.monotonic() < deadline:
            if _logged(folder, "paused", process):
                break
            time.sleep(0.02)
        if first.poll() is not None or not _logged(folder, "paused", process):
            return [_wait(first)]  # the point was never reached: nothing to take over
        time.sleep(lease + LEASE_MARGIN_SECONDS)  # its lease passes (store clock)
        second = subprocess.Popen(
            _command(context, scenario, folder, db, "takeover", None, process + 1, lease),
            cwd=context.cwd,
            stdout=outputs[1],
            stderr=outputs[1],
        )
        deadline = time.monotonic() + 30
        while second.poll() is None and time.monotonic() < deadline:
            if _logged(folder, "claimed", process + 1) or _logged(folder, "blocked", process + 1):
                break
            time.sleep(0.02)
        # let the new owner act first (park, ask, retry, run), so whatever the paused one
        # still does on resuming comes late: the order that exposes a zombie worker
        deadline = time.monotonic() + TAKEOVER_HEAD_START_SECONDS
        while second.poll() is None and time.monotonic() < deadline:
            if _acted_after_claim(folder, process + 1):
                break
            time.sleep(0.02)
    finally:
        if first is not None and first.poll() is None:
            os.kill(first.pid, signal.SIGCONT)
    try:
        return [_wait(first), _wait(second)]
    finally:
        for out in outputs:
            out.close()


def _wait(proc: subprocess.Popen[bytes] | None) -> int:
    if proc is None:
        return 0
    try:
        return proc.wait(timeout=PROCESS_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return TIMED_OUT


def _report(
    spec: Path,
    app: str,
    machine: str,
    options: CheckOptions,
    points: list[str],
    signals: list[str],
    results: list[RunResult],
    seconds: float,
) -> CheckReport:
    reached: set[str] = set()
    for r in results:
        reached |= r.reached
    totals = dict.fromkeys(INVARIANTS, 0)
    violations = []
    for r in results:
        for v in r.violations:
            totals[v.invariant] = totals.get(v.invariant, 0) + 1
            violations.append(
                {
                    **v.to_dict(),
                    "interleaving": r.label,
                    "replay": replay_command(spec, app, r.label),
                }
            )
    by_kind = Counter(r.kind for r in results)
    fired = Counter(r.kind for r in results if r.steps and r.fired >= r.steps)
    return CheckReport(
        spec=str(spec),
        app=app,
        machine=machine,
        mode="replay" if options.only else ("full" if options.full else "quick"),
        seed=options.seed,
        points=tuple(points),
        points_reached=tuple(p for p in points if p in reached),
        signals=tuple(signals),
        interleavings=len(results),
        by_kind=dict(sorted(by_kind.items())),
        fired=dict(sorted(fired.items())),
        seconds=seconds,
        invariants=totals,
        violations=tuple(violations),
    )


__all__ = [
    "CheckOptions",
    "CheckReport",
    "RunResult",
    "check_app",
    "find_machine",
    "replay_command",
    "run_interleaving",
    "signal_alphabet",
]
