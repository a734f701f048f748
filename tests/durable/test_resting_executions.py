"""A worker holding many waiting executions keeps no live copy of them, yet applies a
signal to one and fires the timer of another on time (issue 26 item 1;
``docs/runtime.md``, "How a waiting execution is held")."""

from __future__ import annotations

import importlib.util
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType

from phronomy_fsm.durable import DurableRuntime, ExecutionStatus
from phronomy_fsm.store import SqliteBarrierStore
from phronomy_fsm.testing.deadlines import scaled_seconds, wait_until

HELD = 2000


def _app() -> ModuleType:
    """The benchmark's waiting machine (``tools/benchmarks/_waiting_app``)."""
    path = Path(__file__).resolve().parents[2] / "tools/benchmarks/_waiting_app/app.py"
    spec = importlib.util.spec_from_file_location("waiting_bench_app", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _counts(runtime: DurableRuntime) -> tuple[int, int, int]:
    """(live copies, resting entries, timers pending on the loop), read on the loop."""
    engine = runtime.engine

    def read() -> tuple[int, int, int]:
        timers = runtime.dispatcher._timers  # the loop's one heap of timers
        pending = sum(1 for _d, _s, handle in timers._heap if not handle.cancelled)
        resting = getattr(engine, "resting", ())  # before issue 26: none
        return len(engine.live), len(resting), pending

    return runtime.dispatcher.call(read).result(10)


def _check_holding(store, tmp_path: Path) -> None:
    app = _app()
    now = datetime.now(UTC)
    soon = now + timedelta(seconds=scaled_seconds(2.0))
    records = [
        app.waiting_record(f"w-{i}", "answer" if i % 2 else "timer", now) for i in range(HELD)
    ]
    records.append(app.waiting_record("t-soon", "timer", now, deadline_at=soon))
    assert app.seed(store, records) == HELD + 1
    with DurableRuntime(store, machines=[app.machine()]) as runtime:
        report = runtime.recover()
        assert len(report.claimed) == HELD + 1
        wait_until(lambda: sum(_counts(runtime)[:2]) == HELD + 1, 30, "every one installed")
        live, resting, timers = _counts(runtime)
        assert live == 0  # no LiveExecution (record, context, session) per waiting one
        assert resting == HELD + 1  # a resting entry each
        assert timers <= 2  # one timer for the earliest deadline, not one per execution
        assert runtime.is_live("w-7") and runtime.is_live("t-soon")

        runtime.signal("w-7", "answer", {"by": "a person"})
        wait_until(
            lambda: store.load_record("w-7").status is ExecutionStatus.COMPLETED,
            10,
            "the signal to be applied",
        )
        answered = store.load_record("w-7")
        assert answered.context["answer"] == {"by": "a person"}

        wait_until(
            lambda: store.load_record("t-soon").status is ExecutionStatus.COMPLETED,
            15,
            "the timer to fire",
        )
        fired = store.load_record("t-soon")
        assert fired.state == "done" and "answer" not in fired.context
        assert soon <= fired.updated_at <= soon + timedelta(seconds=scaled_seconds(5))
        assert store.load_record("w-6").status is ExecutionStatus.WAITING  # others wait on
        wait_until(lambda: _counts(runtime)[:2] == (0, HELD - 1), 10, "the rest to rest")


def test_a_worker_holds_thousands_of_waiting_executions_without_live_copies_sqlite(
    tmp_path: Path,
) -> None:
    with SqliteBarrierStore(tmp_path / "rest.db") as store:
        _check_holding(store, tmp_path)


def test_a_worker_holds_thousands_of_waiting_executions_without_live_copies_postgres(
    tmp_path: Path, pg_dsn: str
) -> None:
    from phronomy_fsm.store.postgres import PostgresStore

    with PostgresStore(pg_dsn) as store:
        _check_holding(store, tmp_path)
