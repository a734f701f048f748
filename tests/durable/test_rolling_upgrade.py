"""A rolling upgrade: workers of an older and a newer spec of one machine share a store
(``docs/scale-out.md``, "Rolling upgrades"). A worker claims only the executions its
registered machine runs — the same spec, or one its declared migrations cover — and
leaves the others for a worker that runs them, never parking them. Before, claims
matched the machine's name only: an old worker claimed an execution started under the
newer spec and parked it ``spec_changed``, where ``failed`` was the only answer left,
even once a new worker was up again. Real components: a SQLite file or a PostgreSQL
database, in-process runtimes."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Any

import attrs
import pytest

from phronomy_fsm.durable import DurableRuntime, ExecutionStatus, Machine
from phronomy_fsm.durable.submit import submit_execution
from phronomy_fsm.store.open import open_store
from phronomy_fsm.table import MigrationRow

from .order_app import Order, order_machine

pytestmark = pytest.mark.timeout(120)


def newer(machine: Machine, version: int, *, migrate_from: tuple[int, ...] = ()) -> Machine:
    """``machine`` as a later spec of it would be: another version and sha256, with a
    migration (no state renamed) from each version of ``migrate_from``."""
    sha = hashlib.sha256(f"{machine.name} version {version}".encode()).hexdigest()
    table = machine.table._replace(
        version=version,
        spec_sha256=sha,
        migrations=tuple(MigrationRow(v, None, ()) for v in migrate_from),
    )
    return attrs.evolve(machine, table=table)


def _wait(predicate: Any, timeout_seconds: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_seconds
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_an_old_worker_leaves_an_execution_of_a_newer_spec_to_a_new_worker(
    store_target: str, tmp_path: Path
) -> None:
    store = open_store(store_target)
    v1 = order_machine(tmp_path / "ledger.jsonl")
    v2 = newer(v1, 2, migrate_from=(1,))
    submit_execution(store, v2, Order("o-new", 100), execution_id="o-new")
    submit_execution(store, v1, Order("o-old", 200), execution_id="o-old")
    try:
        old = DurableRuntime(store, machines=[v1], name="old")
        try:
            report = old.recover()
            assert [eid for eid, _status in report.claimed] == ["o-old"]
            assert old.claim() == []  # its claim loop leaves it too
            # never claimed, so never parked: it waits for a worker that runs it
            left = store.load_record("o-new")
            assert (left.status, left.revision, left.recovery) == (
                ExecutionStatus.RUNNING,
                0,
                None,
            )
            assert store.execution_owner("o-new")[:2] == (None, 0)
            assert [(e.execution_id, e.spec_version) for e in report.other_spec] == [("o-new", 2)]
        finally:
            old.close(timeout_seconds=5)
        # a worker of a third spec without a migration from either leaves both
        with DurableRuntime(store, machines=[newer(v1, 3)], name="newest") as newest:
            found = newest.recover()
            assert found.claimed == ()
            assert sorted(e.execution_id for e in found.other_spec) == ["o-new", "o-old"]
        # the new worker runs its own execution, and the old one by its migration
        with DurableRuntime(store, machines=[v2], name="new") as new:
            assert sorted(eid for eid, _ in new.recover().claimed) == ["o-new", "o-old"]
            for eid in ("o-new", "o-old"):
                _wait(lambda eid=eid: store.load_record(eid).status is ExecutionStatus.WAITING)
                new.signal(eid, "approve", {"by": "test"})
                assert new.wait(eid, 60).status is ExecutionStatus.COMPLETED
            assert store.load_record("o-old").spec_version == 2  # migrated as it ran
    finally:
        store.close()


def test_recover_can_still_park_an_execution_no_worker_will_run(
    store_target: str, tmp_path: Path
) -> None:
    """When no worker will ever run a spec again, an operator asks ``recover`` to park
    its executions (``spec_changed``): then ``failed`` ends them."""
    store = open_store(store_target)
    v1 = order_machine(tmp_path / "ledger.jsonl")
    submit_execution(store, v1, Order("o-1", 100), execution_id="o-1")
    try:
        with DurableRuntime(store, machines=[newer(v1, 2)]) as runtime:
            report = runtime.recover(park_other_specs=True)
            assert [eid for eid, _ in report.claimed] == ["o-1"]
            assert report.other_spec == ()
            _wait(lambda: store.load_record("o-1").status is ExecutionStatus.RECOVERY_REQUIRED)
        parked = store.load_record("o-1")
        assert parked.recovery is not None and parked.recovery.reason.startswith("spec_changed")
    finally:
        store.close()
