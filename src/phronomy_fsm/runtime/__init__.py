"""The runtime core: dispatcher loop, offload pool, tasks, cancellation, clocks, timers.

It runs any machine compiled by the code generator: bind a generated ``TABLE``
to a hooks object with :func:`bind_machine`, then start sessions on a
:class:`Dispatcher`. Crash injection for tests and harnesses is a :class:`FaultPlan`
passed in explicitly (``docs/operations.md``, "Crashing at a chosen point
yourself"). The runtime never imports jinja2 or the YAML parser.
"""

from typing import TYPE_CHECKING

from phronomy_fsm._lazy import lazy_exports

# Imported on first use (PEP 562, phronomy_fsm._lazy): importing one submodule of
# this package must not import the others.
if TYPE_CHECKING:
    from phronomy_fsm.runtime.binding import DEFAULT_STEP_LIMIT, MachineBinding, bind_machine
    from phronomy_fsm.runtime.cancellation import CancellationToken
    from phronomy_fsm.runtime.clock import SYSTEM_CLOCK, Clock, ManualClock, SystemClock
    from phronomy_fsm.runtime.dispatcher import (
        Authority,
        Dispatcher,
        OffloadContext,
        SessionResult,
        StepRecord,
    )
    from phronomy_fsm.runtime.faults import FaultPlan
    from phronomy_fsm.runtime.offload import OffloadPool, Operation
    from phronomy_fsm.runtime.plain_hooks import ContextSnapshot, EffectContext, as_hooks
    from phronomy_fsm.runtime.tasks import Task, on_loop_thread
    from phronomy_fsm.runtime.timers import TimerQueue, TimerService

__all__ = [
    "DEFAULT_STEP_LIMIT",
    "SYSTEM_CLOCK",
    "Authority",
    "CancellationToken",
    "Clock",
    "ContextSnapshot",
    "Dispatcher",
    "EffectContext",
    "FaultPlan",
    "MachineBinding",
    "ManualClock",
    "OffloadContext",
    "OffloadPool",
    "Operation",
    "SessionResult",
    "StepRecord",
    "SystemClock",
    "Task",
    "TimerQueue",
    "TimerService",
    "as_hooks",
    "bind_machine",
    "on_loop_thread",
]

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(
        globals(),
        {
            "phronomy_fsm.runtime.binding": (
                "DEFAULT_STEP_LIMIT",
                "MachineBinding",
                "bind_machine",
            ),
            "phronomy_fsm.runtime.cancellation": ("CancellationToken",),
            "phronomy_fsm.runtime.clock": (
                "SYSTEM_CLOCK",
                "Clock",
                "ManualClock",
                "SystemClock",
            ),
            "phronomy_fsm.runtime.dispatcher": (
                "Authority",
                "Dispatcher",
                "OffloadContext",
                "SessionResult",
                "StepRecord",
            ),
            "phronomy_fsm.runtime.faults": ("FaultPlan",),
            "phronomy_fsm.runtime.offload": (
                "OffloadPool",
                "Operation",
            ),
            "phronomy_fsm.runtime.plain_hooks": (
                "ContextSnapshot",
                "EffectContext",
                "as_hooks",
            ),
            "phronomy_fsm.runtime.tasks": (
                "Task",
                "on_loop_thread",
            ),
            "phronomy_fsm.runtime.timers": (
                "TimerQueue",
                "TimerService",
            ),
        },
    )
