"""The exception hierarchy of phronomy_fsm.

Every error the library raises on purpose derives from :class:`PhronomyError`, except
:class:`Cancelled`, which derives from :class:`BaseException` so that a bare
``except Exception`` in application code cannot swallow a cancellation (the same choice
as ``asyncio.CancelledError`` and trio's ``Cancelled``).

Errors carry the ids involved as attributes and a message that says what to do next.
All of them pickle (errors cross the worker boundary and may be logged by other
processes): keyword arguments are kept and replayed by ``__reduce__``.

Layers: spec errors (loading, validation, generation; ``docs/spec-format.md``), runtime
errors (dispatcher, offload pool, tasks), store errors (not-found, conflict, agent-busy,
serialization, storage and outcome-unknown; ``docs/store.md``, "Error taxonomy — what
each means for the caller"), durable-engine errors (``docs/semantics.md``) and agent
errors. Only the CLI turns these into exit codes.
"""

from __future__ import annotations

from typing import Any

#: What application code (a hook, guard, action, listener, callback or offloaded work)
#: may raise that the runtime turns into a failure of that one session, operation or
#: callback instead of letting it end a shared thread: every ``BaseException``. Raised
#: on a loop or worker thread, even ``SystemExit``, ``KeyboardInterrupt``,
#: :class:`Cancelled` and ``GeneratorExit`` can only come from the application's own
#: code (signals go to the main thread; nothing on those threads cancels the thread
#: itself), and ending the shared dispatcher loop or a pool worker would hang every
#: other agent. The error is kept as the ``__cause__`` of the
#: session's :class:`HookError`, or logged for callbacks and listeners; a
#: :class:`Cancelled` raised by a hook is therefore that session's failure, not a
#: cancellation of anything else.
HOOK_ERRORS: tuple[type[BaseException], ...] = (BaseException,)


class PhronomyError(Exception):
    """Root of every error raised on purpose by phronomy_fsm.

    Subclasses pass their identifying values as keyword arguments; they become
    attributes and survive pickling.
    """

    def __init__(self, message: str = "", **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details
        for key, value in details.items():
            setattr(self, key, value)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_error, (type(self), self.message, self.details))

    def __str__(self) -> str:
        return self.message


def _rebuild_error(cls: type[PhronomyError], message: str, details: dict[str, Any]) -> Any:
    err = cls.__new__(cls)
    PhronomyError.__init__(err, message, **details)
    return err


# --- spec layer -------------------------------------------------------------------


class SpecError(PhronomyError):
    """A spec could not be loaded, validated or compiled.

    ``issues`` is a tuple of :class:`phronomy_fsm.spec.issues.SpecIssue`, every problem
    found (never only the first). Render them with ``issue.render()`` as
    ``file:line:col: CODE message``.
    """

    issues: tuple[Any, ...]

    def __init__(self, message: str = "", *, issues: tuple[Any, ...] = ()) -> None:
        super().__init__(message, issues=tuple(issues))


class GenerationError(PhronomyError):
    """The code generator failed for a reason other than an invalid spec (a template
    error, an unwritable output folder)."""


class ProjectConfigError(PhronomyError):
    """The ``[tool.phronomy_fsm]`` table of a ``pyproject.toml`` is missing, unreadable
    or malformed (``path`` names the file, ``key`` the offending key when there is one),
    or one of its spec globs matches no file. Fix the table (keys ``specs``, ``out``,
    ``diagrams``; see docs/spec-format.md "Generated code") or pass the paths on the
    command line."""


class RenderError(PhronomyError):
    """A diagram could not be rendered to an image: the Graphviz ``dot`` binary is
    missing, or it failed on the DOT text. ``format`` is the requested image format
    (``svg``, ``png``) and ``reason`` the cause (``missing`` or ``failed``). Install
    Graphviz (Debian: ``apt-get install graphviz``) or ask for the ``dot`` or
    ``mermaid`` text formats, which need no binary."""


class MissingDependencyError(PhronomyError):
    """An optional dependency is not installed: ``package`` names it and ``extra`` the
    extra that installs it (for example ``transitions`` from
    ``pip install 'phronomy-fsm[interop]'``)."""


# --- runtime layer ----------------------------------------------------------------


class Cancelled(BaseException):
    """The operation was cancelled (explicitly, by a deadline or by a timeout).

    Derives from ``BaseException`` on purpose: ``except Exception`` does not catch it.
    ``reason`` is a short text; ``timed_out`` is true when a deadline caused it.
    """

    def __init__(self, reason: str = "cancelled", *, timed_out: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.timed_out = timed_out

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.reason,), {"timed_out": self.timed_out})


class RuntimeFault(PhronomyError):
    """Base of dispatcher, offload-pool and task errors."""


class WrongThreadError(RuntimeFault):
    """Live state was touched, or a blocking wait was attempted, on the wrong thread
    (``docs/runtime.md``, "The loop": live state is changed on the loop thread only;
    "Tasks": blocking on the loop
    raises)."""


class UndeclaredEventError(RuntimeFault):
    """An event arrived in a state that declares no transition for it and the event is
    not marked ``unhandled: ignore`` (``docs/runtime.md``, "Sessions"). Ends the session."""


class StepLimitError(RuntimeFault):
    """A session exceeded its step limit (``docs/runtime.md``, "Sessions")."""


class MissingHookError(RuntimeFault):
    """The hooks object given for a machine lacks guards, actions or hooks the
    generated Protocol requires; ``missing`` lists every absent name."""


class UnknownSessionError(RuntimeFault):
    """No live session has this id (it finished, halted, or never existed)."""


class DispatchInputError(RuntimeFault, ValueError):
    """``Dispatcher.post``, ``post_authorized`` or ``start_session`` refused an
    argument before anything was queued: an event that is not exactly a ``str``, a
    session id that is not an ``int``, a state or event the machine does not declare,
    a step limit that is not a positive ``int``, or a group that cannot be hashed.
    Nothing reached the loop; other sessions are unaffected. Also a
    ``ValueError``, so callers that caught the old ``ValueError`` still do. Fix the
    call; ``docs/getting-started.md`` "Your own machines" lists what ``post`` takes."""


class DispatcherStoppedError(RuntimeFault):
    """The dispatcher is draining or stopped and refuses new admissions, or it failed
    and every pending waiter was failed with this error."""


class BackpressureError(RuntimeFault):
    """The offload pool's queue is full and ``on_full="raise"`` was requested
    (``docs/runtime.md``, "Offloads and the pool"). The caller decides: retry later or
    fail the step."""


class PoolShutdownError(RuntimeFault):
    """The offload pool is shut down and accepts no more work."""


class TaskTimeoutError(RuntimeFault):
    """A waiter gave up after ``timeout_seconds``; the task itself keeps running
    (``docs/runtime.md``, "Tasks": the timeout is the waiter's own)."""


class HookError(RuntimeFault):
    """A guard, action or hook raised; ``hook`` names it and ``__cause__`` is the
    original error. Ends that session only; the dispatcher and live state of other
    sessions are untouched."""


class SessionFaultError(RuntimeFault):
    """Handling one inbox item of a session raised outside every hook boundary (a
    malformed item, or a defect of the engine); ``__cause__`` is the original error.
    Ends that session only (``machine``, ``state``, ``session_id`` name it); the loop
    and every other session go on. Report it: it should not happen."""


# --- store layer (docs/store.md, "Error taxonomy — what each means for the caller") --------------------------------


class StoreError(PhronomyError):
    """Base of every store error."""


class NotFoundError(StoreError):
    """The agent, execution or record does not exist."""


class ConflictError(StoreError):
    """A compare-and-set failed: the stored revision (or journal head) is not the one
    expected, or an id is duplicated. Reload, then decide; never retry blindly."""


class AgentBusyError(StoreError):
    """The agent already has an active execution (durably, or in this process'
    admission map). Wait for it to finish, approve or resolve it, or cancel it."""


class AgentOwnedError(AgentBusyError):
    """No longer raised; kept so that code that catches it still imports.

    It meant that another live process owned the agent (its row in the store's
    ``agent_owners`` table). Stores of version 5 have no per-process agent claims (the
    table and ``--takeover`` are gone: ``docs/store.md``, "Upgrading to version 5"): an
    execution is run by whichever worker holds its lease, and a start for an agent that
    has an active execution raises :class:`AgentBusyError` (``docs/operations.md``, "Who
    runs an execution")."""


class SerializationError(StoreError):
    """A record could not be encoded or decoded (unknown or missing keys, wrong
    types, non-JSON values)."""


class InvalidStatusTransitionError(StoreError):
    """An execution record was advanced to a status its current status does not allow
    a programming error in the caller; nothing was written."""


class StorageError(StoreError):
    """The storage layer failed for a transport reason: I/O error, full disk, database
    still locked after the busy timeout, not a database. Never relabelled as a
    conflict; the write may or may not have happened if it escaped after the write
    was issued (see :class:`OutcomeUnknownError`)."""


class StoreRegressedError(StorageError):
    """A SQLite store went backwards: its database holds fewer commits than writers were
    told were committed (its ``-wal`` was deleted after a crash, or an older copy was
    restored). Effects the lost commits announced could run again, so the store is not
    opened for writing until an operator has looked and accepted the rollback
    (``phronomy-fsm store check --db PATH --accept-rollback``). Nothing was written.

    Attributes: ``path``; ``mark`` — ``(barrier_seq, signal_seq)`` acknowledged;
    ``found`` — the same in the database now. Source: docs/operations.md "A store
    that went backwards"."""


class LockTimeoutError(StorageError):
    """A write to a PostgreSQL store waited longer than the store's
    ``lock_timeout_seconds`` for a lock another transaction holds (the row of
    ``execution_id``, or the inbox lock of an execution it signals) and gave up.
    Nothing was written; ``busy`` is set, so retrying later is safe and the engine
    submits such a commit again. A lock held that long is usually a transaction left
    open on that execution: find it in ``pg_stat_activity``. Attributes:
    ``execution_id`` (``None`` when the write names no execution),
    ``lock_timeout_seconds``, ``busy``, ``path``, ``sqlstate``. Source: issue 21
    item 2; ``docs/scale-out.md``, "The PostgreSQL store"."""


class DiskFullError(StorageError):
    """The database's file system (or SQLite's page limit, ``max_page_count``) is full:
    the write failed before its transaction committed, so nothing was written — even
    when the COMMIT statement itself failed, as it does when the WAL cannot grow
    (SQLite's ``SQLITE_FULL``). Free space, then retry; a retry is safe
    (``docs/store.md``, "Error taxonomy — what each means for the caller")."""


class SchemaVersionError(StoreError):
    """The database's schema version is newer than this code understands (or the file
    is not a phronomy store). Nothing was written; upgrade phronomy_fsm."""


class OutcomeUnknownError(StoreError):
    """A write failed after it was issued: it may have committed. ``intended`` is the
    commit that was attempted; call the store's ``reconcile`` to read back and decide
    ``committed`` / ``not_committed`` / ``conflict`` (``docs/semantics.md``, "Barrier
    outcomes")."""


# --- durable engine ---------------------------------------------------------------


class ContextSerializationError(SerializationError):
    """An execution's context is not storable as JSON (or a stored context no longer
    fits its declared type). ``machine`` names the machine and ``path`` the offending
    part (``$.lines[2].price``). The barrier that met it is not committed
    (docs/semantics.md, "The context")."""


class LeaseLostError(ConflictError):
    """A commit, or an owner's write to the inbox (closing signals), was refused
    because the worker no longer holds the execution: its lease expired, or another
    worker claimed it since (the fencing token moved on). Nothing was written; the
    worker must drop its live copy of the execution (docs/semantics.md, "Leases and
    fencing")."""


class DurableError(PhronomyError):
    """Base of the durable engine's errors that are not store errors."""


class InvalidIdError(DurableError):
    """An id given by the caller (``field``: ``execution_id``, ``signal_id``...) is not
    acceptable: 1-128 printable characters without whitespace or control/format
    characters (docs/semantics.md, "Starting"). Nothing was written."""


class RuntimeClosedError(DurableError):
    """The durable runtime closed (or was never started) before the execution
    finished; ``execution_id`` lives on in the store with ``status``. Start a runtime
    with its machine and call ``recover()`` (or ``phronomy-fsm recover``) to continue
    it."""


class UnknownMachineError(DurableError):
    """No machine of this name is registered with the runtime (``machine``); register
    it (``DurableRuntime.register``) or run the application that does."""


class ExecutionExistsError(DurableError):
    """An execution with this id exists already and runs another machine
    (``execution_id``, ``machine``); starting the same id with the same machine
    returns the existing execution instead (docs/semantics.md, "Starting")."""


class ExecutionFinishedError(DurableError):
    """The execution has finished (``status``); it takes no more signals,
    resolutions or cancels."""


class ExecutionOwnedError(DurableError):
    """A live worker (``worker_id``, lease until ``lease_expires_at``) owns the
    execution; this process must not run it. Send it a signal instead (any process
    may), or wait until that worker stops or its lease passes."""


class SignalRefusedError(DurableError):
    """A signal was refused before anything was written: the event is not declared
    by the machine, is one the engine posts itself, the payload is not JSON, the
    expected revision is stale, or its signal id belongs to another signal
    (``reason``; for ``signal_id_reused`` also ``signal_id``,
    ``used_by_execution_id`` and ``differs``: docs/semantics.md, "Signals")."""


class SignalPayloadError(SignalRefusedError):
    """A signal's payload does not fit the payload schema its event declares
    (``docs/spec-format.md``, "Payload schemas"); nothing was written. ``reason`` is
    ``payload_type``; ``event`` names the event and ``problems`` lists every mismatch
    (a missing field, a wrong type, an undeclared field)."""


class ResolutionError(DurableError):
    """An operator resolution was refused before anything was written: the execution
    is not waiting for one, the revision is stale, the outcome is not allowed, or the
    result/error does not fit (``reason``); nothing was written."""


class DeadlineExceededError(DurableError):
    """The execution ran past its deadline (``start(..., timeout_seconds=)``); it is
    ended ``failed`` once nothing of it runs any more (``execution_id``,
    ``expires_at``)."""


class EffectFailedError(DurableError):
    """Delivered as the payload of an effect's failed event when an operator resolved
    it as ``failed``; ``effect`` names it and the message is the operator's text."""


class EffectNotPerformedError(DurableError):
    """Delivered as the payload of an effect's failed event when an operator resolved
    it as ``not_performed``: it did not happen and will not be sent again."""


class ForkRefusedError(DurableError):
    """A fork from a past commit was refused before anything was written
    (``docs/operations.md``, "Fork and restart from a past commit"): ``reasons`` holds
    one sentence per problem, each saying what to do; ``plan`` the
    :class:`~phronomy_fsm.operator.fork.ForkPlan` when one could be made."""


class RateLimited(DurableError):
    """Raised by an effect's work when the outside service answered "too many
    requests" **and the call was not performed**: the engine pauses the effect's limits
    for ``retry_after_seconds`` (durably, for every worker sharing the store) and
    starts the same effect again after the pause — same idempotency key, same
    attempt, the execution not failed (``docs/semantics.md``, "Limits").

    Args:
        retry_after_seconds: how long to wait before trying again (> 0; a service's
            ``Retry-After``), capped at one day.
        message: what the service said (logged).
    """

    def __init__(self, retry_after_seconds: float, message: str = "", **details: Any) -> None:
        seconds = float(retry_after_seconds)
        if not seconds > 0:
            raise ValueError(f"retry_after_seconds must be > 0, got {retry_after_seconds!r}")
        super().__init__(
            message or f"too many requests: retry after {seconds:g} s",
            retry_after_seconds=min(seconds, 86400.0),
            **details,
        )

    retry_after_seconds: float


class ReplayDivergedError(DurableError):
    """Recovery replayed from the last barrier and did not reach the effect it
    expected (``expected``, ``reached``): the code between a barrier and its effect is
    not deterministic. The execution is parked in ``recovery_required``."""


class ScheduleError(DurableError):
    """A schedule was refused before anything was stored: a bad name, cron expression,
    time zone, overlap policy, catch-up window or context (``schedule``; ``problems``
    lists every one), or an operation named a schedule that does not exist
    (docs/operations.md, "Schedules")."""


# --- agent layer ------------------------------------------------------------------


class AgentError(PhronomyError):
    """Base of agent-layer errors."""


class ConfigurationError(AgentError):
    """An agent, tool, provider or policy was configured inconsistently."""


class TypeSchemaError(ConfigurationError):
    """A Python type has no JSON Schema: a typed tool's parameter, or an agent's
    ``output_type``, is annotated with a type none of the supported kinds (str, int,
    float, bool, None, Any, list/set/tuple, dict[str, ...], unions with one structured
    member, Literal, Enum, attrs classes, TypedDicts, Pydantic models), or the
    function cannot be a tool (no annotation, ``*args``). Raised when the tool or the
    agent is defined, before anything runs (``docs/agent.md``, "Typed tools").
    Attributes: ``where`` (e.g. ``tool 'search', parameter 'when'``) and
    ``annotation`` (the type as written)."""


class ToolArgumentsError(AgentError):
    """A typed tool's arguments passed its JSON Schema but did not convert to the
    annotated types (a Pydantic validator refused them, say). Raised on the worker
    before the tool's function runs: the call fails and the LLM sees this message as
    its result (``docs/agent.md``, "Typed tools"). Attributes: ``tool_name``,
    ``parameter``."""


class OutputValidationError(AgentError):
    """An agent with an ``output_type`` answered with text that is not JSON of that
    type, as many times as its ``output_retries`` allowed re-asking (plus the first):
    the execution ends ``failed`` with this error (``docs/agent.md``, "Structured
    output"). The message says what was wrong with the last answer. Attributes:
    ``execution_id``, ``attempts`` (answers refused), ``reason`` (the last answer's
    problem)."""


class AgentExistsError(AgentError):
    """``Agent.create`` was called for an id that already exists; use ``Agent.load``."""


class AgentClosedError(AgentError):
    """The agent (or its runtime) was closed and accepts no new executions."""


class ExecutionDetachedError(AgentClosedError):
    """The caller's task of an execution this process no longer runs: the runtime (or
    the agent) was closed, or another worker took the execution over, while it was
    waiting for approval, waiting for an operator, or still running. The execution is
    **not** lost: it lives on in the store as of its last commit. The message says how
    to continue it: load the agent again (``Agent.load``) — and, when it (or one of its
    tool calls) waits for an operator or for an approval, the exact ``phronomy-fsm
    resolve`` or ``phronomy-fsm approve`` command to answer it. Attribute:
    ``execution_id``. ``docs/agent.md``, "Closing"."""


class AgentNotLoadedError(AgentError):
    """An agent execution needs its agent's configuration (provider, tools) in this
    process, and the agent is not loaded here: load it (``Agent.load``) in the process
    that should run its executions. Attribute: ``agent_id``."""


class ApprovalError(AgentError):
    """An approval decision was refused: wrong request id, the execution is not
    waiting for approval, the request was already decided, or the decisions do not
    name every item. Nothing was sent; the execution is untouched."""


class BudgetExhaustedError(AgentError):
    """An agent execution's next LLM call or tool calls would pass a limit of its
    budget and the agent's ``on_budget_exhausted`` is ``fail``: the execution ended
    ``failed`` with this error and the call was not made (``docs/agent.md``,
    "Budgets"). Attributes: ``execution_id``, ``limit`` (``max_tokens``,
    ``max_llm_calls``, ``max_tool_calls`` or ``max_cost_usd``), ``spent`` (what the
    execution had spent of it), ``allowed`` (the limit's value)."""


class BudgetError(AgentError):
    """A budget extension was refused: the execution does not wait for one, another
    request is pending, an unknown or non-positive limit, a limit lowered, or new
    limits that still refuse the waiting call (``reason`` says which; ``docs/agent.md``,
    "Budgets"). Nothing was sent; the execution is untouched."""


class ApprovedArgumentsError(AgentError):
    """A tool call a person approved was about to run with arguments other than the
    ones approved: the sha256 of their canonical JSON differs from the hash the
    decision approved. The call fails with this error as its result (the LLM sees it)
    and the tool is not run; ask for a new approval (``docs/agent.md``, "Approval").
    Attributes: ``tool_invocation_id``, ``approved_sha256``, ``actual_sha256``."""


class McpError(AgentError):
    """An MCP server could not be reached, did not speak MCP, listed or answered
    something unusable, or its tool answered with an error (``docs/agent.md``, "MCP
    tools"). Attributes: ``server`` (how it was declared) and, for a tool's error,
    ``tool_name``. A tool call raising it fails; the LLM sees the message."""


class ApprovalPolicyError(AgentError):
    """The agent's ``approval_policy`` raised — anything, ``Cancelled`` and
    ``SystemExit`` included — while deciding a tool call. The execution ends ``failed``
    with this error and no call of that answer runs (``docs/agent.md``, "Approval").
    The message names the tool and what the policy raised (``Type: message``), which is
    also the ``__cause__`` in the process that ran it. Attributes: ``execution_id``,
    ``tool_name``, ``tool_invocation_id``."""


class LLMError(AgentError):
    """The LLM provider failed (HTTP error, protocol error, timeout, malformed tool-call
    JSON). Drives the session to ``failed``."""


class InvalidInputError(AgentError):
    """The input given to ``invoke``/``stream`` is not acceptable (not a string, empty
    where text is required). Nothing was admitted or written."""


class ExecutionTimeoutError(AgentError):
    """The execution ran past its ``timeout_seconds``; it ends ``failed`` once nothing
    of it runs any more (``docs/agent.md``, "Outcomes")."""


class ContentBlockedError(AgentError):
    """An input or output filter blocked the content (the execution ends
    ``blocked``); ``reason`` says why. Raise it from a filter to block."""


class StreamCallbackError(AgentError):
    """The application's event listener raised (under ``listener_error_policy=
    "fail_task"`` the execution ends ``failed`` with it)."""


class ExecutionFailedError(AgentError):
    """An execution ended as ``failed``, ``blocked`` or ``cancelled`` without a more
    specific error; ``status`` and ``execution_id`` say which."""


__all__ = [
    "HOOK_ERRORS",
    "AgentBusyError",
    "AgentClosedError",
    "AgentError",
    "AgentExistsError",
    "AgentNotLoadedError",
    "AgentOwnedError",
    "ApprovalError",
    "ApprovalPolicyError",
    "ApprovedArgumentsError",
    "BackpressureError",
    "BudgetError",
    "BudgetExhaustedError",
    "Cancelled",
    "ConfigurationError",
    "ConflictError",
    "ContentBlockedError",
    "ContextSerializationError",
    "DeadlineExceededError",
    "DiskFullError",
    "DispatchInputError",
    "DispatcherStoppedError",
    "DurableError",
    "EffectFailedError",
    "EffectNotPerformedError",
    "ExecutionDetachedError",
    "ExecutionExistsError",
    "ExecutionFailedError",
    "ExecutionFinishedError",
    "ExecutionOwnedError",
    "ExecutionTimeoutError",
    "ForkRefusedError",
    "GenerationError",
    "HookError",
    "InvalidIdError",
    "InvalidInputError",
    "InvalidStatusTransitionError",
    "LLMError",
    "LeaseLostError",
    "LockTimeoutError",
    "McpError",
    "MissingDependencyError",
    "MissingHookError",
    "NotFoundError",
    "OutcomeUnknownError",
    "OutputValidationError",
    "PhronomyError",
    "PoolShutdownError",
    "ProjectConfigError",
    "RateLimited",
    "RenderError",
    "ReplayDivergedError",
    "ResolutionError",
    "RuntimeClosedError",
    "RuntimeFault",
    "ScheduleError",
    "SchemaVersionError",
    "SerializationError",
    "SessionFaultError",
    "SignalPayloadError",
    "SignalRefusedError",
    "SpecError",
    "StepLimitError",
    "StorageError",
    "StoreError",
    "StoreRegressedError",
    "StreamCallbackError",
    "TaskTimeoutError",
    "ToolArgumentsError",
    "TypeSchemaError",
    "UndeclaredEventError",
    "UnknownMachineError",
    "UnknownSessionError",
    "WrongThreadError",
]
