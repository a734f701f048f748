"""``phronomy-fsm demo`` and ``phronomy-fsm approve`` (issue 5 item 9).

``demo`` runs the scripted customer-support agent of :mod:`phronomy_fsm.demo` on a
SQLite store until it suspends for approval, printing ``execution_id: <id>`` and
``approval_request_id: <id>`` on lines of their own. ``approve`` records a decision
durably — the approval-decision barrier, one transaction — without a live agent; it
claims the agent in the store for that transaction and refuses an agent that a running
process owns (docs/operations.md "Who owns an agent"; ``--takeover`` for an owner on
another host known to be gone).
``demo --resume`` loads the agent in a new process; recovery continues the execution
from its last barrier to its end and the command prints the answer, the status and the
barrier history.

Exit codes: 0 success; 1 a refused decision, a store error, or an execution that could
not finish; 2 usage. Diagnostics go to stderr.
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any, NoReturn

import click

from phronomy_fsm.cli._common import (
    EXIT_NEEDS_OPERATOR,
    db_option,
    fail,
    one_line,
    open_store,
    require_store_file,
    takeover_option,
)
from phronomy_fsm.cli._faults import crash_at_option
from phronomy_fsm.errors import ApprovalError, ConflictError, OutcomeUnknownError, PhronomyError
from phronomy_fsm.runtime.faults import FaultPlan


def _print_history(store: Any, execution_id: str) -> None:
    click.echo("barriers:")
    for barrier in store.barrier_history(execution_id):
        click.echo(
            f"  rev {barrier.revision}: {barrier.barrier:<20} {barrier.status}/{barrier.phase}"
        )


@click.command("demo")
@click.option(
    "--db",
    "db",
    default=None,
    type=click.Path(dir_okay=False),
    help="Store file (default ./.phronomy/demo.db).",
)
@click.option(
    "--resume",
    is_flag=True,
    help="Recover the demo execution in this new process and run it to its end.",
)
@click.option(
    "--wait-seconds",
    default=60.0,
    show_default=True,
    type=float,
    help="How long to wait for the execution.",
)
@crash_at_option
def demo(db: str | None, resume: bool, wait_seconds: float, faults: FaultPlan | None) -> None:
    """Run the scripted support agent until it suspends for a refund approval, or with
    --resume continue it to its end after `phronomy-fsm approve`."""
    from phronomy_fsm.agent import Agent, AgentRuntime
    from phronomy_fsm.demo import (
        DEFAULT_DB,
        DEMO_AGENT_ID,
        DEMO_INPUT,
        create_app,
        printing_listener,
    )
    from phronomy_fsm.errors import NotFoundError
    from phronomy_fsm.store import SqliteBarrierStore

    db = db or DEFAULT_DB
    if resume and not os.path.exists(db):
        fail(f"no store at {db}; run `phronomy-fsm demo --db {db}` first")
    if resume:
        require_store_file(db)  # an empty file is not a demo store to resume
    os.makedirs(os.path.dirname(os.path.abspath(db)), exist_ok=True)
    runtime = AgentRuntime(faults=faults)
    listener = printing_listener(click.echo)
    settled = threading.Event()

    def on_event(event: Any) -> None:
        listener(event)
        if event.type in (
            "approval_required",
            "recovery_resolution_required",
            "done",
            "error",
            "cancelled",
            "timeout",
        ):
            settled.set()

    try:
        store = SqliteBarrierStore(db, faults=faults)
        app = create_app(DEMO_AGENT_ID, db)
        try:
            agent = Agent.load(
                DEMO_AGENT_ID, store=store, runtime=runtime, on_event=on_event, **app
            )
        except NotFoundError:
            if resume:
                fail(f"no demo agent in {db}; run `phronomy-fsm demo --db {db}` first")
            agent = Agent.create(
                DEMO_AGENT_ID, store=store, runtime=runtime, on_event=on_event, **app
            )
        active = agent.active_execution()
        if resume:
            if active is None:
                fail("no demo execution is active; run `phronomy-fsm demo` to start one")
            if active["state"] == "suspended":
                fail(
                    f"execution {active['execution_id']} still waits for approval; run "
                    f"`phronomy-fsm approve {active['execution_id']} --request {active['approval_request_id']} --db {db}`"
                )
            if active["state"] == "recovery_required":
                _needs_operator(active, db)
            task = agent.recovered
            assert task is not None
            # the end, or the continuation comes to rest waiting for someone
            end = time.monotonic() + wait_seconds
            task.add_done_callback(lambda _: settled.set())
            settled.wait(wait_seconds)
            if not task.done():
                now = agent.active_execution()
                if now is not None and now["state"] == "recovery_required":
                    _needs_operator(now, db)
                if now is not None and now["state"] == "suspended":
                    _print_approval(now, db)
                    return
            try:  # a terminal event comes just before the task settles
                result = task.result(max(0.5, end - time.monotonic()))
                click.echo(f"answer: {result.output}" if result.output else "answer: (none)")
                click.echo(f"status: {result.status}")
            except PhronomyError as exc:
                click.echo(f"status: failed ({exc})")
            _print_history(store, active["execution_id"])
            return
        if active is None:
            click.echo(f"user: {DEMO_INPUT}")
            agent.invoke_async(DEMO_INPUT)
            settled.wait(wait_seconds)
            active = agent.active_execution()
        elif active["state"] not in ("suspended", "recovery_required"):
            click.echo(f"recovered execution {active['execution_id']}; continuing it")
            settled.wait(wait_seconds)
            active = agent.active_execution()
        if active is not None and active["state"] == "recovery_required":
            _needs_operator(active, db)
        if active is None or active["state"] != "suspended":
            fail(
                f"the demo execution did not suspend for approval (state: {active and active['state']})"
            )
        _print_approval(active, db)
    except PhronomyError as exc:
        fail(str(exc))
    finally:
        runtime.close(timeout_seconds=5)


def _print_approval(active: dict[str, Any], db: str) -> None:
    """The suspended demo execution's ids and the commands that continue it."""
    click.echo(one_line(f"execution_id: {active['execution_id']}"))
    click.echo(one_line(f"approval_request_id: {active['approval_request_id']}"))
    click.echo(
        one_line(
            f"next: phronomy-fsm approve {active['execution_id']} --request "
            f"{active['approval_request_id']} --db {db} [--reject], then phronomy-fsm demo "
            f"--resume --db {db}"
        )
    )


def _needs_operator(active: dict[str, Any], db: str) -> NoReturn:
    """Exit 3 with the resolution request of an execution in recovery_required and the
    ``resolve`` command that answers it (reference §6.6)."""
    request = active["recovery"] or {}
    subject = request.get("subject") or {}
    kind = subject.get("type", "llm_call")
    ident = subject.get(f"{kind}_id", "?")
    fail(
        f"execution {active['execution_id']} needs an operator decision: {request.get('reason')}.",
        EXIT_NEEDS_OPERATOR,
        more_lines=(
            f"subject: {json.dumps(subject, sort_keys=True)}",
            (
                f"answer with: phronomy-fsm resolve {active['execution_id']} --db {db} "
                f"--app phronomy_fsm.demo:create_app --expected-revision "
                f"{request.get('execution_revision')} --subject {kind}:{ident} "
                "--outcome succeeded|failed|not_performed [--result JSON | --error TEXT]"
            ),
        ),
    )


@click.command("approve")
@click.argument("execution_id")
@click.option(
    "--request",
    "request_id",
    required=True,
    help="The approval request id (from the approval_required event).",
)
@db_option
@click.option("--reject", is_flag=True, help="Reject instead of approve.")
@takeover_option
def approve(execution_id: str, request_id: str, db: str, reject: bool, takeover: bool) -> None:
    """Record an approval decision durably, in one transaction, without running the
    agent: the next process that loads the agent (for the demo: `phronomy-fsm demo
    --resume`) applies it and continues the execution. The request id is in the
    approval_required event, in `executions show --json`
    (execution.approval_request.request_id) and in the demo's output.

    The agent must not be owned by a running process (docs/operations.md "Who owns an
    agent"): this command claims it for the decision and releases it after; if a live
    process owns it, nothing is written and the command fails — approve through that
    process, or stop it first."""
    with open_store(db) as store:
        owner = store.load_execution(execution_id).agent_id
        claim = store.claim_agent(owner, takeover=takeover)
        try:
            revision = _record_decision(store, execution_id, request_id, reject)
        finally:
            try:
                store.release_agent(owner, claim.owner_token)
            except PhronomyError as exc:  # the claim goes with this process when it exits
                click.echo(
                    one_line(f"warning: could not release the claim on {owner}: {exc}"), err=True
                )
    verb = "rejected" if reject else "approved"
    click.echo(
        one_line(f"{verb}: execution {execution_id} (request {request_id}), revision {revision}")
    )
    what = "ends as rejected" if reject else "continues"
    click.echo(
        f"the execution {what} when its agent is loaded again (Agent.load, "
        "`phronomy-fsm recover`, or for the demo `phronomy-fsm demo --resume`)"
    )


def _record_decision(store: Any, execution_id: str, request_id: str, reject: bool) -> int:
    """Commit the approval-decision barrier, reading the execution under the caller's
    claim; return the new revision.

    Raises:
        ApprovalError: the decision is refused, or the execution changed meanwhile.
        NotFoundError, StorageError, OutcomeUnknownError (not committed after
        read-back): nothing was decided.
    """
    from phronomy_fsm.agent.durable import approval_decision_commit
    from phronomy_fsm.runtime.clock import SYSTEM_CLOCK
    from phronomy_fsm.store import COMMITTED

    execution = store.load_execution(execution_id)
    root = store.load_agent(execution.agent_id)
    commit = approval_decision_commit(
        execution,
        root,
        request_id=request_id,
        approved=not reject,
        decisions=None,
        now=SYSTEM_CLOCK.now(),
    )
    try:
        store.commit(commit)
    except OutcomeUnknownError:
        if store.reconcile(commit) != COMMITTED:
            raise
    except ConflictError as exc:
        raise ApprovalError(
            f"execution {execution_id} changed while deciding (decided concurrently?): {exc}",
            execution_id=execution_id,
        ) from exc
    return int(commit.execution.revision)


def register(main: click.Group) -> None:
    """Add ``demo`` and ``approve`` to the CLI group."""
    main.add_command(demo)
    main.add_command(approve)
