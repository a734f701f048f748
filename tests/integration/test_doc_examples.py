"""The examples docs/getting-started.md points at run as written (a user copies them)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"
CLI = [sys.executable, "-m", "phronomy_fsm.cli"]


def run(args: list[str], cwd: Path) -> str:
    proc = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_own_machine_example_validates_generates_draws_and_runs(tmp_path: Path) -> None:
    shutil.copy(EXAMPLES / "order.yaml", tmp_path)
    shutil.copy(EXAMPLES / "order_machine.py", tmp_path)
    run([*CLI, "validate", "order.yaml", "--strict"], tmp_path)
    run([*CLI, "generate", "order.yaml", "--out", "generated"], tmp_path)
    run([*CLI, "diagram", "order.yaml", "--format", "svg", "-o", "order.svg"], tmp_path)
    assert (tmp_path / "order.svg").read_text().lstrip().startswith(("<?xml", "<svg", "<!--"))
    out = run([sys.executable, "order_machine.py"], tmp_path)
    assert out.strip() == "finished shipped {'charged': 42.0} ['receipt sent for 42.0']"


def test_support_agent_example_runs_twice_on_one_store(tmp_path: Path) -> None:
    for _ in range(2):  # the second run loads the agent created by the first
        out = run(
            [sys.executable, str(EXAMPLES / "support_agent.py"), str(tmp_path / "gs.db")], tmp_path
        )
        assert out.splitlines()[-1] == "completed I refunded $25.00 for order A1."
        assert "event: approval_required" in out
        assert "approve: issue_refund {'amount': 25.0, 'order_id': 'A1'}" in out
    listing = run(
        [*CLI, "executions", "list", "--db", str(tmp_path / "gs.db"), "--json"]
        + ["--machine", "agent_session"],
        tmp_path,
    )
    assert listing.count('"status": "completed"') == 2


def test_typed_agent_example_converts_arguments_and_parses_the_re_asked_answer(
    tmp_path: Path,
) -> None:
    for _ in range(2):  # the second run loads the agent created by the first
        out = run(
            [sys.executable, str(EXAMPLES / "typed_agent.py"), str(tmp_path / "typed.db")],
            tmp_path,
        )
        lines = out.splitlines()
        assert lines[0] == (
            'filters schema: {"additionalProperties": false, "properties": {"category": '
            '{"$ref": "#/$defs/Category"}, "max_price": {"anyOf": [{"type": "number"}, '
            '{"type": "null"}]}}, "required": ["category"], "type": "object"}'
        )
        assert lines[1] == (
            "search got: 'pen', Filters(category=<Category.PENS: 'pens'>, max_price=5.0), "
            "order='cheap'"
        )
        # the prose answer was re-asked once: three LLM calls in this process
        assert lines[2] == "LLM calls: 3"
        assert lines[3] == (
            "parsed: Recommendation(product='fine liner', reason='the best pen under 5')"
        )
    out = run([sys.executable, str(EXAMPLES / "typed_agent.py")], tmp_path)  # a temporary store
    assert out.splitlines()[-1].startswith("parsed: Recommendation(")


def test_budget_agent_example_waits_for_a_budget_and_completes_once_extended(
    tmp_path: Path,
) -> None:
    out = run([sys.executable, str(EXAMPLES / "budget_agent.py"), str(tmp_path / "b.db")], tmp_path)
    assert out.splitlines() == [
        "waits: max_llm_calls spent 2 of 2 (llm_call)",
        # 3 calls of 1200 + 80 tokens and one of 1500 + 40, at $0.15 / $0.60 a million
        "spent: 4 LLM calls of 4, 5380 tokens, $0.000933 of $0.05",
        "completed All three orders have shipped.",
    ]
