"""Store I/O off the loop: one bounded executor a runtime owns and closes.

Owns :class:`StoreIO`, where a :class:`~phronomy_fsm.durable.runtime.DurableRuntime`
runs the store calls its loop must not block on — inbox reads, closing signals,
read-backs after an unproven outcome, a start's read-back, a cancel's requests to
children elsewhere — and those calls themselves, as the engine asks for them
(:class:`~phronomy_fsm.durable.host.EngineStoreIO`). At most ``max_workers`` threads
run them; more wait in order. :meth:`StoreIO.close` refuses new work and joins what
runs (``docs/runtime.md``, "Threads of a durable runtime"): no thread of a closed
runtime is left writing to its store.

Any thread may submit. Must not import the store or agent layers.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import TYPE_CHECKING, Any

from phronomy_fsm.durable.lifecycle import LiveExecution
from phronomy_fsm.durable.operations import request_cancel
from phronomy_fsm.durable.records import ExecutionRecord, SignalRecord
from phronomy_fsm.errors import LeaseLostError, NotFoundError, PhronomyError

if TYPE_CHECKING:
    from phronomy_fsm.durable.runtime import DurableRuntime

log = logging.getLogger("phronomy_fsm.durable")

#: Threads for a runtime's store I/O: enough that a read-back retrying against a store
#: that is down does not hold up the inbox reads of other executions for long.
DEFAULT_STORE_IO_WORKERS = 8
#: Seconds between attempts to read an execution back after an unproven outcome.
READBACK_DELAYS = (0.0, 0.05, 0.2, 0.5, 1.0, 2.0, 5.0)


class StoreIO:
    """A bounded executor for a runtime's store I/O (see the module docstring).

    Args:
        runtime: the runtime whose store it calls (its name prefixes the threads'
            names: ``{name}-store-io``).
        max_workers: how many calls run at once (positive).
    """

    def __init__(
        self, runtime: DurableRuntime, *, max_workers: int = DEFAULT_STORE_IO_WORKERS
    ) -> None:
        self.runtime = runtime
        name = runtime.name
        self._executor = ThreadPoolExecutor(max_workers, thread_name_prefix=f"{name}-store-io")
        self._lock = threading.Lock()
        self._running: set[Future[Any]] = set()
        self.closed = False

    def submit(self, fn: Callable[..., Any], *args: Any) -> bool:
        """Run ``fn(*args)`` on an I/O thread (its errors are logged). Returns False —
        and runs nothing — once :meth:`close` was called. Any thread."""
        with self._lock:
            if self.closed:
                return False
            future = self._executor.submit(fn, *args)
            self._running.add(future)
        future.add_done_callback(self._done)
        return True

    def _done(self, future: Future[Any]) -> None:
        with self._lock:
            self._running.discard(future)
        if not future.cancelled() and future.exception() is not None:
            log.error("store I/O failed", exc_info=future.exception())

    def close(self, timeout_seconds: float) -> None:
        """Refuse new work, let what was submitted run, and wait up to
        ``timeout_seconds`` for it (a call still blocked in the store after that is
        left to finish on its own thread, logged). Idempotent; any thread but an I/O
        thread."""
        with self._lock:
            self.closed = True
            running = list(self._running)
        self._executor.shutdown(wait=False)
        _done, left = wait(running, timeout=timeout_seconds)
        if left:
            log.warning("%d store call(s) still running after close", len(left))

    # ------------------------------------------------------------ the engine's calls

    def refresh_signals(
        self,
        live: LiveExecution,
        on_read: Callable[[list[SignalRecord] | None], None] | None = None,
    ) -> None:
        """Read ``live``'s pending signals from the store (off the loop), then queue
        them (loop thread) — or, with ``on_read``, hand them to it on the loop thread
        (``None`` when the read failed)."""
        execution_id = live.execution_id

        def read() -> None:
            try:
                signals = self.runtime.store.pending_signals(execution_id)
            except PhronomyError as exc:
                log.warning("execution %s: could not read its inbox: %r", execution_id, exc)
                if on_read is not None and not self.runtime.closed:
                    self.runtime.engine.post(on_read, None)
                return
            if self.runtime.closed:
                return
            if on_read is not None:  # posted: the runtime may close meanwhile
                self.runtime.engine.post(on_read, signals)
            elif signals:
                self.runtime.engine.post(self.runtime.signals_arrived, signals)

        self.submit(read)  # refused once closed: nothing here takes signals any more

    def load_resting(
        self,
        execution_id: str,
        on_read: Callable[
            [tuple[ExecutionRecord, tuple[str | None, int], list[SignalRecord]] | None], None
        ],
    ) -> None:
        """Read a resting execution (``docs/runtime.md``, "How a waiting execution is
        held") — its record, its owner and fencing token, its pending signals — off
        the loop, then hand ``(record, (owner, token), signals)`` to ``on_read`` on the
        loop thread (``None`` when the read failed); one gone from the store is
        forgotten."""

        def read() -> None:
            try:
                record = self.runtime.store.load_record(execution_id)
                owner, token, _ = self.runtime.store.execution_owner(execution_id)
                signals = self.runtime.store.pending_signals(execution_id)
            except NotFoundError:  # deleted (an operator's purge): nothing to load
                self.runtime.engine.post(self.runtime.engine.resting.gone, execution_id)
                return
            except PhronomyError as exc:
                log.warning("execution %s: could not load it: %r", execution_id, exc)
                if not self.runtime.closed:
                    self.runtime.engine.post(on_read, None)
                return
            if not self.runtime.closed:
                self.runtime.engine.post(on_read, (record, (owner, token), signals))

        self.submit(read)  # refused once closed: it rests in the store

    def drop_signals(self, live: LiveExecution, seqs: list[int], outcome: str) -> None:
        """Mark signals of ``live`` consumed without applying them (``outcome`` says
        why), off the loop, under its fence. The store refuses the write
        (LeaseLostError) once another worker owns the execution or this worker's
        lease has passed; the live copy is then let go as after a refused commit
        (:meth:`Engine.close_refused`; ``docs/semantics.md``, "Leases and fencing")."""
        execution_id, fence = live.execution_id, live.fence

        def write() -> None:
            try:
                self.runtime.store.close_signals(execution_id, seqs, outcome, fence=fence)
            except LeaseLostError as exc:
                log.warning("execution %s: signals %s not closed: %s", execution_id, seqs, exc)
                try:
                    self.runtime.dispatcher.call_soon(
                        self.runtime.engine.recovery.close_refused, live, exc
                    )
                except PhronomyError:  # the runtime closed meanwhile: nothing runs it here
                    pass
            except PhronomyError as exc:
                self.runtime.note_write_error(exc)
                log.warning("execution %s: could not close signals %s: %r", execution_id, seqs, exc)

        self.submit(write)  # refused once closed: the signals stay pending for recovery

    def cancel_children_elsewhere(
        self, parent_execution_id: str, payload: dict[str, Any], skip: set[str]
    ) -> Future[bool]:
        """Record a cancel for every active child of ``parent_execution_id`` that this
        runtime does not run (``skip``: the ones it does, cancelled in memory): their
        owners — other workers — apply it, or whoever recovers them (off the loop;
        ``docs/semantics.md``, "Cancel").

        Returns:
            A future set once every request is written (True) or the children could not
            be listed (False). The parent's ``@cancel`` commit waits for it: until then
            the parent's own cancel request stays pending, so a crash before the
            children heard cancels the parent — and so them — again at recovery.
        """
        done: Future[bool] = Future()

        def write() -> None:
            try:
                children = self.runtime.store.list_records(
                    parent_execution_id=parent_execution_id, active=True
                )
            except PhronomyError as exc:
                log.warning(
                    "execution %s: could not list its children: %r", parent_execution_id, exc
                )
                done.set_result(False)
                return
            try:
                self.cancel_each(children, payload, skip)
            finally:
                done.set_result(True)

        if not self.submit(write):
            done.set_result(False)  # closed: nothing runs the parent's commit any more
        return done

    def cancel_each(
        self, children: list[ExecutionRecord], payload: dict[str, Any], skip: set[str]
    ) -> None:
        """Write a cancel request to each active child not in ``skip``."""
        for child in children:
            if child.is_finished or child.execution_id in skip:
                continue
            try:
                request_cancel(
                    self.runtime.store,
                    child.execution_id,
                    reason=str(payload.get("reason") or "its parent was cancelled"),
                    as_failure=payload.get("status") == "failed",
                    error_type=payload.get("error_type"),
                    signal_id=f"cancel-of-parent:{child.execution_id}",
                    sender=f"worker:{self.runtime.worker_id}",
                )
            except PhronomyError as exc:  # finished meanwhile, or unreadable
                log.info("child %s not cancelled: %s", child.execution_id, exc)

    def readback(self, live: LiveExecution, why: str) -> None:
        """Read an execution back after an unproven outcome, with backoff (off the
        loop), then reinstall what the store holds (loop thread) — and resume its active
        children that run nowhere: the unproven commit may have started them (a barrier
        with children) without this runtime knowing."""
        execution_id = live.execution_id
        log.info("execution %s: reading it back from the store (%s)", execution_id, why)

        def read() -> None:
            for delay in READBACK_DELAYS + (READBACK_DELAYS[-1],) * 1000:
                if self.runtime.stopping.wait(delay):
                    return
                try:
                    record = self.runtime.store.load_record(execution_id)
                    owner, token, _ = self.runtime.store.execution_owner(execution_id)
                    signals = self.runtime.store.pending_signals(execution_id)
                    children = [
                        child.execution_id
                        for child in self.runtime.store.list_records(
                            parent_execution_id=execution_id, active=True
                        )
                    ]
                except NotFoundError as exc:
                    self.runtime.engine.post(self.runtime.engine.recovery.release, live, exc)
                    return
                except PhronomyError as exc:
                    log.warning("execution %s: read-back failed (%r); retrying", execution_id, exc)
                    continue
                # posted: the runtime may have closed during the read
                self.runtime.engine.post(
                    self.runtime.engine.recovery.reinstall, live, record, (owner, token), signals
                )
                if children:
                    try:
                        self.runtime.adopt(children)  # those live here already are left alone
                    except PhronomyError as exc:
                        log.warning(
                            "execution %s: could not resume its children %s: %r",
                            execution_id,
                            children,
                            exc,
                        )
                return

        self.submit(read)  # refused once closed: recovery reads it back instead


__all__ = ["DEFAULT_STORE_IO_WORKERS", "READBACK_DELAYS", "StoreIO"]
