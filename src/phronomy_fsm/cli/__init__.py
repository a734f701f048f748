"""The ``phronomy-fsm`` command line: a thin click layer over the library.

Commands live in sibling modules by area (specs, executions, store, the demo, operator
actions, workers), each with a ``register(group)`` that adds its commands; each parses
its options, calls the library (:mod:`phronomy_fsm.operator` for everything an
operator does) and formats the result. This package is the only place that turns
library errors into exit codes: 0 success, 1 invalid input or a failed check, 2 usage
error (click's own), 3 an execution needs an operator decision
(:mod:`phronomy_fsm.cli._common`). Diagnostics go to stderr, the library's warnings as
``warning: ...`` lines.

Start-up (``docs/performance.md``, "CLI start-up"): :data:`main` knows each command's
name, module and one-line help from :data:`COMMANDS` and imports a command's module
only when that command runs or prints its own help, so ``phronomy-fsm --help`` imports
no command module and ``executions list`` imports only the store and the operator's
reads. ``tests/unit/test_cli_startup.py`` checks the table against the commands and
which modules each of those imports.
"""

from __future__ import annotations

import importlib
from gettext import gettext as _

import click

from phronomy_fsm import __version__

#: command name -> (its module in this package, its one-line help as ``phronomy-fsm
#: --help`` shows it: the first sentence of its help). A test compares it with the
#: commands themselves; a new command is added here and in its module's ``register``.
COMMANDS: dict[str, tuple[str, str]] = {
    "approve": (
        "operator_commands",
        "Decide an agent execution's pending approval request, from any process.",
    ),
    "cancel": (
        "operator_commands",
        (
            "Cancel an execution (an agent's too): its owner stops it and, once nothing of it "
            "runs, it finishes cancelled (an effect already running completes; its result is "
            "dropped)."
        ),
    ),
    "check": (
        "check_commands",
        "Explore interleavings of SPEC's executions run by --app, and check invariants.",
    ),
    "console": (
        "console_commands",
        (
            "Serve the operator console: list executions of every machine, open one (its "
            "diagram, timeline, signals, journal), and signal, resolve or cancel it through "
            "the same checks as the CLI (docs/console.md)."
        ),
    ),
    "demo": (
        "demo_commands",
        (
            "Run the scripted support agent until it waits for a refund's approval (then run "
            "the printed `phronomy-fsm approve` command), or with --resume continue it in a "
            "new process until it ends — or until something waits for an operator, when the "
            "exact `phronomy-fsm resolve` commands are printed (exit 3)."
        ),
    ),
    "dev": (
        "dev_commands",
        "Development helpers: a PostgreSQL server of your own in one command (dev postgres start|stop|status).",
    ),
    "diagram": ("spec_commands", "Draw the state diagram of SPEC as DOT, SVG, PNG or Mermaid."),
    "executions": (
        "execution_commands",
        (
            "Inspect executions of any machine in a store: status, state, revisions, who they "
            "wait for, the agent's side (input, answer, approval request), barrier log, signals "
            "and journal."
        ),
    ),
    "generate": (
        "spec_commands",
        "Compile SPEC files into Python modules of transition tables (<out>/<machine>.py).",
    ),
    "migrate": (
        "migrate_commands",
        "Check that new specs continue every execution in flight of --db; exit 1 if any is stranded.",
    ),
    "recover": (
        "operator_commands",
        "Recover every active execution of a store that no live worker runs.",
    ),
    "resolve": (
        "operator_commands",
        (
            "Answer an execution that waits for an operator: say what happened to its subject "
            "(recover and executions show print the exact commands)."
        ),
    ),
    "schedules": (
        "schedule_commands",
        (
            "Start executions on a cron schedule, once per slot across every worker: list, "
            "add, pause, resume, remove."
        ),
    ),
    "signal": (
        "operator_commands",
        "Send EVENT (a signal the machine declares) to an execution's inbox.",
    ),
    "store": ("store_commands", "Maintain a store."),
    "validate": (
        "spec_commands",
        "Validate SPEC files: load each, check every rule, report every issue.",
    ),
    "worker": (
        "worker_commands",
        (
            "Run executions of an application's machines started by any process, sharing the "
            "store with other workers (docs/scale-out.md)."
        ),
    ),
}


def load_command(name: str) -> click.Command:
    """Import the module of command ``name`` (a key of :data:`COMMANDS`) and return the
    command its ``register`` adds. Raises KeyError for a name not in the table or not
    registered by its module, ImportError when the module cannot be imported."""
    module = importlib.import_module(f"{__name__}.{COMMANDS[name][0]}")
    group = click.Group()
    module.register(group)
    return group.commands[name]


class LazyGroup(click.Group):
    """A group whose commands of :data:`COMMANDS` are imported on first use: listing
    them and ``--help`` read the table only."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = self.commands.get(cmd_name)
        if command is None and cmd_name in COMMANDS:
            command = load_command(cmd_name)
            self.add_command(command)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The ``Commands`` section as click writes it, the short help of a command not
        loaded yet taken from :data:`COMMANDS` (cut to the width as click cuts it)."""
        rows: list[tuple[str, click.Command]] = []
        for name in self.list_commands(ctx):
            command = self.commands.get(name)
            if command is None:
                command = click.Command(name, help=COMMANDS[name][1])
            if not command.hidden:
                rows.append((name, command))
        if not rows:
            return
        limit = formatter.width - 6 - max(len(name) for name, _command in rows)
        with formatter.section(_("Commands")):
            formatter.write_dl([(name, c.get_short_help_str(limit)) for name, c in rows])


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="phronomy-fsm")
@click.pass_context
def main(ctx: click.Context) -> None:
    """Durable LLM-agent executions as explicit, generated finite-state machines."""
    from phronomy_fsm.cli._common import library_warnings_on_stderr

    ctx.with_resource(library_warnings_on_stderr())
