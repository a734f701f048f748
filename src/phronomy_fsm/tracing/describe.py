"""What the spans of an execution are called and what they carry: span descriptions,
describers, and the GenAI helpers.

A :class:`Describer` per machine names the execution span of a finished execution and
the span of each effect attempt, and adds attributes (``docs/tracing.md``, "Describers:
names and GenAI attributes"); :class:`WorkflowDescriber` is the default of every machine
but the agent's two; :func:`gen_ai_agent`, :func:`gen_ai_chat` and :func:`gen_ai_tool`
build descriptions in the OpenTelemetry GenAI semantic conventions (the agent's
describer, :class:`~phronomy_fsm.tracing.agents.AgentDescriber`, uses them).

Must not: import OpenTelemetry, read or write a store.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import attrs

from phronomy_fsm.durable.records import ExecutionRecord


@attrs.frozen
class SpanDescription:
    """A span's name, extra attributes (``None`` values are left out) and kind
    (``internal``, ``client``, ``server``, ``producer`` or ``consumer``)."""

    name: str
    attributes: Mapping[str, Any] = attrs.field(factory=dict)
    kind: str = "internal"


@attrs.frozen
class EffectCall:
    """One effect attempt whose work returned, as a describer sees it: the execution
    and machine, the effect's (offload hook's) name, kind, idempotency key and
    attempt, what the work returned (``value``) or raised (``error``) — as they are,
    not JSON — and ``record``: the execution's record as last committed when the span
    is described (for an ``idempotent`` effect the commit that made its outcome
    durable, for an ``at_most_once`` one the commit that announced it; ``None`` when
    this tracer saw no commit of the execution)."""

    execution_id: str
    machine: str
    effect: str
    kind: str
    key: str
    attempt: int
    value: Any = None
    error: BaseException | None = None
    record: ExecutionRecord | None = None


class Describer(Protocol):
    """Names and attributes the spans of one machine's executions (``docs/tracing.md``,
    "Describers: names and GenAI attributes"). Both methods run on the runtime's loop thread: keep them cheap; an
    exception falls back to the default description (logged)."""

    def execution(self, record: ExecutionRecord) -> SpanDescription:
        """The execution span of a finished execution (``record``: its final commit)."""
        ...

    def effect(self, call: EffectCall) -> SpanDescription:
        """The span of one effect attempt."""
        ...


class WorkflowDescriber:
    """The default describer: ``invoke_workflow <machine>`` and ``effect <name>``, with
    no attributes beyond the ``phronomy.*`` ones every span gets."""

    def execution(self, record: ExecutionRecord) -> SpanDescription:
        """``invoke_workflow <machine>``."""
        return SpanDescription(f"invoke_workflow {record.machine}")

    def effect(self, call: EffectCall) -> SpanDescription:
        """``effect <name>``."""
        return SpanDescription(f"effect {call.effect}")


def gen_ai_agent(
    name: str, *, agent_id: str | None = None, attributes: Mapping[str, Any] | None = None
) -> SpanDescription:
    """An agent's execution span in the GenAI conventions: ``invoke_agent <name>`` with
    ``gen_ai.operation.name``, ``gen_ai.agent.name`` and ``gen_ai.agent.id``."""
    return SpanDescription(
        f"invoke_agent {name}",
        {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": name,
            "gen_ai.agent.id": agent_id,
            **(attributes or {}),
        },
    )


def gen_ai_chat(
    model: str | None,
    *,
    provider: str | None = None,
    response_model: str | None = None,
    input_tokens: int | None = None,
    output_tokens: int | None = None,
    finish_reasons: tuple[str, ...] | list[str] = (),
    response_id: str | None = None,
    attributes: Mapping[str, Any] | None = None,
) -> SpanDescription:
    """An LLM call in the GenAI conventions: ``chat <model>`` (``chat`` when the model
    is not known; kind ``client``) with ``gen_ai.operation.name``,
    ``gen_ai.provider.name``, ``gen_ai.request.model``, ``gen_ai.response.model``,
    ``gen_ai.usage.input_tokens``/``output_tokens`` (token counts),
    ``gen_ai.response.finish_reasons`` and ``gen_ai.response.id``."""
    return SpanDescription(
        f"chat {model}" if model else "chat",
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": provider,
            "gen_ai.request.model": model,
            "gen_ai.response.model": response_model,
            "gen_ai.usage.input_tokens": input_tokens,
            "gen_ai.usage.output_tokens": output_tokens,
            "gen_ai.response.finish_reasons": list(finish_reasons) or None,
            "gen_ai.response.id": response_id,
            **(attributes or {}),
        },
        kind="client",
    )


def gen_ai_tool(
    name: str,
    *,
    call_id: str | None = None,
    tool_type: str = "function",
    attributes: Mapping[str, Any] | None = None,
) -> SpanDescription:
    """A tool call in the GenAI conventions: ``execute_tool <name>`` with
    ``gen_ai.operation.name``, ``gen_ai.tool.name``, ``gen_ai.tool.call.id`` and
    ``gen_ai.tool.type``."""
    return SpanDescription(
        f"execute_tool {name}",
        {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.call.id": call_id,
            "gen_ai.tool.type": tool_type,
            **(attributes or {}),
        },
    )


__all__ = [
    "Describer",
    "EffectCall",
    "SpanDescription",
    "WorkflowDescriber",
    "gen_ai_agent",
    "gen_ai_chat",
    "gen_ai_tool",
]
