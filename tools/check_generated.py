"""Run the interleaving checker on many generated durable specs and report the figures.

Generates ``--count`` small durable specs with the Hypothesis strategy
``tests/spec_strategies.py:durable_specs`` (barriers, waits with signals and timers,
internal transitions, compound states, effects of each kind, an effect right after a
wait), checks each with ``phronomy-fsm check``'s machinery run by the generic
application ``tests/checking/generic_app.py`` (every effect writes a ledger, every
action keeps the signals it applies), and prints the figures: specs, interleavings,
seconds, violations per invariant. Every spec with a violation is kept in ``--out``
with the command that replays each violating interleaving
(``docs/operations.md``, "The interleaving checker").

Usage::

    python tools/check_generated.py [--count 1000] [--seed 0] [--budget ci|quick]
        [--jobs 2] [--max-segments 4] [--time-limit SECONDS] [--out DIR] [--json]

``--budget ci`` (default) samples a few of each kind of step per spec (no takeovers,
which wait out a lease); ``quick`` is the command's ``--quick``. ``--time-limit`` stops
starting new specs after that many seconds (the figures say how many were checked).
Exit status 0 when no violation was found, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def generate(count: int, seed: int, max_segments: int) -> list[dict[str, Any]]:
    """``count`` distinct spec data drawn by Hypothesis from seed ``seed``."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as seeded

    from tests.spec_strategies import dump, durable_specs

    found: dict[str, dict[str, Any]] = {}

    @seeded(seed)
    @settings(
        max_examples=count,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(durable_specs(max_segments=max_segments))
    def draw(data: dict[str, Any]) -> None:
        found.setdefault(dump(data), data)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        draw()
    return list(found.values())[:count]


def main(argv: list[str] | None = None) -> int:
    """The command line (module docstring)."""
    from phronomy_fsm.checking import QUICK
    from tests.checking.generated import CI_BUDGET, check_spec_file, replay, write_spec

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--budget", choices=("ci", "quick"), default="ci")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--max-segments", type=int, default=4)
    parser.add_argument("--time-limit", type=float, default=None)
    parser.add_argument("--out", type=Path, default=None, help="keep violating specs here")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    budget = CI_BUDGET if args.budget == "ci" else QUICK
    out = args.out or Path(tempfile.mkdtemp(prefix="phronomy-generated-"))
    started = time.monotonic()
    specs = generate(args.count, args.seed, args.max_segments)
    generated_in = time.monotonic() - started
    figures: dict[str, Any] = {
        "specs_generated": len(specs),
        "specs_checked": 0,
        "interleavings": 0,
        "by_kind": Counter(),
        "invariants": Counter(),
        "violations": [],
    }
    for i, data in enumerate(specs):
        if args.time_limit is not None and time.monotonic() - started > args.time_limit:
            break
        path = write_spec(data, out / "specs")
        report = check_spec_file(path, budget=budget, seed=args.seed + i, jobs=args.jobs)
        figures["specs_checked"] += 1
        figures["interleavings"] += report.interleavings
        figures["by_kind"].update(report.by_kind)
        unexpected = report.violations
        for v in unexpected:
            figures["invariants"][v["invariant"]] += 1
            figures["violations"].append(
                {
                    "spec": str(path),
                    "invariant": v["invariant"],
                    "detail": v["detail"],
                    "replay": replay(path, v["interleaving"]),
                }
            )
        if not unexpected:
            path.unlink()
        print(
            f"[{i + 1}/{len(specs)}] {path.name}: {report.interleavings} interleavings, "
            f"{len(unexpected)} violation(s), {report.seconds} s",
            file=sys.stderr,
        )
    figures["seconds"] = round(time.monotonic() - started, 1)
    figures["generation_seconds"] = round(generated_in, 1)
    figures["by_kind"] = dict(figures["by_kind"])
    figures["invariants"] = dict(figures["invariants"])
    figures["kept_in"] = str(out)
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        print(
            f"{figures['specs_checked']} of {figures['specs_generated']} generated specs checked, "
            f"{figures['interleavings']} interleavings in {figures['seconds']} s "
            f"({', '.join(f'{k} {n}' for k, n in sorted(figures['by_kind'].items()))}); "
            f"violations: {figures['invariants'] or 'none'}"
        )
        for v in figures["violations"]:
            print(f"VIOLATION {v['invariant']}: {v['detail']}\n  replay: {v['replay']}")
    return 1 if figures["violations"] else 0


if __name__ == "__main__":
    sys.exit(main())
