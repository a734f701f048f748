"""Run a worker process over a store named by a path or a DSN (``phronomy-fsm worker``).

The durable engine's :class:`~phronomy_fsm.durable.worker.Worker` takes a store object;
opening one from a SQLite path or a ``postgresql://`` DSN is the stores' business
(:func:`phronomy_fsm.store.open.open_store`), which sits above the engine. This module
joins the two for the CLI and for applications that start workers themselves
(``docs/scale-out.md``).

Must not: print, exit or parse command-line text (the CLI does).
"""

from __future__ import annotations

import threading
from typing import Any

from phronomy_fsm.durable.app import load_app
from phronomy_fsm.durable.runtime import DEFAULT_LEASE_SECONDS
from phronomy_fsm.durable.worker import DEFAULT_CONCURRENCY, Worker
from phronomy_fsm.store.open import is_postgres_dsn, open_store


def run_worker(
    db: str,
    app_spec: str,
    *,
    concurrency: int = DEFAULT_CONCURRENCY,
    lease_seconds: float = DEFAULT_LEASE_SECONDS,
    notifications: bool = True,
    poll_seconds: float | None = None,
    scan_seconds: float | None = None,
    name: str = "phronomy-worker",
    probe_processes: bool = True,
    stop: threading.Event | None = None,
) -> None:
    """Run a :class:`~phronomy_fsm.durable.worker.Worker` over the store ``db`` until ``stop`` is set.

    What ``phronomy-fsm worker`` does (``docs/scale-out.md``, "Running workers").

    Args:
        db: a SQLite file path or a ``postgresql://`` DSN (opened here, closed when the
            worker stops).
        app_spec: the durable application factory ``MODULE:FACTORY``, called with ``db``.
        concurrency, lease_seconds, poll_seconds, scan_seconds, name, probe_processes:
            as :class:`~phronomy_fsm.durable.worker.Worker` (seconds are wall-clock
            seconds).
        notifications: use PostgreSQL ``LISTEN/NOTIFY`` (ignored for SQLite).
        stop: set it to stop the worker; ``None`` runs until the process ends.

    Raises:
        ConfigurationError: ``app_spec`` cannot be loaded or returns no DurableApp.
        StorageError, SchemaVersionError: the store cannot be opened.

    Concurrency: blocks the calling thread until ``stop`` is set.
    """
    options: dict[str, Any] = {}
    if is_postgres_dsn(db):
        options["notifications"] = notifications
    store = open_store(db, **options)
    try:
        app = load_app(app_spec, db)
        worker = Worker(
            store,
            app,
            concurrency=concurrency,
            lease_seconds=lease_seconds,
            poll_seconds=poll_seconds,
            scan_seconds=scan_seconds,
            name=name,
            own_store=True,
            probe_processes=probe_processes,
        )
    except BaseException:
        store.close()
        raise
    worker.run(stop)


__all__ = ["run_worker"]
