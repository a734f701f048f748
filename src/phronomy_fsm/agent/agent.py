"""The public Agent API (reference §8; issue 5 item 1).

An :class:`Agent` has an id, a store, an LLM provider, tools, an approval policy and one
event listener bound at creation or load. At most one execution per agent is active.
Every operation is a control message to the runtime's dispatcher loop; ``*_async`` forms
return a :class:`~phronomy_fsm.runtime.tasks.Task` (wait from any thread, or ``await`` it
in asyncio); the blocking forms wait on it and refuse to run on the loop thread.

Durability: nothing an execution does outside (an LLM call, a tool side effect) happens
before the barrier that announces it is committed; terminal outcomes are committed
before any caller is notified (reference §0 rule 2).
"""

from __future__ import annotations

import collections
import logging
import os
import queue
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from phronomy_fsm.agent import durable
from phronomy_fsm.agent.invocation import Invocation
from phronomy_fsm.agent.providers import Provider
from phronomy_fsm.agent.runtime import AgentRuntime
from phronomy_fsm.agent.stores import open_store, release_store, store_identity
from phronomy_fsm.agent.tools import DEFAULT_MAX_TOOL_RESULT_BYTES, ApprovalPolicy, Tool
from phronomy_fsm.agent.types import (
    AbortReason,
    AgentEvent,
    AgentResult,
    ApprovalDecision,
    Message,
    Resolution,
    ToolSpec,
)
from phronomy_fsm.errors import (
    AgentBusyError,
    AgentClosedError,
    AgentExistsError,
    ApprovalError,
    Cancelled,
    ConfigurationError,
    ConflictError,
    ExecutionRehydrationRequiredError,
    InvalidInputError,
)
from phronomy_fsm.runtime.tasks import Task
from phronomy_fsm.runtime.timers import check_delay
from phronomy_fsm.store.base import BarrierStore
from phronomy_fsm.store.ownership import AgentClaim
from phronomy_fsm.store.records import AgentLifecycle, AgentRecord, ExecutionStatus

if TYPE_CHECKING:
    from phronomy_fsm.agent.recovery import PendingHandoff

log = logging.getLogger("phronomy_fsm.agent")

Listener = Callable[[AgentEvent], None]
TextFilter = Callable[[str], str]

LISTENER_ERROR_POLICIES = ("report", "fail_task")


def _release_quietly(store: BarrierStore, claim: AgentClaim) -> None:
    """Release ``claim`` after a failed load; a failure is logged (the row stays until
    this process ends, then the next claimant takes it over)."""
    try:
        store.release_agent(claim.agent_id, claim.owner_token)
    except Exception as exc:  # noqa: BLE001 - the original error matters more
        log.warning("agent %s: could not release its claim: %r", claim.agent_id, exc)


def _check_execution_id(execution_id: object, agent_id: str) -> None:
    """Raise InvalidInputError unless ``execution_id`` is a usable id
    (:data:`~phronomy_fsm.agent.durable.ID_RULE`)."""
    problem = durable.id_problem(execution_id)
    if problem is not None:
        raise InvalidInputError(
            f"execution_id must be {durable.ID_RULE}; {problem}. Leave it out to get a random id",
            agent_id=agent_id,
        )


class Agent:
    """One logical agent; create it with :meth:`create` or :meth:`load`, not directly.

    Attributes (read-only for applications): ``agent_id``, ``store``, ``provider``,
    ``tools`` (name → :class:`Tool`), ``approval_policy``, ``on_event``,
    ``max_iterations``, ``timeout_seconds``, ``max_tool_result_bytes``, ``runtime``.
    """

    def __init__(
        self,
        agent_id: str,
        *,
        store: BarrierStore,
        provider: Provider,
        root: AgentRecord,
        history: list[Message],
        runtime: AgentRuntime,
        tools: Sequence[Tool] = (),
        approval_policy: ApprovalPolicy | None = None,
        on_event: Listener | None = None,
        max_iterations: int = 10,
        timeout_seconds: float | None = None,
        input_filters: Sequence[TextFilter] = (),
        output_filters: Sequence[TextFilter] = (),
        handoffs: Mapping[str, str] | None = None,
        system_prompt: str | None = None,
        listener_error_policy: str = "report",
        preparation_replayable: bool = True,
        max_tool_result_bytes: int | None = DEFAULT_MAX_TOOL_RESULT_BYTES,
    ) -> None:
        if listener_error_policy not in LISTENER_ERROR_POLICIES:
            raise ConfigurationError(
                f"listener_error_policy must be one of {LISTENER_ERROR_POLICIES}, got {listener_error_policy!r}"
            )
        if max_iterations < 1:
            raise ConfigurationError("max_iterations must be at least 1")
        if max_tool_result_bytes is not None and (
            type(max_tool_result_bytes) is not int or max_tool_result_bytes < 1
        ):
            raise ConfigurationError(
                "max_tool_result_bytes must be a positive int (bytes of a tool result's "
                f"text kept and sent to the LLM) or None for no cap, got {max_tool_result_bytes!r}"
            )
        if timeout_seconds is not None:
            try:
                check_delay(timeout_seconds, "timeout_seconds")
            except ValueError as exc:
                raise ConfigurationError(str(exc)) from exc
        if not callable(getattr(provider, "complete", None)):
            raise ConfigurationError(
                f"provider {provider!r} has no complete(request, *, on_token, cancellation) method; "
                "pass a ScriptedProvider, an OpenAICompatibleProvider or your own Provider"
            )
        for item in tools:
            if not isinstance(item, Tool):
                raise ConfigurationError(
                    f"tools must be Tool objects, got {item!r}; wrap functions with Tool(name, fn, ...) "
                    "or the @tool decorator"
                )
        names = [t.name for t in tools]
        duplicates = {n for n in names if names.count(n) > 1}
        if duplicates:
            raise ConfigurationError(f"tool names must be unique; repeated: {sorted(duplicates)}")
        handoffs = dict(handoffs or {})
        clash = set(handoffs) & set(names)
        if clash:
            raise ConfigurationError(f"handoff tool names clash with tools: {sorted(clash)}")
        self.agent_id = agent_id
        self.store = store
        self.provider = provider
        self.tools: dict[str, Tool] = {t.name: t for t in tools}
        self.handoffs: dict[str, str] = handoffs
        self.tool_specs: tuple[ToolSpec, ...] = tuple(t.spec() for t in tools) + tuple(
            ToolSpec(
                name,
                f"Hand the conversation off to agent {target!r}.",
                {
                    "type": "object",
                    "properties": {"message": {"type": "string"}},
                    "additionalProperties": True,
                },
            )
            for name, target in sorted(handoffs.items())
        )
        self.approval_policy = approval_policy
        self.on_event = on_event
        self.max_iterations = max_iterations
        self.timeout_seconds = timeout_seconds
        self.input_filters = tuple(input_filters)
        self.output_filters = tuple(output_filters)
        self.system_prompt = system_prompt
        self.listener_error_policy = listener_error_policy
        self.preparation_replayable = preparation_replayable
        self.max_tool_result_bytes = max_tool_result_bytes
        self.runtime = runtime
        # live state: touched only on the runtime's loop thread
        self.root = root
        self.history = history
        self._admission_sid: int | None = None
        self._current: Invocation | None = None
        self._live: dict[str, Invocation] = {}
        self._closed = False
        # the store claim of this process (docs/operations.md "Who owns an agent");
        # set by create/load, taken (under the registry lock) by whoever releases it
        self._claim: AgentClaim | None = None
        # the lease on a store this process opened from a path (agent/stores.py),
        # released together with the claim
        self._store_lease: str | None = None
        # handoffs to this agent found unstarted at load (loop thread pops them)
        self._pending_handoffs: collections.deque[PendingHandoff] = collections.deque()
        self.recovered: Task[AgentResult] | None = None

    def __repr__(self) -> str:
        return f"<Agent {self.agent_id}>"

    # ------------------------------------------------------------- construction

    @classmethod
    def create(
        cls,
        agent_id: str,
        *,
        store: BarrierStore | str | os.PathLike[str],
        provider: Provider,
        runtime: AgentRuntime | None = None,
        **options: Any,
    ) -> Agent:
        """Create a new agent in the store and make it live (not an upsert).

        Args:
            agent_id: 1-128 letters, marks, digits, punctuation or symbols — no
                whitespace, control or format characters
                (:data:`~phronomy_fsm.agent.durable.ID_RULE`; docs/getting-started.md
                "Ids"). Loading an agent whose id an older version stored is not
                restricted.
            store: a :class:`~phronomy_fsm.store.base.BarrierStore` or a SQLite file path
                (str or path-like).
            provider: the LLM provider.
            runtime: the runtime to run on (default: the process-wide one).
            **options: ``tools``, ``approval_policy``, ``on_event``, ``max_iterations``
                (10), ``timeout_seconds``, ``input_filters``, ``output_filters``,
                ``handoffs`` (tool name → target agent id), ``system_prompt``,
                ``listener_error_policy`` (``report`` | ``fail_task``),
                ``max_tool_result_bytes`` (256 KiB; None: no cap — the most UTF-8
                bytes of a tool result's text, or of a tool's error, that are journaled
                and sent to the LLM; longer text is cut, with a note, and its original
                size is journaled: docs/getting-started.md "Tools and approval").

        Raises:
            AgentExistsError: the agent already exists (use :meth:`load`).
            AgentOwnedError: another process claimed the new agent between its
                creation and this process's claim (it exists; that process owns it).
            ConfigurationError: an ``agent_id`` that breaks the id rule (nothing is
                written), or inconsistent options.
            StoreError: the store failed.

        Ownership: the new agent is claimed for this process in the store (released
        by :meth:`close` or :meth:`AgentRuntime.close`; see docs/operations.md "Who
        owns an agent").
        """
        problem = durable.id_problem(agent_id)
        if problem is not None:
            raise ConfigurationError(f"agent_id must be {durable.ID_RULE}; {problem}")
        store, lease = open_store(store)
        try:
            agent = cls._create(agent_id, store, provider, runtime, options)
        except BaseException:
            release_store(lease)
            raise
        agent._store_lease = lease
        return agent

    @classmethod
    def _create(
        cls,
        agent_id: str,
        store: BarrierStore,
        provider: Provider,
        runtime: AgentRuntime | None,
        options: dict[str, Any],
    ) -> Agent:
        runtime = runtime or AgentRuntime.default()
        key = (store_identity(store), agent_id)
        with runtime.registry_lock:
            if key in runtime.agents:
                raise AgentExistsError(
                    f"agent {agent_id!r} is already live in this process; use Agent.load",
                    agent_id=agent_id,
                )
            # validate the whole configuration before anything is written
            agent = cls(
                agent_id,
                store=store,
                provider=provider,
                root=AgentRecord(
                    agent_id, -1, AgentLifecycle.IDLE, 0, runtime.now(), runtime.now()
                ),
                history=[],
                runtime=runtime,
                **options,
            )
            try:
                agent.root = store.create_agent(agent_id, now=runtime.now())
            except ConflictError as exc:
                raise AgentExistsError(
                    f"agent {agent_id!r} already exists; use Agent.load", agent_id=agent_id
                ) from exc
            runtime.hold_claim(agent, store.claim_agent(agent_id))
            runtime.agents[key] = agent
        return agent

    @classmethod
    def load(
        cls,
        agent_id: str,
        *,
        store: BarrierStore | str | os.PathLike[str],
        provider: Provider,
        runtime: AgentRuntime | None = None,
        takeover: bool = False,
        **options: Any,
    ) -> Agent:
        """Return the live agent, or load it from the store and recover its active
        execution (reference §6.1; issue 6): a suspended execution waits for approval
        again, a resumable one continues, an unprovable one is announced with a
        ``recovery_resolution_required`` event.

        Args:
            takeover: take the agent over from an owner whose liveness cannot be
                checked from here (a process on another host or PID namespace) — only
                for an operator who knows that process is gone. A live process on this
                host is never taken over. Keyword-only; default False.

        Raises:
            NotFoundError: no such agent; or ``store`` is a path naming no file or a
                zero-length one (nothing is created: a mistyped path is not a new
                store — use :meth:`create` for that).
            AgentOwnedError: another process that is still running owns the agent
                (stop it — its executions stay durable — or approve/cancel through
                it). Nothing was read into this process or written.
            ConfigurationError: the agent is live with another listener, or a recovery
                needs a listener and none was given.
            StoreError: the store failed.

        Ownership: loading claims the agent for this process in the store before
        anything is read (docs/operations.md "Who owns an agent"): an owner that is
        gone (its pid no longer exists or was reused) is taken over; the claim is
        released by :meth:`close` or :meth:`AgentRuntime.close`. Returning the live
        object claims nothing.
        """
        from phronomy_fsm.agent.recovery import install_recovered, load_history, pending_handoffs

        store, lease = open_store(store, must_exist=True)
        try:
            runtime = runtime or AgentRuntime.default()
            key = (store_identity(store), agent_id)
            with runtime.registry_lock:
                live = runtime.agents.get(key)
                if live is not None:
                    listener = options.get("on_event")
                    if listener is not None and listener is not live.on_event:
                        raise ConfigurationError(
                            f"agent {agent_id!r} is already live with another listener; listeners are bound per agent"
                        )
                    return live
                claim = store.claim_agent(agent_id, takeover=takeover)  # before any read
                try:
                    root = store.load_agent(agent_id)
                    history, active = load_history(store, agent_id)
                    agent = cls(
                        agent_id,
                        store=store,
                        provider=provider,
                        root=root,
                        history=history,
                        runtime=runtime,
                        **options,
                    )
                except BaseException:
                    _release_quietly(store, claim)
                    raise
                # from here the lease goes with the claim (runtime.release_claim)
                agent._store_lease, lease = lease, None
                runtime.hold_claim(agent, claim)
                runtime.agents[key] = agent
        finally:
            release_store(lease)  # not handed to an agent: a live one was returned, or failed
        if active is not None:
            try:
                install_recovered(agent, active)
            except BaseException:
                with runtime.registry_lock:
                    runtime.agents.pop(key, None)
                runtime.release_claim(agent)
                raise
        # handoffs to this agent that a crash acknowledged but never admitted start
        # now, one after another, under their deterministic ids (reference §4.6)
        agent._pending_handoffs.extend(pending_handoffs(store, agent_id))
        if agent._pending_handoffs:
            runtime.dispatcher.call_soon(agent._next_pending_handoff)
        return agent

    def close(self) -> None:
        """Refuse new executions and forget the live object (a running execution
        continues to its end; a suspended one stays durable). Once the claim is given
        up, tasks still waiting on an execution that rests here (suspended, waiting
        for an operator) fail with ExecutionDetachedError saying how to continue it:
        nothing settles them through this object any more.

        Ownership: the store claim of this process is released once no execution of
        this agent is running here — before ``close`` returns when none is (called
        off the loop thread; waiting at most the store's busy timeout plus a second),
        else when the last one is delivered or comes to rest (suspended, or waiting
        for an operator) with no work of it still in flight. Approving, resolving or
        cancelling through a closed agent whose claim is gone raises
        AgentClosedError: load it again. Idempotent; any thread.
        """
        self._closed = True
        with self.runtime.registry_lock:
            self.runtime.agents.pop((store_identity(self.store), self.agent_id), None)
        if self.runtime.closed:
            return
        dispatcher = self.runtime.dispatcher
        settled = None if dispatcher.is_loop_thread() else threading.Event()
        try:
            dispatcher.call_soon(
                self.runtime.release_claim_when_idle,
                self,
                None if settled is None else settled.set,
            )
        except Exception:  # noqa: BLE001 - the loop stopped meanwhile: runtime.close releases
            log.debug("agent %s: loop stopped before close could release", self.agent_id)
            return
        if settled is not None:
            settled.wait(getattr(self.store, "busy_timeout_seconds", 5.0) + 1.0)

    def _check_owned(self) -> None:
        """Raise AgentClosedError when this object was closed and gave up its claim."""
        if self._closed and self._claim is None:
            raise AgentClosedError(
                f"agent {self.agent_id!r} was closed and no longer owns it in the store; "
                "load it again (Agent.load) to approve, resolve or cancel",
                agent_id=self.agent_id,
            )

    # --------------------------------------------------------------- operations

    def invoke_async(
        self, input: str, *, timeout_seconds: float | None = None, execution_id: str | None = None
    ) -> Task[AgentResult]:
        """Start an execution; the task settles with its :class:`AgentResult`, or fails
        with the execution's error (``Cancelled`` when cancelled). It stays pending
        through suspension for approval (reference §8.2), until the approval's outcome —
        or fails with ExecutionDetachedError when the runtime or agent is closed first
        (the execution lives on in the store; the message says how to continue it).

        Args:
            input: the user's message (a non-empty string).
            timeout_seconds: a deadline for the whole execution in seconds (0 <
                seconds ≤ 1e9); default the agent's ``timeout_seconds``.
            execution_id: an id of your choosing instead of a random one: 1-128
                letters, marks, digits, punctuation or symbols — no whitespace, control
                or format characters (:data:`~phronomy_fsm.agent.durable.ID_RULE`).

        Raises:
            InvalidInputError: bad ``input``, ``timeout_seconds`` or ``execution_id``
                (nothing admitted, nothing written).
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
        """:meth:`invoke_async`, then wait (``wait_seconds``: waiter-local timeout)."""
        return self.invoke_async(
            input, timeout_seconds=timeout_seconds, execution_id=execution_id
        ).result(wait_seconds)

    def stream(self, input: str, *, timeout_seconds: float | None = None) -> EventStream:
        """Start an execution in stream mode and return an :class:`EventStream` that
        yields its events (``token`` ... ``done``) as they happen."""
        sink: queue.SimpleQueue[AgentEvent | None] = queue.SimpleQueue()
        task = self._start(input, "stream", timeout_seconds, None, sink.put)
        return EventStream(task, sink)

    def stream_async(
        self, input: str, *, timeout_seconds: float | None = None
    ) -> Task[AgentResult]:
        """Stream mode with events (tokens included) going to the agent's listener.

        Raises ConfigurationError when the agent has no listener (reference §8.2)."""
        if self.on_event is None:
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
            _check_execution_id(execution_id, self.agent_id)
        task: Task[AgentResult] = Task(f"{self.agent_id} {mode}")
        self.runtime.dispatcher.call_soon(
            self._begin,
            input,
            mode,
            task,
            timeout_seconds or self.timeout_seconds,
            execution_id,
            sink,
        )
        return task

    def _begin(
        self,
        input: str,
        mode: str,
        task: Task[AgentResult],
        timeout_seconds: float | None,
        execution_id: str | None,
        sink: Any,
    ) -> None:
        if self._closed or self.runtime.closed:
            task.fail(
                AgentClosedError(f"agent {self.agent_id!r} is closed", agent_id=self.agent_id)
            )
            if sink is not None:
                sink(None)
            return
        if self._admission_sid is not None:
            if sink is not None:
                sink(None)
            busy = self._current.execution_id if self._current is not None else "unknown"
            task.fail(
                AgentBusyError(
                    f"agent {self.agent_id!r} already has an active execution ({busy}); wait for it, approve, "
                    "resolve or cancel it",
                    agent_id=self.agent_id,
                    execution_id=busy,
                )
            )
            return
        ctx = Invocation(self, execution_id or durable.new_id(), input, mode)
        ctx.messages = self.base_messages()
        ctx.base_len = len(ctx.messages)
        ctx.waiters.append(task)
        ctx.stream_sink = sink
        self._current = ctx
        self._live[ctx.execution_id] = ctx
        if timeout_seconds is not None:  # durable from admission on (recovery re-arms it)
            ctx.deadline_at = self.runtime.now() + timedelta(seconds=timeout_seconds)
        self.runtime.start_admission(self)
        self.runtime.start_execution(ctx)
        if timeout_seconds is not None:
            self.runtime.arm_deadline(ctx, timeout_seconds)

    def approve_async(
        self,
        execution_id: str,
        *,
        approval_request_id: str,
        approved: bool = True,
        decisions: Mapping[str, bool] | None = None,
    ) -> Task[AgentResult]:
        """Decide a suspended execution's approval request; the task observes the
        execution's terminal outcome (like the original invoke task, reference §4.5).

        Args:
            execution_id: the suspended execution (from the ``approval_required``
                event).
            approval_request_id: the pending request's id (same event).
            approved: decides the whole request when ``decisions`` is None.
            decisions: per-item decisions: a mapping from **every** item's
                ``tool_invocation_id`` (the ``items`` of the request) to True (run it)
                or False (reject it; the LLM sees the rejection and the execution
                continues). ``approved`` is then ignored. A mapping that leaves an
                item out, or names one that is not in the request, is refused: an
                item nobody named is never approved (docs/getting-started.md "Tools
                and approval").

        A wrong request id, an execution that is not suspended, partial or unknown
        ``decisions``, or a decision already in flight fails only this task with
        :class:`ApprovalError` (nothing is decided); a closed agent that gave its store
        claim up fails it with AgentClosedError (load the agent again).

        Raises:
            ApprovalError: an id that is not a string, ``approved`` that is not a bool,
                or ``decisions`` that is not a mapping of tool_invocation_id strings to
                bools (nothing is sent).
        """
        if not isinstance(execution_id, str) or not isinstance(approval_request_id, str):
            raise ApprovalError(
                "execution_id and approval_request_id must be strings (from the "
                "approval_required event or `phronomy-fsm executions show`)",
                execution_id=execution_id,
            )
        if not isinstance(approved, bool):
            raise ApprovalError(f"approved must be True or False, got {approved!r}")
        if decisions is not None and not (
            isinstance(decisions, Mapping)
            and all(isinstance(k, str) and isinstance(v, bool) for k, v in decisions.items())
        ):
            raise ApprovalError(
                "decisions must map the tool_invocation_id of every item of the approval "
                f"request to True (run it) or False (reject it), got {decisions!r}",
                execution_id=execution_id,
            )
        task: Task[AgentResult] = Task(f"{self.agent_id} approve {execution_id}")
        decision = ApprovalDecision(
            execution_id,
            approval_request_id,
            approved,
            dict(decisions) if decisions is not None else None,
        )
        self.runtime.dispatcher.call_soon(self._approve, decision, task)
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
        """:meth:`approve_async`, then wait for the terminal outcome."""
        return self.approve_async(
            execution_id,
            approval_request_id=approval_request_id,
            approved=approved,
            decisions=decisions,
        ).result(wait_seconds)

    def _approve(self, decision: ApprovalDecision, task: Task[AgentResult]) -> None:
        try:
            self._check_owned()
        except AgentClosedError as exc:
            task.fail(exc)
            return
        ctx = self._live.get(decision.execution_id)
        if ctx is None:
            self._refuse_unowned_approval(decision, task)
            return
        execution = ctx.execution
        request = execution.approval_request if execution is not None else None
        if (
            ctx.state != "suspended"
            or ctx.session_id is not None
            or execution is None
            or execution.status is not ExecutionStatus.SUSPENDED
            or request is None
        ):
            task.fail(
                ApprovalError(
                    f"execution {decision.execution_id} is not suspended for approval (state {ctx.state})",
                    execution_id=decision.execution_id,
                )
            )
            return
        if ctx.approval_decision is not None:
            task.fail(
                ApprovalError(
                    f"a decision for execution {decision.execution_id} is already being committed",
                    execution_id=decision.execution_id,
                )
            )
            return
        if request.request_id != decision.request_id:
            task.fail(
                ApprovalError(
                    f"approval request {decision.request_id!r} does not match the pending request {request.request_id!r}",
                    execution_id=decision.execution_id,
                )
            )
            return
        try:
            durable.check_decisions(
                decision.execution_id,
                request.request_id,
                {i.tool_invocation_id for i in request.items},
                decision.decisions,
            )
        except ApprovalError as exc:
            task.fail(exc)
            return
        ctx.approvers.append(task)
        ctx.approval_decision = decision
        self.runtime.start_execution(
            ctx, at_state="suspended", event="approval_decided", payload=decision
        )

    def _refuse_unowned_approval(self, decision: ApprovalDecision, task: Task[AgentResult]) -> None:
        """No live owner: say why, from the durable record (read off the loop)."""
        store, agent_id = self.store, self.agent_id

        def explain() -> BaseException:
            try:
                execution = store.load_execution(decision.execution_id)
            except Exception as exc:  # noqa: BLE001 - not found or unreadable
                return ApprovalError(
                    f"execution {decision.execution_id}: {exc}", execution_id=decision.execution_id
                )
            if execution.status is not ExecutionStatus.SUSPENDED:
                return ApprovalError(
                    f"execution {decision.execution_id} is {execution.status.value}, not suspended for approval",
                    execution_id=decision.execution_id,
                )
            return ExecutionRehydrationRequiredError(
                f"execution {decision.execution_id} has no live owner in this process; load agent "
                f"{agent_id!r} to recover it, or use `phronomy-fsm approve` on the store",
                execution_id=decision.execution_id,
            )

        try:
            op = self.runtime.pool.submit(explain, name="approval-readback", on_full="raise")
        except Exception as exc:  # noqa: BLE001 - the pool is full or closed
            task.fail(exc)
            return
        op.add_settled_callback(lambda o: task.fail(o.value if o.error is None else o.error))

    def cancel(self, execution_id: str | None = None, *, wait_seconds: float | None = 10.0) -> bool:
        """Request cancellation of the active execution (or ``execution_id``). Result
        authority is revoked at once; the terminal ``cancelled`` commit follows when
        in-flight work has physically finished. Returns False when there was nothing to
        cancel (already ending, or waiting for an operator: answer the resolution
        request instead).

        A True return always takes effect in this process: requested during a barrier,
        it acts on that barrier's outcome — an approval decision that does not commit
        ends the execution cancelled; an operator's resolution that commits is kept and
        the execution ends cancelled instead of going on, one that does not commit
        waits for the operator's next answer, then ends cancelled (docs/operations.md
        "Recovering after a restart"; issue 11 item 7). It is not durable before the
        terminal commit: a crash forgets it.

        Raises:
            AgentClosedError: this object was closed and no longer owns the agent in
                the store (load it again).
        """

        def run() -> bool:
            self._check_owned()
            ctx = self._live.get(execution_id) if execution_id is not None else self._current
            if ctx is None:
                return False
            return self.runtime.abort(
                ctx, AbortReason("cancelled", Cancelled("cancelled by the caller"))
            )

        return bool(self.runtime.dispatcher.call(run).result(wait_seconds))

    def resolve_async(
        self,
        execution_id: str,
        *,
        expected_revision: int,
        subject: Mapping[str, Any],
        outcome: str,
        result: Any = None,
        error: str | None = None,
    ) -> Task[AgentResult]:
        """Resolve a ``recovery_required`` execution (reference §6.6; issue 6): say
        what happened to the subject — ``succeeded`` (with ``result``), ``failed``
        (with ``error``) or ``not_performed``. One transaction with read-back; the task
        observes the execution's terminal outcome. ``not_performed`` ends it as failed:
        nothing is ever re-sent without an operator decision. Through a closed agent
        that gave its store claim up, the task fails with AgentClosedError."""
        from phronomy_fsm.agent.recovery import begin_resolution

        task: Task[AgentResult] = Task(f"{self.agent_id} resolve {execution_id}")
        resolution = Resolution(
            execution_id, expected_revision, dict(subject), outcome, result, error
        )

        def begin() -> None:
            try:
                self._check_owned()
            except AgentClosedError as exc:
                task.fail(exc)
                return
            begin_resolution(self, resolution, task)

        self.runtime.dispatcher.call_soon(begin)
        return task

    def resolve(
        self,
        execution_id: str,
        *,
        expected_revision: int,
        subject: Mapping[str, Any],
        outcome: str,
        result: Any = None,
        error: str | None = None,
        wait_seconds: float | None = None,
    ) -> AgentResult:
        """:meth:`resolve_async`, then wait."""
        return self.resolve_async(
            execution_id,
            expected_revision=expected_revision,
            subject=subject,
            outcome=outcome,
            result=result,
            error=error,
        ).result(wait_seconds)

    def active_execution(self) -> dict[str, Any] | None:
        """A read-only view of the live execution: id, state, revision, status."""

        def view() -> dict[str, Any] | None:
            ctx = self._current
            if ctx is None:
                return None
            return {
                "execution_id": ctx.execution_id,
                "state": ctx.state,
                "revision": ctx.revision,
                "status": ctx.execution.status.value if ctx.execution is not None else None,
                "approval_request_id": ctx.execution.approval_request.request_id
                if ctx.execution is not None and ctx.execution.approval_request is not None
                else None,
                "recovery": ctx.recovery_announcement,
            }

        return self.runtime.dispatcher.call(view).result(10)

    # ------------------------------------------------------ loop-thread helpers

    def base_messages(self) -> list[Message]:
        """System prompt and the conversation of completed executions."""
        head = [Message("system", self.system_prompt)] if self.system_prompt else []
        return head + list(self.history)

    def _detach(self, ctx: Invocation) -> None:
        self._live.pop(ctx.execution_id, None)
        if self._current is ctx:
            self._current = None

    def _remember(self, ctx: Invocation) -> None:
        self.history.extend(
            m for m in ctx.messages[ctx.base_len :] if m.role in ("user", "assistant", "tool")
        )

    def _next_pending_handoff(self) -> None:
        """Start the oldest pending handoff found at load when this agent is idle (loop
        thread; called again after each delivery while some remain)."""
        if self._closed or self._admission_sid is not None or not self._pending_handoffs:
            return
        pending = self._pending_handoffs.popleft()
        log.info(
            "agent %s: starting handoff %s from execution %s",
            self.agent_id,
            pending.target_execution_id,
            pending.source_execution_id,
        )
        self._begin(
            pending.text,
            "invoke",
            Task("handoff target"),
            self.timeout_seconds,
            pending.target_execution_id,
            None,
        )

    def _start_handoff_target(self, ctx: Invocation) -> None:
        """Start the handoff target's execution under its deterministic id when the
        target agent is live in this runtime — at once when it is idle, else after its
        current execution (otherwise loading the target agent starts it, or the
        application does with ``invoke(..., execution_id=result.handoff[
        'target_execution_id'])``)."""
        from phronomy_fsm.agent.recovery import PendingHandoff

        handoff = ctx.handoff or {}
        target = self.runtime.agents.get(
            (store_identity(self.store), str(handoff.get("target_agent_id")))
        )
        if target is None:
            return
        message = (
            handoff.get("arguments", {}).get("message")
            if isinstance(handoff.get("arguments"), dict)
            else None
        )
        target._pending_handoffs.append(
            PendingHandoff(
                ctx.execution_id,
                target.agent_id,
                handoff["target_execution_id"],
                message or (ctx.filtered_input or str(ctx.raw_input)),
            )
        )
        target._next_pending_handoff()


class EventStream:
    """The events of one streamed execution, in order, ending with its terminal event
    (``done``, ``handoff``, ``error``, ``timeout`` or ``cancelled``).

    Iterate it, then call :meth:`result` for the :class:`AgentResult` (which raises the
    execution's error if it failed)."""

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

    def result(self, timeout_seconds: float | None = None) -> AgentResult:
        """The execution's result (waits; raises its error)."""
        return self.task.result(timeout_seconds)
