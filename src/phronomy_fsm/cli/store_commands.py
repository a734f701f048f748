"""``phronomy-fsm executions list|show``, ``store compact`` and ``store migrate`` (issue 4
items 9-10; ``docs/store.md``).

A thin click layer over :class:`~phronomy_fsm.store.sqlite.SqliteBarrierStore`. Read
commands open the store read-only and never create a missing file. Everything they
print that comes from the store (ids, phases, roles) is escaped by
:func:`~phronomy_fsm.cli._common.one_line`: a store may hold ids written before ids
were validated, and they must not forge rows or reach the terminal raw. Exit codes: 0
success; 1 bad input or failure (no such file, not a database, schema too new,
execution not found, storage error); 2 usage (click). Diagnostics go to stderr as one
``error: ...`` line, never a traceback.
"""

from __future__ import annotations

import json
import os
from typing import Any

import click

from phronomy_fsm.cli._common import db_option, fail, one_line, open_store, require_store_file
from phronomy_fsm.errors import NotFoundError, PhronomyError
from phronomy_fsm.store.records import ExecutionRecord, ExecutionStatus, to_json


def _json_of(record: Any) -> Any:
    return json.loads(to_json(record))


def _summary(ex: ExecutionRecord) -> dict[str, Any]:
    return {
        "execution_id": ex.execution_id,
        "agent_id": ex.agent_id,
        "status": ex.status.value,
        "phase": ex.phase,
        "revision": ex.revision,
        "active": ex.is_active,
        "created_at": ex.created_at.isoformat(),
        "updated_at": ex.updated_at.isoformat(),
    }


def _emit_json(data: Any) -> None:
    """Print ``data`` as indented JSON; characters a terminal would act on are written
    as ``\\uXXXX`` escapes, so the text still parses to the same values."""
    click.echo(one_line(json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False), json=True))


@click.group("executions")
def executions() -> None:
    """Inspect executions in a store: their status, phase, revisions, barrier log and journal."""


@executions.command("list")
@db_option
@click.option(
    "--status",
    type=click.Choice([s.value for s in ExecutionStatus]),
    default=None,
    help="Only executions with this status.",
)
@click.option("--agent", "agent_id", default=None, help="Only executions of this agent id.")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="At most this many rows.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list instead of a table.")
def list_command(
    db: str, status: str | None, agent_id: str | None, limit: int | None, as_json: bool
) -> None:
    """List executions (oldest first) with their status, phase and revision."""
    with open_store(db, read_only=True) as store:
        rows = store.list_executions(agent_id=agent_id, status=status, limit=limit)
    if as_json:
        _emit_json([_summary(ex) for ex in rows])
        return
    if not rows:
        click.echo("no executions")
        return
    header = ("EXECUTION", "AGENT", "STATUS", "PHASE", "REV", "UPDATED")
    table = [header] + [
        tuple(
            one_line(cell)
            for cell in (
                ex.execution_id,
                ex.agent_id,
                ex.status.value,
                ex.phase,
                str(ex.revision),
                ex.updated_at.isoformat(),
            )
        )
        for ex in rows
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        click.echo("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())


@executions.command("show")
@click.argument("execution_id")
@db_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def show_command(execution_id: str, db: str, as_json: bool) -> None:
    """Show one execution: status, phase, revision, barrier history and journal records.

    The JSON object has the keys execution_id, agent_id, status, phase, revision,
    active, created_at, updated_at, barriers (list), journal (list) and execution
    (the full stored record).
    """
    with open_store(db, read_only=True) as store:
        try:
            ex = store.load_execution(execution_id)
        except NotFoundError:
            fail(f"no execution {execution_id} in {db}")
        barriers = store.barrier_history(execution_id)
        journal = store.execution_journal(execution_id)
    data = _summary(ex)
    data["barriers"] = [
        {
            "revision": b.revision,
            "barrier": b.barrier,
            "committed_at": b.committed_at.isoformat(),
            "status": b.status,
            "phase": b.phase,
            "digest": b.digest,
        }
        for b in barriers
    ]
    data["journal"] = [_json_of(r) for r in journal]
    data["execution"] = _json_of(ex)
    if as_json:
        _emit_json(data)
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
        click.echo(one_line(f"{key}: {data[key]}"))
    if ex.terminal_reason:
        click.echo(one_line(f"terminal_reason: {ex.terminal_reason}"))
    if ex.approval_request is not None:
        decided = ex.approval_request.approved
        state = "pending" if decided is None else ("approved" if decided else "rejected")
        click.echo(one_line(f"approval_request_id: {ex.approval_request.request_id} ({state})"))
    if ex.pending_llm_call_id:
        click.echo(one_line(f"pending_llm_call_id: {ex.pending_llm_call_id}"))
    click.echo(f"barriers ({len(barriers)}):")
    for b in data["barriers"]:
        click.echo(
            one_line(
                f"  r{b['revision']}  {b['barrier']}  {b['status']}/{b['phase']}  {b['committed_at']}"
            )
        )
    click.echo(f"journal ({len(journal)}):")
    for r in journal:
        role = f" {r.role}" if r.role else ""
        click.echo(one_line(f"  #{r.sequence}  {r.kind}{role}  {r.occurred_at.isoformat()}"))


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
    type=click.Path(readable=False),
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
        _emit_json(report.to_dict())
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
