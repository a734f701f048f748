"""``phronomy-fsm demo``: the scripted support agent of :mod:`phronomy_fsm.demo`.

``demo`` runs an execution until it waits for the refund's approval and prints its
ids and the ``phronomy-fsm approve`` command to run; ``demo --resume`` recovers the
store in a new process (an approval recorded meanwhile is applied) and runs it on
until it rests. Whenever something waits for an operator it prints the exact
``phronomy-fsm resolve`` commands. The command only calls
:func:`phronomy_fsm.demo.start_demo` / :func:`~phronomy_fsm.demo.resume_demo` and
prints the :class:`~phronomy_fsm.demo.DemoReport`.

Exit codes: 0 the execution waits for approval or finished; 1 a store error, or the
execution was still moving at the deadline; 2 usage; 3 something waits for an
operator (answer it with one of the printed commands). Events and the report go to
stdout, diagnostics to stderr.
"""

from __future__ import annotations

import sys

import attrs
import click

from phronomy_fsm.cli._common import (
    EXIT_NEEDS_OPERATOR,
    echo,
    fail,
    format_time,
    require_store_file,
)
from phronomy_fsm.cli._faults import crash_at_option
from phronomy_fsm.cli._format import approval_lines, subject_lines
from phronomy_fsm.errors import PhronomyError
from phronomy_fsm.runtime.faults import FaultPlan


def _print_report(report: object, db: str) -> None:
    from phronomy_fsm.demo import DemoReport, ledger_path

    assert isinstance(report, DemoReport)
    detail = report.detail
    if detail is None:
        fail(f"no demo execution in {db}; run `phronomy-fsm demo --db {db}` first")
    record = detail.record
    agent = detail.agent
    if agent is not None and isinstance(agent.input, str):
        echo(f"user: {agent.input}")
    echo(f"execution_id: {record.execution_id}")
    if report.parked:
        echo(f"status: {record.status.value} in {record.state}; waits for an operator")
        for parked in report.parked:
            assert parked.recovery is not None
            echo(f"execution {parked.record.execution_id} ({parked.record.machine}):")
            for line in subject_lines(parked.recovery):
                echo(line)
        echo(
            f"the demo's refunds are recorded in {ledger_path(db)}: look for the idempotency "
            "key there to know whether the refund happened"
        )
        echo(f"then: phronomy-fsm demo --resume --db {db}")
        sys.exit(EXIT_NEEDS_OPERATOR)
    approval = None if agent is None else agent.approval
    if report.waits_for == "approval" and approval is not None:
        echo(f"approval_request_id: {approval.request_id}")
        for line in approval_lines(attrs.evolve(approval, commands=())):
            echo(line)
        echo(
            f"next: phronomy-fsm approve {record.execution_id} --request {approval.request_id} "
            f"--db {db} [--reject], then phronomy-fsm demo --resume --db {db}"
        )
        return
    if not record.is_finished:
        fail(
            f"execution {record.execution_id} is still {record.status.value} in {record.state} "
            f"after the wait; run phronomy-fsm demo --resume --db {db} to go on"
        )
    if agent is not None and agent.output is not None:
        echo(f"answer: {agent.output}")
    outcome = agent.outcome if agent is not None and agent.outcome else record.status.value
    echo(f"status: {outcome}")
    if agent is not None and agent.error is not None:
        echo(f"error: {agent.error}")
    echo("barriers:")
    for b in detail.barriers:
        echo(f"  r{b.revision}  {b.barrier}  {b.status}/{b.state}  {format_time(b.committed_at)}")


@click.command("demo")
@click.option(
    "--db",
    "db",
    default=None,
    type=click.Path(dir_okay=False),
    help="Store file (default ./.phronomy/demo.db; created when missing).",
)
@click.option(
    "--resume",
    is_flag=True,
    help="Recover the demo execution in this new process and run it on until it rests.",
)
@click.option(
    "--wait-seconds",
    default=60.0,
    show_default=True,
    type=click.FloatRange(min=0),
    help="How long to wait for the execution to rest.",
)
@crash_at_option
def demo(db: str | None, resume: bool, wait_seconds: float, faults: FaultPlan | None) -> None:
    """Run the scripted support agent until it waits for a refund's approval (then
    run the printed `phronomy-fsm approve` command), or with --resume continue it
    in a new process until it ends — or until something waits for an operator, when
    the exact `phronomy-fsm resolve` commands are printed (exit 3)."""
    from phronomy_fsm.demo import (
        DEFAULT_DB,
        DEMO_NEEDS_A_FILE,
        format_event,
        resume_demo,
        start_demo,
    )
    from phronomy_fsm.store.open import is_postgres_dsn

    db = db or DEFAULT_DB
    if is_postgres_dsn(db):
        fail(DEMO_NEEDS_A_FILE)
    if resume:
        require_store_file(db)  # never create a store to resume

    def on_event(event: object) -> None:
        line = format_event(event)  # type: ignore[arg-type]
        if line is not None:
            echo(line)

    try:
        if resume:
            report = resume_demo(db, wait_seconds=wait_seconds, on_event=on_event, faults=faults)
        else:
            report = start_demo(db, wait_seconds=wait_seconds, on_event=on_event, faults=faults)
            if report.resumed:
                echo("(resumed the execution an earlier run left)")
    except PhronomyError as exc:
        fail(str(exc))
    _print_report(report, db)


def register(main: click.Group) -> None:
    """Add ``demo`` to the CLI group."""
    main.add_command(demo)
