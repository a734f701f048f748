"""Workers on two "hosts" — network namespaces joined to the database by veth pairs —
one of them cut off from the database (``ip link set ... down``) and later reconnected:
the other takes its executions over after its lease, and the cut-off worker, once back,
commits nothing and lets them go. Needs root and ``ip netns``; skipped with the reason
where namespaces are refused. Addresses are in 198.18.0.0/15 (the benchmarking range),
inside namespaces this test makes and removes."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from .conftest import Cluster, scale_harness

pytestmark = pytest.mark.slow
TAG = f"phr{os.getpid() % 100000}"


def _free_subnets() -> list[str]:
    """Two /24 subnets of 198.18.0.0/15 (``"198.18.7"``...) that no address on this
    machine uses now: another suite beside this one (or a test of another checkout)
    makes namespaces of its own, and the same addresses on two links break both."""
    used = subprocess.run(
        ["ip", "-o", "-4", "addr"], capture_output=True, text=True, check=False
    ).stdout
    start = os.getpid() % 254
    free = []
    for n in range(512):
        k = (start + n) % 508
        prefix = f"198.{18 + k // 254}.{1 + k % 254}"
        if f" {prefix}." not in used:
            free.append(prefix)
        if len(free) == 2:
            return free
    pytest.skip("no free subnet in 198.18.0.0/15")


def _ip(*args: str, netns: str | None = None) -> None:
    cmd = ["ip", *args] if netns is None else ["ip", "netns", "exec", netns, "ip", *args]
    subprocess.run(cmd, check=True, capture_output=True, timeout=30)


@pytest.fixture
def hosts():
    """Two namespaces ``{name: (netns, host-side link, server address)}``."""
    if shutil.which("ip") is None or os.geteuid() != 0:
        pytest.skip("network namespaces need root and iproute2 (ip)")
    made: list[str] = []
    subnets = _free_subnets()
    try:
        out = {}
        for i in (1, 2):
            net = subnets[i - 1]
            ns, link = f"{TAG}h{i}", f"{TAG}a{i}"
            try:
                _ip("netns", "add", ns)
            except subprocess.CalledProcessError as exc:
                pytest.skip(f"ip netns refused here: {exc.stderr.decode().strip()}")
            made.append(ns)
            _ip("link", "add", link, "type", "veth", "peer", "name", f"{TAG}b{i}")
            _ip("link", "set", f"{TAG}b{i}", "netns", ns)
            _ip("addr", "add", f"{net}.1/24", "dev", link)
            _ip("link", "set", link, "up")
            _ip("addr", "add", f"{net}.2/24", "dev", f"{TAG}b{i}", netns=ns)
            _ip("link", "set", f"{TAG}b{i}", "up", netns=ns)
            _ip("link", "set", "lo", "up", netns=ns)
            out[f"h{i}"] = (ns, link, f"{net}.1")
        yield out
    finally:
        for ns in made:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)
        for i in (1, 2):
            subprocess.run(["ip", "link", "del", f"{TAG}a{i}"], capture_output=True, check=False)


def test_a_worker_cut_off_from_the_database_is_taken_over_and_commits_nothing_when_back(
    hosts, tmp_path: Path
):
    from phronomy_fsm.store.postgres.server import LocalPostgres, with_database

    addresses = ",".join(["127.0.0.1", *(a for _ns, _l, a in hosts.values())])
    with LocalPostgres(listen=addresses, trust_networks=("198.18.0.0/15",)) as server:
        local_dsn = server.create_database("partition")
        cluster = Cluster(local_dsn, tmp_path)
        try:

            def dsn_from(host: str) -> str:
                return with_database(
                    f"postgresql://postgres@{hosts[host][2]}:{server.port}/x", "partition"
                )

            ids = [f"n-{i}" for i in range(4)]
            options = {"effect_seconds": 1.0, "lease_seconds": 2.0, "scan_seconds": 0.25}
            one = scale_harness.start_worker(
                dsn_from("h1"),
                tmp_path,
                "h1",
                prefix=("ip", "netns", "exec", hosts["h1"][0]),
                **options,
            )
            cluster.workers["h1"] = one
            scale_harness.wait_for(lambda: "h1" in cluster.worker_ids(), 30, "worker h1")
            cluster.submit(ids)
            h1 = cluster.worker_ids()["h1"]
            scale_harness.wait_for(
                lambda: all(o == h1 for o in cluster.owners(ids).values()), 30, "h1 to hold them"
            )
            two = scale_harness.start_worker(
                dsn_from("h2"),
                tmp_path,
                "h2",
                prefix=("ip", "netns", "exec", hosts["h2"][0]),
                **options,
            )
            cluster.workers["h2"] = two
            _ip("link", "set", hosts["h1"][1], "down")  # h1 is cut off
            try:
                scale_harness.wait_for(
                    lambda: all(o not in (None, h1) for o in cluster.owners(ids).values()),
                    60,
                    "h2 to take every execution over",
                )
            except AssertionError as exc:  # say what h2 was doing
                raise AssertionError(
                    f"{exc}; owners {cluster.owners(ids)}; h2 exit code {two.poll()}; "
                    f"h2 log: {cluster.log('h2')[-3000:]}"
                ) from exc
            finally:
                _ip("link", "set", hosts["h1"][1], "up")  # and reconnected
            statuses = cluster.drive(ids, 90)
            assert all(s in ("completed", "failed") for s in statuses.values()), statuses
            assert cluster.check(ids) == dict.fromkeys(
                (*scale_harness.INVARIANTS, "zombie_commits"), 0
            )
            for eid in ids:
                owners = cluster.store.barrier_owners(eid)
                took = min(r for r, _b, w, _f in owners if w not in (None, h1))
                assert all(r < took for r, _b, w, _f in owners if w == h1), owners
            assert one.poll() is None and two.poll() is None
        finally:
            cluster.close()
