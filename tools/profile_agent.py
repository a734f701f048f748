#!/usr/bin/env python3
"""Profile one batch of phronomy_fsm agent runs: ``python tools/profile_agent.py``.

Runs the ``agent`` benchmark's phronomy_fsm side (``benchmarks.agent.run_phronomy``: the
scripted 10-step run — LLM, tool, LLM, tool, LLM, tool, LLM — by ``--concurrency``
agents sharing one runtime and one SQLite store at ``synchronous=FULL``) once without
the profiler (a warm-up, and the reference CPU time per durable step), then once under
``cProfile`` in **every thread**: ``threading.setprofile`` installs a hook in each thread
started afterwards (the runtime's loop, its worker pool, the store's group-commit
writer, the callers), which swaps itself for a ``cProfile.Profile`` of that thread; the
main thread has its own. The profiles are merged and printed:

* the share of CPU per area of the code (self time of every function, summed by where it
  lives: store, durable engine, dispatcher/runtime, agent, json/encoding,
  threading/locks, other; a built-in such as ``list.append`` counts in the area of the
  caller that spent most time in it);
* the top functions by total (self) time and by cumulative time.

The clock is each thread's CPU time (``time.thread_time``) unless ``--wall``: time a
thread spends blocked (an fsync, a lock, a queue) is then not counted, so the shares are
shares of CPU. The profiler adds a roughly constant cost per Python call, so small, often
called functions weigh more under it than they do unprofiled: compare the profiled and
unprofiled CPU per step printed at the top. ``--pstats FILE`` writes the merged profile
for ``python -m pstats`` or snakeviz; ``--json`` prints one JSON object instead of text.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import sys
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

#: Areas, first match wins: (name, substrings of a function's file name or, for
#: built-ins (file ``~``), of its name).
AREAS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "json/encoding",
        (
            "phronomy_fsm/durable/codec.py",
            "orjson",
            "cattrs",
            "attrs",
            "attr/",
            "json",
            "hashlib",
            "_hashlib",
            "jsonschema",
            "<attrs generated",
        ),
    ),
    ("store", ("phronomy_fsm/store/", "sqlite3")),
    ("durable engine", ("phronomy_fsm/durable/",)),
    (
        "dispatcher/runtime",
        ("phronomy_fsm/runtime/", "phronomy_fsm/generated/", "phronomy_fsm/table.py"),
    ),
    ("agent", ("phronomy_fsm/agent/",)),
    (
        "threading/locks",
        (
            "threading.py",
            "queue.py",
            "concurrent/futures",
            "_thread",
            "lock",
            "Condition",
            "_queue",
            "selectors",
        ),
    ),
)
OTHER = "other (stdlib, libraries)"


def area_of(func: tuple[str, int, str], raw: dict[Any, Any] | None = None, depth: int = 0) -> str:
    """The area of a ``pstats`` function key ``(file, line, name)``.

    A built-in (file ``~``) or generated function (no file, or ``<...>``) that no area
    names — ``list.append``, ``str.encode``, a ``<dictcomp>`` — is put in the area of
    the caller that spent most time in it (``raw``: ``pstats.Stats.stats``), so that a
    loop's built-ins count where the loop is.
    """
    filename, _line, name = func
    anonymous = filename in ("~", "") or filename.startswith("<")
    where = name if filename == "~" else filename.replace(os.sep, "/")
    for area, needles in AREAS:
        if any(needle in where for needle in needles):
            return area
    if anonymous and raw is not None and depth < 5 and func in raw:
        callers = raw[func][4]
        if callers:
            caller = max(callers.items(), key=lambda kv: kv[1][2])[0]
            return area_of(caller, raw, depth + 1)
    return OTHER


def label(func: tuple[str, int, str]) -> str:
    """``module/file.py:line(name)`` with the path shortened after site-packages/src."""
    filename, line, name = func
    if filename == "~":
        return name
    path = filename.replace(os.sep, "/")
    for marker in ("/site-packages/", "/src/", "/lib/python3"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    return f"{path}:{line}({name})"


class ThreadProfiles:
    """A ``cProfile.Profile`` per thread: the main thread's, and one for every thread
    started while :meth:`start` is in force."""

    def __init__(self, timer: Any) -> None:
        self.timer = timer
        self.profiles: list[cProfile.Profile] = []
        self.main = cProfile.Profile(timer)

    def _hook(self, frame: Any, event: str, arg: Any) -> None:
        """``threading.setprofile`` hook: replace itself by a profiler of this thread."""
        profile = cProfile.Profile(self.timer)
        self.profiles.append(profile)
        profile.enable()  # replaces this hook in the calling thread

    def start(self) -> None:
        """Profile the main thread and every thread started from now on."""
        threading.setprofile(self._hook)
        self.main.enable()

    def stop(self) -> pstats.Stats:
        """Stop profiling; the merged statistics of every thread."""
        self.main.disable()
        threading.setprofile(None)  # type: ignore[arg-type]
        stats = pstats.Stats(self.main)
        for profile in list(self.profiles):
            # Threads started by the run have ended (the runtime was closed); disable()
            # on this thread only flushes their unfinished calls.
            stats.add(profile)
        return stats


def summarise(stats: pstats.Stats, top: int) -> dict[str, Any]:
    """Shares per area and the top functions by total and by cumulative time."""
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    total = sum(tt for (_cc, _nc, tt, _ct, _callers) in raw.values()) or 1e-12
    areas: dict[str, float] = {}
    area = {func: area_of(func, raw) for func in raw}
    for func, (_cc, _nc, tt, _ct, _callers) in raw.items():
        areas[area[func]] = areas.get(area[func], 0.0) + tt

    def rows(key: int) -> list[dict[str, Any]]:
        ordered = sorted(raw.items(), key=lambda kv: kv[1][key], reverse=True)[:top]
        return [
            {
                "function": label(func),
                "area": area[func],
                "calls": nc,
                "tottime": round(tt, 4),
                "cumtime": round(ct, 4),
                "tottime_share": round(tt / total, 4),
            }
            for func, (_cc, nc, tt, ct, _callers) in ordered
        ]

    return {
        "profiled_seconds": round(total, 4),
        "areas": {
            name: {"seconds": round(seconds, 4), "share": round(seconds / total, 4)}
            for name, seconds in sorted(areas.items(), key=lambda kv: kv[1], reverse=True)
        },
        "top_by_tottime": rows(2),
        "top_by_cumtime": rows(3),
    }


def main(argv: list[str] | None = None) -> int:
    """Warm up, profile one batch, print the summary."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=320, help="agent runs in the batch")
    parser.add_argument("--concurrency", type=int, default=16, help="concurrent agents")
    parser.add_argument("--top", type=int, default=25, help="functions listed per table")
    parser.add_argument("--wall", action="store_true", help="wall-clock time, not thread CPU")
    parser.add_argument("--pstats", metavar="FILE", help="also write the merged profile here")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)

    from benchmarks import bench_folder
    from benchmarks.agent import run_phronomy

    with bench_folder(".profile-") as directory:
        plain = run_phronomy(directory, args.runs, args.concurrency)
        profiles = ThreadProfiles(time.perf_counter if args.wall else time.thread_time)
        profiles.start()
        try:
            profiled = run_phronomy(directory, args.runs, args.concurrency)
        finally:
            stats = profiles.stop()
    if args.pstats:
        stats.dump_stats(args.pstats)
    summary = {
        "clock": "wall" if args.wall else "thread CPU",
        "runs": profiled.runs,
        "concurrency": args.concurrency,
        "threads_profiled": 1 + len(profiles.profiles),
        "durable_steps": profiled.steps,
        "cpu_seconds_per_step": {
            "unprofiled": round(plain.cpu_seconds / plain.steps, 7),
            "profiled": round(profiled.cpu_seconds / profiled.steps, 7),
        },
        "runs_per_second_unprofiled": round(plain.runs_per_second, 1),
        **summarise(stats, args.top),
    }
    if args.json:
        print(json.dumps(summary, sort_keys=True))
        return 0
    print(
        f"{summary['runs']} runs x {args.concurrency} concurrent agents, "
        f"{summary['durable_steps']} durable steps, {summary['threads_profiled']} threads "
        f"profiled, clock: {summary['clock']}"
    )
    per_step = summary["cpu_seconds_per_step"]
    print(
        f"CPU per durable step: {per_step['unprofiled'] * 1e6:.0f} us unprofiled, "
        f"{per_step['profiled'] * 1e6:.0f} us profiled; "
        f"{summary['profiled_seconds']:.2f} s in profiled functions"
    )
    print("\nshare of time by area (self time)")
    for name, row in summary["areas"].items():
        print(f"  {row['share'] * 100:5.1f}%  {row['seconds']:8.3f} s  {name}")
    for title, key in (
        ("top by total (self) time", "top_by_tottime"),
        ("top by cumulative time", "top_by_cumtime"),
    ):
        print(f"\n{title}")
        print(f"  {'calls':>9} {'tottime':>8} {'cumtime':>8}  {'area':<20} function")
        for row in summary[key]:
            print(
                f"  {row['calls']:>9} {row['tottime']:>8.3f} {row['cumtime']:>8.3f}  "
                f"{row['area']:<20} {row['function']}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
