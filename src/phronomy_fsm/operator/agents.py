"""The operator's view of agent executions, and the agent's own operator actions.

An agent's execution is an execution of the ``agent_session`` machine; each of its
tool calls a ``tool_call`` child execution (``docs/semantics.md``). The generic
operator actions (:mod:`phronomy_fsm.operator.actions`) work on them like on any
execution; this module adds what is particular to agents (the actions ``approve_execution`` and
``resolve_execution`` use it):

- :func:`agent_view`: what the agent was asked, what it answered or why it failed,
  its conversation, its pending approval request, a tool call's arguments and result
  — read from the stored context, so a store is readable without the application;
- the agent's terms in a recovery request (:func:`agent_recovery_terms`) and the
  commands that answer one (:func:`approval_commands`), and
- :func:`check_agent_signal`: the signals that must go through ``approve`` or come
  only from the engine.

Must not: print, exit or parse command-line text.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from typing import Any

from phronomy_fsm.durable.codec import json_data
from phronomy_fsm.durable.records import ExecutionRecord, ExecutionStatus
from phronomy_fsm.errors import SignalRefusedError
from phronomy_fsm.generated import agent_session, tool_call
from phronomy_fsm.operator.views import (
    AGENT_MACHINE,
    TOOL_CALL_MACHINE,
    AgentView,
    ApprovalItemView,
    ApprovalView,
    BudgetView,
    MessageView,
)
from phronomy_fsm.store.open import redact_dsn

assert agent_session.MACHINE == AGENT_MACHINE and tool_call.MACHINE == TOOL_CALL_MACHINE

#: Placeholders of the printed resolve commands of an agent's effects (not JSON, so a
#: command pasted unchanged is refused).
LLM_ANSWER_PLACEHOLDER = '<the LLM answer as JSON: {"content": "..."}>'
TOOL_RESULT_PLACEHOLDER = "<the tool result as JSON>"

#: Events of ``agent_session`` that no operator may signal by hand: a decision goes
#: through ``approve`` (checked against the request), a tool's result comes only from
#: its own ``tool_call`` execution.
_NOT_SIGNALLED = {
    agent_session.Event.APPROVAL_DECIDED.value: "send a decision with phronomy-fsm approve "
    "(it is checked against the pending request)",
    agent_session.Event.BUDGET_EXTENDED.value: "extend a budget with phronomy-fsm "
    "extend-budget (it is checked against the pending request)",
    agent_session.Event.TOOL_FINISHED.value: "a tool call's own execution sends it when it "
    "finishes; answer a tool call that waits for an operator with phronomy-fsm resolve",
    agent_session.Event.LLM_STREAM_CHUNK.value: "the provider's stream posts it in the "
    "running process; an LLM call that waits for an operator is answered with "
    "phronomy-fsm resolve",
}


def is_agent_execution(record: ExecutionRecord) -> bool:
    """True for an agent's execution or one of its tool calls (machines
    ``agent_session`` and ``tool_call`` with an ``agent_id`` in the context)."""
    if record.machine not in (AGENT_MACHINE, TOOL_CALL_MACHINE):
        return False
    ctx = json_data(record.context)
    return isinstance(ctx, dict) and isinstance(ctx.get("agent_id"), str)


def _context(record: ExecutionRecord) -> dict[str, Any]:
    ctx = json_data(record.context)
    return ctx if isinstance(ctx, dict) else {}


def _message(data: Any) -> MessageView | None:
    if not isinstance(data, dict):
        return None
    calls = []
    for call in data.get("tool_calls") or ():
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            calls.append(f"{function.get('name')}({function.get('arguments', '')})")
    content = data.get("content")
    return MessageView(
        role=str(data.get("role", "?")),
        text=content if isinstance(content, str) else None,
        tool_calls=tuple(calls),
        name=data.get("name") if isinstance(data.get("name"), str) else None,
    )


def _error_text(record: ExecutionRecord, ctx: Mapping[str, Any]) -> str | None:
    if ctx.get("error") is not None:
        kind, text = ctx.get("error_type"), str(ctx["error"])
        # a session keeps the type apart; a tool call's text already starts with it
        return f"{kind}: {text}" if kind and not text.startswith(f"{kind}:") else text
    if record.error is not None:
        return record.error.render()
    return None


def approval_commands(
    execution_id: str, request_id: str, *, db_path: str, app_spec: str | None = None
) -> tuple[str, str]:
    """The ``phronomy-fsm approve`` commands that approve and reject ``request_id``
    of ``execution_id`` (shell-quoted; with ``--app`` when given). Pure."""
    words = ["phronomy-fsm", "approve", execution_id, "--request", request_id]
    words += ["--db", redact_dsn(db_path)]
    if app_spec is not None:
        words += ["--app", app_spec]
    return shlex.join(words), shlex.join([*words, "--reject"])


def budget_commands(
    execution_id: str, limit: str, *, db_path: str, app_spec: str | None = None
) -> str:
    """The ``phronomy-fsm extend-budget`` command that raises ``limit`` of a waiting
    ``execution_id`` (shell-quoted, the new value a placeholder). Pure."""
    words = ["phronomy-fsm", "extend-budget", execution_id, "--db", redact_dsn(db_path)]
    if app_spec is not None:
        words += ["--app", app_spec]
    return shlex.join([*words, f"--{limit.replace('_', '-')}", "<new limit>"])


def _budget_view(
    record: ExecutionRecord, ctx: Mapping[str, Any], *, db_path: str, app_spec: str | None
) -> BudgetView | None:
    state = ctx.get("budget")
    if not isinstance(state, Mapping):
        return None
    # the agent layer only for an execution with a budget (``executions list`` never)
    from phronomy_fsm.agent.budget import spent_of

    request = ctx.get("budget_request")
    request = dict(request) if isinstance(request, Mapping) else None
    pending = (
        request is not None
        and not request.get("decided")
        and record.status is ExecutionStatus.WAITING
        and agent_session.TABLE.migrated_state(
            record.spec_version, record.spec_sha256, record.state
        )
        == agent_session.State.BUDGET_EXHAUSTED.value
    )
    return BudgetView(
        limits=dict(state.get("limits") or {}),
        spent=spent_of(ctx).to_dict(),
        on_exhausted=str(state.get("on_exhausted") or "fail"),
        request=request,
        pending=pending,
        command=budget_commands(
            record.execution_id, str(request.get("limit")), db_path=db_path, app_spec=app_spec
        )
        if pending and request is not None
        else None,
    )


def agent_view(
    record: ExecutionRecord,
    *,
    db_path: str,
    app_spec: str | None = None,
    tool_calls: tuple[str, ...] = (),
) -> AgentView | None:
    """The agent's side of ``record`` (``None`` when it is not an agent's execution
    or tool call), with the approve commands of a pending approval request naming
    ``db_path`` (and ``--app app_spec``). ``tool_calls`` are the ids of its tool-call
    executions, when the caller read them. Pure."""
    if not is_agent_execution(record):
        return None
    ctx = _context(record)
    agent_id = str(ctx["agent_id"])
    if record.machine == TOOL_CALL_MACHINE:
        return AgentView(
            kind="tool_call",
            agent_id=agent_id,
            tool_name=ctx.get("tool_name"),
            arguments=ctx.get("arguments"),
            result=ctx.get("result"),
            error=_error_text(record, ctx),
            parent_execution_id=ctx.get("parent_execution_id", record.parent_execution_id),
        )
    messages = tuple(m for m in (_message(d) for d in ctx.get("messages") or ()) if m is not None)
    approval = None
    raw = ctx.get("approval")
    if isinstance(raw, dict) and raw.get("request_id"):
        tools = {
            t.get("tool_invocation_id"): t for t in ctx.get("tools") or () if isinstance(t, dict)
        }
        items = tuple(
            ApprovalItemView(
                tool_invocation_id=str(item),
                tool_name=str(tools.get(item, {}).get("tool_name", "?")),
                arguments=tools.get(item, {}).get("arguments"),
                reason=str(tools.get(item, {}).get("reason") or ""),
            )
            for item in raw.get("items") or ()
        )
        pending = (
            not raw.get("decided")
            and record.status is ExecutionStatus.WAITING
            and agent_session.TABLE.migrated_state(
                record.spec_version, record.spec_sha256, record.state
            )
            == agent_session.State.SUSPENDED.value
        )
        approval = ApprovalView(
            request_id=str(raw["request_id"]),
            items=items,
            decided=bool(raw.get("decided")),
            decisions=raw.get("decisions"),
            commands=approval_commands(
                record.execution_id, str(raw["request_id"]), db_path=db_path, app_spec=app_spec
            )
            if pending
            else (),
        )
    outcome = ctx.get("outcome")
    return AgentView(
        kind="session",
        agent_id=agent_id,
        input=ctx.get("input"),
        messages=messages,
        output=ctx.get("output"),
        outcome=outcome if isinstance(outcome, str) else None,
        error=_error_text(record, ctx),
        approval=approval,
        tool_calls=tool_calls,
        budget=_budget_view(record, ctx, db_path=db_path, app_spec=app_spec),
    )


def agent_recovery_terms(record: ExecutionRecord) -> tuple[str, dict[str, Any]] | None:
    """``(agent_id, subject)`` of an agent's execution or tool call waiting for an
    operator, the subject in the agent's terms
    (:func:`phronomy_fsm.agent.directory.recovery_subject`); ``None`` for another
    machine. Pure."""
    if not is_agent_execution(record):
        return None
    # imported here: the agent layer (httpx, the agent runtime) is heavy, and listing
    # executions must not load it (docs/performance.md, "CLI start-up")
    from phronomy_fsm.agent.directory import recovery_subject

    return str(_context(record)["agent_id"]), recovery_subject(record)


def subject_option(agent_subject: Mapping[str, Any]) -> str | None:
    """The ``--subject`` value that names an agent subject (``llm_call:<id>``,
    ``tool_invocation:<id>``), or ``None`` when it has no id. Pure."""
    kind = agent_subject.get("type")
    ident = agent_subject.get(f"{kind}_id")
    return f"{kind}:{ident}" if kind in ("llm_call", "tool_invocation") and ident else None


def result_placeholder(agent_subject: Mapping[str, Any] | None) -> str | None:
    """The ``--result`` placeholder for an agent subject (``None``: the generic one)."""
    kind = None if agent_subject is None else agent_subject.get("type")
    if kind == "llm_call":
        return LLM_ANSWER_PLACEHOLDER
    if kind == "tool_invocation":
        return TOOL_RESULT_PLACEHOLDER
    return None


def matches_agent_subject(record: ExecutionRecord, subject: str) -> bool | None:
    """Whether ``subject`` (``llm_call:<id>`` or ``tool_invocation:<id>``) names the
    stored subject of an agent's execution or tool call; ``None`` when ``subject`` is
    not in the agent's terms or ``record`` is not an agent's. Pure."""
    terms = agent_recovery_terms(record)
    kind, _, _ident = subject.partition(":")
    if terms is None or kind not in ("llm_call", "tool_invocation"):
        return None
    return subject_option(terms[1]) == subject


def describe_agent_subject(subject: str) -> str:
    """A ``--subject`` value as a phrase for error messages."""
    kind, _, ident = subject.partition(":")
    if kind == "llm_call":
        return f"LLM call {ident}"
    if kind == "tool_invocation":
        return f"tool call {ident}"
    return subject


def check_agent_signal(record: ExecutionRecord, event: str) -> None:
    """Refuse a hand-made signal that must come another way (``approval_decided``:
    ``approve``; ``tool_finished``: the tool call's own execution).

    Raises:
        SignalRefusedError: reason ``use_approve`` or ``internal_event``; nothing was
            written.
    """
    if record.machine != AGENT_MACHINE or event not in _NOT_SIGNALLED:
        return
    raise SignalRefusedError(
        f"execution {record.execution_id} is an agent execution: {event!r} is not sent "
        f"by hand; {_NOT_SIGNALLED[event]}; nothing was written",
        execution_id=record.execution_id,
        reason="use_approve"
        if event == agent_session.Event.APPROVAL_DECIDED.value
        else "internal_event",
    )


def compact_json(value: Any) -> str:
    """``value`` as one line of JSON (sorted keys, non-ASCII kept)."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


__all__ = [
    "LLM_ANSWER_PLACEHOLDER",
    "TOOL_RESULT_PLACEHOLDER",
    "agent_recovery_terms",
    "agent_view",
    "approval_commands",
    "budget_commands",
    "check_agent_signal",
    "compact_json",
    "describe_agent_subject",
    "is_agent_execution",
    "matches_agent_subject",
    "result_placeholder",
    "subject_option",
]
