"""What the dispatcher's public entry points accept.

Owns the checks :class:`~phronomy_fsm.runtime.dispatcher.Dispatcher` runs on the
caller's thread before anything reaches the loop: an event is exactly a ``str``, a
session id an ``int``, a resume start names a state and event of the machine, a group
can be hashed, a step limit is a positive ``int``. A refusal is a
:class:`~phronomy_fsm.errors.DispatchInputError` (also a ``ValueError``) and queues
nothing, so one caller's bad input never reaches — let alone ends — the loop every
session shares (docs/getting-started.md "Your own machines"). Must not touch live
state: these run on any thread.
"""

from __future__ import annotations

from typing import Any

from phronomy_fsm.errors import DispatchInputError
from phronomy_fsm.runtime.binding import FINAL, WAIT, MachineBinding


def shown(value: Any) -> str:
    """``repr(value)`` for an error message, cut to 80 characters, or ``<type>`` when
    even ``repr`` raises (a refused argument may be hostile). Never raises."""
    try:
        text = repr(value)
    except BaseException:  # noqa: BLE001 - a message must not fail, whatever repr raises
        return f"<{type(value).__name__}>"
    return text if len(text) <= 80 else text[:77] + "..."


def check_event(event: Any) -> None:
    """Refuse an event that is not exactly a ``str``: a list cannot key the table, and
    a ``str`` subclass could hash or compare by code of its own on the loop thread.

    Raises:
        DispatchInputError: the message names the type and value.
    """
    if type(event) is not str:
        raise DispatchInputError(
            f"event must be a str naming an event of the machine, got "
            f"{type(event).__name__} {shown(event)}"
        )


def check_session_id(session_id: Any) -> None:
    """Refuse a session id that is not exactly an ``int`` (``True`` would otherwise
    reach session 1).

    Raises:
        DispatchInputError: the message names the value.
    """
    if type(session_id) is not int:
        raise DispatchInputError(
            f"a session id is the int start_session returned, got {shown(session_id)}"
        )


def check_start(
    binding: MachineBinding,
    at_state: Any,
    event: Any,
    group: Any,
    step_limit: Any,
) -> None:
    """Refuse a ``start_session`` whose ``at_state`` or ``event`` is not a ``str``
    naming a state or event of ``binding``'s machine, whose resume start at a wait or
    final state has no event, whose ``group`` cannot be hashed (it keys the in-flight
    count on the loop), or whose ``step_limit`` is not a positive ``int`` (``None``:
    the binding's own).

    Raises:
        DispatchInputError: naming the machine (``machine``) and what is wrong.
    """
    machine = binding.machine
    if at_state is not None:
        node = binding.nodes.get(at_state) if type(at_state) is str else None
        if node is None:
            raise DispatchInputError(
                f"machine {machine!r} has no state {shown(at_state)}", machine=machine
            )
        if event is None and node.kind in (WAIT, FINAL):
            raise DispatchInputError(
                f"a resume start at {node.kind} state {at_state!r} needs an event",
                machine=machine,
            )
    if event is not None and (type(event) is not str or event not in binding.events):
        raise DispatchInputError(
            f"machine {machine!r} declares no event {shown(event)}", machine=machine
        )
    if step_limit is not None and (type(step_limit) is not int or step_limit < 1):
        raise DispatchInputError(
            f"step_limit must be a positive int, got {shown(step_limit)}", machine=machine
        )
    try:
        hash(group)
    except Exception as exc:  # noqa: BLE001 - any failure to hash: refused here
        raise DispatchInputError(
            f"group must be hashable (it keys the in-flight count), got "
            f"{type(group).__name__}: {exc}",
            machine=machine,
        ) from None
