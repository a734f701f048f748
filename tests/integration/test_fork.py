"""Fork and restart from a past commit (issue 25 item 2; docs/operations.md, "Fork and
restart from a past commit"), on the order workflow of docs/examples: a finished order
is forked from its commits by ``phronomy-fsm fork`` run as its own process. The plan
lists every effect that would run again with its kind and key; an at_most_once one is
refused unless named, and nothing is written then; a fork that runs keeps the original's
idempotency keys (the outbox sends its e-mail once) unless new keys are asked for; a
store that did not keep a commit says so. SQLite, and the refusal on PostgreSQL."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from phronomy_fsm.durable import DurableRuntime, ExecutionStatus
from phronomy_fsm.durable.records import DurablePoint
from phronomy_fsm.store.open import open_store
from phronomy_fsm.testing.deadlines import scaled_seconds, wait_until

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"


def _order_app(db: str) -> Any:
    sys.path.insert(0, str(EXAMPLES))
    try:
        import order_workflow
    finally:
        sys.path.remove(str(EXAMPLES))
    return order_workflow


def _run_approved(db: str, order_id: str) -> Any:
    """Run one order to its end (approved); returns the example's module."""
    module = _order_app(db)
    app = module.create_app(db)
    runtime = DurableRuntime(open_store(db), machines=app.machines)
    try:
        handle = runtime.start(
            "order_workflow",
            module.Order(order_id, 1000, "a@example.invalid"),
            execution_id=order_id,
        )
        wait_until(
            lambda: runtime.store.load_record(order_id).status is ExecutionStatus.WAITING,
            30,
            "the order to wait for approval",
        )
        runtime.signal(order_id, "approve", {"by": "ann"})
        assert handle.result(scaled_seconds(30)).status is ExecutionStatus.COMPLETED
    finally:
        runtime.close()
    return module


def _fork(db: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "phronomy_fsm.cli", "fork", *args, "--db", db],
        capture_output=True,
        text=True,
        timeout=scaled_seconds(60),
        check=False,
    )


def _revision(store: Any, eid: str, point: DurablePoint) -> int:
    kept = store.kept_records(eid)
    return min(r for r, rec in kept.items() if rec is not None and rec.point is point)


def _resume(db: str, module: Any, eid: str, approve: bool = True) -> Any:
    """Run the fork (unowned, as a worker would claim it) to its end."""
    app = module.create_app(db)
    runtime = DurableRuntime(open_store(db), machines=app.machines)
    try:
        store = runtime.store
        runtime.recover()
        if approve:
            wait_until(
                lambda: store.load_record(eid).status is ExecutionStatus.WAITING,
                30,
                "the fork to wait for approval",
            )
            runtime.signal(eid, "approve", {"by": "bob"})
        wait_until(lambda: store.load_record(eid).is_finished, 30, "the fork to finish")
        return store.load_record(eid)
    finally:
        runtime.close()


def test_a_fork_lists_what_runs_again_refuses_an_at_most_once_effect_and_keeps_keys(
    tmp_path: Path,
) -> None:
    db = str(tmp_path / "orders.db")
    module = _run_approved(db, "o1")
    with open_store(db) as store:
        waited = _revision(store, "o1", DurablePoint.WAIT)
        ship_key = store.load_record("o1").context["shipment"]["tracking"]
    shop = module.ShopEffects.beside(db)

    # from the wait: shipping would run again; at_most_once, so refused, nothing written
    refused = _fork(db, "o1", "--revision", str(waited), "--execution-id", "o1-again", "--json")
    assert refused.returncode == 1, refused.stdout + refused.stderr
    plan = json.loads(refused.stdout)
    # what the original ran after the wait, then what else the machine can reach
    assert [(e["effect"], e["kind"], e["ran_before"], e["allowed"]) for e in plan["effects"]] == [
        ("ship_order", "at_most_once", True, False),
        ("refund_card", "idempotent", False, True),
    ]
    assert plan["written"] is False and "--allow-effect ship_order" in plan["refusals"][0]
    assert plan["state"] == "awaiting_approval" and plan["point"] == "wait"
    with open_store(db, read_only=True) as reader:
        assert [r.execution_id for r in reader.list_records()] == ["o1"]

    # from the start, letting both at_most_once effects run again: the idempotent e-mail
    # keeps the original's key, so the outbox sends it once
    allowed = _fork(
        db, "o1", "--revision", "0", "--execution-id", "o1-fork",
        "--allow-effect", "charge_card", "--allow-effect", "ship_order",
    )  # fmt: skip
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr
    assert "send_confirmation (idempotent): ran at revision 1" in allowed.stdout
    assert "written: o1-fork" in allowed.stdout
    fork = _resume(db, module, "o1-fork")
    assert fork.status is ExecutionStatus.COMPLETED
    assert fork.labels["forked_from"] == "o1@0"
    charges = [e for e in shop.card.effects() if e.effect == "charge_card"]
    assert len(charges) == 2 and charges[0].key == charges[1].key  # the same key, twice
    assert len(shop.outbox.effects()) == 1  # recognised by its key: sent once
    # the allowed at_most_once shipment ran again, under the original's key too
    shipments = shop.carrier.effects()
    assert len(shipments) == 2 and shipments[0].key == shipments[1].key
    assert fork.context["shipment"]["tracking"] == ship_key

    # with new keys the e-mail is a new one
    fresh = _fork(
        db, "o1", "--revision", "0", "--execution-id", "o1-fresh", "--new-keys",
        "--allow-effect", "charge_card", "--allow-effect", "ship_order",
    )  # fmt: skip
    assert fresh.returncode == 0, fresh.stdout + fresh.stderr
    assert _resume(db, module, "o1-fresh").status is ExecutionStatus.COMPLETED
    assert len(shop.outbox.effects()) == 2


def test_a_commit_the_store_did_not_keep_cannot_be_forked(tmp_path: Path) -> None:
    db = str(tmp_path / "orders.db")
    off = subprocess.run(
        [sys.executable, "-m", "phronomy_fsm.cli", "store", "settings", "--db", db,
         "--keep-commit-bodies", "off"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert off.returncode == 1  # no store yet: nothing is created
    with open_store(db) as store:
        store.set_keep_commit_bodies(False)
    _run_approved(db, "o2")
    out = _fork(db, "o2", "--revision", "0", "--plan")
    assert out.returncode == 1
    assert "did not keep the record" in out.stderr
    assert "--keep-commit-bodies on" in out.stderr


@pytest.mark.parametrize("store_kind", ["postgres"])
def test_the_plan_refuses_an_at_most_once_effect_on_postgresql(
    tmp_path: Path, pg_dsn: str, store_kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # the example keeps its ledgers beside the store's name
    _run_approved(pg_dsn, "o3")
    with open_store(pg_dsn) as store:
        waited = _revision(store, "o3", DurablePoint.WAIT)
        assert store.keeps_commit_bodies()
    out = _fork(pg_dsn, "o3", "--revision", str(waited), "--json")
    assert out.returncode == 1, out.stdout + out.stderr
    plan = json.loads(out.stdout)
    assert plan["effects"][0]["effect"] == "ship_order" and not plan["ok"]
    assert plan["effects"][0]["ran_before"]
    with open_store(pg_dsn) as store:
        assert [r.execution_id for r in store.list_records()] == ["o3"]
