"""An agent's configuration: its provider, tools, policies, filters and limits.

:class:`AgentConfig` is checked once, when an agent is created or loaded
(:meth:`AgentConfig.build` raises :class:`~phronomy_fsm.errors.ConfigurationError`
naming the bad option), and is then read — never changed — by the agent machines'
hooks on the loop thread and by the work they hand to the offload pool. It is not
stored: the store keeps what an execution did, the application supplies how its agents
behave each time it loads them (``docs/agent.md``, "Agents").
"""

from __future__ import annotations

import enum
import inspect
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from phronomy_fsm.agent.budget import Budget, BudgetPolicy
from phronomy_fsm.agent.events import AgentEvent
from phronomy_fsm.agent.mcp import McpServer, mcp_tools
from phronomy_fsm.agent.providers import Provider
from phronomy_fsm.agent.tools import DEFAULT_MAX_TOOL_RESULT_BYTES, ApprovalPolicy, Tool
from phronomy_fsm.agent.typed import TypeSchema
from phronomy_fsm.agent.types import Message, ToolSpec
from phronomy_fsm.durable.records import EffectKind
from phronomy_fsm.errors import ConfigurationError
from phronomy_fsm.table import check_delay

Listener = Callable[[AgentEvent], None]

#: Default of the agent option ``output_retries``: an answer that is not valid output
#: is re-asked once (``docs/agent.md``, "Structured output").
DEFAULT_OUTPUT_RETRIES = 1
TextFilter = Callable[[str], str]


class ListenerErrorPolicy(enum.StrEnum):
    """What a raising event listener does to its execution: ``report`` (log it; the
    execution goes on) or ``fail_task`` (the execution ends ``failed`` with
    StreamCallbackError)."""

    REPORT = "report"
    FAIL_TASK = "fail_task"


class LLMResend(enum.StrEnum):
    """What recovery does with an LLM call a crash left unanswered
    (``docs/agent.md``, "Re-send policies"): ``ask_operator`` (the default: the
    execution waits in ``recovery_required`` until an operator answers — the call may
    have been paid for and answered) or ``resend`` (the call is sent again with the same
    ``llm_call_id``, which an OpenAI-compatible provider sends as its
    ``Idempotency-Key``)."""

    ASK_OPERATOR = "ask_operator"
    RESEND = "resend"


def _handoff_spec(name: str, target: str) -> ToolSpec:
    return ToolSpec(
        name,
        f"Hand the conversation off to agent {target!r}.",
        {
            "type": "object",
            "properties": {"message": {"type": "string"}},
            "additionalProperties": True,
        },
    )


@attrs.frozen
class AgentConfig:
    """How one agent behaves (see :meth:`build` for each option).

    ``tool_specs`` is what the LLM is told: the tools, then one tool per handoff.
    ``output`` is the schema of ``output_type`` (None: the answer is free text).
    """

    agent_id: str
    provider: Provider
    tools: Mapping[str, Tool] = attrs.field(factory=dict)
    handoffs: Mapping[str, str] = attrs.field(factory=dict)
    tool_specs: tuple[ToolSpec, ...] = ()
    approval_policy: ApprovalPolicy | None = None
    on_event: Listener | None = None
    max_iterations: int = 10
    timeout_seconds: float | None = None
    input_filters: tuple[TextFilter, ...] = ()
    output_filters: tuple[TextFilter, ...] = ()
    system_prompt: str | None = None
    listener_error_policy: ListenerErrorPolicy = ListenerErrorPolicy.REPORT
    max_tool_result_bytes: int | None = DEFAULT_MAX_TOOL_RESULT_BYTES
    llm_resend: LLMResend = LLMResend.ASK_OPERATOR
    output: TypeSchema | None = None
    output_retries: int = DEFAULT_OUTPUT_RETRIES
    budget: Budget | None = None
    on_budget_exhausted: BudgetPolicy = BudgetPolicy.FAIL

    @classmethod
    def build(
        cls,
        agent_id: str,
        provider: Provider,
        *,
        tools: Sequence[Tool] = (),
        mcp_servers: Sequence[McpServer] = (),
        handoffs: Mapping[str, str] | None = None,
        approval_policy: ApprovalPolicy | None = None,
        on_event: Listener | None = None,
        max_iterations: int = 10,
        timeout_seconds: float | None = None,
        input_filters: Sequence[TextFilter] = (),
        output_filters: Sequence[TextFilter] = (),
        system_prompt: str | None = None,
        listener_error_policy: ListenerErrorPolicy | str = ListenerErrorPolicy.REPORT,
        max_tool_result_bytes: int | None = DEFAULT_MAX_TOOL_RESULT_BYTES,
        llm_resend: LLMResend | str = LLMResend.ASK_OPERATOR,
        output_type: Any = None,
        output_retries: int = DEFAULT_OUTPUT_RETRIES,
        budget: Budget | None = None,
        on_budget_exhausted: BudgetPolicy | str = BudgetPolicy.FAIL,
    ) -> AgentConfig:
        """Check the options and return the configuration.

        Args:
            agent_id: the agent's (already checked) id.
            provider: the LLM: anything with ``complete(request, *, on_token,
                cancellation)`` (:class:`~phronomy_fsm.agent.providers.Provider`).
            tools: :class:`~phronomy_fsm.agent.tools.Tool` objects, unique by name.
            mcp_servers: :class:`~phronomy_fsm.agent.mcp.McpServer` declarations:
                each server's tools are listed now and join ``tools``
                (``docs/agent.md``, "MCP tools").
            handoffs: handoff tool name → target agent id (names must not clash with
                tools).
            approval_policy: ``policy(ToolCallView) -> Authorization | str | bool``,
                run off the loop for every valid tool call; default: a tool's
                ``requires_approval`` decides. An answer that is not a decision is
                the call's error (the LLM sees it); a policy that raises ends the
                execution ``failed`` with ApprovalPolicyError.
            on_event: the listener of the agent's events (loop thread; keep it quick).
            max_iterations: LLM calls one execution may make (at least 1).
            timeout_seconds: the default deadline of an execution, in seconds (0 <
                seconds ≤ 1e9), or None.
            input_filters / output_filters: ``str -> str`` functions run off the loop
                on the input and on the final answer; raising ContentBlockedError
                blocks the execution.
            system_prompt: the first message of every LLM call.
            listener_error_policy: ``report`` or ``fail_task``
                (:class:`ListenerErrorPolicy`).
            max_tool_result_bytes: the most UTF-8 bytes of a tool's result (or error)
                text kept and sent to the LLM (default 256 KiB; None: no cap).
            llm_resend: :class:`LLMResend` — what recovery does with an LLM call a
                crash left unanswered.
            output_type: the type of the final answer (an attrs class, a Pydantic
                model, a TypedDict, a builtin such as ``list[str]``...; the kinds of
                :mod:`phronomy_fsm.agent.typed`), or None for free text. The answer's
                text must then be JSON of that type; ``AgentResult.parsed`` holds it
                converted (``docs/agent.md``, "Structured output").
            output_retries: how many times an answer that does not validate is
                re-asked (a new LLM call told what was wrong) before the execution
                ends ``failed`` with OutputValidationError (default 1; 0: never).
            budget: the limits of each execution (:class:`~phronomy_fsm.agent.budget.
                Budget`: tokens, LLM calls, tool calls, US dollars from a price table),
                or None (``docs/agent.md``, "Budgets").
            on_budget_exhausted: ``fail`` (the default: the execution ends ``failed``
                with BudgetExhaustedError) or ``wait`` (it waits in
                ``budget_exhausted`` for ``Agent.extend_budget``).

        Raises:
            TypeSchemaError: ``output_type`` has no JSON Schema (a ConfigurationError).
            ConfigurationError: the first bad option, saying what is expected.
            McpError: an MCP server could not be listed.
        """
        try:
            policy = ListenerErrorPolicy(listener_error_policy)
        except ValueError:
            raise ConfigurationError(
                "listener_error_policy must be one of "
                f"{[p.value for p in ListenerErrorPolicy]}, got {listener_error_policy!r}"
            ) from None
        try:
            resend = LLMResend(llm_resend)
        except ValueError:
            raise ConfigurationError(
                f"llm_resend must be one of {[r.value for r in LLMResend]}, got {llm_resend!r}"
            ) from None
        try:
            budget_policy = BudgetPolicy(on_budget_exhausted)
        except ValueError:
            raise ConfigurationError(
                "on_budget_exhausted must be one of "
                f"{[p.value for p in BudgetPolicy]}, got {on_budget_exhausted!r}"
            ) from None
        if budget is not None and not isinstance(budget, Budget):
            raise ConfigurationError(
                f"budget must be a Budget(max_tokens=..., ...) or None, got {budget!r}"
            )
        checked_budget = None if budget is None else budget.checked()
        if type(max_iterations) is not int or max_iterations < 1:
            raise ConfigurationError(f"max_iterations must be an int ≥ 1, got {max_iterations!r}")
        if max_tool_result_bytes is not None and (
            type(max_tool_result_bytes) is not int or max_tool_result_bytes < 1
        ):
            raise ConfigurationError(
                "max_tool_result_bytes must be a positive int (bytes of a tool result's "
                f"text kept and sent to the LLM) or None for no cap, got {max_tool_result_bytes!r}"
            )
        if timeout_seconds is not None:
            try:
                check_delay(timeout_seconds, "timeout_seconds")
            except ValueError as exc:
                raise ConfigurationError(str(exc)) from exc
        if not callable(getattr(provider, "complete", None)):
            raise ConfigurationError(
                f"provider {provider!r} has no complete(request, *, on_token, cancellation) "
                "method; pass a ScriptedProvider, an OpenAICompatibleProvider or your own Provider"
            )
        if isinstance(mcp_servers, McpServer):
            mcp_servers = [mcp_servers]
        tools = [*tools, *mcp_tools(mcp_servers)]
        for item in tools:
            if not isinstance(item, Tool):
                raise ConfigurationError(
                    f"tools must be Tool objects, got {item!r}; wrap functions with "
                    "Tool(name, fn, ...) or the @tool decorator"
                )
        names = [t.name for t in tools]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ConfigurationError(f"tool names must be unique; repeated: {repeated}")
        handoff_map = dict(handoffs or {})
        for name, target in handoff_map.items():
            if not isinstance(name, str) or not isinstance(target, str) or not target:
                raise ConfigurationError(
                    f"handoffs must map tool names to agent ids, got {name!r}: {target!r}"
                )
        clash = sorted(set(handoff_map) & set(names))
        if clash:
            raise ConfigurationError(f"handoff tool names clash with tools: {clash}")
        for name, chain in (("input_filters", input_filters), ("output_filters", output_filters)):
            if not all(callable(f) for f in chain):
                raise ConfigurationError(f"{name} must be functions str -> str")
        if on_event is not None and not callable(on_event):
            raise ConfigurationError(f"on_event must be a function of one event, got {on_event!r}")
        if approval_policy is not None and not callable(approval_policy):
            raise ConfigurationError(
                f"approval_policy must be a function of a ToolCallView, got {approval_policy!r}"
            )
        if system_prompt is not None and not isinstance(system_prompt, str):
            raise ConfigurationError("system_prompt must be a string or None")
        if type(output_retries) is not int or output_retries < 0:
            raise ConfigurationError(
                "output_retries must be an int ≥ 0 (how many times an answer that is not "
                f"valid output is re-asked), got {output_retries!r}"
            )
        output = (
            None
            if output_type is None
            else TypeSchema.of(output_type, where=f"agent {agent_id!r}, output_type")
        )
        specs = tuple(t.spec() for t in tools) + tuple(
            _handoff_spec(name, target) for name, target in sorted(handoff_map.items())
        )
        return cls(
            agent_id=agent_id,
            provider=provider,
            tools={t.name: t for t in tools},
            handoffs=handoff_map,
            tool_specs=specs,
            approval_policy=approval_policy,
            on_event=on_event,
            max_iterations=max_iterations,
            timeout_seconds=timeout_seconds,
            input_filters=tuple(input_filters),
            output_filters=tuple(output_filters),
            system_prompt=system_prompt,
            listener_error_policy=policy,
            max_tool_result_bytes=max_tool_result_bytes,
            llm_resend=resend,
            output=output,
            output_retries=output_retries,
            budget=checked_budget,
            on_budget_exhausted=budget_policy,
        )

    def llm_effect(self) -> EffectKind:
        """The effect kind of this agent's LLM calls under :attr:`llm_resend`."""
        return (
            EffectKind.IDEMPOTENT
            if self.llm_resend is LLMResend.RESEND
            else EffectKind.AT_MOST_ONCE
        )

    def head(self) -> list[Message]:
        """The messages every LLM call starts with: one system message of the system
        prompt and, with an ``output_type``, the instruction to answer with JSON of its
        schema (none when there is neither)."""
        parts = [self.system_prompt] if self.system_prompt else []
        if self.output is not None:
            parts.append(output_instruction(self.output.schema))
        return [Message("system", "\n\n".join(parts))] if parts else []


def output_instruction(schema: dict[str, Any]) -> str:
    """What the system message tells the LLM of an agent with an ``output_type``: to
    end with an answer that is only JSON matching ``schema`` (``docs/agent.md``,
    "Structured output")."""
    return (
        "When you give your final answer, answer with only a JSON value (no prose, no "
        "code fence) that matches this JSON Schema:\n"
        + json.dumps(schema, sort_keys=True, ensure_ascii=False)
    )


def config_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` checked to be keyword arguments of :meth:`AgentConfig.build`.

    Raises ConfigurationError naming an unknown option."""
    known = {
        p.name
        for p in inspect.signature(AgentConfig.build).parameters.values()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    }
    unknown = sorted(set(options) - known)
    if unknown:
        raise ConfigurationError(f"unknown agent option(s) {unknown}; known: {sorted(known)}")
    return dict(options)


__all__ = [
    "AgentConfig",
    "LLMResend",
    "Listener",
    "ListenerErrorPolicy",
    "TextFilter",
    "config_options",
    "output_instruction",
]
