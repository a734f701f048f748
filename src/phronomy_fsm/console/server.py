"""Serving the console: the checks before it listens, and uvicorn.

:func:`prepare_console` turns what ``phronomy-fsm console`` was given into a ready
application — it refuses an unsafe address (:func:`~.security.check_binding`), picks
the write token (:func:`~.security.choose_token`), opens the store read-only (a missing
or foreign store is refused here, before anything listens) — and :func:`serve_console`
runs it with uvicorn until interrupted. Tests call :func:`prepare_console` and serve
the application on a socket of their own (``docs/console.md``).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from typing import Any

import attrs
from starlette.applications import Starlette

from phronomy_fsm.runtime.clock import SYSTEM_CLOCK, Clock

from .app import ConsoleStores, create_app
from .presenters import Presenter
from .security import (
    LOOPBACK_NAMES,
    ConsoleSecurity,
    SessionRegistry,
    check_binding,
    choose_token,
    has_explicit_token,
    is_loopback_host,
)

#: The port the console listens on unless told otherwise.
DEFAULT_PORT = 8765


@attrs.frozen
class PreparedConsole:
    """A console ready to serve: the ASGI ``app``, its ``stores`` (closed when the
    app shuts down), its ``security`` settings, the ``token`` (``None`` when read-only
    on loopback) and where it came from (``token_source``: ``--token``,
    ``--token-file``, the environment variable's name, or ``generated``)."""

    app: Starlette
    stores: ConsoleStores
    security: ConsoleSecurity
    token: str | None
    token_source: str | None

    @property
    def store_label(self) -> str:
        """The store as the console names it (a path, or a DSN without password)."""
        return self.stores.label


def prepare_console(
    db: str,
    *,
    host: str = "127.0.0.1",
    read_only: bool = False,
    token: str | None = None,
    token_file: str | os.PathLike[str] | None = None,
    allow_remote: bool = False,
    presenters: Mapping[str, Presenter] | None = None,
    clock: Clock = SYSTEM_CLOCK,
    environ: dict[str, str] | None = None,
) -> PreparedConsole:
    """Check the settings and build the console over the store ``db``.

    Args:
        db: a SQLite file or a PostgreSQL DSN (``open_store``); it must exist.
        host: the address it will listen on.
        read_only: no writes at all (no token, no forms).
        token: the write token (else ``token_file``, else
            ``$PHRONOMY_CONSOLE_TOKEN``, else generated:
            :func:`~phronomy_fsm.console.security.choose_token`).
        token_file: a file holding the write token, private to its owner
            (:func:`~phronomy_fsm.console.security.read_token_file`).
        allow_remote: permit a non-loopback ``host`` (a token must be given too).
        presenters: per-machine presenters (``docs/console.md``, "Presenters").
        clock: decides whether owners' leases still run, and when signed-in
            sessions end (:class:`~phronomy_fsm.console.security.SessionRegistry`).
        environ: the environment to read the token from (default ``os.environ``).

    Raises:
        ConfigurationError: an unsafe address; a token that is too short; both
            ``token`` and ``token_file``; a token file that others may read, or that
            is missing, empty or holds more than one line.
        StorageError, SchemaVersionError: the store cannot be opened read-only.
    """
    explicit = has_explicit_token(token, token_file=token_file, environ=environ)
    check_binding(host, allow_remote=allow_remote, explicit_token=explicit, read_only=read_only)
    chosen: str | None = None
    source: str | None = None
    if not read_only or not is_loopback_host(host):
        chosen, source = choose_token(token, token_file=token_file, environ=environ)
    remote = not is_loopback_host(host)
    security = ConsoleSecurity(
        token=chosen,
        read_only=read_only,
        token_for_reads=remote,
        allowed_hosts=None if remote else LOOPBACK_NAMES,
        sessions=SessionRegistry(clock=clock),
    )
    stores = ConsoleStores(db, read_only=read_only)
    app = create_app(stores, security, presenters=presenters, clock=clock)
    return PreparedConsole(app, stores, security, chosen, source)


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host``:``port`` (``port`` 0: a free one), IPv4 or
    IPv6 by the address. Raises OSError (the port is taken, the address is not
    this machine's)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, kind, proto, _name, address = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def serve_console(
    prepared: PreparedConsole, sock: socket.socket, *, log_level: str = "warning"
) -> None:
    """Serve ``prepared.app`` on the listening ``sock`` with uvicorn until interrupted
    (Ctrl-C, SIGTERM); the stores close on shutdown.

    Concurrency: blocks the calling thread (uvicorn's event loop runs on it).
    """
    import uvicorn

    class _ConsoleServer(uvicorn.Server):
        """uvicorn's server, except that a stop asked by SIGINT or SIGTERM ends the
        command normally (exit 0) instead of being raised again after the shutdown."""

        def handle_exit(self, sig: int, frame: Any) -> None:
            super().handle_exit(sig, frame)
            captured = getattr(self, "_captured_signals", None)
            if isinstance(captured, list):
                captured.clear()

    config = uvicorn.Config(
        prepared.app,
        log_level=log_level,
        access_log=False,
        proxy_headers=False,
        server_header=False,
        lifespan="on",
    )
    _ConsoleServer(config).run(sockets=[sock])


__all__ = ["DEFAULT_PORT", "PreparedConsole", "bind_socket", "prepare_console", "serve_console"]
