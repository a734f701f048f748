"""The agent's executions on a durable runtime: starting them, following them, handoffs.

:class:`AgentExecutions` is the one place that turns agent operations into engine
operations and back for one :class:`~phronomy_fsm.durable.runtime.DurableRuntime` and its
:class:`~phronomy_fsm.agent.directory.AgentDirectory`: it starts executions without
blocking (their callers registered first), follows executions run elsewhere through the
store, resumes an agent's executions on load, and is the directory's
:class:`~phronomy_fsm.agent.directory.DirectoryActions` — it starts a committed
handoff's target where that agent is loaded (now, or after its current execution) and
fails an execution whose listener raised. Store work asked for on the loop thread runs on
one side thread. An :class:`~phronomy_fsm.agent.runtime.AgentRuntime` owns one; so does
every runtime built from an :func:`~phronomy_fsm.agent.app.agent_app` (``DurableApp.attach``).
The rules: ``docs/agent.md`` ("Handoffs", "Loading an agent").
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from phronomy_fsm.agent.context import SessionContext
from phronomy_fsm.agent.directory import AgentDirectory, Caller
from phronomy_fsm.durable.codec import json_data
from phronomy_fsm.durable.keys import new_execution_id
from phronomy_fsm.errors import (
    AgentBusyError,
    ExecutionExistsError,
    PhronomyError,
    RuntimeClosedError,
)
from phronomy_fsm.generated import agent_session
from phronomy_fsm.runtime.tasks import Task

log = logging.getLogger("phronomy_fsm.agent")


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
    machines (an :func:`~phronomy_fsm.agent.app.agent_app`, or an agent runtime's); at
    most one is active per agent. Returns ``(execution_id, created)``: starting an id
    that exists starts nothing (``created`` False).

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


class AgentExecutions:
    """The agent operations of one durable runtime (module docstring).

    Args:
        durable: the runtime running the agent's machines.
        directory: its directory; this object becomes its ``actions``.
        name: the side thread's name prefix.
    """

    def __init__(
        self, durable: Any, directory: AgentDirectory, *, name: str = "phronomy-agents"
    ) -> None:
        self.durable = durable
        self.store = durable.store
        self.directory = directory
        directory.actions = self
        self.lock = threading.RLock()
        self._side = ThreadPoolExecutor(1, thread_name_prefix=f"{name}-side")
        self._handoffs: dict[str, collections.deque[dict[str, Any]]] = {}
        self._closed = False

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeClosedError(f"the agent runtime {self.durable.name} is closed")

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
            self.durable.dispatcher.call_soon(self.directory.add_caller, eid, caller)

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
                    self.durable.engine.post(self.directory.settle_callers, record)
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
                self.durable.dispatcher.call_soon(self.directory.drop_callers, eid, exc)
            raise
        return outcome

    def observe(self, execution_id: str, caller: Caller) -> None:
        """Make ``caller`` wait for ``execution_id`` (an ``agent_session``
        execution): settled by this runtime's directory when it runs the execution,
        else by a thread watching the store (another worker runs it). Any thread but
        the loop."""
        self.durable.dispatcher.call(self.directory.add_caller, execution_id, caller).result(10)
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
            if not self._closed:  # posted: the runtime may close meanwhile
                self.durable.engine.post(self.directory.settle_callers, record)

        name = f"{self.durable.name}-watch-{execution_id[:8]}"
        threading.Thread(target=watch, name=name, daemon=True).start()

    def _forget_caller(
        self, execution_id: str, caller: Caller | None, error: BaseException
    ) -> None:
        if caller is None:
            return
        try:
            self.durable.dispatcher.call_soon(
                self.directory.drop_caller, execution_id, caller.task, error
            )
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
            self._queue_next_handoff(agent_id)

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
            self._queue_next_handoff(agent_id)

    def _queue_next_handoff(self, agent_id: str) -> None:
        """Start the next queued handoff to ``agent_id`` off the loop; the durable
        runtime counts it as a start on its way until it has begun or failed, so
        waiting for the runtime to rest (``recover``, ``close``) waits for it."""
        release = self.durable.hold()
        if self._closed:
            release()
            return
        try:
            future = self._side.submit(self._next_handoff, agent_id, release)
        except RuntimeError:  # shut down meanwhile
            release()
            log.debug("side work dropped: the runtime is closing")
            return
        # dropped unrun by close(): nothing is on its way any more
        future.add_done_callback(lambda f: release() if f.cancelled() else None)

    def _next_handoff(self, agent_id: str, release: Callable[[], None]) -> None:
        try:
            self._start_next_handoff(agent_id, release)
        except BaseException:
            release()
            raise

    def _start_next_handoff(self, agent_id: str, release: Callable[[], None]) -> None:
        with self.lock:
            queue = self._handoffs.get(agent_id)
            if not queue:
                release()
                return
            handoff = queue[0]
        if self.directory.live(agent_id) is None or self._closed:
            release()
            return

        def done(task: Task[Any]) -> None:
            release()
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
                self._queue_next_handoff(agent_id)

        try:
            self.start(
                agent_id,
                handoff.get("message") or "",
                execution_id=str(handoff["target_execution_id"]),
                timeout_seconds=self.directory.config(agent_id).timeout_seconds,
            ).add_done_callback(done)
        except PhronomyError as exc:
            release()
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

    def close(self) -> None:
        """Stop: queued side work is dropped, the work running finishes. Idempotent."""
        self._closed = True
        self._side.shutdown(wait=True, cancel_futures=True)


__all__ = ["AgentExecutions", "start_execution", "start_execution_async"]
