"""``phronomy-fsm executions list|show``, ``store compact`` and ``store migrate`` (issue 4
items 9-10, issue 12 item 8; ``docs/store.md``, ``docs/operations.md``).

A thin click layer over :mod:`phronomy_fsm.operator` and
:class:`~phronomy_fsm.store.sqlite.SqliteBarrierStore`: executions of every machine
(the durable engine's and the agent layer's) are listed and shown. Read commands open
the store read-only and never create a missing file. Exit codes: 0
success; 1 bad input or failure (no such file, not a database, schema too new,
execution not found, storage error); 2 usage (click). Diagnostics go to stderr as one
``error: ...`` line, never a traceback.
"""

from __future__ import annotations

import json
import os
from typing import Any

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
from phronomy_fsm.durable.records import ExecutionStatus as EngineStatus
from phronomy_fsm.errors import NotFoundError, PhronomyError
from phronomy_fsm.store.records import ExecutionStatus as AgentStatus
from phronomy_fsm.store.records import to_json

#: Every status an execution of any machine may have (engine and agent layer).
STATUSES = sorted({s.value for s in EngineStatus} | {s.value for s in AgentStatus})


def _json_of(record: Any) -> Any:
    return json.loads(to_json(record))


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
    """Show one execution.

    For an execution of the durable engine: status, state, revision, durable point,
    owner, pending effects, and while it waits for an operator the recovery subject,
    the allowed outcomes and the exact resolve commands; then its barrier log, signals
    (with how each was consumed) and journal entries. The JSON object has the keys
    execution_id, machine, status, state, revision, point, needs_operator,
    pending_effects, awaits, owner, recovery, execution (the stored record), barriers,
    signals and journal.

    For an agent execution: status, phase, revision, barrier history and journal
    records; the JSON object has the keys execution_id, agent_id, status, phase,
    revision, active, created_at, updated_at, barriers, journal and execution.
    """
    from phronomy_fsm.cli.durable_commands import echo_detail

    with open_store(db, read_only=True) as store:
        try:
            detail = operator.describe_execution(store, execution_id, db_path=db)
        except NotFoundError:
            fail(f"no execution {execution_id} in {db}")
    if isinstance(detail, operator.ExecutionDetail):
        if as_json:
            emit_json(detail.to_dict())
        else:
            echo_detail(detail, db)
        return
    _show_agent(detail, as_json)


def _show_agent(detail: operator.AgentExecutionDetail, as_json: bool) -> None:
    ex = detail.record
    data: dict[str, Any] = {
        "execution_id": ex.execution_id,
        "agent_id": ex.agent_id,
        "status": ex.status.value,
        "phase": ex.phase,
        "revision": ex.revision,
        "active": ex.is_active,
        "needs_operator": detail.needs_operator,
        "resolve_commands": list(detail.commands),
        "created_at": ex.created_at.isoformat(),
        "updated_at": ex.updated_at.isoformat(),
    }
    data["barriers"] = [
        {
            "revision": b.revision,
            "barrier": b.barrier,
            "committed_at": b.committed_at.isoformat(),
            "status": b.status,
            "phase": b.phase,
            "digest": b.digest,
        }
        for b in detail.barriers
    ]
    data["journal"] = [_json_of(r) for r in detail.journal]
    data["execution"] = _json_of(ex)
    if as_json:
        emit_json(data)
        return
    for key in (
        "execution_id",
        "agent_id",
        "status",
        "phase",
        "revision",
        "created_at",
        "updated_at",
    ):
        echo(f"{key}: {data[key]}")
    if detail.needs_operator:
        echo(f"needs an operator: {detail.reason}")
        echo("  answer with one of:")
        for command in detail.commands:
            echo(f"    {command}")
    if ex.terminal_reason:
        echo(f"terminal_reason: {ex.terminal_reason}")
    if ex.approval_request is not None:
        decided = ex.approval_request.approved
        state = "pending" if decided is None else ("approved" if decided else "rejected")
        echo(f"approval_request_id: {ex.approval_request.request_id} ({state})")
    if ex.pending_llm_call_id:
        echo(f"pending_llm_call_id: {ex.pending_llm_call_id}")
    echo(f"barriers ({len(detail.barriers)}):")
    for b in data["barriers"]:
        echo(f"  r{b['revision']}  {b['barrier']}  {b['status']}/{b['phase']}  {b['committed_at']}")
    echo(f"journal ({len(detail.journal)}):")
    for r in detail.journal:
        role = f" {r.role}" if r.role else ""
        echo(f"  #{r.sequence}  {r.kind}{role}  {r.occurred_at.isoformat()}")


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
    help="Remove terminal executions whose last commit is older than this many days.",
)
@click.option(
    "--archive",
    "archive",
    type=click.Path(dir_okay=False),
    default=None,
    help="Copy removed executions (with barriers and journal copies) to this SQLite file first.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def compact_command(db: str, older_than_days: float, archive: str | None, as_json: bool) -> None:
    """Remove (or archive) old terminal executions and their barrier rows; active
    executions and the agents' journals are kept; the WAL is checkpointed (TRUNCATE)."""
    with open_store(db, read_only=False) as store:
        report = store.compact(older_than_days=older_than_days, archive_path=archive)
    if as_json:
        emit_json(report.to_dict())
        return
    click.echo(
        f"removed {report.removed_executions} executions and {report.removed_barriers} barrier rows"
        + (
            f"; archived {report.archived_executions} to {report.archive_path}"
            if report.archive_path
            else ""
        )
        + f"; kept {report.kept_journal_records} journal records"
        + (
            f" and {report.kept_pending_handoffs} handed-off executions whose handoff is not started yet"
            if report.kept_pending_handoffs
            else ""
        )
        + (
            "; WAL truncated"
            if report.wal_checkpoint[0] == 0
            else "; WAL not truncated (a reader holds an old snapshot; run compact again later)"
        )
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
    this (or any command that writes) has run; see docs/store.md "Schema"."""
    import sqlite3

    from phronomy_fsm.store import schema
    from phronomy_fsm.store.sqlite import SqliteBarrierStore

    require_store_file(db)
    path = os.path.abspath(db)
    try:
        with open(path, "rb") as fh:
            header = fh.read(len(schema.SQLITE_HEADER))
        if header and header != schema.SQLITE_HEADER:
            fail(f"{path} is not a SQLite database (bad header); nothing was written")
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            before = schema.inspect_version(conn, path)
        finally:
            conn.close()
    except (sqlite3.Error, OSError) as exc:
        fail(f"cannot read {path}: {exc}; nothing was written")
    except PhronomyError as exc:
        fail(str(exc))
    if before is None:
        fail(f"{db} is an empty database, not a phronomy_fsm store; nothing was written")
    try:
        SqliteBarrierStore(db, busy_timeout_seconds=busy_timeout, wal_prewarm_frames=0).close()
    except (PhronomyError, OSError, ValueError) as exc:
        fail(str(exc))
    after = schema.SCHEMA_VERSION
    if before == after:
        click.echo(f"schema version {after} (already current)")
    else:
        click.echo(f"schema version {before} -> {after}")


def register(main: click.Group) -> None:
    """Add the ``executions`` and ``store`` groups to the CLI's ``main`` group."""
    main.add_command(executions)
    main.add_command(store_group)
