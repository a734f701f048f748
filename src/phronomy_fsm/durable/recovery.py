"""Install, read-back and letting go: how a live copy is made, remade and dropped.

Owns :class:`Recovery`, the engine's part that makes a stored record the live
execution and resumes it by the rules of recovery (``docs/semantics.md``,
"Recovery": replay from a barrier or an announced effect, wait again with its timer,
wait for an operator, or park when it cannot be resumed), drops a live copy whose
commit's outcome is unproven and reads it back (``"Fail closed"``), and lets go of
executions this runtime no longer owns (``docs/scale-out.md``, "Leases and
fencing") or may no longer write. Loop thread only. Must not import the store or
agent layers.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import attrs

from phronomy_fsm.durable.lifecycle import Halt, LiveExecution, Replay
from phronomy_fsm.durable.records import (
    DurablePoint,
    ExecutionRecord,
    ExecutionStatus,
    Fence,
    SignalKind,
    SignalRecord,
)
from phronomy_fsm.durable.types import DurableEventKind
from phronomy_fsm.errors import ContextSerializationError, LeaseLostError, RuntimeClosedError
from phronomy_fsm.table import COMMITTED, BarrierOutcome

if TYPE_CHECKING:
    from phronomy_fsm.durable.engine import Engine

log = logging.getLogger("phronomy_fsm.durable")


class Recovery:
    """The engine's install, read-back and letting go (see the module docstring).

    Args:
        engine: the engine that owns this part (loop thread).
    """

    __slots__ = ("engine",)

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def recover_from_store(self, live: LiveExecution, why: str) -> None:
        """Forget the live copy and recover the execution from the store, as a
        restart would (retrying the read with backoff)."""
        if live.session_id is not None:
            self.engine.halt(live, Halt.SUPERSEDED)
        live.replay = None
        live.parked = None
        live.delivered.clear()
        live.ctx = None
        if live.timer is not None:
            live.timer.cancel()
            live.timer = None
        self.engine.host.io.readback(live, why)

    def close_refused(self, live: LiveExecution, error: BaseException) -> None:
        """The store refused to close signals of ``live`` under its fence (``error``,
        a LeaseLostError): this copy may be stale — another worker may own the
        execution, whose signals it took for stale or finished ones. Recover it from
        the store as after a refused commit (:meth:`recover_from_store`: the copy is
        let go when the store names another owner). Loop thread."""
        if self.engine.live.get(live.execution_id) is not live:
            return  # settled or let go already: nothing live to drop
        if live.committing:
            return  # the commit in flight is fenced too: its outcome decides
        log.warning(
            "execution %s: closing its signals was refused (%s); recovering it from the store",
            live.execution_id,
            error,
        )
        self.recover_from_store(live, "closing signals refused")

    def reinstall(
        self,
        live: LiveExecution,
        record: ExecutionRecord,
        owner: tuple[str | None, int],
        signals: list[SignalRecord],
    ) -> None:
        """Install what the store holds for an execution this runtime claimed, after a
        commit of it whose outcome was not proven. When that commit was written after all
        (the record is past the last one known here), the listeners are told what it
        did — finished, waiting, parked — as its outcome would have told them."""
        worker, token = owner
        if worker != live.fence.worker_id or token != live.fence.token:
            self.release(
                live,
                LeaseLostError(
                    f"execution {live.execution_id} is now owned by worker {worker}; this "
                    "runtime dropped it",
                    execution_id=live.execution_id,
                    owner_id=worker,
                ),
            )
            return
        if record.revision > live.record.revision:
            if record.is_finished:
                self.engine.emit(
                    DurableEventKind.FINISHED, live, record, status=record.status.value
                )
            elif record.status is ExecutionStatus.WAITING:
                self.engine.emit(DurableEventKind.WAITING, live, record, state=record.state)
            elif record.status is ExecutionStatus.RECOVERY_REQUIRED and record.recovery:
                reason = record.recovery.reason
                self.engine.emit(DurableEventKind.RECOVERY_REQUIRED, live, record, reason=reason)
        self.install(live, record, signals)

    def forget(self, live: LiveExecution) -> None:
        """Remove ``live`` from :attr:`live` — only that copy: a newer one installed
        under a later claim of the same execution stays."""
        if self.engine.live.get(live.execution_id) is live:
            del self.engine.live[live.execution_id]

    def release(self, live: LiveExecution, error: BaseException) -> None:
        """Drop an execution this runtime no longer owns; its waiters fail."""
        self.forget(live)
        if live.timer is not None:
            live.timer.cancel()
        if live.expiry is not None:
            live.expiry.cancel()
            live.expiry = None
        self.engine.emit(DurableEventKind.RELEASED, live, reason=str(error))
        for task in live.waiters:
            task.fail(error)
        live.waiters.clear()

    def install(
        self,
        live: LiveExecution,
        record: ExecutionRecord,
        signals: list[SignalRecord],
        *,
        fresh_resolution: bool = False,
        never_run: bool = False,
    ) -> None:
        """Make ``record`` (just read from the store, or just committed with a
        resolution: ``fresh_resolution``) the live execution and resume it per
        ``docs/semantics.md`` "Recovery" (loop thread). ``never_run``: no process ever
        ran it (its first claim): it runs as new, not as a replay whose first
        at_most_once effect a dead owner may have started."""
        self.engine.resting.discard(live.execution_id)  # this copy is the one now
        self.engine.live[live.execution_id] = live
        facts = live.reg.facts
        renames = facts.rename_for(record.spec_version, record.spec_sha256)
        live.record = record
        live.ctx = None
        live.pending = []
        live.delivered = []
        live.parked = None
        live.replay = None
        live.cancelling = None
        if record.is_finished:
            self.engine.settle(live, record)
            return
        if renames is None:
            self.engine.parking.park_record(
                live,
                f"spec_changed: the execution started under {record.machine} spec version "
                f"{record.spec_version} (sha256 {record.spec_sha256[:12]}...), this runtime runs "
                f"version {facts.table.version} and declares no migration for it",
            )
            return
        if record.spec_sha256 != facts.table.spec_sha256:
            # a migration covers it (with or without renames): from its next commit on
            # it is pinned to this spec, so a worker of the older spec no longer claims
            # it (docs/scale-out.md, "Rolling upgrades")
            record = attrs.evolve(
                record,
                state=renames.get(record.state, record.state),
                spec_version=facts.table.version,
                spec_sha256=facts.table.spec_sha256,
            )
            live.record = record
        live.state = record.state
        try:
            self.engine.context(live)
        except ContextSerializationError as exc:
            self.engine.parking.park_record(live, f"context_unreadable: {exc}")
            return
        for signal in signals:
            if signal.consumed_revision is None:
                live.pending.append(signal)
        if (
            record.status is ExecutionStatus.WAITING
            and not live.pending
            and self.engine.resting.rest(live)
        ):
            return  # nothing to apply: held as an index entry until its signal or timer
        self.engine.delivery.arm_expiry(live)
        if any(s.kind is SignalKind.CANCEL for s in live.pending):
            # a cancel recorded before this point (while a resolution was committed, a
            # @cancel commit failed, the owner died) wins: nothing resumes first
            self.engine.delivery.react(live)
            return
        if record.status is ExecutionStatus.WAITING:
            self.engine.delivery.arm_timer(live)
            self.engine.delivery.react(live)
            return
        if record.status is ExecutionStatus.RECOVERY_REQUIRED:
            self.engine.delivery.react(live)
            return
        live.replay = None if never_run else Replay(record.resolution, fresh=fresh_resolution)
        if record.point is DurablePoint.START:
            self.engine.start_session(live)
        elif record.point is DurablePoint.BARRIER and record.resume_event is not None:
            outcome = BarrierOutcome(COMMITTED, record.revision)
            self.engine.start_session(
                live, at_state=record.state, event=record.resume_event, payload=outcome
            )
        elif record.point is DurablePoint.EFFECT and record.announced is not None:
            # the announced effect may have started: its work is started again from
            # the stored context and input, and offload() decides by its kind
            self.engine.start_session(
                live,
                at_state=record.state,
                payload=record.effect_payload,
                rework=True,
                rework_row=record.effect_row,
            )
            self.engine.delivery.schedule_delivery(live)  # its state may take a pending signal
        else:
            self.engine.parking.park_record(
                live, f"not_resumable: point {record.point.value} with status {record.status.value}"
            )

    def fences(self) -> dict[str, Fence]:
        """The fence of every live execution (for the ownership check)."""
        return {eid: live.fence for eid, live in self.engine.live.items()}

    def check_ownership(
        self, stored: dict[str, tuple[str | None, int, bool]], asked: dict[str, Fence]
    ) -> None:
        """Drop every live execution that the store says another worker now owns
        (its fencing token moved on while this worker was paused or cut off)."""
        for eid, fence in asked.items():
            live = self.engine.live.get(eid)
            if live is None or live.fence != fence or eid not in stored:
                continue
            owner, token, _active = stored[eid]
            if owner != fence.worker_id or token != fence.token:
                if live.session_id is not None:
                    self.engine.halt(live, Halt.SUPERSEDED)
                self.release(
                    live,
                    LeaseLostError(
                        f"execution {eid} is now owned by worker {owner} (fence {token}); this "
                        "worker's lease passed and it let the execution go",
                        execution_id=eid,
                        owner_id=owner,
                    ),
                )

    def let_go_all(self, error: BaseException) -> None:
        """The store refuses every write (newer code migrated its schema): stop every
        live execution here without a commit — its session halted, its timers
        cancelled, its waiters failed with ``error`` — and take nothing on again
        (loop thread). The executions live on in the store at their last commit; a
        worker that can write resumes them by the rules of recovery."""
        self.engine.closing = True
        self.engine.resting.clear(error)
        for live in list(self.engine.live.values()):
            if live.session_id is not None:
                self.engine.halt(live, Halt.SUPERSEDED)
            self.release(live, error)

    def detach_all(self) -> None:
        """The runtime is closing: fail every waiter with RuntimeClosedError (the
        executions live on in the store)."""
        for live in list(self.engine.live.values()):
            error = RuntimeClosedError(
                f"the runtime closed before execution {live.execution_id} finished; it lives on "
                f"in the store (status {live.record.status.value}, state {live.record.state}); "
                "start a runtime with its machine and call recover() (or phronomy-fsm recover) "
                "to continue it",
                execution_id=live.execution_id,
                status=live.record.status.value,
            )
            for task in live.waiters:
                task.fail(error)
            live.waiters.clear()
            if live.timer is not None:
                live.timer.cancel()
            if live.expiry is not None:
                live.expiry.cancel()
        self.engine.live.clear()
        self.engine.resting.clear(
            RuntimeClosedError(
                "the runtime closed before the execution finished; it lives on in the store "
                "(waiting); start a runtime with its machine and call recover() (or "
                "phronomy-fsm recover) to continue it"
            )
        )


__all__ = ["Recovery"]
