"""The barrier shorthand (docs/spec-format.md "Barrier shorthand"): targets as a name, a
mapping or a list; derived outcome events; ``event_prefix``; ``conflict`` and
``outcome_unknown`` defaulting to ``fail_closed``; the long form still working."""

from __future__ import annotations

import textwrap

from phronomy_fsm.codegen import lower

from phronomy_fsm.spec.loader import load_spec_text
from phronomy_fsm.spec.model import MachineSpec
from phronomy_fsm.spec.validate import validate_spec

BASE = textwrap.dedent(
    """\
    spec_format: 1
    machine: shop
    version: 1
    fail_closed: stuck
    events:
      buy: {description: Buy.}
      release: {description: An operator releases it.}
    states:
      idle: {kind: external, initial: true, description: Idle.}
      saving:
        kind: external
        description: Commit first.
        barrier:
          name: save
    BARRIER
      sent: {kind: final, description: Sent.}
      failed: {kind: final, description: Failed.}
      stuck: {kind: wait, description: Fail-closed.}
    transitions:
      - {from: idle, event: buy, to: saving, description: Save first.}
      - {from: stuck, event: release, to: failed, description: Released.}
    """
)


def _spec(barrier: str, base: str = BASE) -> MachineSpec:
    text = base.replace("BARRIER\n", textwrap.indent(textwrap.dedent(barrier), " " * 6))
    loaded = load_spec_text(text)
    assert loaded.spec is not None, [i.render() for i in loaded.issues]
    return loaded.spec


def _rows(spec: MachineSpec) -> list[tuple[str, str | None, str | None, tuple[str, ...]]]:
    return [(t.event, t.target, t.guard, t.actions) for t in lower(spec).transitions]


def _errors(spec: MachineSpec) -> list[tuple[str, str]]:
    return [(i.code, i.path) for i in validate_spec(spec) if i.is_error]


def test_a_name_target_derives_events_and_fail_closed_defaults() -> None:
    spec = _spec("on_committed: sent\non_not_committed: failed\n")
    assert _errors(spec) == []
    assert _rows(spec)[:4] == [
        ("save_committed", "sent", None, ()),
        ("save_not_committed", "failed", None, ()),
        ("save_conflict", "stuck", None, ()),
        ("save_outcome_unknown", "stuck", None, ()),
    ]
    table = lower(spec)
    events = {e.name: e for e in table.events}
    assert events["save_conflict"].payload == "BarrierOutcome"
    assert "save" in events["save_conflict"].description
    assert table.state("saving").barrier == (
        "save",
        "save_committed",
        "save_not_committed",
        "save_conflict",
        "save_outcome_unknown",
    )


def test_mapping_and_list_targets_with_guards_and_actions() -> None:
    spec = _spec(
        """\
        event_prefix: saved
        on_committed:
          - {guard: not paid, to: failed, actions: [refund], description: Unpaid.}
          - {to: sent, actions: [ship, notify]}
        on_not_committed: {to: idle, description: Try again.}
        on_conflict: failed
        """
    )
    assert _errors(spec) == []
    rows = lower(spec).transitions
    assert [(t.event, t.target, t.guard, t.negated, t.actions) for t in rows[:5]] == [
        ("saved_committed", "failed", "paid", True, ("refund",)),
        ("saved_committed", "sent", None, False, ("ship", "notify")),
        ("saved_not_committed", "idle", None, False, ()),
        ("saved_conflict", "failed", None, False, ()),
        ("saved_outcome_unknown", "stuck", None, False, ()),
    ]
    assert rows[0].description == "Unpaid." and rows[1].description  # generated
    assert lower(spec).guards == ("paid",) and "refund" in lower(spec).actions


def test_named_events_and_written_rows_still_work_and_suppress_the_default() -> None:
    spec = _spec(
        """\
        committed: done_saving
        on_committed: sent
        on_not_committed: failed
        """,
        BASE.replace(
            "  buy: {description: Buy.}",
            "  buy: {description: Buy.}\n  done_saving: {description: Saved.}",
        )
        + "  - {from: saving, event: save_conflict, to: failed, description: Written by hand.}\n",
    )
    assert _errors(spec) == []
    rows = _rows(spec)
    assert ("done_saving", "sent", None, ()) in rows
    assert [r for r in rows if r[0] == "save_conflict"] == [("save_conflict", "failed", None, ())]
    assert ("save_outcome_unknown", "stuck", None, ()) in rows


def test_a_declared_derived_event_keeps_its_description() -> None:
    spec = _spec(
        "on_committed: sent\non_not_committed: failed\n",
        BASE.replace(
            "  buy: {description: Buy.}",
            "  buy: {description: Buy.}\n  save_committed: {description: Mine.}",
        ),
    )
    assert _errors(spec) == []
    events = {e.name: e for e in lower(spec).events}
    assert events["save_committed"].description == "Mine."


def test_without_fail_closed_the_unproven_outcomes_are_unhandled() -> None:
    spec = _spec(
        "on_committed: sent\non_not_committed: failed\n", BASE.replace("fail_closed: stuck\n", "")
    )
    errors = [i for i in validate_spec(spec) if i.code == "BARRIER_OUTCOME_UNHANDLED"]
    assert [(i.path, "fail_closed" in i.message) for i in errors] == [
        ("$.states.saving.barrier", True),
        ("$.states.saving.barrier", True),
    ]


def test_guarded_targets_must_end_unguarded() -> None:
    spec = _spec("on_committed: {guard: paid, to: sent}\non_not_committed: failed\n")
    assert ("OUTCOME_NOT_EXHAUSTIVE", "$.states.saving.barrier") in _errors(spec)


def test_a_mistyped_target_is_an_unknown_state_at_its_path() -> None:
    spec = _spec("on_committed: [{guard: paid, to: sentt}, sent]\non_not_committed: failed\n")
    issues = [i for i in validate_spec(spec) if i.code == "UNKNOWN_STATE"]
    assert [i.path for i in issues] == ["$.states.saving.barrier.on_committed[0]"]
    assert "did you mean 'sent'?" in issues[0].message


def test_a_transition_barrier_shorthand_applies_to_its_target() -> None:
    text = BASE.replace("    barrier:\n      name: save\nBARRIER\n", "").replace(
        "  - {from: idle, event: buy, to: saving, description: Save first.}",
        "  - {from: idle, event: buy, to: saving, description: Save first., barrier: {name: save,"
        " on_committed: sent, on_not_committed: failed}}",
    )
    loaded = load_spec_text(text)
    assert loaded.spec is not None, [i.render() for i in loaded.issues]
    assert _errors(loaded.spec) == []
    assert ("save_committed", "sent", None, ()) in _rows(loaded.spec)
    table = lower(loaded.spec)
    assert all(t.sources == ("saving",) for t in table.transitions if t.event.startswith("save_"))


def test_shape_errors_of_targets() -> None:
    for barrier, code, path in (
        ("on_committed: []\n", "WRONG_TYPE", "$.states.saving.barrier.on_committed"),
        ("on_committed: 3\n", "WRONG_TYPE", "$.states.saving.barrier.on_committed"),
        ("on_committed: {guard: x}\n", "MISSING_KEY", "$.states.saving.barrier.on_committed.to"),
        ("on_commited: sent\n", "UNKNOWN_KEY", "$.states.saving.barrier.on_commited"),
    ):
        text = BASE.replace("BARRIER\n", textwrap.indent(barrier, " " * 6))
        loaded = load_spec_text(text)
        found = [(i.code, i.path) for i in loaded.issues]
        assert (code, path) in found, (barrier, found)
    loaded = load_spec_text(BASE.replace("BARRIER\n", "      on_commited: sent\n"))
    assert "did you mean 'on_committed'?" in loaded.issues[0].message
