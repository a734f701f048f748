"""The console's web application: :func:`create_app`, its routes and the security
middleware.

:func:`create_app` builds a Starlette application over one store. Its pages (``GET``,
:mod:`~phronomy_fsm.console.pages`) read through a **read-only** store connection, so
they never block or disturb the workers that run executions; its four actions
(``POST /execution/signal``, ``/execution/approve``, ``/execution/resolve``,
``/execution/cancel``, :mod:`~phronomy_fsm.console.actions`) write through a second,
read-write connection opened on the first write — never in ``--read-only`` mode.
``GET /execution/events`` streams an agent execution's events as Server-Sent Events
(:mod:`~phronomy_fsm.console.events`).

The security model (loopback by default, a token to write, CSRF-checked forms, a Host
check against DNS rebinding, strict response headers) is in
:mod:`~phronomy_fsm.console.security` and ``docs/console.md``; this module applies it
to every request (:class:`SecurityMiddleware`).

Concurrency: the store calls run on Starlette's worker threads (both stores are
thread-safe); nothing here holds state across requests but the diagram cache.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import attrs
from jinja2 import Environment, FileSystemLoader, StrictUndefined
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from phronomy_fsm.errors import StorageError
from phronomy_fsm.runtime.clock import SYSTEM_CLOCK, Clock
from phronomy_fsm.store.open import open_store

from . import actions, events, pages, views
from .actions import SENDER
from .presenters import Presenter, default_presenters
from .security import SESSION_COOKIE, ConsoleSecurity

HERE = Path(__file__).resolve().parent
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
#: The endpoints a page polls to follow the store (``console.js``), and the event
#: stream a client holds open (``/execution/events``): a request to them does not count as activity that keeps a signed-in session from going idle.
POLL_PATHS = frozenset({"/live", "/execution/live", "/execution/events"})


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
        Route("/", bind(pages.list_page), methods=["GET"]),
        Route("/live", bind(pages.list_live), methods=["GET"]),
        Route("/schedules", bind(pages.schedules_page), methods=["GET"]),
        Route("/execution", bind(pages.execution_page), methods=["GET"]),
        Route("/execution/live", bind(pages.execution_live), methods=["GET"]),
        Route("/execution/events", bind(events.execution_events), methods=["GET"]),
        Route("/execution/signal", bind(actions.signal_action), methods=["POST"]),
        Route("/execution/approve", bind(actions.approve_action), methods=["POST"]),
        Route("/execution/resolve", bind(actions.resolve_action), methods=["POST"]),
        Route("/execution/cancel", bind(actions.cancel_action), methods=["POST"]),
        Route("/login", bind(actions.login_page), methods=["GET"]),
        Route("/login", bind(actions.login_action), methods=["POST"]),
        Route("/logout", bind(actions.logout_action), methods=["POST"]),
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
    ``request.state.session`` — signed in only while the process's
    :class:`~phronomy_fsm.console.security.SessionRegistry` says so, and every request
    but :data:`POLL_PATHS` and static files counts as activity —, refuses cross-origin
    POSTs, asks a remote console's visitors to sign in before any page, and adds
    :data:`SECURITY_HEADERS` to every response (:mod:`~phronomy_fsm.console.security`).
    A handler that changes the session puts the new one in
    ``request.scope["state"]["new_session"]``; its cookie is sent with the response."""

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
        path = scope["path"]
        # a page polling for changes is not someone at work: it keeps no session alive
        is_activity = path not in POLL_PATHS and not path.startswith("/static/")
        session = sec.decode_session(request.cookies.get(SESSION_COOKIE), touch=is_activity)
        issue = session is None
        if session is None:
            session = sec.new_session()
        scope.setdefault("state", {})["session"] = session
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


__all__ = [
    "POLL_PATHS",
    "SECURITY_HEADERS",
    "SENDER",
    "Console",
    "ConsoleStores",
    "SecurityMiddleware",
    "create_app",
]
