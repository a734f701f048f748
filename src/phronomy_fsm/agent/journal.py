"""What an agent execution leaves in the journal, and the conversation history read back.

An agent execution's context holds its whole conversation while it runs; when it
finishes (the engine's ``@final`` or ``@cancel`` commit, or an operator's answer that
ends it) :func:`session_records` adds its
transcript to that same commit as journal entries, in conversation order:

====================  =====================================================================
kind                  data
====================  =====================================================================
input_received        ``{"input"}`` — the input exactly as received
user_message          ``{"message", "context"}`` — the filtered input
llm_call_recorded     ``{"llm_call_id", "model", "usage", "finish_reason", "tool_call_count"}``
assistant_message     ``{"message", "context", "llm_call_id"}``
tool_result           ``{"tool_invocation_id", "tool_call_id", "tool_name", "status",
                      "result", "error", "original_bytes"}`` — the error text of a tool
                      that raised is kept here
tool_message          ``{"message", "context", "tool_invocation_id"}``
approval_required     ``{"approval_request_id", "items"}``
approval_decided      ``{"approval_request_id", "decisions", "approved"}``
final_output          ``{"text"}``
execution_<outcome>   ``{"status", "error"}``
====================  =====================================================================

Approval entries come where they happened (after the assistant message whose tool calls
they are about): :func:`transcript` builds the list, and reading the same list from a
running execution's context gives a prefix of it (``docs/agent.md``, "Event streams").
``message`` is an OpenAI chat message; ``context`` is true when the message joins the
agent's **history** — the conversation later executions of the agent continue — which
holds the messages of executions that ended ``completed`` or ``handed_off`` (the handoff
call itself excluded: its tool call has no result). :func:`history` reads it back from
the store (``docs/agent.md``, "Conversation history").
"""

from __future__ import annotations

import math
from typing import Any

from phronomy_fsm.agent.context import Outcome, SessionContext
from phronomy_fsm.agent.types import Message
from phronomy_fsm.durable.ports import ExecutionStore
from phronomy_fsm.durable.records import JournalEntry
from phronomy_fsm.durable.types import BarrierRecords

#: Journal kinds whose ``data["message"]`` is a chat message of the conversation.
MESSAGE_KINDS = ("user_message", "assistant_message", "tool_message")

#: Outcomes whose conversation joins the agent's history.
IN_HISTORY = frozenset({Outcome.COMPLETED, Outcome.HANDED_OFF})


def transcript(
    input: Any,
    messages: list[dict[str, Any]],
    llm_responses: list[dict[str, Any]],
    tool_log: list[dict[str, Any]],
    audit: list[dict[str, Any]],
    *,
    joins: bool,
    handed_off: bool,
) -> list[JournalEntry]:
    """The transcript part of an execution's journal (module docstring), from the
    context's lists (a :class:`SessionContext`'s, or their JSON in a stored record):
    ``input_received``, then each message in conversation order — an assistant message
    after its ``llm_call_recorded``, a tool message after its ``tool_result`` — with the
    approval entries of ``audit`` placed where they happened (an audit item's ``at``:
    how many messages there were; an item without one goes last, as journals written
    before it existed have them). ``joins``: the messages join the history; with
    ``handed_off`` the last (handoff) call does not.

    Each list only grows while the execution runs, and each message is recorded with
    its facts in one action, so the transcript of an earlier revision is a prefix of a
    later one's, up to the ``context`` flags (what ``docs/agent.md``, "Event streams",
    relies on). Pure."""
    entries: list[JournalEntry] = [JournalEntry("input_received", {"input": input})]
    responses = iter(llm_responses)
    results = {r.get("tool_call_id"): r for r in tool_log}
    pending_audit = list(audit)
    last = len(messages) - 1

    def flush_audit(upto: float) -> None:
        while pending_audit and _audit_position(pending_audit[0]) <= upto:
            item = pending_audit.pop(0)
            entries.append(JournalEntry(str(item["kind"]), item.get("data")))

    for index, message in enumerate(messages):
        flush_audit(index)
        role = message.get("role")
        if role == "user":
            entries.append(JournalEntry("user_message", {"message": message, "context": joins}))
        elif role == "assistant":
            fact = next(responses, None)
            llm_call_id = fact.get("llm_call_id") if fact is not None else None
            if fact is not None:
                entries.append(JournalEntry("llm_call_recorded", fact))
            handoff_call = handed_off and index == last
            entries.append(
                JournalEntry(
                    "assistant_message",
                    {
                        "message": message,
                        "context": joins and not handoff_call,
                        "llm_call_id": llm_call_id,
                    },
                )
            )
        elif role == "tool":
            result = results.get(message.get("tool_call_id"))
            if result is not None:
                entries.append(JournalEntry("tool_result", result))
            entries.append(
                JournalEntry(
                    "tool_message",
                    {
                        "message": message,
                        "context": joins,
                        "tool_invocation_id": (result or {}).get("tool_invocation_id"),
                    },
                )
            )
    flush_audit(math.inf)
    return entries


def _audit_position(item: dict[str, Any]) -> float:
    """Where an audit item goes: before the message with this index (``at``)."""
    at = item.get("at")
    return at if isinstance(at, int) and not isinstance(at, bool) else math.inf


def session_records(ctx: SessionContext, commit: str, state: str) -> BarrierRecords | None:
    """The ``records`` hook of the ``agent_session`` machine: the transcript of a
    finished execution (module docstring), added to its ``@final``, ``@cancel`` or
    finishing ``@resolution`` commit (an operator ended it); nothing for ``@wait``.
    Loop thread; pure."""
    if commit not in ("@final", "@cancel", "@resolution"):
        return None
    outcome = ctx.outcome if commit == "@final" else None
    entries = transcript(
        ctx.input,
        ctx.messages,
        ctx.llm_responses,
        ctx.tool_log,
        ctx.audit,
        joins=outcome in IN_HISTORY,
        handed_off=outcome is Outcome.HANDED_OFF,
    )
    if outcome is Outcome.COMPLETED:
        entries.append(JournalEntry("final_output", {"text": ctx.output}))
    status = (
        outcome.value
        if outcome is not None
        else {"@cancel": "ended", "@resolution": "resolved_failed"}.get(commit, "ended")
    )
    entries.append(
        JournalEntry(
            f"execution_{status}",
            {"status": status, "error": ctx.error, "error_type": ctx.error_type},
        )
    )
    return BarrierRecords(journal=tuple(entries))


def history_messages(entries: list[tuple[str, JournalEntry]]) -> list[Message]:
    """The history among ``(execution_id, entry)`` pairs in journal order: the
    messages marked ``context``."""
    out = []
    for _execution_id, entry in entries:
        data = entry.data
        if entry.kind in MESSAGE_KINDS and isinstance(data, dict) and data.get("context"):
            out.append(Message.from_json(data["message"]))
    return out


def history(store: ExecutionStore, agent_id: str) -> list[Message]:
    """The conversation of ``agent_id``'s finished executions, as later LLM calls see
    it (module docstring). Raises StorageError."""
    entries = store.journal_for_key(agent_id, statuses=("completed",), kinds=MESSAGE_KINDS)
    return history_messages(entries)


__all__ = [
    "IN_HISTORY",
    "MESSAGE_KINDS",
    "history",
    "history_messages",
    "session_records",
    "transcript",
]
