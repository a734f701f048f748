"""Agents in the console over HTTP (a real uvicorn server on 127.0.0.1, httpx as the
client), on SQLite and PostgreSQL: agents' executions are engine executions, listed and
shown like any other, with the agent presenter's conversation and approval form; a
decision goes through ``operator.approve_execution`` with the page's revision, and a
stale page gets 409 and writes nothing (checked by reading the store back)."""

from __future__ import annotations

import html
import re
from typing import Any

import httpx
import pytest

from phronomy_fsm import operator
from phronomy_fsm.durable.codec import json_data
from phronomy_fsm.store.open import open_store
from tests.console.agents import (
    BILLING_EXECUTION,
    CHARGE_ARGUMENTS,
    FAQ_EXECUTION,
    SUPPORT_ANSWER,
    SUPPORT_EXECUTION,
    SUPPORT_INPUT,
    support_agent,
    tool_call_of,
)
from tests.console.conftest import snapshot
from tests.console.test_console_http import csrf_of, form_fields, signed_in


def approval_form(page: str) -> tuple[dict[str, str], dict[str, str]]:
    """The approval form's hidden fields, and its items: tool name -> tool invocation id."""
    fields = form_fields(page, "/execution/approve")
    items = {
        name: html.unescape(item)
        for name, item in re.findall(r'data-test="item-(\w+)" data-item="([^"]+)"', page)
    }
    return fields, items


def stored(target: str, execution_id: str) -> tuple[Any, list[Any], list[Any]]:
    """The execution's record, signals and journal entries as the store has them."""
    store = open_store(target, read_only=True)
    try:
        return (
            store.load_record(execution_id),
            store.list_signals(execution_id),
            store.journal_entries(execution_id),
        )
    finally:
        store.close()


def test_agents_are_listed_with_who_they_wait_for(agents_populated: str, serve: Any) -> None:
    tool_call = tool_call_of(agents_populated, BILLING_EXECUTION, "charge_card")
    with serve(agents_populated) as served, httpx.Client(base_url=served.url) as client:
        text = client.get("/").text
        rows = dict(re.findall(r'data-execution="([^"]+)">(.*?)</tr>', text, re.DOTALL))
        assert set(rows) == {BILLING_EXECUTION, tool_call, FAQ_EXECUTION, SUPPORT_EXECUTION}
        assert "approval needed" in rows[SUPPORT_EXECUTION]
        assert (
            "operator needed" in rows[tool_call]
            and f"child of {BILLING_EXECUTION}" in rows[tool_call]
        )
        # its only tool call waits for an operator: it waits for that child
        assert "child needs operator" in rows[BILLING_EXECUTION]
        assert tool_call in rows[BILLING_EXECUTION]  # named in the badge's title
        assert "status-completed" in rows[FAQ_EXECUTION]
        mine = client.get("/", params={"agent": "support"}).text
        assert re.findall(r'data-execution="([^"]+)"', mine) == [SUPPORT_EXECUTION]


def test_a_waiting_agent_shows_its_conversation_and_the_approval_items(
    agents_populated: str, serve: Any
) -> None:
    with serve(agents_populated) as served:
        with httpx.Client(base_url=served.url) as anonymous:
            page = anonymous.get("/execution", params={"id": SUPPORT_EXECUTION}).text
            assert "Waits for a person's decision" in page
            assert 'action="/execution/approve"' not in page and "Sign in to decide" in page
            conversation = page[page.index('data-test="section-conversation"') :]
            conversation = html.unescape(conversation[: conversation.index("</section>")])
            assert [m for m in re.findall(r'<span class="role">(\w+)</span>', conversation)] == [
                "user",
                "assistant",
            ]
            assert SUPPORT_INPUT in conversation
            assert "I will refund the order and send you a voucher." in conversation
            assert 'calls issue_refund({"amount": 25.0, "order_id": "A1001"})' in conversation
            assert "52 input, 31 output tokens" in html.unescape(page)
            assert "phronomy-fsm approve support-1 --request" in page  # the CLI's commands
        with signed_in(served.url) as client:
            page = client.get("/execution", params={"id": SUPPORT_EXECUTION}).text
            fields, items = approval_form(page)
            record, _signals, _journal = stored(agents_populated, SUPPORT_EXECUTION)
            assert fields["expected_revision"] == str(record.revision)
            assert fields["request_id"] == json_data(record.context)["approval"]["request_id"]
            assert set(items) == {"issue_refund", "send_voucher"}
            assert set(items.values()) == set(json_data(record.context)["approval"]["items"])
            for item in items.values():
                assert page.count(f'name="item:{item}"') == 2  # approve and reject
            assert 'action="/execution/signal"' not in page  # approval_decided is not a signal


def test_approve_one_item_and_reject_the_other_through_the_form(
    agents_populated: str, serve: Any
) -> None:
    with serve(agents_populated) as served, signed_in(served.url) as client:
        page = client.get("/execution", params={"id": SUPPORT_EXECUTION}).text
        fields, items = approval_form(page)
        reply = client.post(
            "/execution/approve",
            data={
                **fields,
                f"item:{items['issue_refund']}": "approve",
                f"item:{items['send_voucher']}": "reject",
                "by": "dana",
                "decision": "items",
            },
        )
        assert reply.status_code == 303, reply.text
        shown = client.get(reply.headers["location"]).text
        assert "(approval_decided): pending" in shown
    record, [signal], _ = stored(agents_populated, SUPPORT_EXECUTION)
    assert (signal.event, signal.sender, signal.expected_revision) == (
        "approval_decided",
        "console",
        record.revision,
    )
    assert signal.payload["decisions"] == {
        items["issue_refund"]: True,
        items["send_voucher"]: False,
    }
    assert (signal.payload["request_id"], signal.payload["by"]) == (fields["request_id"], "dana")

    ran: list[Any] = []  # the agent's worker applies the decision
    with support_agent(agents_populated, ran) as agent:
        result = agent.wait(SUPPORT_EXECUTION, wait_seconds=30)
    assert (result.status.value, result.output) == ("completed", SUPPORT_ANSWER)
    assert [(name, arguments) for name, arguments, _key in ran] == [
        ("issue_refund", {"order_id": "A1001", "amount": 25.0})
    ]
    record, signals, journal = stored(agents_populated, SUPPORT_EXECUTION)
    [decision] = [s for s in signals if s.event == "approval_decided"]
    assert (record.status.value, decision.outcome) == ("completed", "consumed")
    results = {e.data["tool_name"]: e.data["status"] for e in journal if e.kind == "tool_result"}
    assert results == {"issue_refund": "completed", "send_voucher": "rejected"}


@pytest.mark.parametrize("how", ["older_revision", "decided_elsewhere", "whole_request"])
def test_a_stale_approval_page_gets_409_and_writes_nothing(
    agents_populated: str, serve: Any, how: str
) -> None:
    with serve(agents_populated) as served, signed_in(served.url) as client:
        page = client.get("/execution", params={"id": SUPPORT_EXECUTION}).text
        fields, items = approval_form(page)
        data = {**fields, **{f"item:{i}": "approve" for i in items.values()}, "decision": "items"}
        if how == "decided_elsewhere":  # another operator decides first, from the CLI's library
            store = open_store(agents_populated)
            try:
                operator.approve_execution(
                    store,
                    SUPPORT_EXECUTION,
                    approval_request_id=fields["request_id"],
                    approved=False,
                    sender="other",
                )
            finally:
                store.close()
            message = "was already decided"
        else:
            revision = int(fields["expected_revision"])
            data["expected_revision"] = str(revision - 1)
            message = f"is at revision {revision}, not {revision - 1}"
            if how == "whole_request":
                data["decision"] = "reject_all"
        before = snapshot(agents_populated)
        reply = client.post("/execution/approve", data=data)
        assert reply.status_code == 409, reply.text
        assert "conflict: " in reply.text and message in reply.text
        assert 'data-test="error"' in reply.text
        assert snapshot(agents_populated) == before
        _record, signals, _ = stored(agents_populated, SUPPORT_EXECUTION)
        assert [s.sender for s in signals] == (["other"] if how == "decided_elsewhere" else [])
        kept = 'value="approve" required checked' in reply.text  # the choices shown again
        assert kept is (how != "decided_elsewhere")


@pytest.mark.parametrize(
    ("changes", "status", "message"),
    [
        ({"decision": "maybe"}, 400, "decision must be one of"),
        ({"decision": "items"}, 400, "choose approve or reject for every tool call"),
        ({"item:refund": "approve", "decision": "items"}, 400, "must name every item"),
        ({"request_id": "other-request", "decision": "approve_all"}, 409, "does not match"),
    ],
    ids=["unknown-decision", "nothing-decided", "partial", "other-request"],
)
def test_a_bad_approval_form_writes_nothing(
    agents_sqlite: str, serve: Any, changes: dict[str, str], status: int, message: str
) -> None:
    with serve(agents_sqlite) as served, signed_in(served.url) as client:
        page = client.get("/execution", params={"id": SUPPORT_EXECUTION}).text
        fields, _items = approval_form(page)
        before = snapshot(agents_sqlite)
        reply = client.post("/execution/approve", data={**fields, **changes})
        assert reply.status_code == status, reply.text
        assert message in html.unescape(reply.text)
        assert snapshot(agents_sqlite) == before
        # approval_decided cannot be sent as a plain signal either
        forged = client.post(
            "/execution/signal",
            data={
                "csrf": csrf_of(page),
                "execution_id": SUPPORT_EXECUTION,
                "event": "approval_decided",
                "payload": '{"request_id": "x", "approved": true}',
                "expected_revision": fields["expected_revision"],
                "signal_id": "forged-decision",
            },
        )
        assert forged.status_code == 400 and "phronomy-fsm approve" in forged.text
        assert snapshot(agents_sqlite) == before


def test_a_parked_tool_call_shows_its_tool_and_the_resolve_form(
    agents_populated: str, serve: Any
) -> None:
    tool_call = tool_call_of(agents_populated, BILLING_EXECUTION, "charge_card")
    with serve(agents_populated) as served, signed_in(served.url) as client:
        page = client.get("/execution", params={"id": tool_call}).text
        text = html.unescape(page)
        section = text[text.index('data-test="section-tool-call"') :]
        section = section[: section.index("</section>")]
        assert "<th>tool</th><td>charge_card</td>" in section
        assert '"invoice_id": "INV-42"' in section and '"amount_cents": 1999' in section
        assert f'href="/execution?id={BILLING_EXECUTION}"' in section
        assert f"tool call {tool_call} of agent billing: charge_card" in text
        fields = form_fields(page, "/execution/resolve")
        assert fields["subject"] == f"tool_invocation:{tool_call}"
        assert 'placeholder="the tool&#39;s result as JSON' in page
        reply = client.post(
            "/execution/resolve",
            data={**fields, "outcome": "succeeded", "result": '{"charged": true, "by": "bank"}'},
        )
        assert reply.status_code == 303, reply.text
    record, [resolution], _ = stored(agents_populated, tool_call)
    assert record.status.value == "recovery_required"  # applied once a worker runs it
    assert resolution.kind.value == "resolution"
    assert resolution.payload["result"] == {"charged": True, "by": "bank"}
    assert (resolution.expected_revision, resolution.sender) == (record.revision, "console")
    assert json_data(record.context)["arguments"] == CHARGE_ARGUMENTS


def test_a_read_only_console_shows_the_approval_items_without_a_form(
    agents_sqlite: str, serve: Any
) -> None:
    with (
        serve(agents_sqlite, read_only=True, token=None) as served,
        httpx.Client(base_url=served.url) as client,
    ):
        page = client.get("/execution", params={"id": SUPPORT_EXECUTION}).text
        assert 'data-test="approval"' in page and "send_voucher" in page
        assert 'action="/execution/' not in page and "Sign in" not in page
