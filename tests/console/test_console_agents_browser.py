"""Agents in the console in a real browser: headless Chromium (Debian's) driven by
Playwright against the console served on 127.0.0.1, over agent executions
(:mod:`tests.console.agents`) with a live :class:`~phronomy_fsm.agent.AgentRuntime` in
this test process — the worker that applies what the console writes.

Nothing here sleeps: Playwright waits for elements and texts, and the page follows the
store (``console.js`` reloads it when the execution's revision changes). Screenshots go
to ``$PHRONOMY_CONSOLE_SCREENSHOTS`` (``docs/console`` when refreshing the
documentation's pictures), else to the test's folder.
"""

from __future__ import annotations

import re
import sys
import threading
from pathlib import Path
from typing import Any

from playwright.sync_api import expect

from phronomy_fsm import operator
from phronomy_fsm.agent import (
    Agent,
    AgentRuntime,
    BudgetExhausted,
    Reply,
    ScriptedProvider,
    Tool,
)
from phronomy_fsm.durable.codec import json_data
from phronomy_fsm.store.open import open_store
from tests.console.agents import (
    BILLING,
    BILLING_EXECUTION,
    CHARGE_ARGUMENTS,
    OBJECT,
    SUPPORT_ANSWER,
    SUPPORT_EXECUTION,
    agent_runtime,
    support_agent,
    tool_call_of,
)
from tests.console.conftest import TOKEN, snapshot


def sign_in_here(page: Any) -> None:
    """Sign in through the page's own "sign in" link; back on the same page."""
    here = page.url
    page.locator("header").get_by_role("link", name=re.compile("sign in")).click()
    page.get_by_label("Token").fill(TOKEN)
    page.locator("main form").get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(here)


def load(target: str, execution_id: str) -> tuple[Any, list[Any]]:
    store = open_store(target, read_only=True)
    try:
        return store.load_record(execution_id), store.list_signals(execution_id)
    finally:
        store.close()


def test_an_operator_approves_one_tool_call_and_rejects_another_until_the_agent_completes(
    agents_populated: str, serve: Any, browser: Any, screenshots: Any
) -> None:
    page = browser
    ran: list[Any] = []
    with support_agent(agents_populated, ran), serve(agents_populated) as served:
        page.goto(served.url + "/")
        expect(page.locator("tr.needs-operator")).to_have_count(1)
        support_row = page.locator(f'tr[data-execution="{SUPPORT_EXECUTION}"]')
        expect(support_row).to_contain_text("approval needed")
        screenshots(page, "list")

        support_row.get_by_role("link", name=SUPPORT_EXECUTION).click()
        expect(page.locator('h1 [data-test="status"]')).to_have_text("waiting")
        conversation = page.locator('[data-test="section-conversation"]')
        expect(conversation).to_contain_text("I will refund the order and send you a voucher.")
        expect(conversation).to_contain_text('calls issue_refund({"amount": 25.0')
        expect(page.locator('[data-test="approval"]')).to_contain_text("send_voucher")
        expect(page.locator('[data-test="approval-form"]')).to_have_count(0)  # not signed in
        sign_in_here(page)

        form = page.locator('[data-test="approval-form"]')
        form.locator('[data-test="item-issue_refund"]').get_by_label("approve").check()
        form.locator('[data-test="item-send_voucher"]').get_by_label("reject").check()
        form.get_by_label("decided by").fill("dana")
        screenshots(page, "agent-waiting")
        form.get_by_role("button", name="Send these decisions").click()
        expect(page.locator('[data-test="notice"]')).to_contain_text("(approval_decided)")
        # the live worker applies it; the page follows the store until it completes
        expect(page.locator('h1 [data-test="status"]')).to_have_text("completed", timeout=30_000)
        expect(page.locator('[data-test="section-conversation"]')).to_contain_text(SUPPORT_ANSWER)
        expect(page.locator('[data-test="section-conversation"]')).to_contain_text(
            "The call to send_voucher was rejected and did not run."
        )
        screenshots(page, "agent-completed")

    record, signals = load(agents_populated, SUPPORT_EXECUTION)
    assert (record.status.value, record.state) == ("completed", "completed")
    [decision] = [s for s in signals if s.event == "approval_decided"]
    assert (decision.sender, decision.outcome, decision.payload["by"]) == (
        "console",
        "consumed",
        "dana",
    )
    assert sorted(decision.payload["decisions"].values()) == [False, True]
    assert [name for name, _arguments, _key in ran] == ["issue_refund"]


def test_a_stale_approval_page_shows_the_conflict_and_the_decision_on_its_way(
    agents_populated: str, serve: Any, browser: Any, screenshots: Any
) -> None:
    page = browser
    with serve(agents_populated) as served:
        page.goto(f"{served.url}/execution?id={SUPPORT_EXECUTION}")
        sign_in_here(page)
        form = page.locator('[data-test="approval-form"]')
        form.locator('[data-test="item-issue_refund"]').get_by_label("approve").check()
        form.locator('[data-test="item-send_voucher"]').get_by_label("approve").check()
        request_id = form.locator('input[name="request_id"]').input_value()

        store = open_store(agents_populated)  # another operator rejects the request first
        try:
            operator.approve_execution(
                store, SUPPORT_EXECUTION, approval_request_id=request_id, approved=False,
                by="lee", sender="other",
            )  # fmt: skip
        finally:
            store.close()
        before = snapshot(agents_populated)
        form.get_by_role("button", name="Send these decisions").click()
        error = page.locator('[data-test="error"]')
        expect(error).to_contain_text("conflict: approval request")
        expect(error).to_contain_text("was already decided")
        # the page as the store has it now: the other decision waits in the inbox, and
        # the request is shown without a form (deciding again would be refused)
        expect(page.locator('[data-test="pending-decision"]')).to_contain_text(
            "signal #1 by lee: reject the whole request"
        )
        expect(page.locator('[data-test="approval-form"]')).to_have_count(0)
        expect(page.locator('[data-test="signals"]')).to_contain_text("approval_decided")
        screenshots(page, "conflict")
        assert snapshot(agents_populated) == before
    _record, signals = load(agents_populated, SUPPORT_EXECUTION)
    assert [s.sender for s in signals] == ["other"]


def test_a_parked_tool_call_is_resolved_in_the_browser_and_its_agent_goes_on(
    agents_populated: str, serve: Any, browser: Any, screenshots: Any
) -> None:
    page = browser
    tool_call = tool_call_of(agents_populated, BILLING_EXECUTION, "charge_card")
    charged: list[Any] = []

    def charge(arguments: Any, context: Any) -> Any:
        charged.append(arguments)  # never called: the operator answers for the lost call
        return {"charged": True}

    with agent_runtime(agents_populated) as runtime, serve(agents_populated) as served:
        script = ScriptedProvider(
            [Reply(tool_calls=(("charge_card", CHARGE_ARGUMENTS),)), Reply(content="Paid.")]
        )
        agent = Agent.load(
            BILLING,
            provider=script,
            tools=[Tool("charge_card", charge, "Charge an invoice.", OBJECT)],
            runtime=runtime,
        )
        page.goto(f"{served.url}/execution?id={tool_call}")
        sign_in_here(page)
        expect(page.locator('[data-test="subject"]')).to_contain_text(
            f"tool call {tool_call} of agent billing: charge_card"
        )
        section = page.locator('[data-test="section-tool-call"]')
        expect(section).to_contain_text('"invoice_id": "INV-42"')
        resolve = page.locator('[data-test="resolve-form"]')
        expect(resolve.locator('input[name="subject"]')).to_have_value(
            f"tool_invocation:{tool_call}"
        )
        resolve.locator("textarea").fill('{"charged": true, "bank_reference": "B-77"}')
        screenshots(page, "tool-call-recovery")
        resolve.get_by_role("button", name=re.compile("Resolve")).click()
        expect(page.locator('[data-test="notice"]')).to_contain_text("(resolve: succeeded)")
        expect(page.locator('h1 [data-test="status"]')).to_have_text("completed", timeout=30_000)
        result = agent.wait(BILLING_EXECUTION, wait_seconds=30)
        assert (result.status.value, result.output) == ("completed", "Paid.")
    assert charged == []
    record, _signals = load(agents_populated, tool_call)
    assert json_data(record.context)["result"] == {"charged": True, "bank_reference": "B-77"}


def test_an_agent_waiting_for_a_budget_shows_spent_against_its_limits(
    agents_sqlite: str, serve: Any, browser: Any, screenshots: Any, tmp_path: Any
) -> None:
    """``docs/agent.md``, "Budgets": the execution page of an agent execution waiting in
    ``budget_exhausted`` shows what it spent against each limit, the pending request and
    the ``extend-budget`` command (the agent is the offline example's)."""
    examples = Path(__file__).resolve().parents[2] / "docs" / "examples"
    sys.path.insert(0, str(examples))
    try:
        import budget_agent  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(examples))
    arrived = threading.Event()
    seen: list[Any] = []

    def on_event(event: Any) -> None:
        if isinstance(event, BudgetExhausted):
            seen.append(event)
            arrived.set()

    runtime = AgentRuntime.for_store(agents_sqlite)
    try:
        agent = Agent.create(
            budget_agent.AGENT_ID, runtime=runtime, on_event=on_event, **budget_agent.options()
        )
        agent.invoke_async("Where are orders A1, A2 and A3?")
        assert arrived.wait(30)
    finally:
        runtime.close()
    execution_id = seen[0].execution_id
    with serve(agents_sqlite) as served:
        page = browser
        page.goto(served.url + f"/execution?id={execution_id}")
        expect(page.locator('h1 [data-test="status"]')).to_have_text("waiting")
        section = page.locator('[data-test="section-budget"]')
        expect(section).to_contain_text("max_llm_calls")
        expect(section).to_contain_text("spent 2 of 2")
        expect(section).to_contain_text("max_cost_usd")
        expect(section).to_contain_text(f"phronomy-fsm extend-budget {execution_id}")
        expect(section).to_contain_text("(pending)")
        expect(page.locator('[data-test="actions"] h2')).to_have_text(
            "Waits for a budget extension"
        )
        page.goto(served.url + "/")
        row = page.locator(f'tr[data-execution="{execution_id}"]')
        expect(row).to_contain_text("budget exhausted")
        page.goto(served.url + f"/execution?id={execution_id}")
        screenshots(page, "agent-budget")
