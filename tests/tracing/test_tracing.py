"""OpenTelemetry spans of durable executions (``phronomy_fsm.tracing``, issue 16 item 4),
checked with the SDK's in-memory exporter on real runs of the order machine — and across
a SIGKILL: a child process of the crash harness exports its spans to a file, the test
recovers the execution with tracing on and finishes it, and no span id appears twice in
the two exports together."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from phronomy_fsm.durable import DurableEventKind, DurableRuntime
from phronomy_fsm.store import SqliteBarrierStore
from phronomy_fsm.tracing import (
    EffectCall,
    SpanDescription,
    commit_span_id,
    effect_span_id,
    execution_span_id,
    gen_ai_agent,
    gen_ai_chat,
    gen_ai_tool,
    instrument,
    trace_id_for,
)
from tests.durable.batch_app import Batch, batch_machines
from tests.durable.conftest import Recorder
from tests.durable.order_app import Order, create_app, order_machine, read_ledger
from tests.tracing.spans_app import SPANS_ENV, read_spans, span_entry

ROOT = Path(__file__).resolve().parents[2]
REST = (DurableEventKind.WAITING, DurableEventKind.RECOVERY_REQUIRED, DurableEventKind.FINISHED)


@pytest.fixture
def memory() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


@pytest.fixture
def runtime_on(tmp_path: Path) -> Iterator[Callable[..., tuple[DurableRuntime, Recorder]]]:
    """``runtime_on(machines, provider, **instrument options)``: a runtime traced into
    ``provider`` whose test recorder listens *after* the tracer (listeners run in order
    on the loop thread), so once the recorder has seen an event its spans are out."""
    opened: list[DurableRuntime] = []

    def make(
        machines: Any, provider: Any = None, **options: Any
    ) -> tuple[DurableRuntime, Recorder]:
        recorder = Recorder()
        runtime = DurableRuntime(
            SqliteBarrierStore(tmp_path / "store.db"), machines=machines, own_store=True
        )
        opened.append(runtime)
        if provider is not None:
            instrument(runtime, tracer_provider=provider, **options)
        runtime.listeners.append(recorder)
        return runtime, recorder

    yield make
    for runtime in opened:
        runtime.close(timeout_seconds=5)


def finished(recorder: Recorder, execution_id: str) -> Any:
    return recorder.wait_for(
        lambda e: e.kind is DurableEventKind.FINISHED and e.execution_id == execution_id, 30
    )


def approve_and_finish(runtime: DurableRuntime, recorder: Recorder, execution_id: str) -> Any:
    recorder.wait_for(
        lambda e: e.kind is DurableEventKind.WAITING and e.execution_id == execution_id, 30
    )
    runtime.signal(execution_id, "approve", {"by": "test"})
    return finished(recorder, execution_id)


# ------------------------------------------------------------------ one run


def test_a_run_emits_one_span_per_execution_commit_and_effect_with_derived_ids(
    runtime_on: Any, memory: Any, tmp_path: Path
) -> None:
    provider, exporter = memory
    runtime, recorder = runtime_on([order_machine(tmp_path / "ledger.jsonl")], provider)
    runtime.start("order_flow", Order("o-1", 1000), execution_id="o-1")
    done = approve_and_finish(runtime, recorder, "o-1")
    record = done.record
    spans = [span_entry(s) for s in exporter.get_finished_spans()]

    # an at_most_once effect's span goes out when its work returns; an idempotent one's
    # with the commit that makes its outcome durable
    assert [s["name"] for s in spans] == [
        "commit @start",
        "commit charge",
        "effect charge_card",  # at_most_once
        "commit paid",
        "commit @wait",
        "effect send_email",  # idempotent: out with the commit after it (@wait)
        "commit ship",
        "effect ship_parcel",  # at_most_once
        "commit @final",
        "invoke_workflow order_flow",
    ]
    trace = f"{trace_id_for('o-1'):032x}"
    root = f"{execution_span_id('o-1'):016x}"
    assert {s["trace_id"] for s in spans} == {trace}
    execution = spans[-1]
    assert (execution["span_id"], execution["parent_span_id"]) == (root, None)
    assert execution["start_ns"] == int(record.created_at.timestamp() * 1e9)
    assert execution["attributes"] == {
        "phronomy.execution.id": "o-1",
        "phronomy.machine": "order_flow",
        "phronomy.state": "shipped",
        "phronomy.revision": 5,
        "phronomy.status": "completed",
        "phronomy.spec.version": 1,
    }
    commits = [s for s in spans if s["name"].startswith("commit ")]
    assert [s["span_id"] for s in commits] == [f"{commit_span_id('o-1', r):016x}" for r in range(6)]
    assert [s["attributes"]["phronomy.barrier"] for s in commits] == [
        "@start", "charge", "paid", "@wait", "ship", "@final",
    ]  # fmt: skip
    assert commits[3]["attributes"]["phronomy.status"] == "waiting"
    ledger = {e["effect"]: e for e in read_ledger(tmp_path / "ledger.jsonl")}
    for span in (s for s in spans if s["name"].startswith("effect ")):
        attrs = span["attributes"]
        entry = ledger[attrs["phronomy.effect.name"]]
        assert attrs["phronomy.effect.key"] == entry["key"]
        assert span["span_id"] == f"{effect_span_id('o-1', entry['key'], 1):016x}"
        assert attrs["phronomy.effect.attempt"] == 1
    assert {s["parent_span_id"] for s in spans[:-1]} == {root}
    assert all(s["status"] == "UNSET" for s in spans)


def test_a_failed_effect_and_a_failed_execution_are_marked_as_errors(
    runtime_on: Any, memory: Any, tmp_path: Path
) -> None:
    provider, exporter = memory
    machine = order_machine(tmp_path / "ledger.jsonl", fail=frozenset({"charge_card"}))
    runtime, recorder = runtime_on([machine], provider)
    runtime.start("order_flow", Order("o-f", 1000), execution_id="o-f")
    assert finished(recorder, "o-f").record.status.value == "failed"
    by_name = {s.name: s for s in exporter.get_finished_spans()}
    effect = by_name["effect charge_card"]
    assert effect.status.status_code.name == "ERROR"
    assert [e.name for e in effect.events] == ["exception"]
    assert "charge_card refused" in effect.events[0].attributes["exception.message"]
    assert by_name["invoke_workflow order_flow"].status.status_code.name == "ERROR"


def test_describers_name_agents_llm_calls_and_tool_calls_with_gen_ai_attributes(
    runtime_on: Any, memory: Any, tmp_path: Path
) -> None:
    provider, exporter = memory

    class OrderBot:
        def execution(self, record: Any) -> SpanDescription:
            return gen_ai_agent("order-bot", agent_id=record.execution_id)

        def effect(self, call: EffectCall) -> SpanDescription:
            if call.effect == "charge_card":  # stands for an LLM call
                return gen_ai_chat(
                    "gpt-test",
                    provider="openai",
                    response_model="gpt-test-2026",
                    input_tokens=12,
                    output_tokens=34,
                    finish_reasons=["stop"],
                )
            return gen_ai_tool(call.effect, call_id=call.key)

    runtime, recorder = runtime_on(
        [order_machine(tmp_path / "ledger.jsonl")], provider, describers={"order_flow": OrderBot()}
    )
    runtime.start("order_flow", Order("o-g", 1000), execution_id="o-g")
    approve_and_finish(runtime, recorder, "o-g")
    by_name = {s.name: s for s in exporter.get_finished_spans()}
    assert set(by_name) >= {"invoke_agent order-bot", "chat gpt-test", "execute_tool send_email"}
    chat = by_name["chat gpt-test"]
    assert chat.kind.name == "CLIENT"
    assert {k: v for k, v in chat.attributes.items() if k.startswith("gen_ai.")} == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-test",
        "gen_ai.response.model": "gpt-test-2026",
        "gen_ai.usage.input_tokens": 12,
        "gen_ai.usage.output_tokens": 34,
        "gen_ai.response.finish_reasons": ("stop",),
    }
    assert chat.attributes["phronomy.effect.name"] == "charge_card"
    agent = by_name["invoke_agent order-bot"]
    assert agent.attributes["gen_ai.agent.id"] == "o-g"
    assert agent.attributes["gen_ai.operation.name"] == "invoke_agent"
    tool = by_name["execute_tool send_email"]
    assert tool.attributes["gen_ai.tool.name"] == "send_email"
    assert tool.attributes["gen_ai.tool.call.id"] == tool.attributes["phronomy.effect.key"]


def test_a_describer_that_raises_falls_back_to_the_default_names(
    runtime_on: Any, memory: Any, tmp_path: Path
) -> None:
    provider, exporter = memory

    class Broken:
        def execution(self, record: Any) -> SpanDescription:
            raise RuntimeError("boom")

        def effect(self, call: EffectCall) -> SpanDescription:
            raise RuntimeError("boom")

    runtime, recorder = runtime_on(
        [order_machine(tmp_path / "ledger.jsonl")], provider, describers={"order_flow": Broken()}
    )
    runtime.start("order_flow", Order("o-b", 1000), execution_id="o-b")
    approve_and_finish(runtime, recorder, "o-b")
    names = {s.name for s in exporter.get_finished_spans()}
    assert {"invoke_workflow order_flow", "effect charge_card"} <= names


def test_child_executions_are_in_their_parents_trace(
    runtime_on: Any, memory: Any, tmp_path: Path
) -> None:
    provider, exporter = memory
    runtime, recorder = runtime_on(batch_machines(tmp_path / "ledger.jsonl"), provider)
    runtime.start("batch_flow", Batch(["x", "y"]), execution_id="batch-1")
    finished(recorder, "batch-1")
    spans = [span_entry(s) for s in exporter.get_finished_spans()]
    assert {s["trace_id"] for s in spans} == {f"{trace_id_for('batch-1'):032x}"}
    executions = {s["attributes"]["phronomy.execution.id"]: s for s in spans if " " in s["name"]
                  and s["name"].startswith("invoke_workflow")}  # fmt: skip
    assert len(executions) == 3
    parent_span = f"{execution_span_id('batch-1'):016x}"
    for eid, span in executions.items():
        if eid == "batch-1":
            assert span["parent_span_id"] is None
        else:
            assert span["parent_span_id"] == parent_span
            assert span["attributes"]["phronomy.parent_execution.id"] == "batch-1"
    assert Counter(s["span_id"] for s in spans).most_common(1)[0][1] == 1


def test_instrument_refuses_a_provider_whose_ids_it_cannot_choose(runtime_on: Any) -> None:
    from opentelemetry.trace import NoOpTracerProvider

    from phronomy_fsm.errors import ConfigurationError

    runtime, _ = runtime_on([])
    with pytest.raises(ConfigurationError, match="SDK's TracerProvider"):
        instrument(runtime, tracer_provider=NoOpTracerProvider())


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
            "tests.tracing.spans_app:create_app",
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


@pytest.mark.parametrize(
    "point",
    [
        "offload:send_email:after",  # idempotent: re-run after recovery, same key
        "barrier:@wait:after",  # the wait committed; its span may or may not be out
        "offload:charge_card:after",  # at_most_once: parked, resolved by an operator
        "offload:ship_parcel:after",  # approved in the child; parked, resolved
    ],
)
def test_a_killed_run_and_its_recovery_emit_every_span_at_most_once(
    tmp_path: Path, memory: Any, point: str
) -> None:
    spans_file = tmp_path / "child-spans.jsonl"
    kill_traced_child(tmp_path, point, spans_file)
    child = read_spans(spans_file)
    assert child, "the child emitted spans before it was killed"

    provider, exporter = memory
    app = create_app(str(tmp_path / "store.db"))
    recorder = Recorder()
    runtime = DurableRuntime(
        SqliteBarrierStore(tmp_path / "store.db"),
        machines=app.machines,
        listeners=[recorder],
        own_store=True,
    )
    try:
        instrument(runtime, tracer_provider=provider)
        runtime.recover()
        while True:  # answer as a person and an operator would, until it finishes
            record = runtime.store.load_record("order-a")
            if record.is_finished:
                break
            if record.status.value == "waiting":
                runtime.signal(
                    "order-a",
                    "approve",
                    {"by": "test"},
                    expected_revision=record.revision,
                    signal_id=f"approve-r{record.revision}",
                )
            elif record.status.value == "recovery_required":
                answer = app.operator(record)
                runtime.resolve(
                    "order-a",
                    expected_revision=record.revision,
                    outcome=answer.outcome,
                    result=answer.result,
                    error=answer.error,
                    signal_id=f"resolve-r{record.revision}",
                )
            recorder.wait_for(
                lambda e, r=record.revision: (
                    e.kind in REST
                    and e.execution_id == "order-a"
                    and e.record is not None
                    and e.record.revision > r
                ),
                30,
            )
    finally:
        runtime.close(timeout_seconds=5)
    parent = [span_entry(s) for s in exporter.get_finished_spans()]
    both = child + parent

    ids = Counter(s["span_id"] for s in both)
    assert [i for i, n in ids.items() if n > 1] == [], [s["name"] for s in both]
    assert {s["trace_id"] for s in both} == {f"{trace_id_for('order-a'):032x}"}
    root = f"{execution_span_id('order-a'):016x}"
    executions = [s for s in both if s["span_id"] == root]
    assert [s["name"] for s in executions] == ["invoke_workflow order_flow"]
    assert executions[0] in parent  # emitted once, by the process that finished it
    assert {s["parent_span_id"] for s in both if s["span_id"] != root} == {root}
    revisions = [
        s["attributes"]["phronomy.revision"] for s in both if s["name"].startswith("commit")
    ]
    assert len(revisions) == len(set(revisions))
    final = executions[0]["attributes"]["phronomy.revision"]
    assert set(revisions) <= set(range(final + 1))
    for s in (s for s in both if s["name"].startswith("commit")):
        assert (
            s["span_id"]
            == f"{commit_span_id('order-a', s['attributes']['phronomy.revision']):016x}"
        )
    ledger = read_ledger(tmp_path / "ledger.jsonl")
    effect_spans = [s for s in both if s["name"].startswith("effect ")]
    for s in effect_spans:
        a = s["attributes"]
        assert (
            s["span_id"]
            == f"{effect_span_id('order-a', a['phronomy.effect.key'], a['phronomy.effect.attempt']):016x}"
        )
        assert any(e["key"] == a["phronomy.effect.key"] for e in ledger)
    if point == "offload:send_email:after":
        # the e-mail really went twice (idempotent, same key); its span went out once
        sends = [e for e in ledger if e["effect"] == "send_email"]
        assert len(sends) == 2 and len({e["key"] for e in sends}) == 1
        assert [s["name"] for s in effect_spans].count("effect send_email") == 1
        assert any(s["name"] == "effect send_email" for s in parent)
