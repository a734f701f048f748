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
Two threads run beside the loop: the watcher (lease heartbeat and inbox polling) and
short-lived read-back threads after an unproven outcome.
"""

from __future__ import annotations

import copy
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from datetime import timedelta
from typing import Any, Self

import orjson

from phronomy_fsm.durable.claims import OtherSpecExecution, RunnableSpecs, describe_left
from phronomy_fsm.durable.codec import json_data
from phronomy_fsm.durable.engine import Engine
from phronomy_fsm.durable.keys import check_id, new_execution_id
from phronomy_fsm.durable.lifecycle import LiveExecution, Registration
from phronomy_fsm.durable.machines import table_to_json
from phronomy_fsm.durable.operations import request_cancel, request_resolution, send_signal
from phronomy_fsm.durable.records import (
    DurableCommit,
    ExecutionRecord,
    Fence,
    MachineRecord,
    SignalRecord,
    WorkerRecord,
)
from phronomy_fsm.durable.submit import start_outcome, start_record, submit_execution
from phronomy_fsm.durable.types import (
    DurableEvent,
    DurableEventKind,
    ExecutionResult,
    Machine,
    RecoveryReport,
)
from phronomy_fsm.errors import (
    ConflictError,
    DurableError,
    LeaseLostError,
    NotFoundError,
    OutcomeUnknownError,
    PhronomyError,
    RuntimeClosedError,
    SchemaVersionError,
    StorageError,
    TaskTimeoutError,
    UnknownMachineError,
)
from phronomy_fsm.runtime import Dispatcher, OffloadPool, bind_machine
from phronomy_fsm.runtime.clock import SYSTEM_CLOCK, Clock
from phronomy_fsm.runtime.faults import FaultPlan
from phronomy_fsm.runtime.processes import DEAD, ProcessIdentity, current_process, probe_owner
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
#: Seconds between attempts to read an execution back after an unproven outcome.
READBACK_DELAYS = (0.0, 0.05, 0.2, 0.5, 1.0, 2.0, 5.0)


class ExecutionHandle:
    """A handle on one execution, live in this runtime or not.

    Attributes: ``execution_id``; ``created`` (False when :meth:`DurableRuntime.start`
    found the execution existing and returned it instead).
    """

    __slots__ = ("_runtime", "created", "execution_id")

    def __init__(self, runtime: DurableRuntime, execution_id: str, *, created: bool = True) -> None:
        self._runtime = runtime
        self.execution_id = execution_id
        self.created = created

    def __repr__(self) -> str:
        return f"<ExecutionHandle {self.execution_id}>"

    def record(self) -> ExecutionRecord:
        """The execution as stored now (a store read). Raises NotFoundError."""
        return self._runtime.store.load_record(self.execution_id)  # type: ignore[no-any-return]

    def result(self, timeout_seconds: float | None = None) -> ExecutionResult:
        """Wait until the execution finishes; return how (whatever its status:
        completed, failed or cancelled — check ``result.status``).

        Raises:
            TaskTimeoutError: not finished within ``timeout_seconds`` (it goes on).
            RuntimeClosedError: the runtime closed first (the execution lives on).
            LeaseLostError: another worker took the execution over.
        """
        return self._runtime.wait(self.execution_id, timeout_seconds)


class DurableRuntime:
    """Runs durable executions of registered machines (see the module docstring).

    Args:
        store: the store (for example
            :class:`~phronomy_fsm.store.sqlite.SqliteBarrierStore`); the runtime does
            not close it unless ``own_store``.
        machines: machines to register at once.
        max_workers / queue_size: the offload pool's bounds (effects, filters).
        clock: the clock of timers, records and leases (a manual clock in tests).
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
        store: Any,
        *,
        machines: Iterable[Machine] = (),
        max_workers: int = 16,
        queue_size: int = 1024,
        clock: Clock = SYSTEM_CLOCK,
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
        self.clock = clock
        self.faults = faults
        self.listeners: list[Listener] = list(listeners)
        self.lease_seconds = float(lease_seconds)
        self.poll_seconds = float(poll_seconds)
        self.name = name
        self._own_store = own_store
        self._registrations: dict[str, Registration] = {}
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
        self._closed = False
        #: the SchemaVersionError that stopped every write of this runtime, once one did
        self.refused: SchemaVersionError | None = None
        self._refusal_listeners: list[Callable[[SchemaVersionError], None]] = []
        self._refused_lock = threading.Lock()
        self._holds = 0  # starts on their way here (see hold())
        self._holds_lock = threading.Lock()
        #: executions whose start is committing here, not yet installed: id -> the
        #: signals the watcher read for them meanwhile. A signal may be sent as soon as
        #: the start is durable; the watcher's cursor moves past it before the install,
        #: so the install applies what was kept here (loop thread, but for the key's
        #: insertion and a failed start's removal, which the GIL keeps whole).
        self._arriving: dict[str, list[SignalRecord]] = {}
        self._stop = threading.Event()
        self._wake_watcher = threading.Event()
        self._unlisten: Callable[[], None] | None = None
        #: where the watcher's next poll of the inbox starts (ExecutionStore.signals_since)
        self._signal_cursor = ""
        #: executions owned here in the store but not live: id -> (fence, first seen)
        self._stranded: dict[str, tuple[int, float]] = {}
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
        self._lease_valid_until = registered + self.lease_seconds
        self._signal_cursor = store.signal_cursor()
        add_listener = getattr(store, "add_listener", None)
        if callable(add_listener):  # NotifyingStore: wake the watcher at once
            self._unlisten = add_listener(lambda _channel, _payload: self._wake_watcher.set())
        self.dispatcher.start()
        self._watcher = threading.Thread(target=self._watch, name=f"{name}-watch", daemon=True)
        self._watcher.start()

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
        if machine.name in self._registrations:
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
        self._registrations[machine.name] = registration

    def registration(self, name: str) -> Registration:
        """The registration of machine ``name``. Raises UnknownMachineError."""
        try:
            return self._registrations[name]
        except KeyError:
            raise UnknownMachineError(
                f"machine {name!r} is not registered with this runtime (registered: "
                f"{', '.join(sorted(self._registrations)) or 'none'})",
                machine=name,
            ) from None

    @property
    def machines(self) -> tuple[str, ...]:
        """The names of the registered machines, sorted."""
        return tuple(sorted(self._registrations))

    @property
    def runnable_specs(self) -> tuple[RunnableSpecs, ...]:
        """The specs the registered machines run, by machine name: each its own and
        those its declared migrations cover — what this runtime claims
        (``docs/scale-out.md``, "Rolling upgrades")."""
        return tuple(
            RunnableSpecs.of(self._registrations[name].machine.table) for name in self.machines
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
        commit = DurableCommit("@start", record, None, fence)
        if self.faults is not None:
            self.faults.hit("barrier:@start:before")
        task: Task[ExecutionHandle] = Task(f"start {eid}")
        release = self.hold()  # until the execution is installed on the loop
        self._arriving.setdefault(eid, [])

        def started(created: bool) -> None:
            if not created:
                self._arriving.pop(eid, None)
                release()
                task.complete(ExecutionHandle(self, eid, created=False))
                return
            if self.faults is not None:
                self.faults.hit("barrier:@start:after")
            live = LiveExecution(reg, record, fence)
            live.ctx = reg.codec.decode(orjson.loads(encoded))

            def install() -> None:
                try:
                    self.engine.live[eid] = live
                    self.engine.emit(DurableEventKind.STARTED, live, record)
                    self.engine.delivery.arm_expiry(live)
                    self.engine.start_session(live)
                    early = self._arriving.pop(eid, None)
                    if early:
                        self.engine.delivery.add_signals(live, early)
                finally:
                    release()

            try:
                self.dispatcher.call_soon(install)
            except PhronomyError as exc:
                self._arriving.pop(eid, None)
                release()
                task.fail(exc)
                return
            task.complete(ExecutionHandle(self, eid))

        def failed(error: BaseException) -> None:
            self._arriving.pop(eid, None)
            release()
            self.note_write_error(error)
            task.fail(error)

        def read_back(error: BaseException) -> None:  # off the store's writer thread
            """The start's outcome was not proven: read it back with backoff until the
            store answers (``docs/semantics.md``, "Fail closed": an engine commit whose
            outcome is not ``committed`` is read back until the store answers). A read
            that fails proves nothing — failing the task then would leave an execution
            committed under this worker's name that nobody runs, its exclusive key
            busy until a restart."""
            for delay in READBACK_DELAYS + (READBACK_DELAYS[-1],) * 1000:
                if self._stop.wait(delay):
                    failed(
                        RuntimeClosedError(
                            f"the runtime closed before the start of {eid} was read back; "
                            "it may have committed: recover() continues it",
                            execution_id=eid,
                        )
                    )
                    return
                try:
                    created = start_outcome(self.store, commit, error)
                except StorageError as exc:  # the read failed: nothing is proven
                    log.warning("execution %s: start read-back failed (%r); retrying", eid, exc)
                    continue
                except BaseException as exc:  # noqa: BLE001 - the caller's task says why
                    failed(exc)
                    return
                started(created)
                return
            failed(error)

        def committed(future: Any) -> None:
            error = future.exception()
            if error is None:
                started(True)
            elif isinstance(error, OutcomeUnknownError | ConflictError):
                threading.Thread(target=read_back, args=(error,), daemon=True).start()
            else:
                failed(error)

        try:
            self.store.submit(commit).add_done_callback(committed)
        except BaseException:
            release()
            raise
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
            return inner.result(timeout_seconds)  # type: ignore[no-any-return]
        return self._poll_finished(execution_id, timeout_seconds)

    def _waiter(self, execution_id: str) -> Task[ExecutionResult] | None:
        live = self.engine.live.get(execution_id)
        if live is None:
            return None
        task: Task[ExecutionResult] = Task(f"execution {execution_id}")
        live.waiters.append(task)
        return task

    def _poll_finished(self, execution_id: str, timeout_seconds: float | None) -> ExecutionResult:
        deadline = None if timeout_seconds is None else time.monotonic() + timeout_seconds
        delay = 0.01
        while True:
            record = self.store.load_record(execution_id)
            if record.is_finished:
                reg = self._registrations.get(record.machine)
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
                children = self.store.list_records(
                    parent_execution_id=parent_execution_id, active=True
                )
            except PhronomyError as exc:
                log.warning(
                    "execution %s: could not list its children: %r", parent_execution_id, exc
                )
                done.set_result(False)
                return
            try:
                self._cancel_each(children, payload, skip)
            finally:
                done.set_result(True)

        threading.Thread(target=write, name=f"{self.name}-cancel", daemon=True).start()
        return done

    def _cancel_each(
        self, children: list[ExecutionRecord], payload: dict[str, Any], skip: set[str]
    ) -> None:
        """Write a cancel request to each active child not in ``skip``."""
        for child in children:
            if child.is_finished or child.execution_id in skip:
                continue
            try:
                request_cancel(
                    self.store,
                    child.execution_id,
                    reason=str(payload.get("reason") or "its parent was cancelled"),
                    as_failure=payload.get("status") == "failed",
                    error_type=payload.get("error_type"),
                    signal_id=f"cancel-of-parent:{child.execution_id}",
                    sender=f"worker:{self.worker_id}",
                )
            except PhronomyError as exc:  # finished meanwhile, or unreadable
                log.info("child %s not cancelled: %s", child.execution_id, exc)

    def notify(self, execution_id: str, signal: SignalRecord | None = None) -> None:
        """Something was written to ``execution_id``'s inbox by other means (an
        operator function on the store): when this runtime owns it, take ``signal``
        (the record the store returned, with its ``seq``) or, without one, read its
        inbox now rather than at the next poll. Any thread."""
        if self._closed:
            return
        if signal is not None and signal.seq > 0:
            self._wake(signal)
            return

        def check() -> None:
            live = self.engine.live.get(execution_id)
            if live is not None:
                self.refresh_signals(live)

        self.dispatcher.call_soon(check)

    def _table_of(self, execution_id: str) -> Any:
        try:
            record = self.store.load_record(execution_id)
        except PhronomyError:
            return None
        reg = self._registrations.get(record.machine)
        if reg is None or reg.machine.table.spec_sha256 != record.spec_sha256:
            return None
        return reg.machine.table

    def _wake(self, signal: SignalRecord) -> None:
        if not self._closed:
            self.dispatcher.call_soon(self._signals_arrived, [signal])

    def _signals_arrived(self, signals: list[SignalRecord]) -> None:
        by_execution: dict[str, list[SignalRecord]] = {}
        for signal in signals:
            by_execution.setdefault(signal.execution_id, []).append(signal)
        for execution_id, items in by_execution.items():
            live = self.engine.live.get(execution_id)
            if live is not None:
                self.engine.delivery.add_signals(live, items)
            elif execution_id in self._arriving:  # its start is not installed yet
                self._arriving[execution_id].extend(items)

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
                signals = self.store.pending_signals(execution_id)
            except PhronomyError as exc:
                log.warning("execution %s: could not read its inbox: %r", execution_id, exc)
                if on_read is not None and not self._closed:
                    self.engine.post(on_read, None)
                return
            if self._closed:
                return
            if on_read is not None:  # posted: the runtime may close meanwhile
                self.engine.post(on_read, signals)
            elif signals:
                self.engine.post(self._signals_arrived, signals)

        threading.Thread(target=read, name=f"{self.name}-inbox", daemon=True).start()

    def drop_signals(self, live: LiveExecution, seqs: list[int], outcome: str) -> None:
        """Mark signals of ``live`` consumed without applying them (``outcome`` says
        why), off the loop, under its fence. The store refuses the write
        (LeaseLostError) once another worker owns the execution or this worker's
        lease has passed; the live copy is then let go as after a refused commit
        (:meth:`Engine.close_refused`; ``docs/semantics.md``, "Leases and fencing")."""
        execution_id, fence = live.execution_id, live.fence

        def write() -> None:
            try:
                self.store.close_signals(execution_id, seqs, outcome, fence=fence)
            except LeaseLostError as exc:
                log.warning("execution %s: signals %s not closed: %s", execution_id, seqs, exc)
                try:
                    self.dispatcher.call_soon(self.engine.recovery.close_refused, live, exc)
                except PhronomyError:  # the runtime closed meanwhile: nothing runs it here
                    pass
            except PhronomyError as exc:
                self.note_write_error(exc)
                log.warning("execution %s: could not close signals %s: %r", execution_id, seqs, exc)

        threading.Thread(target=write, name=f"{self.name}-inbox", daemon=True).start()

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
            claimed = self.claim(accept=accept)
            left = [
                e
                for e in self.left_for_others()
                if accept is None or self._accepts(accept, e.execution_id)
            ]
            if park_other_specs and left:
                with self._claiming:
                    for e in left:
                        token = self.store.claim_execution(e.execution_id, self.worker_id)
                        if token is not None:  # the engine parks it: spec_changed
                            claimed.append(self._install_claimed(e.execution_id, token))
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

    def _accepts(self, accept: Accept, execution_id: str) -> bool:
        try:
            return bool(accept(self.store.load_record(execution_id)))
        except NotFoundError:
            return False

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
        self, limit: int | None = None, *, accept: Accept | None = None
    ) -> list[tuple[str, str]]:
        """Claim up to ``limit`` (default: every) active execution of the registered
        machines that no live worker owns, whose spec they run (:attr:`runnable_specs`)
        and that ``accept``, when given, accepts; resume each as :meth:`recover`
        does; returns ``[(execution_id, status)]`` of those claimed, oldest first. A
        worker calls it periodically with its free capacity (``docs/scale-out.md``).
        Executions of other specs are left (:meth:`left_for_others` lists them).

        Raises: RuntimeClosedError, SchemaVersionError, StorageError (some may have
        been claimed and resumed already)."""
        self._check_open()
        wanted = 1000 if limit is None else int(limit)
        if wanted <= 0:
            return []
        with self._watching_schema(), self._claiming:
            return self._claim(wanted, accept)

    def _claim(self, wanted: int, accept: Accept | None) -> list[tuple[str, str]]:
        specs = self.runnable_specs
        if accept is not None:  # read, filter, then claim one by one
            chosen = []
            for execution_id, _machine in self.store.claimable_executions(
                specs, limit=max(wanted * 4, 1000)
            ):
                try:
                    record = self.store.load_record(execution_id)
                except NotFoundError:
                    continue
                if accept(record):
                    chosen.append(execution_id)
                if len(chosen) >= wanted:
                    break
            return self.adopt(chosen)
        tokens = [
            (eid, token)
            for eid, _m, token in self.store.claim_executions(specs, self.worker_id, limit=wanted)
        ]
        return [self._install_claimed(execution_id, token) for execution_id, token in tokens]

    def _install_claimed(self, execution_id: str, token: int) -> tuple[str, str]:
        """Read an execution just claimed under ``token`` and queue its install;
        ``(execution_id, status found)``. Raises StorageError."""
        record = self.store.load_record(execution_id)
        signals = self.store.pending_signals(execution_id)
        self._install(record, Fence(self.worker_id, token), signals)
        return execution_id, record.status.value

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
                return self._adopt(wanted)

    def _adopt(self, wanted: list[str]) -> list[tuple[str, str]]:
        live = set(self.dispatcher.call(lambda: list(self.engine.live)).result(10))
        claimed: list[tuple[str, str]] = []
        for execution_id in wanted:
            if execution_id in live:
                continue
            try:
                record = self.store.load_record(execution_id)
            except NotFoundError:
                continue
            reg = self._registrations.get(record.machine)
            if not record.is_active or reg is None:
                continue
            specs = RunnableSpecs.of(reg.machine.table)
            if not specs.runs(record.spec_version, record.spec_sha256):
                log.info(
                    "worker %s: %s",
                    self.worker_id,
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
            token = self.store.claim_execution(execution_id, self.worker_id, runs=specs)
            if token is not None:
                claimed.append(self._install_claimed(execution_id, token))
        return claimed

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
            return self._resume_stranded(min_age_seconds)

    def _resume_stranded(self, min_age_seconds: float) -> list[tuple[str, str]]:
        owned = self.store.owned_executions(self.worker_id, self.machines)
        if not owned:
            self._stranded = {}
            return []
        try:
            live = set(self.dispatcher.call(lambda: list(self.engine.live)).result(10))
        except (PhronomyError, TimeoutError):  # closing, or the loop busy for seconds
            return []
        now = time.monotonic()
        before = self._stranded
        self._stranded = {}
        for eid, token in owned.items():
            if eid not in live:
                earlier = before.get(eid)
                self._stranded[eid] = (
                    token,
                    earlier[1] if earlier and earlier[0] == token else now,
                )
        if self._holds:  # a start on its way here is owned but not live yet
            return []
        due = [eid for eid, (_t, seen) in self._stranded.items() if now - seen >= min_age_seconds]
        resumed: list[tuple[str, str]] = []
        for execution_id in due:
            del self._stranded[execution_id]
            token = self.store.claim_execution(execution_id, self.worker_id)
            if token is not None:
                resumed.append(self._install_claimed(execution_id, token))
        if resumed:
            log.warning(
                "worker %s: resumed %d execution(s) it owned but did not run (a claim "
                "whose answer was lost): %s",
                self.worker_id,
                len(resumed),
                ", ".join(eid for eid, _ in resumed),
            )
        return resumed

    def is_live(self, execution_id: str) -> bool:
        """True when this runtime runs ``execution_id`` now (any thread but the loop)."""
        return bool(self.dispatcher.call(lambda: execution_id in self.engine.live).result(10))

    def retire_dead_workers(self) -> list[str]:
        """End the lease of every worker whose process is provably gone on this host
        (no such pid, pid reused, an earlier boot), so its executions can be claimed
        at once instead of after its lease. Returns their ids. Raises
        SchemaVersionError, StorageError."""
        with self._watching_schema():
            return self._retire_dead_workers()

    def _retire_dead_workers(self) -> list[str]:
        me = current_process()
        retired = []
        for worker, _heartbeat, expires in self.store.list_workers():
            if worker.worker_id == self.worker_id or expires <= 0:
                continue
            identity = ProcessIdentity(
                worker.host, worker.pid, worker.start_time, worker.boot_id, worker.pid_namespace
            )
            verdict, reason = probe_owner(identity, me)
            if verdict == DEAD:
                log.warning("worker %s is gone (%s); ending its lease", worker.worker_id, reason)
                self.store.retire_worker(worker.worker_id)
                retired.append(worker.worker_id)
        return retired

    def _install(self, record: ExecutionRecord, fence: Fence, signals: list[SignalRecord]) -> None:
        reg = self.registration(record.machine)
        live = LiveExecution(reg, record, fence)

        def install() -> None:
            old = self.engine.live.get(record.execution_id)
            if old is not None:
                live.waiters.extend(old.waiters)
                old.waiters.clear()
            self.engine.recovery.install(live, record, signals)
            self.refresh_signals(live)

        self.dispatcher.call_soon(install)

    def readback(self, live: LiveExecution, why: str) -> None:
        """Read an execution back after an unproven outcome, with backoff (off the
        loop), then reinstall what the store holds (loop thread) — and resume its active
        children that run nowhere: the unproven commit may have started them (a barrier
        with children) without this runtime knowing."""
        execution_id = live.execution_id
        log.info("execution %s: reading it back from the store (%s)", execution_id, why)

        def read() -> None:
            for delay in READBACK_DELAYS + (READBACK_DELAYS[-1],) * 1000:
                if self._stop.wait(delay):
                    return
                try:
                    record = self.store.load_record(execution_id)
                    owner, token, _ = self.store.execution_owner(execution_id)
                    signals = self.store.pending_signals(execution_id)
                    children = [
                        child.execution_id
                        for child in self.store.list_records(
                            parent_execution_id=execution_id, active=True
                        )
                    ]
                except NotFoundError as exc:
                    self.engine.post(self.engine.recovery.release, live, exc)
                    return
                except PhronomyError as exc:
                    log.warning("execution %s: read-back failed (%r); retrying", execution_id, exc)
                    continue
                # posted: the runtime may have closed during the read
                self.engine.post(
                    self.engine.recovery.reinstall, live, record, (owner, token), signals
                )
                if children:
                    try:
                        self.adopt(children)  # those live here already are left alone
                    except PhronomyError as exc:
                        log.warning(
                            "execution %s: could not resume its children %s: %r",
                            execution_id,
                            children,
                            exc,
                        )
                return

        threading.Thread(target=read, name=f"{self.name}-readback", daemon=True).start()

    # ------------------------------------------------------------------ watcher

    def _watch(self) -> None:
        """Renew the lease every third of it; poll the inbox for signals sent by
        other processes every ``poll_seconds``, or at once when the store notifies."""
        renew_every = self.lease_seconds / 3
        next_renewal = time.monotonic() + renew_every
        while True:
            # a store notification ends the wait early; a renewal never waits for a poll
            pause = min(self.poll_seconds, max(0.0, next_renewal - time.monotonic()))
            self._wake_watcher.wait(pause)
            self._wake_watcher.clear()
            if self._stop.is_set():
                return
            if time.monotonic() >= next_renewal:
                next_renewal = time.monotonic() + renew_every
                asked_at = time.monotonic()
                try:
                    if not self.store.renew_lease(self.worker_id, self.lease_seconds):
                        self.store.register_worker(self.worker, self.lease_seconds)
                    self._verify_ownership()
                except SchemaVersionError as exc:
                    self.note_write_error(exc)
                    return  # nothing more to renew or deliver: the runtime stopped
                except PhronomyError as exc:
                    log.warning("worker %s: lease renewal failed: %r", self.worker_id, exc)
                else:
                    # executions claimed by others meanwhile were let go on the loop
                    # (their queued effects cancelled): effects may start again
                    if self.refused is None:
                        self._lease_valid_until = asked_at + self.lease_seconds
            try:
                poll = self.store.signals_since(self._signal_cursor)
            except PhronomyError as exc:
                log.debug("inbox poll failed: %r", exc)
                continue
            self._signal_cursor = poll.cursor
            if poll.signals:
                try:
                    self.dispatcher.call_soon(self._signals_arrived, list(poll.signals))
                except PhronomyError:
                    return

    def _verify_ownership(self) -> None:
        """Let go of live executions another worker has claimed since (watcher
        thread; the decision is taken on the loop)."""
        if self._stop.is_set():
            return
        asked = self.dispatcher.call(self.engine.recovery.fences).result(5)
        if not asked:
            return
        stored = self.store.execution_fences(list(asked))
        self.dispatcher.call(self.engine.recovery.check_ownership, stored, asked).result(5)

    # ------------------------------------------------------------------ lifecycle

    def _check_open(self) -> None:
        if self.refused is not None:
            raise copy.copy(self.refused)
        if self._closed:
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
        self._lease_valid_until = 0.0  # no effect starts any more
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
        """Whether a non-pure effect of ``execution_id`` may start now (any thread):
        ``None`` while this worker's lease surely holds — renewed, and the ownership
        of its live executions checked, less than a lease ago by this process's
        monotonic clock — else a :class:`LeaseLostError`: the worker may have been
        paused or cut off past its lease, another worker may own the execution, so
        the effect must not start (``docs/scale-out.md``, "Leases and fencing"). Once
        the store refused a write for a newer schema, the refusal (no effect starts)."""
        if self.refused is not None:
            return copy.copy(self.refused)
        if time.monotonic() < self._lease_valid_until:
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
            self._holds += 1
        released = False

        def release() -> None:
            nonlocal released
            with self._holds_lock:
                if not released:
                    released = True
                    self._holds -= 1

        return release

    def wait_at_rest(self, timeout_seconds: float) -> bool:
        """Wait up to ``timeout_seconds`` until no execution runs a session or waits
        for a commit here (they all wait, are parked or finished) and no start is on
        its way (:meth:`hold`); True when so. Any thread but the loop."""
        deadline = time.monotonic() + timeout_seconds
        while True:
            try:
                if self._holds == 0 and self.dispatcher.call(self.engine.at_rest).result(
                    max(0.0, deadline - time.monotonic())
                ):
                    return True
            except PhronomyError:
                return False
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)

    def close(self, *, timeout_seconds: float = 10.0) -> None:
        """Let running executions reach a resting point (waiting, parked, finished)
        for up to ``timeout_seconds``, then stop. Executions that have not finished
        live on in the store; their waiters fail with RuntimeClosedError. The lease
        ends at once, so another runtime may claim them. Idempotent."""
        if self._closed:
            return
        self._closed = True
        deadline = time.monotonic() + timeout_seconds
        self.wait_at_rest(timeout_seconds)
        self._stop.set()  # the watcher first: it asks the loop things
        self._wake_watcher.set()
        if self._unlisten is not None:
            self._unlisten()
        self._watcher.join(5)
        try:
            self.dispatcher.call(self._detach).result(5)
        except PhronomyError:
            pass
        self.dispatcher.stop(
            timeout_seconds=max(0.0, deadline - time.monotonic()), wait_for_sessions=False
        )
        self.pool.shutdown(wait=True, timeout_seconds=max(0.1, deadline - time.monotonic()))
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


__all__ = ["DEFAULT_LEASE_SECONDS", "DEFAULT_POLL_SECONDS", "DurableRuntime", "ExecutionHandle"]
