"""After a barrier outcome that could not be proven: read the durable record back and
act on what the store holds (issue 11 items 4 and 5; docs/operations.md "Reading and
answering a resolution request").

An execution whose barrier response was lost and whose read-back failed, whose commit
conflicted, or whose session failed, parks in ``recovery_required`` (the
``agent_session`` spec: fail closed). Before anyone is told anything, this module
reads the execution's record, its agent root and its journal back off the loop
(retrying after a passing storage error), rebuilds the live context from them exactly
as a load would (:func:`~phronomy_fsm.agent.recovery.rebuild_from_store` — so no
answer or tool result is journaled twice), and then acts on the stored state:

=====================================  ===============================================
stored                                 what happens
=====================================  ===============================================
no execution (admission not committed)  a known pre-durable failure: the slot is released
                                       and the caller's task fails with the error
a terminal status                      delivered as such (event, then tasks), slot released
``suspended`` / ``approval``           waits for approval: ``approval_required`` again
                                       (a decision in flight is refused: approve again);
                                       a cancel requested meanwhile takes effect
a restart-safe continuation            continues as :meth:`Agent.load` would
anything else                          ``recovery_resolution_required`` with the subject
                                       and the allowed outcomes
the read-back itself failed            ``recovery_resolution_required`` from the live
                                       view, ``facts.read_error`` saying why
=====================================  ===============================================

Must not: commit anything (acting means delivering, waiting or continuing through the
normal barriers), or run on any thread but the loop for the acting part.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from phronomy_fsm.agent import recovery
from phronomy_fsm.errors import (
    ApprovalError,
    DispatcherStoppedError,
    ExecutionFailedError,
    NotFoundError,
    StorageError,
)
from phronomy_fsm.store.records import ExecutionRecord
from phronomy_fsm.table import BarrierOutcome

if TYPE_CHECKING:
    from phronomy_fsm.agent.invocation import Invocation
    from phronomy_fsm.agent.runtime import AgentRuntime

log = logging.getLogger("phronomy_fsm.agent")

#: Seconds to wait before each new attempt when reading back fails (a locked or busy
#: database passes; a store that stays unreadable is reported as ``read_error``).
READ_RETRY_DELAYS: tuple[float, ...] = (0.05, 0.2, 0.5, 1.0, 2.0)


def announce_recovery(runtime: AgentRuntime, ctx: Invocation, cause: BaseException | None) -> None:
    """Start the read-back of ``ctx``'s durable state on a worker; the loop then acts
    on it (module docstring). ``cause`` is the error that parked the execution
    (an unproven barrier's error, a session failure); it is named in what follows.

    Concurrency: loop thread. Until the read-back is acted on, ``ctx`` has no
    ``recovery_announcement`` and a ``resolve`` is refused (it would be answering a
    request nobody has made yet)."""
    store = ctx.agent.store
    execution_id = ctx.execution_id
    agent_id = ctx.agent.agent_id
    ctx.recovery_announcement = None

    def read() -> tuple[ExecutionRecord | None, Any, list[Any]]:
        delays = iter(READ_RETRY_DELAYS)
        while True:
            try:
                root = store.load_agent(agent_id)
                try:
                    execution = store.load_execution(execution_id)
                except NotFoundError:
                    return None, root, []
                return execution, root, store.read_journal(agent_id, execution_id=execution_id)
            except StorageError as exc:
                delay = next(delays, None)
                if delay is None:
                    raise
                log.info(
                    "execution %s: read-back failed (%r); again in %.2f s", execution_id, exc, delay
                )
                time.sleep(delay)

    def done(op: Any) -> None:
        try:
            runtime.dispatcher.call_soon(act_on_store, runtime, ctx, op.value, op.error, cause)
        except DispatcherStoppedError:  # the runtime closed meanwhile: durable as is
            log.debug("execution %s: read back after the loop stopped", execution_id)

    try:
        op = runtime.pool.submit(read, name="recovery-readback", on_full="raise")
    except Exception as exc:  # noqa: BLE001 - no worker: act on the live view
        act_on_store(runtime, ctx, None, exc, cause)
        return
    op.add_settled_callback(done)


def act_on_store(
    runtime: AgentRuntime,
    ctx: Invocation,
    stored: tuple[ExecutionRecord | None, Any, list[Any]] | None,
    read_error: BaseException | None,
    cause: BaseException | None,
) -> None:
    """Act on the read-back ``stored`` = ``(execution or None, agent root, journal
    records)`` of ``ctx`` (module docstring), or on the live view when ``read_error``
    says the read failed. A no-op when the execution moved on meanwhile (delivered,
    resumed by someone, or the runtime closed). Loop thread."""
    if ctx.delivered or ctx.session_id is not None or ctx.state != "recovery_required":
        return
    if runtime.closed:
        return
    if stored is None or read_error is not None:
        _announce_live_view(runtime, ctx, read_error, cause)
        return
    execution, root, records = stored
    agent = ctx.agent
    if root.revision >= agent.root.revision:
        agent.root = root  # an unproven barrier may have moved it
    if execution is None:
        if ctx.execution is None:
            _deliver_not_admitted(runtime, ctx, cause)
        else:  # a durable execution cannot vanish while active: say what we know
            _announce_live_view(runtime, ctx, None, cause)
        return
    execution = recovery.pin_to_current_spec(execution)
    live_outcome, live_error = ctx.outcome, ctx.error
    recovery.rebuild_from_store(ctx, execution, records)
    if not execution.is_active:
        _deliver_stored(runtime, ctx, execution, live_outcome, live_error)
        return
    classification = recovery.classify(execution)
    if classification.kind == recovery.SUSPENDED:
        _wait_for_approval(runtime, ctx, cause)
    elif (
        classification.kind == recovery.CONTINUE and ctx.readback_continued_at != execution.revision
    ):
        _continue(runtime, ctx, execution, classification)
    else:
        runtime.seat_admission(agent, "recovery_required")
        _announce(runtime, ctx, recovery.announce_payload(execution, classification, cause))


def _announce(runtime: AgentRuntime, ctx: Invocation, payload: dict[str, Any]) -> None:
    if ctx.abort is not None:  # a cancel waits for the operator's answer (operations.md)
        payload["facts"]["cancel_requested"] = ctx.abort.kind
    ctx.recovery_announcement = payload
    runtime.emit(ctx, "recovery_resolution_required", payload)


def _announce_live_view(
    runtime: AgentRuntime,
    ctx: Invocation,
    read_error: BaseException | None,
    cause: BaseException | None,
) -> None:
    """The store could not be read: announce from the last committed state known here."""
    execution = ctx.execution
    if execution is None:  # never admitted durably as far as this process knows
        payload: dict[str, Any] = {
            "execution_id": ctx.execution_id,
            "execution_revision": None,
            "reason": f"admission outcome unknown: {cause!r}",
            "subject": None,
            "allowed_outcomes": [],
            "facts": {},
        }
    else:
        payload = recovery.announce_payload(execution, recovery.classify(execution), cause)
    if read_error is not None:
        payload["facts"]["read_error"] = f"{type(read_error).__name__}: {read_error}"
    _announce(runtime, ctx, payload)


def _deliver_not_admitted(
    runtime: AgentRuntime, ctx: Invocation, cause: BaseException | None
) -> None:
    """The admission did not commit (the read-back finds no execution after the failed
    commit): a known pre-durable failure. The slot is released; the caller's task
    fails with the admission's error."""
    ctx.state = ctx.outcome = "failed"
    ctx.error = cause or ExecutionFailedError(
        f"execution {ctx.execution_id} was never admitted",
        execution_id=ctx.execution_id,
        status="failed",
    )
    runtime.seat_admission(ctx.agent, None)
    runtime.deliver(ctx)


def _deliver_stored(
    runtime: AgentRuntime,
    ctx: Invocation,
    execution: ExecutionRecord,
    live_outcome: str | None,
    live_error: BaseException | None,
) -> None:
    """The terminal commit did happen: deliver that outcome (the live error when it is
    the one committed, else one rebuilt from the record)."""
    status = execution.status.value
    ctx.state = ctx.outcome = status
    if status == "completed":
        ctx.output = execution.output
    elif status == "handed_off":
        handoff = execution.metadata.get("handoff")
        ctx.handoff = handoff if isinstance(handoff, dict) else None
    elif status != "rejected":
        if live_outcome == status and live_error is not None:
            ctx.error = live_error
        else:
            info = execution.error
            ctx.error = ExecutionFailedError(
                info.render()
                if info is not None
                else f"execution {ctx.execution_id} ended {status}",
                execution_id=ctx.execution_id,
                status=status,
            )
    runtime.seat_admission(ctx.agent, None)
    runtime.deliver(ctx)


def _wait_for_approval(runtime: AgentRuntime, ctx: Invocation, cause: BaseException | None) -> None:
    """Durably suspended: wait for a decision again (a decision whose commit was in
    flight did not happen); a cancel requested meanwhile takes effect at once."""
    ctx.state = "suspended"
    runtime.seat_admission(ctx.agent, "suspended")
    if ctx.approvers:
        runtime.fail_approvers(
            ctx,
            ApprovalError(
                f"the decision for execution {ctx.execution_id} did not commit (its outcome was "
                f"unknown: {cause}; the store shows the execution still suspended); approve again",
                execution_id=ctx.execution_id,
            ),
        )
    if ctx.abort is not None:
        runtime.start_execution(
            ctx, at_state="suspended", event="cancel_requested", payload=ctx.abort
        )
        return
    runtime.announce_approval(ctx)


def _continue(
    runtime: AgentRuntime, ctx: Invocation, execution: ExecutionRecord, classification: Any
) -> None:
    """The store holds a restart-safe point: continue from it as a load would (once per
    revision; if that leads straight back here, the request is announced instead)."""
    ctx.readback_continued_at = execution.revision
    runtime.seat_admission(ctx.agent, recovery.admission_slot_for(classification))
    runtime.start_execution(
        ctx,
        at_state=classification.state,
        event=classification.event,
        payload=BarrierOutcome("committed", execution.revision),
    )
    if ctx.abort is not None and ctx.session_id is not None:
        runtime.dispatcher.post(ctx.session_id, "cancel_requested", ctx.abort)
