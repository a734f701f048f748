"""The ``phronomy-fsm`` command line: a thin click layer over the library.

Commands live in sibling modules by area (specs, executions, store, the demo, operator
actions, workers) and are registered on :data:`main`; each parses its options, calls
the library (:mod:`phronomy_fsm.operator` for everything an operator does) and formats
the result. This package is the only place that turns library errors into exit codes:
0 success, 1 invalid input or a failed check, 2 usage error (click's own), 3 an execution
needs an operator decision (:mod:`phronomy_fsm.cli._common`). Diagnostics go to stderr,
the library's warnings as ``warning: ...`` lines.
"""

from __future__ import annotations

import click

from phronomy_fsm import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="phronomy-fsm")
@click.pass_context
def main(ctx: click.Context) -> None:
    """Durable LLM-agent executions as explicit, generated finite-state machines."""
    from phronomy_fsm.cli._common import library_warnings_on_stderr

    ctx.with_resource(library_warnings_on_stderr())


def _register() -> None:
    from phronomy_fsm.cli import (
        check_commands,
        console_commands,
        demo_commands,
        execution_commands,
        operator_commands,
        spec_commands,
        store_commands,
        worker_commands,
    )

    spec_commands.register(main)
    execution_commands.register(main)
    store_commands.register(main)
    demo_commands.register(main)
    operator_commands.register(main)
    worker_commands.register(main)
    console_commands.register(main)
    check_commands.register(main)


_register()
