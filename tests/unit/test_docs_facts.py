"""Facts the docs state that the code decides, pinned so the two cannot drift apart: the
store's schema version in docs/store.md, and the codegen benchmark's spec (hierarchy
included, as docs/performance.md says) being a valid spec of the size it claims."""

from __future__ import annotations

import sys
from pathlib import Path

from phronomy_fsm.spec.validate import check_spec_file
from phronomy_fsm.store.schema import SCHEMA_VERSION
from tests.spec_samples import REPO


def test_store_md_describes_the_current_schema_version() -> None:
    text = (REPO / "docs" / "store.md").read_text("utf-8")
    assert f"## Upgrading to version {SCHEMA_VERSION}\n" in text
    assert f"(version {SCHEMA_VERSION}:" in text  # the migration list names the version


def test_the_codegen_benchmark_spec_is_valid_and_hierarchical(tmp_path: Path) -> None:
    sys.path.insert(0, str(REPO / "tools"))
    try:
        from benchmarks.codegen import write_spec
    finally:
        sys.path.remove(str(REPO / "tools"))
    result = check_spec_file(write_spec(tmp_path, states=100, transitions=500))
    assert result.ok and result.spec is not None, [i.render() for i in result.issues][:5]
    states = result.spec.states
    assert len([s for s in states if not s.compound]) >= 100
    assert any(s.parent is not None and s.compound for s in states)  # two levels deep
