"""The agent application of the crash matrix (``tools/agent_crash_app.py``) with tracing
on, for a child process of the crash harness (``--app
tests.tracing.agent_spans_app:create_app --scenario traced``).

Its ``traced`` scenario instruments the runtime (before it starts the execution) with
a ``TracerProvider`` whose ``SimpleSpanProcessor`` appends every span as one JSON line
to the file named by ``PHRONOMY_TEST_SPANS_FILE``
(:class:`tests.tracing.spans_app.JsonLinesSpanExporter`: written before ``on_end``
returns, so a SIGKILL loses no span that was emitted), then runs the matrix's
``tool_cycle`` scenario: agent ``a-cycle`` calls its LLM, which asks for one
``at_most_once`` tool call (``charge``), then answers.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import attrs
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from phronomy_fsm.durable.app import DurableApp
from phronomy_fsm.tracing import instrument
from tests.tracing.spans_app import SPANS_ENV, JsonLinesSpanExporter
from tools.agent_crash_app import create_app as create_agent_app
from tools.agent_crash_app import execution_id_of

#: The scenario of the crash matrix the traced run plays, and its execution.
SCENARIO = "tool_cycle"
EXECUTION_ID = execution_id_of(SCENARIO)


def create_app(db_path: str) -> DurableApp:
    """The crash matrix's agent application with a ``traced`` scenario (module
    docstring)."""
    app = create_agent_app(db_path)
    played = app.scenarios[SCENARIO]

    def start(runtime: Any) -> list[str]:
        provider = TracerProvider()
        provider.add_span_processor(
            SimpleSpanProcessor(JsonLinesSpanExporter(Path(os.environ[SPANS_ENV])))
        )
        instrument(runtime, tracer_provider=provider)
        return played.start(runtime)

    scenarios = {**app.scenarios, "traced": attrs.evolve(played, start=start)}
    return attrs.evolve(app, scenarios=scenarios)
