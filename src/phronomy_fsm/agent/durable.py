"""What each barrier commits: journal records and the next execution record.

Pure functions from live facts to store records (reference §2.4 revision per barrier,
§2.5 metadata, §2.7 journal kinds, §4.1-§4.6 barrier contents). The agent's session
hooks call them on the loop thread to build a
:class:`~phronomy_fsm.store.records.BarrierCommit`; the CLI's ``approve`` uses
:func:`approval_decision_commit` on a store without a live agent.

Durable phases (reference §2.3), set by the barrier that enters them:

=====================  ====================  ===============================================
barrier                status / phase        meaning for recovery
=====================  ====================  ===============================================
admission              preparing/preparing   admitted; input not yet prepared (replayable)
initial_preparation    active/calling_llm    ``pending_llm_call_id`` may have been called
provider_dispatch      active/calling_llm    follow-up call; same meaning
tool_dispatch          active/dispatching_tools  authorised tools may have started
suspension             suspended/approval    waiting for a person
approval_decision      active/resuming       decision recorded, no tool started since
recovery_resolution    active/recovery_*     an operator answered a subject
terminal_commit        terminal/<status>     done
=====================  ====================  ===============================================
"""

from __future__ import annotations

import hashlib
import itertools
import os
import random
import unicodedata
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

import attrs

from phronomy_fsm.agent.types import LLMResponse, Message
from phronomy_fsm.store.records import (
    AgentLifecycle,
    AgentRecord,
    ApprovalItem,
    ApprovalRequest,
    BarrierCommit,
    ErrorInfo,
    ExecutionRecord,
    ExecutionStatus,
    JournalRecord,
    ToolBatchEntry,
)

RECOVERY_CONTRACT_VERSION = 1

# journal kinds (reference §2.7)
INPUT_RECEIVED = "input_received"
USER_MESSAGE = "user_message"
LLM_CALL_RECORDED = "llm_call_recorded"
ASSISTANT_MESSAGE = "assistant_message"
TOOL_RESULT = "tool_result"
TOOL_MESSAGE = "tool_message"
APPROVAL_REQUIRED = "approval_required"
APPROVAL_DECIDED = "approval_decided"
RECOVERY_RESOLVED = "recovery_resolved"
FINAL_OUTPUT = "final_output"

#: Journal kinds whose content is a chat message of the conversation.
MESSAGE_KINDS = frozenset({USER_MESSAGE, ASSISTANT_MESSAGE, TOOL_MESSAGE})


# Ids are drawn from a generator seeded from the OS's random source rather than from
# ``os.urandom`` per call: ``getrandom(2)`` releases the GIL, and on the dispatcher loop
# thread every release waits for the GIL back behind the store and worker threads
# (measured: 13 % of the loop thread in the agent benchmark). Ids need uniqueness, not
# secrecy; 128 bits from a 19937-bit state seeded with 256 OS bits, reseeded in a forked
# child so parent and child never share a stream.
_random = random.Random()
_RECORD_PREFIX = ""
_record_counter = itertools.count(1)


def _seed() -> None:
    global _RECORD_PREFIX, _record_counter
    _random.seed(os.urandom(32))
    _RECORD_PREFIX = os.urandom(8).hex()
    _record_counter = itertools.count(1)


_seed()
os.register_at_fork(after_in_child=_seed)


def new_id() -> str:
    """A fresh random id: 32 lowercase hex digits (128 random bits, like uuid4)."""
    return f"{_random.getrandbits(128):032x}"


def new_record_id() -> str:
    """A journal record id: unique per process (random prefix) and cheap (a counter)."""
    return f"{_RECORD_PREFIX}{next(_record_counter):08x}"


#: What an application-chosen id may be — an agent id (``Agent.create``) or an
#: execution id (``invoke(..., execution_id=...)``): it is a key in the store, and the
#: CLI prints it and takes it as an argument (docs/getting-started.md "Ids").
ID_RULE = (
    "a string of 1-128 characters, each a letter, mark, digit, punctuation or symbol "
    "(Unicode categories L, M, N, P, S): no spaces or other whitespace, no control, "
    "format (e.g. bidi override U+202E) or unassigned characters"
)
MAX_ID_CHARS = 128
_ID_CATEGORIES = frozenset("LMNPS")


def id_problem(value: object) -> str | None:
    """Why ``value`` cannot be an agent or execution id (see :data:`ID_RULE`), or None
    when it can. The text names the value safely (``repr``, shortened): it is put into
    error messages. Pure; never raises (issue 11 item 9)."""
    if not isinstance(value, str):
        return f"got {type(value).__name__}, not a string"
    shown = repr(value) if len(value) <= 40 else f"{value[:40]!r}... ({len(value)} characters)"
    if not value or len(value) > MAX_ID_CHARS:
        return f"got {len(value)} characters: {shown}"
    for ch in value:
        if unicodedata.category(ch)[0] not in _ID_CATEGORIES:
            return (
                f"got {shown}, which contains {ch!r} (U+{ord(ch):04X}, {unicodedata.category(ch)})"
            )
    return None


def tool_invocation_id(
    execution_id: str, llm_call_id: str, tool_call_id: str, tool_name: str
) -> str:
    """The semantic id of one tool call (reference §1.2 starting_tools): stable across
    restarts, and the idempotency key handed to the tool."""
    raw = f"{execution_id}\x00{llm_call_id}\x00{tool_call_id}\x00{tool_name}".encode()
    return "tool-" + hashlib.sha256(raw).hexdigest()[:32]


def handoff_target_execution_id(source_execution_id: str, target_agent_id: str) -> str:
    """The deterministic execution id a handoff's target runs under (reference §4.6,
    ADR-051): the same source and target always give the same id."""
    raw = f"{source_execution_id}\0{target_agent_id}".encode()
    return "handoff-target-" + hashlib.sha256(raw).hexdigest()[:40]


@attrs.frozen
class LLMFact:
    """An LLM response not yet journaled (the runtime snapshot of reference §1.5)."""

    response: LLMResponse
    started_at: datetime
    completed_at: datetime


@attrs.frozen
class ToolFact:
    """A finished tool call not yet journaled. ``original_bytes``: the size of the
    result's whole text when it was cut to ``max_tool_result_bytes`` (None: not cut)."""

    tool_invocation_id: str
    tool_call_id: str
    tool_name: str
    llm_call_id: str
    status: str
    content: str
    result: Any = None
    original_bytes: int | None = None


def _record(
    agent_id: str,
    execution_id: str,
    kind: str,
    now: datetime,
    *,
    role: str | None = None,
    content: Any = None,
    llm_call_id: str | None = None,
    tool_call_id: str | None = None,
    tool_invocation_id: str | None = None,
    context_candidate: bool = False,
    metadata: dict[str, Any] | None = None,
) -> JournalRecord:
    return JournalRecord(
        record_id=new_record_id(),
        agent_id=agent_id,
        execution_id=execution_id,
        kind=kind,
        occurred_at=now,
        role=role,
        content=content,
        llm_call_id=llm_call_id,
        tool_call_id=tool_call_id,
        tool_invocation_id=tool_invocation_id,
        context_candidate=context_candidate,
        metadata=metadata or {},
    )


def input_records(
    agent_id: str, execution_id: str, raw_input: Any, now: datetime
) -> list[JournalRecord]:
    """The admission record: the input exactly as received (not a context candidate)."""
    return [_record(agent_id, execution_id, INPUT_RECEIVED, now, role="user", content=raw_input)]


def user_message_records(
    agent_id: str, execution_id: str, text: str, now: datetime
) -> list[JournalRecord]:
    """The filtered user message (a context candidate)."""
    message = Message("user", text)
    return [
        _record(
            agent_id,
            execution_id,
            USER_MESSAGE,
            now,
            role="user",
            content=message.to_json(),
            context_candidate=True,
        )
    ]


def llm_records(
    agent_id: str,
    execution_id: str,
    facts: Iterable[LLMFact],
    now: datetime,
    *,
    context: bool = True,
) -> list[JournalRecord]:
    """Each LLM result: an audit record of the call and the assistant message."""
    out: list[JournalRecord] = []
    for fact in facts:
        r = fact.response
        out.append(
            _record(
                agent_id,
                execution_id,
                LLM_CALL_RECORDED,
                now,
                content={
                    "llm_call_id": r.llm_call_id,
                    "model": r.model,
                    "usage": {
                        "prompt_tokens": r.usage.prompt_tokens,
                        "completion_tokens": r.usage.completion_tokens,
                    },
                    "tool_call_count": len(r.tool_calls),
                    "started_at": fact.started_at.isoformat(),
                    "completed_at": fact.completed_at.isoformat(),
                },
                llm_call_id=r.llm_call_id,
            )
        )
        out.append(
            _record(
                agent_id,
                execution_id,
                ASSISTANT_MESSAGE,
                now,
                role="assistant",
                content=r.message().to_json(),
                llm_call_id=r.llm_call_id,
                context_candidate=context,
            )
        )
    return out


def tool_records(
    agent_id: str,
    execution_id: str,
    facts: Iterable[ToolFact],
    now: datetime,
    *,
    context: bool = True,
) -> list[JournalRecord]:
    """Each finished tool call: an audit ``tool_result`` and the ``tool_message``.
    A result cut to ``max_tool_result_bytes`` adds ``original_bytes`` to the
    ``tool_result`` content (its ``result`` is then the kept text)."""
    out: list[JournalRecord] = []
    for fact in facts:
        content: dict[str, Any] = {
            "status": fact.status,
            "result": fact.result,
            "tool_name": fact.tool_name,
        }
        if fact.original_bytes is not None:
            content["original_bytes"] = fact.original_bytes
        out.append(
            _record(
                agent_id,
                execution_id,
                TOOL_RESULT,
                now,
                content=content,
                llm_call_id=fact.llm_call_id,
                tool_call_id=fact.tool_call_id,
                tool_invocation_id=fact.tool_invocation_id,
            )
        )
        message = Message("tool", fact.content, tool_call_id=fact.tool_call_id, name=fact.tool_name)
        out.append(
            _record(
                agent_id,
                execution_id,
                TOOL_MESSAGE,
                now,
                role="tool",
                content=message.to_json(),
                llm_call_id=fact.llm_call_id,
                tool_call_id=fact.tool_call_id,
                tool_invocation_id=fact.tool_invocation_id,
                context_candidate=context,
            )
        )
    return out


def audit_record(
    agent_id: str, execution_id: str, kind: str, now: datetime, content: Any = None
) -> JournalRecord:
    """An audit fact (approval, terminal outcome ...), never a context candidate."""
    return _record(agent_id, execution_id, kind, now, content=content)


def advance_root(
    root: AgentRecord,
    records: Sequence[JournalRecord],
    now: datetime,
    lifecycle: AgentLifecycle | None = None,
) -> AgentRecord:
    """The agent root after a barrier appending ``records`` (revision + 1, journal head
    moved, lifecycle set when given)."""
    changes: dict[str, Any] = {"journal_head": root.journal_head + len(records)}
    if lifecycle is not None:
        changes["lifecycle"] = lifecycle
    return root.advance(now=now, **changes)


def make_commit(
    barrier: str,
    execution: ExecutionRecord,
    expected_revision: int | None,
    root: AgentRecord,
    records: Sequence[JournalRecord],
    now: datetime,
    lifecycle: AgentLifecycle | None = None,
) -> BarrierCommit:
    """One barrier's commit: the execution, the advanced root and the records."""
    return BarrierCommit(
        barrier=barrier,
        execution=execution,
        expected_revision=expected_revision,
        agent=advance_root(root, records, now, lifecycle),
        journal=tuple(records),
    )


def approval_request_for(
    execution_id: str, items: Sequence[ApprovalItem], now: datetime
) -> ApprovalRequest:
    """A fresh approval request over ``items`` (reference §2.6)."""
    return ApprovalRequest(
        request_id=new_id(), execution_id=execution_id, items=tuple(items), created_at=now
    )


def approval_decision_commit(
    execution: ExecutionRecord,
    root: AgentRecord,
    *,
    request_id: str,
    approved: bool,
    decisions: dict[str, bool] | None,
    now: datetime,
) -> BarrierCommit:
    """The approval-decision barrier (reference §4.5): status active, phase resuming,
    the decision merged into the request, an ``approval_decided`` record.

    Args:
        decisions: ``None`` decides the whole request with ``approved``; otherwise a
            mapping of **every** item's ``tool_invocation_id`` to True (run it) or
            False (reject it) — ``approved`` is then ignored. A mapping that leaves an
            item out is refused: an item nobody named is never approved (issue 11 item
            1; docs/getting-started.md "Tools and approval").

    Raises:
        ApprovalError: the execution is not suspended for approval, the request id does
            not match, it was already decided, or ``decisions`` names unknown items or
            leaves items out. Nothing is built, so nothing is written.
    """
    from phronomy_fsm.errors import ApprovalError

    request = execution.approval_request
    if execution.status is not ExecutionStatus.SUSPENDED or request is None:
        raise ApprovalError(
            f"execution {execution.execution_id} is {execution.status.value} (phase {execution.phase}), "
            "not suspended for approval",
            execution_id=execution.execution_id,
        )
    if request.request_id != request_id:
        raise ApprovalError(
            f"approval request {request_id!r} does not match the pending request {request.request_id!r} "
            f"of execution {execution.execution_id}",
            execution_id=execution.execution_id,
        )
    if request.approved is not None:
        raise ApprovalError(
            f"approval request {request_id} was already decided",
            execution_id=execution.execution_id,
        )
    items = {i.tool_invocation_id for i in request.items}
    check_decisions(execution.execution_id, request_id, items, decisions)
    whole = decisions is None
    decided = {item: approved if whole else bool(decisions[item]) for item in sorted(items)}  # type: ignore[index]
    overall = approved if whole else any(decided.values())
    content = {
        "approval_request_id": request_id,
        "approved": overall,
        "decisions": decided,
        "global": whole,
    }
    records = [
        audit_record(execution.agent_id, execution.execution_id, APPROVAL_DECIDED, now, content)
    ]
    metadata = dict(execution.metadata)
    metadata["approval_decisions"] = decided
    metadata["approval_global"] = whole
    updated = execution.advance(
        now=now,
        status=ExecutionStatus.ACTIVE,
        phase="resuming",
        approval_request=attrs.evolve(request, approved=overall),
        metadata=metadata,
    )
    return make_commit(
        "approval_decision", updated, execution.revision, root, records, now, AgentLifecycle.ACTIVE
    )


def check_decisions(
    execution_id: str,
    request_id: str,
    items: set[str] | frozenset[str],
    decisions: dict[str, bool] | None,
) -> None:
    """Refuse per-item ``decisions`` that do not decide exactly the request's items.

    Args:
        execution_id: named in the error.
        request_id: the approval request being decided.
        items: the ``tool_invocation_id`` of every item of the request.
        decisions: ``None`` (the whole request is decided at once: always fine) or
            the per-item mapping.

    Raises:
        ApprovalError: ``decisions`` names a tool invocation that is not an item of
            the request, or leaves an item out (an unnamed item is never approved;
            issue 11 item 1). The message lists the ids.
    """
    from phronomy_fsm.errors import ApprovalError

    if decisions is None:
        return
    unknown = set(decisions) - set(items)
    if unknown:
        raise ApprovalError(
            f"decisions name unknown tool invocations, not part of request {request_id}: "
            f"{sorted(unknown)}",
            execution_id=execution_id,
        )
    missing = set(items) - set(decisions)
    if missing:
        raise ApprovalError(
            f"per-item decisions must decide every item of request {request_id} of execution "
            f"{execution_id}; missing: {sorted(missing)}. Give True (run) or False (reject) "
            "for each tool_invocation_id, or leave decisions out to decide the whole request "
            "with approved=True/False",
            execution_id=execution_id,
        )


def batch_entries(children: Iterable[Any]) -> tuple[ToolBatchEntry, ...]:
    """The durable tool batch from live tool invocations (reference §2.5)."""
    return tuple(
        ToolBatchEntry(
            tool_invocation_id=c.tool_invocation_id,
            tool_call_id=c.call.id,
            tool_name=c.call.name,
            llm_call_id=c.llm_call_id,
            arguments=c.arguments if c.arguments is not None else c.call.arguments_json,
            status=c.status,
            result=c.result,
            error=c.error,
        )
        for c in children
    )


def error_info(error: BaseException | None, fallback: str = "execution failed") -> ErrorInfo:
    """Durable description of ``error`` (or a generic one)."""
    if error is None:
        return ErrorInfo("ExecutionFailedError", fallback)
    return ErrorInfo.from_exception(error)
