"""Builders shared by the store tests: agents, executions and barrier commits."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from phronomy_fsm.store.records import (
    AgentLifecycle,
    AgentRecord,
    BarrierCommit,
    ExecutionRecord,
    ExecutionStatus,
    JournalRecord,
)

T0 = datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)


def new_execution(agent_id: str, execution_id: str | None = None, **fields: Any) -> ExecutionRecord:
    """A revision-0 execution (status preparing, phase preparing)."""
    values: dict[str, Any] = {
        "execution_id": execution_id or f"ex-{uuid.uuid4()}",
        "agent_id": agent_id,
        "revision": 0,
        "status": ExecutionStatus.PREPARING,
        "phase": "preparing",
        "spec_version": 1,
        "spec_sha256": "ab" * 32,
        "created_at": T0,
        "updated_at": T0,
        "input": {"messages": [{"role": "user", "content": "hello"}]},
        "metadata": {"recovery_contract_version": 1},
    }
    values.update(fields)
    return ExecutionRecord(**values)


def journal(
    agent_id: str, execution_id: str, kind: str = "assistant_message", **fields: Any
) -> JournalRecord:
    """One journal record (sequence 0: the store assigns it)."""
    return JournalRecord(
        record_id=fields.pop("record_id", f"rec-{uuid.uuid4()}"),
        agent_id=agent_id,
        execution_id=execution_id,
        kind=kind,
        occurred_at=fields.pop("occurred_at", T0),
        **fields,
    )


def admission(
    store: Any, agent_id: str, execution_id: str | None = None
) -> tuple[AgentRecord, ExecutionRecord]:
    """Create the agent and admit one execution (revision 0); return both as stored."""
    agent = store.create_agent(agent_id, now=T0)
    ex = new_execution(agent_id, execution_id)
    root = agent.advance(now=T0, lifecycle=AgentLifecycle.ACTIVE)
    store.commit(BarrierCommit("admission", ex, None, agent=root))
    return store.load_agent(agent_id), store.load_execution(ex.execution_id)


def step(ex: ExecutionRecord, barrier: str = "provider_barrier", **changes: Any) -> BarrierCommit:
    """The next barrier of ``ex`` (active/calling_llm unless ``changes`` say otherwise)."""
    changes.setdefault("status", ExecutionStatus.ACTIVE)
    changes.setdefault("phase", "calling_llm")
    nxt = ex.advance(now=T0, **changes)
    return BarrierCommit(barrier, nxt, ex.revision)


def step_with_journal(
    ex: ExecutionRecord,
    agent: AgentRecord,
    count: int = 2,
    barrier: str = "terminal",
    **changes: Any,
) -> BarrierCommit:
    """The next barrier of ``ex`` with the agent root and ``count`` journal records."""
    changes.setdefault("status", ExecutionStatus.ACTIVE)
    changes.setdefault("phase", "calling_llm")
    nxt = ex.advance(now=T0, **changes)
    records = tuple(
        journal(agent.agent_id, ex.execution_id, content={"n": i}) for i in range(count)
    )
    root = agent.advance(now=T0, journal_head=agent.journal_head + count)
    return BarrierCommit(barrier, nxt, ex.revision, agent=root, journal=records)


def finish(
    ex: ExecutionRecord, agent: AgentRecord, status: ExecutionStatus = ExecutionStatus.CANCELLED
) -> BarrierCommit:
    """A terminal barrier: the execution ends, the agent goes idle, one audit record."""
    nxt = ex.advance(
        now=T0,
        status=status,
        phase=status.value if status is not ExecutionStatus.REJECTED else "completed",
    )
    rec = journal(agent.agent_id, ex.execution_id, kind=f"execution_{status.value}")
    root = agent.advance(now=T0, lifecycle=AgentLifecycle.IDLE, journal_head=agent.journal_head + 1)
    return BarrierCommit("terminal", nxt, ex.revision, agent=root, journal=(rec,))
