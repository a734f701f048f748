"""The console's pages (``GET``): the executions list, one execution, and the two
``live`` endpoints that let a page follow the store; and how every page is rendered.

Handlers read through :mod:`phronomy_fsm.operator` (``list_executions``,
``describe_execution``, ``execution_diagram``) on the read-only store connection, turn
what they read into view-models (:mod:`~phronomy_fsm.console.views`), ask the
machine's presenter (:mod:`~phronomy_fsm.console.presenters`) for its sections and
actions, and render the Jinja templates (autoescaped).

Must not: write to the store (:mod:`~phronomy_fsm.console.actions` does, through the
operator library).
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response

from phronomy_fsm import operator
from phronomy_fsm.durable.machines import table_from_json
from phronomy_fsm.errors import (
    ExecutionFinishedError,
    InvalidIdError,
    NotFoundError,
    PhronomyError,
    RenderError,
    StorageError,
)

from . import views
from .forms import FormError, parse_list_query
from .presenters import ApprovalAction, ExecutionView, SignalAction, presenter_for
from .security import Session

if TYPE_CHECKING:
    from .app import Console


# ------------------------------------------------------------------ rendering


def session_of(request: Request) -> Session:
    return request.state.session  # type: ignore[no-any-return]


def render(
    console: Console,
    request: Request,
    template: str,
    status_code: int = 200,
    **context: Any,
) -> HTMLResponse:
    """Render ``template`` with the context every page gets (session, CSRF token,
    read-only flag, the store's name) plus ``context``."""
    session = session_of(request)
    html = console.templates.get_template(template).render(
        csrf=console.security.csrf_token(session),
        signed_in=session.authenticated,
        read_only=console.security.read_only,
        has_token=console.security.token is not None,
        can_write=session.authenticated and not console.security.read_only,
        store_label=views.visible(console.stores.label),
        path=request.url.path,
        **context,
    )
    return HTMLResponse(html, status_code=status_code)


def error_page(console: Console, request: Request, status_code: int, message: str) -> HTMLResponse:
    """A page showing only ``message`` (an unknown execution, a bad query, a store
    that cannot be read)."""
    return render(console, request, "error.html", status_code, message=views.visible(message))


#: Refusals that only a page out of date can cause: shown as a conflict (409). An
#: approval: the execution moved on, the request was decided by someone else, another
#: request is pending now, or it finished.
_STALE_REASONS = frozenset(
    {
        "stale_revision",
        "not_recovery_required",
        "already_decided",
        "not_waiting",
        "other_request",
        "finished",
    }
)


def status_for(exc: BaseException) -> int:
    """The HTTP status of a refused action (409: the page was stale)."""
    if isinstance(exc, NotFoundError):
        return 404
    if getattr(exc, "reason", None) in _STALE_REASONS or isinstance(exc, ExecutionFinishedError):
        return 409
    if isinstance(exc, StorageError):
        return 503
    return 400


# ------------------------------------------------------------------ pages


async def list_page(console: Console, request: Request) -> Response:
    """``GET /``: the executions list (filters ``machine``, ``status``, ``key``;
    ``offset``/``limit`` paging; counts per status)."""
    try:
        query = parse_list_query(request.query_params)
        page = await run_in_threadpool(
            operator.list_executions,
            console.stores.reader,
            machine=query.machine,
            status=query.status,
            exclusive_key=query.exclusive_key,
            limit=query.limit,
            offset=query.offset,
        )
    except (FormError, PhronomyError, ValueError) as exc:
        return error_page(console, request, status_for(exc), str(exc))
    return render(
        console,
        request,
        "list.html",
        m=views.list_model(page, query),
        live_url="/live" + (("?" + request.url.query) if request.url.query else ""),
        live_value=views.list_fingerprint(page),
        canonical=views.list_href(query.params()),
    )


async def schedules_page(console: Console, request: Request) -> Response:
    """``GET /schedules``: every schedule of the store — cron and zone, overlap
    policy, catch-up window, next slot, counts, newest execution
    (``docs/operations.md``, "Schedules"; changed with ``phronomy-fsm schedules``)."""
    try:
        records = await run_in_threadpool(operator.list_schedules, console.stores.reader)
    except PhronomyError as exc:
        return error_page(console, request, status_for(exc), str(exc))
    return render(console, request, "schedules.html", rows=views.schedule_rows(records))


async def list_live(console: Console, request: Request) -> Response:
    """``GET /live``: the list's fingerprint as JSON (the page reloads when it
    changes)."""
    try:
        query = parse_list_query(request.query_params)
        page = await run_in_threadpool(
            operator.list_executions,
            console.stores.reader,
            machine=query.machine,
            status=query.status,
            exclusive_key=query.exclusive_key,
            limit=query.limit,
            offset=query.offset,
        )
    except (PhronomyError, ValueError) as exc:
        return JSONResponse({"error": str(exc)}, status_code=status_for(exc))
    return JSONResponse({"value": views.list_fingerprint(page)})


async def execution_page(console: Console, request: Request) -> Response:
    """``GET /execution?id=ID[&view=full][&sent=SEQ]``: one execution."""
    execution_id = request.query_params.get("id", "")
    view = "full" if request.query_params.get("view") == "full" else "main"
    sent = request.query_params.get("sent", "")
    return await show_execution(
        console,
        request,
        execution_id,
        view=view,
        sent_seq=int(sent) if sent.isdigit() else None,
    )


async def execution_live(console: Console, request: Request) -> Response:
    """``GET /execution/live?id=ID``: ``{"value": "<revision>:<status>"}`` (the page
    reloads when it changes)."""
    execution_id = request.query_params.get("id", "")
    try:
        record = await run_in_threadpool(console.stores.reader.load_record, execution_id)
    except PhronomyError as exc:
        return JSONResponse({"error": str(exc)}, status_code=status_for(exc))
    status = getattr(record.status, "value", record.status)
    return JSONResponse({"value": f"{record.revision}:{status}"})


def gather_execution(console: Console, execution_id: str, view: str) -> dict[str, Any]:
    """Read everything one execution's page shows (worker thread): the operator's
    detail, the registered table, the presenter's sections and actions, the diagram.

    Raises:
        NotFoundError, InvalidIdError, SerializationError, StorageError.
    """
    reader = console.stores.reader
    if not execution_id:
        raise InvalidIdError("no execution id given (/execution?id=ID)", field="id")
    detail = operator.describe_execution(reader, execution_id, clock=console.clock)
    record = detail.record
    table = None
    try:
        table = table_from_json(reader.load_machine(record.machine, record.spec_sha256).table)
    except NotFoundError:
        pass
    out: dict[str, Any] = {"detail": detail, "model": views.detail_model(detail, table)}
    out["diagram"], out["diagram_error"] = None, None
    if table is None:
        out["diagram_error"] = (
            f"no runtime registered machine {record.machine} (sha256 "
            f"{record.spec_sha256[:12]}) in this store, so it cannot be drawn"
        )
    else:
        try:
            drawing = operator.execution_diagram(reader, execution_id, table=table)
            out["diagram"] = console.diagrams.svg(drawing, view=view)
            out["path"] = [views.visible(s) for s in drawing.path]
        except RenderError as exc:
            out["diagram_error"] = str(exc)
    presenter = presenter_for(console.presenters, record.machine)
    pview = ExecutionView(detail, table)
    out["sections"], out["actions"], out["approvals"] = [], [], []
    out["presenter_error"] = None
    try:
        out["sections"] = list(presenter.sections(pview))
        for action in presenter.actions(pview) if record.is_active else ():
            if isinstance(action, ApprovalAction):
                out["approvals"].append(action)
            elif isinstance(action, SignalAction):
                out["actions"].append(action)
            else:
                raise TypeError(
                    f"an action must be a SignalAction or an ApprovalAction: {action!r}"
                )
    except Exception as exc:  # noqa: BLE001 - the application's presenter: shown, never fatal
        out["sections"], out["actions"], out["approvals"] = [], [], []
        out["presenter_error"] = f"{type(exc).__name__}: {exc}"
    return out


async def show_execution(
    console: Console,
    request: Request,
    execution_id: str,
    *,
    view: str = "main",
    sent_seq: int | None = None,
    error: str | None = None,
    conflict: bool = False,
    status_code: int = 200,
    failed: Mapping[str, Any] | None = None,
) -> Response:
    """Render one execution's page as the store has it now; ``error`` (with
    ``failed``: the form that was refused and its fields, shown again) on top."""
    try:
        data = await run_in_threadpool(gather_execution, console, execution_id, view)
    except PhronomyError as exc:
        message = str(exc) if error is None else f"{error} ({exc})"
        return error_page(console, request, status_for(exc), message)
    notice = None
    if sent_seq is not None and "model" in data:
        signal = views.find_signal(data["detail"].signals, sent_seq)
        if signal is not None:
            notice = {
                "seq": signal.seq,
                "what": views.visible(views.signal_subject(signal)),
                "outcome": views.visible(views.signal_outcome(signal)),
            }
    href = views.execution_href(execution_id)
    return render(
        console,
        request,
        "execution.html",
        status_code,
        m=data["model"],
        diagram=data["diagram"],
        diagram_error=data["diagram_error"],
        diagram_path=data.get("path", []),
        view=view,
        main_href=href,
        full_href=href + "&view=full",
        sections=data["sections"],
        actions=data["actions"],
        approvals=data["approvals"],
        presenter_error=data["presenter_error"],
        notice=notice,
        error=None if error is None else views.visible(error),
        conflict=conflict,
        failed=failed or {},
        nonce="console-" + secrets.token_hex(16),
        live_url="/execution/live?" + href.partition("?")[2],
        live_value=f"{data['model']['revision']}:{data['model']['status']}",
        canonical=href if view == "main" else href + "&view=full",
    )


__all__ = [
    "error_page",
    "execution_live",
    "execution_page",
    "gather_execution",
    "list_live",
    "list_page",
    "render",
    "session_of",
    "show_execution",
    "status_for",
]
