"""A rolling upgrade with real worker processes on PostgreSQL (``docs/scale-out.md``,
"Rolling upgrades"): an execution started under spec version 2 is never claimed by a
worker that runs version 1 only — not while a version-2 worker runs it, not after that
worker was killed — and waits, untouched, until a version-2 worker comes back and runs
it to the end. Before, the old worker claimed it once its owner was gone and parked it
``spec_changed``, where ``failed`` was the only answer left."""

from __future__ import annotations

import signal

import pytest

from .conftest import scale_harness
from .upgrade_app import create_v2

pytestmark = pytest.mark.slow
V1 = "tests.scaleout.upgrade_app:create_v1"
V2 = "tests.scaleout.upgrade_app:create_v2"
ZERO = dict.fromkeys((*scale_harness.INVARIANTS, "zombie_commits"), 0)


def test_an_old_worker_never_takes_an_execution_of_the_new_spec(cluster):
    from phronomy_fsm.durable.submit import submit_execution
    from tests.durable.order_app import Order

    options = {"lease_seconds": 2, "scan_seconds": 0.2, "effect_seconds": 0.5}
    new = cluster.start("new", app=V2, **options)
    v2 = create_v2(cluster.dsn).machines[0]
    submit_execution(cluster.store, v2, Order("o-up", 1500), execution_id="o-up")
    scale_harness.wait_for(
        lambda: cluster.store.load_record("o-up").revision >= 1, 30, "the new worker to run it"
    )
    new_id = cluster.worker_ids()["new"]
    old = cluster.start("old", app=V1, **options)
    scale_harness.wait_for(lambda: "old" in cluster.worker_ids(), 30, "the old worker to start")
    new.send_signal(signal.SIGKILL)
    new.wait(10)
    # the old worker ends the dead worker's lease (same host), finds o-up claimable and
    # leaves it, saying why (before, it claimed it: the owner changed)
    scale_harness.wait_for(
        lambda: (
            "left 1 execution(s)" in cluster.log("old")
            or cluster.owners(["o-up"]) != {"o-up": new_id}
        ),
        30,
        "the old worker to leave it or take it",
    )
    assert "is gone" in cluster.log("old")
    assert cluster.owners(["o-up"]) == {"o-up": new_id}  # nobody claimed it since
    record = cluster.store.load_record("o-up")
    assert record.status.value != "recovery_required" and record.spec_version == 2
    assert "spec version 2" in cluster.log("old")
    # a new worker comes back and runs it to the end
    cluster.start("new-again", app=V2, **options)
    statuses = cluster.drive(["o-up"], 90)
    assert statuses["o-up"] in ("completed", "failed"), statuses
    assert cluster.check(["o-up"]) == ZERO
    old_id = cluster.worker_ids()["old"]
    committers = {w for _r, _b, w, _f in cluster.store.barrier_owners("o-up")}
    assert old_id not in committers and new_id in committers
    assert cluster.worker_ids()["new-again"] in committers
    assert old.poll() is None  # the old worker runs on


def test_a_worker_exits_once_newer_code_migrated_the_schema(cluster):
    """``phronomy-fsm worker`` stops writing and exits 1 once newer code bumped the
    schema version; the execution it ran stays at its last commit for a worker of the
    newer code (docs/scale-out.md, "Rolling upgrades")."""
    import psycopg

    from phronomy_fsm.store.postgres.schema import SCHEMA_VERSION

    worker = cluster.start("old", lease_seconds=1.5, scan_seconds=0.2)
    cluster.submit(["o-1"])
    scale_harness.wait_for(
        lambda: cluster.store.load_record("o-1").status.value == "waiting", 30, "o-1 to wait"
    )
    with psycopg.connect(cluster.dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE phronomy_meta SET value = %s WHERE key = 'schema_version'",
            (str(SCHEMA_VERSION + 1),),
        )
    before = (cluster.store.load_record("o-1"), cluster.store.list_workers())
    assert worker.wait(30) == 1
    log = cluster.log("old")
    assert f"stops writing: {cluster.store.path} has schema version {SCHEMA_VERSION + 1}" in log
    assert "error: " in log.splitlines()[-1] and "upgrade phronomy_fsm" in log.splitlines()[-1]
    assert (cluster.store.load_record("o-1"), cluster.store.list_workers()) == before
