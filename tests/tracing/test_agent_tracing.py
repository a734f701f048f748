"""OpenTelemetry spans of agents on the durable engine (``phronomy_fsm.tracing``, the
agent describer): an agent run with one tool call exports ``invoke_agent <agent>``,
``chat <model>`` per LLM call and ``execute_tool <tool>`` with their GenAI attributes,
in one trace; and across a SIGKILL in the middle of a run (a child process of the crash
harness, ``tests/tracing/agent_spans_app.py``), the killed run and its recovery together
emit every span at most once and lose at most the one of the step the kill interrupted.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from phronomy_fsm.agent import Agent, AgentRuntime, Reply, ScriptedProvider, Tool, Usage
from phronomy_fsm.durable import DurableEventKind, DurableRuntime
from phronomy_fsm.durable.codec import json_data
from phronomy_fsm.store import SqliteBarrierStore
from phronomy_fsm.tracing import (
    commit_span_id,
    execution_span_id,
    instrument,
    trace_id_for,
)
from tests.durable.conftest import Recorder
from tests.tracing.spans_app import SPANS_ENV, read_spans, span_entry

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # tools.agent_crash_app, imported by the app

REST = (DurableEventKind.WAITING, DurableEventKind.RECOVERY_REQUIRED, DurableEventKind.FINISHED)
OBJECT = {"type": "object", "additionalProperties": True}


def gen_ai(span: Any) -> dict[str, Any]:
    return {k: v for k, v in span["attributes"].items() if k.startswith("gen_ai.")}


# ------------------------------------------------------------------ one run


def test_an_agent_run_with_one_tool_call_exports_gen_ai_spans(tmp_path: Path) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    llm = ScriptedProvider(
        [
            Reply(tool_calls=(("lookup_order", {"order_id": "A1001"}),), usage=Usage(12, 7)),
            Reply(content="Order A1001 was delivered.", usage=Usage(30, 9)),
        ],
        model="scripted-support",
    )
    looked_up: list[Any] = []

    def lookup_order(arguments: Any, context: Any) -> Any:
        looked_up.append(arguments)
        return {"order_id": arguments["order_id"], "status": "delivered"}

    with AgentRuntime(SqliteBarrierStore(tmp_path / "agents.db"), own_store=True) as runtime:
        instrument(runtime, tracer_provider=provider)
        agent = Agent.create(
            "support",
            provider=llm,
            tools=[Tool("lookup_order", lookup_order, "Look an order up.", OBJECT)],
            runtime=runtime,
        )
        result = agent.invoke("Where is A1001?", execution_id="run-1")
        store = runtime.store
        [child] = store.list_records(parent_execution_id="run-1")
        tool_call_id = json_data(child.context)["tool_call_id"]
        final = store.load_record("run-1")
    assert result.output == "Order A1001 was delivered." and len(looked_up) == 1
    spans = [span_entry(s) for s in exporter.get_finished_spans()]
    by_id = {s["span_id"]: s for s in spans}
    assert len(by_id) == len(spans)  # no span twice
    assert {s["trace_id"] for s in spans} == {f"{trace_id_for('run-1'):032x}"}

    agent_span = by_id[f"{execution_span_id('run-1'):016x}"]
    assert agent_span["name"] == "invoke_agent support"
    assert agent_span["parent_span_id"] is None
    assert gen_ai(agent_span) == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "support",
        "gen_ai.agent.id": "support",
        "gen_ai.conversation.id": "run-1",
        "gen_ai.usage.input_tokens": 42,
        "gen_ai.usage.output_tokens": 16,
    }
    assert agent_span["attributes"]["phronomy.agent.outcome"] == "completed"

    chats = [s for s in spans if s["name"].startswith("chat ")]
    assert [s["name"] for s in chats] == ["chat scripted-support"] * 2
    calls = [r["llm_call_id"] for r in json_data(final.context)["llm_responses"]]
    for span, call, (tokens_in, tokens_out, reason) in zip(
        chats, calls, [(12, 7, "tool_calls"), (30, 9, "stop")], strict=True
    ):
        assert span["parent_span_id"] == agent_span["span_id"]
        assert gen_ai(span) == {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "scripted",
            "gen_ai.request.model": "scripted-support",
            "gen_ai.response.model": "scripted-support",
            "gen_ai.usage.input_tokens": tokens_in,
            "gen_ai.usage.output_tokens": tokens_out,
            "gen_ai.response.finish_reasons": (reason,),
            "gen_ai.agent.id": "support",
        }
        assert span["attributes"]["phronomy.llm_call.id"] == call
        assert span["attributes"]["phronomy.effect.name"] == "call_llm"
    kinds = {s.name: s.kind.name for s in exporter.get_finished_spans()}
    assert kinds["chat scripted-support"] == "CLIENT"

    [tool_execution] = [s for s in spans if s["name"] == "tool_call lookup_order"]
    assert tool_execution["span_id"] == f"{execution_span_id(child.execution_id):016x}"
    assert tool_execution["parent_span_id"] == agent_span["span_id"]
    [tool] = [s for s in spans if s["name"].startswith("execute_tool ")]
    assert tool["name"] == "execute_tool lookup_order"
    assert tool["parent_span_id"] == tool_execution["span_id"]
    assert gen_ai(tool) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "lookup_order",
        "gen_ai.tool.call.id": tool_call_id,
        "gen_ai.tool.type": "function",
        "gen_ai.agent.id": "support",
    }
    assert tool["attributes"]["phronomy.tool.invocation_id"] == child.execution_id
    commits = {s["span_id"] for s in spans if s["name"].startswith("commit ")}
    assert commits == {
        f"{commit_span_id(e, b.revision):016x}"
        for e in ("run-1", child.execution_id)
        for b in SqliteBarrierStore(tmp_path / "agents.db", read_only=True).barrier_log(e)
    }


# ------------------------------------------------------------------ across a SIGKILL


def kill_traced_child(tmp_path: Path, point: str, spans_file: Path) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "PHRONOMY_APP_DIR": str(tmp_path),
        SPANS_ENV: str(spans_file),
    }
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tools" / "durable_crash.py"),
            "child",
            "run",
            "--app",
            "tests.tracing.agent_spans_app:create_app",
            "--db",
            str(tmp_path / "store.db"),
            "--dir",
            str(tmp_path),
            "--scenario",
            "traced",
            "--crash-at",
            point,
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == -9, (proc.returncode, proc.stderr[-2000:])


def recover_until_finished(app: Any, db: Path, provider: TracerProvider, execution_id: str) -> None:
    """Recover the store with tracing on and answer as the application's truthful
    operator until ``execution_id`` finished."""
    recorder = Recorder()
    runtime = DurableRuntime(
        SqliteBarrierStore(db),
        machines=app.machines,
        listeners=[*app.listeners, recorder],
        own_store=True,
    )
    try:
        instrument(runtime, tracer_provider=provider)
        runtime.recover(accept=app.accept)
        for _ in range(20):
            store = runtime.store
            if store.load_record(execution_id).is_finished:
                return
            seen = {id(e) for e in recorder.events}
            for record in store.list_records(active=True):
                if record.status.value == "recovery_required":
                    answer = app.operator(record)
                    runtime.resolve(
                        record.execution_id,
                        expected_revision=record.revision,
                        outcome=answer.outcome,
                        result=answer.result,
                        error=answer.error,
                        signal_id=f"resolve-{record.execution_id}-r{record.revision}",
                    )
            recorder.wait_for(lambda e, seen=seen: e.kind in REST and id(e) not in seen, 30)
        raise AssertionError(f"{execution_id} did not finish")
    finally:
        runtime.close(timeout_seconds=5)


#: kill point -> the spans it loses: an at_most_once effect whose work returned but was
#: not yet reported (an operator answers for it: its span never goes out); a final commit
#: acknowledged just before the kill (its event never reached the tracer: the commit's
#: span and the execution span, which only the finishing process emits). A spec
#: barrier's commit is reported before its ``:after`` point, and a kill before the tool
#: runs loses nothing (the operator's retry runs attempt 2, whose span goes out).
KILLS: dict[str, tuple[str, ...]] = {
    "offload:call_llm:after": ("chat",),
    "barrier:tool_dispatch:after": (),
    "effect:execute_tool:before": (),
    "offload:execute_tool:after": ("execute_tool",),
    "barrier:@final:after": ("commit", "execution"),  # the tool call's final commit
}


@pytest.mark.parametrize("point", list(KILLS))
def test_a_killed_agent_run_and_its_recovery_emit_every_span_at_most_once(
    tmp_path: Path, point: str
) -> None:
    from tests.tracing.agent_spans_app import EXECUTION_ID, create_app
    from tools.agent_crash_app import Effects

    spans_file = tmp_path / "child-spans.jsonl"
    kill_traced_child(tmp_path, point, spans_file)
    child = read_spans(spans_file)
    assert child, "the child emitted spans before it was killed"

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    db = tmp_path / "store.db"
    app = create_app(str(db))
    recover_until_finished(app, db, provider, EXECUTION_ID)
    parent = [span_entry(s) for s in exporter.get_finished_spans()]
    both = child + parent

    ids = Counter(s["span_id"] for s in both)
    assert [i for i, n in ids.items() if n > 1] == [], [s["name"] for s in both]
    assert {s["trace_id"] for s in both} == {f"{trace_id_for(EXECUTION_ID):032x}"}

    # what a run without a crash would have emitted, from the store and the records of
    # the outside world (every LLM answer and tool run the application recorded)
    store = SqliteBarrierStore(db, read_only=True)
    try:
        final = store.load_record(EXECUTION_ID)
        executions = [EXECUTION_ID] + [
            r.execution_id for r in store.list_records(parent_execution_id=EXECUTION_ID)
        ]
        expected = {("execution", e) for e in executions}
        expected |= {("commit", e, b.revision) for e in executions for b in store.barrier_log(e)}
    finally:
        store.close()
    assert final.status.value == "completed"
    effects = Effects.beside(str(db))
    expected |= {("chat", e["key"], e["attempt"]) for e in effects.llm.entries()}
    expected |= {("execute_tool", e["key"], e["attempt"]) for e in effects.tools.entries()}

    def identity(span: dict[str, Any]) -> tuple[Any, ...]:
        a = span["attributes"]
        if span["name"].startswith("commit "):
            return ("commit", a["phronomy.execution.id"], a["phronomy.revision"])
        if span["name"].startswith("chat "):
            return ("chat", a["phronomy.llm_call.id"], a["phronomy.effect.attempt"])
        if span["name"].startswith("execute_tool "):
            return ("execute_tool", a["phronomy.tool.invocation_id"], a["phronomy.effect.attempt"])
        return ("execution", a["phronomy.execution.id"])

    emitted = [identity(s) for s in both]
    assert set(emitted) <= expected, set(emitted) - expected
    lost = expected - set(emitted)
    assert sorted(what[0] for what in lost) == sorted(KILLS[point]), lost
    if point == "barrier:@final:after":  # the tool call's end, not the agent's
        assert {what[1] for what in lost} == set(executions[1:])
    names = Counter(s["name"] for s in both)
    assert names["invoke_agent a-cycle"] == 1
    assert names["tool_call charge"] == (0 if "execution" in KILLS[point] else 1)
    assert names["chat scripted"] == 2 - KILLS[point].count("chat")
