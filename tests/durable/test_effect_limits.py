"""Limits on effects held across worker processes that share a store
(``docs/semantics.md``, "Limits"), on SQLite and PostgreSQL: real ``phronomy-fsm
worker`` processes of ``limits_app`` (2 calls at once and 4 starts a second per
tenant), whose calls record their start and end to a ledger file.

- two workers never run more than 2 calls at once between them, and never start more
  than 4 within a second;
- a call answered "too many requests" (``RateLimited``) pauses the tenant's limits for
  every worker, and is started again after the pause: same key, same attempt, the
  execution completed;
- a worker SIGKILLed while it holds the slots: they are freed once another worker
  takes its executions over, and the next call runs.
"""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from phronomy_fsm.cli import main
from phronomy_fsm.durable.submit import submit_execution
from phronomy_fsm.store.open import open_store
from phronomy_fsm.testing.deadlines import scaled_seconds, wait_until
from tests.durable.limits_app import Call, create_app, read_ledger

from .conftest import ROOT

sys.path.insert(0, str(ROOT / "tools"))

import scale_harness

pytestmark = pytest.mark.timeout(240)
APP = "tests.durable.limits_app:create_app"


class Fleet:
    """Worker processes of ``limits_app`` on the test's store."""

    def __init__(self, db: str, folder: Path) -> None:
        self.db = db
        self.folder = folder
        self.store = open_store(db)
        self.machine = create_app(db).machines[0]
        self.workers: dict[str, Any] = {}

    def start(self, name: str, *, effect_seconds: float = 0.0, **options: Any) -> Any:
        options.setdefault("lease_seconds", 2.0)
        options.setdefault("scan_seconds", 0.1)
        proc = scale_harness.start_worker(
            self.db, self.folder, name, app=APP, effect_seconds=effect_seconds, **options
        )
        self.workers[name] = proc
        return proc

    def wait_registered(self, *names: str) -> dict[str, str]:
        def registered() -> dict[str, str] | None:
            ids = {w.name: w.worker_id for w, _hb, _exp in self.store.list_workers()}
            return ids if all(n in ids for n in names) else None

        return wait_until(registered, 60, f"workers {names} to register")

    def submit(self, ids: list[str], tenant: str = "t1") -> None:
        for eid in ids:
            submit_execution(self.store, self.machine, Call(eid, tenant), execution_id=eid)

    def statuses(self, ids: list[str]) -> dict[str, str]:
        return {eid: self.store.load_record(eid).status.value for eid in ids}

    def wait_statuses(self, ids: list[str], wanted: set[str], timeout: float = 90) -> None:
        wait_until(
            lambda: set(self.statuses(ids).values()) <= wanted,
            timeout,
            f"executions {ids} to reach {wanted} (logs in {self.folder})",
        )

    def close(self) -> None:
        for proc in self.workers.values():
            scale_harness.stop_worker(proc)
        self.store.close()


@pytest.fixture
def fleet(store_target: str, tmp_path: Path) -> Iterator[Fleet]:
    f = Fleet(store_target, tmp_path)
    yield f
    f.close()


def _calls(folder: Path, event: str) -> list[dict[str, Any]]:
    return sorted((e for e in read_ledger(folder) if e["event"] == event), key=lambda e: e["at"])


def _most_at_once(folder: Path) -> int:
    # an end before a start at the same instant: the recorded interval of a call lies
    # inside the time it held its slot
    moves = sorted(
        (e["at"], 1 if e["event"] == "start" else -1)
        for e in read_ledger(folder)
        if e["event"] in ("start", "end")
    )
    running = most = 0
    for _at, move in moves:
        running += move
        most = max(most, running)
    return most


def test_two_workers_share_the_concurrency_and_the_rate_of_a_key(fleet: Fleet) -> None:
    # each worker claims at most 6: both must run calls
    fleet.start("a", effect_seconds=0.2, concurrency=6)
    fleet.start("b", effect_seconds=0.2, concurrency=6)
    fleet.wait_registered("a", "b")
    ids = [f"c{i:02d}" for i in range(12)]
    fleet.submit(ids)
    fleet.wait_statuses(ids, {"completed"})
    starts = _calls(fleet.folder, "start")
    assert sorted(e["call"] for e in starts) == ids  # each call once
    assert len({e["pid"] for e in starts}) == 2  # both workers called
    assert _most_at_once(fleet.folder) == 2  # the limit, reached and never passed
    times = [e["at"] for e in starts]
    # 4 starts a second: a fifth start comes a second after the first of four (less
    # the few milliseconds between taking the slot and recording the start)
    gaps = [later - first for first, later in zip(times, times[4:], strict=False)]
    assert min(gaps) >= 0.5, gaps
    assert times[8] - times[0] >= 1.5
    assert fleet.store.limit_holds()[0] == []  # every slot given back


def test_a_rate_limited_call_pauses_the_key_for_every_worker(fleet: Fleet) -> None:
    pause = scaled_seconds(1.5)
    (fleet.folder / "rate_limit_once").write_text(str(pause))
    # each worker runs at most 2 executions: the other worker must run the later calls
    fleet.start("a", concurrency=2)
    fleet.start("b", concurrency=2)
    fleet.wait_registered("a", "b")
    fleet.submit(["first"])
    limited = wait_until(lambda: _calls(fleet.folder, "rate_limited"), 60, "the 429")[0]
    # stored just after the call raised (the ledger line comes first)
    pauses = wait_until(lambda: fleet.store.limit_holds()[1], 30, "the pause to be stored")
    assert {(p.limit, p.key) for p in pauses} == {("api_rate", "t1"), ("api_slots", "t1")}
    later = ["second", "third", "fourth", "fifth"]
    fleet.submit(later)
    fleet.wait_statuses(["first", *later], {"completed"})
    starts = _calls(fleet.folder, "start")
    assert sorted(e["call"] for e in starts) == sorted(["first", *later])
    # no call of the key started during the pause, in either worker
    assert min(e["at"] for e in starts) >= limited["at"] + pause - 0.01
    assert {e["pid"] for e in starts} - {limited["pid"]}  # the other worker waited too
    # the limited call ran once after the pause, with its key and attempt: not a retry
    again = [e for e in starts if e["call"] == "first"]
    assert [(e["key"], e["attempt"]) for e in again] == [(limited["key"], 1)]


def test_slots_of_a_killed_worker_are_freed_after_takeover(fleet: Fleet) -> None:
    a = fleet.start("a", effect_seconds=600, lease_seconds=1.0)
    worker_a = fleet.wait_registered("a")["a"]
    fleet.submit(["held1", "held2"])
    holds = wait_until(
        lambda: (h := fleet.store.limit_holds()[0]) and len(h) == 2 and h,
        60,
        "worker a to hold both slots",
    )
    assert {(h.limit, h.execution_id, h.worker_id) for h in holds} == {
        ("api_slots", "held1", worker_a),
        ("api_slots", "held2", worker_a),
    }
    # what an operator sees (docs/operations.md, "Rate limits and concurrency")
    listed = CliRunner().invoke(main, ["store", "limits", "--db", fleet.db, "--json"])
    assert listed.exit_code == 0, listed.output
    assert sorted(
        (s["execution_id"], s["worker_id"]) for s in json.loads(listed.output)["slots"]
    ) == [
        ("held1", worker_a),
        ("held2", worker_a),
    ]
    a.send_signal(signal.SIGKILL)
    a.wait(10)
    fleet.start("b", lease_seconds=1.0)
    fleet.submit(["next"])
    # the killed calls are at_most_once: b parks them for an operator; their slots go
    fleet.wait_statuses(["next"], {"completed"})
    fleet.wait_statuses(["held1", "held2"], {"recovery_required"})
    assert fleet.store.limit_holds()[0] == []
    nexts = [e for e in _calls(fleet.folder, "start") if e["call"] == "next"]
    assert len(nexts) == 1 and nexts[0]["pid"] != a.pid


def test_a_rate_limited_effect_no_limit_covers_waits_alone_and_runs_once(
    open_runtime: Any, tmp_path: Path
) -> None:
    from limited_flow import TABLE

    from phronomy_fsm.durable import ExecutionStatus, Machine
    from tests.durable.limits_app import CallHooks

    pause = scaled_seconds(0.5)
    (tmp_path / "rate_limit_once").write_text(str(pause))
    machine = Machine(TABLE._replace(limits=()), CallHooks(tmp_path), context_type=Call)
    runtime, recorder = open_runtime([machine])
    runtime.start("limited_flow", Call("solo", "t1"), execution_id="solo")
    result = runtime.wait("solo", scaled_seconds(30))
    assert result.status is ExecutionStatus.COMPLETED  # not failed by the 429
    (limited,) = _calls(tmp_path, "rate_limited")
    (start,) = _calls(tmp_path, "start")
    assert (start["key"], start["attempt"]) == (limited["key"], 1)
    assert start["at"] >= limited["at"] + pause - 0.01
    # one start, one finish: the deferral is not an attempt that ended
    assert recorder.kinds("solo").count("effect_finished") == 1
    assert runtime.store.limit_holds() == ([], [])  # nothing is asked of the store
