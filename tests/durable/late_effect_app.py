"""A machine whose at_most_once effect comes after a wait, not right after a barrier:
``announcing`` (barrier) → ``awaiting_approval`` (wait, with a timer) → ``approve`` →
``shipping`` (``ship``, at_most_once) → ``shipped``. The validator accepts it (a
committed edge precedes the effect); only the engine's own announcement of the effect
keeps a crash after the effect from running it again (issue 22 item 1;
docs/semantics.md "Effects").

Effects append to the ledger beside the store (``order_app.append_effect``), so a test
counts what really happened. ``create_app`` is the crash harness's application.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

from phronomy_fsm.codegen import compile_spec

from phronomy_fsm.durable import Machine
from phronomy_fsm.spec.loader import load_spec_text
from tests.durable.order_app import append_effect, ledger_path, read_ledger

SPEC = """
spec_format: 1
machine: late_effect
version: 1
fail_closed: recovery_required
events:
  approve: {payload: dict}
  reject: {payload: dict}
  expired: {}
  shipped_ok: {payload: dict}
  ship_failed: {}
  abandon: {}
states:
  start: {kind: auto, initial: true}
  announcing:
    kind: external
    barrier: {name: announce, on_committed: awaiting_approval, on_not_committed: failed}
  awaiting_approval:
    kind: wait
    timeout: {seconds: 3600, event: expired}
  shipping:
    kind: external
    offload: {hook: ship, completed: shipped_ok, failed: ship_failed, effect: at_most_once}
  shipped: {kind: final}
  failed: {kind: final}
  recovery_required: {kind: wait}
transitions:
  - {from: start, event: state_completed, to: announcing}
  - {from: awaiting_approval, event: approve, to: shipping, actions: [remember]}
  - {from: awaiting_approval, event: reject, to: failed}
  - {from: awaiting_approval, event: expired, to: failed}
  - {from: shipping, event: shipped_ok, to: shipped}
  - {from: shipping, event: ship_failed, to: failed}
  - {from: recovery_required, event: abandon, to: failed}
"""


#: The same effect behind a person's signal declared ``durable: true`` and no barrier
#: at all: the flag made the validator count the signal as a committed edge (no
#: ``EFFECT_WITHOUT_BARRIER``), and the effect then ran twice under the crash matrix
#: (issue 22 item 4). The engine announces the effect whatever the flag says.
DURABLE_SPEC = """
spec_format: 1
machine: late_effect_durable
version: 1
fail_closed: recovery_required
events:
  approve: {payload: dict, durable: true}
  expired: {}
  noted: {payload: dict}
  note_failed: {}
  shipped_ok: {payload: dict}
  ship_failed: {}
  abandon: {}
states:
  noting:
    kind: external
    initial: true
    offload: {hook: note, completed: noted, failed: note_failed, effect: at_most_once}
  awaiting_approval:
    kind: external
    timeout: {seconds: 3600, event: expired}
  shipping:
    kind: external
    offload: {hook: ship, completed: shipped_ok, failed: ship_failed, effect: at_most_once}
  shipped: {kind: final}
  failed: {kind: final}
  recovery_required: {kind: wait}
transitions:
  - {from: noting, event: noted, to: awaiting_approval}
  - {from: noting, event: note_failed, to: recovery_required}
  - {from: awaiting_approval, event: approve, to: shipping, actions: [remember]}
  - {from: awaiting_approval, event: expired, to: failed}
  - {from: shipping, event: shipped_ok, to: shipped}
  - {from: shipping, event: ship_failed, to: failed}
  - {from: recovery_required, event: abandon, to: failed}
"""


def _table(spec: str = SPEC) -> Any:
    loaded = load_spec_text(textwrap.dedent(spec), source_name="late_effect.yaml")
    assert loaded.spec is not None, [i.render() for i in loaded.issues]
    namespace: dict[str, Any] = {}
    exec(compile(compile_spec(loaded.spec), "late_effect", "exec"), namespace)  # noqa: S102
    return namespace["TABLE"]


#: The late effect declared idempotent: after a crash it runs again with the key its
#: announcement derived, never a new one.
IDEMPOTENT_SPEC = SPEC.replace("machine: late_effect", "machine: late_effect_idempotent").replace(
    "offload: {hook: ship, completed: shipped_ok, failed: ship_failed, effect: at_most_once}",
    "offload: {hook: ship, completed: shipped_ok, failed: ship_failed, effect: idempotent}",
)

TABLE = _table()
DURABLE_TABLE = _table(DURABLE_SPEC)
IDEMPOTENT_TABLE = _table(IDEMPOTENT_SPEC)


class Hooks:
    """``remember`` keeps the approval; ``note`` does nothing outside; ``ship``
    appends to the ledger."""

    def __init__(self, ledger: Path) -> None:
        self.ledger = ledger

    def remember(self, ctx: dict[str, Any], payload: Any) -> None:
        ctx["approved_by"] = payload.get("by")

    def note(self, ctx: dict[str, Any], payload: Any) -> Any:
        ledger, order = self.ledger, ctx["order"]

        def work(octx: Any) -> dict[str, Any]:
            entry = {"effect": "note", "order": order, "key": octx.effect.key}
            append_effect(ledger, {**entry, "attempt": octx.effect.attempt, "result": {}})
            return {"noted": True}

        return work

    def ship(self, ctx: dict[str, Any], payload: Any) -> Any:
        ledger, order = self.ledger, ctx["order"]

        def work(octx: Any) -> dict[str, Any]:
            value = {"tracking": f"T-{order}", "key": octx.effect.key}
            append_effect(
                ledger,
                {
                    "effect": "ship",
                    "order": order,
                    "key": octx.effect.key,
                    "attempt": octx.effect.attempt,
                    "result": value,
                },
            )
            return value

        return work


def create_app(db_path: str) -> Any:
    """The crash harness's application: scenario ``approved`` starts ``late-1`` and
    approves it when it waits."""
    from phronomy_fsm.durable.app import Answer, DurableApp, EffectEntry, Scenario

    ledger = ledger_path(db_path)

    def start(machine: str) -> Any:
        def run(runtime: Any) -> list[str]:
            runtime.start(machine, {"order": "late-1"}, execution_id="late-1")
            return ["late-1"]

        return run

    def approve(record: Any) -> Any:
        return Answer(event="approve", payload={"by": "ops"})

    def operator(record: Any) -> Any:
        subject = record.recovery.subject if record.recovery is not None else None
        done = [e for e in read_ledger(ledger) if subject and e["key"] == subject.key]
        if done:
            return Answer(outcome="succeeded", result=done[-1]["result"])
        return Answer(outcome="retry")

    def effects() -> list[Any]:
        return [
            EffectEntry(
                e["order"], e["effect"], "at_most_once", e["key"], e["attempt"], e["result"]
            )
            for e in read_ledger(ledger)
        ]

    return DurableApp(
        machines=(
            Machine(TABLE, Hooks(ledger)),
            Machine(DURABLE_TABLE, Hooks(ledger)),
            Machine(IDEMPOTENT_TABLE, Hooks(ledger)),
        ),
        scenarios={
            "approved": Scenario(start("late_effect"), approve),
            "durable_approved": Scenario(start("late_effect_durable"), approve),
            "idempotent_approved": Scenario(start("late_effect_idempotent"), approve),
        },
        operator=operator,
        effects=effects,
    )
