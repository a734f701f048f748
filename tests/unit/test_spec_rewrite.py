"""The agent's first specs, rewritten with compound states and barrier shorthands (issue
13), and the examples ``payout`` and ``order_workflow`` rewritten with the effect
shorthand (issue 23, keeping their barrier states), lower to the same tables as before
that rewrite; the only difference an effect shorthand makes is ``OffloadRow.direct``
(its hook is a plain effect function), checked state by state.

The rewritten specs are kept under ``tests/fixtures/specs/<machine>_v1.yaml`` (the agent
has since been re-founded on the durable engine with new specs: ``fsm_specs/``); they
stay a test of the spec language: a hierarchical spec lowers to the same flat table.

``tests/golden/data/lowered_before/<machine>.json`` is a frozen copy of each generated
``TABLE`` taken before the rewrite (spec sha256 left out). For every ``(state, event)``
the candidate rows the dispatcher tries, in order, must be equal: same targets, guards,
actions and work. Only the order of rows *across* different ``(state, event)`` pairs may
differ (the table is lowered leaf rows first, then rows of compound states), and so may
row numbers and descriptions (a fail-closed default has a generated description). States,
events (names, payloads, ``unhandled``, ``durable``), hook names, migrations, the initial
state and ``fail_closed`` are compared as they are. Runtime-visible names are unchanged:
the barrier shorthand keeps today's outcome event names through ``event_prefix``, so no
rename map is needed (``test_no_name_was_renamed``).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from phronomy_fsm.codegen import lower

from phronomy_fsm.spec.validate import check_spec_file
from tests.spec_samples import REPO

BEFORE = REPO / "tests" / "golden" / "data" / "lowered_before"
FIXTURES = REPO / "tests" / "fixtures" / "specs"
#: The machines with a frozen table from before the rewrite.
REWRITTEN = sorted(p.stem for p in BEFORE.glob("*.json"))


def _plain(value: Any) -> Any:
    if hasattr(value, "_asdict"):
        return {k: _plain(v) for k, v in value._asdict().items()}
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value


def _before(machine: str) -> dict[str, Any]:
    return json.loads((BEFORE / f"{machine}.json").read_text("utf-8"))  # type: ignore[no-any-return]


def _after(machine: str) -> dict[str, Any]:
    result = check_spec_file(FIXTURES / f"{machine}_v1.yaml")
    assert result.ok and result.spec is not None, [i.render() for i in result.issues]
    return _plain(lower(result.spec))  # type: ignore[no-any-return]


def candidates(table: dict[str, Any]) -> dict[tuple[str, str], list[tuple[Any, ...]]]:
    """``(state, event) -> [(target, guard, negated, actions, offload, barrier), ...]`` in
    the order the dispatcher tries them (table order per source, as ``bind_machine``)."""
    out: dict[tuple[str, str], list[tuple[Any, ...]]] = {}
    for row in table["transitions"]:
        for source in row["sources"]:
            out.setdefault((source, row["event"]), []).append(
                (
                    row["target"],
                    row["guard"],
                    row["negated"],
                    tuple(row["actions"]),
                    json.dumps(row["offload"], sort_keys=True),
                    json.dumps(row["barrier"], sort_keys=True),
                )
            )
    return out


@pytest.mark.parametrize("machine", REWRITTEN)
def test_every_candidate_list_is_unchanged(machine: str) -> None:
    before, after = candidates(_before(machine)), candidates(_after(machine))
    assert sorted(after) == sorted(before)
    for key in before:
        assert after[key] == before[key], key


#: sha256 of fsm_specs/agent_session.yaml in the previous release (before this rewrite).
PREVIOUS_AGENT_SESSION = "de62df40d7f4b5b0f207b06f5391be289aaf5cb062f7636f4aadbc8a5bba1eae"


@pytest.mark.parametrize("machine", REWRITTEN)
def test_states_events_and_hooks_are_unchanged(machine: str) -> None:
    before, after = _before(machine), _after(machine)

    def states(table: dict[str, Any]) -> dict[str, Any]:
        keep = ("kind", "entry", "offload", "barrier", "timeout")
        out = {s["name"]: {k: s[k] for k in keep} for s in table["states"]}
        for state in out.values():  # how an effect's hook is called: compared below
            if state["offload"] is not None:
                state["offload"] = {k: v for k, v in state["offload"].items() if k != "direct"}
        return out

    def events(table: dict[str, Any]) -> dict[str, Any]:
        return {
            e["name"]: (e["payload"], e["unhandled"], e.get("durable", False))
            for e in table["events"]
        }

    assert states(after) == states(before)
    assert events(after) == events(before)
    # the one difference an effect shorthand makes: its hook is a plain effect function
    direct = {s["name"] for s in after["states"] if (s["offload"] or {}).get("direct")}
    written = check_spec_file(FIXTURES / f"{machine}_v1.yaml").spec
    assert written is not None
    assert direct == {s.name for s in written.states if s.effect is not None}
    for key in ("initial", "guards", "actions", "offload_hooks", "barriers"):
        assert after[key] == before[key], key
    # the one migration added since: executions started under the previous release's
    # agent_session text run on (the lowered table is the same, as this test shows)
    added = [m for m in after["migrations"] if m not in before["migrations"]]
    assert added in (
        [],
        [{"from_version": 1, "from_sha256": PREVIOUS_AGENT_SESSION, "rename_states": []}],
    )
    assert after["fail_closed"] == before["fail_closed"]
    assert len(after["transitions"]) <= len(before["transitions"])  # rows may merge, never grow


@pytest.mark.parametrize("machine", REWRITTEN)
def test_no_name_was_renamed(machine: str) -> None:
    before, after = _before(machine), _after(machine)
    for section in ("states", "events"):
        assert sorted(x["name"] for x in after[section]) == sorted(
            x["name"] for x in before[section]
        )


def test_the_agent_spec_is_at_most_55_percent_of_its_former_length() -> None:
    lines = len((FIXTURES / "agent_session_v1.yaml").read_text("utf-8").splitlines())
    assert lines <= 503 * 55 // 100, lines  # 503 lines before the rewrite


def test_the_rewritten_specs_use_the_new_features() -> None:
    text = (FIXTURES / "agent_session_v1.yaml").read_text("utf-8")
    assert "on_committed:" in text and "fail_closed: recovery_required" in text
    result = check_spec_file(FIXTURES / "agent_session_v1.yaml")
    assert result.spec is not None
    assert [s.name for s in result.spec.states if s.compound] == ["working"]


def test_the_effect_shorthand_shortens_the_examples() -> None:
    # before issue 23: payout 55 lines, order_workflow 132 (docs/examples at the time)
    for machine, before in (("payout", 55), ("order_workflow", 132)):
        text = (FIXTURES / f"{machine}_v1.yaml").read_text("utf-8")
        assert "effect: {hook:" in text
        assert len(text.splitlines()) < before * 3 // 4, machine


def test_the_frozen_copy_is_what_it_claims() -> None:
    # a frozen table is a plain JSON copy of a MachineTable without its sha256
    assert REWRITTEN == [
        "agent_session",
        "execution_admission",
        "order_workflow",
        "payout",
        "tool_invocation",
    ]
    for machine in REWRITTEN:
        frozen = _before(machine)
        assert frozen["machine"] == machine and "spec_sha256" not in frozen
        assert {"states", "events", "transitions", "initial"} <= set(frozen)


def _shipped(path: Any) -> dict[str, Any]:
    result = check_spec_file(path)
    assert result.ok and result.spec is not None, [i.render() for i in result.issues]
    return _plain(lower(result.spec))  # type: ignore[no-any-return]


def test_agent_session_version_3_grouped_lowers_to_the_flat_version_2() -> None:
    # version 3 of fsm_specs/agent_session.yaml (kept as
    # tests/fixtures/specs/agent_session_v3.yaml) only groups the states of version 2
    # (tests/fixtures/specs/agent_session_v2.yaml) into two compound states, so that its
    # diagram is drawn in clusters: the machine that runs must not change
    flat = _shipped(FIXTURES / "agent_session_v2.yaml")
    grouped = _shipped(FIXTURES / "agent_session_v3.yaml")
    assert candidates(grouped) == candidates(flat)
    assert [s["name"] for s in grouped["states"]] == [s["name"] for s in flat["states"]]
    for key in ("events", "initial", "guards", "actions", "offload_hooks", "barriers"):
        assert grouped[key] == flat[key], key
    for before, after in zip(flat["states"], grouped["states"], strict=True):
        assert {k: v for k, v in after.items() if k != "parent"} == {
            k: v for k, v in before.items() if k != "parent"
        }
    assert {s["name"]: s.get("parent") for s in grouped["states"] if s.get("parent")} == {
        **dict.fromkeys(
            ["filtering_input", "preparing", "calling_llm", "evaluating_response"], "llm_turn"
        ),
        **dict.fromkeys(
            [
                "authorizing_tools",
                "evaluating_tools",
                "awaiting_approval",
                "dispatching_tools",
                "running_tools",
                "recording_tool_results",
                "preparing_llm_call",
            ],
            "using_tools",
        ),
    }
    # executions started under version 2 run on unchanged (nothing is renamed)
    assert flat["version"] == 2 and grouped["version"] == 3
    assert grouped["migrations"] == [{"from_version": 2, "from_sha256": None, "rename_states": []}]


def _renamed(value: Any, renames: dict[str, str]) -> Any:
    """``value`` (plain table data) with every string equal to an old name renamed."""
    if isinstance(value, dict):
        return {k: _renamed(v, renames) for k, v in value.items()}
    if isinstance(value, list):
        return [_renamed(v, renames) for v in value]
    if isinstance(value, str):
        return renames.get(value, value)
    return value


def test_agent_session_version_4_renamed_the_approval_wait() -> None:
    # version 4 renames the approval wait awaiting_approval to suspended (issue 23, the
    # design's names) and declares the migrations that rename it in stored executions
    # of versions 2 and 3; every other row, state, event and hook is unchanged
    before = _shipped(FIXTURES / "agent_session_v3.yaml")
    after = _shipped(FIXTURES / "agent_session_v4.yaml")  # as shipped, before version 5
    renames = {"awaiting_approval": "suspended"}
    assert after["version"] == 4
    assert after["migrations"] == [
        {
            "from_version": 3,
            "from_sha256": None,
            "rename_states": [["awaiting_approval", "suspended"]],
        },
        {
            "from_version": 2,
            "from_sha256": None,
            "rename_states": [["awaiting_approval", "suspended"]],
        },
    ]
    assert "awaiting_approval" not in json.dumps(
        {k: v for k, v in after.items() if k != "migrations"}
    )
    renamed = _renamed(before, renames)
    assert candidates(after) == candidates(renamed)
    for key in ("states", "events", "initial", "guards", "actions", "offload_hooks", "barriers"):
        assert after[key] == renamed[key], key
    assert after["fail_closed"] == before["fail_closed"] == "recovery_required"


def test_the_shipped_agent_session_is_version_5_which_adds_the_output_retry_and_the_budget() -> (
    None
):
    # version 5 (issue 24) adds the re-ask of an answer that is not valid structured
    # output (the state preparing_output_retry, barrier output_retry, and the rows out of
    # output_filtering that lead to it or fail) and the budget check and its wait
    # (checking_budget, budget_exhausted); it renames nothing, so an execution of
    # version 4 is recovered as it stood (the migration from 4 renames no state)
    before = _shipped(FIXTURES / "agent_session_v4.yaml")
    after = _shipped(REPO / "fsm_specs" / "agent_session.yaml")
    assert after["version"] == 5
    assert after["migrations"][0] == {"from_version": 4, "from_sha256": None, "rename_states": []}
    assert after["migrations"][1:] == before["migrations"]
    added = {"preparing_output_retry", "checking_budget", "budget_exhausted"}
    names = [s["name"] for s in after["states"]]
    assert {n for n in names if n in added} == added
    assert [n for n in names if n not in added] == [s["name"] for s in before["states"]]
    old, new = candidates(before), candidates(after)
    assert set(old) <= set(new)  # nothing an execution of version 4 did is gone
    assert ("preparing_output_retry", "output_retry_committed") in new
    # out of output_filtering: the blocked row first, then the two new guarded rows, then
    # the rows of version 4 in their order
    rows = new[("output_filtering", "output_filtered")]
    assert [r[1] for r in rows] == [
        "output_blocked",
        "output_retry_allowed",
        "output_invalid",
        None,
    ]
    assert [r for r in rows if r[1] not in ("output_retry_allowed", "output_invalid")] == old[
        ("output_filtering", "output_filtered")
    ]
    assert set(after["barriers"]) - set(before["barriers"]) == {"output_retry"}
    assert set(after["guards"]) - set(before["guards"]) == {
        "output_invalid",
        "output_retry_allowed",
        "budget_fails",
        "budget_waits",
    }
    assert set(after["actions"]) - set(before["actions"]) == {
        "mark_output_invalid",
        "record_output_error",
        "apply_budget_extension",
        "mark_budget_failed",
        "request_budget",
    }
    assert after["offload_hooks"] == before["offload_hooks"]
    assert after["fail_closed"] == before["fail_closed"] == "recovery_required"
