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
import logging
import os
import threading
import time
from typing import TYPE_CHECKING, Any, Self

from phronomy_fsm.agent.approvals import how_to_continue
from phronomy_fsm.agent.context import SessionContext, ToolCallContext
from phronomy_fsm.agent.directory import AgentDirectory, Caller
from phronomy_fsm.agent.executions import AgentExecutions
from phronomy_fsm.agent.journal import session_records
from phronomy_fsm.agent.session_hooks import AgentSessionHooks
from phronomy_fsm.agent.tool_hooks import ToolCallHooks
from phronomy_fsm.durable.ports import AgentStore
from phronomy_fsm.durable.records import ExecutionStatus
from phronomy_fsm.durable.runtime import DEFAULT_LEASE_SECONDS, DEFAULT_POLL_SECONDS, DurableRuntime
from phronomy_fsm.durable.types import Machine
from phronomy_fsm.errors import (
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
        store: AgentStore,
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
        self.executions = AgentExecutions(self.durable, self.directory, name=name)
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
        """:meth:`AgentExecutions.start <phronomy_fsm.agent.executions.AgentExecutions.start>`."""
        return self.executions.start(
            agent_id,
            input,
            mode=mode,
            execution_id=execution_id,
            timeout_seconds=timeout_seconds,
            caller=caller,
        )

    def observe(self, execution_id: str, caller: Caller) -> None:
        """:meth:`AgentExecutions.observe <phronomy_fsm.agent.executions.AgentExecutions.observe>`."""
        self.executions.observe(execution_id, caller)

    def active_execution_id(self, agent_id: str) -> str | None:
        """The id of ``agent_id``'s active execution in the store, or None."""
        return self.executions.active_execution_id(agent_id)

    def adopt_agent(self, agent_id: str) -> list[tuple[str, str]]:
        """:meth:`AgentExecutions.adopt_agent <phronomy_fsm.agent.executions.AgentExecutions.adopt_agent>`."""
        return self.executions.adopt_agent(agent_id)

    def resume_handoffs(self, agent_id: str) -> None:
        """Start the handoffs to ``agent_id`` nobody started, one after another."""
        self.executions.queue_handoffs(agent_id, self.executions.pending_handoffs(agent_id))

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
        self.executions.close()
        try:
            # how to continue the executions callers wait for, read off the loop (the
            # resolve/approve command of one that waits for someone)
            waited = self.dispatcher.call(self.directory.waited_for).result(5)
            hints = {eid: how_to_continue(self.store, eid) for eid in waited}
            self.dispatcher.call(
                self.directory.detach_all, "the agent runtime closed", hints
            ).result(5)
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

__all__ = ["AgentRuntime", "agent_machines", "require_store_file"]
