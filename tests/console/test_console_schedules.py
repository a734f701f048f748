"""The console's schedules page in a real browser (headless Chromium through
Playwright, the console served on 127.0.0.1): every schedule of the store with its
cron, zone, policy, catch-up window, next slot and counts, paused ones marked, and a
link to the newest execution a schedule started (``docs/operations.md``,
"Schedules")."""

from __future__ import annotations

from typing import Any

from playwright.sync_api import expect

from phronomy_fsm import operator
from phronomy_fsm.store.open import open_store


def test_the_schedules_page_lists_every_schedule_with_its_state(
    populated: str, serve: Any, browser: Any, screenshots: Any
) -> None:
    store = open_store(populated)
    try:
        operator.add_schedule(
            store, "nightly-orders", "order_flow", "0 2 * * *", timezone="Europe/Paris",
            context={"order_id": "n", "amount_cents": 100},
        )  # fmt: skip
        operator.add_schedule(
            store, "every-5s", "order_flow", "* * * * * */5", overlap="buffer_one",
            catchup_seconds=60, context={"order_id": "f", "amount_cents": 100}, paused=True,
        )  # fmt: skip
    finally:
        store.close()
    page = browser
    with serve(populated) as served:
        page.goto(served.url + "/")
        page.locator('[data-test="schedules-link"]').click()
        table = page.locator('[data-test="schedules"]')
        expect(table.locator("tbody tr")).to_have_count(2)
        nightly = table.locator('tr[data-schedule="nightly-orders"]')
        expect(nightly).to_contain_text("Europe/Paris")
        expect(nightly).to_contain_text("newest missed slot")
        expect(nightly.locator('[data-test="active"]')).to_be_visible()
        fast = table.locator('tr[data-schedule="every-5s"]')
        expect(fast.locator('[data-test="paused"]')).to_be_visible()
        expect(fast).to_contain_text("buffer_one")
        expect(fast).to_contain_text("60 s")
        screenshots(page, "schedules")
