"""Fixtures shared by every test folder: a real PostgreSQL server for the tests that
ask for one.

``postgres`` (session scope) is the server named by ``PHRONOMY_TEST_POSTGRES_DSN`` or,
without it, one the session starts from the distribution's binaries in a temporary
directory on a free loopback port (``initdb`` and ``pg_ctl`` as user ``postgres`` when
run as root; ``synchronous_commit=on``), stopped at the end. Started only when a test
asks for it — except in a parallel run (pytest-xdist, ``-n N``): there the controlling
process starts one server before the workers and every worker uses it (each test gets a
database of its own), instead of one server per worker. Without binaries the PostgreSQL
tests are skipped with the reason — except under CI (``CI`` set), where that is a
failure: ``tools/run.sh`` installs them.
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

#: Set by the controlling process of a parallel run for its workers: the shared
#: server's ``{"dsn": ..., "data_dir": ...}`` (JSON). Not a user setting.
_SHARED = "PHRONOMY_TEST_POSTGRES_SHARED"


class SharedServer:
    """What a worker knows of the server its controller started: its ``data_dir``
    (tests that change ``pg_hba.conf`` need it)."""

    def __init__(self, data_dir: str) -> None:
        self.data_dir = Path(data_dir)


def pytest_configure(config: pytest.Config) -> None:
    """In the controlling process of an xdist run, start the shared server (module
    docstring) before the workers start; they inherit the environment."""
    if hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None):
        return
    if os.environ.get(_SHARED):
        return
    try:
        from phronomy_fsm.store.postgres.server import (
            LocalPostgres,
            PostgresUnavailable,
            server_from_environment,
        )
    except ImportError:
        return  # the workers skip (or, under CI, fail) as in a serial run
    if server_from_environment() is not None:
        return
    try:
        server = LocalPostgres().start()
    except PostgresUnavailable:
        return
    config._phronomy_postgres = server  # type: ignore[attr-defined]
    os.environ[_SHARED] = json.dumps({"dsn": server.dsn, "data_dir": str(server.data_dir)})


def pytest_unconfigure(config: pytest.Config) -> None:
    """Stop the shared server of an xdist run (controlling process only)."""
    server: Any = getattr(config, "_phronomy_postgres", None)
    if server is not None:
        os.environ.pop(_SHARED, None)
        server.stop()


class PostgresForTests:
    """The session's server: ``admin_dsn``, ``local`` (the LocalPostgres started, or
    ``None`` for a server named by the environment), and :meth:`database`."""

    def __init__(self, admin_dsn: str, local: object | None) -> None:
        self.admin_dsn = admin_dsn
        self.local = local
        self._names = itertools.count(1)

    def database(self, prefix: str = "t") -> str:
        """A new, empty database; its DSN."""
        from phronomy_fsm.store.postgres.server import create_database

        return create_database(self.admin_dsn, f"{prefix}_{os.getpid()}_{next(self._names)}")


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresForTests]:
    """The session's PostgreSQL server (module docstring)."""
    try:
        from phronomy_fsm.store.postgres.server import (
            LocalPostgres,
            PostgresUnavailable,
            server_from_environment,
        )
    except ImportError as exc:  # psycopg missing
        if os.environ.get("CI"):
            raise
        pytest.skip(f"PostgreSQL tests need psycopg: {exc}")
    dsn = server_from_environment()
    if dsn is not None:
        yield PostgresForTests(dsn, None)
        return
    shared = os.environ.get(_SHARED)
    if shared:
        server = json.loads(shared)
        yield PostgresForTests(server["dsn"], SharedServer(server["data_dir"]))
        return
    try:
        server = LocalPostgres().start()
    except PostgresUnavailable as exc:
        if os.environ.get("CI"):
            raise
        pytest.skip(str(exc))
    try:
        yield PostgresForTests(server.dsn, server)
    finally:
        server.stop()


@pytest.fixture
def pg_dsn(postgres: PostgresForTests) -> str:
    """A fresh database on the session's server, for one test."""
    return postgres.database()
