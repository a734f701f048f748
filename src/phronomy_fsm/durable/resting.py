"""Resting executions: waiting executions held as an index entry, not a live copy.

Owns :class:`Resting`, the engine's part that holds an execution that waits durably
— for a signal, a timer, or both — without keeping it loaded: no
:class:`~phronomy_fsm.durable.lifecycle.LiveExecution`, no record or context, no
timer handle of its own. What is kept per execution is one index entry (its fencing
token, the revision it rests at, the moment it is next due) and, when it has a timer
or a deadline, one entry in a heap shared by all of them, watched by a single
dispatcher timer for the earliest. When its signal arrives, its time comes, a cancel
or an operator asks for it, the execution is loaded from the store — record, owner,
pending signals — and installed exactly as recovery installs a waiting execution,
which applies the signal or fires the timer by the usual rules (``docs/runtime.md``,
"How a waiting execution is held").

Nothing here changes what is durable: an execution rests only after its ``@wait``
commit (or its install) has settled with nothing pending that it could take, and is
loaded again before anything of it moves; signals are still read from the inbox in
order and consumed only by the commits of the live copy (``docs/semantics.md``,
"Signals"); the store's owner and fencing token are checked at load, so an execution
another worker claimed meanwhile is let go, never run (``docs/scale-out.md``, "Leases
and fencing").

Loop thread only. Must not import the store or agent layers.
"""

from __future__ import annotations

import heapq
import logging
from typing import TYPE_CHECKING, Any

from phronomy_fsm.durable.lifecycle import LiveExecution
from phronomy_fsm.durable.records import ExecutionRecord, ExecutionStatus, Fence, SignalRecord
from phronomy_fsm.durable.types import ExecutionResult
from phronomy_fsm.errors import LeaseLostError, NotFoundError
from phronomy_fsm.runtime.tasks import Task

if TYPE_CHECKING:
    from phronomy_fsm.durable.engine import Engine

log = logging.getLogger("phronomy_fsm.durable")

#: Seconds before a load that failed (the store unreachable) is tried again.
RETRY_LOAD_SECONDS = 1.0

#: What the index keeps of a resting execution: (fencing token, revision, next due
#: as epoch seconds on the runtime's clock or ``None``).
RestingEntry = tuple[int, int, float | None]


class Resting:
    """The engine's resting executions (see the module docstring).

    Args:
        engine: the engine that owns this part (loop thread).

    Attributes: ``index`` (execution id → :data:`RestingEntry`); ``loading``
    (execution id → signals that arrived while its load is in flight); ``waiters``
    (execution id → tasks waiting for it to finish, handed to its live copy).
    """

    __slots__ = ("_heap", "_timer", "_timer_due", "engine", "index", "loading", "waiters")

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.index: dict[str, RestingEntry] = {}
        self.loading: dict[str, list[SignalRecord]] = {}
        #: tasks waiting for a resting execution to finish (it is being loaded)
        self.waiters: dict[str, list[Task[ExecutionResult]]] = {}
        #: (due epoch seconds, execution id, revision), lazily pruned
        self._heap: list[tuple[float, str, int]] = []
        self._timer: Any = None
        self._timer_due: float | None = None

    def __contains__(self, execution_id: object) -> bool:
        return execution_id in self.index

    def __len__(self) -> int:
        return len(self.index)

    # ------------------------------------------------------------------ rest

    def rest(self, live: LiveExecution) -> bool:
        """Let ``live`` rest if it waits durably with nothing to do: it is this
        engine's live copy, ``waiting`` at its last commit, with no session, commit,
        cancel, delivery, unapplied signal or waiter. Its live copy is dropped and
        its timer and deadline move to the shared heap. True when it now rests."""
        engine = self.engine
        eid = live.execution_id
        record = live.record
        if (
            engine.closing
            or engine.live.get(eid) is not live
            or record.status is not ExecutionStatus.WAITING
            or live.session_id is not None
            or live.committing
            or live.pending
            or live.delivered
            or live.waiters
            or live.cancelling is not None
            or live.parked is not None
            or live.delivery_scheduled
            or live.timer is not None
        ):
            return False
        due = _due(live, record)
        if due is not None and due <= engine.now().timestamp():
            return False  # due now: its timer (or deadline) is armed live and fires
        if live.expiry is not None:  # the heap holds its deadline from now on
            live.expiry.cancel()
            live.expiry = None
        del engine.live[eid]
        self.index[eid] = (live.fence.token, record.revision, due)
        if due is not None:
            heapq.heappush(self._heap, (due, eid, record.revision))
            self._arm()
        return True

    def discard(self, execution_id: str) -> None:
        """Forget a resting execution (a newer claim installs it, or it is let go)."""
        self.index.pop(execution_id, None)

    def wait_for(self, execution_id: str) -> Task[ExecutionResult] | None:
        """A task settled when the resting ``execution_id`` finishes here (it is
        loaded now, and stays live while the task waits), or ``None`` when it does not
        rest here. Fails as a live copy's waiters fail (let go, runtime closed)."""
        if execution_id not in self.index:
            return None
        task: Task[ExecutionResult] = Task(f"execution {execution_id}")
        self.waiters.setdefault(execution_id, []).append(task)
        self.load(execution_id)
        return task

    def gone(self, execution_id: str) -> None:
        """The store holds no such execution any more: forget it."""
        self.index.pop(execution_id, None)
        self.loading.pop(execution_id, None)
        for task in self.waiters.pop(execution_id, []):
            task.fail(NotFoundError(f"execution {execution_id} is gone from the store"))

    def clear(self, error: BaseException) -> None:
        """Forget every resting execution and stop the timer (the runtime closes or
        stops writing: they live on in the store, their last commit ``waiting``); the
        tasks waiting for one fail with ``error``."""
        for tasks in self.waiters.values():
            for task in tasks:
                task.fail(error)
        self.waiters.clear()
        self.index.clear()
        self.loading.clear()
        self._heap.clear()
        if self._timer is not None:
            self._timer.cancel()
        self._timer = None
        self._timer_due = None

    # ------------------------------------------------------------------ timers

    def _arm(self) -> None:
        """Keep the one dispatcher timer set for the earliest due entry."""
        heap = self._heap
        while heap and self.index.get(heap[0][1], (0, -1, None))[1:] != (heap[0][2], heap[0][0]):
            heapq.heappop(heap)  # stale: loaded, let go, or rested again since
        if not heap:
            return
        due = heap[0][0]
        if self._timer is not None and self._timer_due is not None and self._timer_due <= due:
            return
        if self._timer is not None:
            self._timer.cancel()
        delay = max(0.0, due - self.engine.now().timestamp())
        self._timer_due = due
        self._timer = self.engine.host.dispatcher.call_later(delay, self._fire)

    def _fire(self) -> None:
        self._timer = None
        self._timer_due = None
        now = self.engine.now().timestamp()
        heap = self._heap
        while heap and heap[0][0] <= now:
            due, eid, revision = heapq.heappop(heap)
            entry = self.index.get(eid)
            if entry is not None and entry[1] == revision and entry[2] == due:
                self.load(eid)
        self._arm()

    # ------------------------------------------------------------------ load

    def load(self, execution_id: str, signals: list[SignalRecord] | None = None) -> bool:
        """Load a resting execution from the store and install it (off the loop, then
        on it), with ``signals`` that arrived for it (kept while the load is in
        flight). False when it does not rest here."""
        if execution_id not in self.index:
            return False
        waiting = self.loading.get(execution_id)
        if waiting is not None:
            waiting.extend(signals or ())
            return True
        self.loading[execution_id] = list(signals or ())
        entry = self.index[execution_id]
        self.engine.host.io.load_resting(
            execution_id, lambda found: self._loaded(execution_id, entry, found)
        )
        return True

    def _loaded(
        self,
        execution_id: str,
        entry: RestingEntry,
        found: tuple[ExecutionRecord, tuple[str | None, int], list[SignalRecord]] | None,
    ) -> None:
        """The store answered a load (``None``: the read failed); loop thread."""
        arrived = self.loading.pop(execution_id, [])
        if self.index.get(execution_id) != entry:
            return  # installed by a newer claim, or let go, meanwhile
        if found is None:  # the store is unreachable: try again, keeping what came
            engine = self.engine

            def again() -> None:
                self.load(execution_id, arrived)

            engine.host.dispatcher.call_later(RETRY_LOAD_SECONDS, again)
            return
        record, (owner, token), signals = found
        del self.index[execution_id]
        host = self.engine.host
        waiters = self.waiters.pop(execution_id, [])
        reg = host.registration(record.machine)
        live = LiveExecution(reg, record, Fence(host.worker_id, entry[0]))
        live.waiters.extend(waiters)
        if owner != host.worker_id or token != entry[0]:
            # claimed by another worker while it rested here (this worker's lease
            # passed): let it go, as the ownership check lets a live copy go
            self.engine.recovery.release(
                live,
                LeaseLostError(
                    f"execution {execution_id} is now owned by worker {owner} (fence "
                    f"{token}); it rested here and this worker let it go",
                    execution_id=execution_id,
                    owner_id=owner,
                ),
            )
            return
        by_seq = {s.seq: s for s in (*signals, *arrived) if s.consumed_revision is None}
        self.engine.recovery.install(live, record, [by_seq[seq] for seq in sorted(by_seq)])


def _due(live: LiveExecution, record: ExecutionRecord) -> float | None:
    """When a resting execution must be loaded: its wait's timer or its own
    deadline, whichever comes first (epoch seconds), or ``None``."""
    due: float | None = None
    timeout = live.reg.facts.states[record.state].timeout
    if timeout is not None and record.deadline_at is not None:
        due = record.deadline_at.timestamp()
    if record.expires_at is not None:
        expires = record.expires_at.timestamp()
        due = expires if due is None else min(due, expires)
    return due


__all__ = ["RETRY_LOAD_SECONDS", "Resting", "RestingEntry"]
