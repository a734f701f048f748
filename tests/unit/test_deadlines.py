"""Test deadlines scale with ``PHRONOMY_TEST_TIME_SCALE`` and the machine's load
(``phronomy_fsm.testing.deadlines``; issue 21 item 7: waits that a busy machine
exceeded)."""

from __future__ import annotations

import itertools
import os

import pytest

from phronomy_fsm.testing import deadlines
from phronomy_fsm.testing.deadlines import TIME_SCALE_VARIABLE, scaled_seconds, wait_until


def test_the_configured_scale_and_the_load_per_core_multiply(monkeypatch):
    monkeypatch.setattr(os, "getloadavg", lambda: (6.0, 0.0, 0.0))
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setenv(TIME_SCALE_VARIABLE, "2.5")
    assert scaled_seconds(10) == pytest.approx(10 * 2.5 * 3)
    monkeypatch.setattr(os, "getloadavg", lambda: (0.5, 0.0, 0.0))  # quieter than a core
    assert scaled_seconds(10) == pytest.approx(25)
    monkeypatch.setenv(TIME_SCALE_VARIABLE, "not a number")
    assert scaled_seconds(10) == pytest.approx(10)
    monkeypatch.setenv(TIME_SCALE_VARIABLE, "0.1")  # never shorter than asked
    assert scaled_seconds(10) == pytest.approx(10)


def test_wait_until_returns_the_first_truthy_value_and_names_what_timed_out(monkeypatch):
    calls = itertools.count()
    assert wait_until(lambda: next(calls) >= 3 and "done", 5, "three polls", poll_seconds=0) == (
        "done"
    )
    monkeypatch.setattr(deadlines, "time_scale", lambda: 1.0)
    with pytest.raises(AssertionError, match=r"timed out after 0 s waiting for the never"):
        wait_until(lambda: None, 0.01, "the never", poll_seconds=0.001)
