"""The application the crash-injection matrix kills (issue 6 item 5).

A real agent app on the library's public API: a scripted provider (deterministic across
processes) and file-backed tools, each of which appends its effect — with its
idempotency key — to a JSON-lines **effects log** beside the database and fsyncs it.
Every LLM call is likewise appended to an **LLM log** (the call id and the full
response), and every task the app sees settle is appended to an **acks log** (what the
caller was told). :mod:`crash_checks` reads these logs next to the store.

Subcommands (each prints one JSON summary line on stdout)::

    python tools/crash_app.py run SCENARIO --db PATH
    python tools/crash_app.py recover --db PATH

``run`` creates the scenario's agents, starts its execution and drives it (approves or
rejects when asked, cancels, times out, per scenario). ``recover`` loads every agent
with an active execution, lets the continuations run, approves suspended executions per
scenario, loads the targets of handoffs that never started (which starts them), and answers each
``recovery_resolution_required`` as an operator would: it consults the effects and LLM
logs and answers ``succeeded`` with the logged result when the effect is known to have
happened, ``not_performed`` otherwise (for an ``execution`` subject: ``not_performed``).

Environment (read at start):

- ``PHRONOMY_CRASH_AT`` — the crash point (``NAME`` or ``NAME@N``), turned into the
  :class:`~phronomy_fsm.runtime.faults.FaultPlan` given to the store and the runtime
  (the library itself reads no environment);
- ``PHRONOMY_CRASH_TRACE`` — a file to which every crash point reached is appended
  (one name a line, flushed before the point may kill the process), so the harness
  knows what a run reached;

Exit codes: 0 done (nothing left active), 3 something is still active at the deadline,
2 usage error; a crash point ends the process with SIGKILL (-9).
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from crash_scenarios import GUARDS, SCENARIOS, AgentDef, Scenario

from phronomy_fsm.agent import Agent, AgentRuntime, Reply, ScriptedProvider, Tool, recovery
from phronomy_fsm.agent.types import LLMRequest, LLMResponse
from phronomy_fsm.runtime.faults import FaultPlan
from phronomy_fsm.store import SqliteBarrierStore

CRASH_ENV = "PHRONOMY_CRASH_AT"
TRACE_ENV = "PHRONOMY_CRASH_TRACE"
#: The fault plan of this process (built in :func:`main` from the environment).
FAULTS: FaultPlan | None = None
META = "scenario.json"
EFFECTS = "effects.jsonl"
LLM_LOG = "llm.jsonl"
ACKS = "acks.jsonl"
#: How long a process drives its executions before it gives up (seconds).
DEADLINE_SECONDS = 45.0
#: How long ``wait_for_cancel`` waits for the cancellation in a ``run`` process.
WAIT_BOUND_SECONDS = 20.0

_append_lock = threading.Lock()


# ------------------------------------------------------------------------- logs


def log_paths(db: str | os.PathLike[str]) -> dict[str, Path]:
    """The files beside the database: ``meta``, ``effects``, ``llm`` and ``acks``."""
    folder = Path(db).resolve().parent
    return {
        "meta": folder / META,
        "effects": folder / EFFECTS,
        "llm": folder / LLM_LOG,
        "acks": folder / ACKS,
    }


def append_jsonl(path: Path, entry: dict[str, Any]) -> None:
    """Append one JSON line and fsync it before returning (the effect is durable).

    Every entry gets ``t`` (wall time, ns since the epoch) and ``pid``."""
    entry = {"t": time.time_ns(), "pid": os.getpid(), **entry}
    line = (json.dumps(entry, sort_keys=True) + "\n").encode()
    with _append_lock:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The entries of a JSON-lines log; a missing file is empty, and a torn last line
    (the process died mid-write) is ignored."""
    if not path.exists():
        return []
    entries = []
    for line in path.read_text("utf-8").splitlines():
        try:
            entries.append(json.loads(line))
        except ValueError:
            continue
    return entries


# ---------------------------------------------------------------- provider, tools


class LoggingProvider:
    """A :class:`ScriptedProvider` whose every call is appended (fsync'd) to the LLM
    log with the full response, so an operator can later tell whether a call happened
    and what it answered. The log line *is* the external call."""

    def __init__(self, agent_id: str, script: tuple[Reply, ...], llm_log: Path) -> None:
        self.agent_id = agent_id
        self.inner = ScriptedProvider(list(script), model=f"scripted-{agent_id}")
        self.llm_log = llm_log

    def complete(
        self, request: LLMRequest, *, on_token: Any = None, cancellation: Any = None
    ) -> LLMResponse:
        """Answer from the script and log the call (see the class docstring)."""
        response = self.inner.complete(request, on_token=on_token, cancellation=cancellation)
        append_jsonl(
            self.llm_log,
            {
                "kind": "llm",
                "agent_id": self.agent_id,
                "llm_call_id": request.llm_call_id,
                "response": {
                    "content": response.content,
                    "tool_calls": [
                        {"id": c.id, "name": c.name, "arguments": json.loads(c.arguments_json)}
                        for c in response.tool_calls
                    ],
                },
            },
        )
        return response


#: Tools whose effect is deduplicated by idempotency key (a second call is a replay).
IDEMPOTENT_TOOLS = frozenset({"charge"})

_SCHEMA = {
    "type": "object",
    "properties": {"ref": {"type": "string"}, "amount": {"type": "number"}},
    "required": ["ref"],
    "additionalProperties": False,
}


def make_tools(
    effects: Path, notify: Callable[[str, str], None], *, wait_bound_seconds: float
) -> list[Tool]:
    """The file-backed tools: ``append_note`` (not idempotent), ``charge`` (idempotent
    by key), ``transfer`` (needs approval, not idempotent) and ``wait_for_cancel``
    (logs its effect, calls ``notify(agent_id, execution_id)``, then waits up to
    ``wait_bound_seconds`` for the execution's cancellation)."""

    def effect(
        name: str, arguments: dict[str, Any], context: Any, result: Any, *, replayed: bool = False
    ) -> None:
        append_jsonl(
            effects,
            {
                "kind": "tool",
                "tool": name,
                "key": context.idempotency_key,
                "execution_id": context.execution_id,
                "agent_id": context.agent_id,
                "tool_call_id": context.tool_call_id,
                "arguments": arguments,
                "result": result,
                "idempotent": name in IDEMPOTENT_TOOLS,
                "replayed": replayed,
            },
        )

    def append_note(arguments: dict[str, Any], context: Any) -> Any:
        result = {"note": arguments["ref"], "written": True}
        effect("append_note", arguments, context, result)
        return result

    def charge(arguments: dict[str, Any], context: Any) -> Any:
        for entry in read_jsonl(effects):
            if entry.get("tool") == "charge" and entry.get("key") == context.idempotency_key:
                effect("charge", arguments, context, entry["result"], replayed=True)
                return entry["result"]
        result = {"charge": arguments["ref"], "amount": arguments.get("amount", 0)}
        effect("charge", arguments, context, result)
        return result

    def transfer(arguments: dict[str, Any], context: Any) -> Any:
        result = {"transfer": arguments["ref"], "amount": arguments.get("amount", 0)}
        effect("transfer", arguments, context, result)
        return result

    def wait_for_cancel(arguments: dict[str, Any], context: Any) -> Any:
        result = {"waited": arguments["ref"]}
        effect("wait_for_cancel", arguments, context, result)
        notify(context.agent_id, context.execution_id)
        ended = threading.Event()
        context.cancellation.on_cancel(lambda _error: ended.set())
        ended.wait(wait_bound_seconds)
        return result

    fns = {
        "append_note": append_note,
        "charge": charge,
        "transfer": transfer,
        "wait_for_cancel": wait_for_cancel,
    }
    return [
        Tool(name, fn, f"{name} (crash app)", _SCHEMA, requires_approval=name == "transfer")
        for name, fn in fns.items()
    ]


# ------------------------------------------------------------------- operator


def decide_resolution(
    payload: dict[str, Any], effects: list[dict[str, Any]], llm_calls: list[dict[str, Any]]
) -> dict[str, Any] | None:
    """What an operator answers to a ``recovery_resolution_required`` payload, from the
    logs: ``{"outcome": ..., "result": ...}`` or None when there is nothing to answer
    (no subject). A tool whose key is in the effects log, or an LLM call whose id is in
    the LLM log, ``succeeded`` with the logged result; anything else
    ``not_performed`` (the effect is known not to have happened)."""
    subject = payload.get("subject")
    if not subject:
        return None
    allowed = payload.get("allowed_outcomes") or []
    if subject.get("type") == "tool_invocation":
        hits = [
            e
            for e in effects
            if e.get("key") == subject.get("tool_invocation_id") and not e.get("replayed")
        ]
        if hits and "succeeded" in allowed:
            return {"outcome": "succeeded", "result": hits[0]["result"]}
    elif subject.get("type") == "llm_call":
        hits = [c for c in llm_calls if c.get("llm_call_id") == subject.get("llm_call_id")]
        if hits and "succeeded" in allowed:
            return {"outcome": "succeeded", "result": hits[0]["response"]}
    if "not_performed" in allowed:
        return {"outcome": "not_performed", "result": None}
    if "failed" in allowed:
        return {"outcome": "failed", "result": None}
    return None


class Driver:
    """Drives a scenario's agents in one process: events arrive on a queue from the
    loop thread (the listener never blocks) and are answered from the main thread."""

    def __init__(self, scenario: Scenario, db: str, mode: str) -> None:
        self.scenario = scenario
        self.db = db
        self.mode = mode
        self.paths = log_paths(db)
        self.store = SqliteBarrierStore(db, faults=FAULTS)
        self.runtime = AgentRuntime(max_workers=8, name=f"crash-app-{mode}", faults=FAULTS)
        self.inbox: queue.SimpleQueue[tuple[str, str, Any]] = queue.SimpleQueue()
        self.agents: dict[str, Agent] = {}
        self.tasks: list[Any] = []
        self.summary: dict[str, Any] = {
            "mode": mode,
            "scenario": scenario.name,
            "pid": os.getpid(),
            "loaded": [],
            "announcements": [],
            "resolutions": [],
            "approvals": [],
            "cancels": [],
            "handoff_targets_started": [],
            "errors": [],
        }
        self.announced: dict[str, dict[str, Any]] = {}
        bound = (
            WAIT_BOUND_SECONDS
            if mode == "run"
            else (WAIT_BOUND_SECONDS if scenario.cancel_on_tool else 0.0)
        )
        self.tools = make_tools(self.paths["effects"], self._tool_started, wait_bound_seconds=bound)

    # listener side (loop thread / worker threads): never block
    def _listener(self, agent_id: str) -> Callable[[Any], None]:
        return lambda event: self.inbox.put(("event", agent_id, event))

    def _tool_started(self, agent_id: str, execution_id: str) -> None:
        self.inbox.put(("tool_started", agent_id, execution_id))

    def agent_options(self, definition: AgentDef) -> dict[str, Any]:
        """Keyword arguments for Agent.create/load of one scenario agent."""
        return {
            "provider": LoggingProvider(definition.agent_id, definition.script, self.paths["llm"]),
            "runtime": self.runtime,
            "tools": self.tools,
            "handoffs": dict(definition.handoffs),
            "on_event": self._listener(definition.agent_id),
            **(GUARDS if definition.guarded else {}),
        }

    def definition(self, agent_id: str) -> AgentDef:
        """The scenario's definition of ``agent_id``."""
        return next(d for d in self.scenario.agents if d.agent_id == agent_id)

    def track(self, task: Any, agent_id: str, execution_id: str, source: str) -> None:
        """Append what the caller is told when ``task`` settles to the acks log."""
        acks = self.paths["acks"]

        def settled(t: Any) -> None:
            error = t.error(0)
            entry: dict[str, Any] = {
                "agent_id": agent_id,
                "execution_id": execution_id,
                "source": source,
            }
            if error is None:
                result = t.result(0)
                entry.update(status=result.status, execution_id=result.execution_id, error=None)
            else:
                entry.update(
                    status=getattr(error, "status", None),
                    error=type(error).__name__,
                    message=str(error)[:300],
                )
            append_jsonl(acks, entry)

        self.tasks.append(task)
        task.add_done_callback(settled)

    # main-thread side
    def handle(self, kind: str, agent_id: str, item: Any) -> None:
        """Answer one queued event (main thread)."""
        agent = self.agents.get(agent_id)
        if kind == "tool_started":
            if self.scenario.cancel_on_tool and agent is not None:
                accepted = agent.cancel(item)
                self.summary["cancels"].append({"execution_id": item, "accepted": accepted})
            return
        event = item
        if event.type == "approval_required" and agent is not None:
            request_id = event.payload["request"]["id"]
            task = agent.approve_async(
                event.execution_id, approval_request_id=request_id, approved=self.scenario.approve
            )
            self.track(task, agent_id, event.execution_id, "approve")
            self.summary["approvals"].append(
                {"execution_id": event.execution_id, "approved": self.scenario.approve}
            )
        elif event.type == "recovery_resolution_required" and agent is not None:
            self.resolve(agent, event.payload)

    def resolve(self, agent: Agent, payload: dict[str, Any]) -> None:
        """Answer a resolution request truthfully from the logs (:func:`decide_resolution`)."""
        execution_id = payload["execution_id"]
        self.announced[execution_id] = payload
        self.summary["announcements"].append(
            {
                "execution_id": execution_id,
                "reason": payload.get("reason"),
                "subject": payload.get("subject"),
                "revision": payload.get("execution_revision"),
            }
        )
        decision = decide_resolution(
            payload, read_jsonl(self.paths["effects"]), read_jsonl(self.paths["llm"])
        )
        if decision is None or payload.get("execution_revision") is None:
            self.summary["errors"].append(
                {
                    "execution_id": execution_id,
                    "error": "nothing to resolve",
                    "payload_reason": payload.get("reason"),
                }
            )
            return
        task = agent.resolve_async(
            execution_id,
            expected_revision=payload["execution_revision"],
            subject=payload["subject"],
            outcome=decision["outcome"],
            result=decision["result"],
            error="reported failed by the operator" if decision["outcome"] == "failed" else None,
        )
        self.track(task, agent.agent_id, execution_id, "resolve")
        self.summary["resolutions"].append(
            {
                "execution_id": execution_id,
                "subject": payload["subject"],
                "outcome": decision["outcome"],
            }
        )

    def pending_handoffs(self) -> list[tuple[str, str]]:
        """``(target_agent_id, target_execution_id)`` of handed-off executions whose
        target execution does not exist in the store (the library's own scan)."""
        return [
            (p.target_agent_id, p.target_execution_id)
            for p in recovery.pending_handoffs(self.store)
        ]

    def start_handoff_targets(self) -> None:
        """Load the target agents of handoffs a crash acknowledged but never admitted:
        ``Agent.load`` starts them (the library's recovery, not this app's)."""
        for agent_id, execution_id in self.pending_handoffs():
            if agent_id in self.agents:
                continue  # loaded already: the library starts it when the agent is idle
            try:
                self.load(agent_id)
            except Exception as exc:  # noqa: BLE001 - reported in the summary
                self.summary["errors"].append(
                    {"execution_id": execution_id, "error": f"{type(exc).__name__}: {exc}"}
                )
                continue
            self.summary["handoff_targets_started"].append(execution_id)

    def load(self, agent_id: str, active_execution_id: str | None = None) -> Agent:
        """Load (and so recover) one agent, once per process; track the task of its
        recovered execution (``active_execution_id``) when there is one."""
        if agent_id not in self.agents:
            agent = Agent.load(
                agent_id, store=self.store, **self.agent_options(self.definition(agent_id))
            )
            self.agents[agent_id] = agent
            self.summary["loaded"].append(agent_id)
            if agent.recovered is not None and active_execution_id is not None:
                self.track(agent.recovered, agent_id, active_execution_id, "recovered")
        return self.agents[agent_id]

    def settled(self) -> bool:
        """Nothing left to drive: no active execution, no unstarted handoff target, and
        every tracked task settled."""
        if self.store.active_executions() or (self.pending_handoffs() and self.mode == "run"):
            return False
        return all(t.done() for t in self.tasks)

    def pump(self, deadline_seconds: float) -> bool:
        """Handle events until :meth:`settled` or the deadline; True when settled.
        An execution waiting for an operator who cannot answer ends the wait early."""
        end = time.monotonic() + deadline_seconds
        while time.monotonic() < end:
            try:
                kind, agent_id, item = self.inbox.get(timeout=0.05)
            except queue.Empty:
                if self.mode == "recover" and self.pending_handoffs():
                    self.start_handoff_targets()
                if self.settled():
                    return True
                if self.only_waiting_for_nobody():
                    return False
                continue
            try:
                self.handle(kind, agent_id, item)
            except Exception as exc:  # noqa: BLE001 - reported, the run goes on
                self.summary["errors"].append(
                    {"error": f"{type(exc).__name__}: {exc}", "while": kind}
                )
        return self.settled()

    def only_waiting_for_nobody(self) -> bool:
        """Every active execution was announced and could not be answered."""
        active = self.store.active_executions()
        unresolvable = {
            e["execution_id"]
            for e in self.summary["errors"]
            if e.get("error") == "nothing to resolve"
        }
        return bool(active) and all(e.execution_id in unresolvable for e in active)

    def remaining(self) -> list[dict[str, Any]]:
        """Active executions left, with what each waits for (approval, operator or
        nothing)."""
        out = []
        for e in self.store.active_executions():
            if e.status.value == "suspended" and e.phase == "approval":
                waiting = "approval"
            elif e.execution_id in self.announced:
                waiting = "operator"
            else:
                waiting = "nothing"
            out.append(
                {
                    "execution_id": e.execution_id,
                    "agent_id": e.agent_id,
                    "status": e.status.value,
                    "phase": e.phase,
                    "revision": e.revision,
                    "waiting_for": waiting,
                }
            )
        return out

    def finish(self, settled: bool) -> int:
        """Print the summary, close the runtime; return the exit code."""
        self.summary["settled"] = settled
        self.summary["remaining"] = self.remaining()
        print(json.dumps(self.summary, sort_keys=True, default=str), flush=True)
        self.runtime.close(timeout_seconds=5)
        self.store.close()
        return 0 if settled else 3


def fault_plan(crash_at: str | None, trace_path: str | None) -> FaultPlan:
    """The process's fault plan: crash at ``crash_at`` (``NAME[@N]``, or none), and
    append every crash point reached to ``trace_path`` (flushed before the point may
    kill the process)."""
    if not trace_path:
        return FaultPlan.parse(crash_at)
    fh = open(trace_path, "a", encoding="utf-8", buffering=1)  # noqa: SIM115 - lives as long as the process
    lock = threading.Lock()

    def trace(point: str) -> None:
        with lock:
            fh.write(point + "\n")
            fh.flush()

    return FaultPlan.parse(crash_at, trace=trace)


def command_run(scenario: Scenario, db: str) -> int:
    """``run``: create the agents, invoke the first, drive to the end."""
    paths = log_paths(db)
    append_jsonl(paths["meta"], {"scenario": scenario.name})
    driver = Driver(scenario, db, "run")
    for definition in scenario.agents:
        driver.agents[definition.agent_id] = Agent.create(
            definition.agent_id, store=driver.store, **driver.agent_options(definition)
        )
    entry = scenario.agents[0].agent_id
    task = driver.agents[entry].invoke_async(
        scenario.input, execution_id=scenario.execution_id, timeout_seconds=scenario.timeout_seconds
    )
    driver.track(task, entry, scenario.execution_id, "invoke")
    return driver.finish(driver.pump(DEADLINE_SECONDS))


def command_recover(db: str) -> int:
    """``recover``: load every agent with an active execution and drive it."""
    meta = read_jsonl(log_paths(db)["meta"])
    if not meta:
        print(json.dumps({"mode": "recover", "error": "no scenario recorded beside the database"}))
        return 2
    scenario = SCENARIOS[meta[0]["scenario"]]
    driver = Driver(scenario, db, "recover")
    for execution in driver.store.active_executions():
        try:
            driver.load(execution.agent_id, execution.execution_id)
        except Exception as exc:  # noqa: BLE001 - the execution stays; reported
            driver.summary["errors"].append(
                {
                    "execution_id": execution.execution_id,
                    "error": f"load: {type(exc).__name__}: {exc}",
                }
            )
    driver.start_handoff_targets()
    return driver.finish(driver.pump(DEADLINE_SECONDS))


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point (see the module docstring)."""
    parser = argparse.ArgumentParser(description="The crash matrix's agent app.")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="start and drive one scenario")
    run.add_argument("scenario", choices=sorted(SCENARIOS))
    run.add_argument("--db", required=True)
    rec = sub.add_parser("recover", help="recover every active execution and drive it to the end")
    rec.add_argument("--db", required=True)
    args = parser.parse_args(argv)
    global FAULTS
    FAULTS = fault_plan(os.environ.get(CRASH_ENV), os.environ.get(TRACE_ENV))
    if args.command == "run":
        return command_run(SCENARIOS[args.scenario], args.db)
    return command_recover(args.db)


if __name__ == "__main__":
    sys.exit(main())
