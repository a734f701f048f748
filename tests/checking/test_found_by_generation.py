"""Specs on which the generated-spec run of the checker (``tools/check_generated.py``)
found a violation, replayed at the interleaving that found it (``docs/operations.md``,
"The interleaving checker")."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import check_generic

SPECS = Path(__file__).parent / "specs"


@pytest.mark.timeout(120)
def test_a_signal_applied_before_a_cancel_is_not_committed_by_the_cancel(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # g-1 waits in g1_wait (loaded from the store when its signal comes); s0's action
    # changes the context in place; the cancel then commits. The @cancel commit keeps
    # the last committed context and does not consume s0, so s0's change must not be in
    # it: the session's context must never be the committed record's own object.
    report = check_generic(
        monkeypatch,
        SPECS / "signal_then_cancel.yaml",
        only=("main:cancel=offload:work1:after",),
    )
    assert not report.violations, report.violations
    assert report.invariants["signals_applied"] == 0
