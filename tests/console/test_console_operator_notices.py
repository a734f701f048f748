"""What the console tells an operator (issue 23 item 5), over HTTP on the stores of
:mod:`tests.console.stores` (real executions, no process running them): the result a
``succeeded`` answer needs, from the execution's own machine; that no live worker holds
a wait; the wait's timer shown as the engine's, not offered as a signal to send."""

from __future__ import annotations

import html
from typing import Any

import httpx

from .test_console_http import signed_in


def test_a_parked_effect_shows_the_result_its_own_machine_declares(
    populated_sqlite: str, serve: Any
) -> None:
    with serve(populated_sqlite) as served, signed_in(served.url) as c:
        text = html.unescape(c.get("/execution", params={"id": "order-a"}).text)
    assert (
        "JSON of type dict, delivered as the payload of event charged (The card was charged.)"
        in text
    )
    assert 'data-test="result-shape"' in text
    assert 'placeholder="JSON of type dict' in text and "e.g. {}" in text
    assert "charged_cents" not in text and "tool_calls" not in text  # no other machine's
    assert 'data-test="no-live-worker"' in text


def test_a_wait_no_worker_holds_says_so_and_its_timer_is_not_a_signal(
    populated_sqlite: str, serve: Any
) -> None:
    with serve(populated_sqlite) as served, signed_in(served.url) as c:
        page = html.unescape(c.get("/execution", params={"id": "order-1"}).text)
        listing = c.get("/", params={"status": "waiting"}).text
    assert 'data-test="signal-approve"' in page and 'data-test="signal-reject"' in page
    assert 'data-test="signal-approval_expired"' not in page  # the engine sends it
    assert "Its timer sends approval_expired at " in page
    assert "it is not a signal to send by hand" in page
    assert "No live worker holds this execution: a signal or decision sent now waits" in page
    assert listing.count('data-test="no-live-worker"') == 2  # order-1 and the hostile id


def test_a_live_worker_holding_the_wait_shows_no_notice(populated_sqlite: str, serve: Any) -> None:
    """With a worker running the store, its waits are held: no notice."""
    from phronomy_fsm.durable import DurableRuntime
    from phronomy_fsm.store.open import open_store
    from phronomy_fsm.testing.deadlines import wait_until
    from tests.durable.order_app import create_app

    app = create_app(populated_sqlite)
    runtime = DurableRuntime(open_store(populated_sqlite), machines=app.machines, own_store=True)
    try:
        runtime.recover()
        with serve(populated_sqlite) as served, httpx.Client(base_url=served.url, timeout=20) as c:

            def held() -> bool:
                page = c.get("/execution", params={"id": "order-1"}).text
                return 'data-test="no-live-worker"' not in page

            wait_until(held, 30, "order-1 held by the live runtime")
    finally:
        runtime.close(timeout_seconds=5)
