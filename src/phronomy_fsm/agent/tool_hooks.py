"""The hooks of the ``tool_call`` machine: one tool call, run as a child execution.

:class:`ToolCallHooks` implements the generated
:class:`phronomy_fsm.generated.tool_call.Hooks` Protocol. The parent's ``tool_dispatch``
barrier committed the call (validated and authorized) before this execution exists, so
its one effect, ``execute_tool``, runs behind that barrier; its kind is the tool's
``effect`` (``at_most_once`` unless the tool says ``idempotent`` or ``pure``), which
decides what recovery does after a crash (``docs/agent.md``, "Re-send policies").
"""

from __future__ import annotations

import logging
from typing import Any

from phronomy_fsm.agent.context import ToolCallContext
from phronomy_fsm.agent.directory import AgentDirectory
from phronomy_fsm.agent.tools import (
    ToolContext,
    ToolResult,
    arguments_sha256,
    cap_text,
    capped_result,
    tool_result_text,
)
from phronomy_fsm.durable.codec import ensure_json
from phronomy_fsm.durable.records import EffectKind
from phronomy_fsm.errors import (
    ApprovedArgumentsError,
    ConfigurationError,
    SerializationError,
)
from phronomy_fsm.generated import tool_call
from phronomy_fsm.runtime.cancellation import CancellationToken
from phronomy_fsm.runtime.session import OffloadContext

log = logging.getLogger("phronomy_fsm.agent.tools")


class ToolCallHooks(tool_call.Hooks):
    """Implements ``tool_call.Hooks`` for every agent of a directory.

    Args:
        directory: where each call's agent (its tools, its result cap) is found.
    """

    def __init__(self, directory: AgentDirectory) -> None:
        self.directory = directory

    def execute_tool(self, ctx: ToolCallContext, payload: Any) -> Any:
        """Offload: run the tool with the call's validated arguments and its
        idempotency key (the tool invocation id); the result's text is measured and
        cut to the agent's ``max_tool_result_bytes`` on the worker.

        Raises:
            ConfigurationError: the agent no longer has this tool (the call fails; the
                LLM sees why).
            ApprovedArgumentsError: a person approved this call, and its arguments
                are not the ones approved (their hash differs): the call fails, the
                tool is not run (``docs/agent.md``, "Approval").
        """
        config = self.directory.config(ctx.agent_id)
        tool = config.tools.get(ctx.tool_name)
        if tool is None:
            raise ConfigurationError(
                f"agent {ctx.agent_id!r} has no tool {ctx.tool_name!r} any more"
            )
        fn, arguments, max_bytes = tool.fn, ctx.arguments, config.max_tool_result_bytes
        approved = ctx.approved_arguments_sha256
        if approved is not None:
            actual = arguments_sha256(arguments)
            if actual != approved:
                # checked here, on the loop, before any work is handed out: arguments
                # changed after a person approved them never reach the tool
                raise ApprovedArgumentsError(
                    f"tool call {ctx.tool_invocation_id} ({ctx.tool_name!r}) was approved "
                    f"for arguments with sha256 {approved}, but its arguments hash to "
                    f"{actual}; the call was refused and the tool did not run — ask for "
                    "a new approval",
                    tool_invocation_id=ctx.tool_invocation_id,
                    approved_sha256=approved,
                    actual_sha256=actual,
                )
        name = tool.name

        def work(octx: OffloadContext) -> ToolResult:
            token = octx.cancellation or CancellationToken()
            token.raise_if_cancelled()
            context = ToolContext(
                tool_invocation_id=ctx.tool_invocation_id,
                tool_call_id=ctx.tool_call_id,
                execution_id=ctx.parent_execution_id,
                agent_id=ctx.agent_id,
                cancellation=token,
                attempt=octx.effect.attempt if octx.effect is not None else 1,
            )
            result = fn(arguments, context)
            try:
                ensure_json(result)
            except SerializationError as exc:
                # The effect happened, but its value cannot be recorded: it becomes the
                # tool's error (what the LLM sees), never a commit that fails.
                raise SerializationError(
                    f"tool {name!r} returned a value that cannot be recorded ({exc}); "
                    "return JSON data: dict with string keys, list, str, int, finite "
                    "float, bool or None"
                ) from exc
            return capped_result(result, max_bytes)

        return work

    def record_result(self, ctx: ToolCallContext, payload: Any) -> None:
        """The tool returned (a :class:`ToolResult`, or the JSON an operator supplied
        for a call that may not have run): its value, the text the LLM sees and, when
        that text was cut, its original size."""
        if isinstance(payload, ToolResult):
            ctx.result, ctx.content = payload.value, payload.content
            ctx.original_bytes = payload.original_bytes
        else:
            config = self.directory.find(ctx.agent_id)
            capped = capped_result(
                payload, None if config is None else config.max_tool_result_bytes
            )
            ctx.result, ctx.content, ctx.original_bytes = (
                capped.value,
                capped.content,
                capped.original_bytes,
            )
        if ctx.content is None:
            ctx.content = tool_result_text(ctx.result)

    def record_error(self, ctx: ToolCallContext, payload: Any) -> None:
        """The tool raised: the error text (cut like a result) is the call's result
        the LLM sees and what the journal keeps; the traceback goes to the
        ``phronomy_fsm.agent.tools`` log."""
        error = payload if isinstance(payload, BaseException) else RuntimeError(str(payload))
        log.warning(
            "tool %s (call %s of execution %s) raised: %s: %s",
            ctx.tool_name,
            ctx.tool_invocation_id,
            ctx.parent_execution_id,
            type(error).__name__,
            error,
            exc_info=error if error.__traceback__ is not None else None,
        )
        text = f"{type(error).__name__}: {error}".encode("utf-8", "backslashreplace").decode()
        config = self.directory.find(ctx.agent_id)
        limit = None if config is None else config.max_tool_result_bytes
        ctx.error, original = cap_text(text, limit, "the tool's error was")
        ctx.error_type = type(error).__name__
        if original is not None:
            ctx.original_bytes = original

    def effect_policy(self, ctx: ToolCallContext, effect: str, declared: EffectKind) -> EffectKind:
        """The ``Machine.effect_policy`` of ``tool_call``: the tool's ``effect``; a
        tool this process does not know keeps the declared kind."""
        config = self.directory.find(ctx.agent_id)
        tool = None if config is None else config.tools.get(ctx.tool_name)
        return declared if tool is None else tool.effect


__all__ = ["ToolCallHooks"]
