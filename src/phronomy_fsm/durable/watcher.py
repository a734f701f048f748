"""The watcher: a runtime's lease heartbeat and its poll of the inbox.

Owns :class:`Watcher`, the one thread of a
:class:`~phronomy_fsm.durable.runtime.DurableRuntime` that renews the worker's lease
every third of it (and, after each renewal, lets go of live executions another worker
has claimed meanwhile: ``docs/scale-out.md``, "Leases and fencing"; and aligns the
runtime's default clock to the store's: ``docs/semantics.md``, "One clock") and polls the
whole inbox for signals sent by other processes — every ``poll_seconds``, or at once
when a notifying store wakes it — handing them to the loop. It owns the poll's cursor
(``ExecutionStore.signals_since``). The runtime starts it once the loop runs and joins
it first at close.

Must not import the store or agent layers.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

from phronomy_fsm.errors import PhronomyError, SchemaVersionError

if TYPE_CHECKING:
    from phronomy_fsm.durable.runtime import DurableRuntime

log = logging.getLogger("phronomy_fsm.durable")


class Watcher:
    """A runtime's watcher thread (see the module docstring).

    Args:
        runtime: the runtime it watches for (its store, lease and loop).
        cursor: where the first poll of the inbox starts (``signal_cursor()``, read
            before the runtime's loop started).

    Attributes: ``wake`` (set it to poll at once: a store notification, close).
    """

    def __init__(self, runtime: DurableRuntime, cursor: str) -> None:
        self.runtime = runtime
        self.cursor = cursor
        self.wake = threading.Event()
        self._thread = threading.Thread(target=self.run, name=f"{runtime.name}-watch", daemon=True)

    def start(self) -> None:
        """Start the thread (once)."""
        self._thread.start()

    def join(self, timeout_seconds: float) -> None:
        """Wait up to ``timeout_seconds`` for the thread to end (after the runtime's
        ``stopping`` is set and :attr:`wake` is set)."""
        self._thread.join(timeout_seconds)

    def run(self) -> None:
        """Renew the lease every third of it; poll the inbox for signals sent by
        other processes every ``poll_seconds``, or at once when the store notifies.
        Ends once the runtime stops, or stops writing (SchemaVersionError)."""
        rt = self.runtime
        renew_every = rt.lease_seconds / 3
        next_renewal = time.monotonic() + renew_every
        while True:
            # a store notification ends the wait early; a renewal never waits for a poll
            pause = min(rt.poll_seconds, max(0.0, next_renewal - time.monotonic()))
            self.wake.wait(pause)
            self.wake.clear()
            if rt.stopping.is_set():
                return
            if time.monotonic() >= next_renewal:
                next_renewal = time.monotonic() + renew_every
                asked_at = time.monotonic()
                try:
                    if not rt.store.renew_lease(rt.worker_id, rt.lease_seconds):
                        rt.store.register_worker(rt.worker, rt.lease_seconds)
                    self.verify_ownership()
                    if rt.store_clock is not None:
                        rt.store_clock.align()
                except SchemaVersionError as exc:
                    rt.note_write_error(exc)
                    return  # nothing more to renew or deliver: the runtime stopped
                except PhronomyError as exc:
                    log.warning("worker %s: lease renewal failed: %r", rt.worker_id, exc)
                else:
                    # executions claimed by others meanwhile were let go on the loop
                    # (their queued effects cancelled): effects may start again
                    if rt.refused is None:
                        rt.lease_valid_until = asked_at + rt.lease_seconds
            try:
                poll = rt.store.signals_since(self.cursor)
            except PhronomyError as exc:
                log.debug("inbox poll failed: %r", exc)
                continue
            self.cursor = poll.cursor
            if poll.signals:
                try:
                    rt.dispatcher.call_soon(rt.signals_arrived, list(poll.signals))
                except PhronomyError:
                    return

    def verify_ownership(self) -> None:
        """Let go of live executions another worker has claimed since (watcher
        thread; the decision is taken on the loop)."""
        rt = self.runtime
        if rt.stopping.is_set():
            return
        asked = rt.dispatcher.call(rt.engine.recovery.fences).result(5)
        if not asked:
            return
        stored = rt.store.execution_fences(list(asked))
        rt.dispatcher.call(rt.engine.recovery.check_ownership, stored, asked).result(5)


__all__ = ["Watcher"]
