"""agent: scripted agent runs/s, CPU per durable step and the approval round trip,
phronomy_fsm vs LangGraph and DBOS Transact.

Every side runs the same scripted 10-step agent run — the LLM asks for a tool three
times, then answers: LLM, tool, LLM, tool, LLM, tool, LLM; no simulated latency — with
its durable state in SQLite in WAL mode at ``synchronous=FULL`` on the same disk, in one
run, the sides measured in turn in each of ``--rounds`` interleaved rounds (medians
reported):

* ``phronomy_fsm``: agents sharing one :class:`~phronomy_fsm.agent.AgentRuntime` and one
  :class:`~phronomy_fsm.store.SqliteBarrierStore`; 16 and ``--concurrency`` (64)
  concurrent agents tried.
* ``langgraph_sqlite``: a compiled ``StateGraph`` (llm and tools nodes) with
  ``SqliteSaver``; 1 and 4 threads tried.
* ``dbos_sqlite``: DBOS Transact, a workflow of seven ``@DBOS.step()`` calls on its
  SQLite system database, 1, 4 and 16 threads tried, each in a process of its own
  (``DBOS()`` is a process-wide singleton; ``_agent_dbos.py``, started and read within
  this run, before the next side is measured). DBOS leaves SQLite's rollback journal and
  default synchronous mode; it is brought to WAL and ``synchronous=FULL`` there, and
  verified by reading ``PRAGMA synchronous`` and ``PRAGMA journal_mode`` back from every
  connection DBOS opened and from one checked out of its engine after the run (printed
  under ``config.dbos_sqlite_pragmas``; a run seeing anything else is refused). See that
  module's docstring.

The best concurrency tried is reported for each side (``best_concurrency``).

``cpu_seconds_per_step``: process CPU time (``time.process_time()``: every thread of
the process) over a side's timed runs at its best concurrency, divided by the durable
steps those runs committed, each counted from what was written rather than assumed:
phronomy_fsm's barrier commits (every execution's final revision + 1, tool calls'
child executions included, read back from the store); LangGraph's checkpoint writes
(the saver's committed write transactions: ``put`` and ``put_writes``); DBOS's
committed write transactions (each step's recorded output plus the workflow status
row's insert and update). ``durable_steps_per_run`` gives those counts per run.

The approval round trip is: run until the tool call waits for a person (phronomy_fsm:
durable suspension; LangGraph: ``interrupt()`` with ``SqliteSaver``), approve, run to the
end (phronomy_fsm: ``approve``; LangGraph: ``Command(resume=...)``). Medians.

``round_trip_floor`` (extra) is what the round trip would cost if everything but the
durable commits were free: the number of barriers one phronomy_fsm round trip commits
(read back from its store: the agent execution's and its tool calls' final revisions
+ 1 each, every commit being one revision) times the median latency of one FULL commit of the
store's own statements on a bare ``sqlite3`` connection on the same disk
(``benchmarks.store`` ``sqlite_ceiling``). A ratio below it is out of reach without
merging barriers the reference keeps separate.

Profile one batch of phronomy_fsm runs with ``python tools/profile_agent.py``.
"""

from __future__ import annotations

import json
import operator
import os
import sqlite3
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Annotated, Any, NamedTuple, TypedDict

from benchmarks import bench_folder

TOOL_CYCLES = 3

#: Concurrencies tried for each side (phronomy_fsm's also includes ``--concurrency``).
PHRONOMY_CONCURRENCY = (16,)
LANGGRAPH_CONCURRENCY = (1, 4)
DBOS_CONCURRENCY = (1, 4, 16)


class Measure(NamedTuple):
    """One timed batch of runs of one side at one concurrency."""

    runs_per_second: float
    #: process CPU seconds over the timed runs (all threads)
    cpu_seconds: float
    #: durable steps those runs committed (see the module docstring)
    steps: int
    runs: int


def add_arguments(parser: Any) -> None:
    """Options: --runs, --langgraph-runs, --dbos-runs, --concurrency, --round-trips,
    --rounds."""
    parser.add_argument("--runs", type=int, default=640, help="runs per measurement (phronomy_fsm)")
    parser.add_argument(
        "--langgraph-runs", type=int, default=60, help="runs per measurement (LangGraph)"
    )
    parser.add_argument("--dbos-runs", type=int, default=64, help="runs per measurement (DBOS)")
    parser.add_argument("--concurrency", type=int, default=64, help="max concurrent agents/threads")
    parser.add_argument(
        "--round-trips", type=int, default=30, help="approval round trips to time per side"
    )
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (median)")


# ------------------------------------------------------------------ phronomy_fsm


def _phronomy_provider(approval: bool = False) -> Any:
    from phronomy_fsm.agent import Reply, ScriptedProvider

    name = "approve_me" if approval else "step"
    cycles = 1 if approval else TOOL_CYCLES
    steps = [Reply(tool_calls=((name, {"n": i}),)) for i in range(cycles)] + [Reply(content="done")]
    return ScriptedProvider(steps)


def _phronomy_tools() -> list[Any]:
    from phronomy_fsm.agent import Tool

    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    return [
        Tool("step", lambda args, ctx: {"ok": args["n"]}, "one step", schema),
        Tool(
            "approve_me",
            lambda args, ctx: {"ok": args["n"]},
            "needs approval",
            schema,
            requires_approval=True,
        ),
    ]


def run_phronomy(directory: str, runs: int, concurrency: int) -> Measure:
    """Runs/s with ``concurrency`` agents sharing one runtime and one store, the CPU
    time they took and the barriers they committed."""
    from phronomy_fsm.agent import Agent, AgentRuntime
    from phronomy_fsm.store import SqliteBarrierStore

    store = SqliteBarrierStore(
        os.path.join(directory, f"phronomy-{concurrency}-{time.monotonic_ns()}.db"),
        synchronous="FULL",
    )
    runtime = AgentRuntime(store, max_workers=16, queue_size=4096)
    try:
        agents = [
            Agent.create(
                f"agent-{i}",
                provider=_phronomy_provider(),
                tools=_phronomy_tools(),
                runtime=runtime,
            )
            for i in range(concurrency)
        ]
        per_agent = max(1, runs // concurrency)
        done = threading.Semaphore(0)
        failures: list[BaseException] = []

        def chain(agent: Any, left: int) -> None:
            if left == 0:
                done.release()
                return
            task = agent.invoke_async("go")

            def next_run(t: Any) -> None:
                error = t.future.exception()
                if error is not None:
                    failures.append(error)
                    done.release()
                    return
                chain(agent, left - 1)

            task.add_done_callback(next_run)

        cpu0 = time.process_time()
        start = time.perf_counter()
        for agent in agents:
            threading.Thread(target=chain, args=(agent, per_agent), daemon=True).start()
        for _ in agents:
            done.acquire()
        elapsed = time.perf_counter() - start
        cpu = time.process_time() - cpu0
        if failures:
            raise RuntimeError(f"phronomy_fsm runs failed: {failures[0]!r}")
        total = per_agent * len(agents)
        return Measure(total / elapsed, cpu, count_barriers(store), total)
    finally:
        runtime.close(timeout_seconds=10)
        store.close()


def count_barriers(store: Any) -> int:
    """Barrier commits in ``store``: every execution's final revision + 1 (its first
    commit is revision 0), tool calls' child executions included."""
    return sum(int(row["revision"]) + 1 for row in store.execution_rows())


def round_trip_phronomy(directory: str, count: int) -> tuple[float, int]:
    """Median seconds of suspend + approve + complete, and the number of barriers one
    round trip committed."""
    from phronomy_fsm.agent import Agent, AgentRuntime
    from phronomy_fsm.store import SqliteBarrierStore

    store = SqliteBarrierStore(
        os.path.join(directory, f"phronomy-rt-{time.monotonic_ns()}.db"), synchronous="FULL"
    )
    runtime = AgentRuntime(store)
    suspended = threading.Event()
    request: dict[str, Any] = {}

    def on_event(event: Any) -> None:
        if event.type == "approval_required":
            request["execution_id"] = event.execution_id
            request["id"] = event.request_id
            suspended.set()

    try:
        samples = []
        for i in range(count):
            agent = Agent.create(
                f"rt-{i}",
                provider=_phronomy_provider(approval=True),
                tools=_phronomy_tools(),
                runtime=runtime,
                on_event=on_event,
            )
            suspended.clear()
            start = time.perf_counter()
            task = agent.invoke_async("refund please")
            suspended.wait(30)
            agent.approve_async(request["execution_id"], approval_request_id=request["id"])
            result = task.result(30)
            samples.append(time.perf_counter() - start)
            assert result.status.value == "completed"
        eid = request["execution_id"]
        barriers = (
            store.load_record(eid).revision
            + 1
            + sum(child.revision + 1 for child in store.list_records(parent_execution_id=eid))
        )
        return statistics.median(samples), barriers
    finally:
        runtime.close(timeout_seconds=10)
        store.close()


# --------------------------------------------------------------------- LangGraph


class _State(TypedDict):
    messages: Annotated[list, operator.add]


class _CountingConnection(sqlite3.Connection):
    """A sqlite3 connection that counts its committed write transactions (``commit()``
    with a transaction open: pysqlite opens one only before a write)."""

    commits = 0

    def commit(self) -> None:
        """Commit, counting it when a write transaction was open."""
        if self.in_transaction:
            self.commits += 1
        super().commit()


def _langgraph_app(path: str, *, approval: bool) -> Any:
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import interrupt

    cycles = 1 if approval else TOOL_CYCLES

    def llm(state: _State) -> dict[str, Any]:
        answered = sum(1 for m in state["messages"] if m["role"] == "assistant")
        if answered < cycles:
            return {
                "messages": [
                    {"role": "assistant", "tool_call": {"name": "step", "args": {"n": answered}}}
                ]
            }
        return {"messages": [{"role": "assistant", "content": "done"}]}

    def tools(state: _State) -> dict[str, Any]:
        call = state["messages"][-1]["tool_call"]
        if approval:
            decision = interrupt({"tool": call["name"], "args": call["args"]})
            if not decision:
                return {"messages": [{"role": "tool", "content": "rejected"}]}
        return {"messages": [{"role": "tool", "content": str({"ok": call["args"]["n"]})}]}

    def route(state: _State) -> str:
        return "tools" if "tool_call" in state["messages"][-1] else END

    graph = StateGraph(_State)
    graph.add_node("llm", llm)
    graph.add_node("tools", tools)
    graph.add_edge(START, "llm")
    graph.add_conditional_edges("llm", route, ["tools", END])
    graph.add_edge("tools", "llm")
    conn = sqlite3.connect(path, check_same_thread=False, factory=_CountingConnection)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    saver = SqliteSaver(conn)
    saver.setup()
    return graph.compile(checkpointer=saver), conn


def run_langgraph(directory: str, runs: int, concurrency: int) -> Measure:
    """Runs/s with ``concurrency`` threads invoking the compiled graph, the CPU time
    they took and the checkpoint writes they committed."""
    app, conn = _langgraph_app(
        os.path.join(directory, f"langgraph-{concurrency}-{time.monotonic_ns()}.db"), approval=False
    )
    per_thread = max(1, runs // concurrency)

    def work(i: int) -> None:
        for r in range(per_thread):
            out = app.invoke(
                {"messages": [{"role": "user", "content": "go"}]},
                {"configurable": {"thread_id": f"t{i}-{r}"}},
            )
            assert out["messages"][-1]["content"] == "done"

    threads = [threading.Thread(target=work, args=(i,)) for i in range(concurrency)]
    commits0 = conn.commits
    cpu0 = time.process_time()
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    cpu = time.process_time() - cpu0
    commits = conn.commits - commits0
    conn.close()
    total = per_thread * concurrency
    return Measure(total / elapsed, cpu, commits, total)


def round_trip_langgraph(directory: str, count: int) -> float:
    """Median seconds of interrupt + Command(resume=True) to the end."""
    from langgraph.types import Command

    app, conn = _langgraph_app(
        os.path.join(directory, f"langgraph-rt-{time.monotonic_ns()}.db"), approval=True
    )
    samples = []
    for i in range(count):
        config = {"configurable": {"thread_id": f"rt-{i}"}}
        start = time.perf_counter()
        first = app.invoke({"messages": [{"role": "user", "content": "refund please"}]}, config)
        assert "__interrupt__" in first
        out = app.invoke(Command(resume=True), config)
        samples.append(time.perf_counter() - start)
        assert out["messages"][-1]["content"] == "done"
    conn.close()
    return statistics.median(samples)


# -------------------------------------------------------------------------- DBOS


def run_dbos(directory: str, runs: int, concurrency: int) -> tuple[Measure, dict[str, Any]]:
    """Runs/s of DBOS Transact with ``concurrency`` threads, in a process of its own
    (``_agent_dbos.py``), the CPU time and the write transactions the timed runs took,
    and the SQLite pragmas seen on DBOS's connections."""
    path = os.path.join(directory, f"dbos-{concurrency}-{time.monotonic_ns()}.db")
    proc = subprocess.run(
        [
            sys.executable,
            str(Path(__file__).with_name("_agent_dbos.py")),
            path,
            str(runs),
            str(concurrency),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"DBOS peer failed: {proc.stderr[-2000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    pragmas = out["pragmas"]
    if pragmas != {"synchronous": [2], "journal_mode": ["wal"]}:
        raise RuntimeError(f"DBOS peer not at WAL + synchronous=FULL: {pragmas}")
    if out["step_rows"] < out["completed"] * (2 * TOOL_CYCLES + 1):
        raise RuntimeError(f"DBOS peer recorded too few steps: {out}")
    return (
        Measure(
            out["completed"] / out["seconds"], out["cpu_seconds"], out["commits"], out["completed"]
        ),
        pragmas,
    )


# --------------------------------------------------------------------------- run


def commit_latency_floor(directory: str, commits: int = 300) -> float:
    """Mean seconds of one FULL commit of the store's own barrier
    statements on a bare sqlite3 connection (no Python layer)."""
    from benchmarks.store import _Ceiling

    ceiling = _Ceiling(Path(directory) / f"ceiling-{time.monotonic_ns()}", 1)
    try:
        ceiling.single(50)  # warm up
        return 1.0 / ceiling.single(commits)
    finally:
        ceiling.conn.close()


def _best(measures: dict[int, Measure]) -> tuple[int, Measure]:
    """The concurrency with the highest runs/s, and its measure."""
    return max(measures.items(), key=lambda kv: kv[1].runs_per_second)


def run(args: Any) -> dict[str, Any]:
    """Interleave the measurements; report medians and ratios."""
    sides = ("phronomy_fsm", "langgraph_sqlite", "dbos_sqlite")
    best: dict[str, list[Measure]] = {side: [] for side in sides}
    best_concurrency = dict.fromkeys(sides, 0)
    ours_rt: list[float] = []
    theirs_rt: list[float] = []
    floors: list[float] = []
    barriers = 0
    dbos_pragmas: dict[str, Any] = {}
    with bench_folder(".bench-") as directory:
        for _ in range(args.rounds):
            concurrencies = sorted({min(args.concurrency, 64), *PHRONOMY_CONCURRENCY})
            c, m = _best({c: run_phronomy(directory, args.runs, c) for c in concurrencies})
            best["phronomy_fsm"].append(m)
            best_concurrency["phronomy_fsm"] = c
            c, m = _best(
                {c: run_langgraph(directory, args.langgraph_runs, c) for c in LANGGRAPH_CONCURRENCY}
            )
            best["langgraph_sqlite"].append(m)
            best_concurrency["langgraph_sqlite"] = c
            dbos: dict[int, Measure] = {}
            for c in DBOS_CONCURRENCY:
                dbos[c], dbos_pragmas = run_dbos(directory, args.dbos_runs, c)
            c, m = _best(dbos)
            best["dbos_sqlite"].append(m)
            best_concurrency["dbos_sqlite"] = c
            seconds, barriers = round_trip_phronomy(directory, args.round_trips)
            ours_rt.append(seconds)
            theirs_rt.append(round_trip_langgraph(directory, args.round_trips))
            floors.append(barriers * commit_latency_floor(directory))
    rate = {side: statistics.median(m.runs_per_second for m in best[side]) for side in sides}
    cpu_per_step = {
        side: statistics.median(m.cpu_seconds / m.steps for m in best[side]) for side in sides
    }
    steps_per_run = {
        side: statistics.median(m.steps / m.runs for m in best[side]) for side in sides
    }
    a, l, d = rate["phronomy_fsm"], rate["langgraph_sqlite"], rate["dbos_sqlite"]
    r, q = statistics.median(ours_rt), statistics.median(theirs_rt)
    return {
        "runs_per_second": {side: round(rate[side], 1) for side in sides},
        "approval_round_trip_seconds": {
            "phronomy_fsm": round(r, 5),
            "langgraph_sqlite": round(q, 5),
        },
        "ratios": {
            "runs_vs_langgraph": round(a / l, 2),
            "runs_vs_dbos": round(a / d, 2),
            "round_trip_vs_langgraph": round(r / q, 3),
        },
        "targets": {
            "runs_vs_langgraph": ">= 10",
            "runs_vs_dbos": ">= 5",
            "round_trip_vs_langgraph": "<= 0.3",
        },
        "cpu_seconds_per_step": {side: round(cpu_per_step[side], 7) for side in sides},
        "durable_steps_per_run": {
            "what": "phronomy_fsm: barrier commits (executions' final revision + 1, tool "
            "calls included); langgraph_sqlite: checkpoint write transactions; "
            "dbos_sqlite: write transactions (step outputs + workflow status)",
            **{side: round(steps_per_run[side], 2) for side in sides},
        },
        "round_trip_floor": {
            "what": "barriers per round trip x one FULL commit of the store's statements "
            "on a bare sqlite3 connection (everything else free)",
            "barriers_per_round_trip": barriers,
            "seconds": round(statistics.median(floors), 5),
            "vs_langgraph": round(statistics.median(floors) / q, 3),
        },
        "best_concurrency": best_concurrency,
        "samples": {side: [round(m.runs_per_second, 1) for m in best[side]] for side in sides},
        "config": {
            "tool_cycles": TOOL_CYCLES,
            "synchronous": "FULL",
            "rounds": args.rounds,
            "dbos_sqlite_pragmas": dbos_pragmas,
        },
    }
