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
output_rejected       ``{"attempt", "error"}`` — an answer that was not valid structured output
                      (``docs/agent.md``, "Structured output")
final_output          ``{"text"}``
execution_<outcome>   ``{"status", "error"}``
====================  =====================================================================

``message`` is an OpenAI chat message; ``context`` is true when the message joins the
agent's **history** — the conversation later executions of the agent continue — which
holds the messages of executions that ended ``completed`` or ``handed_off`` (the handoff
call itself excluded: its tool call has no result). :func:`history` reads it back from
the store (``docs/agent.md``, "Conversation history").
"""

from __future__ import annotations

from phronomy_fsm.agent.context import Outcome, SessionContext
from phronomy_fsm.agent.types import Message
from phronomy_fsm.durable.ports import ExecutionStore
from phronomy_fsm.durable.records import JournalEntry
from phronomy_fsm.durable.types import BarrierRecords

#: Journal kinds whose ``data["message"]`` is a chat message of the conversation.
MESSAGE_KINDS = ("user_message", "assistant_message", "tool_message")

#: Outcomes whose conversation joins the agent's history.
IN_HISTORY = frozenset({Outcome.COMPLETED, Outcome.HANDED_OFF})


def session_records(ctx: SessionContext, commit: str, state: str) -> BarrierRecords | None:
    """The ``records`` hook of the ``agent_session`` machine: the transcript of a
    finished execution (module docstring), added to its ``@final``, ``@cancel`` or
    finishing ``@resolution`` commit (an operator ended it); nothing for ``@wait``.
    Loop thread; pure."""
    if commit not in ("@final", "@cancel", "@resolution"):
        return None
    outcome = ctx.outcome if commit == "@final" else None
    joins = outcome in IN_HISTORY
    entries: list[JournalEntry] = [JournalEntry("input_received", {"input": ctx.input})]
    responses = iter(ctx.llm_responses)
    results = {r.get("tool_call_id"): r for r in ctx.tool_log}
    last = len(ctx.messages) - 1
    for index, message in enumerate(ctx.messages):
        role = message.get("role")
        if role == "user":
            entries.append(JournalEntry("user_message", {"message": message, "context": joins}))
        elif role == "assistant":
            fact = next(responses, None)
            llm_call_id = fact.get("llm_call_id") if fact is not None else None
            if fact is not None:
                entries.append(JournalEntry("llm_call_recorded", fact))
            handoff_call = outcome is Outcome.HANDED_OFF and index == last
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
    entries.extend(JournalEntry(str(item["kind"]), item.get("data")) for item in ctx.audit)
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


__all__ = ["IN_HISTORY", "MESSAGE_KINDS", "history", "history_messages", "session_records"]
