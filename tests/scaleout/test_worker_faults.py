"""Faults a fleet of workers on PostgreSQL survives, each against a real server and
real worker processes (``docs/scale-out.md``): a worker killed with SIGKILL mid-run, a
worker paused with SIGSTOP past its lease and resumed, two workers racing for the same
executions, a signal sent twice, signals reaching the owner by LISTEN/NOTIFY and by
polling. Invariants of ``tools/scale_harness.py`` hold after each."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from .conftest import ROOT, scale_harness

pytestmark = pytest.mark.slow
ZERO = dict.fromkeys((*scale_harness.INVARIANTS, "zombie_commits"), 0)


def _ids(prefix: str, n: int) -> list[str]:
    return [f"{prefix}-{i:03d}" for i in range(n)]


def test_a_killed_worker_s_executions_are_taken_over(cluster):
    ids = _ids("k", 30)
    a = cluster.start("a", effect_seconds=0.05, concurrency=30, lease_seconds=2)
    cluster.submit(ids)
    scale_harness.wait_for(
        lambda: sum(1 for r in cluster.store.list_records() if r.revision >= 2) >= 10,
        30,
        "worker a to be mid-run",
    )
    a.send_signal(signal.SIGKILL)
    a.wait(10)
    b = cluster.start("b", effect_seconds=0.05, concurrency=30, lease_seconds=2)
    statuses = cluster.drive(ids, 90)
    assert sorted(statuses.values()) == ["completed"] * len(ids) or all(
        s in ("completed", "failed") for s in statuses.values()
    ), statuses
    assert cluster.check(ids) == ZERO
    takers = {w for eid in ids for _r, _b, w, _f in cluster.store.barrier_owners(eid)}
    assert len(takers - {None}) == 2  # both workers committed: b took a's over
    assert "claimed" in cluster.log("b")
    assert b.poll() is None


def test_a_paused_worker_commits_nothing_after_its_lease_and_lets_go(cluster):
    ids = _ids("p", 3)
    a = cluster.start("a", effect_seconds=1.5, lease_seconds=1.5, scan_seconds=0.2)
    cluster.submit(ids)
    # every execution has announced its charge: a's effects are in flight
    scale_harness.wait_for(
        lambda: all(
            any(b.barrier == "charge" for b in cluster.store.barrier_log(eid)) for eid in ids
        ),
        30,
        "the charges to be announced",
    )
    a.send_signal(signal.SIGSTOP)
    try:
        b = cluster.start("b", lease_seconds=1.5, scan_seconds=0.2)
        worker_a = cluster.worker_ids()["a"]
        scale_harness.wait_for(
            lambda: all(o not in (None, worker_a) for o in cluster.owners(ids).values()),
            30,
            "worker b to take every execution over",
        )
    finally:
        a.send_signal(signal.SIGCONT)
    # a wakes up with effects finishing and commits in flight: each is refused
    scale_harness.wait_for(
        lambda: cluster.log("a").count("let go of execution") >= 1, 30, "a to let go"
    )
    statuses = cluster.drive(ids, 60)
    assert all(s in ("completed", "failed") for s in statuses.values()), statuses
    assert cluster.check(ids) == ZERO
    for eid in ids:
        owners = cluster.store.barrier_owners(eid)
        took_over = min(r for r, _b, w, _f in owners if w not in (None, worker_a))
        assert all(r < took_over for r, _b, w, _f in owners if w == worker_a), owners
    assert a.poll() is None and b.poll() is None


def test_two_workers_racing_for_the_same_executions_never_share_one(cluster):
    ids = _ids("r", 40)
    cluster.start("a", concurrency=40, scan_seconds=0.05)
    cluster.start("b", concurrency=40, scan_seconds=0.05)
    scale_harness.wait_for(lambda: len(cluster.worker_ids()) == 2, 30, "both workers")
    cluster.submit(ids)
    statuses = cluster.drive(ids, 60)
    assert set(statuses.values()) == {"completed"}
    assert cluster.check(ids) == ZERO
    for eid in ids:  # claimed once: one owner, fencing token 1, for every commit
        owners = {
            (w, f) for _r, barrier, w, f in cluster.store.barrier_owners(eid) if barrier != "@start"
        }
        assert len(owners) == 1 and next(iter(owners))[1] == 1, owners


@pytest.mark.parametrize("notify", [True, False], ids=["listen_notify", "polling"])
def test_a_signal_sent_twice_from_other_processes_is_applied_once(cluster, notify):
    # with notifications the inbox poll is 30 s: only NOTIFY can wake the owner in time
    cluster.start("a", notify=notify, poll_seconds=30 if notify else 0.05)
    cluster.submit(["twice"])
    scale_harness.wait_for(
        lambda: cluster.store.load_record("twice").status.value == "waiting", 30, "the wait"
    )
    script = textwrap.dedent(
        f"""
        from phronomy_fsm.durable import send_signal
        from phronomy_fsm.errors import ExecutionFinishedError
        from phronomy_fsm.store.open import open_store
        with open_store({cluster.dsn!r}) as store:
            try:
                print(send_signal(store, "twice", "approve", {{}}, signal_id="approval-1").seq)
            except ExecutionFinishedError:
                print("finished")  # the first one was applied before this one arrived
        """
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    senders = [
        subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE)
        for _ in range(2)
    ]
    seqs = {p.communicate(timeout=60)[0].strip() for p in senders} - {b"finished"}
    assert len(seqs) == 1  # both got the one stored signal (or it was applied already)
    statuses = scale_harness.drive(cluster.store, cluster.app, ["twice"], 20, answer=False)
    assert statuses == {"twice": "completed"}
    assert len(cluster.store.list_signals("twice")) == 1
    ships = [e for e in cluster.app.effects() if e.effect == "ship_parcel"]
    assert len(ships) == 1
