"""The checker on generated durable specs (``tests/spec_strategies.py``,
:func:`durable_specs`: barriers, waits with signals and timers, waits
taking signals by internal transitions, compound states, effects of each kind,
an effect right after a wait), each run by the generic application with a small budget
of each kind of step: every invariant holds. ``tools/check_generated.py`` runs many more."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings

from phronomy_fsm.spec.loader import load_spec_text
from phronomy_fsm.spec.validate import validate_spec
from tests.checking.generated import check_spec_file, replay, write_spec
from tests.spec_strategies import dump, durable_specs


@settings(max_examples=200, deadline=None, database=None)
@given(durable_specs())
def test_generated_durable_specs_are_valid(data: dict[str, Any]) -> None:
    loaded = load_spec_text(dump(data), source_name="generated.yaml")
    assert loaded.spec is not None, [i.render() for i in loaded.issues]
    errors = [i.render() for i in validate_spec(loaded.spec) if i.is_error]
    assert errors == []


@pytest.mark.slow
@pytest.mark.timeout(600)
@settings(
    max_examples=20,
    deadline=None,
    database=None,
    phases=[Phase.generate],  # a failing example is reported as found, not shrunk
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(durable_specs(max_segments=3))
def test_the_quick_check_of_generated_specs_keeps_every_invariant(
    tmp_path: Path, data: dict[str, Any]
) -> None:
    path = write_spec(data, tmp_path / "specs")
    report = check_spec_file(path)
    assert report.violations == (), (
        path.read_text(),
        [(v["invariant"], v["detail"], replay(path, v["interleaving"])) for v in report.violations],
    )
    assert report.by_kind.get("kill", 0) >= 1
