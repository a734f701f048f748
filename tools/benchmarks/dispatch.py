"""dispatch: events/s through our dispatcher and a generated table vs peers, and memory.

The same 8-state agent-like cycle (PERFORMANCE.md anchors; issue 3 "Performance") runs
through (a) phronomy_fsm's Dispatcher driving a table compiled by our code generator,
(b) a pytransitions ``Machine`` per session, (c) a python-statemachine ``StateMachine``
per session, and (d) a bare ``table[(state, event)]`` loop (the lower bound). Each does
exactly the same transitions with a tiny hook on each; after a warm-up round, rounds are
interleaved; rates are the medians of the rounds and ratios the medians of the per-round
ratios (``ratios_of_medians`` divides the median rates instead). Memory per live session is measured with tracemalloc
over 10,000 parked sessions.

The cycle: idle -(auto)-> preparing -> calling_llm -> dispatching_tools ->
recording_tool_results -(auto)-> calling_llm ... -> output_filtering -> terminalizing ->
completed.
"""

from __future__ import annotations

import gc
import importlib.util
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

SPEC = """\
spec_format: 1
machine: bench_agent_cycle
version: 1
description: The 8-state agent-like cycle of the dispatch benchmark.
events:
  prepared: {description: preparation committed}
  llm_tool_calls: {description: the LLM asked for tools}
  tools_done: {description: tools finished}
  llm_answer: {description: the LLM answered}
  output_ok: {description: output filters passed}
  committed: {description: terminal commit done}
states:
  idle: {kind: auto, initial: true, description: start}
  preparing: {kind: external, description: preparation barrier}
  calling_llm: {kind: external, description: LLM call}
  dispatching_tools: {kind: external, description: tool barrier}
  recording_tool_results: {kind: auto, description: record results}
  output_filtering: {kind: external, description: output filters}
  terminalizing: {kind: external, description: terminal barrier}
  completed: {kind: final, description: done}
transitions:
  - {from: idle, event: state_completed, to: preparing, actions: [hook], description: admit}
  - {from: preparing, event: prepared, to: calling_llm, actions: [hook], description: call}
  - {from: calling_llm, event: llm_tool_calls, to: dispatching_tools, actions: [hook], description: tools}
  - {from: calling_llm, event: llm_answer, to: output_filtering, actions: [hook], description: answer}
  - {from: dispatching_tools, event: tools_done, to: recording_tool_results, actions: [hook], description: record}
  - {from: recording_tool_results, event: state_completed, to: calling_llm, actions: [hook], description: follow-up}
  - {from: output_filtering, event: output_ok, to: terminalizing, actions: [hook], description: commit}
  - {from: terminalizing, event: committed, to: completed, actions: [hook], description: finish}
"""

STATES = [
    "idle",
    "preparing",
    "calling_llm",
    "dispatching_tools",
    "recording_tool_results",
    "output_filtering",
    "terminalizing",
    "completed",
]
ROWS = [
    ("idle", "state_completed", "preparing"),
    ("preparing", "prepared", "calling_llm"),
    ("calling_llm", "llm_tool_calls", "dispatching_tools"),
    ("calling_llm", "llm_answer", "output_filtering"),
    ("dispatching_tools", "tools_done", "recording_tool_results"),
    ("recording_tool_results", "state_completed", "calling_llm"),
    ("output_filtering", "output_ok", "terminalizing"),
    ("terminalizing", "committed", "completed"),
]


def add_arguments(parser: Any) -> None:
    """Options: --sessions, --cycles, --rounds, --memory-sessions."""
    parser.add_argument("--sessions", type=int, default=2000, help="concurrent sessions per round")
    parser.add_argument("--cycles", type=int, default=10, help="tool cycles per session")
    parser.add_argument(
        "--rounds", type=int, default=9, help="interleaved rounds (median reported)"
    )
    parser.add_argument(
        "--memory-sessions", type=int, default=10_000, help="sessions for the memory probe"
    )


def _external_events(cycles: int) -> list[str]:
    return (
        ["prepared"]
        + ["llm_tool_calls", "tools_done"] * cycles
        + ["llm_answer", "output_ok", "committed"]
    )


def _full_events(cycles: int) -> list[str]:
    """The event sequence with the auto states' state_completed made explicit."""
    return (
        ["state_completed", "prepared"]
        + ["llm_tool_calls", "tools_done", "state_completed"] * cycles
        + ["llm_answer", "output_ok", "committed"]
    )


def _load_table(tmp: Path) -> Any:
    from phronomy_fsm.codegen import compile_spec

    from phronomy_fsm.spec.loader import load_spec_text

    loaded = load_spec_text(SPEC, source_name="bench_agent_cycle.yaml")
    assert loaded.spec is not None, loaded.issues
    path = tmp / "bench_agent_cycle.py"
    path.write_text(compile_spec(loaded.spec), "utf-8")
    spec = importlib.util.spec_from_file_location("bench_agent_cycle", path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module.TABLE


class _Ctx:
    __slots__ = ("n",)

    def __init__(self) -> None:
        self.n = 0


class _Hooks:
    def hook(self, ctx: _Ctx, payload: Any) -> None:
        ctx.n += 1


def run_phronomy(table: Any, sessions: int, cycles: int) -> tuple[float, int]:
    """Events/s through the Dispatcher (posting of every external event included;
    session objects created beforehand, as the peers' machines are); returns (rate,
    transitions)."""
    from phronomy_fsm.runtime import Dispatcher, bind_machine

    dispatcher = Dispatcher()
    binding = bind_machine(table, _Hooks())
    contexts = [_Ctx() for _ in range(sessions)]
    # sessions are created outside the timed region, like the peers' machine objects;
    # their first (auto) transition is processed inside it
    ids = [dispatcher.start_session(binding, ctx) for ctx in contexts]
    start = time.perf_counter()
    dispatcher.run_until_idle()
    post = dispatcher.post
    for sid in ids:
        post(sid, "prepared")
    dispatcher.run_until_idle()
    for _ in range(cycles):
        for sid in ids:
            post(sid, "llm_tool_calls")
            post(sid, "tools_done")
        dispatcher.run_until_idle()
    for event in ("llm_answer", "output_ok", "committed"):
        for sid in ids:
            post(sid, event)
        dispatcher.run_until_idle()
    elapsed = time.perf_counter() - start
    transitions = sum(c.n for c in contexts)
    assert transitions == sessions * len(_full_events(cycles)), transitions
    assert dispatcher.live_sessions() == 0
    dispatcher.stop()
    return transitions / elapsed, transitions


def run_transitions(sessions: int, cycles: int) -> tuple[float, int]:
    """Events/s through one pytransitions Machine per session."""
    from transitions import Machine

    class Model:
        def __init__(self) -> None:
            self.n = 0

        def hook(self) -> None:
            self.n += 1

    rows = [{"trigger": e, "source": s, "dest": d, "after": "hook"} for s, e, d in ROWS]
    models = [Model() for _ in range(sessions)]
    machines = [
        Machine(model=m, states=STATES, transitions=rows, initial="idle", auto_transitions=False)
        for m in models
    ]
    events = _full_events(cycles)
    start = time.perf_counter()
    for model in models:
        trigger = model.trigger
        for event in events:
            trigger(event)
    elapsed = time.perf_counter() - start
    transitions = sum(m.n for m in models)
    assert transitions == sessions * len(events) and all(m.state == "completed" for m in models)
    del machines
    return transitions / elapsed, transitions


def run_python_statemachine(sessions: int, cycles: int) -> tuple[float, int]:
    """Events/s through one python-statemachine StateMachine per session."""
    from statemachine import State, StateMachine

    class Cycle(StateMachine):
        idle = State(initial=True)
        preparing = State()
        calling_llm = State()
        dispatching_tools = State()
        recording_tool_results = State()
        output_filtering = State()
        terminalizing = State()
        completed = State(final=True)

        state_completed = idle.to(preparing) | recording_tool_results.to(calling_llm)
        prepared = preparing.to(calling_llm)
        llm_tool_calls = calling_llm.to(dispatching_tools)
        llm_answer = calling_llm.to(output_filtering)
        tools_done = dispatching_tools.to(recording_tool_results)
        output_ok = output_filtering.to(terminalizing)
        committed = terminalizing.to(completed)

        def __init__(self) -> None:
            self.n = 0
            super().__init__()

        def after_transition(self) -> None:
            self.n += 1

    machines = [Cycle() for _ in range(sessions)]
    events = _full_events(cycles)
    start = time.perf_counter()
    for machine in machines:
        send = machine.send
        for event in events:
            send(event)
    elapsed = time.perf_counter() - start
    transitions = sum(m.n for m in machines)
    assert transitions == sessions * len(events), transitions
    return transitions / elapsed, transitions


def run_dict(sessions: int, cycles: int) -> tuple[float, int]:
    """The lower bound: ``table[(state, event)]`` and a hook call, per event."""
    table = {(s, e): d for s, e, d in ROWS}
    events = _full_events(cycles)
    counter = [0]

    def hook(ctx: Any, payload: Any) -> None:
        counter[0] += 1

    start = time.perf_counter()
    for _ in range(sessions):
        state = "idle"
        for event in events:
            state = table[(state, event)]
            hook(None, None)
    elapsed = time.perf_counter() - start
    assert counter[0] == sessions * len(events)
    return counter[0] / elapsed, counter[0]


def memory_per_session(table: Any, count: int) -> dict[str, float]:
    """tracemalloc bytes per live session: ours parked in calling_llm vs transitions."""
    from transitions import Machine

    from phronomy_fsm.runtime import Dispatcher, bind_machine

    dispatcher = Dispatcher()
    binding = bind_machine(table, _Hooks())
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    ids = [dispatcher.start_session(binding, _Ctx()) for _ in range(count)]
    dispatcher.run_until_idle()
    for sid in ids:
        dispatcher.post(sid, "prepared")
    dispatcher.run_until_idle()
    gc.collect()
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    assert dispatcher.live_sessions() == count
    ours = sum(s.size_diff for s in after.compare_to(before, "filename")) / count
    del ids, after, before
    dispatcher.stop()

    class Model:
        def hook(self) -> None:
            pass

    rows = [{"trigger": e, "source": s, "dest": d, "after": "hook"} for s, e, d in ROWS]
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    machines = [
        Machine(
            model=Model(), states=STATES, transitions=rows, initial="idle", auto_transitions=False
        )
        for _ in range(count)
    ]
    gc.collect()
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    theirs = sum(s.size_diff for s in after.compare_to(before, "filename")) / count
    del machines
    return {"phronomy_fsm": round(ours, 1), "transitions": round(theirs, 1)}


def run(args: Any) -> dict[str, Any]:
    """Run the interleaved rounds and the memory probe; return the report."""
    results: dict[str, list[float]] = {
        "phronomy_fsm": [],
        "transitions": [],
        "python_statemachine": [],
        "dict_lower_bound": [],
    }
    with tempfile.TemporaryDirectory() as tmp:
        table = _load_table(Path(tmp))
        # the slow peers run fewer sessions per round (rates are per event, so comparable)
        slow_sessions = max(20, args.sessions // 5)
        peers = {
            "phronomy_fsm": lambda: run_phronomy(table, args.sessions, args.cycles)[0],
            "transitions": lambda: run_transitions(slow_sessions, args.cycles)[0],
            "python_statemachine": lambda: run_python_statemachine(slow_sessions, args.cycles)[0],
            "dict_lower_bound": lambda: run_dict(args.sessions, args.cycles)[0],
        }
        for name, measure in peers.items():  # warm-up round: imports, caches, allocator
            measure()
        for _ in range(args.rounds):
            for name, measure in peers.items():
                results[name].append(measure())
        memory = memory_per_session(table, args.memory_sessions)
    rates = {name: round(statistics.median(values)) for name, values in results.items()}
    ours = results["phronomy_fsm"]

    def paired(peer: str) -> float:
        """Median over rounds of ours / peer measured in the same round: the machine's
        speed drifts between rounds far more than within one."""
        return statistics.median(a / b for a, b in zip(ours, results[peer], strict=True))

    return {
        "events_per_second": rates,
        "bytes_per_live_session": memory,
        "ratios": {
            "vs_transitions": round(paired("transitions"), 2),
            "vs_python_statemachine": round(paired("python_statemachine"), 2),
            "vs_dict_lower_bound": round(paired("dict_lower_bound"), 3),
        },
        "ratios_of_medians": {
            "vs_transitions": round(rates["phronomy_fsm"] / rates["transitions"], 2),
            "vs_python_statemachine": round(
                rates["phronomy_fsm"] / rates["python_statemachine"], 2
            ),
            "vs_dict_lower_bound": round(rates["phronomy_fsm"] / rates["dict_lower_bound"], 3),
        },
        "targets": {
            "vs_transitions": ">= 25",
            "vs_python_statemachine": ">= 250",
            "vs_dict_lower_bound": ">= 0.25",
            "bytes_per_live_session": "<= 1024",
        },
        "config": {
            "sessions": args.sessions,
            "cycles": args.cycles,
            "rounds": args.rounds,
            "python": sys.version.split()[0],
        },
    }
