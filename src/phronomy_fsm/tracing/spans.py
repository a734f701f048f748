"""The tracer: OpenTelemetry spans of durable executions, emitted once each.

:func:`instrument` installs an :class:`ExecutionTracer` on a runtime (a
:class:`~phronomy_fsm.durable.runtime.DurableRuntime` or an
:class:`~phronomy_fsm.agent.runtime.AgentRuntime`); it listens to the runtime's
:class:`~phronomy_fsm.durable.types.DurableEvent` s and emits, through the OpenTelemetry
SDK ``TracerProvider`` given (``docs/tracing.md``):

- one **execution span** per execution, ``invoke_workflow <machine>`` by default
  (``invoke_agent <agent>`` for an agent's, :mod:`~phronomy_fsm.tracing.agents`),
  emitted once, when its final commit is durable, starting at the execution's creation
  time (from its record);
- one **commit span** per revision, ``commit <barrier>`` (``commit @start``,
  ``commit charge``, ``commit @wait``...), emitted when that revision commits;
- one **effect span** per effect attempt that returned, ``effect <name>`` by default
  (``chat <model>``, ``execute_tool <tool>`` for an agent's). An ``at_most_once``
  effect's span is emitted when its work returns: that attempt never runs again (after
  a crash an operator answers for it; a ``retry`` is a new attempt, a new span id). An
  ``idempotent`` effect's span is buffered until the execution's next commit, the one
  that makes its outcome durable: a crash before it loses the buffer, and recovery
  runs the effect again under the same key and attempt — that run's span is emitted
  then, once.

Every id is derived, never random (:mod:`~phronomy_fsm.tracing.ids`): the **trace id**
from the id of the execution's root (itself, or the top of its chain of parents: a
child execution is in its parent's trace), the **span ids** from the execution id and
``execution``, the revision, or the effect's idempotency key and attempt. So a
recovered execution continues its trace in another process, and **nothing is emitted
twice**: a revision commits once, an execution finishes once, an effect attempt's span
goes out once. What a SIGKILL can lose is the span of the step it interrupts: the
commit acknowledged just before it (its event never reached the listener), or an
effect whose work returned but was not yet reported (an operator answers for it), or
buffered ``idempotent`` spans whose commit was that last one — and, when that commit
was the final one, the execution span.

Commit and effect spans are children of the execution span (the execution span of a
child execution is a child of its parent's execution span). Attributes ``phronomy.*``
name the execution, machine, state, revision, status, barrier, effect, key and attempt.

Must not: import OpenTelemetry at module level (the ids work without the extra), block
the loop thread beyond the span processor's ``on_end`` (use a ``BatchSpanProcessor``
in production) and one store read per unknown execution or parent chain.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import attrs

from phronomy_fsm.durable.records import EffectKind, ExecutionRecord, ExecutionStatus
from phronomy_fsm.durable.types import DurableEvent, DurableEventKind
from phronomy_fsm.errors import ConfigurationError, PhronomyError
from phronomy_fsm.generated import agent_session, tool_call
from phronomy_fsm.tracing.agents import AgentDescriber
from phronomy_fsm.tracing.describe import (
    Describer,
    EffectCall,
    SpanDescription,
    WorkflowDescriber,
)
from phronomy_fsm.tracing.ids import (
    commit_span_id,
    effect_span_id,
    execution_span_id,
    trace_id_for,
)

log = logging.getLogger("phronomy_fsm.tracing")

#: The instrumentation scope's name.
INSTRUMENTATION_NAME = "phronomy_fsm"
#: Most parent chains remembered (execution id → root execution id).
ROOT_CACHE_SIZE = 10_000
_SPAN_KINDS = ("internal", "client", "server", "producer", "consumer")


def default_describers(*, provider_of: Any = None) -> dict[str, Describer]:
    """The describers used unless told otherwise, by machine name: the agent's two
    machines (``agent_session``, ``tool_call``) get an
    :class:`~phronomy_fsm.tracing.agents.AgentDescriber` (with ``provider_of``:
    ``agent_id -> provider``, for the provider's name); every other machine
    :class:`~phronomy_fsm.tracing.describe.WorkflowDescriber` (``docs/tracing.md``,
    "Describers: names and GenAI attributes")."""
    agent = AgentDescriber(provider_of=provider_of)
    return {agent_session.MACHINE: agent, tool_call.MACHINE: agent}


# ------------------------------------------------------------------ the listener


def _ns(value: datetime) -> int:
    return int(value.timestamp() * 1_000_000_000)


@attrs.define
class _Effect:
    """An effect attempt of one execution: when it started, and once its work returned
    what it returned (``call``), waiting for the next commit."""

    start_ns: int
    call: EffectCall | None = None
    end_ns: int = 0


class _PresetIds:
    """An SDK ``IdGenerator`` that returns the ids set for the span being started on
    this thread, and the wrapped generator's otherwise."""

    def __init__(self, fallback: Any) -> None:
        self.fallback = fallback
        self.local = threading.local()

    def generate_span_id(self) -> int:
        preset = getattr(self.local, "ids", None)
        return int(preset[1]) if preset else int(self.fallback.generate_span_id())

    def generate_trace_id(self) -> int:
        preset = getattr(self.local, "ids", None)
        return int(preset[0]) if preset else int(self.fallback.generate_trace_id())

    def is_trace_id_random(self) -> bool:
        return False


class ExecutionTracer:
    """A :class:`~phronomy_fsm.durable.types.DurableEvent` listener that emits the spans
    of the module docstring. Pass it in ``DurableRuntime(listeners=[...])``, or let
    :func:`instrument` add it.

    Args:
        tracer_provider: an OpenTelemetry SDK ``TracerProvider`` (default: the global
            one, which must then be an SDK provider).
        store: the runtime's store, read to find the root of a child execution whose
            parent chain this tracer has not seen (``None``: a child's root is its
            parent).
        describers: per machine name, a :class:`Describer` (default
            :func:`default_describers`); others get ``default``.
        default: the describer of other machines (default :class:`WorkflowDescriber`).

    Raises:
        ConfigurationError: OpenTelemetry is not installed, or the provider is not the
            SDK's (its ids cannot be chosen).

    Concurrency: called on the runtime's loop thread; its state is guarded by a lock, so
    one tracer may listen to several runtimes.
    """

    def __init__(
        self,
        tracer_provider: Any = None,
        *,
        store: Any = None,
        describers: Mapping[str, Describer] | None = None,
        default: Describer | None = None,
    ) -> None:
        try:
            from opentelemetry import trace
        except ImportError as exc:
            raise ConfigurationError(
                "tracing needs OpenTelemetry: pip install 'phronomy-fsm[otel]' (from a clone: pip install -e '.[otel]')"
            ) from exc
        from phronomy_fsm import __version__

        provider = tracer_provider if tracer_provider is not None else trace.get_tracer_provider()
        tracer = provider.get_tracer(INSTRUMENTATION_NAME, __version__)
        if not hasattr(tracer, "id_generator"):
            raise ConfigurationError(
                "tracing needs the OpenTelemetry SDK's TracerProvider "
                "(opentelemetry.sdk.trace.TracerProvider), whose span ids it derives from "
                f"the execution; got {type(provider).__name__}"
            )
        self._ids = _PresetIds(tracer.id_generator)
        tracer.id_generator = self._ids
        self._tracer = tracer
        self.store = store
        self.describers = dict(default_describers() if describers is None else describers)
        self.default: Describer = default or WorkflowDescriber()
        self._lock = threading.Lock()
        self._effects: dict[str, dict[int, _Effect]] = {}
        self._records: dict[str, ExecutionRecord] = {}  # last committed, per live execution
        self._roots: OrderedDict[str, str] = OrderedDict()

    # ------------------------------------------------------------------ events

    def __call__(self, event: DurableEvent) -> None:
        """Handle one event (see the module docstring for what each emits)."""
        kind = event.kind
        with self._lock:
            if event.record is not None:
                self._records[event.execution_id] = event.record
            if kind is DurableEventKind.STARTED and event.record is not None:
                self._commit(event.record, "@start")
            elif kind is DurableEventKind.COMMITTED and event.record is not None:
                self._commit(event.record, str(event.detail.get("barrier", "?")))
                self._flush(event.record)
            elif kind is DurableEventKind.EFFECT_STARTED:
                self._effect_started(event)
            elif kind is DurableEventKind.EFFECT_FINISHED:
                self._effect_finished(event)
            elif kind is DurableEventKind.FINISHED and event.record is not None:
                self._finished(event.record)
                self._records.pop(event.execution_id, None)
            elif kind is DurableEventKind.RELEASED:
                self._effects.pop(event.execution_id, None)
                self._records.pop(event.execution_id, None)

    def _effect_started(self, event: DurableEvent) -> None:
        d = event.detail
        span_id = effect_span_id(event.execution_id, str(d["key"]), int(d["attempt"]))
        self._effects.setdefault(event.execution_id, {})[span_id] = _Effect(time.time_ns())

    def _effect_finished(self, event: DurableEvent) -> None:
        d = event.detail
        key, attempt = str(d["key"]), int(d["attempt"])
        span_id = effect_span_id(event.execution_id, key, attempt)
        effects = self._effects.setdefault(event.execution_id, {})
        effect = effects.get(span_id) or _Effect(time.time_ns())
        effects[span_id] = effect
        error = d.get("error")
        kind = str(getattr(d.get("kind"), "value", d.get("kind")))
        effect.call = EffectCall(
            event.execution_id,
            event.machine,
            str(d["effect"]),
            kind,
            key,
            attempt,
            d.get("value"),
            error if isinstance(error, BaseException) else None,
        )
        effect.end_ns = time.time_ns()
        if kind == EffectKind.AT_MOST_ONCE.value:
            # never run again under this attempt: its span cannot go out twice
            del effects[span_id]
            record = self._record_of(event.execution_id)
            self._emit_effect(span_id, effect, record, event.execution_id)

    def _record_of(self, execution_id: str) -> ExecutionRecord | None:
        """The execution's last committed record this tracer saw, else the store's."""
        record = self._records.get(execution_id)
        if record is None and self.store is not None:
            try:
                record = self.store.load_record(execution_id)
            except PhronomyError:
                return None
            self._records[execution_id] = record
        return record

    # ------------------------------------------------------------------ spans

    def _describe(self, machine: str, what: str, subject: Any) -> SpanDescription:
        describer = self.describers.get(machine, self.default)
        try:
            description = getattr(describer, what)(subject)
            if not isinstance(description, SpanDescription):
                raise TypeError(f"returned {type(description).__name__}, not SpanDescription")
            return description  # type: ignore[no-any-return]
        except Exception:  # the application's describer: logged, never fatal
            log.exception("the %s describer of machine %s raised; default used", what, machine)
            return getattr(WorkflowDescriber(), what)(subject)  # type: ignore[no-any-return]

    def _root(self, record: ExecutionRecord) -> str:
        """The root execution id of ``record`` (itself, or the top of its parents)."""
        parent = record.parent_execution_id
        if parent is None:
            return record.execution_id
        root = self._roots.get(parent)
        if root is None:
            root, seen = parent, {record.execution_id}
            while self.store is not None and root not in seen and len(seen) < 64:
                seen.add(root)
                try:
                    above = self.store.load_record(root).parent_execution_id
                except PhronomyError:
                    break
                if above is None:
                    break
                root = above
            self._roots[parent] = root
        self._roots.move_to_end(parent)
        self._roots[record.execution_id] = root
        while len(self._roots) > ROOT_CACHE_SIZE:
            self._roots.popitem(last=False)
        return root

    def _emit(
        self,
        *,
        trace_id: int,
        span_id: int,
        parent_span_id: int | None,
        description: SpanDescription,
        attributes: Mapping[str, Any],
        start_ns: int,
        end_ns: int,
        error: BaseException | None = None,
        error_text: str | None = None,
    ) -> None:
        from opentelemetry import trace
        from opentelemetry.context import Context
        from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, TraceFlags
        from opentelemetry.trace.status import Status, StatusCode

        context = Context()
        if parent_span_id is not None:
            parent = SpanContext(
                trace_id, parent_span_id, is_remote=False, trace_flags=TraceFlags(1)
            )
            context = trace.set_span_in_context(NonRecordingSpan(parent), context)
        merged = {**attributes, **description.attributes}
        kind_name = description.kind if description.kind in _SPAN_KINDS else "internal"
        self._ids.local.ids = (trace_id, span_id)
        try:
            span = self._tracer.start_span(
                description.name,
                context=context,
                kind=getattr(SpanKind, kind_name.upper()),
                attributes={k: v for k, v in merged.items() if v is not None},
                start_time=start_ns,
            )
        finally:
            self._ids.local.ids = None
        if error is not None:
            span.record_exception(error, timestamp=end_ns)
        if error is not None or error_text is not None:
            span.set_status(Status(StatusCode.ERROR, error_text or f"{type(error).__name__}"))
        span.end(end_time=max(end_ns, start_ns))

    def _base(self, record: ExecutionRecord) -> dict[str, Any]:
        return {
            "phronomy.execution.id": record.execution_id,
            "phronomy.machine": record.machine,
            "phronomy.state": record.state,
            "phronomy.revision": record.revision,
            "phronomy.status": record.status.value,
        }

    def _commit(self, record: ExecutionRecord, barrier: str) -> None:
        attributes = {**self._base(record), "phronomy.barrier": barrier}
        attributes["phronomy.point"] = record.point.value
        if record.recovery is not None and record.status is ExecutionStatus.RECOVERY_REQUIRED:
            attributes["phronomy.recovery.reason"] = record.recovery.reason
        now = time.time_ns()
        self._emit(
            trace_id=trace_id_for(self._root(record)),
            span_id=commit_span_id(record.execution_id, record.revision),
            parent_span_id=execution_span_id(record.execution_id),
            description=SpanDescription(f"commit {barrier}"),
            attributes=attributes,
            start_ns=min(_ns(record.updated_at), now),
            end_ns=now,
        )

    def _flush(self, record: ExecutionRecord) -> None:
        """The execution committed: emit the spans of its effects whose work returned
        (their outcome is durable now), described with this record."""
        effects = self._effects.get(record.execution_id)
        if not effects:
            return
        for span_id, effect in list(effects.items()):
            if effect.call is None:  # still running
                continue
            del effects[span_id]
            self._emit_effect(span_id, effect, record, record.execution_id)

    def _emit_effect(
        self, span_id: int, effect: _Effect, record: ExecutionRecord | None, execution_id: str
    ) -> None:
        call = effect.call
        assert call is not None
        call = attrs.evolve(call, record=record)
        root = self._root(record) if record is not None else execution_id
        self._emit(
            trace_id=trace_id_for(root),
            span_id=span_id,
            parent_span_id=execution_span_id(execution_id),
            description=self._describe(call.machine, "effect", call),
            attributes={
                "phronomy.execution.id": call.execution_id,
                "phronomy.machine": call.machine,
                "phronomy.effect.name": call.effect,
                "phronomy.effect.kind": call.kind,
                "phronomy.effect.key": call.key,
                "phronomy.effect.attempt": call.attempt,
            },
            start_ns=effect.start_ns,
            end_ns=effect.end_ns,
            error=call.error,
        )

    def _finished(self, record: ExecutionRecord) -> None:
        root = self._root(record)
        parent = record.parent_execution_id
        attributes = {
            **self._base(record),
            "phronomy.spec.version": record.spec_version,
            "phronomy.parent_execution.id": parent,
            "phronomy.exclusive_key": record.exclusive_key,
        }
        self._emit(
            trace_id=trace_id_for(root),
            span_id=execution_span_id(record.execution_id),
            parent_span_id=None if parent is None else execution_span_id(parent),
            description=self._describe(record.machine, "execution", record),
            attributes=attributes,
            start_ns=_ns(record.created_at),
            end_ns=time.time_ns(),
            error_text=(
                record.error.render()
                if record.status is ExecutionStatus.FAILED and record.error is not None
                else ("failed" if record.status is ExecutionStatus.FAILED else None)
            ),
        )
        self._effects.pop(record.execution_id, None)


def _durable(runtime: Any) -> Any:
    """The durable runtime of ``runtime`` (an agent runtime's own, or itself)."""
    return getattr(runtime, "durable", runtime)


def instrument(
    runtime: Any,
    *,
    tracer_provider: Any = None,
    describers: Mapping[str, Describer] | None = None,
    default: Describer | None = None,
) -> ExecutionTracer:
    """Trace every execution ``runtime`` runs from now on (module docstring).

    Install it before :meth:`~phronomy_fsm.durable.runtime.DurableRuntime.recover`, the
    first ``start`` or the first ``Agent.load``, so no commit is missed.

    Args:
        runtime: a :class:`~phronomy_fsm.durable.runtime.DurableRuntime`, or an
            :class:`~phronomy_fsm.agent.runtime.AgentRuntime` (its durable runtime is
            traced, and its agents' providers name ``gen_ai.provider.name``).
        tracer_provider / describers / default: as :class:`ExecutionTracer`
            (``describers`` default: :func:`default_describers`).

    Returns:
        The :class:`ExecutionTracer` added to the runtime's listeners (remove it with
        :func:`uninstrument`).

    Raises:
        ConfigurationError: as :class:`ExecutionTracer`.

    Concurrency: call it from any thread but the runtime's loop, before the executions
    to trace start.
    """
    durable = _durable(runtime)
    if describers is None:
        directory = getattr(runtime, "directory", None)
        provider_of = None
        if directory is not None:

            def provider_of(agent_id: str) -> Any:
                return directory.config(agent_id).provider

        describers = default_describers(provider_of=provider_of)
    tracer = ExecutionTracer(
        tracer_provider, store=durable.store, describers=describers, default=default
    )
    durable.listeners.append(tracer)
    return tracer


def uninstrument(runtime: Any, tracer: ExecutionTracer) -> None:
    """Stop ``tracer`` listening to ``runtime`` (a durable or an agent runtime; spans
    still buffered are dropped)."""
    listeners = _durable(runtime).listeners
    if tracer in listeners:
        listeners.remove(tracer)


__all__ = [
    "INSTRUMENTATION_NAME",
    "ROOT_CACHE_SIZE",
    "ExecutionTracer",
    "default_describers",
    "instrument",
    "uninstrument",
]
