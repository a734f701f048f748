"""``phronomy-fsm executions list|show``: look at the executions of a store
(``docs/operations.md``, "Looking: ``executions list`` and ``executions show``";
``docs/store.md``, "Inspection CLI").

A thin click layer over :func:`phronomy_fsm.operator.list_executions` and
:func:`~phronomy_fsm.operator.describe_execution`: executions of every machine, an
agent's executions and tool calls included. The store is opened read-only; a missing
file is never created. Exit codes: 0 success; 1 bad input or failure (no such file,
not a database, schema too new, execution not found, storage error); 2 usage.
Diagnostics go to stderr as one ``error: ...`` line, never a traceback.
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
)
from phronomy_fsm.cli._format import APP_HINT, echo_detail
from phronomy_fsm.durable.records import ExecutionStatus
from phronomy_fsm.errors import NotFoundError
from phronomy_fsm.store.open import redact_dsn

STATUSES = sorted(s.value for s in ExecutionStatus)

#: What the ``WAITS FOR`` column says, and what answers it.
_ANSWERED_BY = {
    operator.WAITS_FOR_OPERATOR: "resolve",
    operator.WAITS_FOR_APPROVAL: "approve",
    operator.WAITS_FOR_BUDGET: "extend-budget",
    operator.WAITS_FOR_SIGNAL: "signal",
}


@click.group("executions")
def executions() -> None:
    """Inspect executions of any machine in a store: status, state, revisions, who
    they wait for, the agent's side (input, answer, approval request), barrier log,
    signals and journal."""


@executions.command("list")
@db_option
@click.option("--machine", default=None, help="Only executions of this machine.")
@click.option(
    "--status", type=click.Choice(STATUSES), default=None, help="Only executions with this status."
)
@click.option(
    "--waiting-for",
    "waiting_for",
    type=click.Choice(sorted(operator.WAITING_FOR_STATUS)),
    default=None,
    help="Only executions waiting for an operator (recovery_required: answer with "
    "resolve) or for a person (an approval, or a signal of a wait state).",
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
    help=(
        "Only the agent executions of this agent id (an agent execution's exclusive key "
        "is its agent id); their tool calls are listed by 'executions show ID'."
    ),
)
@click.option("--limit", type=click.IntRange(min=1), default=None, help="At most this many rows.")
@click.option("--offset", type=click.IntRange(min=0), default=0, help="Skip this many rows first.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list instead of a table.")
def list_command(
    db: str,
    machine: str | None,
    status: str | None,
    waiting_for: str | None,
    exclusive_key: str | None,
    agent_id: str | None,
    limit: int | None,
    offset: int,
    as_json: bool,
) -> None:
    """List executions of every machine (oldest first): machine, status, state,
    revision, and who it waits for — an operator (recovery_required: resolve), a
    person's approval (an agent: approve), a signal, or a recover (running, but no
    live worker runs it). The table ends with the counts per status and what to run
    next; the hints count the waits no live worker holds (what is sent to those
    waits in the inbox for a recovery). --json prints the rows only (each with needs_operator,
    waits_for, has_live_owner and held_by_no_live_worker)."""
    if agent_id is not None and exclusive_key not in (None, agent_id):
        raise click.UsageError("--agent and --exclusive-key name different keys")
    if waiting_for is not None and status not in (None, operator.WAITING_FOR_STATUS[waiting_for]):
        raise click.UsageError(f"--status {status} contradicts --waiting-for {waiting_for}")
    with open_store(db, read_only=True) as store:
        page = operator.list_executions(
            store,
            machine=machine,
            status=status,
            exclusive_key=agent_id or exclusive_key,
            waiting_for=waiting_for,
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
        ("EXECUTION", "MACHINE", "STATUS", "STATE", "REV", "UPDATED", "KEY", "WAITS FOR"),
        [
            (
                e.execution_id,
                e.machine,
                e.status,
                e.state,
                str(e.revision),
                format_time(e.updated_at),
                e.exclusive_key or "-",
                e.waits_for or "",
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
    for kind, what in (
        (operator.WAITS_FOR_OPERATOR, "wait(s) for an operator"),
        (operator.WAITS_FOR_APPROVAL, "wait(s) for a person's approval"),
        (operator.WAITS_FOR_BUDGET, "wait(s) for a budget extension"),
        (operator.WAITS_FOR_SIGNAL, "wait(s) for a signal"),
    ):
        count = sum(1 for e in page.executions if e.waits_for == kind)
        unheld = sum(
            1 for e in page.executions if e.waits_for == kind and e.is_held_by_no_live_worker
        )
        if count:
            echo(
                f"{count} {what}: phronomy-fsm executions show ID --db {redact_dsn(db)} prints the "
                f"{_ANSWERED_BY[kind]} command(s)"
                + (
                    f"; {unheld} held by no live worker: what you send waits in the inbox until "
                    "phronomy-fsm recover --app MODULE:FACTORY (or a worker) claims it"
                    if unheld
                    else ""
                )
            )
    for e in page.executions:
        if e.waits_for == operator.WAITS_FOR_CHILD:
            echo(
                f"{e.execution_id} waits for its child {', '.join(e.parked_children)}, which "
                f"waits for an operator: phronomy-fsm executions show "
                f"{e.parked_children[0]} --db {redact_dsn(db)} prints the resolve command(s)"
            )
    stalled = sum(1 for e in page.executions if e.waits_for == operator.WAITS_FOR_RECOVER)
    if stalled:
        echo(
            f"{stalled} running with no live worker: phronomy-fsm recover --db {redact_dsn(db)} --app "
            "MODULE:FACTORY resumes them (and says which need an operator)"
        )
        echo(APP_HINT)


@executions.command("show")
@click.argument("execution_id")
@db_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def show_command(execution_id: str, db: str, as_json: bool) -> None:
    """Show one execution: status (and who it waits for), state, revision, durable
    point, owner, pending effects; for an agent execution its agent, input, final
    output or error, the pending approval request with its items and the approve
    commands, and its conversation; for an agent's tool call the tool, its arguments
    and result or error; while it waits for an operator the recovery subject (in the
    agent's terms for an agent), the allowed outcomes and the exact resolve commands;
    how each stay in a wait state ended (a signal, naming it, or the timer), the
    context as stored; then its barrier log, signals (with how each was consumed) and
    journal.

    The JSON object has the keys execution_id, machine, status, state, revision,
    point, needs_operator, waits_for, pending_effects, awaits, owner,
    held_by_no_live_worker, recovery (with result_shape), agent, context, wait_endings,
    execution (the stored record), barriers, signals and journal."""
    with open_store(db, read_only=True) as store:
        try:
            detail = operator.describe_execution(store, execution_id, db_path=db)
        except NotFoundError:
            fail(f"no execution {execution_id} in {redact_dsn(db)}")
    if as_json:
        emit_json(detail.to_dict())
    else:
        echo_detail(detail, db)


def register(main: click.Group) -> None:
    """Add the ``executions`` group."""
    main.add_command(executions)
