"""Exit codes and the one-line error exit shared by the command modules.

Exit codes (README "Command line"): 0 success, 1 invalid input or a failed check,
2 usage error (click's own), 3 an execution is parked in ``recovery_required`` and
needs an operator decision (``phronomy-fsm resolve``; reference §6).
"""

from __future__ import annotations

import sys
from typing import NoReturn

import click

EXIT_FAILED = 1  #: invalid input, a refused operation or a failed check
EXIT_NEEDS_OPERATOR = 3  #: recovery parked an execution for an operator decision


def fail(message: str, code: int = EXIT_FAILED) -> NoReturn:
    """Print ``error: <message>`` on stderr and exit with ``code``."""
    click.echo(f"error: {message}", err=True)
    sys.exit(code)
