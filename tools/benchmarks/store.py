"""store: durable engine commits/s (single FULL / NORMAL, group commit) vs raw fsync.

What is measured, all in one process and one run, on the filesystem that holds the
database (a temporary folder; ``same_device_as_repo`` says whether it is the repo's
disk), in interleaved rounds whose medians are reported:

- ``fsync_per_second``: ``os.pwrite`` of 4 KiB into a preallocated file followed by
  ``os.fsync`` — the physical cost of one durable write on that disk.
- ``single_full`` / ``single_normal``: ``SqliteBarrierStore.commit`` of one realistic
  engine commit per transaction (a :class:`~phronomy_fsm.durable.records.DurableCommit`
  of an ``agent_session``-like execution with a ~1 KB context: JSON encoding, the
  fenced compare-and-set UPDATE of the execution — revision, machine, owner, fencing
  token and the owner's lease — and its barrier-log row), one thread,
  ``synchronous=FULL`` / ``NORMAL``. The records of the revision chain are built
  before timing (that is the engine's work, not the store's); encoding them is timed.
- ``group_full_64``: 64 threads, each driving its own execution, each doing
  ``store.submit(commit).result()`` in a loop at ``synchronous=FULL``; every commit is
  durable before its future resolves.
- ``single_full_with_journal`` (extra): the same single commit plus two journal
  entries (what an agent's final commit adds, in small).
- ``single_full_handoff_to_writer_thread`` (extra): the same single commits, but each
  handed to the writer thread (``submit().result()``) instead of run under the writer
  lock on the caller's thread — the design alternative ``commit()`` was measured
  against.
- ``group_full_64_pipelined`` (extra): the same 64 executions driven without a thread
  each — every execution submits its next commit from the done-callback of the
  previous one — which measures the group-commit writer without the cost of waking 64
  OS threads per batch.
- ``sqlite_ceiling`` (extra): the store's own statements for the same commits (the
  fenced UPDATE whose trigger writes the barrier-log row, in ``BEGIN IMMEDIATE`` ...
  ``COMMIT``; for the group, the store's one all-or-nothing statement that commits a
  batch of 64 executions by itself), run on a bare ``sqlite3`` connection
  at FULL with every parameter encoded before timing — what SQLite itself can do on
  this disk with this schema, with no Python layer (no encoding, no futures, no
  threads). A ratio the store cannot reach even here is out of reach of any Python
  layer above it.

``fsync_per_second`` is the median of fsync measurements taken before and after every
mode in every round; ``ratios`` divide the medians (as the targets are stated);
``paired_ratios_vs_adjacent_fsync`` are medians of per-measurement ratios against the
mean of the fsync rates measured just before and after it, which is far less sensitive
to a shared disk whose speed drifts during the run.

Targets (``docs/performance.md``, "Targets"): single_full ≥ 0.9× the
``sqlite_ceiling`` single_full of the same run, group_full_64/fsync ≥ 5 (where the
time goes, and the floor of the thread-per-caller driver: ``docs/store.md``,
"Performance"). Nothing here asserts speed.
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

import attrs

from phronomy_fsm.durable.records import (
    DurableCommit,
    DurablePoint,
    ExecutionRecord,
    ExecutionStatus,
    Fence,
    JournalEntry,
    WorkerRecord,
)
from phronomy_fsm.store import SqliteBarrierStore
from phronomy_fsm.store._commit import PreparedDurable, apply_batch, apply_run_autocommit
from phronomy_fsm.store.sqlite import WAL_PREWARM_FRAMES, prewarm_wal

#: The worker every benchmark commit is fenced by (its lease outlives the run).
WORKER = "bench-worker"
FENCE = Fence(WORKER, 1)

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


def _execution(execution_id: str, key: str, now: datetime) -> ExecutionRecord:
    """Revision 0 of an ``agent_session``-like execution with a ~1 KB context."""
    return ExecutionRecord(
        execution_id=execution_id,
        machine="agent_session",
        spec_version=2,
        spec_sha256="5" * 64,
        state="filtering_input",
        point=DurablePoint.START,
        status=ExecutionStatus.RUNNING,
        revision=0,
        created_at=now,
        updated_at=now,
        context={
            "agent_id": key,
            "execution_id": execution_id,
            "input": "Summarise the quarterly report. " * 8,
            "messages": [{"role": "user", "content": "Summarise the quarterly report. " * 8}],
            "pending_llm_call_id": None,
            "llm_calls": 0,
            "tools": [],
            "usage": {"prompt_tokens": 0, "completion_tokens": 0},
        },
        exclusive_key=key,
        labels={"agent_id": key},
    )


def _chain(first: ExecutionRecord, count: int, start: datetime) -> list[DurableCommit]:
    """``count`` successive fenced commits of one execution, alternating an LLM-call
    barrier (a fresh pending LLM call id) and a tool barrier (a one-call tool batch)."""
    commits = []
    current = first
    for i in range(count):
        context = dict(current.context)
        if i % 2 == 0:
            context.update(pending_llm_call_id=str(uuid.uuid4()), tools=[])
            context["llm_calls"] += 1
            barrier, state = "provider_dispatch", "calling_llm"
        else:
            call = {
                "tool_invocation_id": str(uuid.uuid4()),
                "tool_call_id": f"call_{i}",
                "tool_name": "search",
                "arguments_json": '{"query": "' + "q" * 40 + '"}',
                "status": "authorized",
            }
            context.update(pending_llm_call_id=None, tools=[call])
            barrier, state = "tool_dispatch", "running_tools"
        nxt = attrs.evolve(
            current,
            revision=current.revision + 1,
            state=state,
            point=DurablePoint.BARRIER,
            point_revision=current.revision + 1,
            updated_at=start + timedelta(microseconds=i),
            context=context,
        )
        commits.append(DurableCommit(barrier, nxt, current.revision, FENCE))
        current = nxt
    return commits


def _open(path: Path, synchronous: str) -> SqliteBarrierStore:
    """A store whose benchmark worker holds a lease longer than any run."""
    store = SqliteBarrierStore(path, synchronous=synchronous)
    now = datetime.now(UTC)
    store.register_worker(WorkerRecord(WORKER, "bench", os.getpid(), WORKER, now, now, now), 1e7)
    return store


def _new_execution(store: SqliteBarrierStore, key: str) -> ExecutionRecord:
    first = _execution(str(uuid.uuid4()), key, datetime.now(UTC))
    store.commit(DurableCommit("@start", first, None, FENCE))
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
    """One store and one execution whose chain is committed one commit at a time."""

    def __init__(self, folder: Path, synchronous: str, journal: bool) -> None:
        self.store = _open(folder / f"single-{synchronous}-{journal}.db", synchronous)
        self.journal = journal
        self.current = _new_execution(self.store, "agent-single")

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

    @staticmethod
    def _with_journal(c: DurableCommit) -> DurableCommit:
        entries = (
            JournalEntry(
                "assistant_message",
                {"message": {"role": "assistant", "content": "Calling the search tool."}},
            ),
            JournalEntry("llm_call_recorded", {"llm_call_id": str(uuid.uuid4()), "tokens": 128}),
        )
        return attrs.evolve(c, journal=entries)


class _Group:
    """One store, ``writers`` executions, each driven by its own thread via submit()."""

    def __init__(self, folder: Path, writers: int) -> None:
        folder.mkdir(exist_ok=True)
        self.store = _open(folder / "group.db", "FULL")
        self.currents = [_new_execution(self.store, f"agent-{i}") for i in range(writers)]

    def run(self, per_writer: int) -> float:
        start_at = datetime.now(UTC)
        chains = [_chain(cur, per_writer, start_at) for cur in self.currents]
        gate = threading.Barrier(len(chains) + 1)
        errors: list[BaseException] = []
        submit = self.store.submit

        def drive(chain: list[DurableCommit]) -> None:
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

        def drive(chain: list[DurableCommit]) -> None:
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
    every body encoded before timing: the SQLite ceiling for this schema and disk."""

    def __init__(self, folder: Path, writers: int) -> None:
        folder.mkdir(exist_ok=True)
        path = folder / "ceiling.db"
        with _open(path, "FULL") as store:
            self.currents = [_new_execution(store, f"agent-{i}") for i in range(writers)]
        self.conn = sqlite3.connect(path, isolation_level=None, cached_statements=256)
        self.conn.execute("PRAGMA synchronous=FULL")
        prewarm_wal(self.conn, f"{path}-wal", WAL_PREWARM_FRAMES)

    def _prepared(self, per_execution: int, executions: int) -> list[list[PreparedDurable]]:
        start_at = datetime.now(UTC)
        chains = [_chain(cur, per_execution, start_at) for cur in self.currents[:executions]]
        for i, chain in enumerate(chains):
            self.currents[i] = chain[-1].execution
        return [[PreparedDurable(c) for c in chain] for chain in chains]

    def single(self, count: int) -> float:
        """One commit per transaction, one execution."""
        (chain,) = self._prepared(count, 1)
        cur = self.conn.cursor()
        now = datetime.now(UTC)
        now_ms = time.time_ns() // 1_000_000
        start = time.perf_counter()
        for p in chain:
            cur.execute("BEGIN IMMEDIATE")
            apply_batch(cur, [p], now_ms, now, None)
            cur.execute("COMMIT")
        return count / (time.perf_counter() - start)

    def group(self, per_writer: int) -> float:
        """One transaction per round: every execution's next commit, through the
        statement the store's group commit uses for such a batch (one call that is its
        own transaction)."""
        chains = self._prepared(per_writer, len(self.currents))
        rounds = [[chain[k] for chain in chains] for k in range(per_writer)]
        cur = self.conn.cursor()
        now_ms = time.time_ns() // 1_000_000
        start = time.perf_counter()
        for batch in rounds:
            if not apply_run_autocommit(cur, batch, now_ms):
                raise RuntimeError("the ceiling batch did not apply every commit")
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
