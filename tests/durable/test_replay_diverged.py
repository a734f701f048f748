"""A replay that takes another path than the live run parks the execution instead of
running an effect nobody answered for (issue 22: "the live run and the replay take the
same steps; a replay that diverges parks"; docs/semantics.md "Operator resolution").

The live run passed a barrier, chose ``ship_a`` by a guard and started it (an
``at_most_once`` effect); the process went away with its outcome unknown, so recovery
parked the execution with a question about ``ship_a``. An operator answered
``succeeded``. The code changed meanwhile (the guard now picks ``ship_b``): applying the
answer replays from the barrier, reaches ``ship_b`` instead of the answered effect, and
parks again with ``ReplayDivergedError``'s message — ``ship_b`` never runs.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from phronomy_fsm.durable import DurableRuntime, ExecutionStatus, Machine
from phronomy_fsm.durable.operations import request_resolution
from phronomy_fsm.store import SqliteBarrierStore
from phronomy_fsm.testing.deadlines import scaled_seconds, wait_until
from tests.runtime.conftest import compile_table

CHOOSER = """
machine: chooser
version: 1
fail_closed: recovery_required
events:
  a_done: {payload: dict}
  a_failed: {}
  b_done: {payload: dict}
  b_failed: {}
  abandon: {}
states:
  start: {kind: auto, initial: true}
  announcing:
    kind: external
    barrier: {name: announce, on_committed: choosing, on_not_committed: failed}
  choosing: {kind: auto}
  ship_a:
    kind: external
    offload: {hook: ship_a, completed: a_done, failed: a_failed, effect: at_most_once}
  ship_b:
    kind: external
    offload: {hook: ship_b, completed: b_done, failed: b_failed, effect: at_most_once}
  shipped: {kind: final}
  failed: {kind: final}
  recovery_required: {kind: wait}
transitions:
  - {from: start, event: state_completed, to: announcing}
  - {from: choosing, event: state_completed, guard: prefers_a, to: ship_a}
  - {from: choosing, event: state_completed, to: ship_b}
  - {from: ship_a, event: a_done, to: shipped}
  - {from: ship_a, event: a_failed, to: failed}
  - {from: ship_b, event: b_done, to: shipped}
  - {from: ship_b, event: b_failed, to: failed}
  - {from: recovery_required, event: abandon, to: failed}
"""
TABLE = compile_table(CHOOSER)


class Hooks:
    """``prefers_a`` is the code that changes; each effect appends to the ledger
    (``ship_a`` first waits for ``gate``: the process goes away meanwhile)."""

    def __init__(self, ledger: Path, prefers_a: bool, gate: threading.Event | None = None):
        self.ledger = ledger
        self.a = prefers_a
        self.gate = gate
        self.started = threading.Event()

    def prefers_a(self, ctx: dict[str, Any], payload: Any) -> bool:
        return self.a

    def _effect(self, name: str, gate: threading.Event | None) -> Any:
        def work(octx: Any) -> dict[str, Any]:
            self.started.set()
            if gate is not None:
                gate.wait(scaled_seconds(30))
            with self.ledger.open("a") as out:
                out.write(json.dumps({"effect": name, "key": octx.idempotency_key}) + "\n")
            return {}

        return work

    def ship_a(self, ctx: dict[str, Any], payload: Any) -> Any:
        return self._effect("ship_a", self.gate)

    def ship_b(self, ctx: dict[str, Any], payload: Any) -> Any:
        return self._effect("ship_b", None)


def _runtime(db: Path, hooks: Hooks) -> DurableRuntime:
    return DurableRuntime(SqliteBarrierStore(db), machines=[Machine(TABLE, hooks)], own_store=True)


def test_an_answer_whose_replay_reaches_another_effect_parks_again(tmp_path: Path) -> None:
    db, ledger = tmp_path / "c.db", tmp_path / "ledger.jsonl"
    gate = threading.Event()
    live = Hooks(ledger, prefers_a=True, gate=gate)
    first = _runtime(db, live)
    try:
        first.start("chooser", {}, execution_id="c-1")
        assert live.started.wait(scaled_seconds(10))  # ship_a runs, its outcome unknown
    finally:
        first.close(timeout_seconds=0.5)  # the process goes away with ship_a in flight
    with _runtime(db, Hooks(ledger, prefers_a=True)) as second:
        second.recover()
        wait_until(
            lambda: second.store.load_record("c-1").status is ExecutionStatus.RECOVERY_REQUIRED,
            20,
            "the question about ship_a",
        )
        parked = second.store.load_record("c-1")
    assert parked.recovery.subject.effect == "ship_a"
    request_resolution(
        SqliteBarrierStore(db),
        "c-1",
        expected_revision=parked.revision,
        outcome="succeeded",
        result={},
    )
    # the code changed: the guard now picks ship_b
    with _runtime(db, Hooks(ledger, prefers_a=False)) as third:
        third.recover()
        wait_until(
            lambda: (
                (r := third.store.load_record("c-1")).status is ExecutionStatus.RECOVERY_REQUIRED
                and r.revision > parked.revision + 1
            ),
            20,
            "the replay to park again",
        )
        again = third.store.load_record("c-1")
    gate.set()  # the live run's ship_a finishes now, on its own thread, and writes its line
    wait_until(ledger.exists, 10, "the live run's ship_a to write the ledger")
    assert "reached effect ship_b" in again.recovery.reason
    assert "deterministic" in again.recovery.reason
    assert again.recovery.subject.effect == "ship_a"  # the question still names the answered one
    lines = ledger.read_text().splitlines() if ledger.exists() else []
    ran = [json.loads(line)["effect"] for line in lines]
    assert "ship_b" not in ran
