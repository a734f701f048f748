"""Exit codes and the one-line error exit shared by the command modules.

Exit codes (README "Command line"): 0 success, 1 invalid input or a failed check,
2 usage error (click's own), 3 an execution is parked in ``recovery_required`` and
needs an operator decision (``phronomy-fsm resolve``; reference §6).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, NoReturn

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
#: ``--app MODULE:FACTORY``: the application factory of ``recover`` and ``resolve``.
app_option = click.option(
    "--app",
    "app",
    required=True,
    help="Application factory MODULE:FACTORY: factory(agent_id, db_path) -> Agent.load "
    "keyword arguments (see docs/operations.md).",
)
#: ``--takeover``: override an owner whose liveness cannot be checked (docs/operations.md).
takeover_option = click.option(
    "--takeover",
    is_flag=True,
    help="Take the agent(s) over from an owner whose liveness cannot be checked from here "
    "(a process on another host); only if you know that process is gone.",
)


def fail(message: str, code: int = EXIT_FAILED) -> NoReturn:
    """Print ``error: <message>`` on stderr and exit with ``code``."""
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


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
