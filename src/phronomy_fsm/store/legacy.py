"""Agent executions written by the agent layer of schema versions 1-4, converted for
the durable engine (SQLite migration ``0005_agents_on_the_engine``).

Before version 5 an agent execution was stored in the agent layer's own format
(``status``/``phase``, a tool batch, an approval request) with its conversation in the
``journal`` table. The engine stores an ``agent_session`` execution with its
conversation in its context (``docs/agent.md``). :func:`convert_execution` rewrites one
stored execution, exactly as a person reading it would, and never so that an effect
might run twice (``docs/store.md``, "Upgrading to version 5"):

- **finished** executions keep their outcome: ``completed``/``rejected``/``handed_off``
  finish ``completed`` in that state, ``failed``/``blocked`` finish ``failed`` in
  that state, ``cancelled`` finishes ``cancelled`` (in the final state ``failed``: the
  old layer did not keep the state it was cancelled in); their journal becomes their
  journal entries, and the messages of ``completed``/``handed_off`` ones stay the
  agent's history (marked ``context``);
- one **suspended for approval** waits again, in ``suspended``, with the same
  approval request id and tool calls (their ids are the idempotency keys the old layer
  would have used): approving it runs its tools as the engine does;
- any other **active** one (between barriers when the old process stopped: an LLM call
  or a tool may or may not have happened) is parked in ``recovery_required`` with the
  execution as its subject (``subject`` ``None``) — the only answer an operator can
  give is ``failed``; whoever asked runs the request again if it must be.

An active execution's conversation, LLM answers, tool results and approval records go
into its context (:class:`~phronomy_fsm.agent.context.SessionContext` as JSON), which
the engine journals when it ends. :func:`convert_journal` turns the old journal records into the engine's journal
entries (kinds and data as ``phronomy_fsm.agent.journal`` writes them).

The functions are pure: JSON in, JSON out.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from phronomy_fsm.durable.records import (
    DurablePoint,
    ErrorInfo,
    ExecutionRecord,
    ExecutionStatus,
    JournalEntry,
    RecoveryInfo,
    ResolutionOutcome,
    to_json,
)
from phronomy_fsm.generated import agent_session

#: The engine state and status each finished legacy status becomes.
FINISHED = {
    "completed": ("completed", ExecutionStatus.COMPLETED),
    "rejected": ("rejected", ExecutionStatus.COMPLETED),
    "handed_off": ("handed_off", ExecutionStatus.COMPLETED),
    "failed": ("failed", ExecutionStatus.FAILED),
    "blocked": ("blocked", ExecutionStatus.FAILED),
    "cancelled": ("failed", ExecutionStatus.CANCELLED),
}

#: Journal kinds whose content is a chat message.
_MESSAGE_KINDS = ("user_message", "assistant_message", "tool_message")

#: Old tool batch statuses, as the engine's tool call statuses.
_TOOL_STATUS = {
    "pending": "pending",
    "validating": "pending",
    "authorizing": "pending",
    "awaiting_approval": "awaiting_approval",
    "authorized": "authorized",
    "running": "running",
    "completed": "completed",
    "failed": "failed",
    "rejected": "rejected",
    "cancelled": "failed",
    "invalid": "invalid",
}


#: Journal kinds the engine keeps in the context's ``audit`` until the execution ends.
_AUDIT_KINDS = ("approval_required", "approval_decided")


def _time(text: Any) -> datetime:
    return datetime.fromisoformat(str(text))


def _approval(request: Any, metadata: dict[str, Any]) -> dict[str, Any] | None:
    """The ``ApprovalRequestState`` JSON of a legacy approval request: decided once the
    old layer recorded ``approved``; per-item decisions from its metadata (or all the
    same as the whole request)."""
    if not isinstance(request, dict):
        return None
    items = [i["tool_invocation_id"] for i in request.get("items", [])]
    approved = request.get("approved")
    decisions: dict[str, bool] | None = None
    if approved is not None:
        recorded = metadata.get("approval_decisions")
        decisions = (
            {str(k): bool(v) for k, v in recorded.items()}
            if isinstance(recorded, dict)
            else {item: bool(approved) for item in items}
        )
    return {
        "request_id": request.get("request_id"),
        "items": items,
        "decided": approved is not None,
        "decisions": decisions,
    }


def _audit_data(kind: str, content: Any) -> dict[str, Any]:
    """The data of an approval journal record in the engine's shape
    (``agent/session_hooks.py``): ``approval_required`` ``{approval_request_id,
    items}``; ``approval_decided`` ``{approval_request_id, approved (None when decided
    item by item), decisions, by}``."""
    data = content if isinstance(content, dict) else {}
    if kind == "approval_required":
        return {
            "approval_request_id": data.get("approval_request_id"),
            "items": list(data.get("items") or []),
        }
    whole = data.get("global", True)
    return {
        "approval_request_id": data.get("approval_request_id"),
        "approved": data.get("approved") if whole else None,
        "decisions": data.get("decisions"),
        "by": None,
    }


def _context(
    body: dict[str, Any], records: list[dict[str, Any]], outcome: str | None
) -> dict[str, Any]:
    """The ``SessionContext`` JSON of a legacy execution (``agent/context.py``)."""
    messages = [r["content"] for r in records if r.get("kind") in _MESSAGE_KINDS]
    user = next((m.get("content") for m in messages if m.get("role") == "user"), None)
    responses = []
    usage = {"prompt_tokens": 0, "completion_tokens": 0}
    for record in records:
        if record.get("kind") != "llm_call_recorded":
            continue
        content = record.get("content") or {}
        used = content.get("usage") or {}
        usage["prompt_tokens"] += int(used.get("prompt_tokens") or 0)
        usage["completion_tokens"] += int(used.get("completion_tokens") or 0)
        fact = {
            "llm_call_id": content.get("llm_call_id"),
            "model": content.get("model"),
            "usage": {
                "prompt_tokens": int(used.get("prompt_tokens") or 0),
                "completion_tokens": int(used.get("completion_tokens") or 0),
            },
            "finish_reason": None,
            "tool_call_count": content.get("tool_call_count", 0),
        }
        for key in ("started_at", "completed_at"):  # the old layer's timings, kept
            if content.get(key) is not None:
                fact[key] = content[key]
        responses.append(fact)
    answer = next(
        (m.get("content") for m in reversed(messages) if m.get("role") == "assistant"), None
    )
    tool_log = [
        {
            "tool_invocation_id": r.get("tool_invocation_id"),
            "tool_call_id": r.get("tool_call_id"),
            "tool_name": (r.get("content") or {}).get("tool_name"),
            "status": (r.get("content") or {}).get("status"),
            "result": (r.get("content") or {}).get("result"),
            "error": None,
        }
        for r in records
        if r.get("kind") == "tool_result"
    ]
    request = body.get("approval_request")
    metadata = body.get("metadata") or {}
    tools = []
    awaiting = {i["tool_invocation_id"]: i for i in (request or {}).get("items", [])}
    for entry in body.get("tool_batch") or ():
        status = _TOOL_STATUS.get(str(entry.get("status")), "failed")
        item = awaiting.get(entry.get("tool_invocation_id"), {})
        tools.append(
            {
                "tool_invocation_id": entry.get("tool_invocation_id"),
                "tool_call_id": entry.get("tool_call_id"),
                "tool_name": entry.get("tool_name"),
                "arguments_json": json.dumps(entry.get("arguments"), sort_keys=True),
                "llm_call_id": entry.get("llm_call_id"),
                "status": status,
                "arguments": entry.get("arguments"),
                "reason": item.get("reason"),
                "result": entry.get("result"),
                "content": None,
                "error": entry.get("error"),
                "original_bytes": None,
                "rejected_by": None,
            }
        )
    error = body.get("error") or {}
    return {
        "agent_id": body.get("agent_id"),
        "execution_id": body.get("execution_id"),
        "input": body.get("input"),
        "mode": body.get("invocation_mode") or "invoke",
        "filtered_input": user,
        "messages": messages,
        "pending_llm_call_id": None,
        "llm_calls": int(body.get("llm_call_count") or len(responses)),
        "llm_responses": responses,
        "answer": answer,
        "finish_reason": None,
        "tools": tools,
        "tool_log": tool_log,
        "approval": _approval(request, metadata),
        "audit": [
            {"kind": r["kind"], "data": _audit_data(r["kind"], r.get("content"))}
            for r in records
            if r.get("kind") in _AUDIT_KINDS
        ],
        "outcome": outcome,
        "output": body.get("output"),
        "error": error.get("message") if isinstance(error, dict) else None,
        "error_type": error.get("type") if isinstance(error, dict) else None,
        "blocked_reason": error.get("message")
        if outcome == "blocked" and isinstance(error, dict)
        else None,
        "handoff": metadata.get("handoff"),
        "handoff_error": None,
        "usage": usage,
    }


def convert_execution(body: dict[str, Any], records: list[dict[str, Any]]) -> ExecutionRecord:
    """The engine record of the legacy agent execution ``body`` (its ``records``: its
    journal rows, in order). See the module docstring for what each becomes."""
    status = str(body.get("status"))
    created, updated = _time(body["created_at"]), _time(body["updated_at"])
    revision = int(body.get("revision", 0))
    base = {
        "execution_id": body["execution_id"],
        "machine": agent_session.MACHINE,
        "spec_version": agent_session.SPEC_VERSION,
        "spec_sha256": agent_session.SPEC_SHA256,
        "revision": revision,
        "created_at": created,
        "updated_at": updated,
        "point_revision": revision,
        "exclusive_key": body.get("agent_id"),
        "labels": {"agent_id": body.get("agent_id"), "converted_from": "agent layer v1"},
    }
    error = body.get("error")
    info = (
        ErrorInfo(str(error.get("type")), str(error.get("message")))
        if isinstance(error, dict)
        else None
    )
    if status in FINISHED:
        state, new_status = FINISHED[status]
        outcome = status if status != "cancelled" else None
        return ExecutionRecord(
            state=state,
            point=DurablePoint.FINAL,
            status=new_status,
            context=_context(body, records, outcome),
            error=info if new_status is not ExecutionStatus.COMPLETED else None,
            **base,
        )
    if status == "suspended" and body.get("approval_request"):
        return ExecutionRecord(
            state=agent_session.State.SUSPENDED.value,
            point=DurablePoint.WAIT,
            status=ExecutionStatus.WAITING,
            context=_context(body, records, None),
            **base,
        )
    old = body.get("recovery")
    waited = (
        f"; it was waiting for an operator: {old.get('reason')}"
        if isinstance(old, dict) and old.get("reason")
        else ""
    )
    return ExecutionRecord(
        state=agent_session.State.RECOVERY_REQUIRED.value,
        point=DurablePoint.WAIT,
        status=ExecutionStatus.RECOVERY_REQUIRED,
        context=_context(body, records, None),
        recovery=RecoveryInfo(
            reason=(
                f"started by an earlier version of phronomy_fsm and stopped in phase "
                f"{body.get('phase')!r} (status {status}): an LLM call or a tool may or may "
                "not have happened, and it cannot be resumed; answer failed to end it, then "
                f"run the request again if it must be{waited}"
            ),
            subject=None,
            allowed_outcomes=(ResolutionOutcome.FAILED,),
            detected_at=updated,
        ),
        **base,
    )


def convert_journal(
    records: list[dict[str, Any]], in_history: bool
) -> list[tuple[str, dict[str, Any]]]:
    """``(kind, data)`` of the engine journal entries for one legacy execution's
    journal ``records``; message entries join the history when ``in_history`` and the
    old record said so."""
    out: list[tuple[str, dict[str, Any]]] = []
    for record in records:
        kind = str(record.get("kind"))
        content = record.get("content")
        if kind in _MESSAGE_KINDS:
            data: dict[str, Any] = {
                "message": content,
                "context": bool(in_history and record.get("context_candidate")),
            }
            if record.get("llm_call_id") is not None:
                data["llm_call_id"] = record["llm_call_id"]
            if record.get("tool_invocation_id") is not None:
                data["tool_invocation_id"] = record["tool_invocation_id"]
        elif kind == "tool_result":
            content = content if isinstance(content, dict) else {}
            data = {
                "tool_invocation_id": record.get("tool_invocation_id"),
                "tool_call_id": record.get("tool_call_id"),
                "tool_name": content.get("tool_name"),
                "status": content.get("status"),
                "result": content.get("result"),
                "error": None,
            }
            if content.get("original_bytes") is not None:
                data["original_bytes"] = content["original_bytes"]
        elif kind == "input_received":
            data = {"input": content}
        elif kind in _AUDIT_KINDS:
            data = _audit_data(kind, content)
        else:
            data = content if isinstance(content, dict) else {"content": content}
        out.append((kind, data))
    return out


def encode(record: ExecutionRecord) -> str:
    """The record's stored body (canonical JSON)."""
    return to_json(record)


def encode_entry(kind: str, data: Any, position: int) -> str:
    """The stored body of a converted journal entry (revision 0, at ``position``)."""
    return to_json(JournalEntry(kind, data, 0, position))


__all__ = ["FINISHED", "convert_execution", "convert_journal", "encode", "encode_entry"]
