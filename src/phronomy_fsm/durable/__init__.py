"""The durable engine: any machine compiled from a spec, run so it survives crashes.

Register a :class:`Machine` (a generated table, its hooks, the type of its context)
with a :class:`DurableRuntime` over a store, then :meth:`~DurableRuntime.start`
executions. Every barrier, wait state and final state is a durable commit; every
effect (an offload that is not ``pure``) starts only after a commit announced it; after
a crash :meth:`~DurableRuntime.recover` resumes each execution from its last commit —
replaying from a barrier, waiting again, or parking it in ``recovery_required`` for an
operator. Signals, operator resolutions and cancels reach an execution through its
durable inbox, from any process (:mod:`phronomy_fsm.durable.operations`). An effect
whose outside service said "too many requests" without performing the call raises
:class:`RateLimited`: its limits pause and it starts again after
(``docs/semantics.md``, "Limits").

An application for the workers and operator tools is a :class:`DurableApp` made by a
factory ``factory(db)`` — ``db`` the ``--db`` value, a SQLite path or a
``postgresql://`` DSN; any process starts executions for the workers with
:func:`submit_execution`; the store calls an application may use are listed on
:class:`ExecutionStore`; an execution parked for an operator holds its question in
:class:`RecoveryInfo` (``docs/tutorial.md`` walks through all of it).

The rules are in ``docs/semantics.md``.
"""

from typing import TYPE_CHECKING

from phronomy_fsm._lazy import lazy_exports

# Imported on first use (PEP 562, phronomy_fsm._lazy): importing one submodule of
# this package must not import the others.
if TYPE_CHECKING:
    from phronomy_fsm.durable.app import (
        SIGNAL_MARK,
        Answer,
        DurableApp,
        EffectEntry,
        Scenario,
        load_app,
    )
    from phronomy_fsm.durable.claims import OtherSpecExecution
    from phronomy_fsm.durable.operations import request_cancel, request_resolution, send_signal
    from phronomy_fsm.durable.ports import ExecutionStore
    from phronomy_fsm.durable.records import (
        DurablePoint,
        EffectKind,
        EffectRef,
        ExecutionRecord,
        ExecutionStatus,
        JournalEntry,
        RecoveryInfo,
        ResolutionInfo,
        ResolutionOutcome,
        SignalRecord,
    )
    from phronomy_fsm.durable.runtime import DurableRuntime, ExecutionHandle
    from phronomy_fsm.durable.submit import submit_execution
    from phronomy_fsm.durable.types import (
        BarrierRecords,
        ChildStart,
        DurableEvent,
        DurableEventKind,
        ExecutionResult,
        Machine,
        RecoveryReport,
    )
    from phronomy_fsm.errors import RateLimited
    from phronomy_fsm.runtime.plain_hooks import EffectContext

__all__ = [
    "SIGNAL_MARK",
    "Answer",
    "BarrierRecords",
    "ChildStart",
    "DurableApp",
    "DurableEvent",
    "DurableEventKind",
    "DurablePoint",
    "DurableRuntime",
    "EffectContext",
    "EffectEntry",
    "EffectKind",
    "EffectRef",
    "ExecutionHandle",
    "ExecutionRecord",
    "ExecutionResult",
    "ExecutionStatus",
    "ExecutionStore",
    "JournalEntry",
    "Machine",
    "OtherSpecExecution",
    "RateLimited",
    "RecoveryInfo",
    "RecoveryReport",
    "ResolutionInfo",
    "ResolutionOutcome",
    "Scenario",
    "SignalRecord",
    "load_app",
    "request_cancel",
    "request_resolution",
    "send_signal",
    "submit_execution",
]

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(
        globals(),
        {
            "phronomy_fsm.durable.app": (
                "SIGNAL_MARK",
                "Answer",
                "DurableApp",
                "EffectEntry",
                "Scenario",
                "load_app",
            ),
            "phronomy_fsm.durable.claims": ("OtherSpecExecution",),
            "phronomy_fsm.durable.ports": ("ExecutionStore",),
            "phronomy_fsm.durable.submit": ("submit_execution",),
            "phronomy_fsm.durable.operations": (
                "request_cancel",
                "request_resolution",
                "send_signal",
            ),
            "phronomy_fsm.durable.records": (
                "DurablePoint",
                "EffectKind",
                "EffectRef",
                "ExecutionRecord",
                "ExecutionStatus",
                "JournalEntry",
                "RecoveryInfo",
                "ResolutionInfo",
                "ResolutionOutcome",
                "SignalRecord",
            ),
            "phronomy_fsm.durable.runtime": (
                "DurableRuntime",
                "ExecutionHandle",
            ),
            "phronomy_fsm.runtime.plain_hooks": ("EffectContext",),
            "phronomy_fsm.errors": ("RateLimited",),
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
