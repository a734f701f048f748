"""``phronomy-fsm executions list|show``, ``store compact`` and ``store migrate``
(``docs/store.md`` "Inspection CLI", ``docs/operations.md``).

A thin click layer: each command parses its options, calls
:func:`phronomy_fsm.operator.list_executions` /
:func:`~phronomy_fsm.operator.describe_execution`,
:meth:`SqliteBarrierStore.compact <phronomy_fsm.store.sqlite.SqliteBarrierStore.compact>`
or :func:`~phronomy_fsm.store.sqlite.migrate_store`, and formats the result.
Executions of every machine are listed and shown (an agent execution is an
``agent_session`` execution whose exclusive key is its agent id). Read commands open the
store read-only and never create a missing file. Exit codes: 0 success; 1 bad input or
failure (no such file, not a database, schema too new, execution not found, storage
error); 2 usage (click). Diagnostics go to stderr as one ``error: ...`` line, never a
traceback.
"""

from __future__ import annotations

import click

from phronomy_fsm import operator
from phronomy_fsm.cli._common import (
    db_option,
    echo,
    echo_table,
    emit_json,
    fail,
    format_time,
    open_store,
    require_store_file,
)
from phronomy_fsm.durable.records import ExecutionStatus
from phronomy_fsm.errors import NotFoundError, PhronomyError

#: Every status an execution may have.
STATUSES = sorted(s.value for s in ExecutionStatus)


@click.group("executions")
def executions() -> None:
    """Inspect executions of any machine in a store: status, state, revisions, barrier
    log, signals and journal."""


@executions.command("list")
@db_option
@click.option("--machine", default=None, help="Only executions of this machine.")
@click.option(
    "--status", type=click.Choice(STATUSES), default=None, help="Only executions with this status."
)
@click.option(
    "--exclusive-key",
    "exclusive_key",
    default=None,
    help="Only executions with this exclusive key.",
)
@click.option(
    "--agent",
    "agent_id",
    default=None,
    help="Only executions of this agent id (an agent execution's exclusive key is its agent id).",
)
@click.option("--limit", type=click.IntRange(min=1), default=None, help="At most this many rows.")
@click.option("--offset", type=click.IntRange(min=0), default=0, help="Skip this many rows first.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list instead of a table.")
def list_command(
    db: str,
    machine: str | None,
    status: str | None,
    exclusive_key: str | None,
    agent_id: str | None,
    limit: int | None,
    offset: int,
    as_json: bool,
) -> None:
    """List executions of every machine (oldest first): machine, status, state,
    revision, and whether one needs an operator. The table ends with the counts per
    status; --json prints the rows only (each with needs_operator)."""
    if agent_id is not None and exclusive_key not in (None, agent_id):
        raise click.UsageError("--agent and --exclusive-key name different keys")
    with open_store(db, read_only=True) as store:
        page = operator.list_executions(
            store,
            machine=machine,
            status=status,
            exclusive_key=agent_id or exclusive_key,
            limit=limit,
            offset=offset,
        )
    if as_json:
        emit_json([e.to_dict() for e in page.executions])
        return
    if not page.executions:
        echo("no executions" if page.total == 0 else f"no executions after offset {offset}")
        return
    echo_table(
        ("EXECUTION", "MACHINE", "STATUS", "STATE", "REV", "UPDATED", "KEY", "OPERATOR"),
        [
            (
                e.execution_id,
                e.machine,
                e.status,
                e.state,
                str(e.revision),
                format_time(e.updated_at),
                e.exclusive_key or "-",
                "needed" if e.needs_operator else "",
            )
            for e in page.executions
        ],
    )
    first = page.offset + 1
    shown = f"{first}-{page.offset + len(page.executions)} of {page.total}"
    counts = ", ".join(f"{k} {v}" for k, v in sorted(page.counts.items()))
    echo(f"{shown} execution(s); by status: {counts}")
    if page.has_more:
        echo(f"more: --offset {page.offset + len(page.executions)}")
    needed = [e for e in page.executions if e.needs_operator]
    if needed:
        echo(
            f"{len(needed)} need(s) an operator: phronomy-fsm executions show ID --db {db} "
            "prints what to answer"
        )


@executions.command("show")
@click.argument("execution_id")
@db_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def show_command(execution_id: str, db: str, as_json: bool) -> None:
    """Show one execution: status, state, revision, durable point, owner, pending
    effects, and while it waits for an operator the recovery subject, the allowed
    outcomes and the exact resolve commands; then its barrier log, signals (with how
    each was consumed) and journal entries. The JSON object has the keys
    execution_id, machine, status, state, revision, point, needs_operator,
    pending_effects, awaits, owner, recovery, execution (the stored record),
    barriers, signals and journal."""
    from phronomy_fsm.cli.durable_commands import echo_detail

    with open_store(db, read_only=True) as store:
        try:
            detail = operator.describe_execution(store, execution_id, db_path=db)
        except NotFoundError:
            fail(f"no execution {execution_id} in {db}")
    if as_json:
        emit_json(detail.to_dict())
    else:
        echo_detail(detail, db)


@click.group("store")
def store_group() -> None:
    """Maintain a store file."""


@store_group.command("compact")
@db_option
@click.option(
    "--older-than-days",
    "older_than_days",
    required=True,
    type=click.FloatRange(min=0),
    help="Remove finished executions whose last commit is older than this many days.",
)
@click.option(
    "--archive",
    "archive",
    type=click.Path(dir_okay=False),
    default=None,
    help="Copy what is removed (executions, barrier log, journal, signals) to this SQLite file first.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def compact_command(db: str, older_than_days: float, archive: str | None, as_json: bool) -> None:
    """Remove (or archive, then remove) finished executions whose last commit is older
    than --older-than-days, with their barrier log, journal entries and signals. Never
    removed: active executions, finished ones whose parent is active or that have an
    active child, and handoffs not started yet. Then the WAL is checkpointed
    (TRUNCATE). See docs/store.md "Compaction"."""
    with open_store(db, read_only=False) as store:
        report = store.compact(older_than_days=older_than_days, archive_path=archive)
    if as_json:
        emit_json(report.to_dict())
        return
    echo(
        f"removed {report.removed_executions} executions with {report.removed_barriers}"
        f" barrier rows, {report.removed_journal_entries} journal entries and"
        f" {report.removed_signals} signals"
        + (
            f"; archived {report.archived_executions} to {report.archive_path}"
            if report.archive_path
            else ""
        )
    )
    kept = [
        (report.kept_parent_active, "whose parent is active"),
        (report.kept_child_active, "with an active child"),
        (report.kept_pending_handoffs, "handed off to an execution not started yet"),
    ]
    for count, why in kept:
        if count:
            echo(f"kept {count} old finished execution(s) {why}")
    echo(
        "WAL truncated"
        if report.wal_checkpoint[0] == 0
        else "WAL not truncated (a reader holds an old snapshot; run compact again later)"
    )


@store_group.command("migrate")
@db_option
@click.option(
    "--busy-timeout-seconds",
    "busy_timeout",
    type=click.FloatRange(min=0),
    default=60.0,
    show_default=True,
    help="How long to wait for other processes' writes (a large migration holds the lock).",
)
def migrate_command(db: str, busy_timeout: float) -> None:
    """Bring an existing store to this version's schema (one transaction; nothing else
    is written) and print the schema version before and after. A store that is
    already current is left as it is. Read-only commands refuse an older store until
    this (or any command that writes) has run. Upgrading to version 5 converts the
    agent executions of earlier versions: see docs/store.md "Upgrading to version 5"."""
    from phronomy_fsm.store.sqlite import migrate_store

    require_store_file(db)
    try:
        result = migrate_store(db, busy_timeout_seconds=busy_timeout)
    except (PhronomyError, OSError, ValueError) as exc:
        fail(str(exc))
    if result.is_migrated:
        echo(f"schema version {result.before} -> {result.after}")
    else:
        echo(f"schema version {result.after} (already current)")


def register(main: click.Group) -> None:
    """Add the ``executions`` and ``store`` groups to the CLI's ``main`` group."""
    main.add_command(executions)
    main.add_command(store_group)
