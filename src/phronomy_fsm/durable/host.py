"""What the loop-side engine needs from its runtime: the :class:`EngineHost` protocol.

Owns the seam between :class:`~phronomy_fsm.durable.engine.Engine` (loop thread:
live executions, commits, signals, recovery) and
:class:`~phronomy_fsm.durable.runtime.DurableRuntime` (the thread-safe facade: the
store, the dispatcher, the worker's lease, store I/O off the loop). The engine holds
its runtime only as an ``EngineHost``; mypy checks that ``DurableRuntime`` satisfies
it (``_CHECKED_HOST`` in :mod:`phronomy_fsm.durable.runtime`). Rules:
``docs/semantics.md``. Must not import the store or agent layers.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Protocol

from phronomy_fsm.durable.ports import ExecutionStore
from phronomy_fsm.durable.records import ExecutionRecord, SignalRecord
from phronomy_fsm.durable.types import DurableEvent
from phronomy_fsm.runtime import Dispatcher
from phronomy_fsm.runtime.clock import Clock
from phronomy_fsm.runtime.faults import FaultPlan

if TYPE_CHECKING:
    from phronomy_fsm.durable.lifecycle import LiveExecution, Registration


class EngineStoreIO(Protocol):
    """The store calls the engine asks its runtime to make off the loop (each returns
    at once; what it found is posted back to the loop with ``Engine.post``)."""

    def refresh_signals(
        self,
        live: LiveExecution,
        on_read: Callable[[list[SignalRecord] | None], None] | None = None,
    ) -> None:
        """Read ``live``'s pending signals off the loop, then queue them on it (or
        hand them to ``on_read``: ``None`` when the read failed)."""
        ...

    def drop_signals(self, live: LiveExecution, seqs: list[int], outcome: str) -> None:
        """Close signals of ``live`` without applying them, off the loop, under its
        fence (``outcome`` says why)."""
        ...

    def cancel_children_elsewhere(
        self, parent_execution_id: str, payload: dict[str, Any], skip: set[str]
    ) -> Future[bool]:
        """Write a cancel request to every active child of the parent that is not in
        ``skip``, off the loop; the future is set once they are written."""
        ...

    def load_resting(
        self,
        execution_id: str,
        on_read: Callable[
            [tuple[ExecutionRecord, tuple[str | None, int], list[SignalRecord]] | None], None
        ],
    ) -> None:
        """Read a resting execution's record, owner and fencing token, and pending
        signals off the loop, then hand them to ``on_read`` on the loop (``None`` when
        the read failed)."""
        ...

    def readback(self, live: LiveExecution, why: str) -> None:
        """Read ``live`` back from the store off the loop (with backoff) and reinstall
        it on the loop (``why``: for the log)."""
        ...


class EngineHost(Protocol):
    """The runtime as the engine sees it (attributes read on the loop thread)."""

    #: the store every commit and inbox write goes to
    store: ExecutionStore
    #: the loop the engine runs on (sessions, timers, ``call_soon``)
    dispatcher: Dispatcher
    #: the clock of records, timers and deadlines
    clock: Clock
    #: crash points (tests and the crash harness), else ``None``
    faults: FaultPlan | None
    #: told every durable event, on the loop thread
    listeners: list[Callable[[DurableEvent], None]]
    #: the store I/O the engine asks for, run off the loop
    io: EngineStoreIO
    #: this runtime's worker id (its leases, and the slots of limits it holds)
    worker_id: str

    def registration(self, name: str) -> Registration:
        """The registration of machine ``name``. Raises UnknownMachineError."""
        ...

    def lease_error(self, execution_id: str) -> BaseException | None:
        """``None`` while an effect of ``execution_id`` may start (the lease holds),
        else the error that keeps it from starting. Any thread."""
        ...

    def note_write_error(self, error: BaseException) -> None:
        """Take note of an error a store write raised (a SchemaVersionError stops every
        write of the runtime). Any thread."""
        ...


__all__ = ["EngineHost", "EngineStoreIO"]
