"""Agent executions for the console's tests: real runs of scripted agents on the durable
engine, on SQLite or PostgreSQL, left with no process running them.

:func:`populate_agents` leaves, in the store ``target``:

- agent :data:`SUPPORT` (``support-1``): ``waiting`` in ``suspended`` — its LLM
  asked for two tool calls that both need a person, ``issue_refund`` and
  ``send_voucher`` (one approval request, two items);
- agent :data:`BILLING` (``billing-1``): its ``charge_card`` tool call (a ``tool_call``
  child execution) is parked in ``recovery_required``: the runtime stopped while the
  tool ran, and a recovery found the at_most_once call with no outcome;
- agent :data:`FAQ` (``faq-1``): ``completed`` with a plain answer.

:func:`support_agent` loads the support agent on a live runtime (what the browser test
runs while the console approves), its tools recording what they ran.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from phronomy_fsm.agent import Agent, AgentRuntime, Reply, ScriptedProvider, Tool, Usage
from phronomy_fsm.durable.codec import json_data
from phronomy_fsm.store.open import open_store

SUPPORT, BILLING, FAQ = "support", "billing", "faq"
SUPPORT_EXECUTION, BILLING_EXECUTION, FAQ_EXECUTION = "support-1", "billing-1", "faq-1"
SUPPORT_INPUT = "Order A1001 arrived broken. Refund it, and send me a voucher?"
REFUND_ARGUMENTS = {"order_id": "A1001", "amount": 25.0}
VOUCHER_ARGUMENTS = {"customer_id": "c-7", "percent": 10}
CHARGE_ARGUMENTS = {"invoice_id": "INV-42", "amount_cents": 1999}
SUPPORT_ANSWER = "I refunded $25.00 for order A1001; the voucher was not approved."
OBJECT = {"type": "object", "additionalProperties": True}


def support_provider() -> ScriptedProvider:
    """The support agent's LLM: two tool calls needing approval, then the answer."""
    return ScriptedProvider(
        [
            Reply(
                content="I will refund the order and send you a voucher.",
                tool_calls=(
                    ("issue_refund", REFUND_ARGUMENTS),
                    ("send_voucher", VOUCHER_ARGUMENTS),
                ),
                usage=Usage(52, 31),
            ),
            Reply(content=SUPPORT_ANSWER),
        ],
        model="scripted-support",
    )


def support_tools(ran: list[tuple[str, Any, str]]) -> list[Tool]:
    """``issue_refund`` and ``send_voucher``, both needing a person's approval; each
    appends ``(tool, arguments, idempotency key)`` to ``ran``."""

    def tool(name: str, description: str) -> Tool:
        def run(arguments: Any, context: Any) -> Any:
            ran.append((name, arguments, context.idempotency_key))
            return {"done": name, "id": "R-" + context.idempotency_key[-6:]}

        return Tool(name, run, description, OBJECT, requires_approval=True)

    return [
        tool("issue_refund", "Refund an order."),
        tool("send_voucher", "Send the customer a voucher."),
    ]


class _Announced:
    """An agent listener that lets a test wait for one event type."""

    def __init__(self, event_type: str) -> None:
        self.event_type = event_type
        self.seen = threading.Event()

    def __call__(self, event: Any) -> None:
        if event.type.value == self.event_type:
            self.seen.set()

    def wait(self) -> None:
        assert self.seen.wait(30), f"no {self.event_type} event"


@contextmanager
def agent_runtime(target: str, *, close_seconds: float = 10.0) -> Iterator[AgentRuntime]:
    """An agent runtime on the store ``target``, closed at the end of the block
    (waiting up to ``close_seconds`` for its executions to rest)."""
    runtime = AgentRuntime(open_store(target), own_store=True)
    try:
        yield runtime
    finally:
        runtime.close(timeout_seconds=close_seconds)


@contextmanager
def support_agent(target: str, ran: list[tuple[str, Any, str]]) -> Iterator[Agent]:
    """The support agent loaded on a live runtime: its waiting execution is this
    runtime's to run (a decision written by the console is applied here)."""
    with agent_runtime(target) as runtime:
        yield Agent.load(
            SUPPORT, provider=support_provider(), tools=support_tools(ran), runtime=runtime
        )


def _park_a_tool_call(target: str) -> None:
    started, release = threading.Event(), threading.Event()

    def stuck(arguments: Any, context: Any) -> Any:
        started.set()
        release.wait(30)  # like a process about to die: the result never commits
        return {"charged": True}

    def charge_tool(fn: Any) -> Tool:
        return Tool("charge_card", fn, "Charge an invoice to the card on file.", OBJECT)

    script = [
        Reply(tool_calls=(("charge_card", CHARGE_ARGUMENTS),)),
        Reply(content="The invoice is paid."),
    ]
    # a short lease: the runtime that finds the call takes it over at once
    runtime = AgentRuntime(open_store(target), own_store=True, lease_seconds=0.5)
    agent = Agent.create(
        BILLING, provider=ScriptedProvider(script), tools=[charge_tool(stuck)], runtime=runtime
    )
    agent.invoke_async("Pay invoice INV-42", execution_id=BILLING_EXECUTION)
    assert started.wait(30)
    runtime.close(timeout_seconds=0.2)  # what a crash leaves: the call's outcome unknown
    release.set()
    parked = _Announced("recovery_resolution_required")
    # the agent's execution runs on while its tool call is parked: closing does not
    # wait for it to rest (AgentRuntime.close would wait its whole timeout)
    with agent_runtime(target, close_seconds=0.5) as again:
        Agent.load(
            BILLING,
            provider=ScriptedProvider(script),
            tools=[charge_tool(lambda a, c: {"charged": True})],
            runtime=again,
            on_event=parked,
        )
        parked.wait()


def populate_agents(target: str) -> None:
    """Fill the store ``target`` as the module docstring says."""
    _park_a_tool_call(target)
    with agent_runtime(target) as runtime:
        faq = Agent.create(
            FAQ,
            provider=ScriptedProvider([Reply(content="We ship within 2 days.")]),
            runtime=runtime,
        )
        faq.invoke("When do you ship?", execution_id=FAQ_EXECUTION)
        waiting = _Announced("approval_required")
        support = Agent.create(
            SUPPORT,
            provider=support_provider(),
            tools=support_tools([]),
            runtime=runtime,
            on_event=waiting,
        )
        support.invoke_async(SUPPORT_INPUT, execution_id=SUPPORT_EXECUTION)
        waiting.wait()


def tool_call_of(target: str, execution_id: str, tool_name: str) -> str:
    """The id of the ``tool_call`` child execution of ``execution_id`` for ``tool_name``."""
    store = open_store(target, read_only=True)
    try:
        children = store.list_records(parent_execution_id=execution_id)
        [child] = [c for c in children if json_data(c.context).get("tool_name") == tool_name]
        return str(child.execution_id)
    finally:
        store.close()
