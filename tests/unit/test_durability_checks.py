"""Static durability checks (docs/spec-format.md "Effects and durability"): each code
fires on a machine that needs it, and none fires on the shipped specs, the examples in
``docs/examples`` or the golden spec.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from phronomy_fsm.spec.loader import load_spec_text
from phronomy_fsm.spec.validate import check_spec_file, validate_spec
from tests.spec_samples import REAL_SPECS, REPO

DURABILITY_CODES = {
    "EFFECT_WITHOUT_BARRIER",
    "WAIT_STATE_NO_SIGNAL",
    "STATE_NO_RECOVERY",
    "FAIL_CLOSED_STATE",
    "OUTCOME_NOT_EXHAUSTIVE",
}
ALL_SPECS = [
    *REAL_SPECS,
    *sorted((REPO / "docs" / "examples").glob("*.yaml")),
    REPO / "tests" / "golden" / "data" / "golden_machine.yaml",
]

#: A payment: an at-most-once charge, entered only after a committed barrier.
PAYMENT = textwrap.dedent(
    """\
    spec_format: 1
    machine: payment
    version: 1
    fail_closed: stuck
    events:
      pay: {description: Pay.}
      charged: {description: Charged.}
      charge_failed: {description: Charge failed.}
      retry: {description: Retry.}
      resolve: {description: An operator resolves.}
    states:
      created: {kind: external, initial: true, description: Created.}
      committing:
        kind: external
        description: Commit the intent.
        barrier: {name: intent, on_committed: charging, on_not_committed: created}
      charging:
        kind: external
        description: Charge.
        offload: {hook: charge, completed: charged, failed: charge_failed, EFFECT}
      paid: {kind: final, description: Paid.}
      declined: {kind: external, description: Declined.}
      stuck: {kind: wait, description: Fail-closed.}
      gave_up: {kind: final, description: Gave up.}
    transitions:
      - {from: created, event: pay, to: committing, description: Commit first.}
      - {from: charging, event: charged, to: paid, description: Done.}
      - {from: charging, event: charge_failed, to: declined, description: Declined.}
      - {from: declined, event: retry, to: committing, description: Commit again.}
      - {from: declined, event: resolve, to: gave_up, description: Give up.}
      - {from: stuck, event: resolve, to: gave_up, description: Resolved.}
    """
)


def _issues(text: str) -> list[tuple[str, str, str]]:
    loaded = load_spec_text(text)
    assert loaded.spec is not None, [i.render() for i in loaded.issues]
    return [(i.code, i.path, i.message) for i in validate_spec(loaded.spec)]


def _codes(text: str) -> set[str]:
    return {code for code, _, _ in _issues(text)}


@pytest.mark.parametrize("path", ALL_SPECS, ids=[p.stem for p in ALL_SPECS])
def test_no_durability_code_on_the_shipped_specs_and_examples(path: Path) -> None:
    result = check_spec_file(path)
    assert result.ok, [i.render() for i in result.issues]
    assert {i.code for i in result.issues} & DURABILITY_CODES == set()


def test_a_charge_behind_a_committed_barrier_passes() -> None:
    for effect in ("effect: at_most_once", "effect: idempotent", "effect: pure"):
        assert _codes(PAYMENT.replace("EFFECT", effect)) & DURABILITY_CODES == set()


def test_an_effect_entered_without_a_barrier_is_reported_with_its_path() -> None:
    text = PAYMENT.replace("EFFECT", "effect: at_most_once").replace(
        "{from: created, event: pay, to: committing,", "{from: created, event: pay, to: charging,"
    )
    found = [i for i in _issues(text) if i[0] == "EFFECT_WITHOUT_BARRIER"]
    assert [(code, path) for code, path, _ in found] == [
        ("EFFECT_WITHOUT_BARRIER", "$.states.charging.offload")
    ]
    message = found[0][2]
    assert "at_most_once effect 'charge'" in message
    assert "created (initial) --pay--> charging" in message
    assert "add a barrier state" in message and "effect: pure" in message


def test_a_retry_after_the_effect_must_pass_a_barrier_again() -> None:
    retry = PAYMENT.replace("EFFECT", "effect: idempotent").replace(
        "{from: declined, event: retry, to: committing,",
        "{from: declined, event: retry, to: charging,",
    )
    found = [i for i in _issues(retry) if i[0] == "EFFECT_WITHOUT_BARRIER"]
    assert len(found) == 1
    assert "charging --charge_failed--> declined --retry--> charging" in found[0][2]
    # the same loop with a pure effect is fine
    assert "EFFECT_WITHOUT_BARRIER" not in _codes(
        retry.replace("effect: idempotent", "effect: pure")
    )


def test_a_durable_flag_is_no_committed_edge() -> None:
    """Issue 22 items 4 and 9: ``durable: true`` silenced the check (then an error) and
    the effect ran twice under the crash matrix; a flag does not stand in for an
    announcement. The check is a warning now: the engine announces the effect itself."""
    text = PAYMENT.replace("EFFECT", "effect: at_most_once").replace(
        "{from: created, event: pay, to: committing,", "{from: created, event: pay, to: charging,"
    )
    assert "EFFECT_WITHOUT_BARRIER" in _codes(text)
    durable = text.replace("pay: {description: Pay.}", "pay: {durable: true, description: Pay.}")
    loaded = load_spec_text(durable)
    assert loaded.spec is not None
    found = [i for i in validate_spec(loaded.spec) if i.code == "EFFECT_WITHOUT_BARRIER"]
    assert len(found) == 1 and not found[0].is_error
    assert "announce it with an @effect commit" in found[0].message


def test_a_wait_or_an_external_state_does_not_count_as_a_commit() -> None:
    text = (
        PAYMENT.replace("EFFECT", "effect: at_most_once").replace(
            "{from: created, event: pay, to: committing,", "{from: created, event: pay, to: stuck,"
        )
        + "  - {from: stuck, event: pay, to: charging, description: From the wait.}\n"
    )
    assert "EFFECT_WITHOUT_BARRIER" in _codes(text)


def test_an_effect_on_a_transition_is_checked_too() -> None:
    text = PAYMENT.replace(
        "    offload: {hook: charge, completed: charged, failed: charge_failed, EFFECT}\n", ""
    ).replace(
        "{from: created, event: pay, to: committing, description: Commit first.}",
        "{from: created, event: pay, to: charging, description: Charge at once., offload: {hook:"
        " charge, completed: charged, failed: charge_failed}}",
    )
    found = [(code, path) for code, path, _ in _issues(text) if code == "EFFECT_WITHOUT_BARRIER"]
    assert found == [("EFFECT_WITHOUT_BARRIER", "$.transitions[0].offload")]


def test_a_wait_state_left_only_by_engine_events() -> None:
    text = PAYMENT.replace("EFFECT", "effect: pure").replace(
        "{from: stuck, event: resolve, to: gave_up, description: Resolved.}",
        "{from: stuck, event: charged, to: gave_up, description: Never posted to a halted session.}",
    )
    assert ("WAIT_STATE_NO_SIGNAL", "$.states.stuck") in {(c, p) for c, p, _ in _issues(text)}
    timed = (
        text.replace(
            "stuck: {kind: wait, description: Fail-closed.}",
            "stuck: {kind: wait, description: Fail-closed., timeout: {seconds: 60, event: resolve}}",
        )
        + "  - {from: stuck, event: resolve, to: gave_up, description: Timed out.}\n"
    )
    assert "WAIT_STATE_NO_SIGNAL" not in _codes(timed)


def test_an_external_state_nothing_can_move_after_a_restart() -> None:
    text = (
        PAYMENT.replace("EFFECT", "effect: pure")
        .replace(
            "{from: declined, event: retry, to: committing, description: Commit again.}",
            "{from: declined, event: charged, to: committing, description: Only the engine posts it.}",
        )
        .replace(
            "{from: declined, event: resolve, to: gave_up, description: Give up.}",
            "{from: declined, event: charge_failed, to: gave_up, description: Nor this.}",
        )
    )
    assert ("STATE_NO_RECOVERY", "$.states.declined") in {(c, p) for c, p, _ in _issues(text)}


def test_fail_closed_must_name_a_state_that_is_not_final() -> None:
    final = PAYMENT.replace("EFFECT", "effect: pure").replace(
        "fail_closed: stuck", "fail_closed: gave_up"
    )
    assert ("FAIL_CLOSED_STATE", "$.fail_closed") in {(c, p) for c, p, _ in _issues(final)}
    unknown = PAYMENT.replace("EFFECT", "effect: pure").replace(
        "fail_closed: stuck", "fail_closed: stuk"
    )
    found = [m for c, _, m in _issues(unknown) if c == "FAIL_CLOSED_STATE"]
    assert len(found) == 1 and "did you mean 'stuck'?" in found[0]


def test_outcome_rows_must_always_move_on() -> None:
    text = PAYMENT.replace("EFFECT", "effect: pure").replace(
        "{from: charging, event: charged, to: paid,",
        "{from: charging, event: charged, guard: ok, to: paid,",
    )
    assert ("OUTCOME_NOT_EXHAUSTIVE", "$.states.charging.offload") in {
        (c, p) for c, p, _ in _issues(text)
    }


def test_the_initial_states_own_effect_is_behind_the_start_commit() -> None:
    """A child execution (a tool call) runs its effect at once: the engine commits the
    start before the initial state is entered. Coming back to it is not a commit."""
    text = textwrap.dedent(
        """\
        spec_format: 1
        machine: tool
        version: 1
        events:
          done: {description: Done.}
          broke: {description: Broke.}
          again: {description: Again.}
        states:
          running:
            kind: external
            initial: true
            description: Runs the tool.
            offload: {hook: run, completed: done, failed: broke, effect: at_most_once}
          finished: {kind: final, description: Finished.}
          broken: {kind: external, description: Broken.}
        transitions:
          - {from: running, event: done, to: finished, description: Done.}
          - {from: running, event: broke, to: broken, description: Broke.}
          - {from: broken, event: again, to: finished, description: Give up.}
        """
    )
    assert "EFFECT_WITHOUT_BARRIER" not in _codes(text)
    looped = text.replace(
        "{from: broken, event: again, to: finished, description: Give up.}",
        "{from: broken, event: again, to: running, description: Run again.}",
    )
    found = [(c, m) for c, _p, m in _issues(looped) if c == "EFFECT_WITHOUT_BARRIER"]
    assert len(found) == 1 and "--again--> running" in found[0][1]


SEALING = """
spec_format: 1
machine: sealing
version: 1
events:
  open: {description: Someone opens it.}
states:
  start: {kind: auto, initial: true, description: Start.}
  sealing:
    kind: external
    description: Seals it durably.
    barrier: {name: seal, on_committed: sealed, on_not_committed: failed}
  sealed: {kind: wait, description: Sealed.}
  opened: {kind: final, description: Opened.}
  failed: {kind: final, description: Failed.}
transitions:
  - {from: start, event: state_completed, to: sealing, description: Seal.}
  - {from: sealing, event: open, to: opened, description: Never taken.}
  - {from: sealed, event: open, to: opened, description: Opened.}
"""


def test_an_outside_event_in_a_state_its_barrier_always_leaves_is_refused() -> None:
    """Issue 22 item 9: the row is never taken (a state takes no signal while its
    commit is in flight, and every outcome moves on); the validator says so."""
    found = [(code, path) for code, path, _ in _issues(SEALING) if code == "EVENT_IN_BARRIER_STATE"]
    assert found == [("EVENT_IN_BARRIER_STATE", "$.transitions[1]")]
    # a transition back into the state runs the barrier again: still never taken
    again = SEALING.replace("on_not_committed: failed", "on_not_committed: sealing")
    assert "EVENT_IN_BARRIER_STATE" in _codes(again)
    # declared around it, on a compound state, the other states take it: not reported
    around = SEALING.replace(
        "  - {from: sealing, event: open, to: opened, description: Never taken.}\n", ""
    )
    assert "EVENT_IN_BARRIER_STATE" not in _codes(around)
