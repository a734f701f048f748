"""The agent invariants of the crash-injection matrix, checked after each run on top of
the generic ones of :mod:`durable_crash` (``docs/operations.md``, "The crash-injection
matrix").

:func:`check_run` reads the store of a finished run and the records of the outside world
that :mod:`agent_crash_app` keeps beside it, counts

- ``llm_sent_twice``: an ``at_most_once`` LLM call (one ``llm_call_id``) sent more often
  than once plus the operator's ``retry`` answers to its execution;
- ``tool_sent_twice``: the same for an ``at_most_once`` tool call (one idempotency key);
- ``resent_new_key``: one logical LLM call (an execution's n-th call) or tool call (an
  execution's call of a tool with given arguments) sent under two keys — a re-send must
  keep the key, whatever its kind;
- ``journal_not_once``: a finished agent execution whose transcript is not in its
  journal exactly once (one ``input_received``, one ``execution_*`` entry, its messages
  those of its stored conversation), or an active one with a transcript;
- ``history_mismatch``: an agent's history (:func:`phronomy_fsm.agent.journal.history`)
  that is not the concatenation of the conversations of its executions that ended
  ``completed`` or ``handed_off`` (the handoff call left out), in order;
- ``handoff_lost``: a committed handoff whose target execution was never started;
- ``budget_miscounted``: a finished agent execution with a budget whose spent counts
  (LLM calls, tool calls started) are not those the outside world saw it make, or that
  made more LLM calls than its final limit allows (``docs/agent.md``, "Budgets");
- ``second_invoke_failed``: after the run, a new ``invoke`` of each of the run's agents
  (loaded with ``Agent.load`` on the same store) that does not complete, or whose LLM
  call does not see the system prompt, the agent's history and the new input;

and writes what it found to ``agent-checks.json`` in the run's folder (kept with
``--keep-failures``).
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from phronomy_fsm.agent import Agent, AgentRuntime
from phronomy_fsm.agent.ids import handoff_target_execution_id
from phronomy_fsm.agent.journal import IN_HISTORY, MESSAGE_KINDS, history
from phronomy_fsm.durable.codec import json_data
from phronomy_fsm.durable.records import ExecutionRecord
from phronomy_fsm.errors import NotFoundError, PhronomyError
from phronomy_fsm.generated import agent_session
from phronomy_fsm.store.open import open_store
from tools.agent_crash_app import AGAIN, AGENTS, Effects, again_answer, agent_options, make_tools

INVARIANTS = (
    "llm_sent_twice",
    "tool_sent_twice",
    "resent_new_key",
    "journal_not_once",
    "history_mismatch",
    "handoff_lost",
    "budget_miscounted",
    "second_invoke_failed",
)
#: Seconds the invoke after the run may take.
INVOKE_SECONDS = 30.0


class Findings:
    """Counts by invariant, and one line per finding."""

    def __init__(self) -> None:
        self.counts = dict.fromkeys(INVARIANTS, 0)
        self.details: list[dict[str, Any]] = []

    def add(self, invariant: str, message: str, count: int = 1, **facts: Any) -> None:
        """Count ``count`` findings of ``invariant``."""
        self.counts[invariant] += count
        self.details.append({"invariant": invariant, "message": message, **facts})


def check_run(db: str, folder: Path) -> dict[str, int]:
    """The agent invariant counts of one finished run on the SQLite store ``db``
    (module docstring); the details go to ``folder/agent-checks.json``."""
    findings = Findings()
    if not Path(db).exists():
        return findings.counts
    effects = Effects.beside(db)
    store = open_store(db, read_only=True)
    with store:
        records = store.list_records()
        retries = _retries(store, records)
        sessions = [r for r in records if r.machine == agent_session.MACHINE]
        _check_sends(effects, retries, findings)
        for record in sessions:
            _check_journal(store, record, findings)
        agents = sorted({str(r.labels.get("agent_id")) for r in sessions})
        histories = {a: [m.to_json() for m in history(store, a)] for a in agents}
        for agent_id in agents:
            _check_history(agent_id, sessions, histories[agent_id], findings)
        _check_handoffs(store, sessions, findings)
        _check_budgets(effects, sessions, findings)
        idle = [a for a in agents if not any(r.is_active for r in sessions if _agent(r) == a)]
    for agent_id in idle:
        _invoke_again(db, effects, agent_id, histories[agent_id], findings)
    (folder / "agent-checks.json").write_text(json.dumps(findings.details, indent=2))
    return findings.counts


def _agent(record: ExecutionRecord) -> str:
    return str(record.labels.get("agent_id"))


def _retries(store: Any, records: list[ExecutionRecord]) -> Counter[str]:
    """Consumed ``retry`` resolutions, by execution."""
    retries: Counter[str] = Counter()
    for record in records:
        for signal in store.list_signals(record.execution_id):
            payload = signal.payload if isinstance(signal.payload, dict) else {}
            if (
                signal.kind.value == "resolution"
                and payload.get("outcome") == "retry"
                and signal.outcome == "consumed"
            ):
                retries[record.execution_id] += 1
    return retries


def _check_sends(effects: Effects, retries: Counter[str], findings: Findings) -> None:
    llm = effects.llm.entries()
    tools = effects.tools.entries()
    for invariant, entries in (("llm_sent_twice", llm), ("tool_sent_twice", tools)):
        by_key: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for entry in entries:
            if entry["kind"] == "at_most_once":
                by_key[entry["key"]].append(entry)
        for key, sent in by_key.items():
            allowed = 1 + retries[sent[0]["execution_id"]]
            if len(sent) > allowed:
                findings.add(
                    invariant,
                    f"sent {len(sent)} times with {allowed - 1} retry answer(s)",
                    len(sent) - allowed,
                    key=key,
                    execution_id=sent[0]["execution_id"],
                )
    logical: dict[tuple[Any, ...], set[str]] = defaultdict(set)
    for entry in llm:
        if entry["execution_id"] is not None:  # None: the checks' own invoke after the run
            logical[("llm", entry["execution_id"], entry["call_index"])].add(entry["key"])
    for entry in tools:
        arguments = json.dumps(entry.get("arguments"), sort_keys=True)
        logical[("tool", entry["parent_execution_id"], entry["tool"], arguments)].add(entry["key"])
    for what, keys in logical.items():
        if len(keys) > 1:
            findings.add(
                "resent_new_key",
                f"{what[0]} call sent under {len(keys)} keys",
                len(keys) - 1,
                call=list(what),
                keys=sorted(keys),
            )


def _check_budgets(effects: Effects, sessions: list[ExecutionRecord], findings: Findings) -> None:
    llm_keys: dict[str, set[str]] = defaultdict(set)
    for entry in effects.llm.entries():
        llm_keys[str(entry["execution_id"])].add(entry["key"])
    tool_keys: dict[str, set[str]] = defaultdict(set)
    for entry in effects.tools.entries():
        tool_keys[str(entry["parent_execution_id"])].add(entry["key"])
    for record in sessions:
        ctx = _context(record)
        budget = ctx.get("budget")
        if record.is_active or not isinstance(budget, dict):
            continue
        eid = record.execution_id
        made = (len(llm_keys[eid]), len(tool_keys[eid]))
        # a call announced but never sent (the operator said not_performed) is spent
        counted = (int(ctx.get("llm_calls") or 0), int(ctx.get("tool_calls_started") or 0))
        limit = (budget.get("limits") or {}).get("max_llm_calls")
        if counted[0] < made[0] or counted[1] != made[1] or (limit is not None and made[0] > limit):
            findings.add(
                "budget_miscounted",
                f"spent (LLM calls, tool calls) {counted}, made {made}, LLM call limit {limit}",
                execution_id=eid,
            )


def _context(record: ExecutionRecord) -> dict[str, Any]:
    ctx = json_data(record.context)
    return ctx if isinstance(ctx, dict) else {}


def _check_journal(store: Any, record: ExecutionRecord, findings: Findings) -> None:
    entries = store.journal_entries(record.execution_id)
    kinds = Counter(e.kind for e in entries)
    ends = sum(n for kind, n in kinds.items() if kind.startswith("execution_"))
    eid = record.execution_id
    if record.is_active:
        if entries:
            findings.add(
                "journal_not_once", "an active execution has a transcript", execution_id=eid
            )
        return
    if kinds["input_received"] != 1 or ends != 1:
        findings.add(
            "journal_not_once",
            f"{kinds['input_received']} input_received and {ends} execution_* entries",
            execution_id=eid,
        )
        return
    journaled = [
        e.data["message"] for e in entries if e.kind in MESSAGE_KINDS and isinstance(e.data, dict)
    ]
    if journaled != _context(record).get("messages", []):
        findings.add(
            "journal_not_once",
            "the journaled messages differ from the conversation",
            execution_id=eid,
        )


def _check_history(
    agent_id: str, sessions: list[ExecutionRecord], got: list[dict[str, Any]], findings: Findings
) -> None:
    expected: list[dict[str, Any]] = []
    for record in sessions:  # oldest first, as the history is read
        ctx = _context(record)
        if _agent(record) != agent_id or record.status.value != "completed":
            continue
        if ctx.get("outcome") not in {outcome.value for outcome in IN_HISTORY}:
            continue
        messages = list(ctx.get("messages", []))
        if ctx.get("outcome") == "handed_off":
            messages = messages[:-1]  # the handoff call has no tool result
        expected += messages
    if got != expected:
        findings.add(
            "history_mismatch",
            f"history has {len(got)} messages, the completed conversations {len(expected)}",
            agent_id=agent_id,
        )


def _check_handoffs(store: Any, sessions: list[ExecutionRecord], findings: Findings) -> None:
    for record in sessions:
        ctx = _context(record)
        if record.state != "handed_off" or record.status.value != "completed":
            continue
        handoff = ctx.get("handoff") or {}
        target = handoff_target_execution_id(
            record.execution_id, str(handoff.get("target_agent_id"))
        )
        try:
            store.load_record(target)
        except NotFoundError:
            findings.add(
                "handoff_lost", "the handoff's target was never started", execution_id=target
            )


def _invoke_again(
    db: str, effects: Effects, agent_id: str, before: list[dict[str, Any]], findings: Findings
) -> None:
    """Invoke ``agent_id`` once more through the public API on the run's store."""

    def sent() -> list[dict[str, Any]]:
        again = {"role": "user", "content": AGAIN}
        return [
            e
            for e in effects.llm.entries()
            if e["agent_id"] == agent_id and e["messages"][-1] == again
        ]

    earlier = len(sent())
    execution_id = f"again-{agent_id}-{earlier + 1}"
    runtime = AgentRuntime(open_store(db), own_store=True, lease_seconds=5.0)
    try:
        agent = Agent.load(
            agent_id,
            runtime=runtime,
            **agent_options(AGENTS[agent_id], effects, make_tools(effects)),
        )
        result = agent.invoke(AGAIN, execution_id=execution_id, wait_seconds=INVOKE_SECONDS)
    except PhronomyError as exc:
        findings.add("second_invoke_failed", f"{type(exc).__name__}: {exc}", agent_id=agent_id)
        return
    finally:
        runtime.close(timeout_seconds=5)
    answer = again_answer(AGENTS[agent_id])
    for output_filter in AGENTS[agent_id].options.get("output_filters", ()):
        answer = output_filter(answer)
    if result.status.value != "completed" or result.output != answer:
        findings.add(
            "second_invoke_failed",
            f"ended {result.status.value} with {result.output!r}",
            agent_id=agent_id,
        )
        return
    calls = sent()
    expected = [
        *(m.to_json() for m in agent.config.head()),  # the system prompt (and output schema)
        *before,
        {"role": "user", "content": AGAIN},
    ]
    if len(calls) != earlier + 1 or calls[-1]["messages"] != expected:
        findings.add(
            "second_invoke_failed",
            "its LLM call did not see the system prompt, the history and the input",
            agent_id=agent_id,
            calls=len(calls) - earlier,
        )


__all__ = ["INVARIANTS", "check_run"]
