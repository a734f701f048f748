"""Operator actions on the executions of a store, for every front end.

The operator's verbs over one store — list, describe, signal, resolve, cancel and
recover — for executions of any machine run by the durable engine, and (to list and
describe them) the agent layer's executions kept in the same store. ``phronomy-fsm``
(:mod:`phronomy_fsm.cli`) and the console call these functions and only format what
they return: frozen attrs values (each with a ``to_dict()`` JSON form), never bare
dicts. The package holds :mod:`~phronomy_fsm.operator.views` (those values),
:mod:`~phronomy_fsm.operator.actions` (reads and inbox writes) and
:mod:`~phronomy_fsm.operator.recovery` (recovering a store until it rests); import
everything from here.

Writes go through :mod:`phronomy_fsm.durable.operations`, which validates against the
stored execution and its machine's registered table and writes **nothing** when it
refuses; recovery goes through :class:`~phronomy_fsm.durable.runtime.DurableRuntime`.
What this module adds is what an operator needs around them: which executions wait for
an operator, what may be answered and the exact ``phronomy-fsm resolve`` command that
answers it, which worker runs an execution, and waiting until recovered executions
come to rest (``docs/operations.md``, "Operating durable executions").

Must not: print, exit, parse command-line text or import the CLI (the CLI does the
first three and imports this module). Errors are the library's own
(:mod:`phronomy_fsm.errors`); only the CLI turns them into exit codes.
"""

from phronomy_fsm.operator.actions import (
    DEFAULT_SENDER,
    ERROR_PLACEHOLDER,
    RESULT_PLACEHOLDER,
    awaited_events,
    cancel_execution,
    describe_execution,
    execution_owner,
    list_executions,
    load_any_execution,
    recovery_request,
    resolve_execution,
    signal_execution,
)
from phronomy_fsm.operator.drawing import ExecutionDrawing, execution_diagram
from phronomy_fsm.operator.recovery import is_at_rest, recover_store
from phronomy_fsm.operator.views import (
    AGENT_MACHINE,
    ExecutionDetail,
    ExecutionPage,
    ExecutionSummary,
    InboxReceipt,
    RecoveredExecution,
    RecoveryRequest,
    StoreRecoveryReport,
    WorkerLease,
)
from phronomy_fsm.operator.worker import run_worker

__all__ = [
    "AGENT_MACHINE",
    "DEFAULT_SENDER",
    "ERROR_PLACEHOLDER",
    "RESULT_PLACEHOLDER",
    "ExecutionDetail",
    "ExecutionDrawing",
    "ExecutionPage",
    "ExecutionSummary",
    "InboxReceipt",
    "RecoveredExecution",
    "RecoveryRequest",
    "StoreRecoveryReport",
    "WorkerLease",
    "awaited_events",
    "cancel_execution",
    "describe_execution",
    "execution_diagram",
    "execution_owner",
    "is_at_rest",
    "list_executions",
    "load_any_execution",
    "recover_store",
    "recovery_request",
    "resolve_execution",
    "run_worker",
    "signal_execution",
]
