"""Engine problems found while writing the durable examples, each pinned by a small test
on the examples' machines (docs/examples/).

- a child execution started by a barrier crashed the parent's session (the engine read
  ``orjson.Fragment.contents``, which orjson does not have);
- a signal that was waiting in the inbox when a transition entered a wait state was
  consumed by that state's ``@wait`` commit without ever being applied;
- a signal arriving while a session resumed from a wait state with another signal was
  posted into that session: dropped, or delivered in the next state (which failed the
  execution with UndeclaredEventError);
- an ``at_most_once`` effect retried on an operator's ``retry`` ran again, blindly, when
  the process died during the retried attempt (the committed resolution was applied
  again by every later recovery).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import durable_crash
import order_workflow as ow
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


def test_a_signal_sent_before_its_wait_state_is_reached_is_applied_there(
    tmp_path: Path, events: Events
) -> None:
    """The person approves while the confirmation is still being sent: the approval
    waits in the inbox (selective receive) and must take the order on when it reaches
    ``awaiting_approval``, not be consumed there unread."""
    mailed = threading.Event()

    effects = ow.ShopEffects.beside(tmp_path / "shop.db")
    hooks = ow.order_hooks(effects)
    send_confirmation = hooks["send_confirmation"]

    def gated(snapshot: Any, ectx: Any) -> Any:
        mailed.wait(10)
        return send_confirmation(snapshot, ectx)

    machine = ow.order_machine(effects, {**hooks, "send_confirmation": gated})
    store = SqliteBarrierStore(tmp_path / "shop.db")
    with DurableRuntime(store, machines=[machine], listeners=[events], own_store=True) as runtime:
        runtime.start(
            "order_workflow", ow.Order("o-1", 1000, "o-1@example.invalid"), execution_id="o-1"
        )
        events.wait_for(
            lambda e: (
                e.kind is DurableEventKind.EFFECT_STARTED
                and e.detail["effect"] == "send_confirmation"
            )
        )
        runtime.signal("o-1", "approve", {"by": "early bird"})
        mailed.set()
        # unapplied, the approval would leave the order waiting until its 10-second
        # timer refunds it
        # unapplied, the approval would leave the order waiting until its 10-second
        # timer refunds it
        events.wait_for(lambda e: e.kind is DurableEventKind.FINISHED, 30)
        order = store.load_record("o-1")
        assert (order.state, order.context["decision"]) == ("delivered", {"by": "early bird"})


def test_a_retried_at_most_once_effect_is_not_run_again_after_a_second_crash(
    tmp_path: Path,
) -> None:
    """The card charge is killed before it starts, the operator answers ``retry`` (the
    ledger proves it never happened), the process dies right after the retried charge
    returned: the next recovery must park the order again, not charge a second time."""
    app = "docs.examples.order_workflow:create_app"
    plan = durable_crash.Plan(
        "approved", ("effect:charge_card:before", "offload:charge_card:after")
    )
    outcome = durable_crash.run_plan(app, plan, tmp_path / "run")
    assert outcome["killed"] == 2, outcome
    charges = [
        e
        for e in ow.ShopEffects.beside(tmp_path / "run" / "store.db").card.entries()
        if e["effect"] == "charge_card"
    ]
    assert [(c["attempt"], c["key"]) for c in charges] == [(2, charges[0]["key"])], charges
    assert outcome["findings"] == dict.fromkeys(durable_crash.INVARIANTS, 0), outcome


def test_a_signal_arriving_while_a_wait_state_resumes_is_not_fed_to_the_session(
    tmp_path: Path, events: Events
) -> None:
    """Two decisions reach a waiting order in the same turn of the loop: the first
    resumes the wait state's session; the second must stay in the inbox (the order has
    moved on: it is dropped when the order finishes), not be posted to the resuming
    session, where it arrived in ``shipping`` and failed the order."""
    effects = ow.ShopEffects.beside(tmp_path / "shop.db")
    store = SqliteBarrierStore(tmp_path / "shop.db")
    with DurableRuntime(
        store, machines=[ow.order_machine(effects)], listeners=[events], own_store=True
    ) as runtime:
        runtime.start(
            "order_workflow", ow.Order("o-1", 1000, "o-1@example.invalid"), execution_id="o-1"
        )
        events.wait_for(lambda e: e.kind is DurableEventKind.WAITING)
        loop_free = threading.Event()
        runtime.dispatcher.call_soon(loop_free.wait, 10)  # hold the loop: both arrive together
        runtime.signal("o-1", "approve", {"by": "ana"})
        runtime.signal("o-1", "reject", {"by": "bo"})
        loop_free.set()
        events.wait_for(lambda e: e.kind is DurableEventKind.FINISHED, 30)
        order = store.load_record("o-1")
        deadline = time.monotonic() + 10  # the finished order's inbox is closed off the loop
        while any(s.outcome is None for s in store.list_signals("o-1")):
            assert time.monotonic() < deadline, store.list_signals("o-1")
            threading.Event().wait(0.01)
        signals = [(s.event, s.outcome) for s in store.list_signals("o-1")]
    assert (order.status, order.state) == (ExecutionStatus.COMPLETED, "delivered"), order.error
    assert signals == [("approve", "consumed"), ("reject", "dropped: finished in delivered")]
