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
from typing import Any

from phronomy_fsm.errors import StorageError


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
        self._cond = threading.Condition(threading.Lock())
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
        with self._cond:
            if self._closed:
                raise StorageError("the store is closed; no more group commits are accepted")
            self._queue.append(item)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            self._cond.notify()

    def close(self, timeout_seconds: float | None = None) -> None:
        """Stop accepting items, flush the queued ones, and join the thread."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout_seconds)

    def _take(self) -> list[Any] | None:
        with self._cond:
            while not self._queue:
                if self._closed:
                    return None
                self._cond.wait()
            if self._window_seconds > 0 and len(self._queue) < self._max_batch and not self._closed:
                deadline = time.monotonic() + self._window_seconds
                while len(self._queue) < self._max_batch and not self._closed:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    self._cond.wait(remaining)
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
