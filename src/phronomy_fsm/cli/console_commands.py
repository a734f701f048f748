"""``phronomy-fsm console``: the operator console in the browser (issue 16).

Parses the options, calls :func:`phronomy_fsm.console.prepare_console` (which refuses
an unsafe address and opens the store read-only) and serves it with uvicorn until
interrupted. Prints where it listens and the write token on stdout (one line each;
only a generated token is printed, a given one is named by its source); diagnostics go
to stderr. The token comes from ``--token-file``, ``$PHRONOMY_CONSOLE_TOKEN`` or
``--token`` — the last is visible to every user in the process list, so using it
prints a warning. Exit codes: 0 stopped by Ctrl-C/SIGTERM, 1 refused (an unsafe
address, a missing store, a token file others may read, the port taken, the
``console`` extra missing), 2 usage (``--token`` with ``--token-file``).
``docs/console.md`` describes the console and its security model.
"""

from __future__ import annotations

import sys

import click

from phronomy_fsm.cli._common import echo, fail
from phronomy_fsm.errors import PhronomyError


@click.command("console")
@click.option(
    "--db",
    "db",
    required=True,
    help="The store: a SQLite file or a postgresql:// DSN (it must exist).",
)
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on; a non-loopback one needs --allow-remote and a token.",
)
@click.option(
    "--port",
    type=click.IntRange(min=0, max=65535),
    default=8765,
    show_default=True,
    help="Port to listen on (0: any free port, printed at start).",
)
@click.option(
    "--read-only",
    is_flag=True,
    help="Show executions only: no forms, every write refused, no token needed on loopback.",
)
@click.option(
    "--token-file",
    "token_file",
    metavar="PATH",
    default=None,
    help="Read the token that signs a browser in to write from this file: one line (a "
    "trailing newline is dropped), at least 16 characters, readable by its owner only "
    "(chmod 600; anything looser is refused). Without --token-file or --token, the "
    "token comes from $PHRONOMY_CONSOLE_TOKEN, else a random one is printed at start.",
)
@click.option(
    "--token",
    default=None,
    metavar="TOKEN",
    help="The token itself. Avoid it: a command line is visible to every user of the "
    "machine in the process list (ps); use --token-file or $PHRONOMY_CONSOLE_TOKEN.",
)
@click.option(
    "--allow-remote",
    is_flag=True,
    help="Allow a non-loopback --host (with a token given; every page then asks for it).",
)
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    default="warning",
    show_default=True,
)
def console(
    db: str,
    host: str,
    port: int,
    read_only: bool,
    token_file: str | None,
    token: str | None,
    allow_remote: bool,
    log_level: str,
) -> None:
    """Serve the operator console: list executions of every machine, open one (its
    diagram, timeline, signals, journal), and signal, resolve or cancel it through the
    same checks as the CLI (docs/console.md). Loopback only unless --allow-remote.

    Writing needs the console's token: give it with --token-file PATH or
    $PHRONOMY_CONSOLE_TOKEN (--token works too, but every user sees it in the process
    list); a --token-file or --token given wins over the variable, and without any of
    them a random token is printed at start. A browser stays signed in until it signs
    out, 30 minutes without loading a page, 8 hours in all, or until the console
    stops."""
    if token and token_file is not None:
        raise click.UsageError("give the token one way, --token or --token-file, not both")
    try:
        from phronomy_fsm import console as web
    except ImportError as exc:
        fail(
            "the console needs its extra: pip install 'phronomy-fsm[console]' "
            f"(from a clone: pip install -e '.[console]'; {exc})"
        )
    try:
        prepared = web.prepare_console(
            db,
            host=host,
            read_only=read_only,
            token=token,
            token_file=token_file,
            allow_remote=allow_remote,
        )
    except (PhronomyError, OSError, ValueError) as exc:
        fail(str(exc))
    try:
        sock = web.bind_socket(host, port)
    except OSError as exc:
        prepared.stores.close()
        fail(f"cannot listen on {host}:{port}: {exc.strerror or exc}")
    bound_port = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    mode = "read-only" if read_only else "read-write"
    echo(
        f"phronomy-fsm console: http://{shown}:{bound_port}/ ({mode}; store {prepared.store_label})"
    )
    if prepared.token is not None and prepared.token_source == "generated":
        echo(f"token (generated; sign in with it to act): {prepared.token}")
    elif prepared.token is not None:
        echo(f"token: from {prepared.token_source}")
    if prepared.token_source == "--token":
        click.echo(
            "warning: --token is visible to every user of this machine in the process "
            "list; prefer --token-file PATH or $PHRONOMY_CONSOLE_TOKEN",
            err=True,
        )
    sys.stdout.flush()
    web.serve_console(prepared, sock, log_level=log_level)


def register(main: click.Group) -> None:
    """Add ``console`` to the CLI group."""
    main.add_command(console)
