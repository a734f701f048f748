"""store: durable barrier commits/s (single FULL / NORMAL, group commit) vs raw fsync.

What is measured, all in one process and one run, on the filesystem that holds the
database (a temporary folder; ``same_device_as_repo`` says whether it is the repo's
disk), in interleaved rounds whose medians are reported:

- ``fsync_per_second``: ``os.pwrite`` of 4 KiB into a preallocated file followed by
  ``os.fsync`` — the physical cost of one durable write on that disk.
- ``single_full`` / ``single_normal``: ``SqliteBarrierStore.commit`` of one realistic
  barrier per transaction (a ~1 KB ExecutionRecord: JSON encoding, the
  revision-checked UPDATE of the execution and one barrier-log row), one thread,
  ``synchronous=FULL`` / ``NORMAL``. The records of the revision chain are built
  before timing (that is the caller's work, not the store's); encoding them is timed.
- ``group_full_64``: 64 threads, each driving its own execution, each doing
  ``store.submit(commit).result()`` in a loop at ``synchronous=FULL``; every commit is
  durable before its future resolves.
- ``single_full_with_journal`` (extra): the same single commit plus the agent root
  CAS and two journal records.
- ``single_full_handoff_to_writer_thread`` (extra): the same single commits, but each
  handed to the writer thread (``submit().result()``) instead of run under the writer
  lock on the caller's thread — the design alternative ``commit()`` was measured
  against.
- ``group_full_64_pipelined`` (extra): the same 64 executions driven without a thread
  each — every execution submits its next barrier from the done-callback of the
  previous one — which measures the group-commit writer without the cost of waking 64
  OS threads per batch.
- ``sqlite_ceiling`` (extra): the store's own statements for the same barriers (the
  revision-checked UPDATE whose trigger writes the barrier-log row; for the group, the
  store's multi-row UPDATE of 64 executions per transaction), run on a bare ``sqlite3``
  connection at FULL with every parameter encoded before timing — what SQLite itself
  can do on this disk with this schema, with no Python layer (no encoding, no futures,
  no threads). A ratio the store cannot reach even here is out of reach of any Python
  layer above it.

``fsync_per_second`` is the median of fsync measurements taken before and after every
mode in every round; ``ratios`` divide the medians (as the targets are stated);
``paired_ratios_vs_adjacent_fsync`` are medians of per-measurement ratios against the
mean of the fsync rates measured just before and after it, which is far less sensitive
to a shared disk whose speed drifts during the run.

Targets (``../shared/design/PERFORMANCE.md``): single_full/fsync ≥ 0.7,
group_full_64/fsync ≥ 5. Nothing here asserts speed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import statistics
import tempfile
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from phronomy_fsm.store import SqliteBarrierStore
from phronomy_fsm.store._write import UPDATE_EXECUTION, PreparedBarrier, bulk_update_sql
from phronomy_fsm.store.records import (
    AgentLifecycle,
    BarrierCommit,
    ExecutionRecord,
    ExecutionStatus,
    JournalRecord,
    ToolBatchEntry,
)
from phronomy_fsm.store.sqlite import WAL_PREWARM_FRAMES, prewarm_wal

REPO = Path(__file__).resolve().parents[2]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options: rounds, commits per round, writers, folder."""
    parser.add_argument(
        "--rounds", type=int, default=7, help="interleaved rounds (median reported)"
    )
    parser.add_argument(
        "--commits", type=int, default=1000, help="single commits per round and mode"
    )
    parser.add_argument("--writers", type=int, default=64, help="group-commit writer threads")
    parser.add_argument(
        "--group-commits", type=int, default=60, help="commits per writer per round"
    )
    parser.add_argument(
        "--dir",
        default=None,
        help="folder for the database (default: a temp dir on the repo's disk)",
    )


def _bench_dir(requested: str | None) -> tuple[Path, bool]:
    if requested:
        base = Path(requested)
    else:
        base = Path(tempfile.gettempdir())
        if os.stat(base).st_dev != os.stat(REPO).st_dev:
            base = REPO / ".bench"
    base.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="phronomy-store-bench-", dir=base))
    return folder, os.stat(folder).st_dev == os.stat(REPO).st_dev


def _execution(execution_id: str, agent_id: str, now: datetime) -> ExecutionRecord:
    return ExecutionRecord(
        execution_id=execution_id,
        agent_id=agent_id,
        revision=0,
        status=ExecutionStatus.PREPARING,
        phase="preparing",
        spec_version=1,
        spec_sha256="5" * 64,
        created_at=now,
        updated_at=now,
        input={"messages": [{"role": "user", "content": "Summarise the quarterly report. " * 8}]},
        metadata={
            "recovery_contract_version": 1,
            "invocation_mode": "invoke",
            "preparation_replayable": True,
        },
    )


def _chain(first: ExecutionRecord, count: int, start: datetime) -> list[BarrierCommit]:
    """``count`` successive barrier commits of one execution, alternating the provider
    and tool barriers, each with a fresh pending LLM call id or a one-entry tool batch."""
    commits = []
    current = first
    for i in range(count):
        now = start + timedelta(microseconds=i)
        if i % 2 == 0:
            nxt = current.advance(
                now=now,
                status=ExecutionStatus.ACTIVE,
                phase="calling_llm",
                pending_llm_call_id=str(uuid.uuid4()),
                llm_call_count=current.llm_call_count + 1,
                tool_batch=(),
            )
            barrier = "provider_barrier"
        else:
            nxt = current.advance(
                now=now,
                phase="dispatching_tools",
                pending_llm_call_id=None,
                tool_batch=(
                    ToolBatchEntry(
                        str(uuid.uuid4()),
                        f"call_{i}",
                        "search",
                        f"llm-{i}",
                        {"query": "q" * 40},
                        "authorized",
                    ),
                ),
            )
            barrier = "tool_barrier"
        commits.append(BarrierCommit(barrier, nxt, current.revision))
        current = nxt
    return commits


def _new_execution(store: SqliteBarrierStore, agent_id: str) -> ExecutionRecord:
    now = datetime.now(UTC)
    agent = store.create_agent(agent_id, now=now)
    first = _execution(str(uuid.uuid4()), agent_id, now)
    store.commit(
        BarrierCommit(
            "admission", first, None, agent=agent.advance(now=now, lifecycle=AgentLifecycle.ACTIVE)
        )
    )
    return first


def _fsync_rate(folder: Path, count: int) -> float:
    path = folder / "fsync.bin"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        block = b"\xa5" * 4096
        os.pwrite(fd, b"\0" * 4096 * 64, 0)
        os.fsync(fd)
        start = time.perf_counter()
        for i in range(count):
            os.pwrite(fd, block, (i % 64) * 4096)
            os.fsync(fd)
        return count / (time.perf_counter() - start)
    finally:
        os.close(fd)
        path.unlink()


class _Single:
    """One store and one execution whose chain is committed one barrier at a time."""

    def __init__(self, folder: Path, synchronous: str, journal: bool) -> None:
        self.store = SqliteBarrierStore(
            folder / f"single-{synchronous}-{journal}.db", synchronous=synchronous
        )
        self.journal = journal
        self.current = _new_execution(self.store, "agent-single")
        self.agent = self.store.load_agent("agent-single")

    def run(self, count: int, *, handoff: bool = False) -> float:
        commits = _chain(self.current, count, datetime.now(UTC))
        if self.journal:
            commits = [self._with_journal(c) for c in commits]
        commit = self.store.commit
        submit = self.store.submit
        start = time.perf_counter()
        if handoff:  # the alternative design: hand every commit to the writer thread
            for c in commits:
                submit(c).result()
        else:
            for c in commits:
                commit(c)
        elapsed = time.perf_counter() - start
        self.current = commits[-1].execution
        return count / elapsed

    def _with_journal(self, c: BarrierCommit) -> BarrierCommit:
        now = c.execution.updated_at
        records = tuple(
            JournalRecord(
                str(uuid.uuid4()),
                "agent-single",
                c.execution.execution_id,
                kind,
                now,
                role=role,
                content=text,
            )
            for kind, role, text in (
                ("assistant_message", "assistant", "Calling the search tool."),
                ("llm_call_recorded", None, {"tokens": 128}),
            )
        )
        self.agent = self.agent.advance(now=now, journal_head=self.agent.journal_head + 2)
        return BarrierCommit(
            c.barrier, c.execution, c.expected_revision, agent=self.agent, journal=records
        )


class _Group:
    """One store, ``writers`` executions, each driven by its own thread via submit()."""

    def __init__(self, folder: Path, writers: int) -> None:
        folder.mkdir(exist_ok=True)
        self.store = SqliteBarrierStore(folder / "group.db", synchronous="FULL")
        self.currents = [_new_execution(self.store, f"agent-{i}") for i in range(writers)]

    def run(self, per_writer: int) -> float:
        start_at = datetime.now(UTC)
        chains = [_chain(cur, per_writer, start_at) for cur in self.currents]
        gate = threading.Barrier(len(chains) + 1)
        errors: list[BaseException] = []
        submit = self.store.submit

        def drive(chain: list[BarrierCommit]) -> None:
            gate.wait()
            try:
                for c in chain:
                    submit(c).result()
            except BaseException as exc:  # noqa: BLE001 - nothing may escape this boundary untyped  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=drive, args=(chain,)) for chain in chains]
        for t in threads:
            t.start()
        gate.wait()
        start = time.perf_counter()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - start
        if errors:
            raise errors[0]
        self.currents = [chain[-1].execution for chain in chains]
        return len(chains) * per_writer / elapsed


class _Pipelined(_Group):
    """The same ``writers`` executions, but driven without a thread each: every
    execution submits its next barrier from the done-callback of the previous one
    (how an event loop or offload pool drives the store). Measures the group-commit
    writer itself, without 64 OS threads waking up per batch."""

    def run(self, per_writer: int) -> float:
        start_at = datetime.now(UTC)
        chains = [_chain(cur, per_writer, start_at) for cur in self.currents]
        done = threading.Event()
        lock = threading.Lock()
        remaining = [len(chains)]
        errors: list[BaseException] = []
        submit = self.store.submit

        def drive(chain: list[BarrierCommit]) -> None:
            it = iter(chain)

            def step(previous: Any = None) -> None:
                if previous is not None and previous.exception() is not None:
                    errors.append(previous.exception())
                commit = next(it, None)
                if commit is None or errors:
                    with lock:
                        remaining[0] -= 1
                        if remaining[0] == 0:
                            done.set()
                    return
                submit(commit).add_done_callback(step)

            step()

        start = time.perf_counter()
        for chain in chains:
            drive(chain)
        done.wait()
        elapsed = time.perf_counter() - start
        if errors:
            raise errors[0]
        self.currents = [chain[-1].execution for chain in chains]
        return len(chains) * per_writer / elapsed


class _Ceiling:
    """The store's statements on a bare sqlite3 connection (FULL, prewarmed WAL),
    parameters encoded before timing: the SQLite ceiling for this schema and disk."""

    def __init__(self, folder: Path, writers: int) -> None:
        folder.mkdir(exist_ok=True)
        path = folder / "ceiling.db"
        with SqliteBarrierStore(path, synchronous="FULL") as store:
            self.currents = [_new_execution(store, f"agent-{i}") for i in range(writers)]
        self.conn = sqlite3.connect(path, isolation_level=None, cached_statements=256)
        self.conn.execute("PRAGMA synchronous=FULL")
        prewarm_wal(self.conn, f"{path}-wal", WAL_PREWARM_FRAMES)

    def _prepared(self, per_execution: int, executions: int) -> list[list[PreparedBarrier]]:
        start_at = datetime.now(UTC)
        chains = [_chain(cur, per_execution, start_at) for cur in self.currents[:executions]]
        for i, chain in enumerate(chains):
            self.currents[i] = chain[-1].execution
        return [[PreparedBarrier(c) for c in chain] for chain in chains]

    def single(self, count: int) -> float:
        """One barrier per transaction, one execution."""
        (chain,) = self._prepared(count, 1)
        rows = [(UPDATE_EXECUTION[p.commit.execution.status], p.execution_params) for p in chain]
        execute = self.conn.execute
        now_ms = time.time_ns() // 1_000_000
        start = time.perf_counter()
        for sql, (prefix, suffix) in rows:
            execute("BEGIN IMMEDIATE")
            execute(sql, prefix + (now_ms,) + suffix)
            execute("COMMIT")
        return count / (time.perf_counter() - start)

    def group(self, per_writer: int) -> float:
        """One transaction per round: every execution's next barrier in one multi-row
        UPDATE (the store's group path for plain barriers)."""
        chains = self._prepared(per_writer, len(self.currents))
        sql = bulk_update_sql(len(chains))
        now_ms = time.time_ns() // 1_000_000
        batches = []
        for k in range(per_writer):
            params: list[Any] = [now_ms]
            for chain in chains:
                (revision, status, phase, body), (barrier, digest, eid, expected, agent) = chain[
                    k
                ].execution_params
                params += (eid, revision, status, phase, body, barrier, digest, expected, agent)
            batches.append(params)
        execute = self.conn.execute
        start = time.perf_counter()
        for params in batches:
            execute("BEGIN IMMEDIATE")
            cur = execute(sql, params)
            if cur.rowcount != len(chains):
                raise RuntimeError("the ceiling batch did not apply every barrier")
            execute("COMMIT")
        return per_writer * len(chains) / (time.perf_counter() - start)


def run(args: Any) -> dict[str, Any]:
    """Run the interleaved rounds; return the figures and ratios (medians)."""
    folder, same_device = _bench_dir(args.dir)
    try:
        full = _Single(folder, "FULL", journal=False)
        normal = _Single(folder, "NORMAL", journal=False)
        full_journal = _Single(folder, "FULL", journal=True)
        group = _Group(folder, args.writers)
        pipelined = _Pipelined(folder / "pipelined", args.writers)
        ceiling = _Ceiling(folder / "ceiling", args.writers)
        # Warm up: grow the WAL once and let a checkpoint cycle happen.
        full.run(300)
        normal.run(300)
        full_journal.run(100)
        group.run(5)
        pipelined.run(5)
        ceiling.single(300)
        ceiling.group(5)
        samples: dict[str, list[float]] = {
            k: []
            for k in (
                "fsync",
                "full",
                "full_handoff",
                "normal",
                "full_journal",
                "group",
                "pipelined",
                "ceiling_single",
                "ceiling_group",
            )
        }
        batches_before = group.store._group.batches
        items_before = group.store._group.items
        fsync_ops = max(200, args.commits // 3)
        paired: dict[str, list[float]] = {k: [] for k in samples if k != "fsync"}
        modes = {
            "full": lambda: full.run(args.commits),
            "full_handoff": lambda: full.run(args.commits // 2, handoff=True),
            "group": lambda: group.run(args.group_commits),
            "pipelined": lambda: pipelined.run(args.group_commits),
            "normal": lambda: normal.run(args.commits),
            "full_journal": lambda: full_journal.run(args.commits // 2),
            "ceiling_single": lambda: ceiling.single(args.commits),
            "ceiling_group": lambda: ceiling.group(args.group_commits),
        }
        for _ in range(args.rounds):
            # fsync is measured right before and after every mode; the paired ratio
            # divides by the mean of the two, which cancels slow drifts of the disk.
            before = _fsync_rate(folder, fsync_ops)
            samples["fsync"].append(before)
            for name, measure in modes.items():
                value = measure()
                after = _fsync_rate(folder, fsync_ops)
                samples["fsync"].append(after)
                samples[name].append(value)
                paired[name].append(value / ((before + after) / 2))
                before = after
        batches = group.store._group.batches - batches_before
        items = group.store._group.items - items_before
        for s in (full, normal, full_journal, group, pipelined):
            s.store.close()
        ceiling.conn.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in samples.items()}
    fsync = med["fsync"]
    return {
        "fsync_per_second": round(fsync, 1),
        "barrier_commits_per_second": {
            "single_full": round(med["full"], 1),
            "single_normal": round(med["normal"], 1),
            "group_full_64" if args.writers == 64 else f"group_full_{args.writers}": round(
                med["group"], 1
            ),
            "single_full_with_journal": round(med["full_journal"], 1),
            "group_full_64_pipelined": round(med["pipelined"], 1),
            "single_full_handoff_to_writer_thread": round(med["full_handoff"], 1),
        },
        "ratios": {
            "single_full_vs_fsync": round(med["full"] / fsync, 3),
            "group_full_64_vs_fsync": round(med["group"] / fsync, 3),
            "single_normal_vs_fsync": round(med["normal"] / fsync, 3),
            "group_full_64_pipelined_vs_fsync": round(med["pipelined"] / fsync, 3),
        },
        "paired_ratios_vs_adjacent_fsync": {
            "single_full": round(statistics.median(paired["full"]), 3),
            "group_full_64": round(statistics.median(paired["group"]), 3),
            "single_normal": round(statistics.median(paired["normal"]), 3),
            "group_full_64_pipelined": round(statistics.median(paired["pipelined"]), 3),
            "single_full_handoff_to_writer_thread": round(
                statistics.median(paired["full_handoff"]), 3
            ),
            "single_full_with_journal": round(statistics.median(paired["full_journal"]), 3),
        },
        "sqlite_ceiling": {
            "what": "the store's statements on a bare sqlite3 connection, parameters "
            "encoded before timing (no Python layer)",
            "single_full": round(med["ceiling_single"], 1),
            "group_full_64": round(med["ceiling_group"], 1),
            "paired_ratios_vs_adjacent_fsync": {
                "single_full": round(statistics.median(paired["ceiling_single"]), 3),
                "group_full_64": round(statistics.median(paired["ceiling_group"]), 3),
            },
        },
        "group_mean_batch": round(items / batches, 1) if batches else None,
        "rounds": args.rounds,
        "samples": {k: [round(x, 1) for x in v] for k, v in samples.items()},
        "same_device_as_repo": same_device,
        "sqlite_version": __import__("sqlite3").sqlite_version,
    }
