"""Starting an execution here: from the ``@start`` commit to its install on the loop.

Owns :class:`ExecutionHandle` (a handle on one execution) and :class:`StartHere`,
one start a :class:`~phronomy_fsm.durable.runtime.DurableRuntime` commits and runs
itself (``DurableRuntime.start_async``): it submits the ``@start`` commit through the
store's group commit, reads an unproven outcome back until the store answers
(``docs/semantics.md``, "Fail closed"), and once the start is durable installs the
execution on the loop with the signals the watcher read for it meanwhile
(``docs/semantics.md``, "Starting"). The runtime counts it as on its way
(``DurableRuntime.hold``) until it is installed or failed.

Concurrency: created on any thread; its callbacks run on the store's writer thread,
a store-I/O thread and the loop. Must not import the store or agent layers.
"""

from __future__ import annotations

import logging
from concurrent.futures import Future
from typing import TYPE_CHECKING

import orjson

from phronomy_fsm.durable.lifecycle import LiveExecution, Registration
from phronomy_fsm.durable.records import DurableCommit, DurableReceipt, ExecutionRecord
from phronomy_fsm.durable.storeio import READBACK_DELAYS
from phronomy_fsm.durable.submit import start_outcome
from phronomy_fsm.durable.types import DurableEventKind, ExecutionResult
from phronomy_fsm.errors import (
    ConflictError,
    OutcomeUnknownError,
    PhronomyError,
    RuntimeClosedError,
    StorageError,
)
from phronomy_fsm.runtime.tasks import Task

if TYPE_CHECKING:
    from phronomy_fsm.durable.runtime import DurableRuntime

log = logging.getLogger("phronomy_fsm.durable")


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
        return self._runtime.store.load_record(self.execution_id)

    def result(self, timeout_seconds: float | None = None) -> ExecutionResult:
        """Wait until the execution finishes; return how (whatever its status:
        completed, failed or cancelled — check ``result.status``).

        Raises:
            TaskTimeoutError: not finished within ``timeout_seconds`` (it goes on).
            RuntimeClosedError: the runtime closed first (the execution lives on).
            LeaseLostError: another worker took the execution over.
        """
        return self._runtime.wait(self.execution_id, timeout_seconds)


class StartHere:
    """One start committed and run by ``runtime`` (see the module docstring).

    Args:
        runtime: the runtime that starts it.
        reg: the machine's registration.
        commit: the ``@start`` commit (revision 0, this worker's fence, token 1).
        encoded: the start context as canonical JSON bytes (decoded once for the
            live copy).
        task: settled with the :class:`ExecutionHandle` once the start is durable
            (``created`` False when the id existed), or failed with why not
            (ExecutionExistsError, AgentBusyError, StorageError, RuntimeClosedError).
    """

    __slots__ = ("commit", "encoded", "execution_id", "reg", "release", "runtime", "task")

    def __init__(
        self,
        runtime: DurableRuntime,
        reg: Registration,
        commit: DurableCommit,
        encoded: bytes,
        task: Task[ExecutionHandle],
    ) -> None:
        self.runtime = runtime
        self.reg = reg
        self.commit = commit
        self.encoded = encoded
        self.task = task
        self.execution_id = commit.execution.execution_id
        self.release = runtime.hold()  # until the execution is installed on the loop

    def submit(self) -> None:
        """Submit the ``@start`` commit (raises what the store's submit raises; the
        hold is released then)."""
        self.runtime.arriving.setdefault(self.execution_id, [])
        try:
            self.runtime.store.submit(self.commit).add_done_callback(self.committed)
        except BaseException:
            self.release()
            raise

    def committed(self, future: Future[DurableReceipt]) -> None:
        """The store's answer to the commit (its writer thread)."""
        error = future.exception()
        if error is None:
            self.started(True)
        elif isinstance(error, OutcomeUnknownError | ConflictError):
            if not self.runtime.io.submit(self.read_back, error):
                self.failed(self.closed_error())
        else:
            self.failed(error)

    def closed_error(self) -> RuntimeClosedError:
        """The runtime closed before the start's outcome was known."""
        return RuntimeClosedError(
            f"the runtime closed before the start of {self.execution_id} was read back; "
            "it may have committed: recover() continues it",
            execution_id=self.execution_id,
        )

    def started(self, created: bool) -> None:
        """The start is durable (``created``) or the id existed: settle the task, and
        queue the install of a created execution on the loop."""
        runtime, eid = self.runtime, self.execution_id
        if not created:
            runtime.arriving.pop(eid, None)
            self.release()
            self.task.complete(ExecutionHandle(runtime, eid, created=False))
            return
        if runtime.faults is not None:
            runtime.faults.hit("barrier:@start:after")
        record, fence = self.commit.execution, self.commit.fence
        assert fence is not None  # a start committed here carries this worker's fence
        live = LiveExecution(self.reg, record, fence)
        live.ctx = self.reg.codec.decode(orjson.loads(self.encoded))

        def install() -> None:
            engine = runtime.engine
            try:
                engine.live[eid] = live
                engine.emit(DurableEventKind.STARTED, live, record)
                engine.delivery.arm_expiry(live)
                engine.start_session(live)
                early = runtime.arriving.pop(eid, None)
                if early:
                    engine.delivery.add_signals(live, early)
            finally:
                self.release()

        try:
            runtime.dispatcher.call_soon(install)
        except PhronomyError as exc:
            runtime.arriving.pop(eid, None)
            self.release()
            self.task.fail(exc)
            return
        self.task.complete(ExecutionHandle(runtime, eid))

    def failed(self, error: BaseException) -> None:
        """The start did not commit (or its outcome cannot be known): fail the task."""
        self.runtime.arriving.pop(self.execution_id, None)
        self.release()
        self.runtime.note_write_error(error)
        self.task.fail(error)

    def read_back(self, error: BaseException) -> None:
        """The start's outcome was not proven: read it back with backoff until the
        store answers (``docs/semantics.md``, "Fail closed": an engine commit whose
        outcome is not ``committed`` is read back until the store answers). A read
        that fails proves nothing — failing the task then would leave an execution
        committed under this worker's name that nobody runs, its exclusive key
        busy until a restart. A store-I/O thread."""
        for delay in READBACK_DELAYS + (READBACK_DELAYS[-1],) * 1000:
            if self.runtime.stopping.wait(delay):
                self.failed(self.closed_error())
                return
            try:
                created = start_outcome(self.runtime.store, self.commit, error)
            except StorageError as exc:  # the read failed: nothing is proven
                log.warning(
                    "execution %s: start read-back failed (%r); retrying", self.execution_id, exc
                )
                continue
            except BaseException as exc:  # noqa: BLE001 - the caller's task says why
                self.failed(exc)
                return
            self.started(created)
            return
        self.failed(error)


__all__ = ["ExecutionHandle", "StartHere"]
