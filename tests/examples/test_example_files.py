"""The durable examples' files: their specs pass every check of ``phronomy-fsm validate``
(the durability checks included) and their generated tables, checked in under
``docs/examples/machines/``, are what ``phronomy-fsm generate`` makes of the specs now."""

from __future__ import annotations

import subprocess
import sys

import pytest

from .conftest import EXAMPLES, ROOT

SPECS = ("order_workflow", "payout", "review_agent", "review_tool")
CLI = [sys.executable, "-m", "phronomy_fsm.cli"]


@pytest.mark.parametrize("name", SPECS)
def test_the_spec_passes_every_check(name: str) -> None:
    proc = subprocess.run(
        [*CLI, "validate", "--strict", str(EXAMPLES / f"{name}.yaml")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "0 warning(s)" in proc.stdout + proc.stderr


def test_the_checked_in_tables_are_fresh() -> None:
    proc = subprocess.run(
        [
            *CLI,
            "generate",
            *(f"docs/examples/{name}.yaml" for name in SPECS),
            "--out",
            "docs/examples/machines",
            "--check",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, (
        f"{proc.stdout}{proc.stderr}\nregenerate: phronomy-fsm generate "
        + " ".join(f"docs/examples/{n}.yaml" for n in SPECS)
        + " --out docs/examples/machines"
    )
    assert sorted(p.stem for p in (EXAMPLES / "machines").glob("*.py")) == sorted(SPECS)


def test_each_table_names_its_spec() -> None:
    for name in SPECS:
        header = (EXAMPLES / "machines" / f"{name}.py").read_text().splitlines()[1]
        assert header.startswith(f'# spec: "docs/examples/{name}.yaml" sha256='), header


def _code(line: str) -> str:
    return line.split("  #")[0].strip()


def test_the_guide_shows_the_payout_code_as_it_is() -> None:
    """Every line of the guide's step-3 excerpt is a line of docs/examples/payout.py."""
    guide = (ROOT / "docs" / "getting-started.md").read_text()
    start = guide.index("**3. The context, the hooks and the machine**")
    block = guide[
        guide.index("```python", start) + len("```python") : guide.index("```\n", start + 60)
    ]
    source = {_code(line) for line in (EXAMPLES / "payout.py").read_text().splitlines()}
    shown = [_code(line) for line in block.splitlines() if _code(line)]
    assert len(shown) > 15  # the whole of payout.py but its __main__ block
    assert [line for line in shown if line not in source] == []


def test_the_examples_stay_within_their_size_targets() -> None:
    """Issue 23's targets (``wc -l``): payout at most 25 spec and 40 Python lines,
    order_workflow at most 50 and 150 (docs/performance.md, "The order workflow beside
    DBOS")."""
    for name, spec_lines, python_lines in (("payout", 25, 40), ("order_workflow", 50, 150)):
        spec = (EXAMPLES / f"{name}.yaml").read_text().count("\n")
        python = (EXAMPLES / f"{name}.py").read_text().count("\n")
        assert spec <= spec_lines, (name, spec)
        assert python <= python_lines, (name, python)
