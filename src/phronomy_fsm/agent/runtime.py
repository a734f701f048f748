"""The agent runtime: the durable runtime that runs the agents of one store.

An :class:`AgentRuntime` owns one :class:`~phronomy_fsm.durable.runtime.DurableRuntime`
(one loop thread, one offload pool, one worker lease) with the agent's two machines
registered (:func:`agent_machines`), and the :class:`~phronomy_fsm.agent.directory.AgentDirectory`
of the agents loaded into it. Every agent execution is an ``agent_session`` execution
of the engine, every tool call a ``tool_call`` child execution; the runtime adds
nothing to how they are committed or recovered (``docs/semantics.md``) — it supplies
the agents' configuration to the hooks, turns engine events into agent events, and
does the store work the directory asks for off the loop thread (starting a handoff's
target, failing an execution whose listener raised).

:meth:`AgentRuntime.for_store` returns the process-wide runtime of a store (created on
first use, closed at exit); pass ``runtime=`` to :class:`~phronomy_fsm.agent.agent.Agent`
to use your own (a manual clock, a fault plan, other pool bounds).
"""

from __future__ import annotations

import atexit
import collections
import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Self

from phronomy_fsm.agent.context import SessionContext, ToolCallContext
from phronomy_fsm.agent.directory import AgentDirectory, Caller
from phronomy_fsm.agent.journal import session_records
from phronomy_fsm.agent.session_hooks import AgentSessionHooks
from phronomy_fsm.agent.tool_hooks import ToolCallHooks
from phronomy_fsm.durable.codec import json_data
from phronomy_fsm.durable.keys import new_execution_id
from phronomy_fsm.durable.records import ExecutionStatus
from phronomy_fsm.durable.runtime import DEFAULT_LEASE_SECONDS, DEFAULT_POLL_SECONDS, DurableRuntime
from phronomy_fsm.durable.types import Machine
from phronomy_fsm.errors import (
    AgentBusyError,
    ExecutionExistsError,
    PhronomyError,
    RuntimeClosedError,
)
from phronomy_fsm.generated import agent_session, tool_call
from phronomy_fsm.runtime.clock import SYSTEM_CLOCK, Clock
from phronomy_fsm.runtime.faults import FaultPlan
from phronomy_fsm.runtime.tasks import Task

if TYPE_CHECKING:
    from phronomy_fsm.runtime.dispatcher import Dispatcher

log = logging.getLogger("phronomy_fsm.agent")


def agent_machines(directory: AgentDirectory) -> tuple[Machine, Machine]:
    """The agent's two machines for a durable runtime, with hooks reading the agents
    of ``directory``: ``agent_session`` (``blocked`` and ``failed`` finish
    ``failed``; its ``@final``/``@cancel`` commits journal the transcript) and
    ``tool_call`` (``failed`` finishes ``failed``)."""
    session = AgentSessionHooks(directory)
    tools = ToolCallHooks(directory)
    return (
        Machine(
            agent_session.TABLE,
            session,
            context_type=SessionContext,
            final_status={
                agent_session.State.BLOCKED.value: ExecutionStatus.FAILED,
                agent_session.State.FAILED.value: ExecutionStatus.FAILED,
            },
            effect_policy=session.effect_policy,
            records=session_records,
        ),
        Machine(
            tool_call.TABLE,
            tools,
            context_type=ToolCallContext,
            final_status={tool_call.State.FAILED.value: ExecutionStatus.FAILED},
            effect_policy=tools.effect_policy,
        ),
    )


def start_execution(
    runtime: Any,
    agent_id: str,
    input: str,
    *,
    execution_id: str | None = None,
    mode: str = "invoke",
    timeout_seconds: float | None = None,
) -> tuple[str, bool]:
    """Start an execution of ``agent_id`` on a durable ``runtime`` running the agent's
    machines (an :func:`agent_app`, or an agent runtime's); at most one is active per
    agent. Returns ``(execution_id, created)``: starting an id that exists starts
    nothing (``created`` False).

    Raises: as :meth:`~phronomy_fsm.durable.runtime.DurableRuntime.start`
    (AgentBusyError when the agent has an active execution)."""
    eid = execution_id or new_execution_id()
    handle = start_execution_async(
        runtime,
        agent_id,
        input,
        execution_id=eid,
        mode=mode,
        timeout_seconds=timeout_seconds,
    ).result()
    return eid, bool(handle.created)


def start_execution_async(
    runtime: Any,
    agent_id: str,
    input: str,
    *,
    execution_id: str,
    mode: str = "invoke",
    timeout_seconds: float | None = None,
) -> Task[Any]:
    """:func:`start_execution` without blocking: the task settles with the engine's
    :class:`~phronomy_fsm.durable.runtime.ExecutionHandle` once the start is
    committed (``DurableRuntime.start_async``)."""
    return runtime.start_async(  # type: ignore[no-any-return]
        agent_session.MACHINE,
        SessionContext(agent_id, execution_id, input=input, mode=mode),
        execution_id=execution_id,
        exclusive_key=agent_id,
        labels={"agent_id": agent_id},
        timeout_seconds=timeout_seconds,
    )


_shared_lock = threading.Lock()
_shared: dict[Any, AgentRuntime] = {}


class AgentRuntime:
    """The durable runtime of the agents of one store (module docstring).

    Args:
        store: an :class:`~phronomy_fsm.durable.ports.ExecutionStore` (a SQLite or
            PostgreSQL store); closed by :meth:`close` only with ``own_store``.
        max_workers / queue_size: the offload pool's bounds (LLM calls, tools,
            filters run there).
        clock, lease_seconds, poll_seconds, faults: as
            :class:`~phronomy_fsm.durable.runtime.DurableRuntime` (a fault plan is for
            tests and the crash harness only).
        name: thread-name prefix and the worker's name.
        own_store: close ``store`` in :meth:`close`.

    Raises:
        StorageError: the worker cannot be registered in the store.
    """

    def __init__(
        self,
        store: Any,
        *,
        max_workers: int = 16,
        queue_size: int = 1024,
        clock: Clock = SYSTEM_CLOCK,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        poll_seconds: float = DEFAULT_POLL_SECONDS,
        faults: FaultPlan | None = None,
        name: str = "phronomy-agents",
        own_store: bool = False,
    ) -> None:
        self.store = store
        self.directory = AgentDirectory()
        self.directory.actions = self
        self.durable = DurableRuntime(
            store,
            machines=agent_machines(self.directory),
            max_workers=max_workers,
            queue_size=queue_size,
            clock=clock,
            lease_seconds=lease_seconds,
            poll_seconds=poll_seconds,
            faults=faults,
            listeners=[self.directory.observe],
            name=name,
            own_store=own_store,
        )
        #: the :class:`~phronomy_fsm.agent.agent.Agent` objects handed out, by agent id
        #: (guarded by ``lock``; kept and read by that class, which sits above this
        #: module, so they are typed ``object`` here and no import runs back up)
        self.agents: dict[str, object] = {}
        self.lock = threading.RLock()
        self._side = ThreadPoolExecutor(1, thread_name_prefix=f"{name}-side")
        self._handoffs: dict[str, collections.deque[dict[str, Any]]] = {}
        self._closed = False
        self._shared_key: Any = None

    def __repr__(self) -> str:
        return f"<AgentRuntime {self.durable.name} on {getattr(self.store, 'path', self.store)}>"

    def __enter__(self) -> Self:
        """Use the runtime as a context manager: :meth:`close` on exit."""
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @classmethod
    def for_store(cls, target: Any, *, must_exist: bool = False) -> AgentRuntime:
        """The process-wide runtime of a store: a SQLite path (str or path-like), a
        PostgreSQL URL, or a store object; created on first use (it then owns the
        store it opened) and closed when the process exits.

        Raises:
            NotFoundError: ``must_exist`` and the path names no file, or an empty one
                (nothing is created: a mistyped path is not a new store).
            StorageError, SchemaVersionError: the store cannot be opened.
        """
        from phronomy_fsm.store.open import is_postgres_dsn, open_store

        if isinstance(target, str | os.PathLike):
            text = os.fspath(target)
            key: Any = ("dsn", text) if is_postgres_dsn(text) else ("path", os.path.realpath(text))
        else:
            key = ("object", id(target))
        with _shared_lock:
            runtime = _shared.get(key)
            if runtime is not None and not runtime._closed:
                return runtime
            if key[0] == "object":
                runtime = cls(target)
            else:
                if key[0] == "path" and must_exist:
                    require_store_file(key[1])
                runtime = cls(open_store(key[1]), own_store=True)
            runtime._shared_key = key
            _shared[key] = runtime
            return runtime

    # ------------------------------------------------------------------ properties

    @property
    def dispatcher(self) -> Dispatcher:
        """The loop the agents' executions run on."""
        return self.durable.dispatcher

    @property
    def closed(self) -> bool:
        """True once :meth:`close` began."""
        return self._closed

    # ------------------------------------------------------------------ executions

    def start(
        self,
        agent_id: str,
        input: Any,
        *,
        mode: str = "invoke",
        execution_id: str | None = None,
        timeout_seconds: float | None = None,
        caller: Caller | None = None,
    ) -> Task[tuple[str, bool]]:
        """Start an execution of ``agent_id`` (loaded here) on ``input``, without
        blocking (any thread, the loop thread included); ``caller`` waits for it. The
        returned task settles with ``(execution_id, created)`` once the start is
        committed — ``created`` is False when that id existed already (it is not
        started again; a caller of a finished one is settled from the store) — or
        fails, failing ``caller`` too, with:

        - AgentBusyError: the agent has an active execution (its id is in the message
          and ``execution_id``);
        - ExecutionExistsError: the id belongs to another machine's execution, or to
          an agent execution another worker runs;
        - StorageError.

        Raises (at once): RuntimeClosedError, InvalidIdError.
        """
        self._check_open()
        eid = execution_id or new_execution_id()
        outcome: Task[tuple[str, bool]] = Task(f"start {eid}")
        if caller is not None:
            self.dispatcher.call_soon(self.directory.add_caller, eid, caller)

        def failed(error: BaseException) -> None:  # off the loop: may read the store
            if isinstance(error, AgentBusyError):
                busy = self.active_execution_id(agent_id) or "unknown"
                error = AgentBusyError(
                    f"agent {agent_id!r} already has an active execution ({busy}); wait for "
                    "it, approve, resolve or cancel it",
                    agent_id=agent_id,
                    execution_id=busy,
                )
            self._forget_caller(eid, caller, error)
            outcome.fail(error)

        def existed() -> None:  # off the loop: the id was there already
            try:
                record = self.store.load_record(eid)
            except PhronomyError as exc:
                failed(exc)
                return
            if caller is not None:
                if record.is_finished:  # nothing will finish it again
                    self.dispatcher.call_soon(self.directory.settle_callers, record)
                elif not self.durable.is_live(eid):
                    failed(
                        ExecutionExistsError(
                            f"execution {eid} exists already and runs elsewhere; pick another id",
                            execution_id=eid,
                        )
                    )
                    return
            outcome.complete((eid, False))

        def started(task: Task[Any]) -> None:
            error = task.future.exception()
            if error is not None:
                self._side_submit(failed, error)
            elif task.future.result().created:
                outcome.complete((eid, True))
            else:
                self._side_submit(existed)

        try:
            start_execution_async(
                self.durable,
                agent_id,
                input,
                execution_id=eid,
                mode=mode,
                timeout_seconds=timeout_seconds,
            ).add_done_callback(started)
        except BaseException as exc:
            if caller is not None:
                self.dispatcher.call_soon(self.directory.drop_callers, eid, exc)
            raise
        return outcome

    def observe(self, execution_id: str, caller: Caller) -> None:
        """Make ``caller`` wait for ``execution_id`` (an ``agent_session``
        execution): settled by this runtime's directory when it runs the execution,
        else by a thread watching the store (another worker runs it). Any thread but
        the loop."""
        self.dispatcher.call(self.directory.add_caller, execution_id, caller).result(10)
        if self.durable.is_live(execution_id):
            return

        def watch() -> None:
            try:
                self.durable.wait(execution_id)
                record = self.store.load_record(execution_id)
            except PhronomyError as exc:  # closed, or the store failed: say so
                if not self._closed:
                    self._forget_caller(execution_id, caller, exc)
                return
            if not self._closed:
                self.dispatcher.call_soon(self.directory.settle_callers, record)

        name = f"{self.durable.name}-watch-{execution_id[:8]}"
        threading.Thread(target=watch, name=name, daemon=True).start()

    def _forget_caller(
        self, execution_id: str, caller: Caller | None, error: BaseException
    ) -> None:
        if caller is None:
            return
        try:
            self.dispatcher.call_soon(self.directory.drop_caller, execution_id, caller.task, error)
        except PhronomyError:
            caller.task.fail(error)

    def active_execution_id(self, agent_id: str) -> str | None:
        """The id of ``agent_id``'s active execution in the store, or None."""
        rows = self.store.execution_rows(
            machine=agent_session.MACHINE, exclusive_key=agent_id, limit=None
        )
        active = [r["execution_id"] for r in rows if r["active"]]
        return active[-1] if active else None

    def adopt_agent(self, agent_id: str) -> list[tuple[str, str]]:
        """Resume ``agent_id``'s active execution and its active tool calls here
        unless a live worker runs them (``docs/agent.md``, "Loading an agent").
        Returns ``[(execution_id, status)]`` of those now run here."""
        ids: list[str] = []
        for record in self.store.list_records(
            machine=agent_session.MACHINE, exclusive_key=agent_id, active=True
        ):
            ids.append(record.execution_id)
            ids.extend(
                child.execution_id
                for child in self.store.list_records(
                    parent_execution_id=record.execution_id, active=True
                )
            )
        return self.durable.adopt(ids)

    # ------------------------------------------------------------------ handoffs

    def pending_handoffs(self, agent_id: str) -> list[dict[str, Any]]:
        """Handoffs to ``agent_id`` whose target execution was never started (the
        process that committed the handoff stopped, or the agent was not loaded
        there), oldest first."""
        pending = []
        for record in self.store.list_records(
            machine=agent_session.MACHINE, state=agent_session.State.HANDED_OFF.value
        ):
            ctx = json_data(record.context)
            handoff = (ctx.get("handoff") if isinstance(ctx, dict) else None) or {}
            if handoff.get("target_agent_id") != agent_id:
                continue
            try:
                self.store.load_record(handoff["target_execution_id"])
            except PhronomyError:
                pending.append(dict(handoff, source_execution_id=record.execution_id))
        return pending

    def queue_handoffs(self, agent_id: str, handoffs: list[dict[str, Any]]) -> None:
        """Start ``handoffs`` to ``agent_id`` one after another (off the loop)."""
        if handoffs:
            with self.lock:
                self._handoffs.setdefault(agent_id, collections.deque()).extend(handoffs)
            self._side_submit(self._next_handoff, agent_id)

    def start_handoff(self, source_execution_id: str, handoff: dict[str, Any]) -> None:
        """A committed handoff (directory action, loop thread): when the target agent
        is loaded here, its execution starts under the derived id — now, or after its
        current execution."""
        target = str(handoff.get("target_agent_id"))
        if self.directory.live(target) is None:
            return  # loading the target agent starts it
        self.queue_handoffs(target, [dict(handoff, source_execution_id=source_execution_id)])

    def agent_idle(self, agent_id: str) -> None:
        """An execution of ``agent_id`` finished (directory action, loop thread)."""
        if self._handoffs.get(agent_id):
            self._side_submit(self._next_handoff, agent_id)

    def _next_handoff(self, agent_id: str) -> None:
        with self.lock:
            queue = self._handoffs.get(agent_id)
            if not queue:
                return
            handoff = queue[0]
        if self.directory.live(agent_id) is None or self._closed:
            return

        def done(task: Task[Any]) -> None:
            error = task.future.exception()
            if isinstance(error, AgentBusyError):
                return  # its current execution finishes first; agent_idle comes back
            if error is not None:
                log.warning(
                    "agent %s: could not start handoff %s: %r",
                    agent_id,
                    handoff.get("target_execution_id"),
                    error,
                )
            with self.lock:
                queue = self._handoffs.get(agent_id)
                if queue and queue[0] is handoff:
                    queue.popleft()
                more = bool(queue)
            if more:
                self._side_submit(self._next_handoff, agent_id)

        try:
            self.start(
                agent_id,
                handoff.get("message") or "",
                execution_id=str(handoff["target_execution_id"]),
                timeout_seconds=self.directory.config(agent_id).timeout_seconds,
            ).add_done_callback(done)
        except PhronomyError as exc:
            log.warning("agent %s: could not start a handoff: %r", agent_id, exc)

    # ------------------------------------------------------------------ listener failures

    def fail_execution(self, execution_id: str, reason: str) -> None:
        """End ``execution_id`` ``failed`` with StreamCallbackError (directory action,
        loop thread; the cancel is written off the loop)."""

        def cancel() -> None:
            try:
                self.durable.cancel(
                    execution_id, reason=reason, as_failure=True, error_type="StreamCallbackError"
                )
            except PhronomyError as exc:
                log.warning("execution %s: could not fail it: %r", execution_id, exc)

        self._side_submit(cancel)

    def _side_submit(self, fn: Any, *args: Any) -> None:
        if self._closed:
            return
        try:
            self._side.submit(fn, *args)
        except RuntimeError:  # shut down meanwhile
            log.debug("side work dropped: the runtime is closing")

    # ------------------------------------------------------------------ lifecycle

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeClosedError(f"the agent runtime {self.durable.name} is closed")

    def close(self, *, timeout_seconds: float = 10.0) -> None:
        """Let running executions reach a resting point (up to ``timeout_seconds``),
        then stop. Executions that have not finished live on in the store; their
        callers fail with ExecutionDetachedError saying how to continue. Idempotent."""
        if self._closed:
            return
        self._closed = True
        with _shared_lock:
            if _shared.get(self._shared_key) is self:
                del _shared[self._shared_key]
        started = time.monotonic()
        self.durable.wait_at_rest(timeout_seconds)  # executions in flight come to rest
        self._side.shutdown(wait=True, cancel_futures=True)
        try:
            self.dispatcher.call(self.directory.detach_all, "the agent runtime closed").result(5)
        except PhronomyError:
            pass
        self.durable.close(timeout_seconds=max(0.1, timeout_seconds - (time.monotonic() - started)))


def require_store_file(path: str) -> None:
    """Raise NotFoundError unless ``path`` exists and is not a zero-length file."""
    from phronomy_fsm.errors import NotFoundError

    try:
        size = os.stat(path).st_size
    except FileNotFoundError:
        raise NotFoundError(
            f"no store at {path} (the file does not exist); Agent.load opens an existing "
            "store: check the path, or use Agent.create to make a new one",
            path=path,
        ) from None
    except OSError:
        return  # not a missing file: the store reports what is wrong with it
    if size == 0 and os.path.isfile(path):
        raise NotFoundError(
            f"{path} is empty (0 bytes), not a phronomy_fsm store; Agent.load opens an "
            "existing store: check the path, or use Agent.create to initialise a new one",
            path=path,
        )


def _close_shared() -> None:
    with _shared_lock:
        runtimes = list(_shared.values())
    for runtime in runtimes:
        try:
            runtime.close(timeout_seconds=2.0)
        except Exception:
            log.debug("closing %r at exit failed", runtime, exc_info=True)


atexit.register(_close_shared)

__all__ = [
    "AgentRuntime",
    "agent_machines",
    "require_store_file",
    "start_execution",
    "start_execution_async",
]
