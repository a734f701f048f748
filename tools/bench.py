#!/usr/bin/env python3
"""Benchmark harness: ``python tools/bench.py NAME [--json] [options]``.

Each benchmark lives in ``tools/benchmarks/<name>.py`` and exposes ``add_arguments(parser)``
(optional) and ``run(args) -> dict``. Peers are measured side by side in the same process
and run, interleaved where it matters, and results are reported as raw figures plus the
ratios the targets in ``docs/performance.md`` are stated in (a subprocess is used where a
peer cannot share the process: DBOS). Nothing here is a timed assertion: CI never fails
on speed. ``tools/profile_agent.py`` profiles the agent benchmark's phronomy_fsm side.
"""

from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def available() -> list[str]:
    """Names of the benchmarks in tools/benchmarks/."""
    import benchmarks

    return sorted(
        m.name for m in pkgutil.iter_modules(benchmarks.__path__) if not m.name.startswith("_")
    )


def main(argv: list[str] | None = None) -> int:
    """Parse ``NAME [--json] [options]``, run that benchmark, print its result."""
    names = available()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="name", required=True, metavar="NAME", help=", ".join(names))
    modules = {}
    for name in names:
        module = importlib.import_module(f"benchmarks.{name}")
        modules[name] = module
        p = sub.add_parser(
            name, help=(module.__doc__ or "").strip().splitlines()[0] if module.__doc__ else name
        )
        p.add_argument("--json", action="store_true", help="print one JSON object")
        if hasattr(module, "add_arguments"):
            module.add_arguments(p)
    args = parser.parse_args(argv)
    result = modules[args.name].run(args)
    if args.json:
        print(json.dumps(result, sort_keys=True))
    else:
        print(json.dumps(result, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
