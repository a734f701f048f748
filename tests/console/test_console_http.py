"""The console over HTTP (a real uvicorn server on 127.0.0.1, httpx as the client), on
SQLite and PostgreSQL: what the pages show, that every write goes through the operator
library with the page's revision, and that every refusal — no token, a forged or missing
CSRF token, a foreign origin or host, read-only mode, an unknown id, a stale revision,
a result that is not JSON, an undeclared event — shows the error and writes nothing
(checked by reading the store back)."""

from __future__ import annotations

import html
import queue
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from markupsafe import escape

from phronomy_fsm.console.security import (
    SESSION_COOKIE,
    SESSION_IDLE_SECONDS,
    SESSION_LIFETIME_SECONDS,
)
from phronomy_fsm.errors import ConfigurationError
from phronomy_fsm.store.open import open_store
from tests.console.conftest import TOKEN, snapshot
from tests.console.stores import HOSTILE_ID, order_runtime

ROOT = Path(__file__).resolve().parents[2]


def csrf_of(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found, "no CSRF field on the page"
    return found.group(1)


@contextmanager
def signed_in(url: str, token: str = TOKEN) -> Iterator[httpx.Client]:
    """A client whose session signed in with ``token``."""
    with httpx.Client(base_url=url, timeout=20) as client:
        page = client.get("/login")
        reply = client.post(
            "/login", data={"csrf": csrf_of(page.text), "token": token, "next": "/"}
        )
        assert reply.status_code == 303, reply.text
        yield client


def form_fields(page: str, action: str, event: str | None = None) -> dict[str, str]:
    """The hidden fields of the form posting to ``action`` (for ``event``)."""
    forms = re.findall(
        r'<form method="post" action="' + re.escape(action) + r'".*?</form>', page, re.DOTALL
    )
    for form in forms:
        fields = {
            html.unescape(name): html.unescape(value)
            for name, value in re.findall(
                r'<input type="hidden" name="([^"]+)" value="([^"]*)"', form
            )
        }
        if event is None or fields.get("event") == event:
            return fields
    raise AssertionError(f"no form for {action} {event}")


def record_of(target: str, execution_id: str) -> Any:
    store = open_store(target, read_only=True)
    try:
        return store.load_record(execution_id)
    finally:
        store.close()


def signals_of(target: str, execution_id: str) -> list[Any]:
    store = open_store(target, read_only=True)
    try:
        return store.list_signals(execution_id)
    finally:
        store.close()


# ------------------------------------------------------------------ reading


def test_the_list_counts_filters_pages_and_marks_what_needs_an_operator(
    populated: str, serve: Any
) -> None:
    with serve(populated) as served, httpx.Client(base_url=served.url, timeout=20) as client:
        page = client.get("/")
        assert page.status_code == 200
        text = page.text
        assert "1</strong> execution waits for an operator" in text
        assert 'data-test="count-waiting">waiting <span>2</span>' in text
        assert 'data-test="count-recovery_required">recovery_required <span>1</span>' in text
        row = re.search(r'<tr class="[^"]*needs-operator[^"]*" data-execution="([^"]+)"', text)
        assert row and row.group(1) == "order-a"
        waiting = client.get("/", params={"status": "waiting"}).text
        shown = [html.unescape(i) for i in re.findall(r'data-execution="([^"]+)"', waiting)]
        assert shown == ["order-1", HOSTILE_ID]
        paged = client.get("/", params={"limit": "1", "offset": "1"}).text
        assert len(re.findall(r"data-execution=", paged)) == 1
        assert "2-2 of 4" in paged and 'rel="prev"' in paged and 'rel="next"' in paged
        assert "No execution matches" in client.get("/", params={"machine": "nope"}).text
        keyed = client.get("/", params={"key": "customer-7"}).text  # no order has a key
        assert "No execution matches" in keyed and "count-waiting" not in keyed
        assert client.get("/", params={"limit": "x"}).status_code == 400
        live = client.get("/live").json()["value"]
        assert live == client.get("/live").json()["value"]


def test_an_execution_page_shows_its_diagram_timeline_recovery_and_escapes_hostile_ids(
    populated: str, serve: Any
) -> None:
    with serve(populated) as served, httpx.Client(base_url=served.url, timeout=20) as client:
        parked = client.get("/execution", params={"id": "order-a"})
        assert parked.status_code == 200
        text = parked.text
        assert "<svg" in text and 'id="state:announcing_charge"' in text
        assert "effect charge_card (at_most_once) in state charging" in text
        assert "succeeded, failed, not_performed, retry" in text
        assert re.findall(r'<td class="mono">(@\w+|\w+)</td><td class="mono">', text) == [
            "@recovery", "charge", "@start",
        ]  # fmt: skip
        assert "charge_card-" in text  # the pending effect's idempotency key
        # the command to run names the store as --db opens it (a DSN, not host:port/db)
        assert f"phronomy-fsm resolve order-a --db {escape(populated)} " in text
        assert "Sign in to resolve" in text and 'action="/execution/resolve"' not in text
        hostile = client.get("/execution", params={"id": HOSTILE_ID})
        assert hostile.status_code == 200
        assert "<script>alert" not in hostile.text
        assert str(escape(HOSTILE_ID)) in hostile.text
        missing = client.get("/execution", params={"id": "nope"})
        assert missing.status_code == 404 and "execution nope does not exist" in missing.text
        assert client.get("/execution").status_code == 400
        headers = parked.headers
        assert "script-src 'self'" in headers["content-security-policy"]
        assert headers["x-frame-options"] == "DENY"
        assert "HttpOnly" in headers["set-cookie"] and "SameSite=Strict" in headers["set-cookie"]


# ------------------------------------------------------------------ writing


def test_a_signal_goes_through_the_operator_library_with_the_pages_revision(
    populated: str, serve: Any, tmp_path: Path
) -> None:
    with serve(populated) as served, signed_in(served.url) as client:
        page = client.get("/execution", params={"id": "order-1"}).text
        fields = form_fields(page, "/execution/signal", "approve")
        assert fields["expected_revision"] == "3"
        reply = client.post("/execution/signal", data={**fields, "payload": '{"by": "dana"}'})
        assert reply.status_code == 303
        assert reply.headers["location"].startswith("/execution?id=order-1&sent=")
        [signal] = signals_of(populated, "order-1")
        assert (signal.event, signal.payload, signal.expected_revision, signal.sender) == (
            "approve",
            {"by": "dana"},
            3,
            "console",
        )
        again = client.post("/execution/signal", data={**fields, "payload": '{"by": "dana"}'})
        assert again.status_code == 303  # the same form again: the same signal, no second
        assert len(signals_of(populated, "order-1")) == 1
        shown = client.get(reply.headers["location"]).text
        assert "Sent signal #" in shown and "(approve): pending" in shown
        with order_runtime(populated, tmp_path) as (runtime, waiter):
            runtime.recover()
            waiter.wait("finished", "order-1")
        assert record_of(populated, "order-1").status.value == "completed"


def test_resolve_and_cancel_write_what_the_forms_say(populated: str, serve: Any) -> None:
    with serve(populated) as served, signed_in(served.url) as client:
        page = client.get("/execution", params={"id": "order-a"}).text
        fields = form_fields(page, "/execution/resolve")
        assert (fields["expected_revision"], fields["subject"]) == ("2", "effect:charge_card")
        reply = client.post(
            "/execution/resolve",
            data={**fields, "outcome": "succeeded", "result": '{"charged_cents": 1500}'},
        )
        assert reply.status_code == 303, reply.text
        [resolution] = signals_of(populated, "order-a")
        assert resolution.kind.value == "resolution"
        assert resolution.payload == {
            "outcome": "succeeded",
            "result": {"charged_cents": 1500},
            "error": None,
        }
        page = client.get("/execution", params={"id": HOSTILE_ID}).text
        fields = form_fields(page, "/execution/cancel")
        reply = client.post("/execution/cancel", data={**fields, "reason": "customer left"})
        assert reply.status_code == 303, reply.text
        [cancel] = signals_of(populated, HOSTILE_ID)
        assert (cancel.kind.value, cancel.payload["reason"], cancel.expected_revision) == (
            "cancel",
            "customer left",
            3,
        )


BAD_FORMS = [
    # (action, execution, changes, status, message)
    (
        "/execution/signal",
        "order-1",
        {"execution_id": "nope"},
        404,
        "execution nope does not exist",
    ),
    ("/execution/signal", "order-1", {"expected_revision": "2"}, 409, "at revision 3, not 2"),
    ("/execution/signal", "order-1", {"event": "aprove"}, 400, "did you mean &#39;approve&#39;"),
    ("/execution/signal", "order-1", {"event": "charged"}, 400, "posted by the engine itself"),
    ("/execution/signal", "order-1", {"payload": "{nope"}, 400, "the payload is not JSON"),
    ("/execution/signal", "order-1", {"expected_revision": "x"}, 400, "must be a whole number"),
    ("/execution/signal", "order-2", {}, 409, "has finished"),
    ("/execution/resolve", "order-a", {"expected_revision": "1"}, 409, "at revision 2, not 1"),
    ("/execution/resolve", "order-a", {"result": "{not json"}, 400, "the result is not JSON"),
    ("/execution/resolve", "order-a", {"result": ""}, 400, "needs a result"),
    (
        "/execution/resolve",
        "order-a",
        {"subject": "effect:ship_parcel"},
        400,
        "not effect:ship_parcel",
    ),
    (
        "/execution/resolve",
        "order-a",
        {"outcome": "maybe"},
        400,
        "outcome &#39;maybe&#39; is not allowed",
    ),
    ("/execution/cancel", "order-1", {"expected_revision": "0"}, 409, "at revision 3, not 0"),
]


@pytest.mark.parametrize(
    ("action", "execution_id", "changes", "status", "message"),
    BAD_FORMS,
    ids=[f"{a.rsplit('/', 1)[1]}-{'-'.join(c) or e}" for a, e, c, _, _ in BAD_FORMS],
)
def test_bad_input_shows_the_error_and_writes_nothing(
    populated: str,
    serve: Any,
    action: str,
    execution_id: str,
    changes: dict[str, str],
    status: int,
    message: str,
) -> None:
    with serve(populated) as served, signed_in(served.url) as client:
        page = client.get("/execution", params={"id": execution_id}).text
        if action == "/execution/signal" and execution_id == "order-2":
            fields = {
                "execution_id": "order-2",
                "event": "approve",
                "expected_revision": "5",
                "signal_id": "console-finished",
                "csrf": csrf_of(page),
            }
        else:
            fields = form_fields(page, action, "approve" if action.endswith("signal") else None)
        data = {"outcome": "succeeded", "result": "{}", "payload": "", **fields, **changes}
        before = snapshot(populated)
        reply = client.post(action, data=data)
        assert reply.status_code == status, reply.text
        assert message in reply.text, reply.text[:3000]
        assert 'data-test="error"' in reply.text
        assert snapshot(populated) == before


# ------------------------------------------------------------------ security


def test_writes_need_the_token_and_a_matching_csrf_token(populated: str, serve: Any) -> None:
    with serve(populated) as served:
        before = snapshot(populated)
        with httpx.Client(base_url=served.url, timeout=20) as anonymous:
            page = anonymous.get("/execution", params={"id": "order-1"}).text
            assert 'action="/execution/signal"' not in page  # no forms before signing in
            fields = {
                "csrf": csrf_of(anonymous.get("/login").text),  # this session's own token
                "execution_id": "order-1",
                "event": "approve",
                "expected_revision": "3",
                "signal_id": "forged",
            }
            refused = anonymous.post("/execution/signal", data=fields)
            assert refused.status_code == 403 and "sign in first" in refused.text
            wrong = anonymous.post(
                "/login", data={"csrf": fields["csrf"], "token": "not-the-token", "next": "/"}
            )
            assert wrong.status_code == 403 and "not the console&#39;s token" in wrong.text
        with signed_in(served.url) as client:
            page = client.get("/execution", params={"id": "order-1"}).text
            fields = form_fields(page, "/execution/signal", "approve")
            for csrf in ("forged", ""):
                refused = client.post("/execution/signal", data={**fields, "csrf": csrf})
                assert refused.status_code == 403 and "CSRF token does not match" in refused.text
            other = client.post(
                "/execution/signal", data=fields, headers={"origin": "http://evil.example"}
            )
            assert other.status_code == 403 and "cross-origin" in other.text
            rebound = client.get("/", headers={"host": "evil.example:8765"})
            assert rebound.status_code == 403
        assert snapshot(populated) == before


def test_a_cookie_kept_after_signing_out_is_signed_out_and_cannot_write(
    populated: str, serve: Any
) -> None:
    """Sign in, keep the session cookie, sign out, then replay the kept cookie (as a
    client that saved it would): it is an ordinary signed-out session, its forms are
    refused and the store shows nothing written (``docs/console.md``, "Security")."""
    with serve(populated) as served:
        before = snapshot(populated)
        with signed_in(served.url) as client:
            page = client.get("/execution", params={"id": "order-1"}).text
            assert "signed in: can act" in page
            signal = form_fields(page, "/execution/signal", "approve")
            cancel = form_fields(page, "/execution/cancel")
            kept = client.cookies[SESSION_COOKIE]
            out = client.post("/logout", data={"csrf": signal["csrf"]})
            assert out.status_code == 303
            assert client.cookies[SESSION_COOKIE] != kept
            assert "signed in: can act" not in client.get("/").text
        with httpx.Client(
            base_url=served.url, timeout=20, cookies={SESSION_COOKIE: kept}
        ) as replay:
            shown = replay.get("/execution", params={"id": "order-1"}).text
            assert "signed in: can act" not in shown and "sign in to act" in shown
            assert 'action="/execution/signal"' not in shown
            refused = replay.post(
                "/execution/signal", data={**signal, "payload": '{"by": "kept cookie"}'}
            )
            assert refused.status_code == 403, refused.text
            assert "nothing was written" in refused.text
            refused = replay.post("/execution/cancel", data={**cancel, "reason": "kept cookie"})
            assert refused.status_code == 403, refused.text
        assert snapshot(populated) == before
        assert signals_of(populated, "order-1") == []
        assert record_of(populated, "order-1").status.value == "waiting"


def test_read_only_hides_and_refuses_every_write(populated: str, serve: Any) -> None:
    with serve(populated, read_only=True, token=None) as served:
        assert served.token is None
        with httpx.Client(base_url=served.url, timeout=20) as client:
            page = client.get("/execution", params={"id": "order-a"}).text
            assert "read-only" in page
            assert 'action="/execution/' not in page and "Sign in" not in page
            before = snapshot(populated)
            assert 'name="csrf"' not in page  # no form at all
            fields = {
                "csrf": "anything",
                "execution_id": "order-1",
                "event": "approve",
                "expected_revision": "3",
                "signal_id": "ro",
            }
            for action in ("/execution/signal", "/execution/cancel", "/execution/resolve"):
                refused = client.post(action, data=fields)
                assert refused.status_code == 403 and "read-only" in refused.text
            login = client.post("/login", data={"csrf": fields["csrf"], "token": TOKEN})
            assert login.status_code == 403
            assert snapshot(populated) == before


def test_a_non_loopback_address_needs_allow_remote_and_a_token(populated_sqlite: str) -> None:
    from phronomy_fsm.console import prepare_console

    with pytest.raises(ConfigurationError, match="not a loopback address"):
        prepare_console(populated_sqlite, host="0.0.0.0", environ={})
    with pytest.raises(ConfigurationError, match="without a token"):
        prepare_console(populated_sqlite, host="0.0.0.0", allow_remote=True, environ={})
    with pytest.raises(ConfigurationError, match="too short"):
        prepare_console(populated_sqlite, token="short", environ={})
    remote = prepare_console(
        populated_sqlite, host="0.0.0.0", allow_remote=True, token=TOKEN, environ={}
    )
    try:
        assert remote.security.token_for_reads and remote.security.allowed_hosts is None
    finally:
        remote.stores.close()
    env = prepare_console(populated_sqlite, environ={"PHRONOMY_CONSOLE_TOKEN": TOKEN})
    try:
        assert (env.token, env.token_source) == (TOKEN, "PHRONOMY_CONSOLE_TOKEN")
    finally:
        env.stores.close()


def test_a_remote_console_asks_for_the_token_before_any_page(populated_sqlite: str) -> None:
    from starlette.testclient import TestClient

    from phronomy_fsm.console import prepare_console

    remote = prepare_console(
        populated_sqlite, host="0.0.0.0", allow_remote=True, token=TOKEN, environ={}
    )
    with TestClient(remote.app, base_url="http://console.example") as client:
        first = client.get("/", follow_redirects=False)
        assert (first.status_code, first.headers["location"]) == (303, "/login")
        page = client.get("/login").text
        client.post("/login", data={"csrf": csrf_of(page), "token": TOKEN, "next": "/"})
        assert "order-a" in client.get("/").text


# ------------------------------------------------------------------ the command


#: The environment of the console commands the tests start: no token unless a test adds one.
CLEAN_ENV = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}


def run_console(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``phronomy-fsm console ARGS`` run to its end (a refusal), with ``env`` added to
    :data:`CLEAN_ENV`."""
    return subprocess.run(
        [sys.executable, "-m", "phronomy_fsm.cli", "console", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**CLEAN_ENV, **(env or {})},
    )


class Lines:
    """The lines a process writes to ``stream``, read by a thread of their own so a
    test waits for the next one with a deadline instead of blocking for ever."""

    def __init__(self, stream: Any) -> None:
        self._queue: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, args=(stream,), daemon=True).start()

    def _pump(self, stream: Any) -> None:
        for line in stream:
            self._queue.put(line)
        self._queue.put(None)

    def next(self, timeout_seconds: float = 30.0) -> str:
        """The next line; AssertionError when none comes within ``timeout_seconds``
        or the stream ends."""
        try:
            line = self._queue.get(timeout=timeout_seconds)
        except queue.Empty:
            raise AssertionError(f"no line within {timeout_seconds} s") from None
        if line is None:
            raise AssertionError("the process closed its output")
        return line


@contextmanager
def console_process(
    *args: str, env: dict[str, str] | None = None
) -> Iterator[tuple[str, Lines, subprocess.Popen[str]]]:
    """``phronomy-fsm console --port 0 ARGS`` serving until the block ends: its base URL
    (read from its first line), the rest of its stdout, and the process; stopped with
    SIGTERM (exit 0) at the end."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "phronomy_fsm.cli", "console", "--port", "0", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**CLEAN_ENV, **(env or {})},
    )
    try:
        lines = Lines(proc.stdout)
        first = lines.next()
        url = re.search(r"(http://127\.0\.0\.1:\d+)/", first)
        assert url, first
        yield url.group(1), lines, proc
        proc.terminate()
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=20)


def test_the_console_command_serves_and_refuses_unsafe_settings(populated_sqlite: str) -> None:
    remote = run_console("--db", populated_sqlite, "--host", "0.0.0.0")
    assert remote.returncode == 1 and "not a loopback address" in remote.stderr
    missing = run_console("--db", str(Path(populated_sqlite).parent / "nope.db"))
    assert missing.returncode == 1 and "no store at" in missing.stderr

    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "phronomy_fsm.cli",
            "console",
            "--db",
            populated_sqlite,
            "--port",
            "0",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        url = re.search(r"(http://127\.0\.0\.1:\d+/)", first)
        assert url, first
        token = proc.stdout.readline()
        assert token.startswith("token (generated; sign in with it to act): ")
        generated = token.split(": ", 1)[1].strip()
        assert len(generated) >= 24
        with signed_in(url.group(1).rstrip("/"), generated) as client:
            assert "order-a" in client.get("/").text
        proc.terminate()  # SIGTERM: a requested stop, exit 0 (docs/console.md)
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=20)


def test_the_console_command_takes_the_token_from_the_environment_or_a_file(
    populated_sqlite: str, tmp_path: Path
) -> None:
    """``$PHRONOMY_CONSOLE_TOKEN`` and ``--token-file`` (a trailing newline stripped)
    each sign a browser in, and neither puts the token on the command line that every
    user of the machine can read (``/proc/PID/cmdline``, ``ps``)."""
    token_file = tmp_path / "console.token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    for args, env, source in (
        ((), {"PHRONOMY_CONSOLE_TOKEN": TOKEN}, "PHRONOMY_CONSOLE_TOKEN"),
        (("--token-file", str(token_file)), {}, "--token-file"),
    ):
        with console_process("--db", populated_sqlite, *args, env=env) as (url, lines, proc):
            assert lines.next() == f"token: from {source}\n"
            cmdline = Path(f"/proc/{proc.pid}/cmdline")
            if cmdline.exists():
                assert TOKEN not in cmdline.read_bytes().decode()
            with signed_in(url, TOKEN) as client:
                assert "signed in: can act" in client.get("/").text


def test_the_console_command_refuses_a_token_file_others_can_read(
    populated_sqlite: str, tmp_path: Path
) -> None:
    """A token file that group or others may read or write is refused (exit 1, saying
    how to fix it, never echoing the token); so are an empty or missing file, and
    ``--token`` with ``--token-file`` (exit 2)."""
    token_file = tmp_path / "console.token"
    token_file.write_text(TOKEN + "\n")
    for mode in (0o640, 0o604, 0o620):
        token_file.chmod(mode)
        refused = run_console("--db", populated_sqlite, "--token-file", str(token_file))
        assert refused.returncode == 1, refused.stderr
        assert str(token_file) in refused.stderr and "chmod 600" in refused.stderr
        assert TOKEN not in refused.stderr + refused.stdout
        assert "http://" not in refused.stdout  # it never listened
    empty = tmp_path / "empty.token"
    empty.write_text("\n")
    empty.chmod(0o600)
    refused = run_console("--db", populated_sqlite, "--token-file", str(empty))
    assert refused.returncode == 1 and "empty" in refused.stderr
    refused = run_console("--db", populated_sqlite, "--token-file", str(tmp_path / "nope"))
    assert refused.returncode == 1 and "cannot read the token file" in refused.stderr
    token_file.chmod(0o600)
    both = run_console("--db", populated_sqlite, "--token", TOKEN, "--token-file", str(token_file))
    assert both.returncode == 2 and "not both" in both.stderr


def test_the_console_help_says_where_a_token_may_come_from() -> None:
    from click.testing import CliRunner

    from phronomy_fsm.cli import main

    result = CliRunner().invoke(main, ["console", "--help"])
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    assert "--token-file PATH" in text and "PHRONOMY_CONSOLE_TOKEN" in text
    assert "process list" in text
    assert f"{SESSION_IDLE_SECONDS // 60} minutes without loading a page" in text
    assert f"{SESSION_LIFETIME_SECONDS // 3600} hours in all" in text
