"""The group-commit queue and its writer thread.

Owns: a FIFO of prepared barrier commits and the one thread that drains it into
batches. It does not know SQL: the store hands it a ``flush(batch)`` callable that
commits one batch in one transaction and settles every item's future.

Batching policy: the writer takes everything queued (up to ``max_batch``) as soon as
it is idle, so commits that arrive while a flush (and its fsync) is running form the
next batch without any timer. With ``window_seconds > 0`` it additionally waits up to
that long for a batch to fill before flushing (useful only when producers are bursty
and fsyncs are expensive).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import CancelledError, Future, InvalidStateError
from concurrent.futures._base import (
    CANCELLED,
    CANCELLED_AND_NOTIFIED,
    FINISHED,
    LOGGER,
    PENDING,
    RUNNING,
)
from typing import Any, TypeVar

from phronomy_fsm.errors import StorageError

T = TypeVar("T")

_DONE = frozenset({CANCELLED, CANCELLED_AND_NOTIFIED, FINISHED})
_CANCELLED = frozenset({CANCELLED, CANCELLED_AND_NOTIFIED})


class CommitFuture(Future[T]):
    """A :class:`concurrent.futures.Future` that is cheap to create, settle and wait on.

    Why: the standard future creates a condition variable (and a re-entrant lock) per
    future, takes it through Python-level methods at every state change, and a caller
    blocked in :meth:`Future.result` waits on that condition, so once woken it must
    take the condition again while the writer is still settling the rest of the batch.
    With a thread waiting on each of 64 commits per batch, under the GIL, that was
    about a fifth of the group-commit rate (``docs/store.md``, "Group commit"). Here
    state changes take one plain lock, and :meth:`result` / :meth:`exception` wait on a
    second lock that is held from creation and released once, when the future is
    settled or cancelled.

    Everything else is the standard future's contract: the condition that
    :func:`concurrent.futures.wait` and :func:`~concurrent.futures.as_completed` take
    (``_condition``) is made on first use around the same plain lock, so they see every
    state change; done-callbacks run on the settling (or cancelling) thread after the
    waiters are released, and at once when added to a done future;
    :func:`asyncio.wrap_future` works.

    Concurrency: any thread may settle, cancel or wait (settling twice raises
    ``InvalidStateError``). Raises what :class:`~concurrent.futures.Future` raises
    (``CancelledError``, ``TimeoutError``, the exception it was settled with).
    """

    def __init__(self) -> None:  # the base __init__ would build a condition per future
        self._lock = threading.Lock()
        self._state = PENDING
        self._result: Any = None
        self._exception: BaseException | None = None
        self._waiters: list[Any] = []
        self._done_callbacks: list[Callable[[Future[T]], object]] = []
        self._settled = threading.Lock()
        self._settled.acquire()  # released once, when the future is done
        self._cond: threading.Condition | None = None

    @property
    def _condition(self) -> threading.Condition:  # type: ignore[override]
        """The condition of the base class's methods and of ``wait()`` /
        ``as_completed()``, around :attr:`_lock` (made on first use)."""
        cond = self._cond
        if cond is None:
            cond = self._cond = threading.Condition(self._lock)
        return cond

    def _finish(self, state: str) -> None:
        """Enter a done ``state`` (call with :attr:`_lock` held): release the waiters
        and wake ``_condition``'s, if any was made."""
        self._state = state
        self._settled.release()
        if self._cond is not None:
            self._cond.notify_all()

    def _wait_done(self, timeout: float | None) -> None:
        if self._state in _DONE:
            return
        if timeout is None:
            acquired = self._settled.acquire()
        elif timeout > 0:
            acquired = self._settled.acquire(True, timeout)
        else:  # as Future: zero or a negative timeout does not wait
            acquired = self._settled.acquire(False)
        if acquired:
            self._settled.release()  # let the next waiter through
        elif self._state not in _DONE:
            raise TimeoutError()

    def __repr__(self) -> str:  # the base takes the lock: set_result formats it under it
        state = self._state
        head = f"<{type(self).__name__} at {id(self):#x} state={state.lower()}"
        if state == FINISHED:
            if self._exception is not None:
                return f"{head} raised {type(self._exception).__name__}>"
            return f"{head} returned {type(self._result).__name__}>"
        return head + ">"

    def cancel(self) -> bool:
        """Cancel unless running or done; True when it is cancelled (see
        :meth:`Future.cancel`)."""
        with self._lock:
            if self._state in (RUNNING, FINISHED):
                return False
            if self._state in _CANCELLED:
                return True
            self._finish(CANCELLED)
        self._invoke_callbacks()  # type: ignore[attr-defined]
        return True

    def cancelled(self) -> bool:
        """True when cancelled."""
        return self._state in _CANCELLED

    def running(self) -> bool:
        """True while the writer holds it (it can no longer be cancelled)."""
        return self._state == RUNNING

    def done(self) -> bool:
        """True when settled or cancelled."""
        return self._state in _DONE

    def add_done_callback(self, fn: Callable[[Future[T]], object]) -> None:
        """Call ``fn(self)`` once done: on the thread that settles or cancels it, or
        at once when it is done already (see :meth:`Future.add_done_callback`)."""
        with self._lock:
            if self._state not in _DONE:
                self._done_callbacks.append(fn)
                return
        try:
            fn(self)
        except Exception:  # noqa: BLE001 - as Future does: a callback's error is logged
            LOGGER.exception("exception calling callback for %r", self)

    def result(self, timeout: float | None = None) -> T:
        """The result (see :meth:`Future.result`): waits up to ``timeout`` seconds
        (``None``: forever). Raises CancelledError, TimeoutError or the exception
        the future was settled with."""
        self._wait_done(timeout)
        if self._state in _CANCELLED:
            raise CancelledError()
        if self._exception is not None:
            try:
                raise self._exception
            finally:
                self = None  # type: ignore[assignment]  # noqa: PLW0642 - break the cycle, as Future does
        return self._result  # type: ignore[no-any-return]

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """The exception the future was settled with, or None (see
        :meth:`Future.exception`). Raises CancelledError or TimeoutError."""
        self._wait_done(timeout)
        if self._state in _CANCELLED:
            raise CancelledError()
        return self._exception

    def set_running_or_notify_cancel(self) -> bool:
        """Called by the writer when it takes the commit: False when it was cancelled
        (never written), else it is running (see
        :meth:`Future.set_running_or_notify_cancel`)."""
        with self._lock:
            if self._state == CANCELLED:
                self._state = CANCELLED_AND_NOTIFIED
                for waiter in self._waiters:
                    waiter.add_cancelled(self)
                return False
            if self._state == PENDING:
                self._state = RUNNING
                return True
        raise RuntimeError(f"Future in unexpected state: {self._state}")

    def set_result(self, result: T) -> None:
        """Settle with ``result``; release the waiters, then run the callbacks."""
        with self._lock:
            if self._state in _DONE:
                raise InvalidStateError(f"{self._state}: {self!r}")
            self._result = result
            for waiter in self._waiters:
                waiter.add_result(self)
            self._finish(FINISHED)
        if self._done_callbacks:
            self._invoke_callbacks()  # type: ignore[attr-defined]

    def set_exception(self, exception: BaseException | None) -> None:
        """Settle with ``exception``; release the waiters, then run the callbacks."""
        with self._lock:
            if self._state in _DONE:
                raise InvalidStateError(f"{self._state}: {self!r}")
            self._exception = exception
            for waiter in self._waiters:
                waiter.add_exception(self)
            self._finish(FINISHED)
        if self._done_callbacks:
            self._invoke_callbacks()  # type: ignore[attr-defined]


class GroupCommitWriter:
    """A queue plus the single thread that flushes it in batches.

    Args:
        flush: called on the writer thread with a non-empty list of items (at most
            ``max_batch``, in submission order); it must settle every item. If it
            raises, ``fail(item, exc)`` is called for each item as a last resort.
        fail: settles one item with an error (used when ``flush`` raised or the
            writer is closed with items still queued).
        max_batch: most items per flush (≥ 1).
        window_seconds: extra time to wait for a batch to fill (0: flush when idle).
        name: the thread's name.

    Concurrency: :meth:`put` may be called from any thread. The thread starts on the
    first :meth:`put`. :meth:`close` flushes what is queued, then stops the thread.
    """

    def __init__(
        self,
        flush: Callable[[list[Any]], None],
        fail: Callable[[Any, BaseException], None],
        *,
        max_batch: int = 64,
        window_seconds: float = 0.0,
        name: str = "phronomy-group-commit",
    ) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        if window_seconds < 0:
            raise ValueError("window_seconds must not be negative")
        self._flush = flush
        self._fail = fail
        self._max_batch = max_batch
        self._window_seconds = window_seconds
        self._name = name
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._idle = False  # the writer is waiting in _take (only then does put notify)
        self._queue: deque[Any] = deque()
        self._closed = False
        self._thread: threading.Thread | None = None
        self.batches = 0  #: number of flushes so far (observability, tests)
        self.items = 0  #: number of items flushed so far

    def put(self, item: Any) -> None:
        """Queue ``item`` for the next batch.

        Raises:
            StorageError: the writer is closed.
        """
        with self._lock:
            if self._closed:
                raise StorageError("the store is closed; no more group commits are accepted")
            self._queue.append(item)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            if self._idle:
                self._cond.notify()

    def close(self, timeout_seconds: float | None = None) -> None:
        """Stop accepting items, flush the queued ones, and join the thread."""
        with self._lock:
            self._closed = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout_seconds)

    def _take(self) -> list[Any] | None:
        with self._lock:
            self._idle = True
            try:
                while not self._queue:
                    if self._closed:
                        return None
                    self._cond.wait()
                if (
                    self._window_seconds > 0
                    and len(self._queue) < self._max_batch
                    and not self._closed
                ):
                    deadline = time.monotonic() + self._window_seconds
                    while len(self._queue) < self._max_batch and not self._closed:
                        remaining = deadline - time.monotonic()
                        if remaining <= 0:
                            break
                        self._cond.wait(remaining)
            finally:
                self._idle = False
            count = min(len(self._queue), self._max_batch)
            popleft = self._queue.popleft
            return [popleft() for _ in range(count)]

    def _run(self) -> None:
        while True:
            batch = self._take()
            if batch is None:
                return
            try:
                self._flush(batch)
            except BaseException as exc:  # noqa: BLE001 - nothing may escape this boundary untyped  # a bug in flush: never leave a caller hanging
                for item in batch:
                    self._fail(item, exc)
            self.batches += 1
            self.items += len(batch)
