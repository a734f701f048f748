"""A development PostgreSQL server kept in a folder: ``phronomy-fsm dev postgres``.

Owns the life of one server per folder across processes — start it (``initdb`` the first
time), say whether it runs and on which port, stop it — on the distribution's binaries,
through :class:`~phronomy_fsm.store.postgres.server.LocalPostgres` (the same code the
tests use to start theirs). It listens on loopback only (``127.0.0.1``) and trusts every
local connection without a password: a server for one developer's machine, never for
production (``docs/scale-out.md``, "A development server").

The CLI's default folder is ``.phronomy/postgres`` beside the nearest ``pyproject.toml``
(a project's own), else ``$XDG_DATA_HOME/phronomy-fsm/postgres``
(:func:`phronomy_fsm.project.dev_postgres_folder`). The folder holds
``data/`` (the cluster), ``server.log``, ``sock/`` and ``port`` (the TCP port chosen at
the first start, kept so the DSN stays the same). On first start the database
:data:`DEV_DATABASE` is created; its DSN is what ``--db`` and an application factory
receive.

This module does not hold a connection open and never reads a store.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import attrs

from phronomy_fsm.store.postgres.server import (
    LocalPostgres,
    create_database,
    find_binaries,
    with_database,
)

#: The database created on first start; the DSN :func:`start_dev_postgres` returns names it.
DEV_DATABASE = "phronomy"

_PORT_FILE = "port"


@attrs.frozen
class DevPostgresStatus:
    """What :func:`dev_postgres_status` found in ``folder``.

    Attributes:
        folder: the server's folder (absolute).
        running: whether a server runs on its data folder (``pg_ctl status``).
        port: its TCP port on ``127.0.0.1``; ``None`` before the first start.
        dsn: ``postgresql://postgres@127.0.0.1:PORT/phronomy`` (the database to use),
            ``None`` before the first start.
    """

    folder: Path
    running: bool
    port: int | None
    dsn: str | None


def _dsn(port: int) -> str:
    return f"postgresql://postgres@127.0.0.1:{port}/{DEV_DATABASE}"


def _saved_port(folder: Path) -> int | None:
    try:
        text = (folder / _PORT_FILE).read_text("ascii").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def dev_postgres_status(folder: str | os.PathLike[str]) -> DevPostgresStatus:
    """Whether the development server of ``folder`` runs, and its DSN.

    Raises:
        PostgresUnavailable: no server binaries are installed.
    """
    folder = Path(folder).resolve()
    port = _saved_port(folder)
    running = False
    if (folder / "data").is_dir():
        argv = [str(find_binaries() / "pg_ctl"), "-D", str(folder / "data"), "status"]
        if os.geteuid() == 0:
            argv = ["runuser", "-u", "postgres", "--", *argv]
        proc = subprocess.run(argv, capture_output=True, timeout=30, check=False, cwd="/")
        running = proc.returncode == 0  # 3: not running, 4: no usable data folder
    return DevPostgresStatus(folder, running, port, _dsn(port) if port is not None else None)


def start_dev_postgres(
    folder: str | os.PathLike[str], *, port: int | None = None
) -> DevPostgresStatus:
    """Start the development server of ``folder`` (``initdb`` and the database
    :data:`DEV_DATABASE` the first time) and return its status once it accepts
    connections; a server already running is left as it is. ``port`` is used on the
    first start only (default: a free one); later starts reuse the saved port.

    **Durability:** ``fsync`` and ``synchronous_commit`` are on, as in production; the
    data folder survives :func:`stop_dev_postgres` and restarts.

    Raises:
        PostgresUnavailable: no server binaries are installed.
        RuntimeError: ``initdb`` or the start failed (the message carries the server
            log), or, as root, user ``postgres`` cannot reach ``folder`` (every folder
            above it must be searchable by others).
        ValueError: ``port`` differs from the port the folder's server was made with.
    """
    status = dev_postgres_status(folder)
    if status.running:
        return status
    saved = status.port
    if saved is not None and port is not None and port != saved:
        raise ValueError(
            f"{status.folder} holds a server made for port {saved}; start it without --port, "
            "or remove the folder to make a new one"
        )
    first = not (status.folder / "data").is_dir()
    server = LocalPostgres(directory=status.folder, port=saved or port)
    server.start()
    if first:
        (status.folder / _PORT_FILE).write_text(f"{server.port}\n", "ascii")
        create_database(server.dsn, DEV_DATABASE, drop=False)
    return DevPostgresStatus(
        status.folder, True, server.port, with_database(server.dsn, DEV_DATABASE)
    )


def stop_dev_postgres(folder: str | os.PathLike[str]) -> DevPostgresStatus:
    """Stop the development server of ``folder`` (``pg_ctl stop -m fast``: sessions are
    cut, a shutdown checkpoint is written); its data folder stays. A server not running
    is left as it is.

    Raises:
        PostgresUnavailable: no server binaries are installed.
        RuntimeError: ``pg_ctl stop`` failed (the message carries the server log).
    """
    status = dev_postgres_status(folder)
    if not status.running:
        return status
    server = LocalPostgres(directory=status.folder, port=status.port)
    server.shutdown("fast")
    return attrs.evolve(status, running=False)


__all__ = [
    "DEV_DATABASE",
    "DevPostgresStatus",
    "dev_postgres_status",
    "start_dev_postgres",
    "stop_dev_postgres",
]
