"""The CLI's static command table (``phronomy_fsm.cli.COMMANDS``, issue 23 item 6) is
what the command modules register: the same names, each in the module the table names,
with the same one-line help at every width ``phronomy-fsm --help`` may cut it to. The
table lets ``--help`` list the commands without importing their modules; this test
imports them all, so the table cannot drift from them."""

from __future__ import annotations

import importlib
import pkgutil
import re

import click
import pytest
from click.testing import CliRunner

from phronomy_fsm import cli
from phronomy_fsm.cli import COMMANDS, main

#: Widths click cuts short help to (``--help`` at 80 columns gives 62, at 50 about 32).
LIMITS = (10, 32, 45, 62, 72, 200, 10_000)


def registered() -> dict[str, tuple[str, click.Command]]:
    """Every command every ``cli.*`` module registers: name -> (module, command)."""
    found: dict[str, tuple[str, click.Command]] = {}
    for info in pkgutil.iter_modules(cli.__path__):
        if info.name == "__main__":  # runs the CLI
            continue
        module = importlib.import_module(f"phronomy_fsm.cli.{info.name}")
        if not hasattr(module, "register"):
            continue
        group = click.Group()
        module.register(group)
        for name, command in group.commands.items():
            assert name not in found, f"{name} registered by {found[name][0]} and {info.name}"
            found[name] = (info.name, command)
    return found


def test_the_table_names_every_registered_command_and_its_module() -> None:
    real = registered()
    assert sorted(real) == sorted(COMMANDS)
    assert {name: module for name, (module, _c) in real.items()} == {
        name: module for name, (module, _h) in COMMANDS.items()
    }


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_the_table_holds_the_short_help_click_would_print(name: str) -> None:
    command = registered()[name][1]
    stub = click.Command(name, help=COMMANDS[name][1])
    assert not command.hidden
    for limit in LIMITS:
        assert stub.get_short_help_str(limit) == command.get_short_help_str(limit), limit


def test_top_level_help_is_what_an_eager_group_prints() -> None:
    # the same group with every command imported and added, as before the table
    eager = click.Group(
        "phronomy-fsm",
        commands={name: command for name, (_m, command) in registered().items()},
        help=main.help,
        params=main.params,
        context_settings=main.context_settings,
    )
    for width in (None, 50):
        lazy_out = CliRunner().invoke(
            main, ["--help"], prog_name="phronomy-fsm", terminal_width=width
        )
        eager_out = CliRunner().invoke(
            eager, ["--help"], prog_name="phronomy-fsm", terminal_width=width
        )
        assert lazy_out.exit_code == 0, lazy_out.output
        assert lazy_out.output == eager_out.output
        assert re.search(r"\n  executions +Inspect ", lazy_out.output)


def test_a_command_runs_through_the_lazy_group() -> None:
    result = CliRunner().invoke(main, ["executions", "list", "--help"])
    assert result.exit_code == 0, result.output
    assert "--waiting-for" in result.output
    unknown = CliRunner().invoke(main, ["executons"])
    assert unknown.exit_code == 2
    assert "No such command 'executons'" in unknown.output
