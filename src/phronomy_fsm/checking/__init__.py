"""The interleaving checker: explore how an application's executions can be disturbed.

``phronomy-fsm check SPEC --app MODULE:FACTORY`` (:mod:`phronomy_fsm.cli`) runs the
application's scenarios in child processes and, at every crash point they reach, kills
the process, sends one of the scenario's signals, cancels, fires the timers early, or
pauses the worker past its lease while another process takes its executions over; after
each run it checks the invariants of :mod:`phronomy_fsm.checking.invariants` on what the
store and the application's own records hold (``docs/operations.md``, "The interleaving
checker").

Modules: :mod:`~phronomy_fsm.checking.interleavings` (steps and their text form),
:mod:`~phronomy_fsm.checking.plans` (which interleavings to run),
:mod:`~phronomy_fsm.checking.child` (one process of a run),
:mod:`~phronomy_fsm.checking.runfiles` (what a run's processes write),
:mod:`~phronomy_fsm.checking.invariants` and :mod:`~phronomy_fsm.checking.runner`.

Must not: print or exit; only the CLI turns a report into an exit status.
"""

from phronomy_fsm.checking.interleavings import (
    Action,
    Interleaving,
    Step,
    crash_points,
    parse_interleaving,
)
from phronomy_fsm.checking.invariants import INVARIANTS, Violation
from phronomy_fsm.checking.plans import FULL, QUICK, Budget
from phronomy_fsm.checking.runner import CheckOptions, CheckReport, check_app, replay_command

__all__ = [
    "FULL",
    "INVARIANTS",
    "QUICK",
    "Action",
    "Budget",
    "CheckOptions",
    "CheckReport",
    "Interleaving",
    "Step",
    "Violation",
    "check_app",
    "crash_points",
    "parse_interleaving",
    "replay_command",
]
