"""OffloadPool, Task and CancellationToken (reference §7.3-§7.5, acs16)."""

from __future__ import annotations

import asyncio
import pickle
import threading
from typing import Any

import pytest

from phronomy_fsm.errors import (
    BackpressureError,
    Cancelled,
    PoolShutdownError,
    TaskTimeoutError,
    WrongThreadError,
)
from phronomy_fsm.runtime import CancellationToken, Dispatcher, ManualClock, OffloadPool, Task


def wait_until(predicate: Any, timeout: float = 5.0) -> None:
    done = threading.Event()
    for _ in range(int(timeout / 0.002)):
        if predicate():
            return
        done.wait(0.002)
    raise AssertionError("condition not reached")


# ------------------------------------------------------------------- pool


def test_operation_settles_once_with_the_value() -> None:
    pool = OffloadPool(max_workers=2, queue_size=2)
    op = pool.submit(lambda a, b: a + b, 2, 3)
    settled: list[Any] = []
    op.add_settled_callback(lambda o: settled.append((o.status, o.value)))
    wait_until(lambda: op.settled and op.physically_done)
    assert (op.status, op.value, op.error) == ("completed", 5, None)
    assert settled == [("completed", 5)]
    assert op.cancel() is False  # already settled: nothing changes
    assert op.status == "completed"
    pool.shutdown()


def test_operation_error_is_its_outcome() -> None:
    pool = OffloadPool(max_workers=1, queue_size=1)

    def boom() -> None:
        raise ValueError("bad")

    op = pool.submit(boom)
    wait_until(lambda: op.settled)
    assert op.status == "failed" and isinstance(op.error, ValueError)
    pool.shutdown()


def test_early_cancel_abandons_without_interrupting_and_physical_completion_follows() -> None:
    pool = OffloadPool(max_workers=1, queue_size=1)
    started, release = threading.Event(), threading.Event()
    order: list[str] = []

    def work() -> str:
        started.set()
        release.wait(5)
        order.append("work returned")
        return "late value"

    op = pool.submit(work)
    op.add_physical_callback(lambda o: order.append("physical"))
    started.wait(5)
    assert op.cancel("user cancelled") is True
    assert op.status == "cancelled" and op.abandoned and not op.physically_done
    assert pool.metrics()["abandoned_active"] == 1
    release.set()
    wait_until(lambda: op.physically_done)
    assert order == ["work returned", "physical"]
    assert op.value is None  # the late result was discarded
    assert isinstance(op.error, Cancelled)
    assert pool.metrics()["abandoned_active"] == 0 and pool.metrics()["abandoned"] == 1
    pool.shutdown()


def test_physical_completion_precedes_logical_callbacks_on_a_normal_return() -> None:
    pool = OffloadPool(max_workers=1, queue_size=1)
    order: list[str] = []
    gate = threading.Event()
    op = pool.submit(gate.wait, 5)
    op.add_physical_callback(lambda o: order.append("physical"))
    op.add_settled_callback(lambda o: order.append("settled"))
    gate.set()
    wait_until(lambda: len(order) == 2)
    assert order == ["physical", "settled"]
    pool.shutdown()


def test_timeout_counts_from_submission_on_the_clock() -> None:
    clock = ManualClock()
    pool = OffloadPool(max_workers=1, queue_size=2, clock=clock)
    gate = threading.Event()
    first = pool.submit(gate.wait, 5)
    queued = pool.submit(lambda: "never", timeout_seconds=3)
    clock.advance(3.5)
    wait_until(lambda: queued.settled)
    assert queued.status == "timed_out" and queued.error.timed_out
    gate.set()
    wait_until(lambda: queued.physically_done and first.settled)
    assert queued.value is None  # it never ran
    pool.shutdown()


def test_full_pool_raises_backpressure_or_waits() -> None:
    pool = OffloadPool(max_workers=1, queue_size=1)
    gate = threading.Event()
    pool.submit(gate.wait, 5)
    pool.submit(gate.wait, 5)
    with pytest.raises(BackpressureError) as info:
        pool.submit(lambda: None)
    assert info.value.max_workers == 1
    with pytest.raises(BackpressureError):
        pool.submit(lambda: None, on_full="wait", full_timeout_seconds=0.05)
    threading.Timer(0.05, gate.set).start()
    op = pool.submit(lambda: "in", on_full="wait", full_timeout_seconds=5)
    wait_until(lambda: op.settled)
    assert op.value == "in"
    pool.shutdown()


def test_cancellation_token_cancels_queued_work_and_metrics_count_waits() -> None:
    pool = OffloadPool(max_workers=1, queue_size=2)
    gate = threading.Event()
    pool.submit(gate.wait, 5)
    wait_until(lambda: pool.metrics()["active"] == 1)
    token = CancellationToken()
    op = pool.submit(lambda: "x", cancellation_token=token)
    token.cancel("stop")
    assert op.status == "cancelled" and not op.abandoned
    assert pool.metrics()["queued"] == 1 and pool.metrics()["active"] == 1
    gate.set()
    wait_until(lambda: op.physically_done)
    assert pool.metrics()["average_wait_seconds"] >= 0
    pool.shutdown()
    with pytest.raises(PoolShutdownError):
        pool.submit(lambda: None)


# ------------------------------------------------------------------- tasks


def test_task_waiter_timeout_does_not_cancel_the_task() -> None:
    task: Task[int] = Task("t")
    with pytest.raises(TaskTimeoutError):
        task.result(timeout_seconds=0.01)
    assert task.status == "pending"
    assert task.complete(1) and not task.complete(2) and not task.fail(RuntimeError())
    assert task.result() == 1 and task.status == "completed"


def test_task_cancel_and_fail_statuses() -> None:
    cancelled: Task[Any] = Task()
    cancelled.cancel("stop")
    with pytest.raises(Cancelled):
        cancelled.result()
    assert cancelled.status == "cancelled"
    failed = Task.failed(KeyError("k"))
    assert failed.status == "failed" and isinstance(failed.error(), KeyError)


def test_task_callbacks_are_isolated() -> None:
    task: Task[str] = Task()
    seen: list[str] = []

    def bad(t: Task[str]) -> None:
        raise RuntimeError("callback bug")

    task.add_done_callback(bad)
    task.add_done_callback(lambda t: seen.append(t.result()))
    task.complete("v")
    task.add_done_callback(lambda t: seen.append("late"))
    assert seen == ["v", "late"]


def test_task_can_be_awaited_from_asyncio() -> None:
    task: Task[str] = Task()

    async def main() -> str:
        asyncio.get_running_loop().call_later(0.01, task.complete, "async value")
        return await task

    assert asyncio.run(main()) == "async value"


def test_blocking_on_the_loop_thread_is_refused() -> None:
    dispatcher = Dispatcher()
    dispatcher.start()
    pending: Task[int] = Task("pending")
    outcome = dispatcher.call(lambda: pending.result(timeout_seconds=1))
    with pytest.raises(WrongThreadError):
        outcome.result(timeout_seconds=5)
    # a settled task may be read on the loop (no wait happens)
    done = Task.completed(3)
    assert dispatcher.call(done.result).result(timeout_seconds=5) == 3
    dispatcher.stop()


# ---------------------------------------------------------------- tokens


def test_token_cancel_is_idempotent_and_fires_callbacks_once() -> None:
    token = CancellationToken()
    fired: list[str] = []
    token.on_cancel(lambda e: fired.append(e.reason))
    assert token.cancel("first") and not token.cancel("second")
    assert fired == ["first"] and token.reason == "first"
    token.on_cancel(lambda e: fired.append("late:" + e.reason))
    assert fired == ["first", "late:first"]
    with pytest.raises(Cancelled):
        token.raise_if_cancelled()


def test_passive_deadline_cancels_without_callbacks_until_promoted() -> None:
    clock = ManualClock()
    token = CancellationToken.timeout_after(2.0, clock=clock)
    fired: list[bool] = []
    token.on_cancel(lambda e: fired.append(e.timed_out))
    assert not token.is_cancelled()
    clock.advance(2.0)
    assert token.is_cancelled() and token.timed_out and fired == []
    assert token.check_deadline() and fired == [True]


def test_cancelled_is_not_an_ordinary_exception_and_errors_pickle() -> None:
    assert not issubclass(Cancelled, Exception)
    try:
        try:
            raise Cancelled("x")
        except Exception:  # noqa: BLE001 - the point of the test
            pytest.fail("except Exception swallowed a cancellation")
    except Cancelled as exc:
        clone = pickle.loads(pickle.dumps(exc))
        assert clone.reason == "x"
    error = BackpressureError("full", pool="p", max_workers=3, queue_size=4)
    clone = pickle.loads(pickle.dumps(error))
    assert (type(clone), str(clone), clone.max_workers) == (BackpressureError, "full", 3)


def test_a_deferred_operation_holds_no_thread_and_runs_when_its_gate_lets_it() -> None:
    from phronomy_fsm.runtime.offload import Defer, DeferWork

    pool = OffloadPool(max_workers=1, queue_size=4)
    asked: list[int] = []

    def gate() -> Defer | None:
        asked.append(1)
        return Defer(0.05) if len(asked) < 3 else None  # "not yet" twice

    runs: list[int] = []

    def deferred_once() -> str:
        runs.append(1)
        if len(runs) == 1:
            raise DeferWork(0.05)  # not performed: run it again later
        return "done"

    first = pool.submit(deferred_once, gate=gate)
    # the one worker thread is free while the first waits: other work runs meanwhile
    other = pool.submit(lambda: "other")
    task_done = threading.Event()
    other.add_settled_callback(lambda op: task_done.set())
    assert task_done.wait(5) and other.value == "other"
    done = threading.Event()
    first.add_settled_callback(lambda op: done.set())
    assert done.wait(5)
    assert first.value == "done" and len(runs) == 2 and len(asked) == 4
    pool.shutdown()


def test_cancelling_a_deferred_operation_settles_it_at_once_unrun() -> None:
    from phronomy_fsm.runtime.offload import Defer

    pool = OffloadPool(max_workers=1, queue_size=4)
    asked = threading.Event()

    def gate() -> Defer:
        asked.set()
        return Defer(3600.0)

    op = pool.submit(lambda: "never", gate=gate)
    assert asked.wait(5)
    physical = threading.Event()
    op.add_physical_callback(lambda op: physical.set())
    op.cancel("the session left its state")
    assert physical.wait(5)  # brought back and dropped: not an hour later
    assert op.status == "cancelled" and op.returned is None
    pool.shutdown()
