"""Engine problems found while writing the durable examples, each pinned by a small test
on the examples' machines (docs/examples/).

- a child execution started by a barrier crashed the parent's session (the engine read
  ``orjson.Fragment.contents``, which orjson does not have);
"""

from __future__ import annotations

from pathlib import Path

import review_agent as ra

from phronomy_fsm.durable import DurableEventKind, DurableRuntime, ExecutionStatus
from phronomy_fsm.store import SqliteBarrierStore

from .conftest import Events


def test_a_child_execution_started_by_a_barrier_runs_and_tells_its_parent(
    tmp_path: Path, events: Events
) -> None:
    db = tmp_path / "agent.db"
    effects = ra.AgentEffects.beside(db, ra.scripted_provider())
    store = SqliteBarrierStore(db)
    with DurableRuntime(
        store, machines=ra.agent_machines(effects), listeners=[events], own_store=True
    ) as runtime:
        runtime.start(
            "review_agent", ra.task_context("t-1", "Where is order B7?"), execution_id="t-1"
        )
        events.wait_for(
            lambda e: (
                e.kind is DurableEventKind.WAITING
                and e.execution_id == "t-1"
                and e.record.state == "awaiting_approval"
            )
        )
        children = store.list_records(parent_execution_id="t-1")
        assert [(c.machine, c.status, c.state) for c in children] == [
            ("review_tool", ExecutionStatus.COMPLETED, "done")
        ]
        task = store.load_record("t-1")
        assert task.context["tool_results"][0]["name"] == "lookup_order"
        assert '"in transit"' in task.context["tool_results"][0]["content"]
