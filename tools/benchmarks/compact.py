"""compact: time to compact a store of N finished executions, SQLite and PostgreSQL.

Each store is filled with ``--executions`` finished executions (default 100,000), each
as an engine leaves a short one: an ``@start`` commit and an ``@final`` commit carrying
two journal entries and a ~300-byte context, and every 20th with a consumed signal
(each signal is its own durable write: sending one per execution would make filling the
store take most of the run) — so compaction deletes one execution row, two barrier-log
rows and two journal entries per execution. The store also holds ``--active`` executions still running, which must
survive. Then ``store.compact(older_than_days=0)`` is timed (``docs/store.md``,
"Compaction"); the report gives the seconds, executions removed per second, and the
store's size before and after (the SQLite file and WAL after the ``TRUNCATE``
checkpoint; PostgreSQL's ``pg_database_size``): neither shrinks, as both reuse the freed
pages for new rows (a smaller file needs ``VACUUM``).
Nothing here asserts speed; there is no peer (no engine we compare with compacts its
own history this way).
"""

from __future__ import annotations

import argparse
import os
import time
from concurrent.futures import Future
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
    JournalEntry,
    SignalKind,
    SignalRecord,
)

CONTEXT = {"order": "x" * 200, "lines": [{"sku": "a", "qty": 1}, {"sku": "b", "qty": 2}]}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--executions N`` finished, ``--active N`` running, ``--skip-postgres``."""
    parser.add_argument("--executions", type=int, default=100_000)
    parser.add_argument("--active", type=int, default=1_000)
    parser.add_argument("--skip-postgres", action="store_true")


def _record(eid: str, now: datetime) -> ExecutionRecord:
    return ExecutionRecord(
        execution_id=eid,
        machine="order",
        spec_version=1,
        spec_sha256="ab" * 32,
        state="created",
        point=DurablePoint.START,
        status=ExecutionStatus.RUNNING,
        revision=0,
        created_at=now,
        updated_at=now,
        context=CONTEXT,
    )


def _fill(store: Any, finished: int, active: int) -> float:
    """Commit the executions (in pipelined chunks); returns the seconds it took."""
    now = datetime.now(UTC)
    started = time.perf_counter()
    chunk = 2_000
    for first in range(0, finished + active, chunk):
        ids = [f"e{n:07d}" for n in range(first, min(first + chunk, finished + active))]
        starts: list[Future[Any]] = [
            store.submit(DurableCommit("@start", _record(eid, now), None)) for eid in ids
        ]
        for f in starts:
            f.result(600)
        ends = []
        for eid in ids:
            n = int(eid[1:])
            if n >= finished:
                continue
            consumed: tuple[int, ...] = ()
            if n % 20 == 0:
                consumed = (
                    store.send_signal(
                        SignalRecord(
                            signal_id=f"s-{eid}",
                            execution_id=eid,
                            kind=SignalKind.EVENT,
                            created_at=now,
                            event="approve",
                            payload={"by": "ops"},
                        )
                    ).seq,
                )
            end = attrs.evolve(
                _record(eid, now),
                revision=1,
                point_revision=1,
                state="done",
                point=DurablePoint.FINAL,
                status=ExecutionStatus.COMPLETED,
            )
            ends.append(
                store.submit(
                    DurableCommit(
                        "@final",
                        end,
                        0,
                        consume_signals=consumed,
                        journal=(
                            JournalEntry("charged", {"amount": 12}),
                            JournalEntry("execution_completed", {"n": 1}),
                        ),
                    )
                )
            )
        for f in ends:
            f.result(600)
    return time.perf_counter() - started


def _compact(store: Any) -> tuple[float, Any]:
    started = time.perf_counter()
    report = store.compact(older_than_days=0)
    return time.perf_counter() - started, report


def _figures(fill: float, seconds: float, report: Any, before: int, after: int) -> dict[str, Any]:
    return {
        "fill_seconds": round(fill, 1),
        "compact_seconds": round(seconds, 2),
        "removed_executions": report.removed_executions,
        "removed_per_second": round(report.removed_executions / seconds, 0),
        "removed_rows": {
            "barriers": report.removed_barriers,
            "journal_entries": report.removed_journal_entries,
            "signals": report.removed_signals,
        },
        "size_mb_before": round(before / 1e6, 1),
        "size_mb_after": round(after / 1e6, 1),
    }


def _sqlite(folder: Path, args: Any) -> dict[str, Any]:
    from phronomy_fsm.store import SqliteBarrierStore

    path = folder / "compact.db"

    def size() -> int:
        return sum(p.stat().st_size for p in folder.iterdir() if p.name.startswith("compact.db"))

    store = SqliteBarrierStore(path)
    try:
        fill = _fill(store, args.executions, args.active)
        store.checkpoint("TRUNCATE")
        before = size()
        seconds, report = _compact(store)
        assert len(store.list_records(active=True)) == args.active
        return _figures(fill, seconds, report, before, size())
    finally:
        store.close()


def _postgres(folder: Path, args: Any) -> dict[str, Any]:
    from phronomy_fsm.store.postgres import PostgresStore
    from phronomy_fsm.store.postgres.server import (
        LocalPostgres,
        create_database,
        server_from_environment,
    )

    admin = server_from_environment()
    server = None
    if admin is None:
        folder.chmod(0o711)  # the server's user reaches its data directory inside
        server = LocalPostgres(base_dir=folder).start()
        admin = server.dsn
    try:
        dsn = create_database(admin, f"compact_{os.getpid()}")
        store = PostgresStore(dsn)

        def size() -> int:
            return int(store._fetchall("size", "SELECT pg_database_size(current_database())")[0][0])

        try:
            fill = _fill(store, args.executions, args.active)
            before = size()
            seconds, report = _compact(store)
            assert len(store.list_records(active=True)) == args.active
            return _figures(fill, seconds, report, before, size())
        finally:
            store.close()
    finally:
        if server is not None:
            server.stop()


def run(args: Any) -> dict[str, Any]:
    """Fill and compact each store (module docstring); returns the JSON report."""
    with bench_folder(".bench-compact-") as directory:
        folder = Path(directory)
        out: dict[str, Any] = {
            "executions": args.executions,
            "active": args.active,
            "sqlite": _sqlite(folder, args),
        }
        if not args.skip_postgres:
            out["postgres"] = _postgres(folder, args)
        return out
