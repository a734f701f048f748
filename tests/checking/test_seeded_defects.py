"""The checker finds defects: the generic application with a defect seeded into it
(``tests/checking/generic_app.py``), each reported under the invariant it breaks, on
the machine of ``tests/checking/specs/seeded.yaml`` — and nothing on the same machine
without the defect. Without these a checker that checks nothing would pass."""

from __future__ import annotations

import pytest

from phronomy_fsm.checking import Budget, CheckReport

from .conftest import KILLS, SPECS, check_generic

SEEDED = SPECS / "seeded.yaml"


def broken(report: CheckReport) -> dict[str, int]:
    """The invariants with a violation, and their counts."""
    return {name: count for name, count in report.invariants.items() if count}


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_without_a_defect_every_kill_keeps_every_invariant(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    report = check_generic(monkeypatch, SEEDED)
    assert broken(report) == {}, report.violations
    assert report.points_never_reached == (
        "barrier:@cancel:before",
        "barrier:@cancel:during",
        "barrier:@cancel:after",
    )
    # one kill at each point the undisturbed run reaches, each of which killed
    assert report.fired["kill"] == report.by_kind["kill"] >= 25


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_an_effect_that_ignores_its_idempotency_key_breaks_idempotent_keys(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    few = Budget(crash=2, signal=0, cancel=0, timer=0, takeover=0, two_kills=False)
    report = check_generic(monkeypatch, SEEDED, defect="fresh_key", budget=few)
    assert set(broken(report)) == {"idempotent_keys"}
    violation = report.violations[0]
    assert violation["execution"] == "g-1"
    assert "send ran under key send-" in violation["detail"]
    assert violation["replay"].startswith("phronomy-fsm check ")
    assert f"--only {violation['interleaving']}" in violation["replay"]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_signal_applied_outside_the_context_is_applied_again_after_a_crash(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    report = check_generic(monkeypatch, SEEDED, defect="signal_outside_context")
    assert set(broken(report)) == {"signals_applied"}
    details = {v["detail"] for v in report.violations}
    assert any("consumed 1 time(s), its change applied 2 time(s)" in d for d in details)
    # the kills between the approval and the commit that consumes it
    labels = {v["interleaving"] for v in report.violations}
    assert "main:barrier:@effect:before" in labels


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_an_effect_after_a_wait_that_no_commit_announces_runs_twice_after_a_crash(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the engine before 1f40d06 (an at_most_once effect after a wait ran twice)
    report = check_generic(monkeypatch, SEEDED, defect="unannounced_effect", budget=KILLS)
    assert "duplicate_effects" in broken(report)
    assert "main:offload:ship:after" in {
        v["interleaving"] for v in report.violations if v["invariant"] == "duplicate_effects"
    }


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_worker_that_starts_effects_past_its_lease_runs_one_a_second_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # paused past its lease right after the barrier that announces `charge`: the
    # worker that takes over parks it, the truthful operator answers retry (no trace),
    # and the paused worker, resumed, runs the attempt anyway
    label = "main:takeover=barrier:bill:after"
    report = check_generic(monkeypatch, SEEDED, defect="no_lease_check", only=(label,))
    assert broken(report) == {"duplicate_effects": 1}
    assert "it ran after the question" in report.violations[0]["detail"]
    clean = check_generic(monkeypatch, SEEDED, only=(label,))
    assert broken(clean) == {}
    assert clean.fired == {"takeover": 1}
