"""``phronomy-fsm migrate --check``: a CI gate for spec changes against a live store.

``phronomy-fsm migrate --check [SPEC ...] --db DSN_OR_PATH [--app MODULE:FACTORY]
[--json]`` runs :func:`phronomy_fsm.operator.spec_change.check_spec_change` with the
new machines — lowered from the SPEC files, or the machines ``--app`` runs (then also
their context types, and a machine the application dropped strands its executions) —
and prints, for every execution not finished, whether the new code continues it, and
why not (``docs/operations.md``, "Checking a spec change against the executions in
flight"). Exit status 0 when none is stranded, 1 when one is or the input is bad.
Read-only.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from phronomy_fsm.cli._common import db_option, echo, echo_table, fail, one_line, open_store
from phronomy_fsm.errors import PhronomyError


@click.command("migrate")
@click.argument("specs", nargs=-1, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@db_option
@click.option(
    "--check",
    "check",
    is_flag=True,
    help="Check, without writing anything, that the new specs continue every execution "
    "not finished (the only mode: executions move to a new spec when a worker of it "
    "recovers them).",
)
@click.option(
    "--app",
    "app",
    default=None,
    help="The new application MODULE:FACTORY, factory(db_path) -> DurableApp: its machines "
    "and context types are checked (a SPEC given too replaces its machine's table).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def migrate_command(
    specs: tuple[Path, ...], db: str, check: bool, app: str | None, as_json: bool
) -> None:
    """Check that new specs continue every execution in flight of --db; exit 1 if any is stranded.

    For each execution not finished: is its pinned spec the new one or covered by a
    migration, is its state (renamed) still there, is its wait still a wait with its
    timer and its inbox's events, is its announced effect still where it runs, does its
    context still load (with --app). Prints the stranded ones with the reasons.
    """
    if not check:
        raise click.UsageError(
            "pass --check: executions move to a new spec when a worker running it "
            "recovers them (docs/spec-format.md, Migrations); this command only checks "
            "that it can"
        )
    if not specs and app is None:
        raise click.UsageError("name the new SPEC files, or the new application with --app")
    from phronomy_fsm.operator.spec_change import check_spec_change

    tables: dict[str, Any] = {}
    context_types: dict[str, type] = {}
    if app is not None:
        from phronomy_fsm.durable.app import load_app

        try:
            durable_app = load_app(app, db)
        except PhronomyError as exc:
            fail(str(exc))
        for machine in durable_app.machines:
            tables[machine.name] = machine.table
            context_types[machine.name] = machine.context_type
    for path in specs:
        table = _table_of(path)
        tables[table.machine] = table
    with open_store(db, read_only=True) as store:
        report = check_spec_change(
            store, tables, context_types=context_types, whole_application=app is not None
        )
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2, sort_keys=True))
    else:
        _print(report)
    if not report.ok:
        raise SystemExit(1)


def _table_of(path: Path) -> Any:
    """The table the compiler lowers the spec at ``path`` to; exit 1 if it is invalid."""
    from phronomy_fsm.codegen.lower import lower
    from phronomy_fsm.spec.validate import check_spec_file

    result = check_spec_file(path)
    if not result.ok or result.spec is None:
        errors = [i for i in result.issues if i.severity == "error"][:5]
        fail(
            f"{path}: invalid spec; nothing checked",
            more_lines=[one_line(f"{i.code}: {i.message}") for i in errors],
        )
    return lower(result.spec)


def _print(report: Any) -> None:
    counts = report.counts()
    machines = ", ".join(f"{name} {spec}" for name, spec in sorted(report.machines.items()))
    echo(f"new machines: {machines or '(none)'}")
    echo(
        f"executions not finished: {len(report.executions)} — continues {counts['continues']}, "
        f"stranded {counts['stranded']}, not checked {counts['not_checked']}"
    )
    if report.stranded:
        echo()
        echo_table(
            ["execution", "machine", "status", "state", "pinned"],
            [[v.execution_id, v.machine, v.status, v.state, v.pinned] for v in report.stranded],
        )
        echo()
        for v in report.stranded:
            for reason in v.reasons:
                echo(one_line(f"{v.execution_id}: {reason}"))
        echo()
        echo("not safe to deploy: the new code would strand these executions")
    else:
        echo("safe to deploy: the new code continues every execution it was given")


def register(main: click.Group) -> None:
    """Add ``migrate`` to the ``phronomy-fsm`` group."""
    main.add_command(migrate_command)
