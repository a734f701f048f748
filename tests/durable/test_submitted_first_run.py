"""An execution submitted unowned (``submit_execution``: the scale-out path) runs as new
when a worker first claims it: its first effect, at_most_once, runs — the execution is
not parked as if a dead owner might have started it (docs/semantics.md, "Recovery").
Found while building forks: the order workflow of docs/examples, submitted and then
recovered, was parked at ``charge_card`` before anything had ever run. An execution a
runtime started itself, whose owner died after the effect, is still parked (the crash
matrices cover the rest)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from phronomy_fsm.durable import DurableRuntime, ExecutionStatus, submit_execution
from phronomy_fsm.store.open import open_store
from phronomy_fsm.testing.deadlines import wait_until

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"


@pytest.fixture
def order_workflow() -> Any:
    sys.path.insert(0, str(EXAMPLES))
    try:
        import order_workflow
    finally:
        sys.path.remove(str(EXAMPLES))
    return order_workflow


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.chdir(tmp_path)  # the example keeps its ledgers beside the store's name
    if request.param == "sqlite":
        return str(tmp_path / "orders.db")
    return str(request.getfixturevalue("pg_dsn"))


def test_a_submitted_execution_runs_its_first_at_most_once_effect_when_first_claimed(
    order_workflow: Any, db: str
) -> None:
    app = order_workflow.create_app(db)
    with open_store(db) as store:
        submit_execution(
            store, app.machines[0], order_workflow.Order("s1", 900, "a@example.invalid"),
            execution_id="s1",
        )  # fmt: skip
    runtime = DurableRuntime(open_store(db), machines=app.machines)
    try:
        assert runtime.recover().claimed == (("s1", "running"),)
        wait_until(
            lambda: runtime.store.load_record("s1").status is not ExecutionStatus.RUNNING,
            30,
            "the order to leave running",
        )
        record = runtime.store.load_record("s1")
        assert (record.status, record.state) == (ExecutionStatus.WAITING, "awaiting_approval")
        assert record.recovery is None
        charges = [e for e in order_workflow.ShopEffects.beside(db).card.effects()]
        assert [(e.effect, e.attempt) for e in charges] == [("charge_card", 1)]
    finally:
        runtime.close()
