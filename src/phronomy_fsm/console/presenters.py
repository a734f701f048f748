"""Per-machine presenters: what the console adds to an execution's page for its machine.

The console draws every execution of every machine the same way — its facts, its
diagram, its barrier timeline, signals, journal, pending effects, the operator's
resolve form and cancel. What *only a machine's application knows* comes from a
**presenter**: extra sections to show and the actions a person may take while it
waits. :class:`GenericPresenter` shows the context and offers one form per event the
waiting state handles, with a JSON payload; :class:`AgentPresenter` (machines
``agent_session`` and ``tool_call``) shows an agent's conversation, its tool calls and
a tool call's tool and arguments, and offers the decision on a pending approval
request — approve or reject per tool call.

A presenter is any object with the two methods of :class:`Presenter`; register one
per machine name with ``create_app(..., presenters={"my_machine": MyPresenter()})``
(``docs/console.md``, "Presenters"). Whatever a presenter offers, the form goes through
the operator library with the page's revision — a :class:`SignalAction` through
:func:`phronomy_fsm.operator.signal_execution`, an :class:`ApprovalAction` through
:func:`phronomy_fsm.operator.approve_execution` (which checks the request and writes the
``approval_decided`` signal): the library, not the presenter, decides whether it may be
sent.

Must not: read or write the store (a presenter gets what the page read), import the
web framework.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Protocol

import attrs
import orjson

from phronomy_fsm.durable.codec import json_data
from phronomy_fsm.durable.records import ExecutionStatus
from phronomy_fsm.generated import agent_session
from phronomy_fsm.operator import (
    AGENT_MACHINE,
    TOOL_CALL_MACHINE,
    AgentView,
    BudgetView,
    ExecutionDetail,
    MessageView,
)
from phronomy_fsm.table import MachineTable


def _json_text(value: Any) -> str:
    """``value`` (JSON data) as indented JSON with sorted keys."""
    return orjson.dumps(
        value, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS
    ).decode()


@attrs.frozen
class MessageLine:
    """One message of a conversation a :class:`Section` shows: its ``role`` (``user``,
    ``assistant``, ``tool``...), its ``text`` and a ``detail`` line (the tool calls an
    assistant message asks for, the tool a result comes from)."""

    role: str
    text: str
    detail: str = ""


@attrs.frozen
class Section:
    """A block of an execution's page a presenter adds.

    Args:
        title: its heading.
        rows: ``(label, text)`` pairs shown as a two-column table.
        messages: a conversation, one :class:`MessageLine` per message, in order.
        links: ``(text, execution_id)`` pairs shown as links to those executions'
            pages (an agent's tool calls, a tool call's agent execution).
        text: preformatted text (JSON, a transcript) shown below the rows.
        open: shown expanded (``False``: folded, the title clickable).
    """

    title: str
    rows: tuple[tuple[str, str], ...] = ()
    messages: tuple[MessageLine, ...] = ()
    links: tuple[tuple[str, str], ...] = ()
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

    #: which form the page draws for it
    form: ClassVar[str] = "signal"

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
class ApprovalItem:
    """One tool call of a pending approval request: its tool invocation id (what a
    decision names), the tool, its validated arguments as indented JSON and why it
    needs a person."""

    tool_invocation_id: str
    tool_name: str
    arguments_text: str
    reason: str = ""


@attrs.frozen
class ApprovalAction:
    """The decision on an agent execution's pending approval request: the page draws
    one form with approve and reject per item, sent to
    :func:`phronomy_fsm.operator.approve_execution` with the page's revision.

    Args:
        request_id: the approval request's id.
        items: its tool calls, in the request's order.
        commands: the same decision as ``phronomy-fsm approve`` commands (shown folded).
        pending: a decision for the request already in the execution's inbox, not yet
            applied by its worker, described (``None``: none) — the page then shows the
            items without a form (a second decision would be refused).
    """

    #: which form the page draws for it
    form: ClassVar[str] = "approval"

    request_id: str
    items: tuple[ApprovalItem, ...]
    commands: tuple[str, ...] = ()
    pending: str | None = None


#: What a presenter may offer on a waiting execution's page.
Action = SignalAction | ApprovalAction


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

    def actions(self, view: ExecutionView) -> Sequence[Action]:
        """What a person may do now (empty unless it waits): signals to send, an
        approval request to decide."""
        ...


_DANGER_WORDS = ("reject", "deny", "abandon", "cancel", "abort", "decline")


class GenericPresenter:
    """The presenter of every machine without its own: the context as JSON, and one
    form per event the waiting state handles (``ExecutionDetail.awaits``) with an empty,
    editable JSON payload — how an approval of a generic machine looks."""

    def sections(self, view: ExecutionView) -> Sequence[Section]:
        """One folded section holding the stored context as indented JSON."""
        context = json_data(view.detail.record.context)
        return (Section("Context", text=_json_text(context), open=False),)

    def actions(self, view: ExecutionView) -> Sequence[Action]:
        """One :class:`SignalAction` per awaited event, sorted by name. The event the
        waiting state's timer sends is not among them (``ExecutionDetail.awaits``
        leaves it out: a timer is not a signal a person sends); the page says when
        the timer fires."""
        return tuple(
            SignalAction(
                event=event,
                label=event,
                description=view.event_description(event),
                danger=any(word in event.lower() for word in _DANGER_WORDS),
            )
            for event in view.detail.awaits
        )


#: The presenter used for machines that have none of their own.
GENERIC_PRESENTER: Presenter = GenericPresenter()


def _message_line(message: MessageView) -> MessageLine:
    detail = ""
    if message.tool_calls:
        detail = "calls " + ", ".join(message.tool_calls)
    elif message.role == "tool" and message.name:
        detail = f"result of {message.name}"
    return MessageLine(message.role, message.text or "", detail)


def _tool_call_links(context: Mapping[str, Any], agent: AgentView) -> tuple[tuple[str, str], ...]:
    """A link per tool-call execution of the agent's execution, named by its tool
    and its status as the agent last recorded it."""
    known: dict[str, tuple[str, str]] = {}
    for entry in [*(context.get("tool_log") or ()), *(context.get("tools") or ())]:
        if isinstance(entry, dict) and isinstance(entry.get("tool_invocation_id"), str):
            name = str(entry.get("tool_name", "?"))
            known[entry["tool_invocation_id"]] = (name, str(entry.get("status", "")))
    links = []
    for execution_id in agent.tool_calls:
        name, status = known.get(execution_id, ("tool call", ""))
        links.append((f"{name} {execution_id}" + (f" ({status})" if status else ""), execution_id))
    return tuple(links)


def _pending_decision(detail: ExecutionDetail, request_id: str) -> str | None:
    """A decision on ``request_id`` waiting in the inbox, as one line (or ``None``)."""
    for signal in detail.signals:
        payload = signal.payload if isinstance(signal.payload, dict) else {}
        if (
            signal.consumed_revision is None
            and signal.event == agent_session.Event.APPROVAL_DECIDED
            and payload.get("request_id") == request_id
        ):
            decisions = payload.get("decisions")
            if isinstance(decisions, dict):
                approved = sum(1 for v in decisions.values() if v is True)
                what = f"{approved} approved, {len(decisions) - approved} rejected"
            else:
                what = "approve all" if payload.get("approved") else "reject the whole request"
            by = payload.get("by") or signal.sender or "?"
            return f"signal #{signal.seq} by {by}: {what}"
    return None


def _budget_section(budget: BudgetView) -> Section:
    """An agent execution's budget: spent against each limit, the policy, the pending
    request and the ``extend-budget`` command that answers it (``docs/agent.md``,
    "Budgets")."""
    rows = [("when exhausted", budget.on_exhausted)]
    for name, spent, allowed in budget.rows():
        if allowed is not None or spent:
            rows.append((name, f"spent {spent} of {'no limit' if allowed is None else allowed}"))
    request = budget.request
    if request is not None:
        state = "pending" if budget.pending else ("extended" if request.get("decided") else "-")
        text = (
            f"{request.get('request_id')} ({state}): {request.get('limit')} spent "
            f"{request.get('spent')} of {request.get('allowed')}"
        )
        rows.append(("budget request", text))
    return Section(
        "Budget",
        rows=tuple(rows),
        text=f"extend it on the command line:\n{budget.command}" if budget.command else None,
    )


class AgentPresenter:
    """The presenter of an agent's executions (``agent_session``) and of their tool
    calls (``tool_call``), from the agent's side of the operator's detail
    (:class:`~phronomy_fsm.operator.AgentView`, read from the stored context).

    - An agent's execution: a **Conversation** section (this execution's messages:
      the input as the LLM got it, each answer with the tool calls it asked for, each
      tool result), an **Agent** section (agent id, input, outcome, answer or error,
      LLM calls and token counts, links to its tool-call executions), a **Budget**
      section when it has one (spent against each limit, the pending request and its
      ``extend-budget`` command) and the context;
      while it waits for approval, an :class:`ApprovalAction` with one approve/reject
      choice per tool call.
    - A tool call: a **Tool call** section (the tool, its arguments, its idempotency
      key, result or error, a link to the agent's execution) and the context; a tool
      call parked for an operator gets the console's resolve form as every execution
      does, its subject named in the agent's terms.

    Anything else (an execution of these machines with no agent in its context) is
    shown by :data:`GENERIC_PRESENTER`.
    """

    def sections(self, view: ExecutionView) -> Sequence[Section]:
        """The agent's sections, then the context (folded)."""
        agent = view.detail.agent
        generic = tuple(GENERIC_PRESENTER.sections(view))
        if agent is None:
            return generic
        raw = json_data(view.detail.record.context)
        context: Mapping[str, Any] = raw if isinstance(raw, dict) else {}
        if agent.kind == "tool_call":
            rows = [
                ("tool", str(agent.tool_name)),
                ("arguments", _json_text(agent.arguments)),
                ("tool invocation id", view.detail.record.execution_id),
                ("provider's call id", str(context.get("tool_call_id", "-"))),
                ("agent", agent.agent_id),
            ]
            if agent.result is not None:
                rows.append(("result", _json_text(agent.result)))
            if agent.error is not None:
                rows.append(("error", agent.error))
            parent = agent.parent_execution_id
            links = (("the agent's execution " + parent, parent),) if parent else ()
            return (Section("Tool call", rows=tuple(rows), links=links), *generic)
        raw_usage = context.get("usage")
        usage: Mapping[str, Any] = raw_usage if isinstance(raw_usage, dict) else {}
        rows = [
            ("agent", agent.agent_id),
            ("input", agent.input if isinstance(agent.input, str) else _json_text(agent.input)),
        ]
        if agent.outcome is not None:
            rows.append(("outcome", agent.outcome))
        if agent.output is not None:
            rows.append(("answer", agent.output))
        if agent.error is not None:
            rows.append(("error", agent.error))
        tokens = (
            f"{usage.get('prompt_tokens', 0)} input, {usage.get('completion_tokens', 0)} output"
        )
        rows.append(("LLM calls", f"{context.get('llm_calls', 0)} ({tokens} tokens)"))
        conversation = Section(
            "Conversation", messages=tuple(_message_line(m) for m in agent.messages)
        )
        facts = Section("Agent", rows=tuple(rows), links=_tool_call_links(context, agent))
        budget = () if agent.budget is None else (_budget_section(agent.budget),)
        return (conversation, facts, *budget, *generic)

    def actions(self, view: ExecutionView) -> Sequence[Action]:
        """An agent's execution waiting for a decision on its approval request: one
        :class:`ApprovalAction`; nothing else (its other events are not sent by hand:
        ``approval_decided`` goes through the approval check, ``tool_finished`` comes
        from its tool calls). A tool call: the generic forms (its machine takes none)."""
        detail = view.detail
        agent = detail.agent
        if agent is None or agent.kind == "tool_call":
            return GENERIC_PRESENTER.actions(view)
        approval = agent.approval
        if (
            approval is None
            or approval.decided
            or detail.record.status is not ExecutionStatus.WAITING
        ):
            return ()
        items = tuple(
            ApprovalItem(
                item.tool_invocation_id, item.tool_name, _json_text(item.arguments), item.reason
            )
            for item in approval.items
        )
        pending = _pending_decision(detail, approval.request_id)
        commands = () if pending is not None else approval.commands
        return (ApprovalAction(approval.request_id, items, commands, pending),)


#: The presenter of the agent's two machines.
AGENT_PRESENTER: Presenter = AgentPresenter()


def default_presenters() -> dict[str, Presenter]:
    """The presenters the console uses unless told otherwise, by machine name: the
    agent's two machines (``agent_session`` and ``tool_call``) get
    :data:`AGENT_PRESENTER`; every other machine :data:`GENERIC_PRESENTER`
    (``docs/console.md``, "Presenters")."""
    return {AGENT_MACHINE: AGENT_PRESENTER, TOOL_CALL_MACHINE: AGENT_PRESENTER}


def presenter_for(presenters: Mapping[str, Presenter], machine: str) -> Presenter:
    """The presenter registered for ``machine``, else :data:`GENERIC_PRESENTER`."""
    return presenters.get(machine, GENERIC_PRESENTER)


__all__ = [
    "AGENT_PRESENTER",
    "GENERIC_PRESENTER",
    "Action",
    "AgentPresenter",
    "ApprovalAction",
    "ApprovalItem",
    "ExecutionView",
    "GenericPresenter",
    "MessageLine",
    "Presenter",
    "Section",
    "SignalAction",
    "default_presenters",
    "presenter_for",
]
