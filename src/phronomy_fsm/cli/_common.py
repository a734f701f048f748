"""Exit codes and the one-line error exit shared by the command modules.

Exit codes (``docs/operations.md``, "Exit codes"): 0 success, 1 invalid input or a
failed check, 2 usage error (click's own), 3 an execution is parked in
``recovery_required`` and needs an operator decision (``phronomy-fsm resolve``).
"""

from __future__ import annotations

import json
import logging
import os
import stat
import sys
import unicodedata
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any, NoReturn

import click

from phronomy_fsm.errors import PhronomyError

EXIT_FAILED = 1  #: invalid input, a refused operation or a failed check
EXIT_NEEDS_OPERATOR = 3  #: an execution waits in recovery_required for an operator

#: ``--db PATH``: the store file every store and operator command needs. Click checks
#: nothing about the file (a directory or an unreadable file would be its usage error,
#: exit 2): :func:`require_store_file` and the store refuse it with exit 1, as the docs
#: say for a failure.
db_option = click.option(
    "--db",
    "db",
    required=True,
    type=click.Path(readable=False),
    help="The store: a SQLite file path, or a PostgreSQL DSN (postgresql://...).",
)
#: ``--app MODULE:FACTORY``: the application factory of ``recover``.
app_option = click.option(
    "--app",
    "app",
    required=True,
    help="A durable application factory MODULE:FACTORY, factory(db_path) -> DurableApp "
    "(for agents one built with phronomy_fsm.agent.app.agent_app, such as "
    "phronomy_fsm.demo:create_app; see docs/operations.md).",
)


#: Unicode categories a terminal may act on: controls (newline, carriage return, ESC,
#: NUL, the C1 range), format characters (bidi overrides such as U+202E, zero-width
#: characters), surrogates, and the line and paragraph separators.
_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


def one_line(text: str, *, json: bool = False) -> str:
    """Return ``text`` with every character a terminal could act on written as an
    escape, so one diagnostic or one table cell is always one line of the terminal and
    nothing in it can move the cursor, recolour it or reverse the text: categories Cc, Cf, Cs, Zl and Zp — newline, CR, ESC, NUL, C1 controls, U+202E
    and other bidi and zero-width format characters, lone surrogates, U+2028/U+2029.

    Args:
        text: what is about to be printed (ids and messages from a store may hold
            anything an older version or another tool wrote).
        json: ``text`` is JSON produced by ``json.dumps(..., ensure_ascii=False)``:
            escapes are ``\\uXXXX`` (UTF-16, valid inside JSON strings, so the output
            still parses to the same values) and its structural newlines are kept —
            ``json.dumps`` escapes every newline inside a string itself.

    Returns:
        The text, unchanged when it has nothing to escape; otherwise Python escapes
        (``\\n``, ``\\x1b``, ``\\u202e``) or, with ``json``, JSON escapes. Backslashes
        are left as they are. The CLI's :func:`fail` applies it to every ``error:``
        line; docs/store.md "Inspection CLI" describes the output.
    """
    if text.isprintable():
        return text
    out = []
    for ch in text:
        if unicodedata.category(ch) not in _UNSAFE_CATEGORIES or (json and ch == "\n"):
            out.append(ch)
        elif json:
            units = ch.encode("utf-16-be", "surrogatepass")
            out.extend(f"\\u{units[i] << 8 | units[i + 1]:04x}" for i in range(0, len(units), 2))
        else:
            out.append(ch.encode("unicode_escape").decode("ascii"))
    return "".join(out)


def fail(message: str, code: int = EXIT_FAILED, *, more_lines: Sequence[str] = ()) -> NoReturn:
    """Print ``error: <message>`` on stderr (escaped by :func:`one_line`: ids from a
    store or the command line cannot forge lines or drive the terminal), then each of
    ``more_lines`` escaped on a line of its own, and exit with ``code``."""
    click.echo(f"error: {one_line(message)}", err=True)
    for line in more_lines:
        click.echo(one_line(line), err=True)
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


def log_with_timestamps(level: str) -> None:
    """For a long-running command (``worker``): every log record of ``level``
    (``debug``, ``info``, ``warning``, ``error``) and above goes to stderr once, with
    its time, level and logger, in place of the short ``warning: ...`` lines of
    :func:`library_warnings_on_stderr` (which would print each warning twice).
    Raises AttributeError for an unknown level (click's choice prevents it)."""
    logging.basicConfig(
        level=getattr(logging, level.upper()),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logger = logging.getLogger("phronomy_fsm")
    for handler in list(logger.handlers):
        if isinstance(handler, _StderrLogHandler):
            logger.removeHandler(handler)


def echo(text: str = "") -> None:
    """Print one line of text output on stdout, control characters escaped."""
    click.echo(one_line(text))


def emit_json(data: Any) -> None:
    """Print ``data`` as indented JSON with sorted keys; non-ASCII text is kept, and
    every character a terminal would act on (bidi overrides, line separators, C1
    controls — JSON itself only escapes C0 controls) is written as ``\\uXXXX`` by
    :func:`one_line`, so the output still parses to the same values."""
    click.echo(one_line(json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False), json=True))


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
    """Exit 1 with one ``error:`` line unless ``db`` is an existing, non-empty file:
     the CLI never creates or initialises a store by accident (except ``demo``), so a
     mistyped path or a zero-length file is not reported as a store with nothing in it
    . Checked before anything opens the file. A PostgreSQL DSN is checked when the
    store is opened (``must_exist``)."""
    from phronomy_fsm.store.open import is_postgres_dsn

    if is_postgres_dsn(db):
        return
    try:
        st = os.stat(db)
    except FileNotFoundError:
        fail(f"no store at {db} (the file does not exist); nothing was written")
    except OSError as exc:
        fail(f"cannot open the store {db}: {exc.strerror or exc}")
    if stat.S_ISDIR(st.st_mode):
        fail(f"{db} is a directory, not a store file")
    if stat.S_ISREG(st.st_mode) and st.st_size == 0:
        fail(
            f"{db} is empty (0 bytes), not a phronomy_fsm store; nothing was written "
            "(a new store is made by Agent.create or `phronomy-fsm demo`)"
        )


@contextmanager
def open_store(
    db: str, *, read_only: bool = False, sqlite_only: str | None = None
) -> Iterator[Any]:
    """Open ``db`` — a SQLite file, which must exist, or a PostgreSQL DSN
    (``postgresql://...``; ``docs/scale-out.md``) — for the block and close it after; a
    library, OS or value error raised opening it or inside the block exits 1 with its
    message. ``sqlite_only`` names a command that works on SQLite files only: a DSN is
    then refused (exit 1) before anything is opened."""
    from phronomy_fsm.store.open import is_postgres_dsn
    from phronomy_fsm.store.open import open_store as open_any
    from phronomy_fsm.store.sqlite import SqliteBarrierStore

    store: Any
    if is_postgres_dsn(db):
        if sqlite_only is not None:
            fail(f"{sqlite_only} works on SQLite store files only, not on a PostgreSQL database")
        try:
            store = open_any(db, read_only=read_only, must_exist=True)
        except (PhronomyError, OSError, ValueError) as exc:
            fail(str(exc))
    else:
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
