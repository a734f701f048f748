"""A PostgreSQL restart mid-run (``pg_ctl restart``), on a server of the test's own:
workers reconnect and every execution finishes with the invariants holding; and a
COMMIT whose response is really lost — the server made it durable, then went down
before answering — is an OutcomeUnknownError that reading back settles as committed.

The lost response is produced by the server itself: with ``synchronous_standby_names``
naming a standby that does not exist, a COMMIT is flushed locally and then waits for
the standby; restarting the server ends that wait without an answer."""

from __future__ import annotations

import threading
from pathlib import Path

import psycopg
import pytest

from phronomy_fsm.errors import OutcomeUnknownError
from phronomy_fsm.store.postgres import PostgresStore
from phronomy_fsm.table import COMMITTED
from tests.engine_port.conftest import commit, create, step

from .conftest import Cluster, scale_harness

pytestmark = pytest.mark.slow


@pytest.fixture
def own_server(postgres):
    """A server of this test's own (a restart must not disturb the others)."""
    if postgres.local is None:
        pytest.skip("a server named by PHRONOMY_TEST_POSTGRES_DSN is not restarted by tests")
    from phronomy_fsm.store.postgres.server import LocalPostgres

    with LocalPostgres() as server:
        yield server


def test_workers_survive_a_server_restart_mid_run(own_server, tmp_path: Path):
    cluster = Cluster(own_server.create_database("restart"), tmp_path)
    try:
        ids = [f"s-{i:02d}" for i in range(20)]
        cluster.start("a", effect_seconds=0.2, lease_seconds=5)
        cluster.start("b", effect_seconds=0.2, lease_seconds=5)
        cluster.submit(ids)
        scale_harness.wait_for(
            lambda: sum(1 for r in cluster.store.list_records() if r.revision >= 1) >= 5,
            30,
            "executions mid-run",
        )
        own_server.restart()
        statuses = cluster.drive(ids, 120)
        assert all(s in ("completed", "failed") for s in statuses.values()), statuses
        assert cluster.check(ids) == dict.fromkeys((*scale_harness.INVARIANTS, "zombie_commits"), 0)
        dead = {name: p.poll() for name, p in cluster.workers.items() if p.poll() is not None}
        assert not dead, {name: (code, cluster.log(name)[-3000:]) for name, code in dead.items()}
    finally:
        cluster.close()


def test_a_commit_whose_response_was_lost_is_reconciled_by_reading_back(own_server):
    dsn = own_server.create_database("lost")
    with PostgresStore(dsn) as store:
        commit(store, create("e1"))
    with psycopg.connect(own_server.dsn, autocommit=True) as admin:
        admin.execute("ALTER SYSTEM SET synchronous_standby_names = 'nobody_there'")
        admin.execute("SELECT pg_reload_conf()")

    def reloaded() -> bool:
        # the reload reaches the server's processes asynchronously: a store connected
        # too early could COMMIT without waiting for the standby (a flaky test); new
        # connections made once the postmaster has the setting all have it
        with psycopg.connect(dsn, autocommit=True) as probe:
            row = probe.execute("SHOW synchronous_standby_names").fetchone()
        return row is not None and row[0] == "nobody_there"

    scale_harness.wait_for(reloaded, 30, "the server to reload its configuration")
    with PostgresStore(dsn, reconnect_seconds=60) as store:
        intended = step(store.load_record("e1"), "charge")
        future = store.submit(intended)
        with psycopg.connect(own_server.dsn, autocommit=True) as admin:
            scale_harness.wait_for(
                lambda: admin.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'"
                ).fetchone()[0],
                30,
                "the COMMIT to wait for the standby",
            )
            admin.execute("ALTER SYSTEM RESET synchronous_standby_names")
        restarter = threading.Thread(target=own_server.restart)
        restarter.start()
        with pytest.raises(OutcomeUnknownError, match="COMMIT"):
            future.result(60)
        restarter.join(60)
        assert store.reconcile(intended) == COMMITTED  # it was durable all along
        assert store.load_record("e1").revision == 1
        commit(store, step(store.load_record("e1"), "paid"))  # the store goes on
