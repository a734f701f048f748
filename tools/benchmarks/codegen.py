"""codegen: validate + generate a 1,000-state / 5,000-transition spec; import its module.

Builds a synthetic *valid* spec (auto, external, barrier, offload, timeout and final
states; guarded, unguarded, multi-source and internal rows; every state reachable and
able to finish; compound states two levels deep with rows of their own; barriers in
long form and in shorthand with a fail-closed state) in a temporary folder, then
measures (targets ≤ 1 s and ≤ 0.05 s):

- ``validate_generate_seconds``: :func:`phronomy_fsm.codegen.generate` on the spec file
  into a fresh folder (read, parse, validate, compile, write), median of ``--runs``;
- ``import_seconds``: importing the generated module in a fresh interpreter, timed
  inside that interpreter (interpreter start-up and the import of the module's own
  dependencies, ``phronomy_fsm.table``, ``enum``, ``typing``, excluded), after one warm
  import that wrote the ``.pyc``; median of ``--runs`` subprocesses.
  ``import_seconds_with_deps`` also counts ``phronomy_fsm.table``.

Prints ``{"states": 1000, "transitions": 5000, "validate_generate_seconds": S,
"import_seconds": I, ...}``. Nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

STATES = 1000
TRANSITIONS = 5000
FINALS = 10
EVENTS = 40
GUARDS = 10
ACTIONS = 20
#: Leaf states per compound state, and compound states per outer compound state.
GROUP = 25
OUTER = 4

_IMPORT_PROBE = """\
import sys, time
sys.path.insert(0, {folder!r})
{preload}
start = time.perf_counter()
import {module}
print(time.perf_counter() - start)
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--runs N`` (default 7): repetitions whose median is reported."""
    parser.add_argument("--runs", type=int, default=7, help="repetitions (median reported)")


def build_spec(states: int = STATES, transitions: int = TRANSITIONS) -> dict[str, Any]:
    """Return the synthetic spec as plain data (deterministic for given sizes).

    States ``s0000``...: the last ``FINALS`` are final; every tenth (offset 5) is auto
    with a guarded and an unguarded ``state_completed`` row going forward (so auto
    states form no cycle); every fiftieth (offset 7) commits a barrier, every fiftieth
    (offset 17) runs an offload, every hundredth (offset 3) has a timeout. External
    states take rows on ``e00``..``e39`` (first row of each state goes to the next
    state, so everything is reachable and can finish), some guarded first, some
    internal; rows are added round-robin until there are exactly ``transitions``.
    """
    names = [f"s{i:04d}" for i in range(states)]
    last = states - FINALS
    events: dict[str, Any] = {"state_completed": {"description": "posted by the engine"}}
    for k in range(EVENTS):
        events[f"e{k:02d}"] = {"description": f"outside event {k}", "payload": "dict"}
    for name in ("b_ok", "b_not", "b_conflict", "b_unknown", "o_done", "o_failed", "tick"):
        events[name] = {"description": f"work outcome {name}"}
    for name in ("abort", "halt", "resolve"):
        events[name] = {"description": f"outside event {name}"}
    state_defs: dict[str, Any] = {}
    rows: list[dict[str, Any]] = []
    per_state: list[list[dict[str, Any]]] = [[] for _ in range(states)]

    def row(i: int, event: str, target: str | None, **extra: Any) -> dict[str, Any]:
        body: dict[str, Any] = {"from": names[i], "event": event}
        if target is not None:
            body["to"] = target
        body.update(extra)
        body["description"] = f"row {event} from {names[i]}"
        return body

    externals: list[int] = []
    for i, name in enumerate(names):
        if i >= last:
            state_defs[name] = {"kind": "final", "description": f"final {i}"}
            continue
        nxt = names[i + 1]
        if i % 10 == 5:
            state_defs[name] = {
                "kind": "auto",
                "entry": [f"a{i % ACTIONS:02d}"],
                "description": f"auto {i}",
            }
            per_state[i].append(
                row(i, "state_completed", names[min(i + 2, states - 1)], guard=f"g{i % GUARDS}")
            )
            per_state[i].append(
                row(i, "state_completed", nxt, actions=[f"a{(i + 1) % ACTIONS:02d}"])
            )
            continue
        body: dict[str, Any] = {"kind": "external", "description": f"external {i}"}
        state_defs[name] = body
        if i == 0:
            body["initial"] = True
        if i % 100 == 7:  # long form
            body["barrier"] = {
                "name": f"commit_{i:04d}",
                "committed": "b_ok",
                "not_committed": "b_not",
                "conflict": "b_conflict",
                "outcome_unknown": "b_unknown",
            }
            per_state[i].append(row(i, "b_ok", nxt))
            for event in ("b_not", "b_conflict", "b_unknown"):
                per_state[i].append(row(i, event, names[last]))
            continue
        if i % 100 == 57:  # shorthand: derived events, conflict/unknown go to fail_closed
            body["barrier"] = {
                "name": f"commit_{i:04d}",
                "on_committed": [{"guard": f"g{i % GUARDS}", "to": nxt}, nxt],
                "on_not_committed": names[last],
            }
            continue
        if i % 50 == 17:
            body["offload"] = {
                "hook": f"work_{i:04d}",
                "completed": "o_done",
                "failed": "o_failed",
                "effect": "pure",
            }
            per_state[i].append(row(i, "o_done", nxt))
            per_state[i].append(row(i, "o_failed", names[last]))
            continue
        if i % 100 == 3:
            body["timeout"] = {"seconds": 30, "event": "tick"}
            per_state[i].append(row(i, "tick", names[last + 1]))
        per_state[i].append(row(i, f"e{i % EVENTS:02d}", nxt))
        externals.append(i)
    # compound states: GROUP leaves each, OUTER of those in an outer one; one row on each
    groups = [list(range(g, min(g + GROUP, last))) for g in range(0, last, GROUP)]
    compound_rows = [
        {"from": f"g{k:03d}", "event": "abort", "to": names[last], "description": "abort"}
        for k in range(len(groups))
    ] + [
        {"from": f"h{j:02d}", "event": "halt", "to": names[last + 1], "description": "halt"}
        for j in range(0, len(groups), OUTER)
    ]
    recovery_rows = [
        {"from": "recovery_required", "event": "resolve", "to": names[last], "description": "x"}
    ]
    total = sum(len(r) for r in per_state) + len(compound_rows) + len(recovery_rows)
    k = 1
    while total < transitions:
        for i in externals:
            if total >= transitions:
                break
            event = f"e{(i + k) % EVENTS:02d}"
            if k % 4 == 2:
                per_state[i].append(
                    row(i, event, None, actions=[f"a{k % ACTIONS:02d}"])
                )  # internal
            elif k % 4 == 3:
                per_state[i].append(
                    row(i, event, names[(i * 7 + k) % last], guard=f"g{k % GUARDS}")
                )
            else:
                per_state[i].append(row(i, event, names[(i * 13 + k) % states]))
            total += 1
        k += 1
        if k >= EVENTS:
            raise ValueError("too many transitions for the event pool")
    for state_rows in per_state:
        rows.extend(state_rows)
    rows.extend(compound_rows)
    rows.extend(recovery_rows)
    top: dict[str, Any] = {}
    for j in range(0, len(groups), OUTER):
        outer: dict[str, Any] = {"description": f"outer group {j}", "states": {}}
        if j == 0:
            outer["initial"] = True
        for k in range(j, min(j + OUTER, len(groups))):
            inner: dict[str, Any] = {"description": f"group {k}", "states": {}}
            if k == j:
                inner["initial"] = True
            for i in groups[k]:
                inner["states"][names[i]] = state_defs[names[i]]
            outer["states"][f"g{k:03d}"] = inner
        top[f"h{j:02d}"] = outer
    for group in groups:
        state_defs[names[group[0]]]["initial"] = True
    for i in range(last, states):
        top[names[i]] = state_defs[names[i]]
    top["recovery_required"] = {"kind": "wait", "description": "fail-closed"}
    return {
        "spec_format": 1,
        "machine": "bench_codegen",
        "version": 1,
        "description": "Synthetic machine of the codegen benchmark.",
        "fail_closed": "recovery_required",
        "events": events,
        "states": top,
        "transitions": rows,
    }


def write_spec(folder: Path, states: int = STATES, transitions: int = TRANSITIONS) -> Path:
    """Write the synthetic spec to ``folder/bench_codegen.yaml`` and return its path."""
    path = folder / "bench_codegen.yaml"
    path.write_text(
        yaml.safe_dump(build_spec(states, transitions), sort_keys=False, width=200), "utf-8"
    )
    return path


def _time_import(folder: Path, module: str, *, with_deps: bool) -> float:
    preload = "" if with_deps else "import enum, typing\nimport phronomy_fsm.table"
    code = _IMPORT_PROBE.format(folder=str(folder), module=module, preload=preload)
    # the warm import must be allowed to write the .pyc even where the environment
    # sets PYTHONDONTWRITEBYTECODE; reading it is never disabled
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, env=env
    )
    return float(out.stdout.strip())


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Run the benchmark; return the figures (seconds are medians)."""
    from phronomy_fsm.codegen import generate

    runs = max(1, getattr(args, "runs", 7))
    with tempfile.TemporaryDirectory(prefix="phronomy-bench-codegen-") as tmp:
        folder = Path(tmp)
        spec = write_spec(folder)
        timings = []
        out = folder / "out"
        for n in range(runs):
            out = folder / f"out{n}"
            start = time.perf_counter()
            report = generate([spec], out)
            timings.append(time.perf_counter() - start)
            if not report.ok:
                problems = [i.render() for i in report.issues if i.is_error][:5]
                raise SystemExit(f"synthetic spec is invalid: {problems}")
        module = "bench_codegen"
        _time_import(out, module, with_deps=True)  # warm: writes the .pyc
        if not any((out / "__pycache__").glob(f"{module}.*.pyc")):
            raise SystemExit("the warm import wrote no .pyc; import times would include compiling")
        imports = [_time_import(out, module, with_deps=False) for _ in range(runs)]
        imports_with_deps = [_time_import(out, module, with_deps=True) for _ in range(runs)]
        text = (out / f"{module}.py").read_text("utf-8")
        return {
            "states": STATES,
            "transitions": TRANSITIONS,
            "validate_generate_seconds": round(statistics.median(timings), 4),
            "import_seconds": round(statistics.median(imports), 4),
            "import_seconds_with_deps": round(statistics.median(imports_with_deps), 4),
            "spec_bytes": spec.stat().st_size,
            "module_lines": text.count("\n"),
            "runs": runs,
        }
