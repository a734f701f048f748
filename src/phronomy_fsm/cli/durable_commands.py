"""Operator commands for executions of any machine run by the durable engine
(issue 12 item 8): ``phronomy-fsm signal`` and ``cancel``, and the engine halves of
``executions show``, ``resolve`` and ``recover``.

Each command parses, calls :mod:`phronomy_fsm.operator` and formats; nothing else.
Writes go to the execution's durable inbox: a live owner applies them at once; with
``--app MODULE:FACTORY`` (a durable application factory) the command also recovers
the store in this process until the execution rests. Text output escapes control
characters; ``--json`` prints one JSON object.

Exit codes: 0 success; 1 refused (nothing written), a failed load or an execution that
did not come to rest in time; 2 usage; 3 an execution waits for an operator
(``recovery_required``: answer it with ``phronomy-fsm resolve``).
"""

from __future__ import annotations

import sys
from typing import Any

import click

from phronomy_fsm import operator
from phronomy_fsm.cli._common import (
    EXIT_NEEDS_OPERATOR,
    db_option,
    echo,
    emit_json,
    fail,
    format_time,
    open_store,
    parse_json_option,
)
from phronomy_fsm.errors import PhronomyError

#: What the operator's signals record as their sender.
SENDER = "cli"

_apply_app_option = click.option(
    "--app",
    "app",
    default=None,
    help="A durable application factory MODULE:FACTORY (factory(db_path) -> DurableApp): "
    "also recover the store in this process until the execution rests.",
)
_wait_option = click.option(
    "--wait-seconds",
    default=60.0,
    show_default=True,
    type=click.FloatRange(min=0),
    help="With --app: how long to wait for the execution to come to rest.",
)
_json_option = click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")


# ------------------------------------------------------------------ formatting


def _subject_lines(request: operator.RecoveryRequest) -> list[str]:
    return [
        f"  reason: {request.reason}",
        f"  subject: {request.describe_subject()}",
        f"  allowed outcomes: {', '.join(request.allowed_outcomes)}",
        "  answer with one of:",
        *(f"    {command}" for command in request.commands),
    ]


def _owner_line(owner: operator.WorkerLease | None, db: str, finished: bool) -> str:
    if finished:
        return "owner: - (finished)"
    if owner is None:
        return (
            "owner: none (never claimed); nothing moves until "
            f"phronomy-fsm recover --db {db} --app MODULE:FACTORY"
        )
    where = "" if owner.host is None else f" (host {owner.host}, pid {owner.pid})"
    if owner.is_live:
        return f"owner: worker {owner.worker_id}{where}, lease until {format_time(owner.lease_expires_at)}"
    why = "its process is gone" if owner.process_gone else "its lease has ended"
    return (
        f"owner: none live (last worker {owner.worker_id}{where}: {why}); nothing moves until "
        f"phronomy-fsm recover --db {db} --app MODULE:FACTORY"
    )


def _signal_subject(signal: Any) -> str:
    """What a signal asks for: its event, a resolution's outcome, a cancel's reason."""
    if signal.event is not None:
        return str(signal.event)
    payload = signal.payload if isinstance(signal.payload, dict) else {}
    if signal.kind.value == "resolution":
        return str(payload.get("outcome", "?"))
    if signal.kind.value == "cancel":
        return repr(payload.get("reason", ""))
    return "-"


def echo_detail(detail: operator.ExecutionDetail, db: str) -> None:
    """Print an engine execution as ``executions show`` does."""
    r = detail.record
    echo(f"execution_id: {r.execution_id}")
    echo(f"machine: {r.machine} (spec version {r.spec_version}, sha256 {r.spec_sha256[:12]})")
    mark = "  <- waits for an operator" if detail.needs_operator else ""
    echo(f"status: {r.status.value}{mark}")
    echo(f"state: {r.state}")
    echo(f"revision: {r.revision}")
    resume = f", resumes with {r.resume_event}" if r.resume_event else ""
    echo(f"point: {r.point.value} (set at revision {r.point_revision}{resume})")
    echo(f"created_at: {format_time(r.created_at)}")
    echo(f"updated_at: {format_time(r.updated_at)}")
    if r.deadline_at is not None and r.is_active:
        echo(f"deadline_at: {format_time(r.deadline_at)} (the wait state's timer)")
    if r.expires_at is not None:
        echo(f"expires_at: {format_time(r.expires_at)} (the execution's own deadline)")
    for label, value in (
        ("exclusive_key", r.exclusive_key),
        ("parent_execution_id", r.parent_execution_id),
    ):
        if value is not None:
            echo(f"{label}: {value}")
    if r.labels:
        echo("labels: " + ", ".join(f"{k}={v}" for k, v in sorted(r.labels.items())))
    echo(_owner_line(detail.owner, db, r.is_finished))
    if detail.awaits:
        echo(
            f"awaits: {', '.join(detail.awaits)} (phronomy-fsm signal {r.execution_id} EVENT --db {db})"
        )
    echo(f"pending_effects: {', '.join(r.pending_effects) or '-'}")
    if r.error is not None:
        echo(f"error: {r.error.render()}")
    if detail.recovery is not None:
        echo("recovery:")
        for line in _subject_lines(detail.recovery):
            echo(line)
    echo(f"barriers ({len(detail.barriers)}):")
    for b in detail.barriers:
        echo(f"  r{b.revision}  {b.barrier}  {b.status}/{b.state}  {format_time(b.committed_at)}")
    echo(f"signals ({len(detail.signals)}):")
    for s in detail.signals:
        what = _signal_subject(s)
        done = (
            "pending" if s.consumed_revision is None else f"{s.outcome} at r{s.consumed_revision}"
        )
        expected = "" if s.expected_revision is None else f" expected r{s.expected_revision}"
        echo(f"  #{s.seq}  {s.kind.value} {what}{expected}  from {s.sender or '-'}  {done}")
    echo(f"journal ({len(detail.journal)}):")
    for j in detail.journal:
        echo(f"  r{j.revision}.{j.position}  {j.kind}")


def _status_line(entry: operator.RecoveredExecution) -> str:
    r = entry.record
    found = "" if entry.found_status is None else f" (found {entry.found_status})"
    line = f"{r.execution_id}  {r.machine}  {r.status.value} in {r.state}  r{r.revision}{found}"
    if entry.found_status is None and entry.owner is not None and entry.owner.is_live:
        line += f"  run by live worker {entry.owner.worker_id}"
    elif not entry.at_rest:
        line += "  still moving"
    if entry.awaits:
        line += f"  awaits {', '.join(entry.awaits)}"
        if r.deadline_at is not None:
            line += f" until {format_time(r.deadline_at)}"
    if r.error is not None and r.is_finished:
        line += f"  error: {r.error.render()}"
    return line


def echo_recovery(entries: tuple[operator.RecoveredExecution, ...]) -> None:
    """Print what recovered executions are doing, with the resolve commands of
    each that waits for an operator."""
    for entry in entries:
        echo(f"  {_status_line(entry)}")
        if entry.recovery is not None:
            for line in _subject_lines(entry.recovery):
                echo(f"  {line}")


def _exit_for(entries: tuple[operator.RecoveredExecution, ...], wait_seconds: float) -> None:
    moving = [e for e in entries if e.found_status is not None and not e.at_rest]
    if moving:
        ids = ", ".join(e.execution_id for e in moving)
        fail(
            f"{ids}: not at rest after {wait_seconds:g} s (still {moving[0].record.status.value}); "
            "the next recover resumes it from its last commit (or give more --wait-seconds)"
        )
    if any(e.needs_operator for e in entries):
        sys.exit(EXIT_NEEDS_OPERATOR)


def _echo_receipt(verb: str, receipt: operator.InboxReceipt, db: str, applied_here: bool) -> None:
    s = receipt.signal
    what = f" {s.event}" if s.event is not None else ""
    echo(f"{verb}{what}: signal #{s.seq} ({s.signal_id}) in the inbox of {s.execution_id}")
    if applied_here:
        echo("  recovered in this process (--app); now:")
    elif receipt.is_applied_by_live_owner:
        assert receipt.owner is not None
        echo(f"  applied by live worker {receipt.owner.worker_id}")
    else:
        echo(
            "  no process runs it now; applied when it is recovered: "
            f"phronomy-fsm recover --db {db} --app MODULE:FACTORY (or pass --app here)"
        )


def _load_app(app: str | None, db: str) -> Any:
    """The durable application of ``--app``, loaded before anything is written."""
    if app is None:
        return None
    from phronomy_fsm.durable.app import load_app

    try:
        return load_app(app, db)
    except PhronomyError as exc:
        fail(f"{exc}; nothing was written")


def _apply(
    store: Any, durable_app: Any, app: str | None, execution_id: str, db: str, wait_seconds: float
) -> operator.StoreRecoveryReport | None:
    if durable_app is None:
        return None
    return operator.recover_store(
        store,
        durable_app,
        wait_seconds=wait_seconds,
        wait_for=[execution_id],
        db_path=db,
        app_spec=app,
    )


def _finish(
    verb: str,
    receipt: operator.InboxReceipt,
    report: operator.StoreRecoveryReport | None,
    db: str,
    as_json: bool,
    wait_seconds: float,
) -> None:
    entry = None if report is None else report.get(receipt.signal.execution_id)
    if as_json:
        data = receipt.to_dict()
        data["execution"] = None if entry is None else entry.to_dict()
        emit_json(data)
    else:
        _echo_receipt(verb, receipt, db, applied_here=entry is not None)
        if entry is not None:
            echo_recovery((entry,))
    if entry is not None:
        _exit_for((entry,), wait_seconds)


# ------------------------------------------------------------------ commands


@click.command("signal")
@click.argument("execution_id")
@click.argument("event")
@db_option
@click.option("--payload", default=None, help="The event's payload, as JSON.")
@click.option(
    "--expected-revision",
    type=click.IntRange(min=0),
    default=None,
    help="Refuse unless the execution is at this revision (read it with executions show).",
)
@click.option("--signal-id", default=None, help="An id that makes a retried send a no-op.")
@_apply_app_option
@_wait_option
@_json_option
def signal_command(
    execution_id: str,
    event: str,
    db: str,
    payload: str | None,
    expected_revision: int | None,
    signal_id: str | None,
    app: str | None,
    wait_seconds: float,
    as_json: bool,
) -> None:
    """Send EVENT (a signal the machine declares) to a durable execution's inbox.

    Refused, writing nothing (exit 1): an unknown or finished execution, an event the
    machine does not declare or that only the engine posts (state_completed, offload
    and barrier outcomes), a payload that is not JSON, a stale --expected-revision,
    an agent execution (use approve)."""
    value = parse_json_option(payload, "--payload")
    durable_app = _load_app(app, db)
    with open_store(db) as store:
        receipt = operator.signal_execution(
            store,
            execution_id,
            event,
            value,
            expected_revision=expected_revision,
            signal_id=signal_id,
            sender=SENDER,
        )
        report = _apply(store, durable_app, app, execution_id, db, wait_seconds)
    _finish("signal", receipt, report, db, as_json, wait_seconds)


@click.command("cancel")
@click.argument("execution_id")
@db_option
@click.option(
    "--reason",
    default="cancelled by an operator",
    show_default=True,
    help="Recorded with the cancel.",
)
@click.option(
    "--expected-revision",
    type=click.IntRange(min=0),
    default=None,
    help="Refuse unless the execution is at this revision (read it with executions show).",
)
@click.option("--signal-id", default=None, help="An id that makes a retried cancel a no-op.")
@_apply_app_option
@_wait_option
@_json_option
def cancel_command(
    execution_id: str,
    db: str,
    reason: str,
    expected_revision: int | None,
    signal_id: str | None,
    app: str | None,
    wait_seconds: float,
    as_json: bool,
) -> None:
    """Cancel a durable execution: its owner stops it and, once nothing of it runs,
    it finishes cancelled (an effect already running completes; its result is
    dropped). Refused, writing nothing (exit 1): an unknown or finished execution, a
    stale --expected-revision, an agent execution."""
    durable_app = _load_app(app, db)
    with open_store(db) as store:
        receipt = operator.cancel_execution(
            store,
            execution_id,
            reason=reason,
            expected_revision=expected_revision,
            signal_id=signal_id,
            sender=SENDER,
        )
        report = _apply(store, durable_app, app, execution_id, db, wait_seconds)
    _finish("cancel", receipt, report, db, as_json, wait_seconds)


def resolve_engine(
    execution_id: str,
    db: str,
    *,
    app: str | None,
    expected_revision: int,
    subject: str | None,
    outcome: str,
    result: str | None,
    error: str | None,
    wait_seconds: float,
    as_json: bool,
) -> None:
    """``phronomy-fsm resolve`` for an engine execution: write the answer to its
    inbox (and with ``--app`` recover the store until it rests)."""
    value = parse_json_option(result, "--result")
    durable_app = _load_app(app, db)
    with open_store(db) as store:
        receipt = operator.resolve_execution(
            store,
            execution_id,
            expected_revision=expected_revision,
            outcome=outcome,
            result=value,
            error=error,
            subject=subject,
            sender=SENDER,
        )
        report = _apply(store, durable_app, app, execution_id, db, wait_seconds)
    _finish(f"resolution {outcome}", receipt, report, db, as_json, wait_seconds)


def recover_engine(db: str, app: str, wait_seconds: float, as_json: bool) -> None:
    """``phronomy-fsm recover`` with a durable application factory."""
    durable_app = _load_app(app, db)
    bar: Any = None

    def progress(done: int, total: int) -> None:
        nonlocal bar
        if not sys.stderr.isatty() or total == 0:
            return
        if bar is None:
            from tqdm import tqdm

            bar = tqdm(total=total, desc="at rest", unit="execution", file=sys.stderr, leave=False)
        bar.update(done - bar.n)

    try:
        with open_store(db) as store:
            report = operator.recover_store(
                store,
                durable_app,
                wait_seconds=wait_seconds,
                db_path=db,
                app_spec=app,
                on_progress=progress,
            )
    finally:
        if bar is not None:
            bar.close()
    if as_json:
        emit_json(report.to_dict())
    else:
        claimed = [e for e in report.executions if e.found_status is not None]
        echo(
            f"recovered {len(claimed)} execution(s) in {report.wait_seconds:.2f} s; "
            f"{len(report.needs_operator)} wait(s) for an operator"
        )
        echo_recovery(report.executions)
        for eid, machine in report.unknown_machine:
            echo(
                f"  {eid}  {machine}  not recovered: the application does not run machine {machine}"
            )
    _exit_for(report.executions, wait_seconds)


__all__ = [
    "cancel_command",
    "echo_detail",
    "echo_recovery",
    "recover_engine",
    "resolve_engine",
    "signal_command",
]
