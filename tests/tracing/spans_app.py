"""The order app of ``tests/durable/order_app.py`` with tracing on, for a child process
of the crash harness (``--app tests.tracing.spans_app:create_app --scenario traced``).

Its ``traced`` scenario instruments the runtime (before it starts ``order-a``) with a
``TracerProvider`` whose ``SimpleSpanProcessor`` hands every span to
:class:`JsonLinesSpanExporter`, which appends one JSON line per span to the file named
by ``PHRONOMY_TEST_SPANS_FILE``: written before ``on_end`` returns, so a SIGKILL loses
no span that was emitted.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from phronomy_fsm.durable.app import DurableApp, Scenario
from phronomy_fsm.tracing import instrument
from tests.durable.order_app import Order
from tests.durable.order_app import create_app as create_order_app

SPANS_ENV = "PHRONOMY_TEST_SPANS_FILE"


def span_entry(span: ReadableSpan) -> dict[str, Any]:
    """The JSON form of a finished span: ids as hex, name, kind, times, attributes."""
    ctx = span.context
    assert ctx is not None
    return {
        "trace_id": f"{ctx.trace_id:032x}",
        "span_id": f"{ctx.span_id:016x}",
        "parent_span_id": None if span.parent is None else f"{span.parent.span_id:016x}",
        "name": span.name,
        "start_ns": span.start_time,
        "end_ns": span.end_time,
        "status": span.status.status_code.name,
        "attributes": dict(span.attributes or {}),
    }


class JsonLinesSpanExporter(SpanExporter):
    """Appends each span as one JSON line to ``path`` (opened per batch, closed after)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        lines = "".join(json.dumps(span_entry(s), default=str) + "\n" for s in spans)
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(lines)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        """Nothing to release."""


def read_spans(path: Path) -> list[dict[str, Any]]:
    """Every span a :class:`JsonLinesSpanExporter` wrote to ``path``."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def create_app(db_path: str) -> DurableApp:
    """The order app with a ``traced`` scenario (module docstring)."""
    app = create_order_app(db_path)
    approved = app.scenarios["approved"]

    def start(runtime: Any) -> list[str]:
        provider = TracerProvider()
        provider.add_span_processor(
            SimpleSpanProcessor(JsonLinesSpanExporter(Path(os.environ[SPANS_ENV])))
        )
        instrument(runtime, tracer_provider=provider)
        runtime.start("order_flow", Order("order-a", 1000), execution_id="order-a")
        return ["order-a"]

    scenarios = {**app.scenarios, "traced": Scenario(start, approved.on_waiting)}
    return DurableApp(app.machines, scenarios, app.operator, app.effects)
