"""Operator actions on the executions of a store, for every front end.

The operator's verbs over one store — list, describe, signal, approve, resolve,
cancel, recover, migrate — for executions of any machine run by the durable engine,
agents' executions and their tool calls included. ``phronomy-fsm``
(:mod:`phronomy_fsm.cli`) and the console call these functions and only format what
they return: frozen attrs values (each with a ``to_dict()`` JSON form), never bare
dicts. The package holds :mod:`~phronomy_fsm.operator.views` (those values),
:mod:`~phronomy_fsm.operator.actions` (reads and inbox writes),
:mod:`~phronomy_fsm.operator.agents` (what is particular to agents: their side of an
execution, approvals, subjects in the agent's terms),
:mod:`~phronomy_fsm.operator.recovery` (recovering a store until it rests),
:mod:`~phronomy_fsm.operator.batch` (answering many parked executions at once),
:mod:`~phronomy_fsm.operator.maintenance` (migrating a store),
:mod:`~phronomy_fsm.operator.spec_change` (checking a spec change against the
executions in flight) and
:mod:`~phronomy_fsm.operator.drawing` (an execution over its machine's diagram);
import everything from here.

Writes go through :mod:`phronomy_fsm.durable.operations` and
:mod:`phronomy_fsm.agent.approvals`, which validate against the stored execution and
its machine's registered table and write **nothing** when they refuse; recovery goes
through :class:`~phronomy_fsm.durable.runtime.DurableRuntime`. What this package adds
is what an operator needs around them: which executions wait for an operator or a
person, what may be answered and the exact ``phronomy-fsm resolve`` / ``approve``
command that answers it, which worker runs an execution, and waiting until recovered
executions come to rest (``docs/operations.md``, "Operating durable executions").

Must not: print, exit, parse command-line text or import the CLI (the CLI does the
first three and imports this package). Errors are the library's own
(:mod:`phronomy_fsm.errors`); only the CLI turns them into exit codes.
"""

from typing import TYPE_CHECKING

from phronomy_fsm._lazy import lazy_exports

# Imported on first use (PEP 562, phronomy_fsm._lazy): importing one submodule of
# this package must not import the others.
if TYPE_CHECKING:
    from phronomy_fsm.operator.actions import (
        DEFAULT_SENDER,
        ERROR_PLACEHOLDER,
        RESULT_PLACEHOLDER,
        WAITING_FOR_STATUS,
        approve_execution,
        awaited_events,
        cancel_execution,
        describe_execution,
        execution_owner,
        list_executions,
        recovery_request,
        resolve_execution,
        result_shape,
        signal_execution,
        wait_endings,
    )
    from phronomy_fsm.operator.agents import (
        LLM_ANSWER_PLACEHOLDER,
        TOOL_RESULT_PLACEHOLDER,
        agent_view,
        approval_commands,
        is_agent_execution,
    )
    from phronomy_fsm.operator.batch import (
        ResolutionAnswer,
        ResolutionAttempt,
        parked_answers,
        read_answers,
        resolve_many,
    )
    from phronomy_fsm.operator.drawing import ExecutionDrawing, execution_diagram
    from phronomy_fsm.operator.maintenance import migrate_store
    from phronomy_fsm.operator.recovery import (
        execution_at_rest,
        is_at_rest,
        recover_store,
        wait_until_rest,
        with_parents,
    )
    from phronomy_fsm.operator.schedules import (
        add_schedule,
        list_schedules,
        pause_schedule,
        remove_schedule,
        resume_schedule,
        schedule_to_dict,
    )
    from phronomy_fsm.operator.spec_change import (
        ExecutionVerdict,
        SpecChangeReport,
        Verdict,
        check_spec_change,
    )
    from phronomy_fsm.operator.views import (
        AGENT_MACHINE,
        TOOL_CALL_MACHINE,
        WAITS_FOR_APPROVAL,
        WAITS_FOR_CHILD,
        WAITS_FOR_OPERATOR,
        WAITS_FOR_RECOVER,
        WAITS_FOR_SIGNAL,
        AgentView,
        ApprovalItemView,
        ApprovalView,
        ExecutionDetail,
        ExecutionPage,
        ExecutionSummary,
        InboxReceipt,
        MessageView,
        MigrationReport,
        RecoveredExecution,
        RecoveryRequest,
        ResultShape,
        StoreRecoveryReport,
        WaitEnding,
        WorkerLease,
    )

__all__ = [
    "AGENT_MACHINE",
    "DEFAULT_SENDER",
    "ERROR_PLACEHOLDER",
    "LLM_ANSWER_PLACEHOLDER",
    "RESULT_PLACEHOLDER",
    "TOOL_CALL_MACHINE",
    "TOOL_RESULT_PLACEHOLDER",
    "WAITING_FOR_STATUS",
    "WAITS_FOR_APPROVAL",
    "WAITS_FOR_CHILD",
    "WAITS_FOR_OPERATOR",
    "WAITS_FOR_RECOVER",
    "WAITS_FOR_SIGNAL",
    "AgentView",
    "ApprovalItemView",
    "ApprovalView",
    "ExecutionDetail",
    "ExecutionDrawing",
    "ExecutionPage",
    "ExecutionSummary",
    "ExecutionVerdict",
    "InboxReceipt",
    "MessageView",
    "MigrationReport",
    "RecoveredExecution",
    "RecoveryRequest",
    "ResolutionAnswer",
    "ResolutionAttempt",
    "ResultShape",
    "SpecChangeReport",
    "StoreRecoveryReport",
    "Verdict",
    "WaitEnding",
    "WorkerLease",
    "add_schedule",
    "agent_view",
    "approval_commands",
    "approve_execution",
    "awaited_events",
    "cancel_execution",
    "check_spec_change",
    "describe_execution",
    "execution_at_rest",
    "execution_diagram",
    "execution_owner",
    "is_agent_execution",
    "is_at_rest",
    "list_executions",
    "list_schedules",
    "migrate_store",
    "parked_answers",
    "pause_schedule",
    "read_answers",
    "recover_store",
    "recovery_request",
    "remove_schedule",
    "resolve_execution",
    "resolve_many",
    "result_shape",
    "resume_schedule",
    "schedule_to_dict",
    "signal_execution",
    "wait_endings",
    "wait_until_rest",
    "with_parents",
]

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(
        globals(),
        {
            "phronomy_fsm.operator.actions": (
                "DEFAULT_SENDER",
                "ERROR_PLACEHOLDER",
                "RESULT_PLACEHOLDER",
                "WAITING_FOR_STATUS",
                "approve_execution",
                "awaited_events",
                "cancel_execution",
                "describe_execution",
                "execution_owner",
                "list_executions",
                "recovery_request",
                "resolve_execution",
                "result_shape",
                "signal_execution",
                "wait_endings",
            ),
            "phronomy_fsm.operator.agents": (
                "LLM_ANSWER_PLACEHOLDER",
                "TOOL_RESULT_PLACEHOLDER",
                "agent_view",
                "approval_commands",
                "is_agent_execution",
            ),
            "phronomy_fsm.operator.batch": (
                "ResolutionAnswer",
                "ResolutionAttempt",
                "parked_answers",
                "read_answers",
                "resolve_many",
            ),
            "phronomy_fsm.operator.schedules": (
                "add_schedule",
                "list_schedules",
                "pause_schedule",
                "remove_schedule",
                "resume_schedule",
                "schedule_to_dict",
            ),
            "phronomy_fsm.operator.spec_change": (
                "ExecutionVerdict",
                "SpecChangeReport",
                "Verdict",
                "check_spec_change",
            ),
            "phronomy_fsm.operator.drawing": (
                "ExecutionDrawing",
                "execution_diagram",
            ),
            "phronomy_fsm.operator.maintenance": ("migrate_store",),
            "phronomy_fsm.operator.recovery": (
                "execution_at_rest",
                "is_at_rest",
                "recover_store",
                "wait_until_rest",
                "with_parents",
            ),
            "phronomy_fsm.operator.views": (
                "AGENT_MACHINE",
                "TOOL_CALL_MACHINE",
                "WAITS_FOR_APPROVAL",
                "WAITS_FOR_CHILD",
                "WAITS_FOR_OPERATOR",
                "WAITS_FOR_RECOVER",
                "WAITS_FOR_SIGNAL",
                "AgentView",
                "ApprovalItemView",
                "ApprovalView",
                "ExecutionDetail",
                "ExecutionPage",
                "ExecutionSummary",
                "InboxReceipt",
                "MessageView",
                "MigrationReport",
                "RecoveredExecution",
                "RecoveryRequest",
                "ResultShape",
                "StoreRecoveryReport",
                "WaitEnding",
                "WorkerLease",
            ),
        },
    )
