"""The hooks of the ``tool_invocation`` machine (reference §1.7).

Validation looks the tool up and checks the arguments against its JSON schema;
authorization runs the approval policy off-loop; execution runs the tool on the offload
pool with the tool invocation id as its idempotency key — only in a session resumed with
``dispatch`` after the parent's tool barrier committed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from phronomy_fsm.agent.invocation import ToolInvocation
from phronomy_fsm.agent.tools import (
    Authorization,
    ToolCallView,
    ToolContext,
    ToolResult,
    cap_text,
    capped_result,
    normalize_authorization,
    tool_result_text,
)
from phronomy_fsm.errors import SerializationError
from phronomy_fsm.store.records import ensure_json
from phronomy_fsm.table import Settled

if TYPE_CHECKING:
    from phronomy_fsm.agent.runtime import AgentRuntime
    from phronomy_fsm.runtime.dispatcher import OffloadContext


class ToolInvocationHooks:
    """Implements ``tool_invocation.Hooks`` for every agent of one runtime."""

    def __init__(self, runtime: AgentRuntime) -> None:
        self.runtime = runtime

    # guards

    def arguments_valid(self, ctx: ToolInvocation, payload: Any) -> bool:
        """Known tool and valid arguments."""
        return ctx.error is None

    def authorization_denied(self, ctx: ToolInvocation, payload: Authorization) -> bool:
        """The policy denied the call."""
        return payload is Authorization.DENY

    def approval_needed(self, ctx: ToolInvocation, payload: Authorization) -> bool:
        """The call needs a person's approval."""
        return payload is Authorization.REQUIRE_APPROVAL

    # actions

    def validate_arguments(self, ctx: ToolInvocation, payload: Any) -> None:
        """Unknown tool or invalid arguments become the call's error (the LLM sees it)."""
        tool = ctx.tool
        if tool is None:
            known = ", ".join(sorted(ctx.parent.agent.tools)) or "none"
            ctx.error = f"unknown tool {ctx.call.name!r}; available tools: {known}"
            return
        arguments, error = tool.validate(ctx.call.arguments_json)
        ctx.arguments, ctx.error = arguments, error

    def notify_parent(self, ctx: ToolInvocation, payload: Any) -> None:
        """Nudge the parent session to re-evaluate its batch (``tool_updated``)."""
        self.runtime.notify_parent(ctx)

    def record_tool_result(self, ctx: ToolInvocation, payload: Any) -> None:
        """The tool returned: its value, the text the LLM sees and, when the text was
        cut to the agent's ``max_tool_result_bytes``, its original size."""
        if isinstance(payload, ToolResult):
            ctx.result, ctx.content = payload.value, payload.content
            ctx.original_bytes = payload.original_bytes
        else:  # a value that did not come through execute_tool's work
            ctx.result, ctx.content = payload, tool_result_text(payload)

    def record_tool_error(self, ctx: ToolInvocation, payload: BaseException) -> None:
        """The tool raised: the error becomes the tool result (cut, like a result, to
        the agent's ``max_tool_result_bytes``)."""
        text = f"{type(payload).__name__}: {payload}"
        # recorded durably: a lone surrogate in an exception message must not fail the
        # barrier, so it is kept as its escape
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
        ctx.error, original = cap_text(
            text, ctx.parent.agent.max_tool_result_bytes, "the tool's error was"
        )
        if original is not None:
            ctx.original_bytes = original

    # offload hooks

    def authorize(self, ctx: ToolInvocation, payload: Any) -> Any:
        """The approval policy (or the tool's ``requires_approval``), off-loop."""
        agent = ctx.parent.agent
        policy = agent.approval_policy
        tool = ctx.tool
        assert tool is not None
        view = ToolCallView(
            tool_name=tool.name,
            arguments=ctx.arguments,
            tool_call_id=ctx.call.id,
            tool_invocation_id=ctx.tool_invocation_id,
            execution_id=ctx.parent.execution_id,
            requires_approval=tool.requires_approval,
        )

        if policy is None:  # nothing to ask: decided here, no round trip to the pool
            return Settled(
                Authorization.REQUIRE_APPROVAL if view.requires_approval else Authorization.ALLOW
            )

        def work(octx: OffloadContext) -> Authorization:
            return normalize_authorization(policy(view))

        return work

    def execute_tool(self, ctx: ToolInvocation, payload: Any) -> Any:
        """Run the tool with its idempotency key (the tool invocation id)."""
        tool = ctx.tool
        assert tool is not None
        parent = ctx.parent
        context = ToolContext(
            tool_invocation_id=ctx.tool_invocation_id,
            tool_call_id=ctx.call.id,
            execution_id=parent.execution_id,
            agent_id=parent.agent.agent_id,
            cancellation=parent.cancellation,
        )
        arguments = ctx.arguments
        fn = tool.fn
        max_bytes = parent.agent.max_tool_result_bytes

        def work(octx: OffloadContext) -> ToolResult:
            parent.cancellation.raise_if_cancelled()
            result = fn(arguments, context)
            try:
                ensure_json(result)
            except SerializationError as exc:
                # The effect happened, but its value cannot be recorded: it becomes the
                # tool's error (what the LLM sees), never a barrier that fails.
                raise SerializationError(
                    f"tool {tool.name!r} returned a value that cannot be recorded ({exc}); "
                    "return JSON data: dict with string keys, list, str, int, finite "
                    "float, bool or None"
                ) from exc
            return capped_result(result, max_bytes)  # measured and cut here, off the loop

        return work
