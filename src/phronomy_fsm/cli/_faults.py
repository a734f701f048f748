"""``--crash-at``: the command line's way to hand a crash point to the library.

The library reads no environment for crash injection (``runtime/faults.py``): a
command that supports it takes this hidden option (or the ``PHRONOMY_CRASH_AT``
environment variable, which tests and the crash harnesses set on a child process),
turns it into a :class:`~phronomy_fsm.runtime.faults.FaultPlan` and passes that plan
to the store and the runtime it builds (``docs/operations.md``, "Crashing at a chosen
point yourself").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from phronomy_fsm.runtime.faults import FaultPlan

#: The environment variable the option also reads.
CRASH_ENV = "PHRONOMY_CRASH_AT"

F = TypeVar("F", bound=Callable[..., Any])


def _to_plan(_ctx: click.Context, _param: click.Parameter, value: str | None) -> FaultPlan | None:
    if not value:
        return None
    try:
        return FaultPlan.parse(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc


def crash_at_option(fn: F) -> F:
    """Add a hidden ``--crash-at NAME[@N]`` option, passed as ``faults`` (a FaultPlan or None)."""
    return click.option(
        "--crash-at",
        "faults",
        envvar=CRASH_ENV,
        default=None,
        hidden=True,
        callback=_to_plan,
        help="Kill this process with SIGKILL at a crash point (tests and crash harnesses).",
    )(fn)
