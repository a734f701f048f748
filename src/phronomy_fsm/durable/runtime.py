"""The durable runtime: run executions of any generated machine so they survive crashes.

A :class:`DurableRuntime` owns a dispatcher (one loop thread), a bounded offload pool,
a store, and a **worker** identity with a lease. Its machines are registered once
(:class:`~phronomy_fsm.durable.types.Machine`: generated table, hooks, context type).
Then:

- :meth:`DurableRuntime.start` commits a new execution (revision 0) and runs it;
- every barrier of the spec, every wait and final state is a commit
  (:mod:`phronomy_fsm.durable.engine`);
- :meth:`DurableRuntime.recover` claims the executions of its machines that no live
  worker owns and resumes each from its last commit (replay from a barrier, wait again,
  or park for an operator) — never a blind re-send. It claims only executions whose
  spec its machines run (their own, or one a declared migration covers): others are
  left for a worker that runs them (``docs/scale-out.md``, "Rolling upgrades");
- :meth:`DurableRuntime.signal`, :meth:`resolve` and :meth:`cancel` write to an
  execution's durable inbox (any process may; :mod:`phronomy_fsm.durable.operations`),
  and the owner consumes each entry in order, exactly once.

The rules are in ``docs/semantics.md``; ``docs/getting-started.md`` ("Your own
machines") shows a complete example.

Once the store refuses a write because newer code migrated its schema
(SchemaVersionError), the runtime writes nothing more: it lets every execution go, its
claims and starts raise that error, and its refusal listeners are told
(:meth:`DurableRuntime.add_refusal_listener`; a worker stops).

Concurrency: every public method may be called from any thread except the loop
thread (they block on store I/O); the live executions are owned by the loop thread.
Beside the loop run the watcher (lease heartbeat and inbox polling) and one bounded
executor for the store I/O the loop must not block on (:mod:`~phronomy_fsm.durable.storeio`:
inbox reads, closing signals, read-backs after an unproven outcome, a cancel's requests
to children elsewhere); :meth:`DurableRuntime.close` joins both
(``docs/runtime.md``, "Threads of a durable runtime").
"""

from __future__ import annotations

import copy
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Self

from phronomy_fsm.durable.claiming import Claims
from phronomy_fsm.durable.claims import OtherSpecExecution, RunnableSpecs, describe_left
from phronomy_fsm.durable.codec import json_data
from phronomy_fsm.durable.engine import Engine
from phronomy_fsm.durable.keys import check_id, new_execution_id
from phronomy_fsm.durable.lifecycle import Registration
from phronomy_fsm.durable.machines import table_to_json
from phronomy_fsm.durable.operations import request_cancel, request_resolution, send_signal
from phronomy_fsm.durable.points import EngineBarrier
from phronomy_fsm.durable.ports import ExecutionStore
from phronomy_fsm.durable.records import (
    DurableCommit,
    ExecutionRecord,
    Fence,
    MachineRecord,
    SignalRecord,
    WorkerRecord,
)
from phronomy_fsm.durable.starting import ExecutionHandle, StartHere
from phronomy_fsm.durable.storeio import StoreIO
from phronomy_fsm.durable.submit import start_record, submit_execution
from phronomy_fsm.durable.types import (
    DurableEvent,
    ExecutionResult,
    Machine,
    RecoveryReport,
)
from phronomy_fsm.durable.watcher import Watcher
from phronomy_fsm.errors import (
    DurableError,
    LeaseLostError,
    PhronomyError,
    RuntimeClosedError,
    SchemaVersionError,
    TaskTimeoutError,
    UnknownMachineError,
)
from phronomy_fsm.runtime import Dispatcher, OffloadPool, bind_machine
from phronomy_fsm.runtime.clock import Clock, StoreClock
from phronomy_fsm.runtime.faults import FaultPlan
from phronomy_fsm.runtime.processes import current_process
from phronomy_fsm.runtime.tasks import Task

log = logging.getLogger("phronomy_fsm.durable")

Listener = Callable[[DurableEvent], None]
#: Decides whether a runtime takes an execution on (see :meth:`DurableRuntime.recover`).
Accept = Callable[[ExecutionRecord], bool]

#: Default lease of a worker, in seconds: a dead worker's executions are claimable
#: by others once it has passed (heartbeats renew it every third of it).
DEFAULT_LEASE_SECONDS = 10.0
#: Default interval of the inbox poll, in seconds.
DEFAULT_POLL_SECONDS = 0.05
#: Most executions one claim takes (``claim`` without a limit; ``recover`` claims
#: batch after batch of it until none is left).
CLAIM_BATCH = 1000


class DurableRuntime:
    """Runs durable executions of registered machines (see the module docstring).

    Args:
        store: the store (for example
            :class:`~phronomy_fsm.store.sqlite.SqliteBarrierStore`); the runtime does
            not close it unless ``own_store``.
        machines: machines to register at once.
        max_workers / queue_size: the offload pool's bounds (effects, filters).
        clock: the clock of timers, deadlines and records. By default this host's
            clock moved onto the store's (:class:`~phronomy_fsm.runtime.clock.StoreClock`,
            aligned at start and at every lease renewal), so workers on hosts whose
            clocks disagree agree on every deadline (``docs/semantics.md``, "One
            clock"); a test passes a manual clock.
        lease_seconds: this worker's lease; heartbeats renew it every third of it.
        poll_seconds: how often the inbox is polled for signals from other processes
            (with a store that notifies — PostgreSQL ``LISTEN/NOTIFY`` — the watcher
            also wakes at once on a notification; the poll is then the fallback).
        faults: crash points (tests and the crash harness only).
        listeners: called with every :class:`DurableEvent`, on the loop thread.
        name: thread-name prefix and the worker's name.
        own_store: close ``store`` in :meth:`close`.

    Raises:
        StorageError: the worker cannot be registered in the store.
    """

    def __init__(
        self,
        store: ExecutionStore,
        *,
        machines: Iterable[Machine] = (),
        max_workers: int = 16,
        queue_size: int = 1024,
        clock: Clock | None = None,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        poll_seconds: float = DEFAULT_POLL_SECONDS,
        faults: FaultPlan | None = None,
        listeners: Iterable[Listener] = (),
        name: str = "phronomy-durable",
        own_store: bool = False,
    ) -> None:
        if lease_seconds <= 0 or poll_seconds <= 0:
            raise ValueError("lease_seconds and poll_seconds must be positive")
        self.store = store
        #: the default clock, aligned to the store's at every lease renewal
        self.store_clock: StoreClock | None = None
        if clock is None:
            clock = self.store_clock = StoreClock(store)
        self.clock = clock
        self.faults = faults
        self.listeners: list[Listener] = list(listeners)
        self.lease_seconds = float(lease_seconds)
        self.poll_seconds = float(poll_seconds)
        self.name = name
        self._own_store = own_store
        self._schedule_runners: list[Any] = []
        self.registrations: dict[str, Registration] = {}
        self.pool = OffloadPool(max_workers, queue_size, clock=clock, name=f"{name}-offload")
        self.dispatcher = Dispatcher(
            pool=self.pool, clock=clock, name=f"{name}-loop", faults=faults
        )
        self.engine = Engine(self)
        me = current_process()
        self.worker_id = f"{me.host[:40]}-{me.pid}-{os.urandom(4).hex()}"
        now = clock.now()
        self.worker = WorkerRecord(
            worker_id=self.worker_id,
            host=me.host,
            pid=me.pid,
            name=name,
            started_at=now,
            heartbeat_at=now,
            lease_expires_at=now + _seconds(lease_seconds),
            start_time=me.start_time,
            boot_id=me.boot_id,
            pid_namespace=me.pid_namespace,
        )
        self.closed = False
        #: the SchemaVersionError that stopped every write of this runtime, once one did
        self.refused: SchemaVersionError | None = None
        self._refusal_listeners: list[Callable[[SchemaVersionError], None]] = []
        self._refused_lock = threading.Lock()
        self.holds = 0  # starts on their way here (see hold())
        self._holds_lock = threading.Lock()
        #: executions whose start is committing here, not yet installed: id -> the
        #: signals the watcher read for them meanwhile. A signal may be sent as soon as
        #: the start is durable; the watcher's cursor moves past it before the install,
        #: so the install applies what was kept here (loop thread, but for the key's
        #: insertion and a failed start's removal, which the GIL keeps whole).
        self.arriving: dict[str, list[SignalRecord]] = {}
        self.stopping = threading.Event()
        #: every store call made off the loop and off the caller's thread (closed last)
        self.io = StoreIO(self)
        self._unlisten: Callable[[], None] | None = None
        #: claiming executions and installing those claimed (store I/O: not the loop)
        self.claims = Claims(self)
        #: held from "is it live here?" to "its install is queued" by every path that
        #: claims (claim, adopt, resume_stranded): two of them racing would each claim
        #: the same execution and run it twice, the later claim fencing out the first
        self._claiming = threading.RLock()
        for machine in machines:
            self.register(machine)
        registered = time.monotonic()
        store.register_worker(self.worker, self.lease_seconds)
        #: until when (time.monotonic) the lease surely holds and no execution live here
        #: has been claimed by another worker: measured from before the last renewal
        #: whose ownership check was applied (see lease_error)
        self.lease_valid_until = registered + self.lease_seconds
        self.watcher = Watcher(self, store.signal_cursor())
        add_listener = getattr(store, "add_listener", None)
        if callable(add_listener):  # NotifyingStore: wake the watcher at once
            self._unlisten = add_listener(lambda _channel, _payload: self.watcher.wake.set())
        self.dispatcher.start()
        self.watcher.start()

    def __enter__(self) -> Self:
        """Use the runtime as a context manager: :meth:`close` on exit."""
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ------------------------------------------------------------------ machines

    def register(self, machine: Machine) -> None:
        """Register a machine: bind its hooks once and record its table in the store.

        Raises:
            MissingHookError: a guard, action or offload hook is missing, or is only
                the generated Protocol's stub (barrier hooks are optional).
            TypeError: the context type is not an attrs class, msgspec Struct or dict.
            ValueError: ``final_status`` names a state that is not final.
            DurableError: a machine of this name is registered already.
            StorageError: the table could not be recorded.
        """
        if machine.name in self.registrations:
            raise DurableError(
                f"machine {machine.name!r} is registered already", machine=machine.name
            )
        table = machine.table
        binding = bind_machine(
            table,
            machine.hooks,
            step_limit=machine.step_limit,
            optional=frozenset(table.barriers),
            fast_path=False,
        )
        registration = Registration(machine, binding)
        self.store.register_machine(
            MachineRecord(
                machine=table.machine,
                spec_version=table.version,
                spec_sha256=table.spec_sha256,
                table=table_to_json(table),
                registered_at=self.clock.now(),
            )
        )
        self.registrations[machine.name] = registration

    def registration(self, name: str) -> Registration:
        """The registration of machine ``name``. Raises UnknownMachineError."""
        try:
            return self.registrations[name]
        except KeyError:
            raise UnknownMachineError(
                f"machine {name!r} is not registered with this runtime (registered: "
                f"{', '.join(sorted(self.registrations)) or 'none'})",
                machine=name,
            ) from None

    @property
    def machines(self) -> tuple[str, ...]:
        """The names of the registered machines, sorted."""
        return tuple(sorted(self.registrations))

    @property
    def runnable_specs(self) -> tuple[RunnableSpecs, ...]:
        """The specs the registered machines run, by machine name: each its own and
        those its declared migrations cover — what this runtime claims
        (``docs/scale-out.md``, "Rolling upgrades")."""
        return tuple(
            RunnableSpecs.of(self.registrations[name].machine.table) for name in self.machines
        )

    # ------------------------------------------------------------------ executions

    def start(
        self,
        machine: str,
        context: Any,
        *,
        execution_id: str | None = None,
        exclusive_key: str | None = None,
        labels: dict[str, Any] | None = None,
        timeout_seconds: float | None = None,
        run_here: bool = True,
    ) -> ExecutionHandle:
        """Start a durable execution of ``machine`` with ``context``.

        The execution is committed at revision 0 (state: the initial state) before
        anything runs; then it runs here — or, with ``run_here=False``, it is
        committed with no owner and any worker claims and runs it
        (:func:`phronomy_fsm.durable.submit.submit_execution`; ``docs/scale-out.md``).
        Starting an id that exists already returns the existing execution
        (``handle.created`` is False; the given context is ignored) when it runs the
        same machine (``docs/semantics.md``, "Starting").

        Args:
            machine: a registered machine's name.
            context: an instance of the machine's context type (the runtime keeps its
                own decoded copy; later changes to this object are not seen).
            execution_id: 1-128 printable characters without whitespace (default: a
                random id).
            exclusive_key: at most one active execution per key (e.g. a customer id).
            labels: free JSON labels shown by operator tools.
            timeout_seconds: the execution's deadline, stored with it: past it the
                engine ends it ``failed`` with DeadlineExceededError once nothing of
                it runs (after a restart too).

        Raises:
            UnknownMachineError, InvalidIdError, ContextSerializationError (naming the
            field path; nothing written), ExecutionExistsError (the id runs another
            machine), AgentBusyError (the exclusive key has an active execution),
            RuntimeClosedError, StorageError.

        Durability: the start is committed before this returns.
        """
        self._check_open()
        reg = self.registration(machine)
        if not run_here:
            eid, created = submit_execution(
                self.store,
                reg.machine,
                context,
                execution_id=execution_id,
                exclusive_key=exclusive_key,
                labels=labels,
                clock=self.clock,
                timeout_seconds=timeout_seconds,
            )
            return ExecutionHandle(self, eid, created=created)
        return self.start_async(
            machine,
            context,
            execution_id=execution_id,
            exclusive_key=exclusive_key,
            labels=labels,
            timeout_seconds=timeout_seconds,
        ).result()

    def start_async(
        self,
        machine: str,
        context: Any,
        *,
        execution_id: str | None = None,
        exclusive_key: str | None = None,
        labels: dict[str, Any] | None = None,
        timeout_seconds: float | None = None,
    ) -> Task[ExecutionHandle]:
        """:meth:`start` without blocking (any thread, the loop thread included): the
        arguments are checked now, the start is committed with the store's group
        commit, and the returned task settles with the
        :class:`ExecutionHandle` once it is — the execution then runs here.

        Raises (at once): UnknownMachineError, InvalidIdError,
        ContextSerializationError, RuntimeClosedError. The task fails with
        ExecutionExistsError, AgentBusyError or StorageError."""
        self._check_open()
        reg = self.registration(machine)
        eid = new_execution_id() if execution_id is None else check_id(execution_id)
        reg.codec.check(context)
        encoded = reg.codec.encode(context)
        record = start_record(
            reg.machine,
            encoded,
            execution_id=eid,
            exclusive_key=exclusive_key,
            labels=labels,
            clock=self.clock,
            timeout_seconds=timeout_seconds,
        )
        fence = Fence(self.worker_id, 1)
        commit = DurableCommit(EngineBarrier.START.value, record, None, fence)
        if self.faults is not None:
            self.faults.hit("barrier:@start:before")
        task: Task[ExecutionHandle] = Task(f"start {eid}")
        StartHere(self, reg, commit, encoded, task).submit()
        return task

    def handle(self, execution_id: str) -> ExecutionHandle:
        """A handle on an existing execution. Raises NotFoundError, InvalidIdError."""
        check_id(execution_id)
        self.store.load_record(execution_id)
        return ExecutionHandle(self, execution_id, created=False)

    def wait(self, execution_id: str, timeout_seconds: float | None = None) -> ExecutionResult:
        """Wait for ``execution_id`` to finish (see :meth:`ExecutionHandle.result`)."""
        task: Task[ExecutionResult | None] = self.dispatcher.call(self._waiter, execution_id)
        inner = task.result(timeout_seconds)
        if isinstance(inner, Task):
            return inner.result(timeout_seconds)
        return self._poll_finished(execution_id, timeout_seconds)

    def _waiter(self, execution_id: str) -> Task[ExecutionResult] | None:
        live = self.engine.live.get(execution_id)
        if live is None:  # resting here: loaded, with the task (else not here)
            return self.engine.resting.wait_for(execution_id)
        task: Task[ExecutionResult] = Task(f"execution {execution_id}")
        live.waiters.append(task)
        return task

    def _poll_finished(self, execution_id: str, timeout_seconds: float | None) -> ExecutionResult:
        deadline = None if timeout_seconds is None else time.monotonic() + timeout_seconds
        delay = 0.01
        while True:
            record = self.store.load_record(execution_id)
            if record.is_finished:
                reg = self.registrations.get(record.machine)
                context = json_data(record.context)
                if reg is not None and reg.machine.table.spec_sha256 == record.spec_sha256:
                    context = reg.codec.decode(context)
                return ExecutionResult.from_record(record, context)
            if deadline is not None and time.monotonic() >= deadline:
                raise TaskTimeoutError(
                    f"execution {execution_id} did not finish within {timeout_seconds} s "
                    f"(status {record.status.value}); it goes on",
                    execution_id=execution_id,
                )
            time.sleep(
                delay if deadline is None else max(0.0, min(delay, deadline - time.monotonic()))
            )
            delay = min(delay * 2, 0.5)

    # ------------------------------------------------------------------ inbox

    def signal(
        self,
        execution_id: str,
        event: str,
        payload: Any = None,
        *,
        expected_revision: int | None = None,
        signal_id: str | None = None,
    ) -> SignalRecord:
        """Send ``event`` to an execution (see
        :func:`phronomy_fsm.durable.operations.send_signal` for the rules and errors);
        when this runtime owns it, it reacts at once."""
        live_table = self._table_of(execution_id)
        signal = send_signal(
            self.store,
            execution_id,
            event,
            payload,
            expected_revision=expected_revision,
            signal_id=signal_id,
            sender=f"worker:{self.worker_id}",
            table=live_table,
        )
        self._wake(signal)
        return signal

    def resolve(
        self,
        execution_id: str,
        *,
        expected_revision: int,
        outcome: str,
        result: Any = None,
        error: str | None = None,
        signal_id: str | None = None,
    ) -> SignalRecord:
        """Answer an execution in ``recovery_required`` (see
        :func:`phronomy_fsm.durable.operations.request_resolution`)."""
        signal = request_resolution(
            self.store,
            execution_id,
            expected_revision=expected_revision,
            outcome=outcome,
            result=result,
            error=error,
            signal_id=signal_id,
            sender=f"worker:{self.worker_id}",
        )
        self._wake(signal)
        return signal

    def cancel(
        self,
        execution_id: str,
        *,
        reason: str = "cancelled",
        as_failure: bool = False,
        error_type: str | None = None,
    ) -> SignalRecord:
        """Cancel an execution (see
        :func:`phronomy_fsm.durable.operations.request_cancel`)."""
        signal = request_cancel(
            self.store,
            execution_id,
            reason=reason,
            as_failure=as_failure,
            error_type=error_type,
            sender=f"worker:{self.worker_id}",
        )
        self._wake(signal)
        return signal

    def notify(self, execution_id: str, signal: SignalRecord | None = None) -> None:
        """Something was written to ``execution_id``'s inbox by other means (an
        operator function on the store): when this runtime owns it, take ``signal``
        (the record the store returned, with its ``seq``) or, without one, read its
        inbox now rather than at the next poll. Any thread."""
        if self.closed:
            return
        if signal is not None and signal.seq > 0:
            self._wake(signal)
            return

        def check() -> None:
            live = self.engine.live.get(execution_id)
            if live is not None:
                self.io.refresh_signals(live)
            else:  # resting here: its load reads the inbox
                self.engine.resting.load(execution_id)

        self.dispatcher.call_soon(check)

    def _table_of(self, execution_id: str) -> Any:
        try:
            record = self.store.load_record(execution_id)
        except PhronomyError:
            return None
        reg = self.registrations.get(record.machine)
        if reg is None or reg.machine.table.spec_sha256 != record.spec_sha256:
            return None
        return reg.machine.table

    def _wake(self, signal: SignalRecord) -> None:
        if not self.closed:
            self.dispatcher.call_soon(self.signals_arrived, [signal])

    def signals_arrived(self, signals: list[SignalRecord]) -> None:
        """Hand signals read from the inbox to their live executions (loop thread);
        those of a start committed here but not installed yet are kept for its
        install; others are not this runtime's."""
        by_execution: dict[str, list[SignalRecord]] = {}
        for signal in signals:
            by_execution.setdefault(signal.execution_id, []).append(signal)
        for execution_id, items in by_execution.items():
            live = self.engine.live.get(execution_id)
            if live is not None:
                self.engine.delivery.add_signals(live, items)
            elif execution_id in self.arriving:  # its start is not installed yet
                self.arriving[execution_id].extend(items)
            else:  # resting here: load it with them (else not this runtime's)
                self.engine.resting.load(execution_id, items)

    # ------------------------------------------------------------------ recovery

    def recover(
        self, accept: Accept | None = None, *, park_other_specs: bool = False
    ) -> RecoveryReport:
        """Claim and resume every active execution of the registered machines that no
        live worker owns and whose spec they run (``docs/semantics.md``, "Recovery"):
        executions in flight are replayed from their last barrier, waiting ones wait
        again with their timers re-armed, parked ones wait for an operator. Returns
        what was found.

        An execution pinned to a spec no registered machine runs — a newer one, or an
        older one without a declared migration — is left for a worker that runs it
        (``docs/scale-out.md``, "Rolling upgrades"): it is reported in
        ``other_spec`` and logged, never parked, unless ``park_other_specs``.

        Args:
            accept: when given, only executions whose stored record it accepts are
                claimed (an agent application runs the executions of the agents it
                has loaded); the others are left to other workers.
            park_other_specs: also claim the executions left for another spec and
                park each ``spec_changed`` (``recovery_required``; only ``failed``
                answers it) — for a store where no worker will ever run that spec
                again. Never while a worker of that spec may still come back.

        Raises: RuntimeClosedError, SchemaVersionError, StorageError (some executions
        may have been claimed and resumed already).
        """
        self._check_open()
        with self._watching_schema():
            self.retire_dead_workers()
            claimed: list[tuple[str, str]] = []
            while True:  # a claim takes at most CLAIM_BATCH: every one, batch by batch
                batch = self.claim(CLAIM_BATCH, accept=accept)
                claimed += batch
                if len(batch) < CLAIM_BATCH:
                    break
            left = [
                e
                for e in self.left_for_others()
                if accept is None or self.claims.accepts(accept, e.execution_id)
            ]
            if park_other_specs and left:
                with self._claiming:
                    for e in left:
                        token = self.store.claim_execution(e.execution_id, self.worker_id)
                        if token is not None:  # the engine parks it: spec_changed
                            claimed.append(self.claims.install_claimed(e.execution_id, token))
                left = []
            if left:
                log.warning(
                    "worker %s: %s; they wait for a worker that runs their spec",
                    self.worker_id,
                    describe_left(left, self.runnable_specs),
                )
            rows = self.store.execution_rows()
        owned: list[tuple[str, str]] = []
        unknown: list[tuple[str, str]] = []
        registered = set(self.machines)
        skip = set(dict(claimed)) | {e.execution_id for e in left}
        for row in rows:
            if not row["active"] or row["execution_id"] in skip:
                continue
            if row["machine"] not in registered:
                unknown.append((row["execution_id"], row["machine"]))
            elif row["owner_id"] not in (None, self.worker_id):
                owned.append((row["execution_id"], row["owner_id"]))
        return RecoveryReport(tuple(claimed), tuple(owned), tuple(unknown), tuple(left))

    def left_for_others(self, limit: int = 1000) -> tuple[OtherSpecExecution, ...]:
        """The active executions of the registered machines, owned by no live worker,
        that this runtime leaves because it runs none of their specs (up to ``limit``,
        oldest first): they wait for a worker that runs their spec
        (``docs/scale-out.md``, "Rolling upgrades"). A store read; nothing is claimed.

        Raises: RuntimeClosedError, StorageError."""
        self._check_open()
        specs = self.runnable_specs
        if not specs:
            return ()
        return tuple(
            OtherSpecExecution(eid, machine, version, sha)
            for eid, machine, version, sha in self.store.other_spec_executions(specs, limit=limit)
        )

    def claim(
        self,
        limit: int | None = None,
        *,
        accept: Accept | None = None,
        waiting_only: bool = False,
    ) -> list[tuple[str, str]]:
        """Claim up to ``limit`` (default: :data:`CLAIM_BATCH`) active execution of the registered
        machines that no live worker owns, whose spec they run (:attr:`runnable_specs`)
        and that ``accept``, when given, accepts; resume each as :meth:`recover`
        does; returns ``[(execution_id, status)]`` of those claimed, oldest first. A
        worker calls it periodically with its free capacity (``docs/scale-out.md``).
        Executions of other specs are left (:meth:`left_for_others` lists them).
        Claims alternate between new work first and the backlog first, and take
        executions that were running before those that wait; ``waiting_only`` claims
        only executions that wait (without ``accept``: they use none of a worker's
        capacity, so a worker takes them in large batches: ``docs/scale-out.md``,
        "Running workers").

        Raises: RuntimeClosedError, SchemaVersionError, StorageError (some may have
        been claimed and resumed already)."""
        self._check_open()
        wanted = CLAIM_BATCH if limit is None else int(limit)
        if wanted <= 0:
            return []
        with self._watching_schema(), self._claiming:
            return self.claims.claim(wanted, accept, waiting_only=waiting_only)

    def adopt(self, execution_ids: Iterable[str]) -> list[tuple[str, str]]:
        """Claim and resume the given executions, as :meth:`claim` does for every
        claimable one: each that is active, of a registered machine, not live here
        already, and owned by no live worker (a worker whose process is provably gone
        on this host has its lease ended first). Returns ``[(execution_id, status)]`` of
        those claimed. An application that runs only some executions of a machine
        (an agent runtime: the agents it has loaded) adopts those instead of calling
        :meth:`recover`.

        Raises: RuntimeClosedError, StorageError (some may have been claimed and
        resumed already)."""
        self._check_open()
        wanted = [check_id(e) for e in execution_ids]
        if not wanted:
            return []
        # a worker whose process is provably gone is no live worker: end its lease
        # first, as recover() does, so what it left is adopted now, not after its lease
        with self._watching_schema():
            self.retire_dead_workers()
            with self._claiming:
                return self.claims.adopt(wanted)

    def resume_stranded(self, min_age_seconds: float = 1.0) -> list[tuple[str, str]]:
        """Resume the executions the store says this runtime owns that run nowhere
        here: a claim whose answer never arrived (the COMMIT was made, the connection
        died before its reply, and the statement retried found nothing more to
        claim), or one whose record could not be read before it was installed. Left
        alone, such an execution would be stuck for as long as this worker renews
        its lease (``docs/scale-out.md``, "Stranded claims").

        An execution counts as stranded once it has been owned here and not live,
        under the same fencing token, for ``min_age_seconds`` (seconds, from the first
        call that saw it so), with no start on its way here: an install queued a
        moment ago is not mistaken for one. It is claimed again — its token moves on, so a late install
        of the old claim can commit nothing — and resumed as :meth:`recover` resumes
        (never a blind re-send). A worker calls this on every pass of its claim loop.
        Returns ``[(execution_id, status)]`` resumed.

        Raises: RuntimeClosedError, SchemaVersionError, StorageError (some may have
        been resumed)."""
        self._check_open()
        with self._watching_schema(), self._claiming:
            return self.claims.resume_stranded(min_age_seconds)

    def is_live(self, execution_id: str) -> bool:
        """True when this runtime runs ``execution_id`` now — live, or resting here
        until its signal or timer (``docs/runtime.md``, "How a waiting execution is
        held") — (any thread but the loop)."""
        engine = self.engine
        return bool(
            self.dispatcher.call(
                lambda: execution_id in engine.live or execution_id in engine.resting
            ).result(10)
        )

    def retire_dead_workers(self) -> list[str]:
        """End the lease of every worker whose process is provably gone on this host
        (no such pid, pid reused, an earlier boot), so its executions can be claimed
        at once instead of after its lease. Returns their ids. Raises
        SchemaVersionError, StorageError."""
        with self._watching_schema():
            return self.claims.retire_dead_workers()

    # ------------------------------------------------------------------ lifecycle

    def _check_open(self) -> None:
        if self.refused is not None:
            raise copy.copy(self.refused)
        if self.closed:
            raise RuntimeClosedError(f"the durable runtime {self.name} is closed")

    @contextmanager
    def _watching_schema(self) -> Iterator[None]:
        """Turn a SchemaVersionError of the block's store writes into this runtime's
        refusal (:meth:`note_write_error`), then re-raise it."""
        try:
            yield
        except SchemaVersionError as exc:
            self.note_write_error(exc)
            raise

    def add_refusal_listener(self, listener: Callable[[SchemaVersionError], None]) -> None:
        """Call ``listener(error)`` once, from whichever thread met it, when the store
        refuses a write because newer code migrated its schema (this runtime then
        writes nothing more: :meth:`note_write_error`). A :class:`Worker` stops."""
        with self._refused_lock:
            if self.refused is None:
                self._refusal_listeners.append(listener)
                return
            error = self.refused
        listener(error)

    def note_write_error(self, error: BaseException) -> None:
        """Take note of an error a store write of this runtime raised (any thread).
        A SchemaVersionError means newer code migrated the store: from then on the
        runtime writes nothing — no effect starts, every live execution is let go
        without a commit (its waiters fail with the error; workers of the newer code
        take it over once this worker's lease has passed), :meth:`claim`,
        :meth:`recover`, :meth:`start` and the rest raise the error, the lease is no
        longer renewed — and the refusal listeners are called, once. Logged as an
        error. Any other error is ignored here."""
        if not isinstance(error, SchemaVersionError):
            return
        with self._refused_lock:
            if self.refused is not None:
                return
            self.refused = error
            listeners, self._refusal_listeners = self._refusal_listeners, []
        self.lease_valid_until = 0.0  # no effect starts any more
        log.error(
            "worker %s stops writing: %s It claims nothing more and lets its executions "
            "go; workers of the newer code take them over once its lease has passed",
            self.worker_id,
            error,
        )
        try:
            self.dispatcher.call_soon(self.engine.recovery.let_go_all, error)
        except PhronomyError:
            pass  # the loop is stopping: nothing runs any more
        for listener in listeners:
            try:
                listener(error)
            except Exception:  # a listener must not keep the others from hearing it
                log.exception("worker %s: a refusal listener failed", self.worker_id)

    def lease_error(self, execution_id: str) -> BaseException | None:
        """Why a non-pure effect of ``execution_id`` may not start now, or ``None``.

        Any thread. ``None`` while this worker's lease surely holds — renewed, and the ownership
        of its live executions checked, less than a lease ago by this process's
        monotonic clock — else a :class:`LeaseLostError`: the worker may have been
        paused or cut off past its lease, another worker may own the execution, so
        the effect must not start (``docs/scale-out.md``, "Leases and fencing"). Once
        the store refused a write for a newer schema, the refusal (no effect starts)."""
        if self.refused is not None:
            return copy.copy(self.refused)
        if time.monotonic() < self.lease_valid_until:
            return None
        return LeaseLostError(
            f"execution {execution_id}: the effect did not start: worker {self.worker_id} "
            "has not renewed its lease (and checked what it owns) for longer than the lease "
            f"({self.lease_seconds:g} s): it may have been paused or cut off, and another "
            "worker may own the execution",
            execution_id=execution_id,
            owner_id=self.worker_id,
        )

    def hold(self) -> Callable[[], None]:
        """Count work on its way to start an execution here — a start being committed,
        or an application's queued start (an agent's handoff) — so that
        :meth:`wait_at_rest` and :meth:`close` wait for it. Returns the release
        function (idempotent; any thread)."""
        with self._holds_lock:
            self.holds += 1
        released = False

        def release() -> None:
            nonlocal released
            with self._holds_lock:
                if not released:
                    released = True
                    self.holds -= 1

        return release

    def wait_at_rest(self, timeout_seconds: float) -> bool:
        """Wait up to ``timeout_seconds`` until no execution runs a session or waits
        for a commit here (they all wait, are parked or finished) and no start is on
        its way (:meth:`hold`); True when so. Any thread but the loop."""
        deadline = time.monotonic() + timeout_seconds
        while True:
            try:
                if self.holds == 0 and self.dispatcher.call(self.engine.at_rest).result(
                    max(0.0, deadline - time.monotonic())
                ):
                    return True
            except PhronomyError:
                return False
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)

    def run_schedules(self, poll_seconds: float = 1.0) -> Any:
        """Start the due slots of the schedules of this runtime's machines, on a
        thread of its own, until the runtime closes: each slot's execution starts
        and runs here (``docs/operations.md``, "Schedules"). A ``phronomy-fsm
        worker`` does this in its claim loop without being asked. Returns the
        :class:`~phronomy_fsm.durable.schedules.ScheduleRunner` (its counts).

        Raises RuntimeClosedError."""
        from phronomy_fsm.durable.schedules import ScheduleRunner

        self._check_open()

        def start(machine: Machine, context: Any, eid: str, labels: dict[str, Any]) -> bool:
            return self.start(machine.name, context, execution_id=eid, labels=labels).created

        runner = ScheduleRunner(
            self.store,
            lambda: {name: self.registration(name).machine for name in self.machines},
            self.worker_id,
            claim_seconds=self.lease_seconds,
            clock=self.clock,
            starter=start,
        )
        self._schedule_runners.append(runner.start(poll_seconds))
        return runner

    def close(self, *, timeout_seconds: float = 10.0) -> None:
        """Let running executions reach a resting point (waiting, parked, finished)
        for up to ``timeout_seconds``, then stop. Executions that have not finished
        live on in the store; their waiters fail with RuntimeClosedError. The lease
        ends at once, so another runtime may claim them. Idempotent."""
        if self.closed:
            return
        self.closed = True
        deadline = time.monotonic() + timeout_seconds
        for runner in self._schedule_runners:  # first: it would start more
            runner.close(timeout_seconds)
        self.wait_at_rest(timeout_seconds)
        self.stopping.set()  # the watcher first: it asks the loop things
        self.watcher.wake.set()
        if self._unlisten is not None:
            self._unlisten()
        self.watcher.join(5)
        try:
            self.dispatcher.call(self._detach).result(5)
        except PhronomyError:
            pass
        self.dispatcher.stop(
            timeout_seconds=max(0.0, deadline - time.monotonic()), wait_for_sessions=False
        )
        self.pool.shutdown(wait=True, timeout_seconds=max(0.1, deadline - time.monotonic()))
        # Why here: the loop is stopped, so nothing submits more; the read-backs end
        # at _stop; and the store must outlive every call made to it (own_store).
        self.io.close(max(1.0, deadline - time.monotonic()))
        if self.refused is None:  # else a write is refused: the lease passes by itself
            try:
                self.store.retire_worker(self.worker_id)
            except PhronomyError as exc:
                log.warning("worker %s: could not end its lease: %r", self.worker_id, exc)
        if self._own_store:
            self.store.close()

    def _detach(self) -> None:
        self.engine.closing = True
        self.engine.recovery.detach_all()


def _seconds(value: float) -> timedelta:
    return timedelta(seconds=value)


if TYPE_CHECKING:  # the engine's view of its runtime, checked against it (mypy)
    from phronomy_fsm.durable.host import EngineHost

    _CHECKED_HOST: type[EngineHost] = DurableRuntime


__all__ = ["DEFAULT_LEASE_SECONDS", "DEFAULT_POLL_SECONDS", "DurableRuntime", "ExecutionHandle"]
