"""Fixtures of the console's tests: a populated store on SQLite and PostgreSQL — order
executions (:mod:`tests.console.stores`) or agent executions
(:mod:`tests.console.agents`) —, the console served by uvicorn on a loopback socket in a
thread of the test, a snapshot of everything a write could change, and a headless
Chromium (Debian's ``/usr/bin/chromium``, driven by Playwright) with a fresh profile."""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs
import pytest

from phronomy_fsm.console import bind_socket, prepare_console
from phronomy_fsm.store.open import open_store
from tests.console.agents import populate_agents
from tests.console.stores import populate

CHROMIUM = os.environ.get("PHRONOMY_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TOKEN = "test-console-token-0123456789"


@attrs.frozen
class Served:
    """A console being served: its ``url`` (``http://127.0.0.1:PORT``) and ``token``."""

    url: str
    token: str | None
    prepared: Any


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    """The store backend: ``sqlite`` or ``postgres``."""
    return str(request.param)


@pytest.fixture
def target(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """The test's store: ``tmp_path/store.db`` or a fresh PostgreSQL database's DSN."""
    if backend == "sqlite":
        return str(tmp_path / "store.db")
    return str(request.getfixturevalue("pg_dsn"))


@pytest.fixture
def sqlite_target(tmp_path: Path) -> str:
    """A SQLite store for the tests that run on one backend only."""
    return str(tmp_path / "store.db")


@pytest.fixture
def populated(target: str, tmp_path: Path) -> str:
    """:func:`tests.console.stores.populate` on the test's store; its target."""
    populate(target, tmp_path)
    return target


@pytest.fixture
def populated_sqlite(sqlite_target: str, tmp_path: Path) -> str:
    """A populated SQLite store; its path."""
    populate(sqlite_target, tmp_path)
    return sqlite_target


@pytest.fixture
def agents_populated(target: str) -> str:
    """:func:`tests.console.agents.populate_agents` on the test's store; its target."""
    populate_agents(target)
    return target


@pytest.fixture
def agents_sqlite(sqlite_target: str) -> str:
    """Agent executions in a SQLite store; its path."""
    populate_agents(sqlite_target)
    return sqlite_target


@contextmanager
def serving(target: str, **options: Any) -> Iterator[Served]:
    """Serve a console over ``target`` on 127.0.0.1 (a free port) until the block
    ends. The socket listens before the server thread starts, so a request made at
    once waits in the backlog instead of failing."""
    import uvicorn

    options.setdefault("token", TOKEN)
    prepared = prepare_console(target, **options)
    sock = bind_socket("127.0.0.1", 0)
    port = sock.getsockname()[1]
    config = uvicorn.Config(prepared.app, log_level="warning", access_log=False, lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        yield Served(f"http://127.0.0.1:{port}", prepared.token, prepared)
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


@pytest.fixture
def serve() -> Callable[..., Any]:
    """``with serve(target, **prepare_console options) as served:``."""
    return serving


def snapshot(target: str) -> list[Any]:
    """Every execution (id, revision, status, state) and every signal of the store,
    read through a read-only connection: what a console write could have changed."""
    store = open_store(target, read_only=True)
    try:
        out: list[Any] = []
        for record in sorted(store.list_records(), key=lambda r: r.execution_id):
            out.append((record.execution_id, record.revision, record.status.value, record.state))
            out += [
                (s.seq, s.signal_id, s.kind.value, s.event, s.consumed_revision)
                for s in store.list_signals(record.execution_id)
            ]
        return out
    finally:
        store.close()


@pytest.fixture(scope="module")
def playwright_driver() -> Iterator[Any]:
    """Playwright's driver for one test module (skipped when Chromium is missing,
    except under CI, where ``tools/run.sh`` installs it). Not for the session: the sync
    API runs an event loop on the main thread until it stops, and later tests call
    ``asyncio.run`` there."""
    if not shutil.which(CHROMIUM) and not Path(CHROMIUM).exists():
        if os.environ.get("CI"):
            pytest.fail(f"Chromium is missing at {CHROMIUM}: tools/run.sh installs it")
        pytest.skip(f"Chromium is missing at {CHROMIUM} (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as driver:
        yield driver


@pytest.fixture
def browser(playwright_driver: Any, tmp_path: Path) -> Iterator[Any]:
    """A headless Chromium context with a fresh profile; its first page."""
    context = playwright_driver.chromium.launch_persistent_context(
        str(tmp_path / "chromium-profile"),
        executable_path=CHROMIUM,
        headless=True,
        args=CHROMIUM_ARGS,
        viewport={"width": 1400, "height": 900},
    )
    context.set_default_timeout(20_000)
    try:
        yield context.pages[0] if context.pages else context.new_page()
    finally:
        context.close()


@pytest.fixture
def screenshots(tmp_path: Path) -> Callable[[Any, str], None]:
    """``shot(page, name)``: a full-page screenshot into ``$PHRONOMY_CONSOLE_SCREENSHOTS``
    (``docs/console`` when refreshing the documentation's pictures), else ``tmp_path``."""
    folder = Path(os.environ.get("PHRONOMY_CONSOLE_SCREENSHOTS") or tmp_path / "shots")
    folder.mkdir(parents=True, exist_ok=True)

    def shot(page: Any, name: str) -> None:
        page.screenshot(path=str(folder / f"{name}.png"), full_page=True)

    return shot
