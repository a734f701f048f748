"""kept_commits: what keeping each commit's record costs (docs/store.md, "Kept commits").

A SQLite store commits ``--executions`` executions of ``--commits`` commits each (a
record with a ``--context-bytes`` context, as an engine writes them), pipelined through
group commit, once with ``keep_commit_bodies`` on and once off, in fresh stores. The
report gives the store's size after a ``TRUNCATE`` checkpoint for each, the bytes a kept
commit adds (``kept_bytes_per_commit``), the record's own JSON size for comparison,
and commits per second both ways (``commit_rate_ratio_kept_over_not``). Nothing here
asserts speed.
"""

from __future__ import annotations

import argparse
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import attrs

from benchmarks import bench_folder
from phronomy_fsm.durable.records import (
    DurableCommit,
    DurablePoint,
    ExecutionRecord,
    ExecutionStatus,
    to_json,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--executions``, ``--commits`` per execution, ``--context-bytes``."""
    parser.add_argument("--executions", type=int, default=2_000)
    parser.add_argument("--commits", type=int, default=10)
    parser.add_argument("--context-bytes", type=int, default=1_000)


def _fill(store: Any, args: Any) -> float:
    now = datetime.now(UTC)
    context = {"notes": "x" * args.context_bytes}
    records = {}
    started = time.perf_counter()
    pending = []
    for n in range(args.executions):
        record = ExecutionRecord(
            execution_id=f"e{n:06d}",
            machine="m",
            spec_version=1,
            spec_sha256="ab" * 32,
            state="s0",
            point=DurablePoint.START,
            status=ExecutionStatus.RUNNING,
            revision=0,
            created_at=now,
            updated_at=now,
            context=context,
        )
        records[record.execution_id] = record
        pending.append(store.submit(DurableCommit("@start", record, None)))
    for f in pending:
        f.result(600)
    for revision in range(1, args.commits):
        pending = []
        for eid, record in records.items():
            moved = attrs.evolve(
                record,
                revision=revision,
                point_revision=revision,
                state=f"s{revision}",
                point=DurablePoint.BARRIER,
            )
            records[eid] = moved
            pending.append(store.submit(DurableCommit("b", moved, revision - 1)))
        for f in pending:
            f.result(600)
    seconds = time.perf_counter() - started
    store.checkpoint("TRUNCATE")
    return seconds


def _size(folder: Path, name: str) -> int:
    return sum(p.stat().st_size for p in folder.iterdir() if p.name.startswith(name))


def run(args: Any) -> dict[str, Any]:
    """Fill two stores, keeping commit bodies and not; returns the JSON report."""
    from phronomy_fsm.store import SqliteBarrierStore

    out: dict[str, Any] = {
        "executions": args.executions,
        "commits_per_execution": args.commits,
        "context_bytes": args.context_bytes,
    }
    with bench_folder(".bench-kept-") as directory:
        folder = Path(directory)
        figures = {}
        for keep in (True, False):
            name = f"kept-{keep}.db"
            store = SqliteBarrierStore(folder / name)
            try:
                store.set_keep_commit_bodies(keep)
                seconds = _fill(store, args)
                sample = store.load_record("e000000")
            finally:
                store.close()
            commits = args.executions * args.commits
            figures[keep] = (_size(folder, name), commits / seconds)
        commits = args.executions * args.commits
        out["store_mb"] = {
            "kept": round(figures[True][0] / 1e6, 1),
            "not_kept": round(figures[False][0] / 1e6, 1),
        }
        out["kept_bytes_per_commit"] = round((figures[True][0] - figures[False][0]) / commits)
        out["record_json_bytes"] = len(to_json(sample).encode())
        out["commits_per_second"] = {
            "kept": round(figures[True][1]),
            "not_kept": round(figures[False][1]),
        }
        out["commit_rate_ratio_kept_over_not"] = round(figures[True][1] / figures[False][1], 2)
    return out
