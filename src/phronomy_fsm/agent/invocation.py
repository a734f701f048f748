"""Live state of one execution and of its tool calls (the session contexts).

:class:`Invocation` is the context of an ``agent_session`` session (reference §1.5
AgentInvocation): the conversation so far, the durable execution record as last
committed, facts waiting for the next barrier, the current tool batch, and how the
execution is meant to end. :class:`ToolInvocation` is the context of one
``tool_invocation`` child session (reference §1.7).

Both are owned by the dispatcher's loop thread: only hooks (which run there) and control
messages change them. Work sent to the offload pool receives immutable snapshots built
from them, never the objects themselves (reference §0 rule 1).
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from phronomy_fsm.agent.durable import LLMFact, ToolFact, handoff_target_execution_id
from phronomy_fsm.agent.types import (
    AbortReason,
    ApprovalDecision,
    LLMResponse,
    Message,
    Resolution,
    ToolCall,
    Usage,
)
from phronomy_fsm.errors import LLMError
from phronomy_fsm.runtime.cancellation import CancellationToken
from phronomy_fsm.store.records import ApprovalRequest, ExecutionRecord, RecoveryDescriptor

if TYPE_CHECKING:
    from phronomy_fsm.agent.agent import Agent
    from phronomy_fsm.agent.tools import Tool
    from phronomy_fsm.runtime.tasks import Task

#: Child statuses meaning "preflight not settled yet" (still validating or authorizing).
PREFLIGHT = frozenset({"pending"})
#: Child statuses that are final.
CHILD_FINAL = frozenset({"completed", "failed", "rejected", "cancelled"})


class ToolInvocation:
    """One tool call of the current batch.

    ``status`` is ``pending`` until the child session halts or finishes; then it is the
    state it stopped in (``awaiting_approval``, ``authorized``, ``completed``, ``failed``,
    ``rejected``, ``cancelled``); ``running`` while dispatched. ``rejected_by`` is
    ``policy``, ``person`` (the whole request) or ``person_item`` (a per-item decision).
    """

    __slots__ = (
        "arguments",
        "call",
        "content",
        "error",
        "journaled",
        "llm_call_id",
        "original_bytes",
        "parent",
        "rejected_by",
        "result",
        "session_id",
        "status",
        "tool",
        "tool_invocation_id",
    )

    def __init__(
        self,
        parent: Invocation,
        tool_invocation_id: str,
        call: ToolCall,
        llm_call_id: str,
        tool: Tool | None,
    ) -> None:
        self.parent = parent
        self.tool_invocation_id = tool_invocation_id
        self.call = call
        self.llm_call_id = llm_call_id
        self.tool = tool
        self.arguments: Any = None
        self.error: str | None = None
        self.result: Any = None
        self.content: str | None = None
        self.status = "pending"
        self.rejected_by: str | None = None
        self.session_id: int | None = None
        self.journaled = False
        #: UTF-8 size of the result's (or error's) whole text when it was cut to the
        #: agent's ``max_tool_result_bytes``; None when nothing was cut
        self.original_bytes: int | None = None

    def __repr__(self) -> str:
        return f"<ToolInvocation {self.call.name} {self.status}>"

    def fact(self) -> ToolFact:
        """The durable fact of this finished call (what the LLM will see)."""
        return ToolFact(
            tool_invocation_id=self.tool_invocation_id,
            tool_call_id=self.call.id,
            tool_name=self.call.name,
            llm_call_id=self.llm_call_id,
            status=self.status,
            content=self.message_text(),
            result=self.result,
            original_bytes=self.original_bytes,
        )

    def message_text(self) -> str:
        """The tool message text: the result, or why there is none."""
        if self.content is not None:
            return self.content
        if self.status == "rejected":
            return f"The call to {self.call.name} was rejected and did not run."
        if self.status == "cancelled":
            return f"The call to {self.call.name} was cancelled."
        return f"Error: {self.error or 'the tool failed'}"


class Invocation:
    """The context of one ``agent_session`` session (see the module docstring)."""

    def __init__(self, agent: Agent, execution_id: str, raw_input: Any, mode: str) -> None:
        self.agent = agent
        self.execution_id = execution_id
        self.raw_input = raw_input
        self.mode = mode
        self.execution: ExecutionRecord | None = None
        self.messages: list[Message] = []
        self.base_len = 0
        self.filtered_input: str | None = None
        self.output: str | None = None
        self.usage = Usage()
        self.llm_facts: list[LLMFact] = []
        self.llm_started_at: Any = None
        self.last_response: LLMResponse | None = None
        self.llm_calls = 0
        self.children: list[ToolInvocation] = []
        self.approval_request: ApprovalRequest | None = None
        self.approval_decision: ApprovalDecision | None = None
        self.resolution: Resolution | None = None
        self.recovery: RecoveryDescriptor | None = None
        self.outcome: str | None = (
            None  # completed / rejected / blocked / handed_off / failed / cancelled
        )
        self.error: BaseException | None = None
        self.abort: AbortReason | None = None
        self.cancellation = CancellationToken()
        self.handoff: dict[str, Any] | None = None
        self.handoff_error: str | None = None
        self.session_id: int | None = None
        self.state = "idle"  # last known agent_session state (halted sessions keep it)
        self.waiters: list[Task[Any]] = []
        self.approvers: list[Task[Any]] = []
        self.resolvers: list[Task[Any]] = []
        self.recovery_announcement: dict[str, Any] | None = None
        self.listener_detached = False
        self.timer: Any = None
        #: wall time at which the execution times out (recorded at admission, re-armed
        #: by recovery); None without a timeout
        self.deadline_at: datetime | None = None
        self.stream_sink: Any = None
        self.delivered = False
        #: the durable revision a read-back after an unproven outcome last continued
        #: from (agent/readback.py: continue once per revision, never in a loop)
        self.readback_continued_at: int | None = None

    def __repr__(self) -> str:
        return f"<Invocation {self.execution_id} {self.state}>"

    @property
    def revision(self) -> int | None:
        """The durable revision last committed (None before admission)."""
        return None if self.execution is None else self.execution.revision

    def decide_handoff(self, response: LLMResponse) -> None:
        """Decide whether ``response`` hands the conversation off (reference §1.5
        ``accept_tool_calls!``): exactly one call of a configured handoff tool sets
        :attr:`handoff` (target agent, deterministic target execution id, call id,
        arguments); a handoff call next to other calls sets :attr:`handoff_error` and
        :attr:`error` (the execution fails); otherwise both are cleared. Used for an
        LLM's answer, an operator's answer to an unproven LLM call, and an answer
        recovered from the journal after a restart (issue 11 item 10d)."""
        self.handoff = self.handoff_error = None
        handoffs = self.agent.handoffs
        handoff_calls = [c for c in response.tool_calls if c.name in handoffs]
        if not handoff_calls:
            return
        if len(response.tool_calls) > 1:
            self.handoff_error = "a handoff must be the only tool call of a response"
            self.error = LLMError(self.handoff_error, execution_id=self.execution_id)
            return
        call = handoff_calls[0]
        target = handoffs[call.name]
        try:
            arguments = call.parsed_arguments()
        except ValueError:
            arguments = {"raw": call.arguments_json}
        self.handoff = {
            "target_agent_id": target,
            "target_execution_id": handoff_target_execution_id(self.execution_id, target),
            "tool_call_id": call.id,
            "arguments": arguments,
            "llm_call_id": response.llm_call_id,
        }

    # --- facts waiting for the next barrier -------------------------------------

    def pending_tool_facts(self) -> list[ToolInvocation]:
        """Finished children whose results are not journaled yet."""
        return [c for c in self.children if c.status in CHILD_FINAL and not c.journaled]

    # --- batch predicates (reference §1.4 guards) ---------------------------------

    def _statuses(self) -> list[str]:
        return [c.status for c in self.children]

    def preflight_complete(self) -> bool:
        """Every child has settled validation and authorization."""
        return bool(self.children) and all(c.status not in PREFLIGHT for c in self.children)

    def batch_rejected(self) -> bool:
        """A child was rejected by policy or by a person rejecting the whole request."""
        return (
            self.preflight_complete()
            and any(
                c.status == "rejected" and c.rejected_by in ("policy", "person")
                for c in self.children
            )
            and not any(c.status in ("running",) for c in self.children)
        )

    def batch_completed(self) -> bool:
        """Every child is final (completed, failed, cancelled, or rejected per item)."""
        return bool(self.children) and all(c.status in CHILD_FINAL for c in self.children)

    def approval_required(self) -> bool:
        """Preflight settled, nothing rejected wholesale, and some child awaits a person."""
        return (
            self.preflight_complete()
            and self.approval_decision is None
            and any(c.status == "awaiting_approval" for c in self.children)
        )

    def ready_to_dispatch(self) -> bool:
        """Preflight settled, no child awaits a person, and some child is authorised."""
        statuses = self._statuses()
        return (
            self.preflight_complete()
            and "awaiting_approval" not in statuses
            and "running" not in statuses
            and "authorized" in statuses
        )
