"""The console's web application: routes, the security middleware, and the handlers.

:func:`create_app` builds a Starlette application over one store. Its pages (``GET``)
read through a **read-only** store connection, so they never block or disturb the
workers that run executions; its three actions (``POST /execution/signal``,
``/execution/resolve``, ``/execution/cancel``) write through a second, read-write
connection opened on the first write — never in ``--read-only`` mode.

Handlers only parse (:mod:`~phronomy_fsm.console.forms`), call
:mod:`phronomy_fsm.operator` — the same functions as ``phronomy-fsm signal``,
``resolve`` and ``cancel``, always with the revision the page showed — and render
(:mod:`~phronomy_fsm.console.views` and the Jinja templates, autoescaped). A refused
action re-renders the page as the store has it now with the error on top (409 for a
conflict: the page was stale) and writes nothing; an accepted one redirects to the page
(``303``, post/redirect/get) with a notice naming the signal it wrote.

The security model (loopback by default, a token to write, CSRF-checked forms, a Host
check against DNS rebinding, strict response headers) is in
:mod:`~phronomy_fsm.console.security` and ``docs/console.md``.

Concurrency: the store calls run on Starlette's worker threads (both stores are
thread-safe); nothing here holds state across requests but the diagram cache.
"""

from __future__ import annotations

import contextlib
import secrets
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import attrs
from jinja2 import Environment, FileSystemLoader, StrictUndefined
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from phronomy_fsm import operator
from phronomy_fsm.durable.machines import table_from_json
from phronomy_fsm.errors import (
    ExecutionFinishedError,
    InvalidIdError,
    NotFoundError,
    PhronomyError,
    RenderError,
    ResolutionError,
    SignalRefusedError,
    StorageError,
)
from phronomy_fsm.runtime.clock import SYSTEM_CLOCK, Clock
from phronomy_fsm.store.open import open_store

from . import views
from .forms import (
    FormError,
    parse_cancel_form,
    parse_list_query,
    parse_resolve_form,
    parse_signal_form,
)
from .presenters import ExecutionView, Presenter, default_presenters, presenter_for
from .security import SESSION_COOKIE, ConsoleSecurity, Session

HERE = Path(__file__).resolve().parent
#: What the console's signals record as their sender.
SENDER = "console"
#: Response headers of every page (``docs/console.md``, "Security").
SECURITY_HEADERS = {
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
    "cache-control": "no-store",
    "cross-origin-opener-policy": "same-origin",
}


class ConsoleStores:
    """The console's store connections over ``target`` (a SQLite path or a DSN): a
    read-only one for pages, opened at once (so a missing or foreign store is refused
    at start), and a read-write one for writes, opened on first use.

    Raises:
        StorageError, SchemaVersionError, ConfigurationError: as
        :func:`phronomy_fsm.store.open.open_store`.

    Concurrency: thread-safe.
    """

    def __init__(self, target: str, *, read_only: bool) -> None:
        self.target = target
        self.read_only = read_only
        self.reader = open_store(target, read_only=True)
        self._writer: Any = None
        self._lock = threading.Lock()

    @property
    def label(self) -> str:
        """The store as pages name it (a file path, or a DSN without its password)."""
        return str(self.reader.path)

    def writer(self) -> Any:
        """The read-write store. Raises StorageError in read-only mode."""
        if self.read_only:
            raise StorageError("this console is read-only; nothing was written")
        with self._lock:
            if self._writer is None:
                self._writer = open_store(self.target)
            return self._writer

    def close(self) -> None:
        """Close both connections."""
        for store in (self.reader, self._writer):
            if store is not None:
                store.close()


@attrs.frozen
class Console:
    """Everything the handlers share: the stores, the security settings, the
    presenters by machine, the templates, the diagram cache and the clock."""

    stores: ConsoleStores
    security: ConsoleSecurity
    presenters: Mapping[str, Presenter]
    templates: Environment
    diagrams: views.DiagramCache
    clock: Clock = SYSTEM_CLOCK


def create_app(
    stores: ConsoleStores,
    security: ConsoleSecurity,
    *,
    presenters: Mapping[str, Presenter] | None = None,
    clock: Clock = SYSTEM_CLOCK,
) -> Starlette:
    """The console's ASGI application over ``stores``.

    Args:
        stores: the store connections (:class:`ConsoleStores`); the application closes
            them on shutdown.
        security: token, session key and host rules
            (:class:`~phronomy_fsm.console.security.ConsoleSecurity`; no token: a
            read-only console).
        presenters: per-machine presenters (default
            :func:`~phronomy_fsm.console.presenters.default_presenters`); machines
            without one get the generic presenter.
        clock: decides whether owners' leases still run.

    Returns:
        A Starlette application (serve it with uvicorn, :mod:`.server`).
    """
    env = Environment(
        loader=FileSystemLoader(str(HERE / "templates")),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    console = Console(
        stores,
        security,
        default_presenters() if presenters is None else dict(presenters),
        env,
        views.DiagramCache(),
        clock,
    )

    def bind(handler: Callable[[Console, Request], Awaitable[Response]]) -> Any:
        async def endpoint(request: Request) -> Response:
            return await handler(console, request)

        return endpoint

    routes = [
        Route("/", bind(list_page), methods=["GET"]),
        Route("/live", bind(list_live), methods=["GET"]),
        Route("/execution", bind(execution_page), methods=["GET"]),
        Route("/execution/live", bind(execution_live), methods=["GET"]),
        Route("/execution/signal", bind(signal_action), methods=["POST"]),
        Route("/execution/resolve", bind(resolve_action), methods=["POST"]),
        Route("/execution/cancel", bind(cancel_action), methods=["POST"]),
        Route("/login", bind(login_page), methods=["GET"]),
        Route("/login", bind(login_action), methods=["POST"]),
        Route("/logout", bind(logout_action), methods=["POST"]),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            stores.close()

    app = Starlette(routes=routes, lifespan=lifespan)
    app.add_middleware(SecurityMiddleware, security=security)
    return app


# ------------------------------------------------------------------ middleware


class SecurityMiddleware:
    """Checks the Host header, loads (or issues) the session cookie into
    ``request.state.session``, refuses cross-origin POSTs, asks a remote console's
    visitors to sign in before any page, and adds :data:`SECURITY_HEADERS` to every
    response (:mod:`~phronomy_fsm.console.security`)."""

    def __init__(self, app: ASGIApp, *, security: ConsoleSecurity) -> None:
        self.app = app
        self.security = security

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        sec = self.security
        if not sec.is_allowed_host(request.headers.get("host")):
            await _plain(403, "this console answers only requests addressed to a loopback name")(
                scope, receive, send
            )
            return
        session = sec.decode_session(request.cookies.get(SESSION_COOKIE))
        issue = session is None
        if session is None:
            session = sec.new_session()
        scope.setdefault("state", {})["session"] = session
        path = scope["path"]
        if request.method == "POST" and not _same_origin(request):
            await _plain(403, "cross-origin form refused; nothing was written")(
                scope, receive, send
            )
            return
        if (
            sec.token_for_reads
            and not session.authenticated
            and path not in ("/login",)
            and not path.startswith("/static/")
        ):
            await RedirectResponse("/login", status_code=303)(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                names = {k.lower() for k, _ in headers}
                for name, value in SECURITY_HEADERS.items():
                    if name.encode() not in names:
                        headers.append((name.encode(), value.encode()))
                current = scope["state"].get("new_session")
                if issue or current is not None:
                    cookie = sec.encode_session(current or session)
                    headers.append((b"set-cookie", _cookie_header(cookie).encode()))
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, send_with_headers)


def _cookie_header(value: str) -> str:
    return f"{SESSION_COOKIE}={value}; Path=/; HttpOnly; SameSite=Strict"


def _same_origin(request: Request) -> bool:
    """False when the POST names another ``Origin`` than the page's own (no header:
    a non-browser client, allowed — the CSRF token still applies)."""
    origin = request.headers.get("origin")
    if origin is None:
        return True
    host = request.headers.get("host", "")
    return origin in (f"http://{host}", f"https://{host}")


def _plain(status: int, text: str) -> Response:
    return Response(text + "\n", status_code=status, media_type="text/plain; charset=utf-8")


# ------------------------------------------------------------------ rendering


def _session(request: Request) -> Session:
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
    session = _session(request)
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


#: Refusals that only a page out of date can cause: shown as a conflict (409).
_STALE_REASONS = frozenset({"stale_revision", "not_recovery_required"})


def _status_for(exc: BaseException) -> int:
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
        return error_page(console, request, _status_for(exc), str(exc))
    return render(
        console,
        request,
        "list.html",
        m=views.list_model(page, query),
        live_url="/live" + (("?" + request.url.query) if request.url.query else ""),
        live_value=views.list_fingerprint(page),
        canonical=views.list_href(query.params()),
    )


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
        return JSONResponse({"error": str(exc)}, status_code=_status_for(exc))
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
        return JSONResponse({"error": str(exc)}, status_code=_status_for(exc))
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
    try:
        out["sections"] = list(presenter.sections(pview))
        out["actions"] = list(presenter.actions(pview)) if record.is_active else []
        out["presenter_error"] = None
    except Exception as exc:  # noqa: BLE001 - the application's presenter: shown, never fatal
        out["sections"], out["actions"] = [], []
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
        return error_page(console, request, _status_for(exc), message)
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


# ------------------------------------------------------------------ actions


async def _write_form(console: Console, request: Request) -> tuple[dict[str, Any], Response | None]:
    """The submitted fields, or a refusal (403) when the console is read-only, the
    session has not signed in, or the CSRF token does not match."""
    form = await request.form()
    fields = {k: v for k, v in form.items() if isinstance(v, str)}
    session = _session(request)
    if console.security.read_only:
        return fields, error_page(
            console, request, 403, "this console is read-only (--read-only); nothing was written"
        )
    if not console.security.is_valid_csrf(session, fields.get("csrf")):
        return fields, error_page(
            console, request, 403, "the form's CSRF token does not match; nothing was written"
        )
    if not session.authenticated:
        return fields, error_page(
            console,
            request,
            403,
            "writes need the console's token: sign in first; nothing was written",
        )
    return fields, None


async def _refused(
    console: Console, request: Request, fields: Mapping[str, Any], kind: str, exc: BaseException
) -> Response:
    status = _status_for(exc)
    conflict = status == 409
    message = str(exc)
    if conflict:
        message = f"conflict: {message}. The page below shows the execution as it is now."
    execution_id = str(fields.get("execution_id", ""))
    if not execution_id:
        return error_page(console, request, status, message)
    return await show_execution(
        console,
        request,
        execution_id,
        error=message,
        conflict=conflict,
        status_code=status,
        failed={"kind": kind, **{k: v for k, v in fields.items() if k != "csrf"}},
    )


def _done(execution_id: str, seq: int) -> Response:
    return RedirectResponse(f"{views.execution_href(execution_id)}&sent={seq}", status_code=303)


async def signal_action(console: Console, request: Request) -> Response:
    """``POST /execution/signal``: :func:`phronomy_fsm.operator.signal_execution` with
    the page's revision (``expected_revision``)."""
    fields, refused = await _write_form(console, request)
    if refused is not None:
        return refused
    try:
        form = parse_signal_form(fields)
        receipt = await run_in_threadpool(
            lambda: operator.signal_execution(
                console.stores.writer(),
                form.execution_id,
                form.event,
                form.payload,
                expected_revision=form.expected_revision,
                signal_id=form.signal_id,
                sender=SENDER,
                clock=console.clock,
            )
        )
    except (FormError, SignalRefusedError, PhronomyError) as exc:
        return await _refused(console, request, fields, "signal", exc)
    return _done(form.execution_id, receipt.signal.seq)


async def resolve_action(console: Console, request: Request) -> Response:
    """``POST /execution/resolve``: :func:`phronomy_fsm.operator.resolve_execution`
    with the page's revision and subject."""
    fields, refused = await _write_form(console, request)
    if refused is not None:
        return refused
    try:
        form = parse_resolve_form(fields)
        receipt = await run_in_threadpool(
            lambda: operator.resolve_execution(
                console.stores.writer(),
                form.execution_id,
                expected_revision=form.expected_revision,
                outcome=form.outcome,
                result=form.result,
                error=form.error,
                subject=form.subject,
                signal_id=form.signal_id,
                sender=SENDER,
                clock=console.clock,
            )
        )
    except (FormError, ResolutionError, PhronomyError) as exc:
        return await _refused(console, request, fields, "resolve", exc)
    return _done(form.execution_id, receipt.signal.seq)


async def cancel_action(console: Console, request: Request) -> Response:
    """``POST /execution/cancel``: :func:`phronomy_fsm.operator.cancel_execution` with
    the page's revision."""
    fields, refused = await _write_form(console, request)
    if refused is not None:
        return refused
    try:
        form = parse_cancel_form(fields)
        receipt = await run_in_threadpool(
            lambda: operator.cancel_execution(
                console.stores.writer(),
                form.execution_id,
                reason=form.reason,
                expected_revision=form.expected_revision,
                signal_id=form.signal_id,
                sender=SENDER,
                clock=console.clock,
            )
        )
    except (FormError, PhronomyError) as exc:
        return await _refused(console, request, fields, "cancel", exc)
    return _done(form.execution_id, receipt.signal.seq)


# ------------------------------------------------------------------ signing in


def _next_path(value: object) -> str:
    """A local path to go to after signing in (``/`` unless ``value`` is one)."""
    text = value if isinstance(value, str) else ""
    if not text.startswith("/") or text.startswith("//") or "\\" in text:
        return "/"
    return text


async def login_page(console: Console, request: Request) -> Response:
    """``GET /login``: the sign-in form (the write token)."""
    return render(
        console,
        request,
        "login.html",
        next_path=_next_path(request.query_params.get("next")),
        error=None,
    )


async def login_action(console: Console, request: Request) -> Response:
    """``POST /login``: check the CSRF token and the write token; a new, signed-in
    session on success (403 and the form again otherwise)."""
    form = await request.form()
    fields = {k: v for k, v in form.items() if isinstance(v, str)}
    session = _session(request)
    next_path = _next_path(fields.get("next"))
    if not console.security.is_valid_csrf(session, fields.get("csrf")):
        return error_page(console, request, 403, "the form's CSRF token does not match")
    if console.security.token is None:
        return error_page(console, request, 403, "this console is read-only: there is no token")
    if not console.security.is_valid_token(fields.get("token", "")):
        return render(
            console,
            request,
            "login.html",
            403,
            next_path=next_path,
            error="that is not the console's token",
        )
    request.scope["state"]["new_session"] = console.security.new_session(authenticated=True)
    return RedirectResponse(next_path, status_code=303)


async def logout_action(console: Console, request: Request) -> Response:
    """``POST /logout``: a new, signed-out session (CSRF-checked)."""
    form = await request.form()
    if not console.security.is_valid_csrf(_session(request), form.get("csrf")):  # type: ignore[arg-type]
        return error_page(console, request, 403, "the form's CSRF token does not match")
    request.scope["state"]["new_session"] = console.security.new_session()
    return RedirectResponse("/", status_code=303)


__all__ = [
    "SECURITY_HEADERS",
    "SENDER",
    "Console",
    "ConsoleStores",
    "SecurityMiddleware",
    "create_app",
    "error_page",
    "gather_execution",
    "render",
    "show_execution",
]
