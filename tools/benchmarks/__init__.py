"""Benchmarks run by ``tools/bench.py``; one module per benchmark name."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: Names the folder benchmarks put their databases in (default: the current directory).
BENCH_DIR_VARIABLE = "PHRONOMY_BENCH_DIR"


def bench_folder(prefix: str) -> tempfile.TemporaryDirectory[str]:
    """A temporary folder for a benchmark's databases, removed when the ``with`` block
    ends: a hidden folder (``prefix`` starts with ``.``) of ``$PHRONOMY_BENCH_DIR`` or,
    without it, of the current directory, so the disk measured is the one you run from
    (``docs/performance.md``)."""
    return tempfile.TemporaryDirectory(
        dir=os.environ.get(BENCH_DIR_VARIABLE) or os.getcwd(), prefix=prefix
    )


#: ``measure(store, target, folder, side, args) -> figures``: one side of a benchmark
#: that runs the same measurement on each store (``target`` a file path or a DSN).
Measure = Callable[[Any, str, Path, str, Any], dict[str, Any]]


def on_sqlite(folder: Path, name: str, measure: Measure, args: Any) -> dict[str, Any]:
    """``measure`` on a SQLite store in ``folder/<name>.db`` (``synchronous=FULL``)."""
    from phronomy_fsm.store import SqliteBarrierStore

    path = folder / f"{name}.db"
    with SqliteBarrierStore(path) as store:
        return measure(store, str(path), folder, "sqlite", args)


def on_postgres(folder: Path, name: str, measure: Measure, args: Any) -> dict[str, Any]:
    """``measure`` on a new PostgreSQL database (``synchronous_commit=on``): on the
    server ``PHRONOMY_TEST_POSTGRES_DSN`` names, or one started in ``folder`` for it."""
    from phronomy_fsm.store.postgres import PostgresStore
    from phronomy_fsm.store.postgres.server import (
        LocalPostgres,
        create_database,
        server_from_environment,
    )

    admin = server_from_environment()
    server = None
    if admin is None:
        server = LocalPostgres(base_dir=folder).start()
        admin = server.dsn
    try:
        dsn = create_database(admin, f"{name}_{os.getpid()}")
        with PostgresStore(dsn) as store:
            return measure(store, dsn, folder, "postgres", args)
    finally:
        if server is not None:
            server.stop()
