"""``phronomy-fsm dev postgres start|stop|status``: a development PostgreSQL server in
one command (``docs/scale-out.md``, "A development server").

A thin click layer over :mod:`phronomy_fsm.store.postgres.dev`. ``start`` prints the DSN
to pass as ``--db`` (and that an application factory receives) on stdout, alone on its
line, so ``DB=$(phronomy-fsm dev postgres start)`` works. Exit codes: 0 success (also
``stop`` of a server not running); 1 no server binaries, a failed start or stop, or
``status`` of a server not running; 2 usage (click).
"""

from __future__ import annotations

import os
from pathlib import Path

import click

from phronomy_fsm.cli._common import fail


@click.group("dev")
def dev_group() -> None:
    """Development helpers: a PostgreSQL server of your own in one command (dev postgres
    start|stop|status)."""


@dev_group.group("postgres")
def postgres_group() -> None:
    """A development PostgreSQL server on this machine's binaries (Debian:
    /usr/lib/postgresql/*/bin), listening on 127.0.0.1 only, password-less for local
    connections: for development, never production. Its folder is .phronomy/postgres
    beside the nearest pyproject.toml, else ~/.local/share/phronomy-fsm/postgres
    (--dir to choose)."""


_DIR = click.option(
    "--dir",
    "folder",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="The server's folder (default: .phronomy/postgres beside the nearest "
    "pyproject.toml, else ~/.local/share/phronomy-fsm/postgres).",
)


def _folder(folder: Path | None) -> Path:
    from phronomy_fsm.project import dev_postgres_folder

    if folder is not None:
        return folder
    return dev_postgres_folder(data_home=os.environ.get("XDG_DATA_HOME") or None)


@postgres_group.command("start")
@_DIR
@click.option(
    "--port",
    type=click.IntRange(1, 65535),
    default=None,
    help="TCP port on 127.0.0.1 at the first start (default: a free one; kept afterwards).",
)
def start_command(folder: Path | None, port: int | None) -> None:
    """Start the development server (initdb and the database 'phronomy' the first
    time) and print its DSN on stdout; a running server is left as it is."""
    try:
        from phronomy_fsm.store.postgres.dev import dev_postgres_status, start_dev_postgres
        from phronomy_fsm.store.postgres.server import PostgresUnavailable
    except ImportError as exc:
        fail(f"{exc}; install the extra: pip install 'phronomy-fsm[postgres]'")
    where = _folder(folder)
    try:
        before = dev_postgres_status(where)
        status = start_dev_postgres(where, port=port)
    except (PostgresUnavailable, RuntimeError, ValueError, OSError) as exc:
        fail(str(exc))
    click.echo(
        f"{'already running' if before.running else 'started'}: PostgreSQL in {status.folder} "
        "(127.0.0.1 only; stop it with: phronomy-fsm dev postgres stop)",
        err=True,
    )
    click.echo(status.dsn)


@postgres_group.command("stop")
@_DIR
def stop_command(folder: Path | None) -> None:
    """Stop the development server (fast shutdown); its data stays for the next start."""
    try:
        from phronomy_fsm.store.postgres.dev import stop_dev_postgres
        from phronomy_fsm.store.postgres.server import PostgresUnavailable
    except ImportError as exc:
        fail(f"{exc}; install the extra: pip install 'phronomy-fsm[postgres]'")
    from phronomy_fsm.store.postgres.dev import dev_postgres_status

    try:
        before = dev_postgres_status(_folder(folder))
        stop_dev_postgres(before.folder)
    except (PostgresUnavailable, RuntimeError, OSError) as exc:
        fail(str(exc))
    click.echo(
        f"stopped: PostgreSQL in {before.folder}"
        if before.running
        else f"not running (folder {before.folder})"
    )


@postgres_group.command("status")
@_DIR
def status_command(folder: Path | None) -> None:
    """Say whether the development server runs and print its DSN; exit 1 when it does
    not run."""
    try:
        from phronomy_fsm.store.postgres.dev import dev_postgres_status
        from phronomy_fsm.store.postgres.server import PostgresUnavailable
    except ImportError as exc:
        fail(f"{exc}; install the extra: pip install 'phronomy-fsm[postgres]'")
    try:
        status = dev_postgres_status(_folder(folder))
    except (PostgresUnavailable, OSError) as exc:
        fail(str(exc))
    if not status.running:
        fail(f"not running (folder {status.folder}); start it: phronomy-fsm dev postgres start")
    click.echo(f"running: PostgreSQL in {status.folder}", err=True)
    click.echo(status.dsn)


def register(group: click.Group) -> None:
    """Add the ``dev`` group to ``group``."""
    group.add_command(dev_group)
