"""The console in a real browser: headless Chromium (Debian's) driven by Playwright
against the console served on 127.0.0.1, over a populated store (order machine of
``tests/durable/order_app.py``) with a runtime of the order app running in this test
process — a live worker that applies what the console writes.

Nothing here sleeps: Playwright waits for elements and texts (``expect``), and the page
itself follows the store (``console.js`` reloads it when the execution's revision
changes). Screenshots go to ``$PHRONOMY_CONSOLE_SCREENSHOTS`` (``docs/console`` when
refreshing the documentation's pictures), else to the test's folder.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from phronomy_fsm import operator
from phronomy_fsm.store.open import open_store
from tests.console.conftest import TOKEN, snapshot
from tests.console.stores import order_runtime


def sign_in(page: Any, url: str, next_path: str = "/") -> None:
    """Sign the browser's session in through the login form."""
    page.goto(f"{url}/login?next={next_path}")
    page.get_by_label("Token").fill(TOKEN)
    page.locator("main form").get_by_role("button", name="Sign in").click()


def load(target: str, execution_id: str) -> Any:
    store = open_store(target, read_only=True)
    try:
        return store.load_record(execution_id), store.list_signals(execution_id)
    finally:
        store.close()


def test_an_operator_approves_a_waiting_order_in_the_browser_and_sees_it_complete(
    populated: str, backend: str, serve: Any, browser: Any, screenshots: Any, tmp_path: Path
) -> None:
    page = browser
    with order_runtime(populated, tmp_path) as (runtime, _waiter), serve(populated) as served:
        runtime.recover()  # a live worker owns every active order from now on
        page.goto(served.url + "/")
        expect(page.locator('[data-test="needs-operator"]')).to_contain_text("1 execution waits")
        expect(page.locator("tr.needs-operator")).to_have_attribute("data-execution", "order-a")

        page.get_by_role("link", name="order-1", exact=True).click()
        expect(page.locator('h1 [data-test="status"]')).to_have_text("waiting")
        expect(page.locator('[data-test="diagram"] svg')).to_be_visible()
        sign_in_link = page.locator('[data-test="actions"]').get_by_role("link", name="Sign in")
        expect(sign_in_link).to_be_visible()
        expect(page.locator("form.signal")).to_have_count(0)  # no forms before signing in

        sign_in_link.click()
        page.get_by_label("Token").fill(TOKEN)
        page.locator("main form").get_by_role("button", name="Sign in").click()
        expect(page).to_have_url(re.compile(r"/execution\?id=order-1$"))
        approve = page.locator('[data-test="signal-approve"]')
        expect(approve).to_be_visible()
        if backend == "sqlite":  # the documentation's picture names a store file
            screenshots(page, "order-waiting")

        approve.locator("textarea").fill('{"by": "dana"}')
        approve.get_by_role("button", name="approve").click()
        expect(page.locator('[data-test="notice"]')).to_contain_text("(approve)")
        # the live worker applies it; the page follows the store until it completes
        expect(page.locator('h1 [data-test="status"]')).to_have_text("completed", timeout=30_000)
        expect(page.locator('[data-test="state"]')).to_have_text("shipped")

    record, signals = load(populated, "order-1")
    assert (record.status.value, record.state) == ("completed", "shipped")
    assert record.context["decision"] == {"by": "dana"}
    [signal] = signals
    assert (signal.event, signal.sender, signal.expected_revision, signal.outcome) == (
        "approve",
        "console",
        3,
        "consumed",
    )


def test_a_stale_resolve_shows_the_conflict_and_writes_nothing(
    populated_sqlite: str, serve: Any, browser: Any, tmp_path: Path
) -> None:
    page = browser
    target = populated_sqlite
    with serve(target) as served:
        sign_in(page, served.url, "/execution?id=order-a")
        resolve = page.locator('[data-test="resolve-form"]')
        expect(resolve).to_be_visible()
        ledger = (tmp_path / "ledger.jsonl").read_text().splitlines()
        result = re.search(r'"result": (\{[^}]*\})', ledger[0])
        assert result
        resolve.locator("textarea").fill(result.group(1))  # the page is now being edited

        # a page older than the store: its form carries revision 1, the store is at 2
        before = snapshot(target)
        resolve.locator('input[name="expected_revision"]').evaluate("e => e.value = '1'")
        resolve.get_by_role("button", name=re.compile("Resolve")).click()
        error = page.locator('[data-test="error"]')
        expect(error).to_contain_text("conflict: execution order-a is at revision 2, not 1")
        expect(page.locator('[data-test="resolve-form"] textarea')).to_have_value(result.group(1))
        assert snapshot(target) == before

        # another operator answers first; this page is stale and says so, then refuses
        with order_runtime(target, tmp_path) as (runtime, waiter):
            page.locator('[data-test="resolve-form"] textarea').fill(result.group(1))
            store = runtime.store
            operator.resolve_execution(
                store, "order-a", expected_revision=2, outcome="not_performed", sender="other"
            )
            runtime.recover()
            waiter.wait("finished", "order-a")
            expect(page.locator("#live-banner")).to_be_visible(timeout=30_000)
            before = snapshot(target)
            page.locator('[data-test="resolve-form"]').get_by_role(
                "button", name=re.compile("Resolve")
            ).click()
            expect(page.locator('[data-test="error"]')).to_contain_text("has already finished")
            assert snapshot(target) == before
        record, signals = load(target, "order-a")
        assert record.status.value == "failed"
        assert [s.sender for s in signals] == ["other"]


def test_writes_need_the_token_and_a_valid_csrf_token_in_the_browser(
    populated_sqlite: str, serve: Any, browser: Any
) -> None:
    page = browser
    target = populated_sqlite
    with serve(target) as served:
        before = snapshot(target)
        page.goto(served.url + "/login")
        page.get_by_label("Token").fill("not-the-token-at-all")
        page.locator("main form").get_by_role("button", name="Sign in").click()
        expect(page.locator('[data-test="error"]')).to_have_text("that is not the console's token")
        # a forged POST from this very session (its own CSRF token) without signing in
        csrf = page.locator('input[name="csrf"]').first.input_value()
        forged = page.request.post(
            served.url + "/execution/signal",
            form={
                "csrf": csrf,
                "execution_id": "order-1",
                "event": "approve",
                "expected_revision": "3",
                "signal_id": "forged",
            },
        )
        assert forged.status == 403 and "sign in first" in forged.text()

        sign_in(page, served.url, "/execution?id=order-1")
        form = page.locator('[data-test="signal-approve"]')
        form.locator('input[name="csrf"]').evaluate("e => e.value = 'tampered'")
        form.get_by_role("button", name="approve").click()
        expect(page.locator('[data-test="error"]')).to_contain_text("CSRF token does not match")
        assert snapshot(target) == before


@pytest.mark.parametrize("read_only", [True])
def test_a_read_only_console_shows_no_forms(
    populated_sqlite: str, serve: Any, browser: Any, read_only: bool
) -> None:
    page = browser
    with serve(populated_sqlite, read_only=read_only, token=None) as served:
        page.goto(served.url + "/execution?id=order-a")
        expect(page.locator('[data-test="mode"]')).to_have_text("read-only")
        expect(page.locator('[data-test="recovery"]')).to_be_visible()
        expect(page.locator("form[method=post]")).to_have_count(0)
        expect(page.get_by_text("Sign in")).to_have_count(0)


def test_an_operator_plans_a_fork_sees_the_refusal_and_forks_in_the_browser(
    populated_sqlite: str, serve: Any, browser: Any, screenshots: Any
) -> None:
    """The fork form of a finished order (docs/operations.md, "Fork and restart from a
    past commit"): the plan from its wait lists the shipment that ran after it as
    refused, and nothing is written; naming the effect lets the fork be written under
    the id the plan showed, and the browser lands on the new execution."""
    page = browser
    target = populated_sqlite
    with serve(target) as served:
        sign_in(page, served.url, "/execution?id=order-2")
        form = page.locator('[data-test="fork-form"]')
        waited = form.locator("select[name=revision] option", has_text="@wait")
        form.locator("select[name=revision]").select_option(waited.get_attribute("value"))
        before = snapshot(target)
        form.get_by_role("button", name="Show the plan").click()
        plan = page.locator('[data-test="fork-plan"]')
        expect(plan).to_contain_text("ship_parcel")
        expect(plan.locator(".error")).to_contain_text("--allow-effect ship_parcel")
        expect(page.locator('[data-test="fork-confirm"]')).to_have_count(0)
        assert snapshot(target) == before  # a plan writes nothing

        form = page.locator('[data-test="fork-form"]')
        form.locator('input[name="allow_effects"]').fill("ship_parcel")
        form.get_by_role("button", name="Show the plan").click()
        confirm = page.locator('[data-test="fork-confirm"]')
        expect(confirm).to_be_visible()
        screenshots(page, "console-fork-plan")
        fork_id = page.locator('input[name="fork_id"]').input_value()
        confirm.click()
        expect(page).to_have_url(re.compile(re.escape(fork_id)))
        record, _ = load(target, fork_id)
        assert record.labels["forked_from"].startswith("order-2@")
        assert record.state == "awaiting_approval" and record.revision == 0
