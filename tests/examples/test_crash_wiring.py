"""The crash matrix for any spec, as the examples use it: ``tools/crash_matrix.py --spec
--app`` delegates to ``tools/durable_crash.py``, whose points and plans come from the
generated tables (a ``pure`` offload starts no effect; every ``at_most_once`` effect gets
two-kill plans through an operator's retry)."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter

import durable_crash
from machines import order_workflow, review_agent, review_tool

from .conftest import TOOLS, clean_env


def test_a_pure_offload_has_no_effect_point() -> None:
    points = durable_crash.crash_points(review_tool.TABLE)
    assert "offload:read_tool:after" in points
    assert "effect:read_tool:before" not in points
    assert {"effect:act_tool:before", "offload:act_tool:after"} <= set(points)
    assert len(points) == len(set(points)) == 3 * (5 + 1) + 3


def test_the_parking_points_are_the_at_most_once_effects_of_every_machine() -> None:
    assert durable_crash.parking_points([review_tool.TABLE, review_agent.TABLE]) == [
        "effect:call_planner:before",
        "effect:call_reviewer:before",
        "effect:send_reply:before",
    ]


def test_every_at_most_once_effect_gets_a_second_kill_during_its_retry() -> None:
    points = durable_crash.crash_points(order_workflow.TABLE)
    run_trace = Counter({p: 1 for p in points if "recovery" not in p and "resolution" not in p})
    parking = durable_crash.parking_points([order_workflow.TABLE])
    plans = durable_crash.plans_for(points, {"approved": [run_trace]}, quick=True, parking=parking)
    labels = {plan.label() for plan in plans}
    for hook in ("charge_card", "ship_order"):
        assert f"approved:effect:{hook}:before,effect:{hook}:before" in labels
        assert f"approved:effect:{hook}:before,offload:{hook}:after" in labels
    # the points only a recovery reaches follow a kill that parks the order
    assert "approved:effect:charge_card:before,barrier:@resolution:during" in labels
    assert all(len(plan.crashes) <= 2 for plan in plans)


def test_crash_matrix_needs_spec_and_app_together() -> None:
    def matrix(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(TOOLS / "crash_matrix.py"), *args],
            env=clean_env(),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    alone = matrix("--spec", "docs/examples/order_workflow.yaml")
    assert alone.returncode == 2 and "--spec and --app go together" in alone.stderr
    agent_only = matrix("--spec", "x.yaml", "--app", "m:f", "--plan", "a:b")
    assert agent_only.returncode == 2 and "apply to the agent's matrix" in agent_only.stderr
