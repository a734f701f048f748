"""Claiming executions: how a runtime takes executions on and installs them.

Owns :class:`Claims`, the part of a :class:`~phronomy_fsm.durable.runtime.DurableRuntime`
that claims executions in the store — every claimable one of its machines' specs, a
chosen few (``adopt``), or those it owns but does not run (stranded claims) — reads
each just claimed and queues its install on the loop, and ends the leases of workers
whose process is provably gone. The rules: ``docs/semantics.md``, "Recovery", and
``docs/scale-out.md`` ("Rolling upgrades", "Stranded claims"). The runtime's public
methods (``recover``, ``claim``, ``adopt``, ``resume_stranded``,
``retire_dead_workers``) check that it is open and hold its claim lock around these.

Concurrency: any thread but the loop (store I/O); callers hold the runtime's claim
lock. Must not import the store or agent layers.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from phronomy_fsm.durable.claims import OtherSpecExecution, RunnableSpecs, describe_left
from phronomy_fsm.durable.lifecycle import LiveExecution
from phronomy_fsm.durable.records import ExecutionRecord, Fence, SignalRecord
from phronomy_fsm.errors import NotFoundError, PhronomyError
from phronomy_fsm.runtime.processes import DEAD, ProcessIdentity, current_process, probe_owner

if TYPE_CHECKING:
    from phronomy_fsm.durable.runtime import Accept, DurableRuntime

log = logging.getLogger("phronomy_fsm.durable")


class Claims:
    """A runtime's claiming (see the module docstring).

    Args:
        runtime: the runtime that owns this part.

    Attributes: ``stranded`` (executions owned here in the store but not live:
    id → (fencing token, first seen, ``time.monotonic``)); ``new_first`` (whether the
    last claim put new work first: claims alternate).
    """

    def __init__(self, runtime: DurableRuntime) -> None:
        self.runtime = runtime
        self.stranded: dict[str, tuple[int, float]] = {}
        #: whether the last claim put new work first (claims alternate)
        self.new_first = False

    def accepts(self, accept: Accept, execution_id: str) -> bool:
        try:
            return bool(accept(self.runtime.store.load_record(execution_id)))
        except NotFoundError:
            return False

    def claim(
        self, wanted: int, accept: Accept | None, *, waiting_only: bool = False
    ) -> list[tuple[str, str]]:
        specs = self.runtime.runnable_specs
        if accept is not None:  # read, filter, then claim one by one
            chosen = []
            for execution_id, _machine in self.runtime.store.claimable_executions(
                specs, limit=max(wanted * 4, 1000)
            ):
                try:
                    record = self.runtime.store.load_record(execution_id)
                except NotFoundError:
                    continue
                if accept(record):
                    chosen.append(execution_id)
                if len(chosen) >= wanted:
                    break
            return self.runtime.adopt(chosen)
        if not self.runtime.store.claimable_executions(specs, limit=1):
            # Why a read first: a claim is a write transaction that reads every active
            # execution; on SQLite it would hold the one write lock, and so delay the
            # commits of executions running here, each time a worker looks in vain
            return []
        # alternate: new work first, then the backlog first — new work is claimed at
        # once and a flood of it never starves recovery (docs/scale-out.md)
        if not waiting_only:
            self.new_first = not self.new_first
        tokens = [
            (eid, token)
            for eid, _m, token in self.runtime.store.claim_executions(
                specs,
                self.runtime.worker_id,
                limit=wanted,
                new_first=self.new_first and not waiting_only,
                waiting_only=waiting_only,
            )
        ]
        return [self.install_claimed(execution_id, token) for execution_id, token in tokens]

    def install_claimed(self, execution_id: str, token: int) -> tuple[str, str]:
        """Read an execution just claimed under ``token`` and queue its install;
        ``(execution_id, status found)``. Raises StorageError."""
        record = self.runtime.store.load_record(execution_id)
        signals = self.runtime.store.pending_signals(execution_id)
        # token 1 on revision 0: the store held it unowned with token 0 (submitted by
        # any process, or a fork), so nobody ever ran it: its first effect is not one a
        # dead owner may have started (docs/semantics.md, "Recovery")
        never_run = token == 1 and record.revision == 0
        self.install(record, Fence(self.runtime.worker_id, token), signals, never_run=never_run)
        return execution_id, record.status.value

    def adopt(self, wanted: list[str]) -> list[tuple[str, str]]:
        live = set(self.runtime.dispatcher.call(self.runtime.engine.held_ids).result(10))
        claimed: list[tuple[str, str]] = []
        for execution_id in wanted:
            if execution_id in live:
                continue
            try:
                record = self.runtime.store.load_record(execution_id)
            except NotFoundError:
                continue
            reg = self.runtime.registrations.get(record.machine)
            if not record.is_active or reg is None:
                continue
            specs = RunnableSpecs.of(reg.machine.table)
            if not specs.runs(record.spec_version, record.spec_sha256):
                log.info(
                    "worker %s: %s",
                    self.runtime.worker_id,
                    describe_left(
                        [
                            OtherSpecExecution(
                                execution_id,
                                record.machine,
                                record.spec_version,
                                record.spec_sha256,
                            )
                        ],
                        [specs],
                    ),
                )
                continue
            # the claim checks the spec again: a worker of another spec may have
            # moved it on (a migration) since it was read
            token = self.runtime.store.claim_execution(
                execution_id, self.runtime.worker_id, runs=specs
            )
            if token is not None:
                claimed.append(self.install_claimed(execution_id, token))
        return claimed

    def resume_stranded(self, min_age_seconds: float) -> list[tuple[str, str]]:
        owned = self.runtime.store.owned_executions(self.runtime.worker_id, self.runtime.machines)
        if not owned:
            self.stranded = {}
            return []
        try:
            live = set(self.runtime.dispatcher.call(self.runtime.engine.held_ids).result(10))
        except (PhronomyError, TimeoutError):  # closing, or the loop busy for seconds
            return []
        now = time.monotonic()
        before = self.stranded
        self.stranded = {}
        for eid, token in owned.items():
            if eid not in live:
                earlier = before.get(eid)
                self.stranded[eid] = (
                    token,
                    earlier[1] if earlier and earlier[0] == token else now,
                )
        if self.runtime.holds:  # a start on its way here is owned but not live yet
            return []
        due = [eid for eid, (_t, seen) in self.stranded.items() if now - seen >= min_age_seconds]
        resumed: list[tuple[str, str]] = []
        for execution_id in due:
            del self.stranded[execution_id]
            claimed = self.runtime.store.claim_execution(execution_id, self.runtime.worker_id)
            if claimed is not None:
                resumed.append(self.install_claimed(execution_id, claimed))
        if resumed:
            log.warning(
                "worker %s: resumed %d execution(s) it owned but did not run (a claim "
                "whose answer was lost): %s",
                self.runtime.worker_id,
                len(resumed),
                ", ".join(eid for eid, _ in resumed),
            )
        return resumed

    def retire_dead_workers(self) -> list[str]:
        me = current_process()
        retired = []
        for worker, _heartbeat, expires in self.runtime.store.list_workers():
            if worker.worker_id == self.runtime.worker_id or expires <= 0:
                continue
            identity = ProcessIdentity(
                worker.host, worker.pid, worker.start_time, worker.boot_id, worker.pid_namespace
            )
            verdict, reason = probe_owner(identity, me)
            if verdict == DEAD:
                log.warning("worker %s is gone (%s); ending its lease", worker.worker_id, reason)
                self.runtime.store.retire_worker(worker.worker_id)
                retired.append(worker.worker_id)
        return retired

    def install(
        self,
        record: ExecutionRecord,
        fence: Fence,
        signals: list[SignalRecord],
        *,
        never_run: bool = False,
    ) -> None:
        reg = self.runtime.registration(record.machine)
        live = LiveExecution(reg, record, fence)

        def install() -> None:
            old = self.runtime.engine.live.get(record.execution_id)
            if old is not None:
                live.waiters.extend(old.waiters)
                old.waiters.clear()
            self.runtime.engine.recovery.install(live, record, signals, never_run=never_run)
            self.runtime.io.refresh_signals(live)

        self.runtime.dispatcher.call_soon(install)


__all__ = ["Claims"]
