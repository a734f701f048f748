"""The bounded offload pool: where work that touches the outside world runs.

``docs/runtime.md``, "Offloads and the pool". A fixed number of worker threads
takes operations from a bounded queue. :meth:`OffloadPool.submit` never blocks the
caller when ``on_full="raise"`` (the dispatcher's only mode): a full pool raises
:class:`~phronomy_fsm.errors.BackpressureError` at once and the caller decides.

Every :class:`Operation` settles exactly once — with the work's value or error, by a
timeout (counted from submission, queue wait included) or by cancellation. Settling
early while the work runs marks the operation *abandoned*: the worker is never
interrupted, its late result is discarded, and *physical completion* (the work really
returned) is tracked separately, so callers can wait for quiescence before committing
a terminal outcome. Physical completion callbacks run before logical ones on a normal
return.

Work may also be **deferred** without holding a thread: a gate that returns
:class:`Defer`, or work that raises :class:`DeferWork`, sends the operation back to
the queue after a delay (a durable effect whose rate or concurrency limit is full, or
that an outside service answered "too many requests": ``docs/semantics.md``, "Limits").
A deferred operation stays queued (it counts against the pool's capacity); cancelling
it brings it back at once, to settle unrun.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
from collections.abc import Callable
from typing import Any, NamedTuple

from phronomy_fsm.errors import BackpressureError, Cancelled, PoolShutdownError
from phronomy_fsm.runtime.cancellation import CancellationToken
from phronomy_fsm.runtime.clock import SYSTEM_CLOCK, Clock
from phronomy_fsm.runtime.timers import TimerHandle, TimerService

log = logging.getLogger("phronomy_fsm.runtime")


class Defer(NamedTuple):
    """Returned by a gate (:meth:`OffloadPool.submit`) that says "not yet": the
    operation goes back to the queue after ``delay_seconds`` (≥ 0) and its gate is
    asked again then. No thread waits meanwhile."""

    delay_seconds: float


class DeferWork(Exception):
    """Raised by work that did not perform what it was asked (an outside service said
    "too many requests"): the operation goes back to the queue after
    ``delay_seconds`` and its gate and work run again then; its outcome is not settled
    meanwhile."""

    def __init__(self, delay_seconds: float) -> None:
        super().__init__(f"deferred for {delay_seconds:g} s")
        self.delay_seconds = max(0.0, float(delay_seconds))


QUEUED = "queued"
RUNNING = "running"
COMPLETED = "completed"
FAILED = "failed"
CANCELLED = "cancelled"
TIMED_OUT = "timed_out"


class Operation:
    """One unit of work submitted to an :class:`OffloadPool`.

    Attributes:
        id: pool-unique integer.
        status: ``queued``, ``running``, ``completed``, ``failed``, ``cancelled`` or
            ``timed_out`` (the last four are settled).
        value / error: the settled value or error (``Cancelled`` for cancel/timeout).
        abandoned: settled early while the work was running.
        physically_done: the work returned (or will never run).
        returned: ``(value, error)`` as the work itself ended — set before physical
            completion callbacks run, even when the operation was abandoned (then the
            logical outcome stays ``cancelled``); ``None`` if it never ran.

    Concurrency: thread-safe. Callbacks run on the settling thread (worker, timer, or
    canceller), isolated from each other.
    """

    __slots__ = (
        "_lock",
        "_physical_callbacks",
        "_settled_callbacks",
        "_timer",
        "abandoned",
        "error",
        "id",
        "name",
        "physically_done",
        "returned",
        "status",
        "submitted_at",
        "value",
    )

    def __init__(self, op_id: int, name: str, submitted_at: float) -> None:
        self.id = op_id
        self.name = name
        self.status = QUEUED
        self.value: Any = None
        self.error: BaseException | None = None
        self.abandoned = False
        self.physically_done = False
        self.returned: tuple[Any, BaseException | None] | None = None
        self.submitted_at = submitted_at
        self._lock = threading.Lock()
        self._settled_callbacks: list[Callable[[Operation], object]] = []
        self._physical_callbacks: list[Callable[[Operation], object]] = []
        self._timer: TimerHandle | None = None

    def __repr__(self) -> str:
        return f"<Operation {self.id} {self.name} {self.status}{' abandoned' if self.abandoned else ''}>"

    @property
    def settled(self) -> bool:
        """True once the logical outcome is fixed."""
        return self.status not in (QUEUED, RUNNING)

    def add_settled_callback(self, callback: Callable[[Operation], object]) -> None:
        """Run ``callback(op)`` once settled (now, if already settled)."""
        with self._lock:
            if not self.settled:
                self._settled_callbacks.append(callback)
                return
        _run_callback(callback, self)

    def add_physical_callback(self, callback: Callable[[Operation], object]) -> None:
        """Run ``callback(op)`` once the work physically returned (or will never run)."""
        with self._lock:
            if not self.physically_done:
                self._physical_callbacks.append(callback)
                return
        _run_callback(callback, self)

    def cancel(self, reason: str = "cancelled", *, timed_out: bool = False) -> bool:
        """Settle as cancelled (or timed out) unless already settled; returns whether
        this call settled it. A running worker is not interrupted: the operation is
        marked abandoned and its late result discarded."""
        return self._settle(
            TIMED_OUT if timed_out else CANCELLED, None, Cancelled(reason, timed_out=timed_out)
        )

    def _settle(self, status: str, value: Any, error: BaseException | None) -> bool:
        with self._lock:
            if self.settled:
                return False
            if self.status == RUNNING and status in (CANCELLED, TIMED_OUT):
                self.abandoned = True
            self.status, self.value, self.error = status, value, error
            callbacks, self._settled_callbacks = self._settled_callbacks, []
            timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
        for callback in callbacks:
            _run_callback(callback, self)
        return True

    def _mark_physical(self) -> None:
        with self._lock:
            self.physically_done = True
            callbacks, self._physical_callbacks = self._physical_callbacks, []
        for callback in callbacks:
            _run_callback(callback, self)


def _run_callback(callback: Callable[[Operation], object], op: Operation) -> None:
    try:
        callback(op)
    except Exception:
        log.exception("offload callback raised for %r", op)


class OffloadPool:
    """Bounded worker threads with a bounded queue (``docs/runtime.md``, "Offloads and the pool").

    Args:
        max_workers: worker threads (default 10, as phronomy).
        queue_size: operations that may wait beyond the running ones (default 100).
        clock: the clock timeouts and wait metrics read.
        name: thread-name prefix.

    Threads start lazily on the first submission. ``shutdown`` stops accepting work;
    queued work still runs unless ``cancel_queued``.
    """

    def __init__(
        self,
        max_workers: int = 10,
        queue_size: int = 100,
        *,
        clock: Clock = SYSTEM_CLOCK,
        name: str = "phronomy-offload",
    ) -> None:
        if max_workers < 1 or queue_size < 0:
            raise ValueError("max_workers must be ≥ 1 and queue_size ≥ 0")
        self.max_workers = max_workers
        self.queue_size = queue_size
        self._clock = clock
        self._name = name
        self._queue: queue.SimpleQueue[
            tuple[
                Operation,
                Callable[..., Any],
                tuple[Any, ...],
                Callable[[], BaseException | Defer | None] | None,
            ]
            | None
        ] = queue.SimpleQueue()
        self._capacity = max_workers + queue_size
        self._outstanding = 0  # queued + running, guarded by _lock
        self._lock = threading.Lock()
        self._room = threading.Condition(self._lock)  # waiters of on_full="wait"
        self._room_waiters = 0
        self._threads: list[threading.Thread] = []
        self._ids = itertools.count(1)
        self._closed = False
        self._timers: TimerService | None = None
        # metrics
        self._queued = 0
        self._active = 0
        self._abandoned_finished = 0
        self._running: set[Operation] = set()
        self._wait_total = 0.0
        self._started_total = 0
        self._deferred: dict[Operation, Callable[[], None]] = {}  # op -> bring it back now

    # --- submission -------------------------------------------------------------

    def submit(
        self,
        fn: Callable[..., Any],
        *args: Any,
        name: str = "operation",
        on_full: str = "raise",
        full_timeout_seconds: float | None = None,
        timeout_seconds: float | None = None,
        cancellation_token: CancellationToken | None = None,
        gate: Callable[[], BaseException | Defer | None] | None = None,
    ) -> Operation:
        """Queue ``fn(*args)`` to run on a worker; return its :class:`Operation`.

        Args:
            on_full: ``"raise"`` (raise BackpressureError at once when the pool and its
                queue are full) or ``"wait"`` (block up to ``full_timeout_seconds``,
                then raise BackpressureError). Loop threads must use ``"raise"``.
            timeout_seconds: settle as ``timed_out`` this long after submission.
            cancellation_token: cancelling it cancels the operation (queued: it never
                runs; running: its late result is discarded).
            gate: called on the worker thread just before the work would start; an
                error it returns fails the operation with that error without running
                the work (a durable effect whose worker may have lost its lease); a
                :class:`Defer` sends it back to the queue for that long (module
                docstring).

        Raises:
            BackpressureError: no capacity (see ``on_full``).
            PoolShutdownError: the pool was shut down.
            ValueError: unknown ``on_full``.
        """
        if on_full not in ("raise", "wait"):
            raise ValueError(f"on_full must be 'raise' or 'wait', got {on_full!r}")
        if self._closed:
            raise PoolShutdownError(f"offload pool {self._name} is shut down", pool=self._name)
        op = Operation(next(self._ids), name, self._clock.monotonic())
        with self._lock:
            if self._outstanding >= self._capacity and on_full == "wait":
                self._room_waiters += 1
                try:
                    self._room.wait_for(
                        lambda: self._outstanding < self._capacity or self._closed,
                        full_timeout_seconds,
                    )
                finally:
                    self._room_waiters -= 1
            if self._closed:
                raise PoolShutdownError(f"offload pool {self._name} is shut down", pool=self._name)
            if self._outstanding >= self._capacity:
                raise BackpressureError(
                    f"offload pool {self._name} is full ({self.max_workers} running, "
                    f"{self.queue_size} queued); retry later or raise its capacity",
                    pool=self._name,
                    max_workers=self.max_workers,
                    queue_size=self.queue_size,
                )
            self._outstanding += 1
            self._queued += 1
            if len(self._threads) < self.max_workers and self._active + self._queued > len(
                self._threads
            ):
                thread = threading.Thread(
                    target=self._worker, name=f"{self._name}-{len(self._threads) + 1}", daemon=True
                )
                self._threads.append(thread)
                thread.start()
        if timeout_seconds is not None:
            if self._timers is None:
                with self._lock:
                    if self._timers is None:
                        self._timers = TimerService(self._clock, name=f"{self._name}-timers")
            op._timer = self._timers.schedule(
                timeout_seconds,
                lambda: op.cancel(f"{name} timed out after {timeout_seconds} s", timed_out=True),
            )
        if cancellation_token is not None:
            cancellation_token.on_cancel(
                lambda error: op.cancel(error.reason, timed_out=error.timed_out)
            )
        self._queue.put((op, fn, args, gate))
        return op

    # --- workers ------------------------------------------------------------------

    def _worker(self) -> None:
        get = self._queue.get
        while True:
            item = get()
            if item is None:
                return
            op, fn, args, gate = item
            refused = gate() if gate is not None and not op.settled else None
            if isinstance(refused, Defer):  # not yet: back to the queue, no thread waits
                self._defer(item, refused.delay_seconds)
                continue
            if refused is not None:  # the gate says it must not start: it fails unrun
                op.returned = (None, refused)
                with self._lock:
                    self._queued -= 1
                    self._release_slot()
                op._mark_physical()
                op._settle(FAILED, None, refused)
                continue
            with op._lock:
                never_ran = op.settled
                if not never_ran:
                    op.status = RUNNING
            with self._lock:
                self._queued -= 1
                if never_ran:
                    self._release_slot()
                else:
                    self._active += 1
                    self._running.add(op)
                    self._started_total += 1
                    self._wait_total += self._clock.monotonic() - op.submitted_at
            if never_ran:
                op._mark_physical()
                continue
            try:
                value, error = fn(*args), None
            except DeferWork as exc:  # not performed: run it again later, unsettled
                with op._lock:
                    if op.status == RUNNING:
                        op.status = QUEUED
                with self._lock:
                    self._active -= 1
                    self._running.discard(op)
                    self._queued += 1
                self._defer(item, exc.delay_seconds)
                continue
            except BaseException as exc:  # noqa: BLE001 - the outcome of the work, whatever it is
                value, error = None, exc
            op.returned = (value, error)
            with self._lock:
                self._active -= 1
                self._running.discard(op)
                if op.abandoned:
                    self._abandoned_finished += 1
                self._release_slot()
            op._mark_physical()
            if error is None:
                op._settle(COMPLETED, value, None)
            else:
                # Even SystemExit/KeyboardInterrupt from the work is only this operation's
                # failure: re-raising would end a worker the pool still counts, and
                # everything queued behind it would wait forever.
                op._settle(FAILED, None, error)

    def _defer(self, item: Any, delay_seconds: float) -> None:
        """Put ``item`` back on the queue after ``delay_seconds`` — at once when its
        operation settles first (a cancel) or the pool shuts down (module docstring)."""
        op = item[0]
        with self._lock:
            closed = self._closed
            if not closed and self._timers is None:
                self._timers = TimerService(self._clock, name=f"{self._name}-timers")
        if closed:  # nobody takes it from the queue any more: it fails unrun
            error = PoolShutdownError(f"offload pool {self._name} is shut down", pool=self._name)
            with self._lock:
                self._queued -= 1
                self._release_slot()
            op._mark_physical()
            op._settle(FAILED, None, error)
            return
        back = threading.Lock()
        handle: list[TimerHandle] = []

        def bring_back(*_: Any) -> None:
            if not back.acquire(blocking=False):
                return  # already back
            with self._lock:
                self._deferred.pop(op, None)
            if handle:
                handle[0].cancel()
            self._queue.put(item)

        with self._lock:
            self._deferred[op] = bring_back
        assert self._timers is not None
        handle.append(self._timers.schedule(max(0.0, delay_seconds), bring_back))
        op.add_settled_callback(bring_back)

    def _release_slot(self) -> None:
        """One operation left the pool (called with ``_lock`` held)."""
        self._outstanding -= 1
        if self._room_waiters:
            self._room.notify()

    # --- metrics and lifecycle -----------------------------------------------------

    def metrics(self) -> dict[str, float]:
        """``active``, ``queued``, ``abandoned`` (total), ``abandoned_active`` (still
        running), ``average_wait_seconds`` (queue wait of started operations)."""
        with self._lock:
            started = self._started_total
            abandoned_active = sum(1 for op in self._running if op.abandoned)
            return {
                "active": self._active,
                "queued": self._queued,
                "abandoned": self._abandoned_finished + abandoned_active,
                "abandoned_active": abandoned_active,
                "average_wait_seconds": self._wait_total / started if started else 0.0,
                "workers": len(self._threads),
            }

    def shutdown(self, *, wait: bool = True, timeout_seconds: float | None = None) -> None:
        """Refuse new work; let workers finish what is queued, then exit.

        ``wait`` joins the worker threads (up to ``timeout_seconds`` each)."""
        deferred: list[Callable[[], None]] = []
        with self._lock:
            if self._closed:
                threads = []
            else:
                self._closed = True
                self._room.notify_all()
                threads = list(self._threads)
                deferred = list(self._deferred.values())
        for bring_back in deferred:  # before the sentinels: their workers see them
            bring_back()
        with self._lock:
            if threads:
                for _ in threads:
                    self._queue.put(None)
        if self._timers is not None:
            self._timers.close()
        if wait:
            for thread in threads:
                if thread is not threading.current_thread():
                    thread.join(timeout_seconds)

    @property
    def closed(self) -> bool:
        """True after :meth:`shutdown`."""
        return self._closed
