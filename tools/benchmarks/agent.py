"""agent: scripted agent runs/s and the approval round trip, phronomy_fsm vs LangGraph.

Both sides run the same scripted 10-step agent run — the LLM asks for a tool three
times, then answers: LLM, tool, LLM, tool, LLM, tool, LLM — with a durable checkpoint
store in SQLite at ``synchronous=FULL`` on the same disk, in one process and one run
(issue 5 "Performance"). Each side may use up to 64 concurrent agents/threads; the best
concurrency tried is reported for each.

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
"""

from __future__ import annotations

import operator
import os
import sqlite3
import statistics
import tempfile
import threading
import time
from typing import Annotated, Any, TypedDict

TOOL_CYCLES = 3


def add_arguments(parser: Any) -> None:
    """Options: --runs-per-agent, --concurrency, --round-trips."""
    parser.add_argument("--runs", type=int, default=640, help="runs per measurement (phronomy_fsm)")
    parser.add_argument(
        "--langgraph-runs", type=int, default=60, help="runs per measurement (LangGraph)"
    )
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


def run_phronomy(directory: str, runs: int, concurrency: int) -> float:
    """Runs/s with ``concurrency`` agents sharing one runtime and one store."""
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

        start = time.perf_counter()
        for agent in agents:
            threading.Thread(target=chain, args=(agent, per_agent), daemon=True).start()
        for _ in agents:
            done.acquire()
        elapsed = time.perf_counter() - start
        if failures:
            raise RuntimeError(f"phronomy_fsm runs failed: {failures[0]!r}")
        return per_agent * len(agents) / elapsed
    finally:
        runtime.close(timeout_seconds=10)
        store.close()


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
    conn = sqlite3.connect(path, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    saver = SqliteSaver(conn)
    saver.setup()
    return graph.compile(checkpointer=saver), conn


def run_langgraph(directory: str, runs: int, concurrency: int) -> float:
    """Runs/s with ``concurrency`` threads invoking the compiled graph."""
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
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    conn.close()
    return per_thread * concurrency / elapsed


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


# --------------------------------------------------------------------------- run


def commit_latency_floor(directory: str, commits: int = 300) -> float:
    """Mean seconds of one FULL commit of the store's own barrier
    statements on a bare sqlite3 connection (no Python layer)."""
    from pathlib import Path

    from benchmarks.store import _Ceiling

    ceiling = _Ceiling(Path(directory) / f"ceiling-{time.monotonic_ns()}", 1)
    try:
        ceiling.single(50)  # warm up
        return 1.0 / ceiling.single(commits)
    finally:
        ceiling.conn.close()


def run(args: Any) -> dict[str, Any]:
    """Interleave the measurements; report medians and ratios."""
    ours: list[float] = []
    theirs: list[float] = []
    ours_rt: list[float] = []
    theirs_rt: list[float] = []
    floors: list[float] = []
    barriers = 0
    best_concurrency = {"phronomy_fsm": 0, "langgraph_sqlite": 0}
    with tempfile.TemporaryDirectory(
        dir=os.environ.get("PHRONOMY_BENCH_DIR") or os.getcwd(), prefix=".bench-"
    ) as directory:
        for _ in range(args.rounds):
            rates = {
                c: run_phronomy(directory, args.runs, c)
                for c in sorted({min(args.concurrency, 64), 16})
            }
            c, rate = max(rates.items(), key=lambda kv: kv[1])
            ours.append(rate)
            best_concurrency["phronomy_fsm"] = c
            lg_rates = {c: run_langgraph(directory, args.langgraph_runs, c) for c in (1, 4)}
            c, rate = max(lg_rates.items(), key=lambda kv: kv[1])
            theirs.append(rate)
            best_concurrency["langgraph_sqlite"] = c
            seconds, barriers = round_trip_phronomy(directory, args.round_trips)
            ours_rt.append(seconds)
            theirs_rt.append(round_trip_langgraph(directory, args.round_trips))
            floors.append(barriers * commit_latency_floor(directory))
    a, l = statistics.median(ours), statistics.median(theirs)
    r, q = statistics.median(ours_rt), statistics.median(theirs_rt)
    return {
        "runs_per_second": {"phronomy_fsm": round(a, 1), "langgraph_sqlite": round(l, 1)},
        "approval_round_trip_seconds": {
            "phronomy_fsm": round(r, 5),
            "langgraph_sqlite": round(q, 5),
        },
        "ratios": {
            "runs_vs_langgraph": round(a / l, 2),
            "round_trip_vs_langgraph": round(r / q, 3),
        },
        "targets": {"runs_vs_langgraph": ">= 10", "round_trip_vs_langgraph": "<= 0.15"},
        "round_trip_floor": {
            "what": "barriers per round trip x one FULL commit of the store's statements "
            "on a bare sqlite3 connection (everything else free)",
            "barriers_per_round_trip": barriers,
            "seconds": round(statistics.median(floors), 5),
            "vs_langgraph": round(statistics.median(floors) / q, 3),
        },
        "best_concurrency": best_concurrency,
        "samples": {
            "phronomy_fsm": [round(x, 1) for x in ours],
            "langgraph_sqlite": [round(x, 1) for x in theirs],
        },
        "config": {"tool_cycles": TOOL_CYCLES, "synchronous": "FULL", "rounds": args.rounds},
    }
