"""Diagram views (docs/spec-format.md "Diagrams"): compound states as clusters, the
main-path view that folds failure, fail-closed and cancel edges into its legend, the
execution overlay, and diagrams built from a generated ``TABLE`` alone."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import attrs
import pytest
from click.testing import CliRunner

from codegen.lower import lower
from phronomy_fsm.cli import main
from phronomy_fsm.diagram import (
    FOLDED_ROLES,
    Highlight,
    build_diagram,
    highlight_path,
    render_dot,
    render_mermaid,
)
from phronomy_fsm.generated import agent_session as agent_session_v2
from phronomy_fsm.generated import tool_call
from phronomy_fsm.spec.model import MachineSpec
from phronomy_fsm.spec.validate import check_spec_file
from tests.spec_samples import REPO

needs_dot = pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz dot is not installed")
#: The agent's first spec (compound states, a cancel edge from a cluster, detours):
#: kept as a fixture because it exercises every drawing feature.
AGENT = REPO / "tests" / "fixtures" / "specs" / "agent_session_v1.yaml"
TOOL = REPO / "tests" / "fixtures" / "specs" / "tool_invocation_v1.yaml"


class _Compiled:
    def __init__(self, path: object) -> None:
        result = check_spec_file(path)  # type: ignore[arg-type]
        assert result.spec is not None, result
        self.TABLE = lower(result.spec)


agent_session = _Compiled(AGENT)
tool_invocation = _Compiled(TOOL)


def _spec(name: str) -> MachineSpec:
    result = check_spec_file(REPO / "fsm_specs" / f"{name}.yaml")
    assert result.spec is not None
    return result.spec


@pytest.mark.parametrize("module", [agent_session_v2, tool_call])
def test_a_generated_table_draws_the_same_picture_as_its_spec(module: object) -> None:
    table = module.TABLE  # type: ignore[attr-defined]
    from_spec = build_diagram(_spec(table.machine))
    from_table = build_diagram(table)
    assert attrs.evolve(from_spec, description="") == from_table
    assert render_dot(from_table) == render_dot(from_spec)


def test_edge_roles_of_the_agent() -> None:
    edges = build_diagram(agent_session.TABLE).edges
    roles = {(e.source, e.event, e.target): e.role for e in edges}
    assert roles[("working", "cancel_requested", "cancelling")] == "compound"
    assert roles[("preparing", "preparation_committed", "cancelling")] == "detour"
    assert roles[("preparing", "preparation_conflict", "recovery_required")] == "fail_closed"
    assert roles[("preparing", "preparation_not_committed", "terminalizing")] == "not_committed"
    assert roles[("calling_llm", "llm_failed", "terminalizing")] == "offload_failed"
    assert roles[("calling_llm", "llm_stream_chunk", "calling_llm")] == "internal"
    assert roles[("preparing", "preparation_committed", "calling_llm")] == "main"
    assert roles[("calling_llm", "llm_completed", "evaluating_response")] == "main"
    cancel = next(e for e in edges if e.role == "compound")
    assert cancel.from_cluster and cancel.index == len(agent_session.TABLE.transitions) - 1


def test_full_view_draws_compound_states_as_clusters() -> None:
    dot = render_dot(build_diagram(agent_session.TABLE))
    assert re.search(r"subgraph cluster_working \{", dot)
    cluster = dot[dot.index("subgraph cluster_working") :]
    cluster = cluster[: cluster.index("\n\t}")]
    for state in ("filtering_input", "calling_llm", "output_filtering"):
        assert f"\t\t{state} [" in cluster
    assert "\t\tpreparing [" not in cluster
    assert 'id="compound:working"' in cluster
    edge = next(line for line in dot.splitlines() if "cancel_requested" in line and "ltail" in line)
    assert "ltail=cluster_working" in edge and "-> cancelling" in edge
    assert "compound=true" in dot


def test_main_view_folds_failure_and_cancel_edges_into_the_legend() -> None:
    diagram = build_diagram(agent_session.TABLE)
    dot = render_dot(diagram, view="main", with_actions=False)
    drawn = set(re.findall(r'id="(t\d+:\w+)"', dot))
    hidden = {"cancelling", "recovery_required", "resolving"}  # reached only by folded edges
    for edge in diagram.edges:
        edge_id = f"t{edge.index}:{edge.source}"
        assert (edge_id in drawn) == (edge.role not in FOLDED_ROLES and edge.source not in hidden)
    legend = dot[dot.index("cluster_legend") :]
    assert "rows on a compound state" in legend and "cancel_requested -> cancelling" in legend
    assert "into the fail-closed state" in legend
    assert "Reached only through folded edges (not drawn): cancelling," in legend
    assert "recovery_required, resolving" in legend
    assert "\trecovery_required [" not in dot and "\tcancelling [" not in dot
    assert "\tcalling_llm [" in dot and "\tterminalizing [" in dot
    assert 'size="16.6,100"' in dot and "dpi=96" in dot
    # shorter labels: completion edges show their guard, committed edges "committed"
    assert 'label="[tool_calls_pending]"' in dot
    assert 'label=committed id="t' in dot


def test_main_view_of_a_flat_machine_without_failures_is_the_full_one() -> None:
    from phronomy_fsm.spec.loader import load_spec_text
    from tests.spec_samples import door

    loaded = load_spec_text(door())
    assert loaded.spec is not None
    diagram = build_diagram(loaded.spec)
    main_ids = re.findall(r'id="(t\d+:\w+)"', render_dot(diagram, view="main"))
    full_ids = re.findall(r'id="(t\d+:\w+)"', render_dot(diagram))
    assert main_ids == full_ids


def test_highlight_draws_the_current_state_and_the_path() -> None:
    path = ["idle", "admitting", "filtering_input", "preparing", "calling_llm"]
    mark = highlight_path(path)
    assert mark.current_state == "calling_llm"
    assert ("preparing", "calling_llm") in mark.visited_edges
    dot = render_dot(build_diagram(agent_session.TABLE), highlight=mark)
    node = next(line for line in dot.splitlines() if line.startswith("\t\tcalling_llm ["))
    assert "CURRENT" in node and "#15803d" in node and "penwidth=4" in node
    visited = next(line for line in dot.splitlines() if line.startswith("\tadmitting ["))
    assert "#1d4ed8" in visited
    taken = [line for line in dot.splitlines() if "-> calling_llm" in line and "#1d4ed8" in line]
    assert len(taken) == 1 and "preparing ->" in taken[0]
    assert "legend:current" in dot
    assert "legend:current" not in render_dot(build_diagram(agent_session.TABLE))


def test_highlighted_edges_survive_the_main_view_fold() -> None:
    diagram = build_diagram(agent_session.TABLE)
    mark = Highlight(
        current_state="recovery_required",
        visited_states=frozenset({"preparing"}),
        visited_edges=frozenset(
            {("preparing", "preparation_outcome_unknown", "recovery_required")}
        ),
    )
    dot = render_dot(diagram, view="main", highlight=mark)
    assert "\trecovery_required [" in dot and "CURRENT" in dot
    kept = [line for line in dot.splitlines() if "preparing -> recovery_required" in line]
    assert len(kept) == 1 and "#1d4ed8" in kept[0]


def test_unknown_view_is_refused() -> None:
    with pytest.raises(ValueError):
        render_dot(build_diagram(agent_session.TABLE), view="mini")
    with pytest.raises(ValueError):
        render_mermaid(build_diagram(agent_session.TABLE), view="mini")


def test_mermaid_composite_states_and_main_view() -> None:
    text = render_mermaid(build_diagram(tool_invocation.TABLE))
    assert '    state "active" as s_active\n    state s_active {\n' in text
    assert "        [*] --> s_authorizing\n" in text
    assert "    s_active --> s_cancelled : cancel do notify_parent\n" in text
    main_text = render_mermaid(build_diagram(tool_invocation.TABLE), view="main")
    assert "s_active --> s_cancelled" not in main_text.replace("%% folded", "")
    assert "%% folded (compound)#58; active --#gt; cancelled #58; cancel" in main_text


@needs_dot
def test_main_view_png_is_at_most_1600_px_wide() -> None:
    dot = render_dot(build_diagram(agent_session.TABLE), view="main", with_actions=False)
    out = subprocess.run(["dot", "-Tjson"], input=dot.encode(), capture_output=True, check=True)
    width_pt = float(json.loads(out.stdout)["bb"].split(",")[2])
    png = subprocess.run(["dot", "-Tpng"], input=dot.encode(), capture_output=True, check=True)
    width_px = int.from_bytes(png.stdout[16:20], "big")
    assert width_px <= 1600 < width_pt * 96 / 72 * 1.5  # scaled to fit, not tiny


def test_cli_main_view(tmp_path: object) -> None:
    result = CliRunner().invoke(main, ["diagram", str(AGENT), "--view", "main"])
    assert result.exit_code == 0, result.stderr
    assert "agent_session (spec version 1) - main path" in result.stdout
    assert "cluster_legend" in result.stdout
    usage = CliRunner().invoke(main, ["diagram", "--all", "--view", "main"])
    assert usage.exit_code == 2


def test_the_named_final_commit_frames_the_final_states() -> None:
    # fsm_specs/agent_session.yaml names its @final commit `terminalizing` (issue 23):
    # the table carries the name and every view draws it around the final states
    assert agent_session_v2.TABLE.final_commit == "terminalizing"
    diagram = build_diagram(agent_session_v2.TABLE)
    finals = ("completed", "rejected", "blocked", "handed_off", "failed")
    assert diagram.final_commit == "terminalizing"
    assert diagram.final_commit_members == finals
    for view in ("full", "main"):
        dot = render_dot(diagram, view=view)
        frame = dot[dot.index("subgraph cluster__final_commit") :]
        frame = frame[: frame.index("\n\t}")]
        assert 'label="terminalizing «@final commit»"' in frame
        assert 'id="final_commit:terminalizing"' in frame
        drawn = re.findall(r'id="state:(\w+)"', frame)
        assert tuple(drawn) == finals, view
        assert "grey frame terminalizing" in dot or view == "full"
    mermaid = render_mermaid(diagram)
    block = mermaid[mermaid.index("state s_terminalizing {") :]
    block = block[: block.index("\n    }")]
    assert [m for m in re.findall(r'state "(\w+)" as', block)] == list(finals)
    # a machine that names no final commit is drawn without a frame
    assert build_diagram(tool_call.TABLE).final_commit is None
    assert "final_commit:" not in render_dot(build_diagram(tool_call.TABLE))


def test_a_generated_table_names_the_final_commit_only_when_the_spec_does() -> None:
    # tables of specs without final_commit stay byte for byte what they were
    agent = (REPO / "src" / "phronomy_fsm" / "generated" / "agent_session.py").read_text()
    tool = (REPO / "src" / "phronomy_fsm" / "generated" / "tool_call.py").read_text()
    assert '    final_commit="terminalizing",\n' in agent
    assert "final_commit" not in tool
