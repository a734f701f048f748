"""``phronomy-fsm fork``: start a new execution from a past commit of another.

``phronomy-fsm fork ID --revision N --db DSN_OR_PATH [--execution-id NEW]
[--allow-effect HOOK ...] [--new-keys] [--plan] [--json]`` prints the plan of
:func:`phronomy_fsm.operator.fork.plan_fork` — the state the fork resumes in and every
effect the original ran after that commit, with its kind and key — and, unless
``--plan`` or the plan refuses it, writes the fork for a worker to run
(``docs/operations.md``, "Fork and restart from a past commit"). Exit status 0 when the
fork was written (or, with ``--plan``, would be), 1 when refused or on bad input.
"""

from __future__ import annotations

import click

from phronomy_fsm.cli._common import db_option, echo, emit_json, fail, one_line, open_store
from phronomy_fsm.errors import ForkRefusedError, PhronomyError


@click.command("fork")
@click.argument("execution_id")
@db_option
@click.option(
    "--revision",
    type=click.IntRange(min=0),
    required=True,
    help="The commit to start from (executions show lists them).",
)
@click.option("--execution-id", "fork_id", default=None, help="The fork's id (default: random).")
@click.option(
    "--allow-effect",
    "allow",
    multiple=True,
    metavar="HOOK",
    help="Let this at_most_once effect run again (refused otherwise); repeatable.",
)
@click.option(
    "--new-keys",
    is_flag=True,
    help="Effects that run again get new idempotency keys (default: the original's, so "
    "an idempotent service recognises them).",
)
@click.option("--plan", "plan_only", is_flag=True, help="Print the plan; write nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print the plan as one JSON object.")
def fork_command(
    execution_id: str,
    db: str,
    revision: int,
    fork_id: str | None,
    allow: tuple[str, ...],
    new_keys: bool,
    plan_only: bool,
    as_json: bool,
) -> None:
    """Start a new execution from a past commit of ID, after a plan of what would run again.

    The plan lists every effect the original ran after that commit with its kind and
    idempotency key; an at_most_once one is refused unless --allow-effect names it.
    """
    from phronomy_fsm.operator.fork import fork_execution, plan_fork

    action = plan_fork if plan_only else fork_execution
    with open_store(db, read_only=plan_only) as store:
        try:
            plan = action(
                store,
                execution_id,
                revision,
                execution_id=fork_id,
                allow_effects=allow,
                new_keys=new_keys,
            )
        except ForkRefusedError as exc:
            refused = getattr(exc, "plan", None)
            if refused is None:
                fail(f"{exc}; nothing was written")
            plan = refused
        except PhronomyError as exc:
            fail(f"{exc}; nothing was written")
    if as_json:
        emit_json({**plan.to_dict(), "written": plan.ok and not plan_only})
    else:
        _print(plan, written=plan.ok and not plan_only)
    if not plan.ok:
        raise SystemExit(1)


def _print(plan: object, *, written: bool) -> None:
    from phronomy_fsm.operator.fork import ForkPlan

    assert isinstance(plan, ForkPlan)
    echo(
        f"fork of {plan.source} at revision {plan.revision} -> {plan.execution_id} "
        f"({plan.machine}, {plan.status} in {plan.state}, point {plan.point})"
    )
    keys = "the original's" if plan.same_keys else "new ones"
    if plan.effects:
        echo(f"effects the fork may run (keys of those that ran before: {keys}):")
        for e in plan.effects:
            mark = "allowed" if e.allowed else "REFUSED"
            again = (
                f"ran at revision {e.revision}, key {e.fork_key}"
                if e.ran_before
                else "not run by the original after this commit"
            )
            echo(f"  {e.effect} ({e.kind.value}): {again}  [{mark}]")
    else:
        echo("no effect can run from there")
    for reason in plan.refusals:
        echo(one_line(f"refused: {reason}"))
    if written:
        echo(f"written: {plan.execution_id} waits for a worker (or `phronomy-fsm recover`)")
    elif plan.ok:
        echo("not written (--plan)")
    else:
        echo("nothing was written")


def register(main: click.Group) -> None:
    """Add ``fork`` to the ``phronomy-fsm`` group."""
    main.add_command(fork_command)
