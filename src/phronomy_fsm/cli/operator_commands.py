"""Operator commands: ``phronomy-fsm recover`` and ``phronomy-fsm resolve`` (issues 6, 12).

Both work on the executions of the durable engine (any machine) and on agent
executions. Which one is decided by what is stored: ``resolve`` looks at the stored
execution, ``recover`` at the ``--app MODULE:FACTORY`` factory's signature. A durable
application factory ``factory(db_path) -> DurableApp`` is handled by
:mod:`phronomy_fsm.cli.durable_commands` (over :mod:`phronomy_fsm.operator`); the rest
of this module is the agent side.

Agents are loaded through an application factory given as ``--app MODULE:FACTORY``: a
callable ``factory(agent_id: str, db_path: str) -> dict`` returning the keyword
arguments of :meth:`Agent.load <phronomy_fsm.agent.agent.Agent.load>` other than
``store``, ``runtime`` and ``on_event`` (at least ``provider``; usually ``tools``).
:func:`phronomy_fsm.demo.create_app` is an example.

``recover`` loads every agent that has an active execution: continuations run to their
next resting point, suspended executions wait for approval again, and executions whose
outcome cannot be proven are listed with their resolution request. ``resolve`` answers
one such request (reference §6.6) and lets the execution continue.

Both refuse an agent that a running process owns (``--takeover`` only overrides an
owner whose liveness cannot be checked from here; docs/operations.md "Who owns an
agent").

Exit codes: 0 success; 1 a refused resolution, an agent owned by a running process,
an unloadable app, or a store error; 2 usage; 3 an execution waits for an operator
(``recover``). Diagnostics go to stderr.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

import click

from phronomy_fsm import operator
from phronomy_fsm.cli._common import (
    EXIT_FAILED,
    EXIT_NEEDS_OPERATOR,
    app_option,
    db_option,
    fail,
    one_line,
    open_store,
    require_store_file,
    takeover_option,
)
from phronomy_fsm.cli.durable_commands import recover_engine, resolve_engine
from phronomy_fsm.durable.app import is_durable_factory
from phronomy_fsm.durable.records import ExecutionRecord as EngineRecord
from phronomy_fsm.errors import (
    AgentOwnedError,
    ConfigurationError,
    NotFoundError,
    PhronomyError,
)

RESTING = (
    "approval_required",
    "recovery_resolution_required",
    "done",
    "handoff",
    "error",
    "timeout",
    "cancelled",
)


def load_factory(spec: str) -> Callable[[str, str], dict[str, Any]]:
    """Import ``MODULE:FACTORY``. Raises ``click.BadParameter`` with a clear reason."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise click.BadParameter(f"expected MODULE:FACTORY, got {spec!r}", param_hint="--app")
    if os.getcwd() not in sys.path and "" not in sys.path:
        # like `python -m`: the application's module is usually in the working directory
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise click.BadParameter(
            f"cannot import {module_name!r}: {exc}", param_hint="--app"
        ) from exc
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise click.BadParameter(f"{module_name!r} has no callable {attr!r}", param_hint="--app")
    return factory  # type: ignore[no-any-return]


def _call_factory(
    factory: Callable[[str, str], dict[str, Any]], app: str, agent_id: str, db: str
) -> dict[str, Any]:
    """``factory(agent_id, db)``, its failure turned into a ConfigurationError that
    names the factory (the CLI reports it as one ``error:`` line, not a traceback)."""
    try:
        options = factory(agent_id, db)
    except Exception as exc:  # application code: reported, not re-raised
        raise ConfigurationError(
            f"--app {app} failed for agent {agent_id!r}: {type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(options, dict):
        raise ConfigurationError(
            f"--app {app} must return a dict of Agent.load keyword arguments, "
            f"got {type(options).__name__}"
        )
    return options


class _Watcher:
    """Collects events and wakes a waiter when an execution comes to rest."""

    def __init__(self) -> None:
        self.events: list[Any] = []
        self.cond = threading.Condition()

    def __call__(self, event: Any) -> None:
        with self.cond:
            self.events.append(event)
            self.cond.notify_all()

    def poke(self, *_: Any) -> None:
        """Wake the waiter (e.g. when a task settled without an event)."""
        with self.cond:
            self.cond.notify_all()

    def wait_rest(
        self,
        execution_id: str,
        after: int,
        timeout: float,
        stop: Callable[[], bool] = lambda: False,
        newer_than: int | None = None,
    ) -> Any:
        """The last resting event of ``execution_id`` among the events from index
        ``after`` on, waiting up to ``timeout`` s (or until ``stop()``) for one; None if
        there is none. ``newer_than`` skips resolution requests at or below that
        execution revision (the announcement that a resolution answers may still be
        on its way when the resolution is sent)."""

        def resting(e: Any) -> bool:
            if e.execution_id != execution_id or e.type not in RESTING:
                return False
            return not (
                newer_than is not None
                and e.type == "recovery_resolution_required"
                and e.payload["execution_revision"] <= newer_than
            )

        with self.cond:
            self.cond.wait_for(
                lambda: stop() or any(resting(e) for e in self.events[after:]), timeout
            )
            rest = [e for e in self.events[after:] if resting(e)]
            return rest[-1] if rest else None


def _describe(event: Any) -> dict[str, Any]:
    if event is None:
        return {"state": "running"}
    payload = event.payload
    if event.type == "approval_required":
        return {"state": "suspended", "approval_request_id": payload["request"]["id"]}
    if event.type == "recovery_resolution_required":
        return {
            "state": "recovery_required",
            "execution_revision": payload["execution_revision"],
            "subject": payload["subject"],
            "allowed_outcomes": payload["allowed_outcomes"],
            "reason": payload["reason"],
            "facts": payload["facts"],
        }
    return {
        "state": payload.get("status", event.type),
        "output": payload.get("output"),
        "error": payload.get("error"),
    }


@click.command("recover")
@db_option
@app_option
@click.option(
    "--wait-seconds",
    default=60.0,
    show_default=True,
    type=float,
    help="How long to wait for the executions to come to rest (per agent, for agents).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@takeover_option
def recover(db: str, app: str, wait_seconds: float, as_json: bool, takeover: bool) -> None:
    """Recover every active execution of a store after a restart.

    With a durable application factory ``factory(db_path) -> DurableApp`` (for
    example tests.durable.order_app:create_app): claim every active execution of its
    machines that no live worker runs, resume each from its last commit, and wait up
    to --wait-seconds until they rest (waiting for a signal or timer, waiting for an
    operator, or finished). Prints per execution what it is doing and, for each that
    waits for an operator, the exact resolve commands. Exits 3 when one waits for an
    operator, 1 when one is still moving at the deadline (the next recover resumes
    it), else 0.

    With an agent factory: load every agent with an active execution and recover it:
    continuations run to their next resting point, suspended executions wait for
    approval again, and those whose outcome cannot be proven are listed with their
    resolution request. Agents that a crash left with an acknowledged but never
    admitted handoff are loaded too, which starts that handoff.

    --app names a factory ``MODULE:FACTORY`` with the signature
    ``factory(agent_id: str, db_path: str) -> dict`` returning the keyword arguments of
    Agent.load other than store, runtime and on_event (provider, tools, ...); for
    example phronomy_fsm.demo:create_app.

    An agent owned by a running process (docs/operations.md "Who owns an agent") is
    not loaded: an `error:` line names that process, its entry says `not_loaded`, and
    the command exits 1; nothing of that agent is written. Otherwise it exits 3 when
    an execution is left in `recovery_required` (answer it with `resolve`), else 0."""
    from tqdm import tqdm

    from phronomy_fsm.agent import Agent, AgentRuntime
    from phronomy_fsm.agent.recovery import pending_handoffs
    from phronomy_fsm.store import SqliteBarrierStore

    require_store_file(db)
    factory = load_factory(app)
    if is_durable_factory(factory):
        if takeover:
            raise click.UsageError("--takeover applies to agent applications only")
        recover_engine(db, app, wait_seconds, as_json)
        return
    runtime = AgentRuntime()
    watcher = _Watcher()
    summary: list[dict[str, Any]] = []
    try:
        store = SqliteBarrierStore(db)
        # each agent's active execution, or the first handoff to it that a crash
        # acknowledged but never admitted (loading the agent starts it)
        active_ids = {e.agent_id: e.execution_id for e in store.active_executions()}
        waiting = dict(active_ids)
        for pending in pending_handoffs(store):
            waiting.setdefault(pending.target_agent_id, pending.target_execution_id)
        handoff_targets = set(waiting.values()) - set(active_ids.values())
        agents = sorted(waiting)
        for agent_id in tqdm(
            agents,
            desc="recovering",
            unit="agent",
            file=sys.stderr,
            disable=not agents or not sys.stderr.isatty(),
        ):
            execution_id = waiting[agent_id]
            mark = len(watcher.events)
            try:
                agent = Agent.load(
                    agent_id,
                    store=store,
                    runtime=runtime,
                    on_event=watcher,
                    takeover=takeover,
                    **_call_factory(factory, app, agent_id, db),
                )
            except PhronomyError as exc:
                if isinstance(exc, AgentOwnedError):  # on its own line, above the bar
                    tqdm.write(f"error: {one_line(str(exc))}", file=sys.stderr)
                summary.append(
                    {
                        "agent_id": agent_id,
                        "execution_id": execution_id,
                        "state": "not_loaded",
                        "error": str(exc),
                    }
                )
                continue
            active = agent.active_execution()
            # no longer active once loaded: it ended here already, or another process
            # recovered it meanwhile; either way there is nothing to wait for
            ended = execution_id not in handoff_targets and (
                active is None or active["execution_id"] != execution_id
            )
            rest = watcher.wait_rest(execution_id, mark, 0 if ended else wait_seconds)
            if rest is None and ended:
                try:
                    state = store.load_execution(execution_id).status.value
                except NotFoundError:  # compacted meanwhile
                    state = "removed"
                described = {"state": state, "note": "ended before this process loaded it"}
            else:
                described = _describe(rest)
            summary.append({"agent_id": agent.agent_id, "execution_id": execution_id, **described})
    except PhronomyError as exc:
        fail(str(exc))
    finally:
        runtime.close(timeout_seconds=5)
    if as_json:
        click.echo(json.dumps({"recovered": summary}, indent=2, sort_keys=True))
    else:
        click.echo(f"{len(summary)} active execution(s)")
        for entry in summary:
            extra = {
                k: v for k, v in entry.items() if k not in ("agent_id", "execution_id", "state")
            }
            click.echo(
                one_line(
                    f"  {entry['agent_id']} {entry['execution_id']}: {entry['state']} "
                    f"{json.dumps(extra, sort_keys=True) if extra else ''}".rstrip()
                )
            )
    if any(e["state"] == "not_loaded" for e in summary):
        sys.exit(EXIT_FAILED)
    if any(e["state"] == "recovery_required" for e in summary):
        sys.exit(EXIT_NEEDS_OPERATOR)


def _parse_subject(text: str) -> dict[str, Any]:
    kind, sep, ident = text.partition(":")
    keys = {
        "llm_call": "llm_call_id",
        "tool_invocation": "tool_invocation_id",
        "execution": "execution_id",
    }
    if not sep or kind not in keys or not ident:
        raise click.BadParameter(
            "use llm_call:<id>, tool_invocation:<id> or execution:<id>", param_hint="--subject"
        )
    return {"type": kind, keys[kind]: ident}


@click.command("resolve")
@click.argument("execution_id")
@db_option
@click.option(
    "--app",
    "app",
    default=None,
    help="Application factory MODULE:FACTORY. Durable execution: optional, a "
    "factory(db_path) -> DurableApp that recovers the store here until the execution "
    "rests. Agent execution: required, factory(agent_id, db_path) -> Agent.load kwargs.",
)
@click.option(
    "--expected-revision",
    required=True,
    type=int,
    help="The execution's revision as read (executions show, or the recover output).",
)
@click.option(
    "--subject",
    default=None,
    help="Agent execution (required): llm_call:<id>, tool_invocation:<id> or execution:<id>. "
    "Durable execution (optional check): effect:<hook> or execution:<id>.",
)
@click.option(
    "--outcome",
    required=True,
    type=click.Choice(["succeeded", "failed", "not_performed", "retry"]),
    help="What happened: succeeded (give --result), failed (give --error), not_performed "
    "(nothing is re-sent), or retry (durable executions: run the effect again).",
)
@click.option(
    "--result",
    default=None,
    help="For succeeded: the result as JSON (or plain text for an agent's LLM answer).",
)
@click.option("--error", default=None, help="For failed: what went wrong.")
@click.option(
    "--wait-seconds",
    default=60.0,
    show_default=True,
    type=click.FloatRange(min=0),
    help="How long to wait for the execution to come to rest after the resolution.",
)
@click.option("--json", "as_json", is_flag=True, help="Durable executions: print one JSON object.")
@takeover_option
def resolve(
    execution_id: str,
    db: str,
    app: str | None,
    expected_revision: int,
    subject: str | None,
    outcome: str,
    result: str | None,
    error: str | None,
    wait_seconds: float,
    as_json: bool,
    takeover: bool,
) -> None:
    """Answer an execution that waits for an operator: say what happened to its subject.

    Durable execution (any machine, in recovery_required): the answer goes to its
    durable inbox in one transaction — a live owner applies it at once, or with
    --app this process recovers the store until the execution rests (exit 3 if it
    waits for an operator again). Refused, writing nothing (exit 1): not waiting for
    an operator, a stale --expected-revision, an outcome not allowed for the subject,
    a --result that is not JSON, a finished execution.

    Agent execution (a recovery_resolution_required request): one transaction with
    read-back; not_performed ends the execution as failed (nothing is ever re-sent
    without an operator decision). Refused, writing nothing, while a running process
    owns the agent (docs/operations.md "Who owns an agent")."""
    from phronomy_fsm.agent import Agent, AgentRuntime
    from phronomy_fsm.store import SqliteBarrierStore

    with open_store(db) as store:
        stored = operator.load_any_execution(store, execution_id)
    if isinstance(stored, EngineRecord):
        if takeover:
            raise click.UsageError("--takeover applies to agent executions only")
        resolve_engine(
            execution_id,
            db,
            app=app,
            expected_revision=expected_revision,
            subject=subject,
            outcome=outcome,
            result=result,
            error=error,
            wait_seconds=wait_seconds,
            as_json=as_json,
        )
        return
    if app is None or subject is None:
        raise click.UsageError(
            f"{execution_id} is an agent execution: --app and --subject are required"
        )
    if outcome == "retry":
        raise click.UsageError("agent executions take succeeded, failed or not_performed")
    parsed_subject = _parse_subject(subject)
    value: Any = None
    if result is not None:
        try:
            value = json.loads(result)
        except ValueError:
            if parsed_subject["type"] != "llm_call":
                raise click.BadParameter(
                    "a tool result must be JSON (quote a plain string: '\"text\"')",
                    param_hint="--result",
                ) from None
            value = result  # an LLM answer may be plain text
    factory = load_factory(app)
    runtime = AgentRuntime()
    watcher = _Watcher()
    try:
        store = SqliteBarrierStore(db)
        execution = store.load_execution(execution_id)
        agent = Agent.load(
            execution.agent_id,
            store=store,
            runtime=runtime,
            on_event=watcher,
            takeover=takeover,
            **_call_factory(factory, app, execution.agent_id, db),
        )
        mark = len(watcher.events)
        task = agent.resolve_async(
            execution_id,
            expected_revision=expected_revision,
            subject=parsed_subject,
            outcome=outcome,
            result=value,
            error=error,
        )
        task.add_done_callback(watcher.poke)
        rest = watcher.wait_rest(
            execution_id, mark, wait_seconds, stop=task.done, newer_than=expected_revision
        )
        if rest is None and task.done() and task.error() is not None:
            task.result()  # the resolution was refused: raise why
        click.echo(json.dumps({"execution_id": execution_id, **_describe(rest)}, sort_keys=True))
    except PhronomyError as exc:
        fail(str(exc))
    finally:
        runtime.close(timeout_seconds=5)


def register(main: click.Group) -> None:
    """Add ``recover``, ``resolve``, ``signal`` and ``cancel`` to the CLI group."""
    from phronomy_fsm.cli.durable_commands import cancel_command, signal_command

    main.add_command(recover)
    main.add_command(resolve)
    main.add_command(signal_command)
    main.add_command(cancel_command)
