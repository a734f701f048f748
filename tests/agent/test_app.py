"""Agents as a durable application (agent/app.py; docs/agent.md, "Running agents
elsewhere"): a runtime built from ``agent_app`` — what ``recover --app`` and ``worker
--app`` use — claims only its agents' executions and starts the handoffs they committed.
A real SQLite file; the store is read back."""

from __future__ import annotations

import threading
from typing import Any

from phronomy_fsm.agent import Agent, AgentConfig, AgentRuntime, Reply, ScriptedProvider
from phronomy_fsm.agent.app import agent_app
from phronomy_fsm.durable.records import ExecutionStatus
from phronomy_fsm.operator import recover_store


def _front() -> AgentConfig:
    return AgentConfig.build(
        "front",
        ScriptedProvider([Reply(tool_calls=(("to_billing", {"message": "invoice?"}),))]),
        handoffs={"to_billing": "billing"},
    )


def _billing(answer: str = "billing here") -> AgentConfig:
    return AgentConfig.build("billing", ScriptedProvider([Reply(content=answer)]))


def test_recover_with_an_agent_app_starts_a_handoff_nobody_started(store: Any) -> None:
    runtime = AgentRuntime(store)
    try:
        front = Agent.create(
            "front", runtime=runtime, provider=_front().provider, handoffs={"to_billing": "billing"}
        )
        other = AgentRuntime(store)  # billing exists, but is not loaded where front runs
        Agent.create("billing", runtime=other, provider=_billing().provider)
        other.close()
        result = front.invoke("I have a question about an invoice", wait_seconds=10)
        target = result.handoff["target_execution_id"]
    finally:
        runtime.close()
    threading.Event().wait(0.1)
    assert [r.execution_id for r in store.list_records(exclusive_key="billing")] == []

    report = recover_store(store, agent_app(store, [_front(), _billing()]), wait_seconds=10)
    assert report is not None
    for _ in range(500):
        records = store.list_records(exclusive_key="billing")
        if records and records[0].is_finished:
            break
        threading.Event().wait(0.02)
    [record] = store.list_records(exclusive_key="billing")
    assert (record.execution_id, record.status) == (target, ExecutionStatus.COMPLETED)
    assert record.context["input"] == "invoice?"


def test_an_agent_app_claims_only_its_agents_executions(store: Any) -> None:
    started, release = threading.Event(), threading.Event()

    def slow(request: Any, index: int) -> Reply:
        started.set()
        release.wait(10)
        return Reply(content="late")

    runtime = AgentRuntime(store)
    try:
        for agent_id in ("mine", "theirs"):
            Agent.create(agent_id, runtime=runtime, provider=ScriptedProvider([slow]))
        # start one execution each, then stop while their LLM calls are in flight
        mine = Agent.load("mine", runtime=runtime, provider=ScriptedProvider([slow]))
        theirs = Agent.load("theirs", runtime=runtime, provider=ScriptedProvider([slow]))
        mine.submit("x")
        theirs.submit("y")
        assert started.wait(10)
        runtime.close(timeout_seconds=0.2)
    finally:
        release.set()
        runtime.close()
    app = agent_app(
        store,
        [AgentConfig.build("mine", ScriptedProvider([Reply(content="done")]), llm_resend="resend")],
    )
    recover_store(store, app, wait_seconds=10)
    [mine_record] = store.list_records(exclusive_key="mine")
    [theirs_record] = store.list_records(exclusive_key="theirs")
    assert mine_record.status is ExecutionStatus.COMPLETED  # re-sent and finished here
    assert theirs_record.is_active  # not claimed: this app has no configuration for it
