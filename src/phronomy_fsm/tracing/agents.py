"""The agent's describer: GenAI spans for ``agent_session`` and ``tool_call`` executions.

:class:`AgentDescriber` names and attributes the spans of an agent's executions in the
OpenTelemetry GenAI semantic conventions (``docs/tracing.md``, "Describers: names and
GenAI attributes"), from what the engine committed — the execution's context — and what
the work returned:

- an agent's execution (``agent_session``): ``invoke_agent <agent id>``
  (:func:`~phronomy_fsm.tracing.describe.gen_ai_agent`) with the token counts of all its
  LLM calls, its outcome and its conversation id (the execution id);
- each LLM call (effect ``call_llm``): ``chat <model>``
  (:func:`~phronomy_fsm.tracing.describe.gen_ai_chat`, kind ``client``) with the
  provider, the request and response model, the input and output tokens and the finish
  reason — the facts of that call's entry in the context's ``llm_responses`` (the
  answer the work returned when the span is emitted before that entry is committed);
- a tool call's execution (``tool_call``): ``tool_call <tool>``, and its one effect
  (``execute_tool``): ``execute_tool <tool>``
  (:func:`~phronomy_fsm.tracing.describe.gen_ai_tool`) with the provider's tool-call id;
- any other effect (a filter, the authorization): the default ``effect <name>``.

The provider's name (``gen_ai.provider.name``) is the ``provider_name`` attribute of
the agent's provider (``"openai"`` for
:class:`~phronomy_fsm.agent.openai.OpenAICompatibleProvider`), found through
``provider_of`` — :func:`~phronomy_fsm.tracing.spans.instrument` passes the agent
runtime's directory; without it the attribute is left out.

Must not: import OpenTelemetry, read or write a store.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from phronomy_fsm.agent.types import LLMResponse
from phronomy_fsm.durable.codec import json_data
from phronomy_fsm.durable.records import ExecutionRecord
from phronomy_fsm.generated import agent_session, tool_call
from phronomy_fsm.tracing.describe import (
    EffectCall,
    SpanDescription,
    WorkflowDescriber,
    gen_ai_agent,
    gen_ai_chat,
    gen_ai_tool,
)

#: The effect of ``agent_session`` that calls the LLM, and the one of ``tool_call``
#: that runs the tool (the offload hooks of ``fsm_specs/``).
LLM_EFFECT = "call_llm"
TOOL_EFFECT = "execute_tool"

_DEFAULT = WorkflowDescriber()


def _context(record: ExecutionRecord | None) -> Mapping[str, Any]:
    data = None if record is None else json_data(record.context)
    return data if isinstance(data, dict) else {}


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def provider_name(provider: Any) -> str | None:
    """``gen_ai.provider.name`` of an LLM provider: its ``provider_name`` attribute when
    it is a string, else ``None``."""
    name = getattr(provider, "provider_name", None)
    return name if isinstance(name, str) and name else None


class AgentDescriber:
    """The describer of ``agent_session`` and ``tool_call`` (module docstring).

    Args:
        provider_of: ``agent_id -> provider object or None`` (the agent's LLM provider,
            read for ``provider_name`` and its configured ``model``); called on the
            runtime's loop thread, once per LLM call span. An exception means "not
            known".

    Concurrency: stateless; its methods run on the runtime's loop thread.
    """

    def __init__(self, *, provider_of: Callable[[str], Any] | None = None) -> None:
        self.provider_of = provider_of

    def _provider(self, agent_id: Any) -> Any:
        if self.provider_of is None or not isinstance(agent_id, str):
            return None
        try:
            return self.provider_of(agent_id)
        except Exception:  # noqa: BLE001 - an agent this process does not run: unknown
            return None

    def execution(self, record: ExecutionRecord) -> SpanDescription:
        """``invoke_agent <agent id>`` for an agent's execution, ``tool_call <tool>`` for
        a tool call; the default otherwise."""
        ctx = _context(record)
        agent_id = ctx.get("agent_id")
        if not isinstance(agent_id, str):
            return _DEFAULT.execution(record)
        if record.machine == agent_session.MACHINE:
            usage = _mapping(ctx.get("usage"))
            outcome = ctx.get("outcome")
            return gen_ai_agent(
                agent_id,
                agent_id=agent_id,
                attributes={
                    "gen_ai.conversation.id": record.execution_id,
                    "gen_ai.usage.input_tokens": _count(usage.get("prompt_tokens")),
                    "gen_ai.usage.output_tokens": _count(usage.get("completion_tokens")),
                    "phronomy.agent.outcome": outcome if isinstance(outcome, str) else None,
                    "phronomy.agent.llm_calls": _count(ctx.get("llm_calls")),
                },
            )
        if record.machine == tool_call.MACHINE:
            name = str(ctx.get("tool_name", "?"))
            return SpanDescription(
                f"tool_call {name}",
                {
                    "gen_ai.tool.name": name,
                    "gen_ai.tool.call.id": ctx.get("tool_call_id"),
                    "gen_ai.agent.id": agent_id,
                },
            )
        return _DEFAULT.execution(record)

    def effect(self, call: EffectCall) -> SpanDescription:
        """``chat <model>`` for an LLM call, ``execute_tool <tool>`` for a tool's run;
        the default otherwise."""
        ctx = _context(call.record)
        if call.machine == agent_session.MACHINE and call.effect == LLM_EFFECT:
            return self._chat(call, ctx)
        if call.machine == tool_call.MACHINE and call.effect == TOOL_EFFECT and ctx:
            name = str(ctx.get("tool_name", "?"))
            return gen_ai_tool(
                name,
                call_id=ctx.get("tool_call_id"),
                attributes={
                    "gen_ai.agent.id": ctx.get("agent_id"),
                    "phronomy.tool.invocation_id": call.execution_id,
                },
            )
        return _DEFAULT.effect(call)

    def _chat(self, call: EffectCall, ctx: Mapping[str, Any]) -> SpanDescription:
        response = call.value if isinstance(call.value, LLMResponse) else None
        call_id = response.llm_call_id if response is not None else ctx.get("pending_llm_call_id")
        # the committed facts of this call, when the record already holds them
        facts: Mapping[str, Any] = next(
            (
                entry
                for entry in ctx.get("llm_responses") or ()
                if isinstance(entry, dict) and entry.get("llm_call_id") == call_id
            ),
            {},
        )
        if not facts and response is not None:
            facts = {
                "model": response.model,
                "usage": {
                    "prompt_tokens": response.usage.prompt_tokens,
                    "completion_tokens": response.usage.completion_tokens,
                },
                "finish_reason": response.finish_reason,
            }
        provider = self._provider(ctx.get("agent_id"))
        configured = getattr(provider, "model", None)
        response_model = facts.get("model") if isinstance(facts.get("model"), str) else None
        request_model = configured if isinstance(configured, str) else response_model
        usage = _mapping(facts.get("usage"))
        reason = facts.get("finish_reason")
        return gen_ai_chat(
            request_model,
            provider=provider_name(provider),
            response_model=response_model,
            input_tokens=_count(usage.get("prompt_tokens")),
            output_tokens=_count(usage.get("completion_tokens")),
            finish_reasons=[reason] if isinstance(reason, str) else [],
            attributes={
                "gen_ai.agent.id": ctx.get("agent_id"),
                "phronomy.llm_call.id": call_id if isinstance(call_id, str) else None,
            },
        )


__all__ = ["LLM_EFFECT", "TOOL_EFFECT", "AgentDescriber", "provider_name"]
