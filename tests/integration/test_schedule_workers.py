"""Schedules run by real ``phronomy-fsm worker`` processes, on SQLite and PostgreSQL
(``docs/operations.md``, "Schedules"): two workers racing for one schedule start every
slot exactly once; ``schedules pause``/``resume`` from another process stop and restart
the starts; a worker that was down does not start a storm of missed slots; the skip
policy waits for the active execution. The cron fires every second; every wait is a
condition with a deadline."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from phronomy_fsm.durable.schedules import execution_id_for
from phronomy_fsm.store.open import open_store
from phronomy_fsm.testing.deadlines import wait_until

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import scale_harness

ORDER = json.dumps({"order_id": "scheduled", "amount_cents": 700})
EVERY_SECOND = "* * * * * *"


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgres":
        return str(request.getfixturevalue("pg_dsn"))
    path = tmp_path / "store.db"
    open_store(path).close()  # the CLI opens existing files only
    return str(path)


class Workers:
    """Worker processes of the order app on ``db``, stopped at the end."""

    def __init__(self, db: str, folder: Path) -> None:
        self.db, self.folder = db, folder
        self.procs: dict[str, Any] = {}
        self.store = open_store(db)

    def start(self, name: str) -> None:
        self.procs[name] = scale_harness.start_worker(
            self.db, self.folder, name, lease_seconds=2.0, scan_seconds=0.2
        )

    def stop(self, name: str) -> None:
        assert scale_harness.stop_worker(self.procs.pop(name)) == 0, self.log(name)

    def log(self, name: str) -> str:
        return (self.folder / f"{name}.log").read_text(errors="replace")

    def cli(self, *args: str) -> str:
        out = subprocess.run(
            [sys.executable, "-m", "phronomy_fsm.cli", *args, "--db", self.db],
            cwd=ROOT,
            check=False,
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        assert out.returncode == 0, out.stderr
        return out.stdout

    def slots(self, name: str) -> list[str]:
        """The execution ids the schedule started, by slot."""
        return sorted(
            r.execution_id for r in self.store.list_records() if r.labels.get("schedule") == name
        )

    def close(self) -> None:
        for proc in self.procs.values():
            scale_harness.stop_worker(proc)
        self.store.close()


@pytest.fixture
def workers(db: str, tmp_path: Path) -> Iterator[Workers]:
    w = Workers(db, tmp_path)
    yield w
    w.close()


def contiguous(name: str, ids: list[str]) -> list[str]:
    """The ids of every slot from the first of ``ids`` on, one a second."""
    first = workers_slot(ids[0])
    return [execution_id_for(name, first + timedelta(seconds=k)) for k in range(len(ids))]


def workers_slot(eid: str) -> datetime:
    """The slot an execution id names (its last 20 characters: ISO 8601 UTC)."""
    return datetime.fromisoformat(eid[-20:])


def test_two_workers_start_every_slot_once_and_pause_resume_from_the_cli(
    workers: Workers,
) -> None:
    workers.cli(
        "schedules", "add", "race", "--machine", "order_flow", "--cron", EVERY_SECOND,
        "--overlap", "allow", "--catchup-seconds", "30", "--context", ORDER,
    )  # fmt: skip
    workers.start("w1")
    workers.start("w2")
    wait_until(lambda: len(workers.slots("race")) >= 6, 60, "six slots started")
    assert "paused race" in workers.cli("schedules", "pause", "race")
    paused_at = workers.store.store_time()
    before = workers.slots("race")
    # every slot from the first on, exactly once (the execution id is the slot)
    assert before == contiguous("race", before)
    starts = sorted(
        datetime.fromisoformat(r.labels["slot"])
        for r in workers.store.list_records()
        if r.labels.get("schedule") == "race"
    )
    first = starts[0]
    assert starts == [first + timedelta(seconds=k) for k in range(len(starts))], starts
    wait_until(
        lambda: workers.store.store_time() >= paused_at + timedelta(seconds=3), 20, "3 s paused"
    )
    during = workers.slots("race")
    assert all(workers_slot(eid) <= paused_at for eid in during), during
    assert "resumed race" in workers.cli("schedules", "resume", "race")
    resumed_at = workers.store.store_time()
    wait_until(lambda: len(workers.slots("race")) > len(during) + 1, 60, "slots after resume")
    after = workers.slots("race")[len(during) :]
    assert workers_slot(after[0]) >= resumed_at - timedelta(seconds=1)
    assert after == contiguous("race", after)
    listed = json.loads(workers.cli("schedules", "list", "--json"))
    assert [s["name"] for s in listed] == ["race"] and not listed[0]["paused"]
    # both workers looked at the schedule; a start of a slot the other made is
    # refused by the id and counted, never a second execution
    assert listed[0]["started"] + listed[0]["duplicates"] >= len(workers.slots("race")) - 1
    for r in workers.store.list_records():
        assert r.labels["slot"].startswith(workers_slot(r.execution_id).isoformat()[:19])


def test_a_worker_down_for_a_while_starts_no_storm_of_missed_slots(workers: Workers) -> None:
    for name, more in (("latest", ()), ("window", ("--catchup-seconds", "4"))):
        workers.cli(
            "schedules", "add", name, "--machine", "order_flow", "--cron", EVERY_SECOND,
            "--overlap", "allow", "--context", ORDER, *more,
        )  # fmt: skip
    workers.start("w1")
    wait_until(lambda: workers.slots("latest") and workers.slots("window"), 60, "the first slots")
    workers.stop("w1")
    last = {name: workers.slots(name)[-1] for name in ("latest", "window")}
    down_at = workers.store.store_time()
    wait_until(lambda: workers.store.store_time() >= down_at + timedelta(seconds=8), 30, "8 s down")
    restart_at = workers.store.store_time()
    workers.start("w2")

    def caught_up() -> tuple[Any, Any] | None:
        records = [workers.store.load_schedule(n) for n in ("latest", "window")]
        return tuple(records) if all(r.missed for r in records) else None  # type: ignore[return-value]

    latest, window = wait_until(caught_up, 60, "the restarted worker's first tick")
    new_latest = [e for e in workers.slots("latest") if e > last["latest"]]
    new_window = [e for e in workers.slots("window") if e > last["window"]]
    # no storm: without a window only the newest missed slot, with one only its slots
    assert workers_slot(new_latest[0]) >= restart_at - timedelta(seconds=1), new_latest
    assert workers_slot(new_window[0]) >= restart_at - timedelta(seconds=5), new_window
    assert latest.missed >= 7
    # the window started some of the slots the default left missed (the two ticks may
    # be a second or more apart under load, so no closer bound)
    assert 0 < window.missed < latest.missed
    assert new_latest == contiguous("latest", new_latest)


def test_skip_waits_for_the_active_execution_and_buffer_one_keeps_one_slot(
    workers: Workers,
) -> None:
    for policy in ("skip", "buffer_one"):
        workers.cli(
            "schedules", "add", policy, "--machine", "order_flow", "--cron", EVERY_SECOND,
            "--overlap", policy, "--context", ORDER,
        )  # fmt: skip
    workers.start("w1")

    def skipped(name: str, at_least: int) -> bool:
        return workers.store.load_schedule(name).skipped >= at_least

    wait_until(lambda: skipped("skip", 2) and skipped("buffer_one", 1), 60, "slots skipped")
    assert len(workers.slots("skip")) == 1 and len(workers.slots("buffer_one")) == 1
    buffered = workers.store.load_schedule("buffer_one").buffered_slot_at
    assert buffered is not None
    for name in ("skip", "buffer_one"):
        first = workers.slots(name)[0]
        wait_until(
            lambda first=first: workers.store.load_record(first).status.value == "waiting",
            30,
            "waiting for approval",
        )
        workers.cli("signal", first, "reject", "--payload", "{}")
    wait_until(lambda: len(workers.slots("buffer_one")) >= 2, 60, "the buffered slot")
    assert workers.slots("buffer_one")[1] == execution_id_for("buffer_one", buffered)
    wait_until(lambda: len(workers.slots("skip")) >= 2, 60, "the next slot")
    assert workers_slot(workers.slots("skip")[1]) > workers_slot(workers.slots("skip")[0])


def test_the_cli_refuses_bad_input_writing_nothing_and_removes(workers: Workers) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "phronomy_fsm.cli", "schedules", *args, "--db", workers.db],
            cwd=ROOT,
            check=False,
            capture_output=True,
            text=True,
            timeout=120,
        )

    bad = run(
        "add", "x y", "--machine", "order_flow", "--cron", "every day", "--timezone", "Nowhere"
    )
    assert bad.returncode == 1
    assert "name 'x y'" in bad.stderr and "cron 'every day'" in bad.stderr
    assert "timezone 'Nowhere'" in bad.stderr and "nothing was stored" in bad.stderr
    assert workers.store.list_schedules() == []
    assert run("pause", "ghost").returncode == 1
    added = run(
        "add", "daily", "--machine", "order_flow", "--cron", "0 9 * * *", "--context", ORDER
    )
    assert added.returncode == 0 and "added daily  active" in added.stdout
    assert run("add", "daily", "--machine", "order_flow", "--cron", "0 9 * * *").returncode == 1
    assert "removed daily" in run("remove", "daily").stdout
    assert workers.store.list_schedules() == []
    assert "no schedule named 'daily'" in run("remove", "daily").stderr
