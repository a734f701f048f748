"""Exit codes and the one-line error exit shared by the command modules.

Exit codes (README "Command line"): 0 success, 1 invalid input or a failed check,
2 usage error (click's own), 3 an execution is parked in ``recovery_required`` and
needs an operator decision (``phronomy-fsm resolve``; reference §6).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import unicodedata
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any, NoReturn

import click

from phronomy_fsm.errors import PhronomyError

if TYPE_CHECKING:
    from phronomy_fsm.store.sqlite import SqliteBarrierStore

EXIT_FAILED = 1  #: invalid input, a refused operation or a failed check
EXIT_NEEDS_OPERATOR = 3  #: recovery parked an execution for an operator decision

#: ``--db PATH``: the store file every store and operator command needs.
db_option = click.option(
    "--db",
    "db",
    required=True,
    type=click.Path(dir_okay=False),
    help="Path of the SQLite store file.",
)
#: ``--app MODULE:FACTORY``: the application factory of ``recover``.
app_option = click.option(
    "--app",
    "app",
    required=True,
    help="Application factory MODULE:FACTORY: a durable application factory(db_path) -> "
    "DurableApp, or an agent factory(agent_id, db_path) -> Agent.load keyword arguments "
    "(see docs/operations.md).",
)
#: ``--takeover``: override an owner whose liveness cannot be checked (docs/operations.md).
takeover_option = click.option(
    "--takeover",
    is_flag=True,
    help="Take the agent(s) over from an owner whose liveness cannot be checked from here "
    "(a process on another host); only if you know that process is gone.",
)


def one_line(text: str) -> str:
    """Return ``text`` with control characters (newlines included) written as Python
    escapes, so one diagnostic is always one line of the terminal and a hostile id
    or reason never prints a raw control character."""
    return "".join(
        ch.encode("unicode_escape").decode("ascii")
        if unicodedata.category(ch) in ("Cc", "Cs")
        else ch
        for ch in text
    )


def fail(message: str, code: int = EXIT_FAILED) -> NoReturn:
    """Print ``error: <message>`` (control characters escaped) on stderr and exit
    with ``code``."""
    click.echo(f"error: {one_line(message)}", err=True)
    sys.exit(code)


class _StderrLogHandler(logging.Handler):
    """The library's warnings on stderr as ``warning: <message>``, one line each (the
    stream is looked up per record, so click's test runner captures it)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
        except (TypeError, ValueError):  # a malformed log call must not end the command
            self.handleError(record)
            return
        click.echo(f"{record.levelname.lower()}: {one_line(message)}", err=True)


@contextmanager
def library_warnings_on_stderr() -> Iterator[None]:
    """For the block, print the library's log records of level WARNING and above on
    stderr as ``warning: ...`` lines (control characters escaped)."""
    logger = logging.getLogger("phronomy_fsm")
    handler = _StderrLogHandler(logging.WARNING)
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)


def echo(text: str = "") -> None:
    """Print one line of text output on stdout, control characters escaped."""
    click.echo(one_line(text))


def emit_json(data: Any) -> None:
    """Print ``data`` as indented JSON with sorted keys (non-ASCII kept; control
    characters are escaped by JSON itself)."""
    click.echo(json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False))


def parse_json_option(text: str | None, option: str) -> Any:
    """The JSON value of a command-line option (``None`` when not given); exits 1 with
    one ``error:`` line when it is not JSON (nothing has been written yet)."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError as exc:
        fail(
            f"{option} must be JSON ({exc}); quote a plain string as '\"text\"'; nothing was written"
        )


def format_time(value: datetime | None) -> str:
    """A UTC time for tables: ``2026-01-31T12:00:00Z`` (``-`` for none)."""
    return "-" if value is None else value.strftime("%Y-%m-%dT%H:%M:%SZ")


def echo_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """Print a left-aligned table, every cell escaped (so widths count what is shown)."""
    table = [[one_line(cell) for cell in header]] + [
        [one_line(cell) for cell in row] for row in rows
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        click.echo("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())


def require_store_file(db: str) -> None:
    """Exit 1 with a clear line unless ``db`` exists (the CLI never creates a store
    by accident, except ``demo``)."""
    if not os.path.exists(db):
        fail(f"no store at {db} (the file does not exist)")


@contextmanager
def open_store(db: str, *, read_only: bool = False) -> Iterator[SqliteBarrierStore]:
    """Open ``db`` (which must exist) for the block and close it after; a library,
    OS or value error raised opening it or inside the block exits 1 with its message."""
    from phronomy_fsm.store.sqlite import SqliteBarrierStore

    require_store_file(db)
    try:
        store = SqliteBarrierStore(db, read_only=read_only)
    except (PhronomyError, OSError, ValueError) as exc:
        fail(str(exc))
    try:
        yield store
    except (PhronomyError, OSError, ValueError) as exc:
        fail(str(exc))
    finally:
        store.close()
