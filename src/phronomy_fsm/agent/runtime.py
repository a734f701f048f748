"""The agent runtime: one dispatcher and offload pool shared by agents, and the glue
between the generated machines and the agents' live state.

An :class:`AgentRuntime` binds the three generated machines once — ``agent_session``
(with :class:`~phronomy_fsm.agent.session_hooks.AgentSessionHooks`), ``tool_invocation``
(with :class:`~phronomy_fsm.agent.tool_hooks.ToolInvocationHooks`) and
``execution_admission`` (no hooks) — and keeps the registry of live agents (reference
§3.1: one live Agent object per agent id). It owns: listener delivery and the error
policy (§8.4), cancellation and timeouts (§7.5), the admission slot sessions (§3), the
submission of barrier commits with reconciliation of lost responses (§4.4), and terminal
delivery in the reference's order: live state applied, slot released, event delivered,
tasks settled (§4.6).

Everything but :meth:`AgentRuntime.close`, :meth:`AgentRuntime.default` and the
constructor runs on the dispatcher's loop thread.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

import attrs

from phronomy_fsm.agent import callers
from phronomy_fsm.agent.invocation import Invocation, ToolInvocation
from phronomy_fsm.agent.session_hooks import AgentSessionHooks, PreparedCommit
from phronomy_fsm.agent.stores import release_store
from phronomy_fsm.agent.tool_hooks import ToolInvocationHooks
from phronomy_fsm.agent.types import AbortReason, AgentEvent, AgentResult
from phronomy_fsm.errors import (
    HOOK_ERRORS,
    AgentBusyError,
    Cancelled,
    ConflictError,
    ExecutionFailedError,
    ExecutionTimeoutError,
    OutcomeUnknownError,
    PhronomyError,
    StorageError,
    StoreError,
    StreamCallbackError,
)
from phronomy_fsm.generated import agent_session, execution_admission, tool_invocation
from phronomy_fsm.runtime import Dispatcher, OffloadPool, SessionResult, bind_machine
from phronomy_fsm.runtime.clock import SYSTEM_CLOCK, Clock
from phronomy_fsm.store.base import COMMITTED, NOT_COMMITTED
from phronomy_fsm.table import CONFLICT, OUTCOME_UNKNOWN, BarrierOutcome, PendingBarrier
from phronomy_fsm.table import NOT_COMMITTED as OUTCOME_NOT_COMMITTED

if TYPE_CHECKING:
    from phronomy_fsm.agent.agent import Agent
    from phronomy_fsm.store.base import BarrierStore
    from phronomy_fsm.store.ownership import AgentClaim

log = logging.getLogger("phronomy_fsm.agent")

FINAL_STATES = frozenset({"completed", "rejected", "blocked", "handed_off", "failed", "cancelled"})

#: agent_session (source, target) → execution_admission events (reference §3.3 rules).
_ADMISSION_BY_STEP: dict[tuple[str, str], tuple[str, ...]] = {
    ("admitting", "filtering_input"): ("bound",),
    ("admitting", "cancelling"): ("bound", "cancel_started"),
    ("admitting", "failed"): ("not_established",),
    ("suspending", "suspended"): ("suspended",),
    ("suspended", "resuming"): ("resume_started",),
    ("resuming", "suspended"): ("resume_refused",),
    ("resuming", "evaluating_tools"): ("resume_committed",),
    ("resuming", "cancelling"): ("resume_committed", "cancel_started"),
    ("recovery_required", "resolving"): ("resolution_started",),
    ("resolving", "recovery_required"): ("resolution_pending",),
}


class _NoHooks:
    """execution_admission declares no hooks."""


#: Seconds to wait before each resubmission of a barrier commit that found the database
#: locked (see :meth:`AgentRuntime.submit_barrier`); with the store's busy timeout on
#: every attempt, a lock held for up to about 6 * busy_timeout + 3.75 s is ridden out.
BUSY_RETRY_DELAYS: tuple[float, ...] = (0.05, 0.2, 0.5, 1.0, 2.0)


def _is_busy(error: BaseException) -> bool:
    """A StorageError for a database locked by another connection (nothing written)."""
    code = getattr(error, "sqlite_error", None) if isinstance(error, StorageError) else None
    return isinstance(code, str) and code.startswith(("SQLITE_BUSY", "SQLITE_LOCKED"))


class AgentRuntime:
    """Shared infrastructure of agents (see the module docstring).

    Args:
        max_workers: offload-pool worker threads (LLM calls, tools, filters).
        queue_size: operations that may wait for a worker (beyond that: backpressure).
        clock: the clock for timers and record timestamps.
        name: thread-name prefix.
    """

    _default: AgentRuntime | None = None
    _default_lock = threading.Lock()

    def __init__(
        self,
        *,
        max_workers: int = 16,
        queue_size: int = 1024,
        clock: Clock = SYSTEM_CLOCK,
        name: str = "phronomy-agents",
    ) -> None:
        self.clock = clock
        self.pool = OffloadPool(max_workers, queue_size, clock=clock, name=f"{name}-offload")
        self.dispatcher = Dispatcher(pool=self.pool, clock=clock, name=f"{name}-loop")
        self.session_hooks = AgentSessionHooks(self)
        self.session_binding = bind_machine(
            agent_session.TABLE,
            self.session_hooks,
            on_transition=self._on_agent_step,
            on_barrier_outcome=self.session_hooks.apply_barrier_outcome,
        )
        self.tool_binding = bind_machine(tool_invocation.TABLE, ToolInvocationHooks(self))
        self.admission_binding = bind_machine(execution_admission.TABLE, _NoHooks())
        self.agents: dict[tuple[Any, str], Agent] = {}
        self.registry_lock = threading.Lock()
        #: agents of this runtime whose store claim is not yet released
        self.claim_holders: set[Agent] = set()
        self._claims_lock = threading.Lock()  # held only to swap an agent's claim, never for I/O
        self.closed = False
        self.dispatcher.on_failure(self._loop_failed)
        self.dispatcher.start()

    @classmethod
    def default(cls) -> AgentRuntime:
        """The process-wide runtime, created on first use."""
        with cls._default_lock:
            current = cls._default
            if current is None or current.closed or current.dispatcher.lifecycle == "failed":
                current = cls._default = cls()
            return current

    def close(self, *, timeout_seconds: float = 10.0) -> None:
        """Refuse new executions, let running ones reach a resting point (done,
        suspended for approval, or waiting for an operator — reference §7.1: those do
        not hold a clean shutdown), then stop the loop and the pool. Whatever is left
        is durable as of its last barrier; load the agent again to recover it.

        Ownership: then the store claims of this runtime's agents are released (on the
        calling thread), so another process may load them — unless work was still in
        flight when the loop stopped (a tool or LLM call that did not return within
        ``timeout_seconds``): then the claims stay until this process exits, because
        that work may still have its effect here.

        Callers: every task still waiting on an execution of this runtime — an invoke
        whose execution is suspended or waits for an operator, or one the stopping
        loop cut off — fails with :class:`~phronomy_fsm.errors.ExecutionDetachedError`,
        which says how to continue it (issue 11 item 6); nobody waits for ever."""
        self.closed = True
        deadline = time.monotonic() + timeout_seconds
        self._wait_for_rest(deadline)
        with contextlib.suppress(PhronomyError):  # the loop already stopped or failed
            self.dispatcher.call(self._detach_all, "the runtime was closed").result(
                max(1.0, deadline - time.monotonic())
            )
        clean = self.dispatcher.stop(
            timeout_seconds=max(0.0, deadline - time.monotonic()), wait_for_sessions=False
        )
        # executions the stopping loop cut off (still running): their callers too
        self._detach_all("the runtime was closed", running=True)
        self.pool.shutdown(wait=True, timeout_seconds=timeout_seconds)
        with self._claims_lock:
            holders = list(self.claim_holders)
        if holders and not clean:
            log.warning(
                "runtime closed with work still in flight; agents %s stay claimed by this "
                "process until it exits",
                sorted(a.agent_id for a in holders),
            )
            return
        for agent in holders:
            self.release_claim(agent)

    def _known_agents(self) -> list[Agent]:
        """Every agent of this runtime that may still hold live executions: the open
        ones and the closed ones whose store claim is not released yet."""
        with self._claims_lock:
            agents = set(self.claim_holders)
        with self.registry_lock:
            agents.update(self.agents.values())
        return sorted(agents, key=lambda a: a.agent_id)

    def _loop_failed(self, error: BaseException) -> None:
        """The dispatcher loop failed (:meth:`EventLoop.on_failure`, on the dying loop
        thread): fail every task still waiting on an execution of this runtime with a
        DispatcherStoppedError saying how to continue (:mod:`phronomy_fsm.agent.callers`;
        issue 11 item 3)."""
        for agent in self._known_agents():
            callers.fail_after_loop_failure(agent, error)

    def _detach_all(self, why: str, *, running: bool = False) -> None:
        """:func:`~phronomy_fsm.agent.callers.detach_resting` for every agent of this
        runtime. Loop thread, or any thread once the loop has stopped."""
        for agent in self._known_agents():
            callers.detach_resting(agent, why, running=running)

    def fail_approvers(self, ctx: Invocation, error: BaseException) -> None:
        """Fail the approve calls whose decision did not commit."""
        for task in ctx.approvers:
            task.fail(error)
        ctx.approvers.clear()

    def _wait_for_rest(self, deadline: float) -> None:
        """Until ``deadline`` (monotonic seconds), wait for every live execution of this
        runtime — of open and of closed agents — to be delivered or halted (suspended,
        waiting for an operator): an answer that is on its way is applied and made
        durable instead of being dropped by the stopping loop."""

        def resting() -> bool:
            return all(
                ctx.session_id is None
                for agent in self._known_agents()
                for ctx in agent._live.values()
            )

        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            try:
                if self.dispatcher.call(resting).result(remaining):
                    return
            except PhronomyError:  # the loop stopped or failed, or the deadline passed
                return
            time.sleep(min(0.02, max(0.0, deadline - time.monotonic())))

    def now(self) -> datetime:
        """Wall time for records (aware UTC)."""
        return self.clock.now()

    # ---------------------------------------------------------------- ownership

    def hold_claim(self, agent: Agent, claim: AgentClaim) -> None:
        """Record that ``agent`` holds ``claim`` (made by Agent.create/load), so that
        :meth:`close` or :meth:`release_claim` releases it."""
        with self._claims_lock:
            agent._claim = claim
            self.claim_holders.add(agent)

    def release_claim(
        self,
        agent: Agent,
        *,
        blocking: bool = True,
        on_released: Callable[[], object] | None = None,
    ) -> None:
        """Release ``agent``'s store claim (docs/operations.md "Who owns an agent"),
        then its lease on a store opened from a path (agent/stores.py: the last lease
        closes that store).

        The claim is taken from the agent first, so it is released at most once.
        ``blocking``: release on the calling thread (never the loop thread); else
        (loop thread) on a short-lived thread of its own, which also retries a store
        that stays locked after each delay of :data:`BUSY_RETRY_DELAYS`. A failing
        release is logged: the row then stays until this process exits and the next
        claimant takes it over. ``on_released()`` is called once the release is over
        (whatever its outcome; at once when there is no claim). Never raises.
        """
        with self._claims_lock:
            claim, agent._claim = agent._claim, None
            lease, agent._store_lease = agent._store_lease, None
            self.claim_holders.discard(agent)
        if claim is None:
            release_store(lease)
            if on_released is not None:
                on_released()
            return
        store = agent.store

        def release(retry_delays: tuple[float, ...] = ()) -> None:
            delays = iter(retry_delays)
            while True:
                try:
                    store.release_agent(claim.agent_id, claim.owner_token)
                    break
                except Exception as exc:  # noqa: BLE001 - logged; the row goes with the process
                    delay = next(delays, None) if _is_busy(exc) else None
                    if delay is None:
                        log.warning(
                            "agent %s: could not release its claim: %r", claim.agent_id, exc
                        )
                        break
                    time.sleep(delay)  # a passing lock: try again
            release_store(lease)  # a store opened from a path closes with its last agent
            if on_released is not None:
                on_released()

        if blocking:
            release()
            return
        # its own thread, never the offload pool: a release must not queue behind
        # long tool calls (Agent.close waits for it); a passing lock is retried
        threading.Thread(
            target=release, args=(BUSY_RETRY_DELAYS,), name="phronomy-release", daemon=True
        ).start()

    def release_claim_when_idle(
        self, agent: Agent, on_settled: Callable[[], object] | None = None
    ) -> None:
        """Release a closed agent's claim once none of its executions is running here
        (loop thread): every live execution is delivered, or halted (suspended,
        waiting for an operator) with no offloaded work of it still in flight
        (reference §7.5 quiescence). Called by :meth:`Agent.close` and whenever one of
        its sessions ends; a no-op for an open agent or one without a claim.

        ``on_settled()`` is called once this call has done what it can at once: after
        the release when the agent is idle now, else right away (the release then
        happens later, when its executions come to rest)."""
        # ``waiting`` holds on_settled while this call runs: a release that happens
        # synchronously below settles it when done; otherwise it is settled at the end
        waiting = [on_settled]

        def take_waiter() -> Callable[[], object] | None:
            waiter, waiting[0] = waiting[0], None
            return waiter

        live = list(agent._live.values())
        if (
            agent._closed
            and agent._claim is not None
            and not any(
                ctx.session_id is not None
                for ctx in live  # else: called again when it ends
            )
        ):
            if not live:
                self.release_claim(agent, blocking=False, on_released=take_waiter())
            else:
                remaining = [len(live)]

                def quiet() -> None:
                    remaining[0] -= 1
                    if remaining[0] == 0 and not any(
                        ctx.session_id is not None for ctx in agent._live.values()
                    ):
                        # nothing settles their callers through this closed object
                        callers.detach_resting(agent, f"agent {agent.agent_id!r} was closed")
                        self.release_claim(agent, blocking=False, on_released=take_waiter())

                for ctx in live:
                    self.dispatcher.when_quiescent(ctx.execution_id, quiet)
        waiter = take_waiter()
        if waiter is not None:
            waiter()

    def arm_deadline(self, ctx: Invocation, delay_seconds: float) -> None:
        """Abort ``ctx`` with :class:`ExecutionTimeoutError` after ``delay_seconds``
        (loop thread; at once when not positive). Its ``deadline_at`` is durable from
        admission, so recovery re-arms the rest of it (:func:`install_recovered`)."""
        deadline = ctx.deadline_at.isoformat() if ctx.deadline_at is not None else "?"
        error = ExecutionTimeoutError(
            f"execution {ctx.execution_id} ran past its deadline ({deadline})",
            execution_id=ctx.execution_id,
        )
        ctx.timer = self.dispatcher.call_later(
            max(0.0, delay_seconds), self.abort, ctx, AbortReason("timeout", error)
        )

    # ---------------------------------------------------------------- sessions

    def start_execution(
        self,
        ctx: Invocation,
        *,
        at_state: str | None = None,
        event: str | None = None,
        payload: Any = None,
    ) -> None:
        """Start (or resume) the ``agent_session`` of ``ctx`` (loop thread)."""
        agent = ctx.agent
        ctx.session_id = self.dispatcher.start_session(
            self.session_binding,
            ctx,
            at_state=at_state,
            event=event,
            payload=payload,
            group=ctx.execution_id,
            revision=None,
            on_done=lambda result, error: self._session_done(ctx, result, error),
            step_limit=64 + 32 * agent.max_iterations,
        )
        if at_state is not None:
            ctx.state = at_state

    def start_admission(self, agent: Agent, at_state: str | None = None) -> None:
        """Take the agent's admission slot (reference §3.2 admit)."""
        agent._admission_sid = self.dispatcher.start_session(
            self.admission_binding,
            agent,
            at_state=at_state,
            on_done=lambda result, error: self._admission_done(agent, result, error),
        )

    def post_admission(self, agent: Agent, event: str) -> None:
        """Tell the agent's admission slot what happened."""
        if agent._admission_sid is not None:
            self.dispatcher.post(agent._admission_sid, event)

    def _on_agent_step(self, ctx: Invocation, source: str, target: str) -> None:
        ctx.state = target
        if source == target:
            return
        events = _ADMISSION_BY_STEP.get((source, target))
        if events is None:
            if target == "cancelling":
                events = ("cancel_started",)
            elif target == "terminalizing":
                events = ("terminal_started",)
            elif target in FINAL_STATES and source == "terminalizing":
                events = ("terminal_committed",)
            elif target == "recovery_required":
                events = ("recovery_needed",)
            else:
                return
        for event in events:
            self.post_admission(ctx.agent, event)

    def _session_done(
        self, ctx: Invocation, result: SessionResult | None, error: BaseException | None
    ) -> None:
        ctx.session_id = None
        if error is not None and (self.closed or self.dispatcher.lifecycle == "failed"):
            # the runtime closed while this session was parked, or its loop failed:
            # durable as is; close() or _loop_failed tells the waiting callers
            return
        if ctx.agent._closed and ctx.agent._claim is not None:
            self.dispatcher.call_soon(self.release_claim_when_idle, ctx.agent)
        if error is not None:
            log.error("execution %s: session failed: %s; failing closed", ctx.execution_id, error)
            ctx.state = "recovery_required"
            self.post_admission(ctx.agent, "recovery_needed")
            self.announce_recovery(ctx, error)
            return
        assert result is not None
        ctx.state = result.state
        if result.status == "halted":
            if result.state == "suspended" and ctx.abort is not None:
                # a cancel requested while an approval decision's barrier was in flight
                # that did not commit: cancel() returned True, so it takes effect now
                self.start_execution(
                    ctx, at_state="suspended", event="cancel_requested", payload=ctx.abort
                )
            return  # suspended or recovery_required: waiters stay pending
        ctx.outcome = ctx.outcome or result.state
        if ctx.agent._admission_sid is None:
            self.deliver(ctx)

    def _admission_done(
        self, agent: Agent, result: SessionResult | None, error: BaseException | None
    ) -> None:
        agent._admission_sid = None
        if error is not None:
            if self.closed:
                return  # the runtime closed while the slot was parked
            log.error("agent %s: admission slot failed: %s", agent.agent_id, error)
        ctx = agent._current
        if ctx is not None and ctx.state in FINAL_STATES and ctx.session_id is None:
            self.deliver(ctx)

    # ------------------------------------------------------------------ children

    def start_child(
        self, child: ToolInvocation, at_state: str | None = None, event: str | None = None
    ) -> None:
        """Start a tool invocation session: from its initial state (validation and
        authorization), or as a new incarnation at ``at_state`` fired with ``event``."""
        child.session_id = self.dispatcher.start_session(
            self.tool_binding,
            child,
            at_state=at_state,
            event=event,
            group=child.parent.execution_id,
            on_done=lambda result, error: self._child_done(child, result, error),
        )

    def resume_child(self, child: ToolInvocation, at_state: str, event: str) -> None:
        """Resume a halted tool invocation with ``event`` (dispatch, approve, reject, cancel)."""
        child.status = "running" if event == "dispatch" else "pending"
        self.start_child(child, at_state, event)

    def _child_done(
        self, child: ToolInvocation, result: SessionResult | None, error: BaseException | None
    ) -> None:
        child.session_id = None
        if error is not None:
            child.status = "failed"
            child.error = f"{type(error).__name__}: {error}"
            self.notify_parent(child)
        else:
            assert result is not None
            child.status = result.state
            if child.status == "rejected" and child.rejected_by is None:
                child.rejected_by = "policy"

    def notify_parent(self, child: ToolInvocation) -> None:
        """Post ``tool_updated`` to the parent's live session, if any."""
        parent = child.parent
        if parent.session_id is not None:
            self.dispatcher.post(parent.session_id, "tool_updated", child.tool_invocation_id)

    def cancel_children(self, ctx: Invocation) -> None:
        """Cancel every unfinished tool invocation (live ones through the FSM)."""
        for child in ctx.children:
            if child.session_id is not None:
                self.dispatcher.post(child.session_id, "cancel")
            elif child.status in ("awaiting_approval", "authorized", "pending"):
                child.status = "cancelled"

    def post_when_quiescent(self, ctx: Invocation) -> None:
        """Post ``quiesced`` once the execution's work has physically finished."""
        sid = ctx.session_id
        if sid is not None:
            self.dispatcher.when_quiescent(
                ctx.execution_id, lambda: self.dispatcher.post(sid, "quiesced")
            )

    # ----------------------------------------------------------------- events

    def emit(
        self, ctx: Invocation, type_: str, payload: dict[str, Any], *, terminal: bool = False
    ) -> BaseException | None:
        """Deliver an event to the stream sink and the agent's listener (reference §8.4).

        An in-FSM listener failure detaches the listener for this execution and aborts
        it (failed with StreamCallbackError); a failure on a terminal or notification
        event is reported and returned."""
        event = AgentEvent(type_, ctx.execution_id, payload)
        if ctx.stream_sink is not None:
            ctx.stream_sink(event)
        listener = ctx.agent.on_event
        if listener is None or ctx.listener_detached:
            return None
        try:
            listener(event)
        except HOOK_ERRORS as exc:
            log.warning("agent %s: listener raised on %s: %r", ctx.agent.agent_id, type_, exc)
            if terminal or type_ in ("approval_required", "recovery_resolution_required"):
                return exc
            ctx.listener_detached = True
            error = StreamCallbackError(
                f"the event listener raised on {type_!r}: {exc!r}", execution_id=ctx.execution_id
            )
            error.__cause__ = exc
            self.abort(ctx, AbortReason("callback_failed", error))
            return exc
        return None

    def announce_approval(self, ctx: Invocation) -> None:
        """``approval_required`` with the durable request."""
        request = ctx.approval_request
        if request is None:
            return
        self.emit(
            ctx,
            "approval_required",
            {
                "request": {
                    "id": request.request_id,
                    "execution_id": request.execution_id,
                    "items": [attrs.asdict(item) for item in request.items],
                }
            },
        )

    def announce_recovery(self, ctx: Invocation, error: BaseException | None) -> None:
        """Fail closed, then act on what the store holds: the durable record is read
        back off-loop and the execution is delivered, waits for approval, continues,
        or is announced with ``recovery_resolution_required`` (reference §6.4;
        :mod:`phronomy_fsm.agent.readback`, issue 11 items 4-5)."""
        from phronomy_fsm.agent.readback import announce_recovery

        announce_recovery(self, ctx, error)

    def seat_admission(self, agent: Agent, at_state: str | None) -> None:
        """Replace ``agent``'s admission slot by a new one at ``at_state`` (an
        ``execution_admission`` state), or release it (``None``), without running the
        old one's transitions — for an execution whose durable state was read back and
        differs from what the slot followed (loop thread)."""
        if agent._admission_sid is not None:
            self.dispatcher.discard_session(agent._admission_sid)
            agent._admission_sid = None
        if at_state is not None:
            self.start_admission(agent, at_state=at_state)

    # ------------------------------------------------------------ cancellation

    def abort(self, ctx: Invocation, reason: AbortReason) -> bool:
        """Cancel, time out or fail an execution (reference §7.5): result authority is
        revoked at once; the terminal commit waits for quiescence. Returns False when
        the execution is already ending or waits for an operator."""
        if (
            ctx.abort is not None
            or ctx.delivered
            or ctx.state in FINAL_STATES
            or ctx.state == "recovery_required"
        ):
            return False
        ctx.abort = reason
        ctx.cancellation.cancel(reason.kind, timed_out=reason.kind == "timeout")
        if ctx.session_id is not None:
            self.dispatcher.post(ctx.session_id, "cancel_requested", reason)
        elif ctx.state == "suspended":
            self.start_execution(
                ctx, at_state="suspended", event="cancel_requested", payload=reason
            )
        return True

    # ----------------------------------------------------------------- barriers

    def submit_barrier(self, store: BarrierStore, prepared: PreparedCommit) -> PendingBarrier:
        """Submit one barrier's commit to the store's group-commit writer.

        Returns a :class:`~phronomy_fsm.table.PendingBarrier` that reports the
        :class:`~phronomy_fsm.table.BarrierOutcome` after the store's fsync, a lost
        response having been reconciled by reading back (reference §4.4): ``committed``
        (value: ``prepared``), ``not_committed``, ``conflict``, or ``outcome_unknown``
        when even the read-back failed.

        A commit refused because the database stayed locked past the store's busy
        timeout (another process writing) wrote nothing, so it is submitted again after
        each delay of :data:`BUSY_RETRY_DELAYS` before it counts as not committed: a
        passing lock must not park an execution whose effect already happened."""
        revision = prepared.commit.execution.revision

        def subscribe(report: Callable[[BarrierOutcome], None]) -> None:
            delays = iter(BUSY_RETRY_DELAYS)

            def settle(error: BaseException | None) -> None:
                if error is None:
                    report(BarrierOutcome(COMMITTED, revision, prepared))
                elif _is_busy(error) and (delay := next(delays, None)) is not None:
                    log.info(
                        "barrier %s: database locked, retrying in %.2f s",
                        prepared.commit.barrier,
                        delay,
                    )
                    timer = threading.Timer(delay, submit)
                    timer.daemon = True
                    timer.start()
                elif isinstance(error, OutcomeUnknownError):
                    threading.Thread(
                        target=reconcile, args=(error,), name="phronomy-reconcile", daemon=True
                    ).start()
                elif isinstance(error, (ConflictError, AgentBusyError)):
                    report(BarrierOutcome(CONFLICT, error=error))
                elif isinstance(error, StoreError):
                    report(BarrierOutcome(OUTCOME_NOT_COMMITTED, error=error))
                else:  # not of the taxonomy: it may have written (fail closed, reference §5.1)
                    report(BarrierOutcome(OUTCOME_UNKNOWN, error=error))

            def reconcile(error: OutcomeUnknownError) -> None:
                try:
                    disposition = store.reconcile(prepared.commit)
                except Exception as exc:  # noqa: BLE001 - cannot prove anything
                    log.warning("barrier %s: read-back failed: %r", prepared.commit.barrier, exc)
                    report(BarrierOutcome(OUTCOME_UNKNOWN, error=error))
                    return
                if disposition == COMMITTED:
                    report(BarrierOutcome(COMMITTED, revision, prepared))
                elif disposition == NOT_COMMITTED:
                    report(BarrierOutcome(OUTCOME_NOT_COMMITTED, error=error))
                else:
                    report(BarrierOutcome(CONFLICT, error=error))

            def submit() -> None:
                try:
                    future = store.submit(prepared.commit)
                except BaseException as exc:  # noqa: BLE001 - classified like a commit error
                    settle(exc)
                    return
                future.add_done_callback(lambda f: settle(f.exception()))

            submit()

        return PendingBarrier(subscribe)

    # ------------------------------------------------------------------ delivery

    def deliver(self, ctx: Invocation) -> None:
        """Terminal delivery: live state, slot (already released), event, tasks."""
        if ctx.delivered:
            return
        ctx.delivered = True
        agent = ctx.agent
        if ctx.timer is not None:
            ctx.timer.cancel()
        agent._detach(ctx)
        outcome = ctx.outcome or "failed"
        execution = ctx.execution
        error: BaseException | None = None
        if outcome in ("completed", "rejected", "handed_off"):
            result = AgentResult(
                agent_id=agent.agent_id,
                execution_id=ctx.execution_id,
                status=outcome,
                output=ctx.output if outcome == "completed" else None,
                revision=execution.revision if execution is not None else 0,
                usage=ctx.usage,
                handoff=ctx.handoff if outcome == "handed_off" else None,
            )
            if outcome == "completed":
                agent._remember(ctx)
            event_type = "handoff" if outcome == "handed_off" else "done"
            payload = {
                "status": outcome,
                "output": result.output,
                "execution_id": ctx.execution_id,
                "revision": result.revision,
                "handoff": result.handoff,
            }
        else:
            result = None
            error = ctx.error or ExecutionFailedError(
                f"execution {ctx.execution_id} ended {outcome}",
                execution_id=ctx.execution_id,
                status=outcome,
            )
            if outcome == "cancelled" and not isinstance(error, Cancelled):
                error = Cancelled(str(error) or "cancelled")
            event_type = "cancelled" if outcome == "cancelled" else "error"
            if ctx.abort is not None and ctx.abort.kind == "timeout":
                event_type = "timeout"
            payload = {
                "status": outcome,
                "error": f"{type(error).__name__}: {error}",
                "execution_id": ctx.execution_id,
            }
        listener_error = self.emit(ctx, event_type, payload, terminal=True)
        if (
            listener_error is not None
            and result is not None
            and agent.listener_error_policy == "fail_task"
        ):
            error = StreamCallbackError(
                f"the event listener raised on {event_type!r}: {listener_error!r}",
                execution_id=ctx.execution_id,
            )
            result = None
        waiters = ctx.waiters + ctx.approvers + ctx.resolvers
        ctx.waiters, ctx.approvers, ctx.resolvers = [], [], []
        if ctx.stream_sink is not None:
            ctx.stream_sink(None)
        for task in waiters:
            if result is not None:
                task.complete(result)
            else:
                task.fail(error)  # type: ignore[arg-type]
        if agent._pending_handoffs:  # handoffs to this agent that waited for it
            agent._next_pending_handoff()
        if outcome == "handed_off" and ctx.handoff is not None:
            agent._start_handoff_target(ctx)
