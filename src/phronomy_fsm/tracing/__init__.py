"""OpenTelemetry spans of durable executions — agents' included — with ids derived from
the execution, each emitted once across crashes and processes.

``instrument(runtime, tracer_provider=...)`` (``pip install 'phronomy-fsm[otel]'``)
traces a :class:`~phronomy_fsm.durable.runtime.DurableRuntime` or an
:class:`~phronomy_fsm.agent.runtime.AgentRuntime`: an execution span per execution, a
commit span per revision, an effect span per effect attempt (``docs/tracing.md``). An
agent's executions get GenAI names and attributes: ``invoke_agent <agent>``, ``chat
<model>`` per LLM call (provider, models, token usage, finish reason), ``execute_tool
<tool>`` per tool run.

Modules: :mod:`.ids` (trace and span ids), :mod:`.describe` (span descriptions,
describers, GenAI helpers), :mod:`.agents` (the agent's describer), :mod:`.spans` (the
tracer and :func:`instrument`). Import everything from here.

Must not: be imported by the engine, the runtime, the store, the agent or the operator
library; import OpenTelemetry at module level.
"""

from phronomy_fsm.tracing.agents import AgentDescriber
from phronomy_fsm.tracing.describe import (
    Describer,
    EffectCall,
    SpanDescription,
    WorkflowDescriber,
    gen_ai_agent,
    gen_ai_chat,
    gen_ai_tool,
)
from phronomy_fsm.tracing.ids import (
    commit_span_id,
    effect_span_id,
    execution_span_id,
    trace_id_for,
)
from phronomy_fsm.tracing.spans import (
    INSTRUMENTATION_NAME,
    ExecutionTracer,
    default_describers,
    instrument,
    uninstrument,
)

__all__ = [
    "INSTRUMENTATION_NAME",
    "AgentDescriber",
    "Describer",
    "EffectCall",
    "ExecutionTracer",
    "SpanDescription",
    "WorkflowDescriber",
    "commit_span_id",
    "default_describers",
    "effect_span_id",
    "execution_span_id",
    "gen_ai_agent",
    "gen_ai_chat",
    "gen_ai_tool",
    "instrument",
    "trace_id_for",
    "uninstrument",
]
