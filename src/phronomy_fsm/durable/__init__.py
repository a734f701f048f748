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

from typing import TYPE_CHECKING

from phronomy_fsm._lazy import lazy_exports

# Imported on first use (PEP 562, phronomy_fsm._lazy): importing one submodule of
# this package must not import the others.
if TYPE_CHECKING:
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
    from phronomy_fsm.runtime.plain_hooks import EffectContext

__all__ = [
    "BarrierRecords",
    "ChildStart",
    "DurableEvent",
    "DurableEventKind",
    "DurablePoint",
    "DurableRuntime",
    "EffectContext",
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

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(
        globals(),
        {
            "phronomy_fsm.durable.claims": ("OtherSpecExecution",),
            "phronomy_fsm.durable.operations": (
                "request_cancel",
                "request_resolution",
                "send_signal",
            ),
            "phronomy_fsm.durable.records": (
                "DurablePoint",
                "EffectKind",
                "ExecutionRecord",
                "ExecutionStatus",
                "JournalEntry",
                "ResolutionOutcome",
                "SignalRecord",
            ),
            "phronomy_fsm.durable.runtime": (
                "DurableRuntime",
                "ExecutionHandle",
            ),
            "phronomy_fsm.runtime.plain_hooks": ("EffectContext",),
            "phronomy_fsm.durable.types": (
                "BarrierRecords",
                "ChildStart",
                "DurableEvent",
                "DurableEventKind",
                "ExecutionResult",
                "Machine",
                "RecoveryReport",
            ),
        },
    )
