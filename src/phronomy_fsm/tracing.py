"""OpenTelemetry spans of durable executions, with ids derived from the execution.

Install it on a runtime with :func:`instrument` (``pip install 'phronomy-fsm[otel]'``);
it listens to the runtime's :class:`~phronomy_fsm.durable.types.DurableEvent` s and emits,
through the OpenTelemetry SDK ``TracerProvider`` given (``docs/tracing.md``):

- one **execution span** per execution, ``invoke_workflow <machine>`` by default (an
  agent's describer names it ``invoke_agent <name>``), emitted once, when its final
  commit is durable, starting at the execution's creation time (from its record);
- one **commit span** per revision, ``commit <barrier>`` (``commit @start``,
  ``commit charge``, ``commit @wait``...), emitted when that revision commits;
- one **effect span** per effect attempt that returned, ``effect <name>`` by default (a
  describer gives GenAI names and attributes: ``chat <model>``, ``execute_tool
  <name>``), emitted only once its outcome is durable: it is buffered until the
  execution's next commit.

Every id is derived, never random: the **trace id** from the id of the execution's root
(itself, or the top of its chain of parents: a child execution is in its parent's
trace), the **span ids** from the execution id and ``execution``, the revision, or the
effect's idempotency key and attempt (:func:`trace_id_for`, :func:`execution_span_id`,
:func:`commit_span_id`, :func:`effect_span_id`). So a recovered execution continues its
trace in another process, and **nothing is emitted twice**: a revision commits once; an
execution finishes once; an effect's span leaves the buffer only with the commit that
made its outcome durable — a crash before that loses the buffer, and the effect's re-run
(same key, same attempt) is emitted then, once. What a crash can lose is at most a span
(a commit whose event never reached the listener, an at_most_once effect whose outcome
an operator answered); it never duplicates one.

Commit and effect spans are children of the execution span (the execution span of a
child execution is a child of its parent's execution span). Attributes ``phronomy.*``
name the execution, machine, state, revision, status, barrier, effect, key and attempt.

Must not: import OpenTelemetry at module level (the ids work without the extra), block
the loop thread beyond the span processor's ``on_end`` (use a ``BatchSpanProcessor``
in production) and one store read per unknown parent chain.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Protocol

import attrs

from phronomy_fsm.durable.records import ExecutionRecord, ExecutionStatus
from phronomy_fsm.durable.types import DurableEvent, DurableEventKind
from phronomy_fsm.errors import ConfigurationError, PhronomyError

log = logging.getLogger("phronomy_fsm.tracing")

#: The instrumentation scope's name.
INSTRUMENTATION_NAME = "phronomy_fsm"
#: Most parent chains remembered (execution id → root execution id).
ROOT_CACHE_SIZE = 10_000
_SPAN_KINDS = ("internal", "client", "server", "producer", "consumer")


# ------------------------------------------------------------------ ids


def _digest(*parts: str) -> bytes:
    return hashlib.sha256("\0".join(("phronomy-fsm", *parts)).encode("utf-8")).digest()


def trace_id_for(root_execution_id: str) -> int:
    """The 128-bit trace id of every span of ``root_execution_id`` and its
    descendants: the first 16 bytes of sha256("phronomy-fsm", "trace", id), never 0."""
    return int.from_bytes(_digest("trace", root_execution_id)[:16], "big") or 1


def _span_id(*parts: str) -> int:
    return int.from_bytes(_digest("span", *parts)[:8], "big") or 1


def execution_span_id(execution_id: str) -> int:
    """The 64-bit span id of the execution span of ``execution_id``."""
    return _span_id(execution_id, "execution")


def commit_span_id(execution_id: str, revision: int) -> int:
    """The 64-bit span id of the commit of ``revision`` of ``execution_id``."""
    return _span_id(execution_id, "commit", str(revision))


def effect_span_id(execution_id: str, key: str, attempt: int) -> int:
    """The 64-bit span id of one attempt of the effect with idempotency ``key``."""
    return _span_id(execution_id, "effect", key, str(attempt))


# ------------------------------------------------------------------ describers


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
    attempt, and what the work returned (``value``) or raised (``error``) — as they
    are, not JSON."""

    execution_id: str
    machine: str
    effect: str
    kind: str
    key: str
    attempt: int
    value: Any = None
    error: BaseException | None = None


class Describer(Protocol):
    """Names and attributes the spans of one machine's executions (``docs/tracing.md``,
    "Describers"). Both methods run on the runtime's loop thread: keep them cheap; an
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
    model: str,
    *,
    provider: str | None = None,
    response_model: str | None = None,
    input_tokens: int | None = None,
    output_tokens: int | None = None,
    finish_reasons: tuple[str, ...] | list[str] = (),
    response_id: str | None = None,
    attributes: Mapping[str, Any] | None = None,
) -> SpanDescription:
    """An LLM call in the GenAI conventions: ``chat <model>`` (kind ``client``) with
    ``gen_ai.operation.name``, ``gen_ai.provider.name``, ``gen_ai.request.model``,
    ``gen_ai.response.model``, ``gen_ai.usage.input_tokens``/``output_tokens`` (token
    counts), ``gen_ai.response.finish_reasons`` and ``gen_ai.response.id``."""
    return SpanDescription(
        f"chat {model}",
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


def default_describers() -> dict[str, Describer]:
    """The describers used unless told otherwise, by machine name.

    Empty for now: every machine gets :class:`WorkflowDescriber`. The agent layer's
    describer (``invoke_agent <name>``, ``chat <model>`` with token counts, ``execute_tool
    <name>``, built with :func:`gen_ai_agent`, :func:`gen_ai_chat` and
    :func:`gen_ai_tool`) belongs here once agents run on the durable engine
    (``docs/tracing.md``, "Describers")."""
    return {}


# ------------------------------------------------------------------ the listener


def _ns(value: datetime) -> int:
    return int(value.timestamp() * 1_000_000_000)


@attrs.define
class _Effect:
    """An effect attempt of one execution: when it started, and once its work returned
    the span waiting for the next commit."""

    start_ns: int
    description: SpanDescription | None = None
    attributes: dict[str, Any] = attrs.Factory(dict)
    end_ns: int = 0
    error: BaseException | None = None


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
                "tracing needs OpenTelemetry: pip install 'phronomy-fsm[otel]'"
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
        self._roots: OrderedDict[str, str] = OrderedDict()

    # ------------------------------------------------------------------ events

    def __call__(self, event: DurableEvent) -> None:
        """Handle one event (see the module docstring for what each emits)."""
        kind = event.kind
        with self._lock:
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
            elif kind is DurableEventKind.RELEASED:
                self._effects.pop(event.execution_id, None)

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
        call = EffectCall(
            event.execution_id,
            event.machine,
            str(d["effect"]),
            str(getattr(d.get("kind"), "value", d.get("kind"))),
            key,
            attempt,
            d.get("value"),
            error if isinstance(error, BaseException) else None,
        )
        effect.description = self._describe(event.machine, "effect", call)
        effect.end_ns = time.time_ns()
        effect.error = call.error
        effect.attributes = {
            "phronomy.execution.id": call.execution_id,
            "phronomy.machine": call.machine,
            "phronomy.effect.name": call.effect,
            "phronomy.effect.kind": call.kind,
            "phronomy.effect.key": key,
            "phronomy.effect.attempt": attempt,
        }

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
        """The execution committed: emit the spans of its effects whose work returned."""
        effects = self._effects.get(record.execution_id)
        if not effects:
            return
        trace_id = trace_id_for(self._root(record))
        for span_id, effect in list(effects.items()):
            if effect.description is None:  # still running
                continue
            del effects[span_id]
            self._emit(
                trace_id=trace_id,
                span_id=span_id,
                parent_span_id=execution_span_id(record.execution_id),
                description=effect.description,
                attributes=effect.attributes,
                start_ns=effect.start_ns,
                end_ns=effect.end_ns,
                error=effect.error,
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


def instrument(
    runtime: Any,
    *,
    tracer_provider: Any = None,
    describers: Mapping[str, Describer] | None = None,
    default: Describer | None = None,
) -> ExecutionTracer:
    """Trace every execution ``runtime`` runs from now on (module docstring).

    Install it before :meth:`~phronomy_fsm.durable.runtime.DurableRuntime.recover` or
    the first ``start`` so no commit is missed.

    Args:
        runtime: a :class:`~phronomy_fsm.durable.runtime.DurableRuntime`.
        tracer_provider / describers / default: as :class:`ExecutionTracer`.

    Returns:
        The :class:`ExecutionTracer` added to ``runtime.listeners`` (remove it with
        :func:`uninstrument`).

    Raises:
        ConfigurationError: as :class:`ExecutionTracer`.
    """
    tracer = ExecutionTracer(
        tracer_provider, store=runtime.store, describers=describers, default=default
    )
    runtime.listeners.append(tracer)
    return tracer


def uninstrument(runtime: Any, tracer: ExecutionTracer) -> None:
    """Stop ``tracer`` listening to ``runtime`` (spans still buffered are dropped)."""
    if tracer in runtime.listeners:
        runtime.listeners.remove(tracer)


__all__ = [
    "INSTRUMENTATION_NAME",
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
