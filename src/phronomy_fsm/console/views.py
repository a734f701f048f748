"""The view-models of the console's pages: operator values turned into what templates show.

Templates only loop and branch; everything they print is prepared here as text (times
in UTC, JSON indented, ids with invisible characters made visible) or as
:class:`~markupsafe.Markup` for the one piece of trusted markup, the machine's diagram
(SVG drawn by Graphviz from the registered table, stripped of its prolog; every label
in it is XML-escaped by Graphviz). Jinja's autoescape escapes the rest.

Must not: read or write the store (the handlers pass what they read), import the web
framework.
"""

from __future__ import annotations

import hashlib
import re
import threading
import unicodedata
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

import orjson
from markupsafe import Markup

from phronomy_fsm.diagram import render_dot, render_svg
from phronomy_fsm.durable.keys import idempotency_key
from phronomy_fsm.durable.machines import effect_kind
from phronomy_fsm.durable.records import ExecutionStatus, SignalRecord
from phronomy_fsm.operator import (
    ExecutionDetail,
    ExecutionDrawing,
    ExecutionPage,
    RecoveryRequest,
    WorkerLease,
)
from phronomy_fsm.operator.agents import subject_option
from phronomy_fsm.table import MachineTable

from .forms import ListQuery

#: Statuses in the order the list's counts show them (those needing attention first).
STATUS_ORDER = (
    "recovery_required",
    "waiting",
    "running",
    "failed",
    "cancelled",
    "completed",
)
#: The longest JSON shown inline in a table cell, in characters.
INLINE_JSON_CHARS = 160


# ------------------------------------------------------------------ text


def visible(text: object) -> str:
    """``text`` as a string with control, format (bidirectional overrides, zero-width)
    and other invisible characters written as ``\\uXXXX``, so a hostile id cannot
    disguise itself on the page (HTML escaping is Jinja's job)."""
    out = []
    for ch in str(text):
        if unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn") and ch != "\n":
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return "".join(out)


def format_time(value: datetime | None) -> str:
    """A UTC time as ``2026-01-31 12:00:00Z`` (``-`` for none)."""
    return "-" if value is None else value.strftime("%Y-%m-%d %H:%M:%SZ")


def iso_time(value: datetime | None) -> str:
    """A time in full ISO 8601 (for tooltips), ``""`` for none."""
    return "" if value is None else value.isoformat()


def json_text(value: Any) -> str:
    """``value`` (JSON data) as indented JSON with sorted keys."""
    return orjson.dumps(
        value, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS
    ).decode()


def inline_json(value: Any, limit: int = INLINE_JSON_CHARS) -> str:
    """``value`` as one line of JSON, cut to ``limit`` characters with ``…``."""
    if value is None:
        return "-"
    text = orjson.dumps(value, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS).decode()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def execution_href(execution_id: str) -> str:
    """The page of ``execution_id`` (its id in the query string, so any id works)."""
    return "/execution?" + urlencode({"id": execution_id})


def list_href(params: Mapping[str, str]) -> str:
    """The list page with ``params`` as its query."""
    return "/" + ("?" + urlencode(params) if params else "")


# ------------------------------------------------------------------ the list


def list_model(page: ExecutionPage, query: ListQuery) -> dict[str, Any]:
    """The executions list's view-model: rows, counts per status (each a filter link),
    the page's range and its previous/next links, and how many wait for an operator."""
    rows = [
        {
            "id": visible(e.execution_id),
            "href": execution_href(e.execution_id),
            "machine": visible(e.machine),
            "machine_href": list_href(query.params(machine=e.machine, offset=0)),
            "status": e.status,
            "state": visible(e.state),
            "revision": e.revision,
            "updated": format_time(e.updated_at),
            "updated_iso": iso_time(e.updated_at),
            "created": format_time(e.created_at),
            "key": visible(e.exclusive_key) if e.exclusive_key else "",
            "parent": visible(e.parent_execution_id) if e.parent_execution_id else "",
            "needs_operator": e.needs_operator,
            "waits_for": e.waits_for or "",
            "no_live_worker": e.is_held_by_no_live_worker
            and e.waits_for in ("operator", "approval", "signal"),
            "parked_children": [visible(c) for c in e.parked_children],
            "deadline": format_time(e.deadline_at) if e.deadline_at and e.active else "",
        }
        for e in page.executions
    ]
    ordered = sorted(page.counts.items(), key=lambda kv: _status_rank(kv[0]))
    counts = [
        {
            "status": status,
            "n": n,
            "href": list_href(query.params(status=status, offset=0)),
            "selected": query.status == status,
        }
        for status, n in ordered
    ]
    first = page.offset + 1 if page.executions else 0
    last = page.offset + len(page.executions)
    prev_offset = max(0, page.offset - query.limit)
    return {
        "rows": rows,
        "counts": counts,
        "all_href": list_href(query.params(status=None, offset=0)),
        "total": page.total,
        "all_total": sum(page.counts.values()),
        "first": first,
        "last": last,
        "prev_href": list_href(query.params(offset=prev_offset)) if page.offset > 0 else None,
        "next_href": list_href(query.params(offset=last)) if page.has_more else None,
        "needs_operator": page.counts.get(ExecutionStatus.RECOVERY_REQUIRED.value, 0),
        "needs_operator_href": list_href(
            query.params(status=ExecutionStatus.RECOVERY_REQUIRED.value, offset=0)
        ),
        "filters": {
            "machine": query.machine or "",
            "status": query.status or "",
            "key": query.exclusive_key or "",
        },
        "statuses": STATUS_ORDER,
        "filtered": bool(query.machine or query.status or query.exclusive_key),
    }


def _status_rank(status: str) -> tuple[int, str]:
    return (STATUS_ORDER.index(status) if status in STATUS_ORDER else len(STATUS_ORDER), status)


def list_fingerprint(page: ExecutionPage) -> str:
    """A short digest of what the list shows (ids, revisions, statuses, counts): it
    changes when a reload would show something else."""
    parts = [f"{e.execution_id}\0{e.revision}\0{e.status}" for e in page.executions]
    parts += [f"{k}={v}" for k, v in sorted(page.counts.items())]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


# ------------------------------------------------------------------ one execution


def owner_text(owner: WorkerLease | None, finished: bool) -> str:
    """Who runs the execution, as one sentence."""
    if finished:
        return "- (finished)"
    if owner is None:
        return "none: never claimed; nothing moves until a worker or phronomy-fsm recover runs it"
    where = "" if owner.host is None else f" (host {owner.host}, pid {owner.pid})"
    if owner.is_live:
        return f"worker {owner.worker_id}{where}, lease until {format_time(owner.lease_expires_at)}"
    why = "its process is gone" if owner.process_gone else "its lease has ended"
    return (
        f"none live (last worker {owner.worker_id}{where}: {why}); nothing moves until a worker "
        "or phronomy-fsm recover claims it"
    )


def signal_subject(signal: SignalRecord) -> str:
    """What a signal asks for: its event, a resolution's outcome, a cancel's reason."""
    if signal.event is not None:
        return signal.event
    payload = signal.payload if isinstance(signal.payload, dict) else {}
    if signal.kind.value == "resolution":
        return f"resolve: {payload.get('outcome', '?')}"
    if signal.kind.value == "cancel":
        return f"cancel: {payload.get('reason', '')}"
    return "-"


def signal_outcome(signal: SignalRecord) -> str:
    """``pending``, or how and at which revision the signal was consumed."""
    if signal.consumed_revision is None:
        return "pending"
    return f"{signal.outcome or 'consumed'} at r{signal.consumed_revision}"


#: What the resolve form's result field suggests, by the kind of subject.
RESULT_EXAMPLES = {
    "llm_call": '{"content": "the answer the LLM gave", "tool_calls": []}',
    "tool_invocation": "the tool's result as JSON",
}


def subject_value(request: RecoveryRequest) -> str:
    """The ``--subject`` of the answer: for an agent's LLM call or tool call
    ``llm_call:<id>`` or ``tool_invocation:<id>`` (its own terms), else
    ``effect:<hook>``, or ``execution:<id>`` for the execution as a whole."""
    if request.agent_subject is not None:
        named = subject_option(request.agent_subject)
        if named is not None:
            return named
    if request.subject is None:
        return f"execution:{request.execution_id}"
    return f"effect:{request.subject.effect}"


def result_example(request: RecoveryRequest) -> str:
    """The resolve form's placeholder for ``succeeded``'s result: the shape the
    subject's own machine declares (:class:`~phronomy_fsm.operator.ResultShape`: its
    completed event's payload type), an LLM answer or a tool's result for an agent;
    never another machine's example."""
    shape = request.result_shape
    kind = None if request.agent_subject is None else request.agent_subject.get("type")
    if kind in ("llm_call", "tool_invocation"):
        return RESULT_EXAMPLES[str(kind)]
    if shape is None:
        return "the effect's result as JSON"
    text = shape.describe()
    return text if shape.example is None else f"{text}, e.g. {shape.example}"


def pending_effect_rows(
    detail: ExecutionDetail, table: MachineTable | None
) -> list[dict[str, str]]:
    """The effects the last barrier announced, each with its kind (from the table)
    and idempotency key (derived as the engine does, ``docs/semantics.md``)."""
    kinds: dict[str, str] = {}
    if table is not None:
        offloads = [s.offload for s in table.states] + [t.offload for t in table.transitions]
        for offload in offloads:
            if offload is not None:
                kinds[offload.hook] = effect_kind(offload).value
    r = detail.record
    return [
        {
            "name": visible(name),
            "kind": kinds.get(name, "?"),
            "key": idempotency_key(r.execution_id, r.point_revision, name),
        }
        for name in r.pending_effects
    ]


def detail_model(detail: ExecutionDetail, table: MachineTable | None) -> dict[str, Any]:
    """The view-model of an engine execution's page (everything but the diagram,
    the presenter's part and the forms' fields)."""
    r = detail.record
    facts: list[tuple[str, str]] = [
        ("machine", f"{r.machine} (spec version {r.spec_version}, sha256 {r.spec_sha256[:12]})"),
        ("state", r.state),
        ("revision", str(r.revision)),
        (
            "point",
            f"{r.point.value} (set at r{r.point_revision}"
            + (f", resumes with {r.resume_event})" if r.resume_event else ")"),
        ),
        ("created", format_time(r.created_at)),
        ("updated", format_time(r.updated_at)),
        ("owner", owner_text(detail.owner, r.is_finished)),
    ]
    timer = ""
    if r.deadline_at is not None and r.is_active:
        facts.append(("timer", f"{format_time(r.deadline_at)} (the wait state's deadline)"))
        state = None
        if table is not None and r.status is ExecutionStatus.WAITING:
            state = next((s for s in table.states if s.name == r.state), None)
        if state is not None and state.timeout is not None:
            timer = (
                f"Its timer sends {state.timeout.event} at {format_time(r.deadline_at)} "
                "(the engine sends it; it is not a signal to send by hand)."
            )
    for ending in detail.wait_endings:
        facts.append(("wait", ending.describe()))
    if r.expires_at is not None:
        facts.append(("expires", f"{format_time(r.expires_at)} (the execution's own deadline)"))
    if r.exclusive_key is not None:
        facts.append(("exclusive key", r.exclusive_key))
    if r.labels:
        facts.append(("labels", inline_json(r.labels, 400)))
    if r.error is not None:
        facts.append(("error", r.error.render()))
    recovery = None
    if detail.recovery is not None:
        req = detail.recovery
        recovery = {
            "reason": visible(req.reason),
            "subject": visible(req.describe_subject()),
            "subject_value": subject_value(req),
            "result_example": result_example(req),
            "result_shape": ""
            if req.result_shape is None
            else visible(req.result_shape.describe()),
            "allowed": list(req.allowed_outcomes),
            "detected": format_time(req.detected_at),
            "commands": [visible(c) for c in req.commands],
            "revision": req.revision,
        }
    return {
        "id": visible(r.execution_id),
        "raw_id": r.execution_id,
        "machine": visible(r.machine),
        "status": r.status.value,
        "state": visible(r.state),
        "revision": r.revision,
        "is_active": r.is_active,
        "is_waiting": r.status is ExecutionStatus.WAITING,
        "needs_operator": detail.needs_operator,
        "facts": [(label, visible(value)) for label, value in facts],
        "parent_href": execution_href(r.parent_execution_id) if r.parent_execution_id else None,
        "parent": visible(r.parent_execution_id) if r.parent_execution_id else "",
        "awaits": list(detail.awaits),
        "timer": timer,
        "no_live_worker": detail.is_held_by_no_live_worker,
        "recovery": recovery,
        "pending_effects": pending_effect_rows(detail, table),
        "barriers": [
            {
                "revision": b.revision,
                "barrier": visible(b.barrier),
                "state": visible(b.state),
                "status": b.status,
                "time": format_time(b.committed_at),
                "time_iso": iso_time(b.committed_at),
                "digest": b.digest[:12],
            }
            for b in reversed(detail.barriers)
        ],
        "signals": [
            {
                "seq": s.seq,
                "kind": s.kind.value,
                "what": visible(signal_subject(s)),
                "payload": visible(inline_json(s.payload)) if s.kind.value != "cancel" else "-",
                "sender": visible(s.sender or "-"),
                "expected": "-" if s.expected_revision is None else f"r{s.expected_revision}",
                "created": format_time(s.created_at),
                "outcome": visible(signal_outcome(s)),
                "pending": s.consumed_revision is None,
            }
            for s in reversed(detail.signals)
        ],
        "journal": [
            {
                "at": f"r{j.revision}.{j.position}",
                "kind": visible(j.kind),
                "data": visible(inline_json(j.data)),
                "full": visible(json_text(j.data)),
            }
            for j in reversed(detail.journal)
        ],
    }


def find_signal(signals: Sequence[SignalRecord], seq: int) -> SignalRecord | None:
    """The signal with ``seq`` among ``signals``."""
    return next((s for s in signals if s.seq == seq), None)


# ------------------------------------------------------------------ the diagram

_PROLOG = re.compile(r"^.*?(?=<svg\b)", re.DOTALL)
_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
_SIZE = re.compile(
    r'(?P<head><svg\b[^>]*?)\swidth="(?P<width>[\d.]+)pt"\s+height="(?P<height>[\d.]+)pt"'
)
_VIEWBOX = re.compile(r'viewBox="[^"]*"')
#: The ``dpi`` the diagrams are drawn at (``phronomy_fsm.diagram``'s DOT header).
_GRAPHVIZ_DPI = 96


class DiagramCache:
    """Inline SVG of execution drawings, rendered once per distinct DOT text (an LRU of
    ``capacity`` entries; thread-safe). Rendering runs Graphviz's ``dot``."""

    def __init__(self, capacity: int = 64) -> None:
        self.capacity = capacity
        self._entries: OrderedDict[str, Markup] = OrderedDict()
        self._lock = threading.Lock()

    def svg(self, drawing: ExecutionDrawing, *, view: str = "main") -> Markup:
        """The drawing as inline SVG markup (prolog, DOCTYPE and comments removed; its
        ``viewBox`` set to the drawn size — Graphviz scales the drawing by ``dpi`` but
        not the box —, its width the drawing's size at 72 dpi, so text shows at about its
        point size, and its height dropped: CSS shrinks a large drawing to the page and
        never blows a small one up).

        Raises:
            RenderError: ``dot`` is missing or failed. ValueError: an unknown ``view``.
        """
        dot = render_dot(drawing.diagram, view=view, highlight=drawing.highlight)
        key = hashlib.sha256(dot.encode()).hexdigest()
        with self._lock:
            hit = self._entries.get(key)
            if hit is not None:
                self._entries.move_to_end(key)
                return hit
        text = _COMMENT.sub("", _PROLOG.sub("", render_svg(dot).decode("utf-8"), count=1))
        size = _SIZE.search(text)
        if size is not None:  # a viewBox of the drawn size (Graphviz's dpi scaling)
            width, height = size.group("width"), size.group("height")
            natural = float(width) * 72 / _GRAPHVIZ_DPI  # text at about its point size
            text = _SIZE.sub(rf'\g<head> width="{natural:.0f}"', text, count=1)
            text = _VIEWBOX.sub(f'viewBox="0 0 {width} {height}"', text, count=1)
        markup = Markup(text)
        with self._lock:
            self._entries[key] = markup
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)
        return markup


def schedule_rows(records: Sequence[Any]) -> list[dict[str, Any]]:
    """The rows of the schedules page from
    :class:`~phronomy_fsm.durable.schedules.ScheduleRecord` values: every field as
    text (times in UTC; the catch-up window in words, ``docs/operations.md``,
    "Schedules")."""
    rows = []
    for r in records:
        window = "newest missed slot" if r.catchup_seconds is None else f"{r.catchup_seconds:g} s"
        rows.append(
            {
                "name": visible(r.name),
                "machine": visible(r.machine),
                "cron": visible(r.cron),
                "timezone": visible(r.timezone),
                "overlap": r.overlap.value,
                "catchup": window,
                "paused": r.paused,
                "next_slot": "-" if r.paused else format_time(r.next_slot_at),
                "buffered": format_time(r.buffered_slot_at) if r.buffered_slot_at else "",
                "last": visible(r.last_execution_id) if r.last_execution_id else "",
                "last_href": execution_href(r.last_execution_id) if r.last_execution_id else "",
                "started": r.started,
                "skipped": r.skipped,
                "missed": r.missed,
                "duplicates": r.duplicates,
                "claimed_by": visible(r.claim_owner) if r.claim_owner else "",
            }
        )
    return rows


__all__ = [
    "INLINE_JSON_CHARS",
    "RESULT_EXAMPLES",
    "STATUS_ORDER",
    "DiagramCache",
    "detail_model",
    "execution_href",
    "find_signal",
    "format_time",
    "inline_json",
    "iso_time",
    "json_text",
    "list_fingerprint",
    "list_href",
    "list_model",
    "owner_text",
    "pending_effect_rows",
    "result_example",
    "schedule_rows",
    "signal_outcome",
    "signal_subject",
    "subject_value",
    "visible",
]
