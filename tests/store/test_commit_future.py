"""CommitFuture: the group-commit future keeps the whole Future contract while its
callers wait on a lock of their own."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import (
    FIRST_COMPLETED,
    CancelledError,
    Future,
    InvalidStateError,
    as_completed,
    wait,
)

import pytest

from phronomy_fsm.store.group import CommitFuture


def test_it_is_a_future_settled_once():
    future: CommitFuture[int] = CommitFuture()
    assert isinstance(future, Future)
    assert not future.done() and not future.running()
    assert future.set_running_or_notify_cancel()
    assert future.running() and not future.cancel()
    future.set_result(7)
    assert future.done() and future.result() == 7 and future.exception() is None
    with pytest.raises(InvalidStateError):
        future.set_result(8)
    with pytest.raises(InvalidStateError):
        future.set_exception(ValueError("late"))
    assert future.result(timeout=0) == 7


def test_an_exception_is_raised_by_result_and_returned_by_exception():
    future: CommitFuture[int] = CommitFuture()
    future.set_running_or_notify_cancel()
    error = ValueError("refused")
    future.set_exception(error)
    assert future.exception() is error
    with pytest.raises(ValueError, match="refused") as info:
        future.result()
    assert info.value is error


def test_waiting_times_out_without_settling():
    future: CommitFuture[int] = CommitFuture()
    with pytest.raises(TimeoutError):
        future.result(timeout=0.01)
    with pytest.raises(TimeoutError):
        future.exception(timeout=0)
    with pytest.raises(TimeoutError):
        future.result(timeout=-1)  # as Future: a negative timeout does not wait
    future.set_result(1)
    assert future.result(timeout=0) == 1


def test_every_waiting_thread_is_released():
    future: CommitFuture[str] = CommitFuture()
    started = threading.Barrier(9)
    seen: list[str] = []
    lock = threading.Lock()

    def waiter() -> None:
        started.wait()
        value = future.result(timeout=30)
        with lock:
            seen.append(value)

    threads = [threading.Thread(target=waiter) for _ in range(8)]
    for t in threads:
        t.start()
    started.wait()
    future.set_running_or_notify_cancel()
    future.set_result("done")
    for t in threads:
        t.join(30)
    assert seen == ["done"] * 8


def test_cancel_before_running_releases_waiters_and_runs_callbacks():
    future: CommitFuture[int] = CommitFuture()
    calls: list[bool] = []
    future.add_done_callback(lambda f: calls.append(f.cancelled()))
    assert future.cancel() and future.cancel()  # cancelling twice is still True
    assert calls == [True]
    with pytest.raises(CancelledError):
        future.result(timeout=0)
    with pytest.raises(CancelledError):
        future.exception()
    assert not future.set_running_or_notify_cancel()  # the writer skips it
    with pytest.raises(InvalidStateError):
        future.set_result(1)


def test_callbacks_run_after_the_waiters_are_released_and_see_the_result():
    future: CommitFuture[int] = CommitFuture()
    future.set_running_or_notify_cancel()
    seen: list[int] = []
    future.add_done_callback(lambda f: seen.append(f.result(timeout=0)))
    future.set_result(3)
    assert seen == [3]
    late: list[bool] = []
    future.add_done_callback(lambda f: late.append(f.done()))  # added when done: runs now
    assert late == [True]


def test_wait_and_as_completed_see_it_settle():
    futures: list[CommitFuture[int]] = [CommitFuture() for _ in range(3)]
    for f in futures:
        f.set_running_or_notify_cancel()

    def settle() -> None:
        futures[1].set_result(1)
        futures[0].set_exception(ValueError("x"))
        futures[2].set_result(2)

    timer = threading.Timer(0.05, settle)
    timer.start()
    done, _ = wait(futures, timeout=30, return_when=FIRST_COMPLETED)
    assert done
    assert {id(f) for f in as_completed(futures, timeout=30)} == {id(f) for f in futures}
    timer.join()
    assert [f.exception() is None for f in futures] == [False, True, True]


def test_asyncio_can_await_it():
    future: CommitFuture[int] = CommitFuture()
    future.set_running_or_notify_cancel()

    async def main() -> int:
        wrapped = asyncio.wrap_future(future)
        asyncio.get_running_loop().call_later(0.01, future.set_result, 5)
        return await wrapped

    assert asyncio.run(main()) == 5
