"""Operator commands: ``phronomy-fsm recover``, ``resolve``, ``approve``,
``extend-budget``, ``signal`` and ``cancel`` (``docs/operations.md``, "Operating durable executions").

They work on executions of any machine in a store — an agent's executions and tool
calls included. Each command parses, calls :mod:`phronomy_fsm.operator` and formats
(:mod:`phronomy_fsm.cli._format`); nothing else. Writes go to the execution's durable
inbox: a live owner applies them at once; with ``--app MODULE:FACTORY`` (a durable
application factory ``factory(db_path) -> DurableApp``; for agents one built with
:func:`phronomy_fsm.agent.app.agent_app`, such as ``phronomy_fsm.demo:create_app``)
the command also recovers the store in this process until the execution rests. Text
output escapes control characters; ``--json`` prints one JSON object; a progress bar
is drawn on stderr only when stderr is a terminal.

Exit codes: 0 done (with ``--app``, or for ``recover``: everything rests and nothing
waits for an operator); 1 refused (nothing written), an application that cannot be
loaded, a storage error, or an execution still moving when ``--wait-seconds`` ran out;
2 usage; 3 an execution waits for an operator (answer it with ``phronomy-fsm
resolve``).
"""

from __future__ import annotations

import sys
from typing import Any

import click

from phronomy_fsm import operator
from phronomy_fsm.cli._common import (
    EXIT_NEEDS_OPERATOR,
    app_option,
    db_option,
    echo,
    emit_json,
    fail,
    open_store,
    parse_json_option,
    require_store_file,
)
from phronomy_fsm.cli._format import echo_receipt, echo_recovery
from phronomy_fsm.errors import NotFoundError, PhronomyError

#: What the operator's signals record as their sender.
SENDER = "cli"

_apply_app_option = click.option(
    "--app",
    "app",
    default=None,
    help="A durable application factory MODULE:FACTORY (factory(db_path) -> DurableApp; "
    "for agents one built with phronomy_fsm.agent.app.agent_app): also recover the store "
    "in this process until the execution rests.",
)
_wait_option = click.option(
    "--wait-seconds",
    default=60.0,
    show_default=True,
    type=click.FloatRange(min=0),
    help="With --app: how long to wait for the execution to come to rest.",
)
_json_option = click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")


# ------------------------------------------------------------------ shared steps


def _load_app(app: str | None, db: str) -> Any:
    """The durable application of ``--app``, loaded before anything is written."""
    if app is None:
        return None
    from phronomy_fsm.durable.app import load_app

    try:
        return load_app(app, db)
    except PhronomyError as exc:
        fail(f"{exc}; nothing was written")


def _check_app_runs(store: Any, durable_app: Any, app: str | None, execution_id: str) -> None:
    """Refuse (exit 1, before anything is written) an ``--app`` that does not run the
    execution — not its machine, or its ``accept`` turns it down (an agent application
    configured for other agents): its recovery would never apply the write, and the
    command would report an application that is not the execution's. An unknown
    execution is left to the write itself, which refuses it with its own message."""
    if durable_app is None:
        return
    try:
        record = store.load_record(execution_id)
    except NotFoundError:
        return
    names = sorted(m.name for m in durable_app.machines)
    if record.machine not in names:
        fail(
            f"--app {app} runs the machines {', '.join(names) or '(none)'}, not "
            f"{record.machine} (the machine of execution {execution_id}); nothing was "
            f"written. Name the application that runs {record.machine}, or leave --app "
            "out: the worker that holds the execution applies the write"
        )
    if durable_app.accept is not None and not durable_app.accept(record):
        labels = ", ".join(f"{k}={v}" for k, v in sorted(record.labels.items()))
        fail(
            f"--app {app} does not run execution {execution_id} ({record.machine}"
            f"{'; ' + labels if labels else ''}): its accept() turns it down, so it would "
            "never apply the write; nothing was written. Name the application that runs "
            "it (for an agent: the one that configures its agent id), or leave --app out"
        )


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


def _finish(
    headline: str,
    receipt: operator.InboxReceipt,
    report: operator.StoreRecoveryReport | None,
    db: str,
    as_json: bool,
    wait_seconds: float,
) -> None:
    """Print what an inbox write did and, with ``--app``, where the execution and the
    parents it notifies went; exit as the module docstring says."""
    entries: tuple[operator.RecoveredExecution, ...] = ()
    others: tuple[operator.RecoveredExecution, ...] = ()
    if report is not None:
        chain = [receipt.signal.execution_id]
        first = report.get(chain[0])
        while first is not None and first.record.parent_execution_id is not None:
            chain.append(first.record.parent_execution_id)
            first = report.get(chain[-1])
        entries = tuple(e for e in (report.get(eid) for eid in chain) if e is not None)
        # the rest of the store was recovered too: those now waiting for an operator
        # are reported (and make the exit 3) as `recover` would
        others = tuple(e for e in report.needs_operator if e.execution_id not in chain)
    if as_json:
        data = receipt.to_dict()
        data["execution"] = entries[0].to_dict() if entries else None
        data["parents"] = [e.to_dict() for e in entries[1:]]
        data["others_needing_an_operator"] = [e.to_dict() for e in others]
        emit_json(data)
    else:
        echo_receipt(headline, receipt, db, applied_here=bool(entries))
        echo_recovery(entries)
        if others:
            click.echo(
                f"  also recovered (--app recovers the store) and now waiting for an operator: "
                f"{len(others)}"
            )
            echo_recovery(others)
    if entries or others:
        _exit_for((*entries, *others), wait_seconds)


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
@click.option(
    "--signal-id",
    default=None,
    help="Names this signal: the same signal sent again with it is a no-op; "
    "another signal with it is refused.",
)
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
    """Send EVENT (a signal the machine declares) to an execution's inbox.

    Refused, writing nothing (exit 1): an unknown or finished execution, an event the
    machine does not declare or that only the engine posts (state_completed, offload
    and barrier outcomes), a payload that is not JSON or does not fit the
    event's declared payload schema, a stale --expected-revision,
    an agent's approval_decided (use approve) or tool_finished, a --signal-id already
    used by another signal (another payload, event or execution)."""
    value = parse_json_option(payload, "--payload")
    durable_app = _load_app(app, db)
    with open_store(db) as store:
        _check_app_runs(store, durable_app, app, execution_id)
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
    _finish(f"signal {event}", receipt, report, db, as_json, wait_seconds)


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
@click.option(
    "--signal-id",
    default=None,
    help="Names this cancel: the same cancel sent again with it is a no-op; "
    "another signal with it is refused.",
)
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
    """Cancel an execution (an agent's too): its owner stops it and, once nothing of
    it runs, it finishes cancelled (an effect already running completes; its result
    is dropped). Refused, writing nothing (exit 1): an unknown or finished
    execution, a stale --expected-revision, a --signal-id already used by another
    signal."""
    durable_app = _load_app(app, db)
    with open_store(db) as store:
        _check_app_runs(store, durable_app, app, execution_id)
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


def _parse_decisions(items: tuple[str, ...]) -> dict[str, bool] | None:
    if not items:
        return None
    decisions: dict[str, bool] = {}
    for item in items:
        ident, sep, verdict = item.rpartition("=")
        if not sep or not ident or verdict not in ("approve", "reject"):
            raise click.BadParameter(
                f"{item!r}: use TOOL_INVOCATION_ID=approve or TOOL_INVOCATION_ID=reject",
                param_hint="--item",
            )
        decisions[ident] = verdict == "approve"
    return decisions


@click.command("approve")
@click.argument("execution_id")
@click.option(
    "--request",
    "request_id",
    required=True,
    help="The approval request id (executions show prints it with the items).",
)
@db_option
@click.option("--reject", is_flag=True, help="Reject the whole request instead of approving it.")
@click.option(
    "--item",
    "items",
    multiple=True,
    metavar="TOOL_INVOCATION_ID=approve|reject",
    help="Decide one item (repeat for every item of the request) instead of all at once.",
)
@click.option("--by", default=None, help="Who decided (kept in the execution's audit).")
@click.option(
    "--expected-revision",
    type=click.IntRange(min=0),
    default=None,
    help="Refuse unless the execution is at this revision (read it with executions show).",
)
@_apply_app_option
@_wait_option
@_json_option
def approve_command(
    execution_id: str,
    request_id: str,
    db: str,
    reject: bool,
    items: tuple[str, ...],
    by: str | None,
    expected_revision: int | None,
    app: str | None,
    wait_seconds: float,
    as_json: bool,
) -> None:
    """Decide an agent execution's pending approval request, from any process.

    The decision is checked against the stored execution and written to its durable
    inbox; the worker that runs the execution applies it (docs/operations.md, "Who
    runs an execution"). With no live worker it waits there until the execution is
    recovered — add --app to recover it here (for the demo: phronomy-fsm demo
    --resume). Refused, writing nothing (exit 1): not waiting for approval, another
    request, decisions that do not name every item, a request already decided, or a
    stale --expected-revision."""
    if reject and items:
        raise click.UsageError("--reject decides the whole request; leave out --item")
    decisions = _parse_decisions(items)
    durable_app = _load_app(app, db)
    with open_store(db) as store:
        _check_app_runs(store, durable_app, app, execution_id)
        receipt = operator.approve_execution(
            store,
            execution_id,
            approval_request_id=request_id,
            approved=not reject,
            decisions=decisions,
            by=by or SENDER,
            expected_revision=expected_revision,
            sender=SENDER,
        )
        report = _apply(store, durable_app, app, execution_id, db, wait_seconds)
    verb = "rejected" if reject else ("decided" if decisions is not None else "approved")
    _finish(f"{verb} request {request_id}", receipt, report, db, as_json, wait_seconds)


@click.command("extend-budget")
@click.argument("execution_id")
@db_option
@click.option(
    "--request",
    "request_id",
    default=None,
    help="The budget request id (executions show prints it); default: the pending one.",
)
@click.option("--max-tokens", type=int, default=None, help="New limit: prompt + completion tokens.")
@click.option("--max-llm-calls", type=int, default=None, help="New limit: LLM calls.")
@click.option("--max-tool-calls", type=int, default=None, help="New limit: tool calls started.")
@click.option("--max-cost-usd", type=float, default=None, help="New limit: US dollars.")
@click.option("--by", default=None, help="Who extended it (kept in the execution's audit).")
@click.option(
    "--expected-revision",
    type=click.IntRange(min=0),
    default=None,
    help="Refuse unless the execution is at this revision (read it with executions show).",
)
@_apply_app_option
@_wait_option
@_json_option
def extend_budget_command(
    execution_id: str,
    db: str,
    request_id: str | None,
    max_tokens: int | None,
    max_llm_calls: int | None,
    max_tool_calls: int | None,
    max_cost_usd: float | None,
    by: str | None,
    expected_revision: int | None,
    app: str | None,
    wait_seconds: float,
    as_json: bool,
) -> None:
    """Extend the budget of an agent execution that waits for one, from any process.

    The new limits (the others stay) are checked against the stored execution and
    written to its durable inbox; the worker that runs the execution applies them and
    checks its next call again (docs/agent.md, "Budgets"). Refused, writing nothing
    (exit 1): not waiting for a budget, another request, no limit given, a limit that
    is not positive or is lower than the current one, limits that still refuse the
    waiting call, an extension already on its way, or a stale --expected-revision."""
    given = {
        "max_tokens": max_tokens,
        "max_llm_calls": max_llm_calls,
        "max_tool_calls": max_tool_calls,
        "max_cost_usd": max_cost_usd,
    }
    limits = {name: value for name, value in given.items() if value is not None}
    durable_app = _load_app(app, db)
    with open_store(db) as store:
        _check_app_runs(store, durable_app, app, execution_id)
        receipt = operator.extend_budget_execution(
            store,
            execution_id,
            limits=limits,
            request_id=request_id,
            by=by or SENDER,
            expected_revision=expected_revision,
            sender=SENDER,
        )
        report = _apply(store, durable_app, app, execution_id, db, wait_seconds)
    named = ", ".join(f"{name} {value}" for name, value in limits.items())
    _finish(f"extended the budget ({named})", receipt, report, db, as_json, wait_seconds)


@click.command("resolve")
@click.argument("execution_id", required=False)
@db_option
@click.option(
    "--expected-revision",
    type=int,
    default=None,
    help="The execution's revision as read (executions show, or the recover output); "
    "required with EXECUTION_ID.",
)
@click.option(
    "--outcome",
    type=click.Choice(["succeeded", "failed", "not_performed", "retry"]),
    help="What happened: succeeded (give --result), failed (give --error), not_performed "
    "(nothing is sent again), or retry (run the effect again; you accept the risk).",
)
@click.option(
    "--result",
    default=None,
    help="For succeeded: the result as JSON, of the type the effect's completed event "
    "declares in its machine's spec (executions show prints it as 'succeeded needs "
    "--result').",
)
@click.option("--error", default=None, help="For failed: what went wrong.")
@click.option(
    "--subject",
    default=None,
    help="An optional check that the answer is about the stored subject: effect:HOOK or "
    "execution:ID, for an agent llm_call:ID or tool_invocation:ID.",
)
@click.option(
    "--all",
    "answer_all",
    is_flag=True,
    help="Instead of EXECUTION_ID: answer every execution waiting for an operator that "
    "--machine, --state and --effect select (at least one), each at its own revision.",
)
@click.option("--machine", default=None, help="With --all: only executions of this machine.")
@click.option("--state", default=None, help="With --all: only executions parked in this state.")
@click.option(
    "--effect", default=None, help="With --all: only those whose subject is this effect (hook)."
)
@click.option(
    "--answers",
    "answers_file",
    type=click.File("r", encoding="utf-8"),
    default=None,
    help="Instead of EXECUTION_ID: a file ('-': stdin) of answers, a JSON list or one JSON "
    "object per line: {execution_id, expected_revision, outcome, result?, error?, subject?}.",
)
@click.option(
    "--dry-run", is_flag=True, help="With --all or --answers: list the answers, write nothing."
)
@_apply_app_option
@_wait_option
@_json_option
def resolve_command(
    execution_id: str | None,
    db: str,
    expected_revision: int | None,
    outcome: str | None,
    result: str | None,
    error: str | None,
    subject: str | None,
    answer_all: bool,
    machine: str | None,
    state: str | None,
    effect: str | None,
    answers_file: Any,
    dry_run: bool,
    app: str | None,
    wait_seconds: float,
    as_json: bool,
) -> None:
    """Answer an execution that waits for an operator: say what happened to its
    subject (recover and executions show print the exact commands).

    The answer is checked against the stored execution and written to its durable
    inbox in one transaction — a live owner applies it at once, or with --app this
    process recovers the store until the execution (and the agent execution a tool
    call belongs to) rests. Refused, writing nothing (exit 1): not waiting for an
    operator, a stale --expected-revision, an outcome not allowed for the subject, a
    --result that is not JSON (or not an LLM answer for an LLM call), another
    --subject, a finished execution.

    Many at once (docs/operations.md, "Answering many at once"): --all with
    --machine/--state/--effect answers every matching execution with the same
    --outcome (and --result or --error), or --answers FILE sends the file's answers;
    each is checked against its own execution and revision as one resolve is, and a
    refused one does not stop the others (exit 1 when any was refused)."""
    if answer_all or answers_file is not None:
        from phronomy_fsm.cli._batch import resolve_batch

        if execution_id is not None or expected_revision is not None or subject is not None:
            raise click.UsageError(
                "--all and --answers take no EXECUTION_ID, --expected-revision or --subject "
                "(each answer carries its own)"
            )
        if answer_all == (answers_file is not None):
            raise click.UsageError("give --all (with a filter) or --answers FILE, not both")
        resolve_batch(
            db=db,
            outcome=outcome,
            result=result,
            error=error,
            filters={"machine": machine, "state": state, "effect": effect},
            answers_file=answers_file,
            dry_run=dry_run,
            sender=SENDER,
            as_json=as_json,
        )
        return
    if execution_id is None or expected_revision is None or outcome is None:
        raise click.UsageError(
            "give EXECUTION_ID with --expected-revision and --outcome (or --all / --answers)"
        )
    if machine or state or effect or dry_run:
        raise click.UsageError("--machine, --state, --effect and --dry-run go with --all")
    value = parse_json_option(result, "--result")
    durable_app = _load_app(app, db)
    with open_store(db) as store:
        _check_app_runs(store, durable_app, app, execution_id)
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


@click.command("recover")
@db_option
@app_option
@click.option(
    "--wait-seconds",
    default=60.0,
    show_default=True,
    type=click.FloatRange(min=0),
    help="How long to wait for the executions to come to rest.",
)
@click.option(
    "--park-other-specs",
    is_flag=True,
    help="Also park (spec_changed) the executions pinned to a spec the application "
    "does not run, so that `resolve --outcome failed` can end them. Only for a store "
    "where no worker will run that spec again: without it they are left for one.",
)
@_json_option
def recover_command(
    db: str, app: str, wait_seconds: float, park_other_specs: bool, as_json: bool
) -> None:
    """Recover every active execution of a store that no live worker runs.

    --app names a durable application factory MODULE:FACTORY, factory(db_path) ->
    DurableApp (tests.durable.order_app:create_app; for agents a factory built with
    phronomy_fsm.agent.app.agent_app, such as phronomy_fsm.demo:create_app). Claims
    every active execution of its machines that no live worker runs, resumes each
    from its last commit, and waits up to --wait-seconds until they rest (waiting for
    a person, a signal or its timer, waiting for an operator, or finished). An
    execution pinned to a spec the application does not run (newer, or older without
    a migration) is left for a worker that runs it and listed (docs/scale-out.md,
    "Rolling upgrades"), unless --park-other-specs. Prints
    per execution what it is doing and, for each that waits for an operator, the
    reason, the subject (for an agent: the LLM call, or the tool call with its
    arguments) and the exact resolve commands; for an agent execution that waits for
    approval, the approve commands. Exits 3 when one waits for an operator, 1 when
    one is still moving at the deadline (the next recover resumes it), else 0."""
    require_store_file(db)
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
                park_other_specs=park_other_specs,
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
        for e in report.other_spec:
            echo(
                f"  {e.execution_id}  {e.machine}  not recovered: it is pinned to spec version "
                f"{e.spec_version} (sha256 {e.spec_sha256[:12]}), which the application does "
                "not run; a worker that runs it will (or --park-other-specs)"
            )
    _exit_for(report.executions, wait_seconds)


def register(main: click.Group) -> None:
    """Add ``recover``, ``resolve``, ``approve``, ``extend-budget``, ``signal`` and
    ``cancel``."""
    for command in (
        recover_command,
        resolve_command,
        approve_command,
        extend_budget_command,
        signal_command,
        cancel_command,
    ):
        main.add_command(command)
