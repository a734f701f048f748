"""A machine whose effect is a transition's own offload, after a wait: ``announcing``
(barrier) → ``awaiting_approval`` (wait) → ``approve`` → ``shipping``, the transition
starting ``ship`` (idempotent) → ``shipped``; a ``price`` signal takes a transition
whose offload ``quote`` is ``pure`` (no effect: the ``announce`` barrier does not list
it among the effects it announces). The engine announces ``ship`` by an
``@effect`` commit that records which transition's offload it is (``effect_row``), so a
recovery from that commit starts the transition's work again, not the state's (which
has none).

Effects append to the ledger beside the store (``order_app.append_effect``).
``create_app`` is the crash harness's application (scenario ``approved``).
"""

from __future__ import annotations

import textwrap
from typing import Any

from phronomy_fsm.codegen import compile_spec

from phronomy_fsm.durable import Machine
from phronomy_fsm.spec.loader import load_spec_text
from tests.durable.late_effect_app import Hooks
from tests.durable.order_app import ledger_path, read_ledger

SPEC = """
spec_format: 1
machine: transition_effect
version: 1
fail_closed: recovery_required
events:
  approve: {payload: dict}
  shipped_ok: {payload: dict}
  ship_failed: {}
  price: {}
  quoted: {payload: dict}
  quote_failed: {}
  abandon: {}
states:
  start: {kind: auto, initial: true}
  announcing:
    kind: external
    barrier: {name: announce, on_committed: awaiting_approval, on_not_committed: failed}
  awaiting_approval: {kind: wait}
  shipping: {kind: external}
  pricing: {kind: external}
  shipped: {kind: final}
  failed: {kind: final}
  recovery_required: {kind: wait}
transitions:
  - {from: start, event: state_completed, to: announcing}
  - from: awaiting_approval
    event: approve
    to: shipping
    actions: [remember]
    offload: {hook: ship, completed: shipped_ok, failed: ship_failed, effect: idempotent}
  - from: awaiting_approval
    event: price
    to: pricing
    offload: {hook: quote, completed: quoted, failed: quote_failed, effect: pure}
  - {from: pricing, event: quoted, to: awaiting_approval}
  - {from: pricing, event: quote_failed, to: failed}
  - {from: shipping, event: shipped_ok, to: shipped}
  - {from: shipping, event: ship_failed, to: failed}
  - {from: recovery_required, event: abandon, to: failed}
"""


def _table() -> Any:
    loaded = load_spec_text(textwrap.dedent(SPEC), source_name="transition_effect.yaml")
    assert loaded.spec is not None, [i.render() for i in loaded.issues]
    namespace: dict[str, Any] = {}
    exec(compile(compile_spec(loaded.spec), "transition_effect", "exec"), namespace)  # noqa: S102
    return namespace["TABLE"]


TABLE = _table()


class TransitionHooks(Hooks):
    """The late-effect machine's hooks, and ``quote`` (pure: it changes nothing
    outside)."""

    def quote(self, ctx: dict[str, Any], payload: Any) -> Any:
        def work(octx: Any) -> dict[str, Any]:
            return {"price_cents": 1500}

        return work


def create_app(db_path: str) -> Any:
    """The crash harness's application: scenario ``approved`` starts ``tr-1`` and
    approves it when it waits."""
    from phronomy_fsm.durable.app import Answer, DurableApp, EffectEntry, Scenario

    ledger = ledger_path(db_path)

    def start(runtime: Any) -> list[str]:
        runtime.start("transition_effect", {"order": "tr-1"}, execution_id="tr-1")
        return ["tr-1"]

    def approve(record: Any) -> Any:
        return Answer(event="approve", payload={"by": "ops"})

    def operator(record: Any) -> Any:
        return Answer(outcome="failed", error="not expected")

    def effects() -> list[Any]:
        return [
            EffectEntry(e["order"], e["effect"], "idempotent", e["key"], e["attempt"], e["result"])
            for e in read_ledger(ledger)
        ]

    return DurableApp(
        machines=(Machine(TABLE, TransitionHooks(ledger)),),
        scenarios={"approved": Scenario(start, approve)},
        operator=operator,
        effects=effects,
    )
