"""PHRONOMY_CRASH_AT parsing: a malformed value is reported instead of silently never
firing; a well-formed one arms the named point at its N-th hit (runtime/crashpoints)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

PROBE = "from phronomy_fsm.runtime import crashpoints as c; print(repr(c.ARMED), c._remaining)"


def _probe(value: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PHRONOMY_CRASH_AT=value)
    return subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True
    )


def test_well_formed_point_is_armed_silently() -> None:
    result = _probe("barrier:tool_dispatch:during@3")
    assert result.stdout.strip() == "'barrier:tool_dispatch:during' 3"
    assert result.stderr == ""


@pytest.mark.parametrize(
    "value", ["barrier:tool_dispatch:middle", "offload:call_llm:before", "tool_dispatch"]
)
def test_unknown_point_shape_is_reported(value: str) -> None:
    result = _probe(value)
    assert "is not a crash point name" in result.stderr
    assert "barrier:<name>:before|during|after" in result.stderr


def test_bad_hit_count_is_reported_and_first_hit_used() -> None:
    result = _probe("offload:call_llm:after@zero")
    assert "positive hit count" in result.stderr
    assert result.stdout.strip() == "'offload:call_llm:after' 1"


def test_hit_kills_only_on_the_nth_hit() -> None:
    code = (
        "from phronomy_fsm.runtime import crashpoints as c\n"
        "c.hit('barrier:x:before')\n"
        "print('first', flush=True)\n"
        "c.hit('barrier:x:before')\n"
        "print('second', flush=True)\n"
    )
    env = dict(os.environ, PHRONOMY_CRASH_AT="barrier:x:before@2")
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )
    assert result.returncode == -9
    assert result.stdout.split() == ["first"]
