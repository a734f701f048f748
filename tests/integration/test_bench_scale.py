"""``tools/bench.py scale --json`` runs end to end with tiny counts and prints the keys
``docs/scale-out.md`` and ``docs/performance.md`` quote.

Behaviour only: no figure is compared with a target (speed is never asserted). What is
asserted is what must hold on any machine: every execution of the kill-a-worker run
finishes, its invariant counts are 0, and no commit is accepted from the zombie worker.
The benchmark starts its own server, in its hidden folder of ``PHRONOMY_BENCH_DIR``
(unless ``PHRONOMY_TEST_POSTGRES_DSN`` names one), and leaves nothing behind there.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytest.importorskip("psycopg")
pytest.importorskip("dbos")

RUNS_PER_SECOND = {
    "postgres_1_worker",
    "postgres_2_workers",
    "postgres_4_workers",
    "sqlite_1_process",
    "dbos_postgres",
}
INVARIANTS = ("lost", "double_terminal", "duplicate_effects", "blind_resends", "stuck")


@pytest.fixture
def bench_dir() -> Iterator[Path]:
    """A folder for ``PHRONOMY_BENCH_DIR`` that user ``postgres`` can get through when
    the benchmark starts its server as root (pytest's ``tmp_path`` sits under a private
    folder)."""
    from phronomy_fsm.store.postgres.server import (
        PostgresUnavailable,
        find_binaries,
        server_from_environment,
    )

    if server_from_environment() is None:
        try:
            find_binaries()
        except PostgresUnavailable as exc:
            if os.environ.get("CI"):
                raise
            pytest.skip(str(exc))
    folder = Path(tempfile.mkdtemp(prefix="phronomy-bench-scale-test-"))
    folder.chmod(0o711)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.slow
def test_scale_benchmark_prints_every_documented_key(bench_dir: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "tools/bench.py",
            "scale",
            "--json",
            "--runs",
            "8",
            "--concurrency",
            "4",
            "--kill-runs",
            "9",
            "--takeover-trials",
            "1",
        ],
        cwd=ROOT,
        env={**os.environ, "PHRONOMY_BENCH_DIR": str(bench_dir)},
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])

    rps = out["runs_per_second"]
    assert set(rps) == RUNS_PER_SECOND
    assert all(isinstance(v, float) and v > 0 for v in rps.values()), rps
    assert set(out["dbos_modes_runs_per_second"]) == {"queue", "direct"}
    assert isinstance(out["postgres_best_over_dbos"], float)
    assert out["lease_seconds"] == 2.0
    assert isinstance(out["takeover_seconds_median"], float)
    assert out["takeover_seconds_median"] > 0
    assert len(out["takeover_seconds"]) == 1
    assert out["takeover_seconds_median_same_host_probe"] > 0

    assert out["zombie_commits_accepted"] == 0
    assert out["zombie_run"]["final"] == 16
    kill = out["kill_a_worker_run"]
    assert kill["executions"] == 9
    assert kill["final"] == 9, kill
    for name in INVARIANTS:
        assert out[name] == 0, (name, kill)
        assert out[name] == kill[name]

    # Its folder (databases, worker logs, the server's data directory) is gone.
    assert list(bench_dir.iterdir()) == []


def test_local_postgres_makes_its_directory_in_base_dir_and_says_when_postgres_cannot_reach_it(
    tmp_path: Path,
) -> None:
    from phronomy_fsm.store.postgres.server import LocalPostgres, PostgresUnavailable

    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    inner = private / "inner"
    inner.mkdir()
    try:
        server = LocalPostgres(base_dir=inner)
    except PostgresUnavailable as exc:
        if os.environ.get("CI"):
            raise
        pytest.skip(str(exc))
    assert server.base.parent == inner
    assert server.data_dir.parent == server.base
    if os.geteuid() != 0:
        server.stop()
        return
    # As root the server runs as user postgres, who cannot get through ``private``
    # (however open ``inner`` is): refused before initdb, with the reason.
    inner.chmod(0o777)
    with pytest.raises(RuntimeError, match="user postgres cannot reach"):
        server.start()
    server.stop()
    assert list(inner.iterdir()) == []
