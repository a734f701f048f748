"""Settling the callers of executions this process no longer runs (issue 11 items 3
and 6; docs/getting-started.md "Tools and approval", docs/operations.md "Recovering
after a restart").

An execution's callers — the invoke task, approve and resolve tasks, an event stream
— are settled by its terminal delivery. When the process gives the execution up
first, nothing would ever settle them: the runtime or the agent was closed while the
execution rested (suspended for approval, waiting for an operator) or was cut off
running, or the runtime's dispatcher loop failed. This module fails them instead, with
an error that says the execution lives on in the store and how to continue it. It
never touches the store: the execution stays exactly as its last barrier left it.

Concurrency: on the loop thread, or on any thread once the loop has stopped.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from phronomy_fsm.errors import DispatcherStoppedError, ExecutionDetachedError

if TYPE_CHECKING:
    from phronomy_fsm.agent.agent import Agent
    from phronomy_fsm.agent.invocation import Invocation


def fail_pending(ctx: Invocation, error: BaseException) -> None:
    """Fail every task waiting on ``ctx`` (its invoke, approve and resolve callers)
    with ``error`` and end its event stream; tasks already settled are left alone."""
    tasks = ctx.waiters + ctx.approvers + ctx.resolvers
    ctx.waiters, ctx.approvers, ctx.resolvers = [], [], []
    for task in tasks:
        task.fail(error)
    sink, ctx.stream_sink = ctx.stream_sink, None
    if sink is not None:
        sink(None)


def detach_resting(agent: Agent, why: str, *, running: bool = False) -> None:
    """Fail the tasks waiting on ``agent``'s executions that this process will not
    settle any more — those at rest (no session: suspended, waiting for an operator),
    or with ``running`` every one not delivered — with :func:`detached_error`. ``why``
    says what happened (``the runtime was closed``)."""
    for ctx in list(agent._live.values()):
        if ctx.delivered or (ctx.session_id is not None and not running):
            continue
        if ctx.waiters or ctx.approvers or ctx.resolvers or ctx.stream_sink is not None:
            fail_pending(ctx, detached_error(ctx, why))


def fail_after_loop_failure(agent: Agent, error: BaseException) -> None:
    """The runtime's dispatcher loop failed with ``error``: fail every task waiting on
    ``agent``'s live executions with a DispatcherStoppedError that says the execution
    is durable as of its last barrier and to load the agent in a new runtime."""
    for ctx in list(agent._live.values()):
        fail_pending(
            ctx,
            DispatcherStoppedError(
                f"the dispatcher loop of this runtime failed ({error}); execution "
                f"{ctx.execution_id} of agent {agent.agent_id!r} is durable as of its "
                "last barrier: create a new AgentRuntime and load the agent again "
                "(Agent.load) to continue it",
                execution_id=ctx.execution_id,
                agent_id=agent.agent_id,
            ),
        )


def detached_error(ctx: Invocation, why: str) -> ExecutionDetachedError:
    """The :class:`~phronomy_fsm.errors.ExecutionDetachedError` for the callers of
    ``ctx`` after ``why`` (``the runtime was closed``): what state the execution was
    in, that it lives on in the store, and how to continue it (issue 11 item 6)."""
    agent = ctx.agent
    execution_id = ctx.execution_id
    db = getattr(agent.store, "path", None) or "STORE"
    revision = ctx.revision
    where = f" (revision {revision})" if revision is not None else ""
    load = f"load agent {agent.agent_id!r} again (Agent.load, in a new runtime or process)"
    if ctx.state == "suspended" and ctx.approval_request is not None:
        request = ctx.approval_request.request_id
        state = f"suspended for approval request {request}"
        how = (
            f"{load} and approve it (agent.approve), or from any process: "
            f"`phronomy-fsm approve {execution_id} --request {request} --db {db}`"
        )
    elif ctx.state in ("recovery_required", "resolving"):
        state = "waiting for an operator's resolution"
        how = (
            f"{load} and answer its recovery_resolution_required request with "
            f"agent.resolve, or `phronomy-fsm recover --db {db} --app ...` then "
            "`phronomy-fsm resolve ...`"
        )
    else:
        state = f"still running (state {ctx.state})"
        how = f"{load} to recover it from its last barrier, or `phronomy-fsm recover --db {db} --app ...`"
    return ExecutionDetachedError(
        f"{why} while execution {execution_id} of agent {agent.agent_id!r} was {state}; "
        f"the execution is not lost, it lives on in the store{where}: {how}",
        execution_id=execution_id,
        agent_id=agent.agent_id,
        state=ctx.state,
    )
