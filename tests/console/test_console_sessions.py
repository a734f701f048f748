"""The console's server-side sessions and where its write token comes from
(:mod:`phronomy_fsm.console.security`, ``docs/console.md`` "Security"): a signed-in
session ends on sign-out, after its idle time and after its lifetime, measured on a
manual clock (no sleeps); a token file must be private to its owner and loses its
trailing newline. The HTTP and command-line views of the same rules are in
``test_console_http.py``."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from phronomy_fsm.console import ConsoleSecurity, ConsoleStores, create_app
from phronomy_fsm.console.security import (
    SESSION_COOKIE,
    SessionRegistry,
    choose_token,
    read_token_file,
)
from phronomy_fsm.errors import ConfigurationError
from phronomy_fsm.runtime.clock import ManualClock
from tests.console.conftest import TOKEN, snapshot

# ------------------------------------------------------------------ the registry


def test_a_session_ends_when_revoked_idle_or_too_old() -> None:
    clock = ManualClock()
    registry = SessionRegistry(idle_seconds=60, lifetime_seconds=300, clock=clock)
    first = registry.sign_in()
    assert registry.is_signed_in(first)
    registry.revoke(first)
    assert not registry.is_signed_in(first)

    idle = registry.sign_in()
    clock.advance(59)
    assert registry.is_signed_in(idle)  # activity: the idle time starts again
    clock.advance(59)
    assert registry.is_signed_in(idle, touch=False)  # a look that is not activity
    clock.advance(2)
    assert not registry.is_signed_in(idle)  # 61 s since the last activity
    assert not registry.is_signed_in(idle)  # and it stays ended

    busy = registry.sign_in()
    for _ in range(5):
        clock.advance(59)
        assert registry.is_signed_in(busy)
    clock.advance(5)  # 300 s after signing in, however busy
    assert not registry.is_signed_in(busy)
    assert len(registry) == 0


def test_the_registry_stays_bounded() -> None:
    clock = ManualClock()
    registry = SessionRegistry(max_sessions=3, clock=clock)
    ids = []
    for _ in range(4):
        ids.append(registry.sign_in())
        clock.advance(1)
    assert len(registry) == 3
    assert not registry.is_signed_in(ids[0])  # the least recently used went first
    assert all(registry.is_signed_in(i) for i in ids[1:])


def test_the_registry_refuses_nonsense_limits() -> None:
    with pytest.raises(ValueError, match="idle_seconds"):
        SessionRegistry(idle_seconds=0)
    with pytest.raises(ValueError, match="lifetime_seconds"):
        SessionRegistry(idle_seconds=60, lifetime_seconds=30)
    with pytest.raises(ValueError, match="max_sessions"):
        SessionRegistry(max_sessions=0)


# ------------------------------------------------------------------ over HTTP


def _csrf(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found, "no CSRF field on the page"
    return found.group(1)


def test_an_idle_session_is_signed_out_and_cannot_write(populated_sqlite: str) -> None:
    """The idle time counts pages, not the page's own polling (``/live``): a page left
    open still ends its session."""
    clock = ManualClock()
    security = ConsoleSecurity(token=TOKEN, sessions=SessionRegistry(idle_seconds=600, clock=clock))
    app = create_app(ConsoleStores(populated_sqlite, read_only=False), security, clock=clock)
    before = snapshot(populated_sqlite)
    with TestClient(app, base_url="http://127.0.0.1") as client:
        login = client.get("/login").text
        client.post("/login", data={"csrf": _csrf(login), "token": TOKEN, "next": "/"})
        page = client.get("/execution", params={"id": "order-1"}).text
        assert "signed in: can act" in page
        fields: dict[str, Any] = dict(
            re.findall(
                r'<input type="hidden" name="([^"]+)" value="([^"]*)"',
                page.split('action="/execution/signal"', 1)[1].split("</form>", 1)[0],
            )
        )
        kept = client.cookies[SESSION_COOKIE]
        for _ in range(3):
            clock.advance(300)
            assert client.get("/execution/live", params={"id": "order-1"}).status_code == 200
        assert client.cookies[SESSION_COOKIE] == kept
        refused = client.post("/execution/signal", data=fields)
        assert refused.status_code == 403 and "sign in" in refused.text
        assert "signed in: can act" not in client.get("/").text
    assert snapshot(populated_sqlite) == before


# ------------------------------------------------------------------ the token


def test_a_token_file_loses_its_trailing_newline_and_must_be_private(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text(TOKEN + "\r\n")
    path.chmod(0o600)
    assert read_token_file(path) == TOKEN
    assert choose_token(None, token_file=path, environ={"PHRONOMY_CONSOLE_TOKEN": "x" * 20}) == (
        TOKEN,
        "--token-file",
    )
    path.chmod(0o640)
    with pytest.raises(ConfigurationError, match=r"group or others.*chmod 600"):
        read_token_file(path)
    path.chmod(0o600)
    path.write_text(f"{TOKEN}\nsecond line\n")
    with pytest.raises(ConfigurationError, match="one line"):
        read_token_file(path)
    path.write_text("short\n")
    with pytest.raises(ConfigurationError, match="too short"):
        choose_token(None, token_file=path, environ={})
    with pytest.raises(ConfigurationError, match="not both"):
        choose_token(TOKEN, token_file=path, environ={})
