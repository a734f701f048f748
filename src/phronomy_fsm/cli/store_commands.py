"""``phronomy-fsm store compact``, ``store migrate`` and ``store check`` (``docs/store.md``,
``docs/operations.md``).

A thin click layer over :class:`~phronomy_fsm.store.sqlite.SqliteBarrierStore`'s
``compact`` and :func:`phronomy_fsm.operator.migrate_store`. Exit codes: 0 success; 1
bad input or failure (no such file, not a database, schema too new, storage error); 2
usage (click). Diagnostics go to stderr as one ``error: ...`` line, never a traceback.
The ``executions`` commands are in :mod:`phronomy_fsm.cli.execution_commands`.
"""

from __future__ import annotations

import shlex

import click

from phronomy_fsm import operator
from phronomy_fsm.cli._common import db_option, emit_json, fail, open_store, require_store_file
from phronomy_fsm.errors import PhronomyError


@click.group("store")
def store_group() -> None:
    """Maintain a store."""


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
@click.option(
    "--keep",
    "keep",
    multiple=True,
    metavar="MACHINE=DAYS",
    help="Keep the finished executions of MACHINE (with their journal) this many days "
    "instead; repeatable.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def compact_command(
    db: str, older_than_days: float, archive: str | None, keep: tuple[str, ...], as_json: bool
) -> None:
    """Remove (or archive, then remove) finished executions whose last commit is older
    than --older-than-days (or their machine's --keep), with their barrier log, journal
    entries and signals, on SQLite or PostgreSQL. Never removed: active executions,
    finished ones whose parent is active or that have an active child, and handoffs not
    started yet. On SQLite the WAL is then checkpointed (TRUNCATE). See docs/store.md
    "Compaction"."""
    keep_days = parse_keep(keep)
    with open_store(db, read_only=False) as store:
        report = store.compact(
            older_than_days=older_than_days, archive_path=archive, keep_days=keep_days
        )
    if as_json:
        emit_json(report.to_dict())
        return
    click.echo(
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
            click.echo(f"kept {count} old finished execution(s) {why}")
    if report.wal_checkpoint is not None:
        click.echo(
            "WAL truncated"
            if report.wal_checkpoint[0] == 0
            else "WAL not truncated (a reader holds an old snapshot; run compact again later)"
        )


def parse_keep(values: tuple[str, ...]) -> dict[str, float]:
    """``--keep MACHINE=DAYS`` options as a dict; a malformed one is a usage error
    (exit 2) that names it."""
    out: dict[str, float] = {}
    for value in values:
        machine, sep, days = value.partition("=")
        try:
            number = float(days)
        except ValueError:
            number = -1.0
        if not sep or not machine.strip() or not number >= 0:
            raise click.BadParameter(
                f"{value!r}: expected MACHINE=DAYS with DAYS a number >= 0 (e.g. "
                "agent_session=365)",
                param_hint="--keep",
            )
        out[machine.strip()] = number
    return out


@store_group.command("settings")
@db_option
@click.option(
    "--keep-commit-bodies",
    "keep",
    type=click.Choice(["on", "off"]),
    default=None,
    help="Keep the record each commit writes (for forks from past commits), or only its "
    "digest; applies to commits made from now on, by every process.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the settings as JSON.")
def settings_command(db: str, keep: str | None, as_json: bool) -> None:
    """Show or change the store's retention settings (docs/store.md "Kept commits")."""
    with open_store(db, read_only=keep is None) as store:
        if keep is not None:
            store.set_keep_commit_bodies(keep == "on")
        kept = store.keeps_commit_bodies()
    if as_json:
        emit_json({"keep_commit_bodies": kept})
    else:
        click.echo(f"keep_commit_bodies: {'on' if kept else 'off'}")


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
    require_store_file(db)
    try:
        report = operator.migrate_store(db, busy_timeout_seconds=busy_timeout)
    except PhronomyError as exc:
        fail(str(exc))
    if report.migrated:
        click.echo(f"schema version {report.before} -> {report.after}")
    else:
        click.echo(f"schema version {report.after} (already current)")


@store_group.command("check")
@db_option
@click.option(
    "--accept-rollback",
    "accept_rollback",
    is_flag=True,
    help="The store went backwards and you have reconciled what the lost commits started: "
    "accept what it holds now, so it opens for writing again.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def check_command(db: str, accept_rollback: bool, as_json: bool) -> None:
    """Check a SQLite store without writing to it: schema version, integrity
    (quick_check), the WAL beside it, and whether it went backwards — holds fewer
    commits than writers were told were committed, as after a -wal deleted by hand.
    Exit 1 when it is not sound or went backwards (then it is refused for writing until
    --accept-rollback). See docs/operations.md "A store that went backwards"."""
    from phronomy_fsm.store.sqlite import check_store

    require_store_file(db)
    try:
        report = check_store(db, accept_rollback=accept_rollback)
    except PhronomyError as exc:
        fail(str(exc))
    if as_json:
        emit_json(
            {
                "path": report.path,
                "schema_version": report.schema_version,
                "integrity": report.integrity,
                "wal_bytes": report.wal_bytes,
                "mark": report.mark,
                "found": report.found,
                "went_backwards": report.went_backwards,
                "accepted": report.accepted,
                "ok": report.is_ok,
            }
        )
    else:
        click.echo(f"store: {report.path}")
        click.echo(f"schema version: {report.schema_version}")
        click.echo(f"integrity: {report.integrity}")
        click.echo(f"wal: {report.wal_bytes} bytes")
        if report.found is None:
            click.echo(
                "commits: not compared: the schema is older than this phronomy_fsm's; "
                f"run: phronomy-fsm store migrate --db {shlex.quote(db)}"
            )
            click.echo("ok" if report.is_ok else "not ok")
            if not report.is_ok:
                raise SystemExit(1)
            return
        found = f"barrier {report.found[0]}, signal {report.found[1]}"
        if report.mark is None:
            click.echo(f"commits: {found} (no commit mark recorded yet)")
        else:
            acked = f"barrier {report.mark[0]}, signal {report.mark[1]}"
            click.echo(f"commits: {found}; acknowledged up to {acked}")
        if report.accepted:
            click.echo("rollback accepted: the commit mark now matches the database")
        elif report.went_backwards:
            click.echo(
                "went backwards: commits acknowledged from this store are missing (a -wal "
                "deleted after a crash, or an older copy restored); it is refused for "
                "writing. Reconcile the effects those commits started (docs/operations.md "
                f'"A store that went backwards"), then: phronomy-fsm store check --db '
                f"{shlex.quote(db)} --accept-rollback"
            )
        click.echo("ok" if report.is_ok else "not ok")
    if not report.is_ok:
        raise SystemExit(1)


def register(main: click.Group) -> None:
    """Add the ``store`` group to the CLI's ``main`` group."""
    main.add_command(store_group)


@store_group.command("limits")
@db_option
@click.option("--json", "as_json", is_flag=True, help="Print the slots and pauses as JSON.")
def limits_command(db: str, as_json: bool) -> None:
    """List the state of the effects' limits in a store (SQLite or PostgreSQL): every
    slot held — limit, key, execution, effect key, worker, since when — and every pause
    an outside service asked for that has not ended. Writes nothing. See
    docs/operations.md "Rate limits and concurrency"."""
    with open_store(db, read_only=True) as store:
        holds, pauses = store.limit_holds()
    if as_json:
        emit_json(
            {
                "slots": [
                    {
                        "limit": h.limit,
                        "key": h.key,
                        "execution_id": h.execution_id,
                        "effect_key": h.effect_key,
                        "worker_id": h.worker_id,
                        "acquired_at": h.acquired_at.isoformat(),
                    }
                    for h in holds
                ],
                "pauses": [
                    {
                        "limit": p.limit,
                        "key": p.key,
                        "paused_until": p.paused_until.isoformat(),
                        "reason": p.reason,
                    }
                    for p in pauses
                ],
            }
        )
        return
    click.echo(f"{len(holds)} slot(s) held, {len(pauses)} pause(s)")
    for h in holds:
        click.echo(
            f"slot  {h.limit}[{h.key}]  {h.execution_id}  {h.effect_key}  worker {h.worker_id}"
            f"  since {h.acquired_at.isoformat()}"
        )
    for p in pauses:
        click.echo(f"pause {p.limit}[{p.key}]  until {p.paused_until.isoformat()}  ({p.reason})")
