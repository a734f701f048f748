"""The issue 24 examples run offline as a user runs them: ``anthropic_agent.py`` (an agent
on the Anthropic Messages API against the stub server) and ``event_stream.py`` (an
execution's events read by two other processes, the second resuming after the first's
cursor)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from .conftest import EXAMPLES, clean_env


def run(script: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args],
        cwd=cwd,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_anthropic_example_runs_a_tool_call_and_a_stream_offline(tmp_path: Path) -> None:
    proc = run("anthropic_agent.py", str(tmp_path / "a.db"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "answer: Order A-17 shipped yesterday.",
        "usage: 20 in, 10 out",
        "streamed: Parcels |usually |arrive |within |three |days.|",
        "sent to /v1/messages: ['text', 'tool_use', 'tool_result']",
    ]


def test_the_event_stream_example_reads_every_event_once_across_two_readers(
    tmp_path: Path,
) -> None:
    proc = run("event_stream.py", str(tmp_path / "e.db"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    cursors = [int(m) for m in re.findall(r"^\s*(\d+) \w+$", proc.stdout, re.MULTILINE)]
    total = int(re.search(r"journal: (\d+) entries", proc.stdout).group(1))  # type: ignore[union-attr]
    assert cursors == list(range(1, total + 1))
    first, second = proc.stdout.split("reader 2")
    assert first.rstrip().endswith("last cursor 5") and "approval_required" in first
    assert "execution_completed" in second and "approval_required" not in second
