"""Fixtures shared by every test folder: a real PostgreSQL server for the tests that
ask for one.

``postgres`` (session scope) is the server named by ``PHRONOMY_TEST_POSTGRES_DSN`` or,
without it, one the session starts from the distribution's binaries in a temporary
directory on a free loopback port (``initdb`` and ``pg_ctl`` as user ``postgres`` when
run as root; ``synchronous_commit=on``), stopped at the end. Started only when a test
asks for it. Without binaries the PostgreSQL tests are skipped with the reason — except
under CI (``CI`` set), where that is a failure: ``tools/run.sh`` installs them.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator

import pytest


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
