"""The public Agent API: create or load an agent, invoke it, stream it, approve, resolve,
cancel.

An :class:`Agent` is an id in a store plus a configuration
(:class:`~phronomy_fsm.agent.config.AgentConfig`) loaded into an
:class:`~phronomy_fsm.agent.runtime.AgentRuntime`. Each ``invoke`` starts one durable
``agent_session`` execution (at most one is active per agent); everything it does
outside — an LLM call, a tool call — happens only after the commit that announces it,
and recovery after a crash resumes it from its last commit, never re-sending an effect
that may have happened unless its re-send policy allows it (``docs/agent.md``).

Every operation has a blocking form (refused on the loop thread) and an ``*_async``
form returning a :class:`~phronomy_fsm.runtime.tasks.Task` — wait on it from any thread
or ``await`` it in asyncio. Approving, resolving and cancelling write to the
execution's durable inbox, so they work from any process (``phronomy-fsm approve``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import queue
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

from phronomy_fsm.agent import approvals, journal
from phronomy_fsm.agent.config import AgentConfig, config_options
from phronomy_fsm.agent.directory import Caller
from phronomy_fsm.agent.events import AgentEvent, AgentResult
from phronomy_fsm.agent.ids import check_agent_id, check_execution_id
from phronomy_fsm.agent.providers import Provider
from phronomy_fsm.agent.runtime import AgentRuntime
from phronomy_fsm.agent.streams import DEFAULT_POLL_SECONDS, ExecutionEvents
from phronomy_fsm.agent.types import Message
from phronomy_fsm.durable.records import ExecutionRecord
from phronomy_fsm.errors import (
    AgentClosedError,
    AgentExistsError,
    ConfigurationError,
    ExecutionFinishedError,
    InvalidInputError,
    NotFoundError,
)
from phronomy_fsm.generated import agent_session
from phronomy_fsm.runtime.tasks import Task
from phronomy_fsm.table import check_delay

log = logging.getLogger("phronomy_fsm.agent")

StoreTarget = Any  # a store object, a SQLite path (str or path-like) or a PostgreSQL URL


def _runtime_for(
    store: StoreTarget | None, runtime: AgentRuntime | None, *, must_exist: bool
) -> AgentRuntime:
    if runtime is not None:
        if store is not None and store is not runtime.store and not _same_path(store, runtime):
            raise ConfigurationError(
                "store and runtime name different stores; pass one of them (a runtime "
                "runs the agents of its own store)"
            )
        return runtime
    if store is None:
        raise ConfigurationError("pass store= (a path, a PostgreSQL URL or a store) or runtime=")
    return AgentRuntime.for_store(store, must_exist=must_exist)


def _same_path(store: StoreTarget, runtime: AgentRuntime) -> bool:
    path = getattr(runtime.store, "path", None)
    return (
        isinstance(store, str | os.PathLike)
        and path is not None
        and os.path.realpath(os.fspath(store)) == os.path.realpath(os.fspath(path))
    )


class Agent:
    """One agent; make it with :meth:`create` or :meth:`load`, not directly.

    Attributes: ``agent_id``, ``runtime`` (its
    :class:`~phronomy_fsm.agent.runtime.AgentRuntime`), ``config`` (its
    :class:`~phronomy_fsm.agent.config.AgentConfig`), ``store``.
    """

    def __init__(self, runtime: AgentRuntime, config: AgentConfig) -> None:
        self.runtime = runtime
        self.config = config
        self.agent_id = config.agent_id
        self.store = runtime.store
        self._closed = False

    def __repr__(self) -> str:
        return f"<Agent {self.agent_id}>"

    # ------------------------------------------------------------- construction

    @classmethod
    def create(
        cls,
        agent_id: str,
        *,
        provider: Provider,
        store: StoreTarget | None = None,
        runtime: AgentRuntime | None = None,
        **options: Any,
    ) -> Agent:
        """Create a new agent in the store and load it here (not an upsert).

        Args:
            agent_id: 1-128 printable characters without whitespace
                (``docs/agent.md``, "Ids").
            provider: the LLM provider.
            store: a SQLite file path (created when missing), a PostgreSQL URL, or a
                store object; its process-wide runtime is used
                (:meth:`AgentRuntime.for_store`).
            runtime: the runtime to load the agent into instead (its store is used).
            **options: :meth:`~phronomy_fsm.agent.config.AgentConfig.build`'s
                (``tools``, ``approval_policy``, ``on_event``, ``max_iterations``,
                ``timeout_seconds``, ``input_filters``, ``output_filters``,
                ``handoffs``, ``system_prompt``, ``listener_error_policy``,
                ``max_tool_result_bytes``, ``llm_resend``).

        Raises:
            AgentExistsError: the agent exists already (use :meth:`load`).
            ConfigurationError: a bad id or option (nothing is written).
            StorageError: the store failed.
        """
        check_agent_id(agent_id)
        config = AgentConfig.build(agent_id, provider, **config_options(options))
        rt = _runtime_for(store, runtime, must_exist=False)
        with rt.lock:
            if agent_id in rt.agents or rt.directory.live(agent_id) is not None:
                raise AgentExistsError(
                    f"agent {agent_id!r} is already loaded in this process; use Agent.load",
                    agent_id=agent_id,
                )
            if not rt.store.register_agent(agent_id):
                raise AgentExistsError(
                    f"agent {agent_id!r} already exists; use Agent.load", agent_id=agent_id
                )
            rt.directory.add(config, [])
            agent = rt.agents[agent_id] = cls(rt, config)
        return agent

    @classmethod
    def load(
        cls,
        agent_id: str,
        *,
        provider: Provider,
        store: StoreTarget | None = None,
        runtime: AgentRuntime | None = None,
        **options: Any,
    ) -> Agent:
        """Load an existing agent (or return the one loaded here already): its history
        is read from the store, and its active execution — with its tool calls — is
        resumed here unless a live worker runs it (``docs/agent.md``, "Loading an
        agent"): one in flight continues from its last commit, one waiting for
        approval waits again, one parked for an operator announces itself with a
        :class:`~phronomy_fsm.agent.events.RecoveryRequired` event. Handoffs to this
        agent that were committed but never started are started, in order.

        Args: as :meth:`create` (a store path must name an existing store file).

        Raises:
            NotFoundError: no such agent, or the path names no store file (nothing is
                created).
            ConfigurationError: a bad option, or the agent is loaded here already with
                another listener.
            StorageError: the store failed.
        """
        check_agent_id(agent_id)
        config = AgentConfig.build(agent_id, provider, **config_options(options))
        rt = _runtime_for(store, runtime, must_exist=True)
        with rt.lock:
            existing = rt.agents.get(agent_id)
            if isinstance(existing, Agent) and not existing._closed:
                if config.on_event is not None and config.on_event is not existing.config.on_event:
                    raise ConfigurationError(
                        f"agent {agent_id!r} is already loaded with another listener; "
                        "listeners are bound per agent"
                    )
                return existing
            if not rt.store.agent_exists(agent_id):
                raise NotFoundError(
                    f"agent {agent_id!r} does not exist in this store; use Agent.create",
                    agent_id=agent_id,
                )
            live = rt.directory.live(agent_id)
            if live is None:
                rt.directory.add(config, journal.history(rt.store, agent_id))
            else:  # closed earlier here: same history, the new configuration
                live.config = config
            agent = rt.agents[agent_id] = cls(rt, config)
        resumed = rt.adopt_agent(agent_id)
        if resumed:
            log.info("agent %s: resumed %s", agent_id, ", ".join(e for e, _ in resumed))
        for execution_id, _status in resumed:  # who must act is told again
            rt.dispatcher.call_soon(rt.directory.announce, rt.store.load_record(execution_id))
        rt.resume_handoffs(agent_id)
        return agent

    @classmethod
    async def create_async(cls, agent_id: str, **kwargs: Any) -> Agent:
        """:meth:`create` on a worker thread, for asyncio code."""
        return await asyncio.to_thread(lambda: cls.create(agent_id, **kwargs))

    @classmethod
    async def load_async(cls, agent_id: str, **kwargs: Any) -> Agent:
        """:meth:`load` on a worker thread, for asyncio code."""
        return await asyncio.to_thread(lambda: cls.load(agent_id, **kwargs))

    def close(self) -> None:
        """Stop using this object: it refuses new executions, approvals, resolutions
        and cancels (load the agent again for those). Executions already running
        here go on to their end; they live in the store whatever happens. Idempotent."""
        self._closed = True
        with self.runtime.lock:
            if self.runtime.agents.get(self.agent_id) is self:
                del self.runtime.agents[self.agent_id]

    def _check_open(self) -> None:
        if self._closed or self.runtime.closed:
            raise AgentClosedError(
                f"agent {self.agent_id!r} was closed; load it again (Agent.load)",
                agent_id=self.agent_id,
            )

    # --------------------------------------------------------------- executions

    def invoke_async(
        self,
        input: str,
        *,
        timeout_seconds: float | None = None,
        execution_id: str | None = None,
    ) -> Task[AgentResult]:
        """Start an execution on ``input``; the task settles with its
        :class:`~phronomy_fsm.agent.events.AgentResult` (``completed``, ``rejected``,
        ``handed_off``) or fails with its error (ContentBlockedError, LLMError,
        ExecutionTimeoutError, Cancelled, ExecutionFailedError...). It stays pending
        while the execution waits for approval or for an operator.

        Args:
            input: the user's message (a non-empty string).
            timeout_seconds: the execution's deadline in seconds (default: the agent's
                ``timeout_seconds``); durable — recovery keeps it.
            execution_id: an id of your choosing (default: a random one).

        Raises:
            InvalidInputError: bad input, timeout or id (nothing is written).
            AgentBusyError: the agent has an active execution (its id is in the error).
            AgentClosedError, ExecutionExistsError, StorageError.
        """
        return self._start(input, "invoke", timeout_seconds, execution_id, None)

    def invoke(
        self,
        input: str,
        *,
        timeout_seconds: float | None = None,
        execution_id: str | None = None,
        wait_seconds: float | None = None,
    ) -> AgentResult:
        """:meth:`invoke_async`, then wait (``wait_seconds``: this wait's own limit;
        TaskTimeoutError when it passes — the execution goes on)."""
        return self.invoke_async(
            input, timeout_seconds=timeout_seconds, execution_id=execution_id
        ).result(wait_seconds)

    def submit(
        self,
        input: str,
        *,
        timeout_seconds: float | None = None,
        execution_id: str | None = None,
        wait_seconds: float | None = 30.0,
    ) -> str:
        """Start an execution and return its id once the start is committed, without
        waiting for it to finish (follow it with events, :meth:`active_execution`, or
        ``phronomy-fsm executions show``). Raises as :meth:`invoke_async`, and
        AgentBusyError, ExecutionExistsError or StorageError when the start fails."""
        self._check_open()
        self._check_input(input, timeout_seconds, execution_id)
        execution_id_, _created = self.runtime.start(
            self.agent_id,
            input,
            execution_id=execution_id,
            timeout_seconds=timeout_seconds or self.config.timeout_seconds,
        ).result(wait_seconds)
        return execution_id_

    def stream(
        self,
        input: str,
        *,
        timeout_seconds: float | None = None,
        execution_id: str | None = None,
    ) -> EventStream:
        """Start an execution in stream mode: the LLM streams, and the returned
        :class:`EventStream` yields the execution's events (tokens included) as they
        happen, ending with its terminal event. Raises as :meth:`invoke_async`."""
        sink: queue.SimpleQueue[AgentEvent | None] = queue.SimpleQueue()
        task = self._start(input, "stream", timeout_seconds, execution_id, sink.put)
        return EventStream(task, sink)

    def stream_async(
        self, input: str, *, timeout_seconds: float | None = None
    ) -> Task[AgentResult]:
        """Stream mode with the events (tokens included) going to the agent's
        ``on_event`` listener. Raises ConfigurationError when it has none."""
        if self.config.on_event is None:
            raise ConfigurationError(
                "stream_async needs the agent's on_event listener; use stream() otherwise"
            )
        return self._start(input, "stream", timeout_seconds, None, None)

    def _start(
        self,
        input: Any,
        mode: str,
        timeout_seconds: float | None,
        execution_id: str | None,
        sink: Any,
    ) -> Task[AgentResult]:
        self._check_open()
        self._check_input(input, timeout_seconds, execution_id)
        task: Task[AgentResult] = Task(f"{self.agent_id} {mode}")
        self.runtime.start(
            self.agent_id,
            input,
            mode=mode,
            execution_id=execution_id,
            timeout_seconds=timeout_seconds or self.config.timeout_seconds,
            caller=Caller(task, sink),
        )
        return task

    def _check_input(
        self, input: Any, timeout_seconds: float | None, execution_id: str | None
    ) -> None:
        """Raise InvalidInputError for a bad input, timeout or execution id."""
        if not isinstance(input, str):
            raise InvalidInputError(
                f"input must be a string, got {type(input).__name__}", agent_id=self.agent_id
            )
        if not input.strip():
            raise InvalidInputError("input must not be empty", agent_id=self.agent_id)
        if timeout_seconds is not None:
            try:
                check_delay(timeout_seconds, "timeout_seconds")
            except ValueError as exc:
                raise InvalidInputError(str(exc), agent_id=self.agent_id) from exc
        if execution_id is not None:
            check_execution_id(execution_id, self.agent_id)

    # --------------------------------------------------------------- approval

    def approve_async(
        self,
        execution_id: str,
        *,
        approval_request_id: str,
        approved: bool = True,
        decisions: Mapping[str, bool] | None = None,
    ) -> Task[AgentResult]:
        """Decide an execution's pending approval request; the task then observes
        how the execution ends (like the invoke task).

        Args:
            execution_id / approval_request_id: from the
                :class:`~phronomy_fsm.agent.events.ApprovalRequired` event.
            approved: decides the whole request when ``decisions`` is None (a rejected
                request ends the execution ``rejected``).
            decisions: per item: every item's ``tool_invocation_id`` → True (run it)
                or False (reject it: the LLM sees the rejection and the execution goes
                on). A mapping that leaves an item out or names one not in the request
                is refused.

        Raises:
            ApprovalError: the decision is refused (wrong request, already decided,
                not waiting, partial decisions); nothing is sent.
            AgentClosedError, NotFoundError, StorageError.
        """
        self._check_open()
        task: Task[AgentResult] = Task(f"{self.agent_id} approve {execution_id}")
        approvals.check_decision_types(execution_id, approval_request_id, approved, decisions)
        self._observe(execution_id, task)
        try:
            signal = approvals.send_approval(
                self.store,
                execution_id,
                approval_request_id=approval_request_id,
                approved=approved,
                decisions=decisions,
                by=f"agent:{self.agent_id}",
                sender=f"worker:{self.runtime.durable.worker_id}",
            )
        except BaseException as exc:
            self._unobserve(execution_id, task, exc)
            raise
        self.runtime.durable.notify(execution_id, signal)
        return task

    def approve(
        self,
        execution_id: str,
        *,
        approval_request_id: str,
        approved: bool = True,
        decisions: Mapping[str, bool] | None = None,
        wait_seconds: float | None = None,
    ) -> AgentResult:
        """:meth:`approve_async`, then wait for how the execution ends."""
        return self.approve_async(
            execution_id,
            approval_request_id=approval_request_id,
            approved=approved,
            decisions=decisions,
        ).result(wait_seconds)

    # --------------------------------------------------------------- recovery

    def resolve_async(
        self,
        execution_id: str,
        *,
        expected_revision: int,
        outcome: str,
        result: Any = None,
        error: str | None = None,
    ) -> Task[AgentResult]:
        """Answer an execution of this agent — or one of its tool calls — parked in
        ``recovery_required``: what became of the effect it was waiting on
        (``succeeded`` with ``result``, ``failed`` with ``error``, ``not_performed``,
        or ``retry``: run it again). The task observes how the agent's execution
        ends (``docs/agent.md``, "Recovery").

        Raises:
            ResolutionError: refused (not parked, stale revision, outcome not allowed,
                a result that is not an LLM answer for an LLM call); nothing is sent.
            AgentClosedError, NotFoundError, StorageError.
        """
        self._check_open()
        agent_id, session_id = approvals.agent_of(self.store, execution_id)
        if agent_id != self.agent_id:
            raise NotFoundError(
                f"execution {execution_id} is not an execution of agent {self.agent_id!r}",
                execution_id=execution_id,
            )
        task: Task[AgentResult] = Task(f"{self.agent_id} resolve {execution_id}")
        self._observe(session_id, task)
        try:
            signal = approvals.send_resolution(
                self.store,
                execution_id,
                expected_revision=expected_revision,
                outcome=outcome,
                result=result,
                error=error,
                sender=f"worker:{self.runtime.durable.worker_id}",
            )
        except BaseException as exc:
            self._unobserve(session_id, task, exc)
            raise
        self.runtime.durable.notify(execution_id, signal)
        return task

    def resolve(
        self,
        execution_id: str,
        *,
        expected_revision: int,
        outcome: str,
        result: Any = None,
        error: str | None = None,
        wait_seconds: float | None = None,
    ) -> AgentResult:
        """:meth:`resolve_async`, then wait."""
        return self.resolve_async(
            execution_id,
            expected_revision=expected_revision,
            outcome=outcome,
            result=result,
            error=error,
        ).result(wait_seconds)

    # --------------------------------------------------------------- cancel

    def cancel(self, execution_id: str | None = None) -> bool:
        """Cancel the agent's active execution (or ``execution_id``): durably
        requested at once — in-flight work is told to stop (an LLM read is
        interrupted) and its results are ignored; the execution ends ``cancelled``
        once nothing of it runs any more, its tool calls cancelled with it: once this
        returns True the execution cannot end otherwise (``docs/agent.md``,
        "Cancellation and timeouts"). Returns False when there was nothing to cancel
        (no active execution, or it finished).

        Raises:
            AgentClosedError: this object was closed.
        """
        self._check_open()
        eid = execution_id or self.runtime.active_execution_id(self.agent_id)
        if eid is None:
            return False
        try:
            self.runtime.durable.cancel(eid, reason="cancelled by the caller")
        except (ExecutionFinishedError, NotFoundError):
            return False
        return True

    # --------------------------------------------------------------- waiting

    def wait_async(self, execution_id: str) -> Task[AgentResult]:
        """A task that settles with how ``execution_id`` (an execution of this agent)
        ends — as the ``invoke`` task would, for an execution this process did not
        start (one resumed by :meth:`load`, or started elsewhere).

        Raises:
            NotFoundError: no such execution of this agent. AgentClosedError.
        """
        self._check_open()
        agent_id, session_id = approvals.agent_of(self.store, execution_id)
        if agent_id != self.agent_id:
            raise NotFoundError(
                f"execution {execution_id} is not an execution of agent {self.agent_id!r}",
                execution_id=execution_id,
            )
        task: Task[AgentResult] = Task(f"{self.agent_id} wait {session_id}")
        self._observe(session_id, task)  # a finished one is settled from the store
        return task

    def wait(self, execution_id: str, *, wait_seconds: float | None = None) -> AgentResult:
        """:meth:`wait_async`, then wait (``wait_seconds``: this wait's own limit)."""
        return self.wait_async(execution_id).result(wait_seconds)

    # --------------------------------------------------------------- views

    def events(
        self,
        execution_id: str,
        *,
        after: int = 0,
        poll_seconds: float = DEFAULT_POLL_SECONDS,
        wait_seconds: float | None = None,
    ) -> ExecutionEvents:
        """The events of ``execution_id`` (an execution of this agent) after the cursor
        ``after``: those already durable, then the new ones as they are committed —
        by this process or any other on the same store — ending after its terminal
        ``execution_<outcome>`` event. Iterate the result with ``for`` or ``async
        for``; each :class:`~phronomy_fsm.agent.streams.StoredEvent` carries its
        ``cursor``: reconnecting with ``after=<last cursor>`` misses nothing and
        repeats nothing (``docs/agent.md``, "Event streams").

        Args:
            execution_id: an execution of this agent (running or finished).
            after: the last cursor already seen; 0 (default) for all events.
            poll_seconds: seconds between store reads while nothing new arrives.
            wait_seconds: the longest the iteration waits for a next event before it
                raises TimeoutError (``None``: no limit).

        Raises:
            NotFoundError: no such execution of this agent.
            InvalidInputError: a bad ``after`` or ``poll_seconds``.
            StorageError: the store failed.

        Works on a closed agent too (it only reads).
        """
        events = ExecutionEvents(
            self.store,
            execution_id,
            after=after,
            poll_seconds=poll_seconds,
            wait_seconds=wait_seconds,
        )
        agent_id, session_id = approvals.agent_of(self.store, execution_id)
        if agent_id != self.agent_id or session_id != execution_id:
            raise NotFoundError(
                f"execution {execution_id} is not an execution of agent {self.agent_id!r}",
                execution_id=execution_id,
            )
        return events

    def active_execution(self) -> ExecutionRecord | None:
        """The agent's active execution as stored, or None (a store read)."""
        eid = self.runtime.active_execution_id(self.agent_id)
        return None if eid is None else self.store.load_record(eid)

    def history(self) -> list[Message]:
        """The conversation later executions continue (a copy; read on the loop)."""

        def read() -> list[Message]:
            live = self.runtime.directory.live(self.agent_id)
            return [] if live is None else list(live.history)

        return self.runtime.dispatcher.call(read).result(10)

    def executions(self, *, limit: int | None = None) -> list[ExecutionRecord]:
        """The agent's executions as stored, oldest first."""
        return self.store.list_records(
            machine=agent_session.MACHINE, exclusive_key=self.agent_id, limit=limit
        )

    # --------------------------------------------------------------- helpers

    def _observe(self, execution_id: str, task: Task[AgentResult]) -> None:
        """Make ``task`` settle with how ``execution_id`` ends: this runtime tells it
        when it runs the execution; else the store is watched until it finishes."""
        self.runtime.observe(execution_id, Caller(task))

    def _unobserve(self, execution_id: str, task: Task[AgentResult], error: BaseException) -> None:
        self.runtime.dispatcher.call(
            self.runtime.directory.drop_caller, execution_id, task, error
        ).result(10)


class EventStream:
    """The events of one streamed execution, in order, ending with its terminal event
    (:class:`~phronomy_fsm.agent.events.Done`, ``HandedOff``, ``Failed``, ``TimedOut``
    or ``Cancelled``). Iterate it (``for``, or ``async for`` in asyncio), then call
    :meth:`result` (or ``await stream.task``) for the
    :class:`~phronomy_fsm.agent.events.AgentResult`, which raises the execution's
    error if it failed."""

    def __init__(self, task: Task[AgentResult], sink: queue.SimpleQueue[AgentEvent | None]) -> None:
        self.task = task
        self._sink = sink
        self._ended = False

    def __iter__(self) -> Iterator[AgentEvent]:
        while not self._ended:
            event = self._sink.get()
            if event is None:
                self._ended = True
                return
            yield event

    def __aiter__(self) -> AsyncIterator[AgentEvent]:
        return self._events()

    async def _events(self) -> AsyncIterator[AgentEvent]:
        while not self._ended:
            event = await asyncio.to_thread(self._sink.get)
            if event is None:
                self._ended = True
                return
            yield event

    def result(self, timeout_seconds: float | None = None) -> AgentResult:
        """The execution's result (waits; raises its error)."""
        return self.task.result(timeout_seconds)


__all__ = ["Agent", "EventStream"]
