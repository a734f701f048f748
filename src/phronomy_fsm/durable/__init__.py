"""The durable engine: any machine compiled from a spec, run so it survives crashes.

Register a :class:`Machine` (a generated table, its hooks, the type of its context)
with a :class:`DurableRuntime` over a store, then :meth:`~DurableRuntime.start`
executions. Every barrier, wait state and final state is a durable commit; every
effect (an offload that is not ``pure``) starts only after a commit announced it; after
a crash :meth:`~DurableRuntime.recover` resumes each execution from its last commit —
replaying from a barrier, waiting again, or parking it in ``recovery_required`` for an
operator. Signals, operator resolutions and cancels reach an execution through its
durable inbox, from any process (:mod:`phronomy_fsm.durable.operations`).

The rules are in ``docs/semantics.md``.
"""

from phronomy_fsm.durable.claims import OtherSpecExecution
from phronomy_fsm.durable.operations import request_cancel, request_resolution, send_signal
from phronomy_fsm.durable.records import (
    DurablePoint,
    EffectKind,
    ExecutionRecord,
    ExecutionStatus,
    JournalEntry,
    ResolutionOutcome,
    SignalRecord,
)
from phronomy_fsm.durable.runtime import DurableRuntime, ExecutionHandle
from phronomy_fsm.durable.types import (
    BarrierRecords,
    ChildStart,
    DurableEvent,
    DurableEventKind,
    ExecutionResult,
    Machine,
    RecoveryReport,
)

__all__ = [
    "BarrierRecords",
    "ChildStart",
    "DurableEvent",
    "DurableEventKind",
    "DurablePoint",
    "DurableRuntime",
    "EffectKind",
    "ExecutionHandle",
    "ExecutionRecord",
    "ExecutionResult",
    "ExecutionStatus",
    "JournalEntry",
    "Machine",
    "OtherSpecExecution",
    "RecoveryReport",
    "ResolutionOutcome",
    "SignalRecord",
    "request_cancel",
    "request_resolution",
    "send_signal",
]
