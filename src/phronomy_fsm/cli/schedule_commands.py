"""``phronomy-fsm schedules list|add|pause|resume|remove --db DSN_OR_PATH``
(``docs/operations.md``, "Schedules").

A thin click layer over :mod:`phronomy_fsm.operator.schedules`, on a SQLite file or a
PostgreSQL database, from any process while workers run. Exit codes: 0 success; 1 bad
input (every bad field named, nothing written), no such schedule, or a store error;
2 usage (click).
"""

from __future__ import annotations

import click

from phronomy_fsm.cli._common import db_option, emit_json, fail, open_store, parse_json_option
from phronomy_fsm.errors import PhronomyError


@click.group("schedules")
def schedules_group() -> None:
    """Start executions on a cron schedule, once per slot across every worker: list, add, pause, resume, remove."""


def _line(record: object) -> str:
    from phronomy_fsm.durable.schedules import ScheduleRecord

    assert isinstance(record, ScheduleRecord)
    state = "paused" if record.paused else "active"
    window = (
        "newest missed slot only"
        if record.catchup_seconds is None
        else f"catch-up {record.catchup_seconds:g}s"
    )
    return (
        f"{record.name}  {state}  machine={record.machine}  cron={record.cron!r}"
        f"  tz={record.timezone}  overlap={record.overlap.value}  {window}"
        f"  next={record.next_slot_at.isoformat()}  started={record.started}"
        f"  skipped={record.skipped}  missed={record.missed}  duplicates={record.duplicates}"
    )


@schedules_group.command("list")
@db_option
@click.option("--json", "as_json", is_flag=True, help="Print the schedules as JSON.")
def list_command(db: str, as_json: bool) -> None:
    """List every schedule: its cron and zone, policy, next slot and counts."""
    from phronomy_fsm.operator.schedules import list_schedules, schedule_to_dict

    with open_store(db, read_only=True) as store:
        try:
            records = list_schedules(store)
        except PhronomyError as exc:
            fail(str(exc))
    if as_json:
        emit_json([schedule_to_dict(r) for r in records])
        return
    if not records:
        click.echo("no schedules")
    for record in records:
        click.echo(_line(record))


@schedules_group.command("add")
@db_option
@click.argument("name")
@click.option("--machine", required=True, help="The machine whose executions it starts.")
@click.option(
    "--cron",
    required=True,
    help="A cron expression (five fields, or six with seconds last: '* * * * * */5').",
)
@click.option("--timezone", "timezone", default="UTC", show_default=True, help="An IANA time zone.")
@click.option(
    "--overlap",
    type=click.Choice(["skip", "allow", "buffer_one"]),
    default="skip",
    show_default=True,
    help="What a slot does while the previous execution of the schedule is active.",
)
@click.option(
    "--catchup-seconds",
    type=float,
    default=None,
    help="After downtime, start missed slots at most this old [default: only the newest].",
)
@click.option("--context", "context", default=None, help="The executions' context (JSON object).")
@click.option("--paused", is_flag=True, help="Store it paused.")
def add_command(
    db: str,
    name: str,
    machine: str,
    cron: str,
    timezone: str,
    overlap: str,
    catchup_seconds: float | None,
    context: str | None,
    paused: bool,
) -> None:
    """Add schedule NAME: its first slot is the first after now."""
    from phronomy_fsm.operator.schedules import add_schedule

    data = parse_json_option(context, "--context")
    with open_store(db) as store:
        try:
            record = add_schedule(
                store,
                name,
                machine,
                cron,
                timezone=timezone,
                overlap=overlap,
                catchup_seconds=catchup_seconds,
                context=data,
                paused=paused,
            )
        except PhronomyError as exc:
            fail(str(exc))
    click.echo(f"added {_line(record)}")


def _verb(name: str, db: str, verb: str) -> None:
    from phronomy_fsm.operator import schedules

    action = {
        "pause": schedules.pause_schedule,
        "resume": schedules.resume_schedule,
        "remove": schedules.remove_schedule,
    }[verb]
    with open_store(db) as store:
        try:
            record = action(store, name)
        except PhronomyError as exc:
            fail(str(exc))
    past = {"pause": "paused", "resume": "resumed", "remove": "removed"}[verb]
    click.echo(f"{past} {_line(record)}")


@schedules_group.command("pause")
@db_option
@click.argument("name")
def pause_command(db: str, name: str) -> None:
    """Pause schedule NAME: it starts nothing until resumed."""
    _verb(name, db, "pause")


@schedules_group.command("resume")
@db_option
@click.argument("name")
def resume_command(db: str, name: str) -> None:
    """Resume schedule NAME from its first slot after now."""
    _verb(name, db, "resume")


@schedules_group.command("remove")
@db_option
@click.argument("name")
def remove_command(db: str, name: str) -> None:
    """Remove schedule NAME (the executions it started stay)."""
    _verb(name, db, "remove")


def register(main: click.Group) -> None:
    """Add ``schedules`` to the CLI group."""
    main.add_command(schedules_group)
