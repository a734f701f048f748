"""The demo application: a scripted customer-support agent, and the runs of
``phronomy-fsm demo``.

The LLM (a :class:`~phronomy_fsm.agent.providers.ScriptedProvider`, deterministic across
processes) first calls ``lookup_order`` (no approval needed), then ``issue_refund``
(needs a person's approval), then answers. ``issue_refund`` appends to a JSON-lines
ledger beside the database, keyed by its idempotency key, so a refund is never written
twice for one tool call.

- :func:`start_demo` creates the agent (or loads it, resuming an execution a crash left)
  and runs an execution until it rests: waiting for the refund's approval, waiting for
  an operator, or finished.
- :func:`resume_demo` recovers the store in a new process with the demo application
  (:func:`phronomy_fsm.operator.recover_store`): an approval recorded meanwhile by
  ``phronomy-fsm approve`` is applied and the execution runs on until it rests again.
- :func:`create_app` is the ``--app phronomy_fsm.demo:create_app`` factory of the
  operator commands (``recover``, ``resolve``, ``approve``): the demo agent as a
  durable application (:func:`phronomy_fsm.agent.app.agent_app`).

Both runs return a :class:`DemoReport` read back from the store; the CLI only prints
it (``docs/getting-started.md``).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from phronomy_fsm.agent.config import AgentConfig
from phronomy_fsm.agent.events import AgentEvent
from phronomy_fsm.agent.providers import Reply, ScriptedProvider
from phronomy_fsm.agent.tools import Tool, ToolContext
from phronomy_fsm.durable.app import DurableApp
from phronomy_fsm.durable.machines import MachineFacts
from phronomy_fsm.durable.ports import ExecutionStore
from phronomy_fsm.durable.records import ExecutionStatus
from phronomy_fsm.errors import AgentExistsError, ConfigurationError, NotFoundError
from phronomy_fsm.generated import agent_session, tool_call
from phronomy_fsm.operator.actions import describe_execution
from phronomy_fsm.operator.recovery import recover_store, wait_until_rest
from phronomy_fsm.operator.views import ExecutionDetail
from phronomy_fsm.runtime.faults import FaultPlan

DEMO_AGENT_ID = "support-demo"
DEFAULT_DB = os.path.join(".phronomy", "demo.db")
DEMO_INPUT = "Hi, order A1001 arrived broken. Can I get my $25.00 back?"
SYSTEM_PROMPT = "You are a helpful support agent for a tea shop."
#: The ``--app`` of the demo, as the printed commands name it.
DEMO_APP = "phronomy_fsm.demo:create_app"

ORDERS = {
    "A1001": {
        "order_id": "A1001",
        "item": "ceramic teapot",
        "amount": 25.00,
        "status": "delivered",
    },
    "A1002": {"order_id": "A1002", "item": "tea sampler", "amount": 12.50, "status": "shipped"},
}

Listener = Callable[[AgentEvent], None]


def demo_provider() -> ScriptedProvider:
    """The scripted LLM of the demo."""
    return ScriptedProvider(
        [
            Reply(tool_calls=(("lookup_order", {"order_id": "A1001"}),)),
            Reply(
                content="The order was delivered; I will refund it.",
                tool_calls=(
                    (
                        "issue_refund",
                        {"order_id": "A1001", "amount": 25.00, "reason": "arrived broken"},
                    ),
                ),
            ),
            Reply(
                content="Done: I refunded $25.00 for order A1001 (ceramic teapot). Sorry about the breakage!"
            ),
        ],
        model="scripted-support",
    )


def ledger_path(db_path: str | os.PathLike[str]) -> Path:
    """Where the demo's refunds are written (beside the database)."""
    return Path(db_path).with_name(Path(db_path).stem + "-refunds.jsonl")


def demo_tools(ledger: Path) -> list[Tool]:
    """``lookup_order`` and ``issue_refund`` (the latter requires approval)."""

    def lookup_order(arguments: dict[str, Any], context: ToolContext) -> dict[str, Any]:
        order = ORDERS.get(arguments["order_id"])
        if order is None:
            return {"error": f"no order {arguments['order_id']}"}
        return dict(order)

    def issue_refund(arguments: dict[str, Any], context: ToolContext) -> dict[str, Any]:
        ledger.parent.mkdir(parents=True, exist_ok=True)
        key = context.idempotency_key
        if ledger.exists():
            for line in ledger.read_text("utf-8").splitlines():
                entry = json.loads(line)
                if entry["idempotency_key"] == key:
                    return {"refund_id": entry["refund_id"], "duplicate": True}
        entry = {
            "refund_id": "R-" + key[-8:],
            "idempotency_key": key,
            "order_id": arguments["order_id"],
            "amount": arguments["amount"],
        }
        with ledger.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(entry, sort_keys=True) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        return {"refund_id": entry["refund_id"], "amount": arguments["amount"]}

    return [
        Tool(
            "lookup_order",
            lookup_order,
            "Look an order up by id.",
            {
                "type": "object",
                "properties": {"order_id": {"type": "string"}},
                "required": ["order_id"],
                "additionalProperties": False,
            },
            effect="pure",
        ),
        Tool(
            "issue_refund",
            issue_refund,
            "Refund an order (needs a person's approval).",
            {
                "type": "object",
                "properties": {
                    "order_id": {"type": "string"},
                    "amount": {"type": "number", "exclusiveMinimum": 0},
                    "reason": {"type": "string"},
                },
                "required": ["order_id", "amount"],
                "additionalProperties": False,
            },
            requires_approval=True,
        ),
    ]


def demo_options(db_path: str | os.PathLike[str]) -> dict[str, Any]:
    """The demo agent's options: keyword arguments of :meth:`Agent.create
    <phronomy_fsm.agent.agent.Agent.create>` / ``load`` other than the store, the
    runtime and the listener."""
    return {
        "provider": demo_provider(),
        "tools": demo_tools(ledger_path(db_path)),
        "system_prompt": SYSTEM_PROMPT,
    }


#: Why the demo refuses a PostgreSQL DSN.
DEMO_NEEDS_A_FILE = (
    "the demo runs on a SQLite store file (its refunds ledger is written beside it), not "
    "on a PostgreSQL database: give --db a file path such as .phronomy/demo.db"
)


def create_app(db_path: str, *, on_event: Listener | None = None) -> DurableApp:
    """The demo agent as a durable application: the ``--app`` factory
    ``phronomy_fsm.demo:create_app`` of ``recover``, ``resolve``, ``approve`` and
    ``worker``. ``on_event`` receives the agent's events while a runtime runs it.

    Raises:
        ConfigurationError: ``db_path`` is a PostgreSQL DSN (the demo keeps its
            refunds ledger in a file beside its SQLite store).
        StorageError, SchemaVersionError: the store's history cannot be read.
    """
    from phronomy_fsm.agent.app import agent_app
    from phronomy_fsm.store.open import is_postgres_dsn

    if is_postgres_dsn(db_path):
        raise ConfigurationError(DEMO_NEEDS_A_FILE)

    config = AgentConfig.build(DEMO_AGENT_ID, on_event=on_event, **demo_options(db_path))
    return agent_app(db_path, [config])


@attrs.frozen
class DemoReport:
    """Where a demo run left the demo agent's execution, read back from the store.

    ``detail`` describes the execution (``None``: none was ever started);
    ``parked`` are it and its tool calls that wait for an operator; ``at_rest`` is
    False when it was still moving at the deadline; ``resumed`` is True when this run
    found it already started (a crash or an earlier run left it).
    """

    db_path: str
    detail: ExecutionDetail | None
    parked: tuple[ExecutionDetail, ...] = ()
    at_rest: bool = True
    resumed: bool = False

    @property
    def execution_id(self) -> str | None:
        """The demo execution's id."""
        return None if self.detail is None else self.detail.record.execution_id

    @property
    def waits_for(self) -> str | None:
        """``operator`` (something waits for an operator: :attr:`parked`),
        ``approval`` (the refund waits for a person), or ``None`` (finished or still
        moving)."""
        if self.parked:
            return "operator"
        if self.detail is not None and self.detail.record.status is ExecutionStatus.WAITING:
            return "approval"
        return None

    @property
    def is_finished(self) -> bool:
        """True once the execution finished (completed, failed, cancelled)."""
        return self.detail is not None and self.detail.record.is_finished


_FACTS = {
    agent_session.MACHINE: MachineFacts(agent_session.TABLE),
    tool_call.MACHINE: MachineFacts(tool_call.TABLE),
}


def _report(
    store: ExecutionStore, db_path: str, execution_id: str | None, *, at_rest: bool, resumed: bool
) -> DemoReport:
    if execution_id is None:
        return DemoReport(db_path, None, at_rest=at_rest, resumed=resumed)
    detail = describe_execution(store, execution_id, db_path=db_path, app_spec=DEMO_APP)
    related = [detail] + [
        describe_execution(store, child, db_path=db_path, app_spec=DEMO_APP)
        for child in (detail.agent.tool_calls if detail.agent is not None else ())
    ]
    parked = tuple(d for d in related if d.needs_operator)
    return DemoReport(db_path, detail, parked, at_rest=at_rest, resumed=resumed)


def latest_execution_id(store: ExecutionStore) -> str | None:
    """The id of the demo agent's newest execution, or None."""
    rows = store.execution_rows(machine=agent_session.MACHINE, exclusive_key=DEMO_AGENT_ID)
    return str(rows[-1]["execution_id"]) if rows else None


def start_demo(
    db_path: str,
    *,
    wait_seconds: float = 60.0,
    on_event: Listener | None = None,
    faults: FaultPlan | None = None,
) -> DemoReport:
    """Create the demo agent in ``db_path`` (the file is created if missing) or load
    it, and run an execution on :data:`DEMO_INPUT` until it rests — or, when a crash
    left one active, resume that one instead (``resumed`` in the report).

    Args:
        db_path: the store file.
        wait_seconds: how long to wait for the execution to rest.
        on_event: receives the agent's events (loop thread).
        faults: crash points (tests only).

    Raises:
        StorageError, SchemaVersionError: the store cannot be opened.
        AgentBusyError: another process runs the demo's execution right now.

    Durability: every step is committed as it happens; the execution lives on in the
    store whatever this process does next.
    """
    from phronomy_fsm.agent.agent import Agent
    from phronomy_fsm.agent.runtime import AgentRuntime
    from phronomy_fsm.store.sqlite import SqliteBarrierStore

    os.makedirs(os.path.dirname(os.path.abspath(db_path)), exist_ok=True)
    wake = threading.Event()

    def listen(event: AgentEvent) -> None:
        wake.set()
        if on_event is not None:
            on_event(event)

    store = SqliteBarrierStore(db_path, faults=faults)
    try:
        runtime = AgentRuntime(store, faults=faults, max_workers=4, name="phronomy-demo")
        try:
            options = {"runtime": runtime, "on_event": listen, **demo_options(db_path)}
            try:
                agent = Agent.create(DEMO_AGENT_ID, **options)
            except AgentExistsError:
                agent = Agent.load(DEMO_AGENT_ID, **options)
            active = agent.active_execution()
            resumed = active is not None
            if active is None:
                execution_id = agent.submit(DEMO_INPUT)
            else:
                execution_id = active.execution_id
            at_rest = wait_until_rest(
                store,
                [execution_id],
                _FACTS,
                deadline=time.monotonic() + wait_seconds,
                wake=wake,
            )
        finally:
            runtime.close(timeout_seconds=5)
        return _report(store, db_path, execution_id, at_rest=at_rest, resumed=resumed)
    finally:
        store.close()


def resume_demo(
    db_path: str,
    *,
    wait_seconds: float = 60.0,
    on_event: Listener | None = None,
    faults: FaultPlan | None = None,
) -> DemoReport:
    """Recover the demo's store in this process with the demo application until its
    executions rest (:func:`phronomy_fsm.operator.recover_store`): a decision that
    ``phronomy-fsm approve`` wrote meanwhile is applied, and the execution goes on —
    to its end, to another approval, or to an operator.

    Raises:
        NotFoundError: no store at ``db_path``, or no demo execution in it.
        StorageError, SchemaVersionError: the store cannot be opened.
    """
    from phronomy_fsm.agent.runtime import require_store_file
    from phronomy_fsm.store.sqlite import SqliteBarrierStore

    require_store_file(db_path)
    app = create_app(db_path, on_event=on_event)
    store = SqliteBarrierStore(db_path, faults=faults)
    try:
        execution_id = latest_execution_id(store)
        if execution_id is None:
            raise NotFoundError(
                f"no demo execution in {db_path}; run `phronomy-fsm demo --db {db_path}` first",
                path=db_path,
            )
        report = recover_store(
            store,
            app,
            wait_seconds=wait_seconds,
            wait_for=[execution_id],
            db_path=db_path,
            app_spec=DEMO_APP,
            faults=faults,
        )
        entry = report.get(execution_id)
        at_rest = entry is None or entry.at_rest
        return _report(store, db_path, execution_id, at_rest=at_rest, resumed=True)
    finally:
        store.close()


def format_event(event: AgentEvent) -> str | None:
    """One readable line for a demo event (None for tokens)."""
    from phronomy_fsm.agent import events

    if isinstance(event, events.ToolCalled):
        return f"event: tool_call {event.name} {event.arguments}"
    if isinstance(event, events.ToolResulted):
        return f"event: tool_result {event.tool_name} ({event.status}) -> {event.content}"
    if isinstance(event, events.ApprovalRequired):
        items = ", ".join(i.tool_name for i in event.items)
        return f"event: approval_required for {items}"
    if isinstance(event, events.RecoveryRequired):
        return f"event: recovery_required {event.reason}"
    if event.terminal:
        return f"event: {event.type.value}"
    return None


__all__ = [
    "DEFAULT_DB",
    "DEMO_AGENT_ID",
    "DEMO_APP",
    "DEMO_INPUT",
    "ORDERS",
    "SYSTEM_PROMPT",
    "DemoReport",
    "create_app",
    "demo_options",
    "demo_provider",
    "demo_tools",
    "format_event",
    "latest_execution_id",
    "ledger_path",
    "resume_demo",
    "start_demo",
]
