"""Per-machine presenters: what the console adds to an execution's page for its machine.

The console draws every execution of every machine the same way — its facts, its
diagram, its barrier timeline, signals, journal, pending effects, the operator's
resolve form and cancel. What *only a machine's application knows* comes from a
**presenter**: extra sections to show (the generic one shows the context; an agent's
would show its conversation) and the signals a person may send while it waits (the
generic one offers one form per event the waiting state handles, with a JSON payload;
an agent's would offer approve and reject per pending tool call, each with its item's
id in the payload).

A presenter is any object with the two methods of :class:`Presenter`; register one
per machine name with ``create_app(..., presenters={"my_machine": MyPresenter()})``
(``docs/console.md``, "Presenters"). Whatever a presenter offers, the form goes through
:func:`phronomy_fsm.operator.signal_execution` with the page's revision: the library,
not the presenter, decides whether the event may be signalled.

Must not: read or write the store (a presenter gets what the page read), import the
web framework.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import attrs
import orjson

from phronomy_fsm.durable.codec import json_data
from phronomy_fsm.operator import ExecutionDetail
from phronomy_fsm.table import MachineTable


@attrs.frozen
class Section:
    """A block of an execution's page a presenter adds.

    Args:
        title: its heading.
        rows: ``(label, text)`` pairs shown as a two-column table.
        text: preformatted text (JSON, a transcript) shown below the rows.
        open: shown expanded (``False``: folded, the title clickable).
    """

    title: str
    rows: tuple[tuple[str, str], ...] = ()
    text: str | None = None
    open: bool = True


@attrs.frozen
class SignalAction:
    """One form a waiting execution's page offers: send ``event``.

    Args:
        event: the event to signal (the library refuses one the machine does not let
            anyone signal, or one the state does not handle now is kept pending).
        label: the button's text.
        payload: the JSON payload the form is filled in with (``None``: empty).
        editable: show the payload in a text area the operator may change (else it is
            sent as given, in a hidden field).
        item: a heading naming what the action is about (one pending approval item),
            ``None`` for a machine-wide action.
        description: a line explaining it (the event's description from the spec).
        danger: draw the button as a destructive one (reject, abandon).
    """

    event: str
    label: str
    payload: Any = None
    editable: bool = True
    item: str | None = None
    description: str = ""
    danger: bool = False

    def payload_text(self) -> str:
        """The payload as the form shows it: indented JSON, ``""`` for none."""
        if self.payload is None:
            return ""
        return orjson.dumps(
            self.payload, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS
        ).decode()


@attrs.frozen
class ExecutionView:
    """What a presenter is given: the execution as the page read it (``detail``:
    record, barriers, signals, journal, owner, awaited events, recovery request) and
    its machine's ``table`` (``None`` when no runtime registered it in the store)."""

    detail: ExecutionDetail
    table: MachineTable | None = None

    def event_description(self, event: str) -> str:
        """The spec's description of ``event`` (``""`` when unknown)."""
        if self.table is None:
            return ""
        return next((e.description for e in self.table.events if e.name == event), "")


class Presenter(Protocol):
    """What the console asks a machine's presenter (module docstring). Both methods
    are called on a worker thread of the server, once per page; they must not block
    on I/O or raise (an exception is shown on the page as the presenter's error)."""

    def sections(self, view: ExecutionView) -> Sequence[Section]:
        """Extra sections of the execution's page, in order."""
        ...

    def actions(self, view: ExecutionView) -> Sequence[SignalAction]:
        """The signals a person may send now (empty unless it waits)."""
        ...


_DANGER_WORDS = ("reject", "deny", "abandon", "cancel", "abort", "decline")


class GenericPresenter:
    """The presenter of every machine without its own: the context as JSON, and one
    form per event the waiting state handles (``ExecutionDetail.awaits``) with an empty,
    editable JSON payload — how an approval of a generic machine looks."""

    def sections(self, view: ExecutionView) -> Sequence[Section]:
        """One folded section holding the stored context as indented JSON."""
        context = json_data(view.detail.record.context)
        text = orjson.dumps(context, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode()
        return (Section("Context", text=text, open=False),)

    def actions(self, view: ExecutionView) -> Sequence[SignalAction]:
        """One :class:`SignalAction` per awaited event, sorted by name; the event the
        waiting state's timer sends says when it will."""
        record = view.detail.record
        timer_event = None
        if view.table is not None and record.deadline_at is not None:
            try:
                timeout = view.table.state(record.state).timeout
            except KeyError:
                timeout = None
            timer_event = None if timeout is None else timeout.event
        actions = []
        for event in view.detail.awaits:
            description = view.event_description(event)
            if event == timer_event and record.deadline_at is not None:
                when = record.deadline_at.strftime("%Y-%m-%d %H:%M:%SZ")
                description = f"{description} (the state's timer sends it at {when})".strip()
            actions.append(
                SignalAction(
                    event=event,
                    label=event,
                    description=description,
                    danger=any(word in event.lower() for word in _DANGER_WORDS),
                )
            )
        return tuple(actions)


#: The presenter used for machines that have none of their own.
GENERIC_PRESENTER: Presenter = GenericPresenter()


def default_presenters() -> dict[str, Presenter]:
    """The presenters the console uses unless told otherwise, by machine name.

    Empty for now: every machine gets :data:`GENERIC_PRESENTER` (the agent's presenter
    comes next: ``docs/console.md``, "Presenters")."""
    return {}


def presenter_for(presenters: Mapping[str, Presenter], machine: str) -> Presenter:
    """The presenter registered for ``machine``, else :data:`GENERIC_PRESENTER`."""
    return presenters.get(machine, GENERIC_PRESENTER)


__all__ = [
    "GENERIC_PRESENTER",
    "ExecutionView",
    "GenericPresenter",
    "Presenter",
    "Section",
    "SignalAction",
    "default_presenters",
    "presenter_for",
]
