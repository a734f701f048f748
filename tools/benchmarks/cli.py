"""cli: start-up time of `phronomy-fsm --help` and `executions list` beside `python -c pass`.

Each round runs, one after the other in fresh processes, ``python -c pass`` (the
interpreter's own start-up, the floor), ``phronomy-fsm --help`` and ``phronomy-fsm
executions list --db STORE`` on a small store (the demo's: one agent execution waiting
for an approval and its finished tool call, made once before the rounds), and times
each from ``fork`` to exit (wall clock). After one warm-up round (which also writes the
``.pyc`` files) it reports the median of ``--runs`` rounds of each, how much each CLI
command takes over bare Python, and its ratio to it. The targets (issue 23, item 6;
``docs/performance.md``, "CLI start-up") are at most 0.3 s for ``--help`` and at most
0.6 s for ``executions list`` on the project's machine.

``--baseline-src DIR`` also measures the same two commands with another source tree
first on ``PYTHONPATH`` (for example ``git archive main src | tar -x -C DIR``), in the
same rounds, interleaved: a before/after in one run.

Prints ``{"python_seconds": P, "help_seconds": H, "list_seconds": L,
"help_over_python_seconds": H - P, "help_vs_python": H / P, ...}``. Nothing here
asserts a time.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import bench_folder

#: Issue 23, item 6: on the project's machine (2 shared vCPUs).
HELP_TARGET_SECONDS = 0.3
LIST_TARGET_SECONDS = 0.6


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--runs N`` (default 11) and ``--baseline-src DIR``."""
    parser.add_argument("--runs", type=int, default=11, help="rounds (median reported)")
    parser.add_argument(
        "--baseline-src",
        default=None,
        help="a source tree (the folder holding phronomy_fsm/) measured beside this one",
    )


def _cli() -> list[str]:
    """The ``phronomy-fsm`` console script of this interpreter (what a user runs), or
    ``python -m phronomy_fsm.cli`` when it is not installed beside it."""
    script = Path(sys.executable).parent / "phronomy-fsm"
    if script.exists():
        return [str(script)]
    found = shutil.which("phronomy-fsm")
    return [found] if found else [sys.executable, "-m", "phronomy_fsm.cli"]


def _timed(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(
        argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False
    )
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{argv} exited {done.returncode}: {done.stderr.decode()[-2000:]}")
    return elapsed


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Make the demo store, then time the commands round by round (see the module
    docstring)."""
    cli = _cli()
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    baseline_env = None
    if args.baseline_src:
        baseline_env = dict(env, PYTHONPATH=str(Path(args.baseline_src).resolve()))
    with bench_folder(".phronomy-cli-bench-") as folder:
        db = str(Path(folder) / "demo.db")
        subprocess.run([*cli, "demo", "--db", db], env=env, stdout=subprocess.DEVNULL, check=True)
        cases: dict[str, tuple[list[str], dict[str, str]]] = {
            "python": ([sys.executable, "-c", "pass"], env),
            "help": ([*cli, "--help"], env),
            "list": ([*cli, "executions", "list", "--db", db], env),
        }
        if baseline_env is not None:
            cases["baseline_help"] = ([*cli, "--help"], baseline_env)
            cases["baseline_list"] = ([*cli, "executions", "list", "--db", db], baseline_env)
        for argv, case_env in cases.values():  # warm-up: .pyc files, page cache
            _timed(argv, case_env)
        times: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(args.runs):
            for name, (argv, case_env) in cases.items():
                times[name].append(_timed(argv, case_env))
    medians = {name: statistics.median(values) for name, values in times.items()}
    python = medians["python"]
    result: dict[str, Any] = {
        "runs": args.runs,
        "command": cli,
        "python_seconds": round(python, 4),
        "targets_seconds": {"help": HELP_TARGET_SECONDS, "list": LIST_TARGET_SECONDS},
    }
    for name in cases:
        if name == "python":
            continue
        result[f"{name}_seconds"] = round(medians[name], 4)
        result[f"{name}_over_python_seconds"] = round(medians[name] - python, 4)
        result[f"{name}_vs_python"] = round(medians[name] / python, 2)
        result[f"{name}_min_max_seconds"] = [round(min(times[name]), 4), round(max(times[name]), 4)]
    for name in ("help", "list"):
        if f"baseline_{name}" in medians:
            result[f"{name}_speedup_vs_baseline"] = round(
                medians[f"baseline_{name}"] / medians[name], 2
            )
    return result
