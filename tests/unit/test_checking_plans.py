"""The interleaving checker's vocabulary and plans (``phronomy_fsm.checking``): labels
read back to the same steps, malformed labels are refused with the form, and the
planned interleavings are what ``docs/operations.md`` ("The interleaving checker")
says: a seeded, bounded sample in the quick form, every one in the full form, no
takeover inside a commit, recovery points reached through a parking kill."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from phronomy_fsm.checking import (
    FULL,
    QUICK,
    Action,
    Budget,
    Interleaving,
    Step,
    parse_interleaving,
)
from phronomy_fsm.checking.interleavings import parse_step
from phronomy_fsm.checking.plans import Baseline, plan_interleavings
from phronomy_fsm.cli import main

ROOT = Path(__file__).resolve().parents[2]
POINTS = [
    "barrier:@start:before",
    "barrier:@start:during",
    "barrier:@start:after",
    "barrier:@recovery:before",
    "barrier:pay:before",
    "barrier:pay:during",
    "barrier:pay:after",
    "effect:charge:before",
    "offload:charge:after",
]
REACHED = Counter({p: 1 for p in POINTS if "@recovery" not in p}) + Counter(
    {"barrier:pay:after": 1}
)


@pytest.mark.parametrize(
    "step",
    [
        Step(Action.KILL, "barrier:pay:during"),
        Step(Action.KILL, "offload:charge:after", 3),
        Step(Action.SIGNAL, "barrier:@wait:during", 1, "approve"),
        Step(Action.SIGNAL, "effect:charge:before", 2, "approve#1"),
        Step(Action.CANCEL, "barrier:@final:before"),
        Step(Action.TIMER, "barrier:@wait:after"),
        Step(Action.TAKEOVER, "barrier:pay:after"),
    ],
)
def test_a_step_reads_back_from_its_label(step: Step) -> None:
    assert parse_step(step.label()) == step


def test_an_interleaving_reads_back_with_an_undisturbed_process() -> None:
    plan = Interleaving(
        "approved",
        (Step(Action.KILL, "effect:charge:before"), None, Step(Action.CANCEL, "barrier:x:after")),
    )
    assert plan.label() == "approved:effect:charge:before,-,cancel=barrier:x:after"
    assert parse_interleaving(plan.label()) == plan
    assert plan.kind == "kill"
    assert parse_interleaving("approved:").kind == "baseline"
    # the crash matrix's labels are interleavings of kills
    assert parse_interleaving("approved:effect:charge:before,barrier:@recovery:after@2").steps == (
        Step(Action.KILL, "effect:charge:before"),
        Step(Action.KILL, "barrier:@recovery:after", 2),
    )


@pytest.mark.parametrize(
    ("label", "says"),
    [
        ("approved", "SCENARIO:STEP"),
        ("approved:nowhere", "not a crash point"),
        ("approved:explode=barrier:x:after", "unknown action 'explode'"),
        ("approved:signal=barrier:x:after", "signal:<event>"),
        ("approved:cancel:x=barrier:x:after", "only a signal step names a signal"),
    ],
)
def test_a_malformed_label_is_refused_with_the_form(label: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        parse_interleaving(label)


def _plan(*, full: bool, seed: int = 1, budget: Budget = QUICK) -> list[Interleaving]:
    return plan_interleavings(
        POINTS,
        [Baseline("a", REACHED), Baseline("b", REACHED)],
        ["approve", "reject"],
        parking=["effect:charge:before"],
        full=full,
        budget=budget,
        has_timers=True,
        seed=seed,
    )


def test_the_quick_form_is_a_bounded_sample_drawn_by_its_seed() -> None:
    small = Budget(crash=3, signal=4, cancel=2, timer=1, takeover=1)
    one, again, other = (_plan(full=False, seed=s, budget=small) for s in (1, 1, 2))
    assert one == again
    assert one != other
    kinds = Counter(p.kind for p in one if len(p.steps) == 1)
    assert kinds == {"kill": 3, "signal": 4, "cancel": 2, "timer": 1, "takeover": 1}
    # one per point before a second at any: the four signals are at four points
    assert len({p.steps[0].point for p in one if p.kind == "signal"}) == 4


def test_the_full_form_sends_every_signal_at_every_point_reached_in_every_scenario() -> None:
    plans = _plan(full=True)
    reached = [p for p in POINTS if REACHED[p]]
    signals = {
        (p.scenario, p.steps[0].point, p.steps[0].signal) for p in plans if p.kind == "signal"
    }
    assert signals >= {(s, p, e) for s in "ab" for p in reached for e in ("approve", "reject")}
    assert FULL.signal is None


def test_takeovers_never_pause_inside_a_commit() -> None:
    takeovers = [p for p in _plan(full=True) if p.kind == "takeover"]
    assert takeovers
    assert all(not p.steps[0].point.endswith(":during") for p in takeovers)


def test_recovery_points_are_reached_through_a_kill_that_parks() -> None:
    plans = _plan(full=True)
    assert (
        Interleaving(
            "a",
            (
                Step(Action.KILL, "effect:charge:before"),
                Step(Action.KILL, "barrier:@recovery:before"),
            ),
        )
        in plans
    )
    assert (
        Interleaving(
            "a",
            (
                Step(Action.KILL, "effect:charge:before"),
                Step(Action.SIGNAL, "barrier:@recovery:before", 1, "approve"),
            ),
        )
        in plans
    )


def test_the_command_refuses_an_unknown_scenario_before_running_anything(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(ROOT)
    result = CliRunner().invoke(
        main,
        [
            "check",
            "docs/examples/order_workflow.yaml",
            "--app",
            "docs.examples.order_workflow:create_app",
            "--only",
            "nosuch:barrier:charge:after",
        ],
    )
    assert result.exit_code == 1
    assert "unknown scenario(s) ['nosuch']" in result.output


def test_the_command_refuses_an_app_without_a_machine_from_the_spec(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(ROOT)
    result = CliRunner().invoke(
        main,
        [
            "check",
            "docs/examples/review_tool.yaml",
            "--app",
            "docs.examples.order_workflow:create_app",
        ],
    )
    assert result.exit_code == 1
    assert "registers no machine generated from" in result.output
