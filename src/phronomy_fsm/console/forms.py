"""Parsing what the console's pages send: list filters and the four write forms.

Every parser takes the submitted fields as a plain mapping and returns a frozen value,
or raises :class:`FormError` naming the field and what is wrong — before anything is
written. The values are then handed, unchanged, to :mod:`phronomy_fsm.operator`, which
checks them against the store (a stale revision, an undeclared event, an outcome the
subject does not allow) and writes nothing when it refuses.

Must not: read or write the store, know the web framework.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import orjson

from phronomy_fsm.durable.records import ResolutionOutcome
from phronomy_fsm.errors import PhronomyError

#: Executions per page of the list unless the query says otherwise; the most it shows.
DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 500
#: The longest payload, result or text a form may carry, in characters.
MAX_FIELD_CHARS = 256_000


class FormError(PhronomyError):
    """A form or query field is missing or malformed; nothing was written.

    Attributes: ``field`` (the form field's name), ``message``.
    """


def _text(fields: Mapping[str, Any], name: str, *, required: bool = True) -> str:
    value = fields.get(name)
    if value is None or (isinstance(value, str) and not value.strip()):
        if required:
            raise FormError(f"{name} is missing; nothing was written", field=name)
        return ""
    if not isinstance(value, str):
        raise FormError(f"{name} must be text; nothing was written", field=name)
    if len(value) > MAX_FIELD_CHARS:
        raise FormError(
            f"{name} is longer than {MAX_FIELD_CHARS} characters; nothing was written", field=name
        )
    return value


def _int(fields: Mapping[str, Any], name: str, *, minimum: int = 0) -> int:
    text = _text(fields, name).strip()
    try:
        value = int(text)
    except ValueError:
        raise FormError(f"{name} must be a whole number, got {text[:40]!r}", field=name) from None
    if value < minimum:
        raise FormError(f"{name} must be at least {minimum}, got {value}", field=name)
    return value


def _json(fields: Mapping[str, Any], name: str, what: str) -> Any:
    """The JSON value of an optional field (``None`` when empty)."""
    text = _text(fields, name, required=False)
    if not text.strip():
        return None
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise FormError(
            f'{what} is not JSON ({exc}); quote a plain string as "text"; nothing was written',
            field=name,
        ) from None


@attrs.frozen
class ListQuery:
    """The executions list's filters and page: ``machine``, ``status`` and
    ``exclusive_key`` (``None``: any), ``offset`` and ``limit``."""

    machine: str | None = None
    status: str | None = None
    exclusive_key: str | None = None
    offset: int = 0
    limit: int = DEFAULT_PAGE_SIZE

    def params(self, **changes: Any) -> dict[str, str]:
        """The query parameters of this query with ``changes`` applied (filters that
        are ``None`` and the defaults are left out), for links."""
        q = attrs.evolve(self, **changes)
        out = {"machine": q.machine, "status": q.status, "key": q.exclusive_key}
        params = {k: v for k, v in out.items() if v}
        if q.offset:
            params["offset"] = str(q.offset)
        if q.limit != DEFAULT_PAGE_SIZE:
            params["limit"] = str(q.limit)
        return params


def parse_list_query(params: Mapping[str, Any]) -> ListQuery:
    """The :class:`ListQuery` of the list page's query parameters (``machine``,
    ``status``, ``key`` — or ``agent``, the same for an agent id — ``offset``,
    ``limit``).

    Raises:
        FormError: ``offset`` or ``limit`` is not a whole number in range.
    """

    def opt(name: str) -> str | None:
        value = params.get(name)
        return value.strip() or None if isinstance(value, str) else None

    offset = _int(params, "offset") if opt("offset") else 0
    limit = _int(params, "limit", minimum=1) if opt("limit") else DEFAULT_PAGE_SIZE
    if limit > MAX_PAGE_SIZE:
        raise FormError(f"limit must be at most {MAX_PAGE_SIZE}, got {limit}", field="limit")
    return ListQuery(opt("machine"), opt("status"), opt("key") or opt("agent"), offset, limit)


@attrs.frozen
class SignalForm:
    """A signal to send: ``event`` with JSON ``payload`` to ``execution_id`` at
    ``expected_revision``; ``signal_id`` makes a re-submitted form a no-op."""

    execution_id: str
    event: str
    payload: Any
    expected_revision: int
    signal_id: str


@attrs.frozen
class ResolveForm:
    """An operator's answer to an execution in ``recovery_required``: ``outcome``
    with ``result`` (JSON, for ``succeeded``) or ``error`` (text, for ``failed``),
    about ``subject`` (``effect:<hook>`` or ``execution:<id>``, as the page showed
    it), at ``expected_revision``."""

    execution_id: str
    outcome: str
    result: Any
    error: str | None
    subject: str | None
    expected_revision: int
    signal_id: str


#: The prefix of an approval form's per-item fields: ``item:<tool invocation id>``.
ITEM_FIELD_PREFIX = "item:"
#: The decisions an approval form's submit buttons send (field ``decision``).
APPROVAL_DECISIONS = ("items", "approve_all", "reject_all")


@attrs.frozen
class ApprovalForm:
    """A decision on an agent execution's approval request ``request_id``, at
    ``expected_revision``: ``approved`` for the whole request when ``decisions`` is
    ``None``, else ``decisions`` (tool invocation id → True to run it, False to reject
    it); ``by`` names who decided."""

    execution_id: str
    request_id: str
    expected_revision: int
    approved: bool
    decisions: dict[str, bool] | None
    by: str | None


@attrs.frozen
class CancelForm:
    """A cancel of ``execution_id`` at ``expected_revision`` with ``reason``."""

    execution_id: str
    reason: str
    expected_revision: int
    signal_id: str


@attrs.frozen
class ForkForm:
    """A fork of ``execution_id`` from its commit ``revision`` (``docs/operations.md``,
    "Fork and restart from a past commit"): the at_most_once effects it may run
    (``allow_effects``), new idempotency keys or not, and whether only the plan is
    asked for (``plan_only``)."""

    execution_id: str
    revision: int
    allow_effects: tuple[str, ...]
    new_keys: bool
    plan_only: bool
    fork_id: str | None = None


def parse_fork_form(fields: Mapping[str, Any]) -> ForkForm:
    """Parse the fork form (``execution_id``, ``revision``, ``allow_effects`` — hook
    names separated by commas or spaces —, ``new_keys``, ``fork_id`` — the id the plan
    shown drew — and ``action`` = ``plan`` or ``fork``). Raises FormError."""
    action = _text(fields, "action", required=False).strip() or "plan"
    if action not in ("plan", "fork"):
        raise FormError(f"action must be plan or fork, got {action[:40]!r}", field="action")
    allowed = _text(fields, "allow_effects", required=False).replace(",", " ").split()
    return ForkForm(
        execution_id=_text(fields, "execution_id"),
        revision=_int(fields, "revision"),
        allow_effects=tuple(allowed),
        new_keys=_text(fields, "new_keys", required=False).strip() in ("on", "1", "true"),
        plan_only=action == "plan",
        fork_id=_text(fields, "fork_id", required=False).strip() or None,
    )


def parse_signal_form(fields: Mapping[str, Any]) -> SignalForm:
    """Parse the signal form (``execution_id``, ``event``, ``payload`` JSON or empty,
    ``expected_revision``, ``signal_id``). Raises FormError."""
    return SignalForm(
        execution_id=_text(fields, "execution_id"),
        event=_text(fields, "event").strip(),
        payload=_json(fields, "payload", "the payload"),
        expected_revision=_int(fields, "expected_revision"),
        signal_id=_text(fields, "signal_id").strip(),
    )


def parse_resolve_form(fields: Mapping[str, Any]) -> ResolveForm:
    """Parse the resolve form (``execution_id``, ``outcome``, ``result`` JSON — only
    read for ``succeeded`` —, ``error`` text — only read for ``failed`` —,
    ``subject``, ``expected_revision``, ``signal_id``). Raises FormError."""
    outcome = _text(fields, "outcome").strip()
    result = (
        _json(fields, "result", "the result") if outcome == ResolutionOutcome.SUCCEEDED else None
    )
    error = (
        _text(fields, "error", required=False).strip()
        if outcome == ResolutionOutcome.FAILED
        else None
    )
    return ResolveForm(
        execution_id=_text(fields, "execution_id"),
        outcome=outcome,
        result=result,
        error=error or None,
        subject=_text(fields, "subject", required=False).strip() or None,
        expected_revision=_int(fields, "expected_revision"),
        signal_id=_text(fields, "signal_id").strip(),
    )


def parse_approval_form(fields: Mapping[str, Any]) -> ApprovalForm:
    """Parse the approval form (``execution_id``, ``request_id``,
    ``expected_revision``, ``decision`` — ``items``, ``approve_all`` or ``reject_all``,
    the button pressed —, one ``item:<tool invocation id>`` field per tool call,
    ``approve`` or ``reject``, read for ``items``, and ``by``). Whether the decisions
    name every item of the request is the library's check, against the stored request.

    Raises:
        FormError: a missing field, an unknown ``decision``, an item field that is not
            ``approve`` or ``reject``, or ``items`` with no item decided.
    """
    decision = _text(fields, "decision").strip()
    if decision not in APPROVAL_DECISIONS:
        raise FormError(
            f"decision must be one of {', '.join(APPROVAL_DECISIONS)}, got {decision[:40]!r}; "
            "nothing was written",
            field="decision",
        )
    decisions: dict[str, bool] | None = None
    if decision == "items":
        decisions = {}
        for name in fields:
            if not name.startswith(ITEM_FIELD_PREFIX):
                continue
            verdict = _text(fields, name).strip()
            if verdict not in ("approve", "reject"):
                raise FormError(
                    f"{name} must be approve or reject, got {verdict[:40]!r}; nothing was written",
                    field=name,
                )
            decisions[name[len(ITEM_FIELD_PREFIX) :]] = verdict == "approve"
        if not decisions:
            raise FormError(
                "choose approve or reject for every tool call of the request; nothing was written",
                field="decision",
            )
    return ApprovalForm(
        execution_id=_text(fields, "execution_id"),
        request_id=_text(fields, "request_id").strip(),
        expected_revision=_int(fields, "expected_revision"),
        approved=decision != "reject_all",
        decisions=decisions,
        by=_text(fields, "by", required=False).strip() or None,
    )


def parse_cancel_form(fields: Mapping[str, Any]) -> CancelForm:
    """Parse the cancel form (``execution_id``, ``reason`` — default "cancelled by an
    operator" —, ``expected_revision``, ``signal_id``). Raises FormError."""
    return CancelForm(
        execution_id=_text(fields, "execution_id"),
        reason=_text(fields, "reason", required=False).strip() or "cancelled by an operator",
        expected_revision=_int(fields, "expected_revision"),
        signal_id=_text(fields, "signal_id").strip(),
    )


__all__ = [
    "APPROVAL_DECISIONS",
    "DEFAULT_PAGE_SIZE",
    "ITEM_FIELD_PREFIX",
    "MAX_FIELD_CHARS",
    "MAX_PAGE_SIZE",
    "ApprovalForm",
    "CancelForm",
    "ForkForm",
    "FormError",
    "ListQuery",
    "ResolveForm",
    "SignalForm",
    "parse_approval_form",
    "parse_cancel_form",
    "parse_fork_form",
    "parse_list_query",
    "parse_resolve_form",
    "parse_signal_form",
]
