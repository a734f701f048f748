"""The agent's crash-injection matrix (``python tools/crash_matrix.py``): its crash points
come from the agent's two generated tables, and a few of its plans — a kill that parks an
LLM call the operator retries, a kill in a wait, in a finishing commit before a handoff's
target starts, in a cancel, after an LLM call an agent may re-send, in the commit of a
wait for a budget and after an MCP server answered a tool call — run through
the harness with every invariant, generic and the agent's, at 0; then the whole
``--quick`` matrix (every point killed once, about a minute on two cores) does. The full
matrix is run by hand (``docs/operations.md``, "The crash-injection matrix")."""

from __future__ import annotations

import crash_matrix
import durable_crash
import pytest
from agent_crash_checks import INVARIANTS

from phronomy_fsm.generated import agent_session, tool_call

PLANS = (
    "tool_cycle:effect:call_llm:before",
    "approval_items:barrier:@wait:after",
    "handoff:barrier:@final:during",
    "cancel:barrier:@cancel:after",
    "llm_resend:offload:call_llm:after",
    "budget_wait:barrier:@wait:during",
    # killed after an MCP server answered, before the answer was applied: the pure and
    # idempotent calls run again (same key), the at_most_once one waits for the operator
    "mcp_tools:offload:execute_tool:after",
)


def test_the_points_are_those_of_the_session_and_the_tool_call() -> None:
    barriers = (*durable_crash.ENGINE_BARRIERS, "@cancel")
    points = durable_crash.crash_points(agent_session.TABLE, barriers)
    points += [p for p in durable_crash.crash_points(tool_call.TABLE, barriers) if p not in points]
    assert len(points) == len(set(points)) == 3 * (6 + 4) + 7
    assert {"effect:call_llm:before", "offload:call_llm:after"} <= set(points)
    assert {"effect:execute_tool:before", "offload:execute_tool:after"} <= set(points)
    assert "offload:filter_input:after" in points
    assert "effect:filter_input:before" not in points  # a pure offload starts no effect
    assert durable_crash.parking_points([agent_session.TABLE, tool_call.TABLE]) == [
        "effect:call_llm:before",
        "effect:execute_tool:before",
    ]


@pytest.mark.timeout(300)
def test_a_few_plans_kill_where_aimed_and_every_invariant_holds() -> None:
    report = crash_matrix.agent_matrix(quick=True, jobs=2, plans=list(PLANS))
    assert report["invariants"] == dict.fromkeys(durable_crash.INVARIANTS + INVARIANTS, 0), report[
        "failures"
    ]
    aimed = {plan.split(":", 1)[1] for plan in PLANS}
    assert set(report["points_killed"]) == aimed
    assert report["kills"] == len(PLANS)
    assert report["runs"] == len(PLANS) + len(PLANS)  # a baseline per scenario, then each plan


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_quick_matrix_kills_every_point_and_every_invariant_holds() -> None:
    report = crash_matrix.agent_matrix(quick=True, jobs=2)
    assert report["invariants"] == dict.fromkeys(durable_crash.INVARIANTS + INVARIANTS, 0), report[
        "failures"
    ]
    barriers = (*durable_crash.ENGINE_BARRIERS, "@cancel")
    points = set(durable_crash.crash_points(agent_session.TABLE, barriers))
    points |= set(durable_crash.crash_points(tool_call.TABLE, barriers))
    assert set(report["points_killed"]) == points
