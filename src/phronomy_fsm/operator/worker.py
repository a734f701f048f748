"""Run a worker process over a store named by a path or a DSN (``phronomy-fsm worker``).

The durable engine's :class:`~phronomy_fsm.durable.worker.Worker` takes a store object;
opening one from a SQLite path or a ``postgresql://`` DSN is the stores' business
(:func:`phronomy_fsm.store.open.open_store`), which sits above the engine. This module
joins the two for the CLI and for applications that start workers themselves
(``docs/scale-out.md``).

Must not: print, exit or parse command-line text (the CLI does).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

from phronomy_fsm.durable.app import load_app
from phronomy_fsm.durable.runtime import DEFAULT_LEASE_SECONDS
from phronomy_fsm.durable.worker import DEFAULT_CONCURRENCY, Worker
from phronomy_fsm.errors import PhronomyError
from phronomy_fsm.store.compact import check_policy
from phronomy_fsm.store.open import is_postgres_dsn, open_store

log = logging.getLogger("phronomy_fsm.worker")

#: How often a worker compacts its store when asked to and given no interval (seconds).
DEFAULT_COMPACT_EVERY_SECONDS = 3600.0


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
    compact_older_than_days: float | None = None,
    compact_keep_days: Mapping[str, float] | None = None,
    compact_every_seconds: float = DEFAULT_COMPACT_EVERY_SECONDS,
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
        compact_older_than_days: when given, the worker also compacts the store every
            ``compact_every_seconds`` (the first time at once) under this retention
            policy, with ``compact_keep_days`` (machine -> days) kept longer
            (``docs/store.md``, "Compaction"); a failed compaction is logged and tried
            again at the next interval.

    Raises:
        ValueError: a negative retention or a non-positive interval.
        ConfigurationError: ``app_spec`` cannot be loaded or returns no DurableApp.
        StorageError, SchemaVersionError: the store cannot be opened.

    Concurrency: blocks the calling thread until ``stop`` is set.
    """
    if compact_older_than_days is not None:
        keep = check_policy(compact_older_than_days, compact_keep_days)
        if not compact_every_seconds > 0:
            raise ValueError("compact_every_seconds must be greater than 0")
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
    stop = stop if stop is not None else threading.Event()
    if compact_older_than_days is not None:
        threading.Thread(
            target=_compact_every,
            args=(store, stop, compact_older_than_days, keep, compact_every_seconds),
            name="phronomy-compact",
            daemon=True,
        ).start()
    worker.run(stop)


def _compact_every(
    store: Any, stop: threading.Event, days: float, keep: dict[str, float], every: float
) -> None:
    """Compact ``store`` now and every ``every`` seconds until ``stop`` is set.
    Compactions by several workers at once are safe: each execution is removed once
    (``docs/store.md``, "Compaction")."""
    while not stop.is_set():
        try:
            report = store.compact(older_than_days=days, keep_days=keep)
        except (PhronomyError, OSError) as exc:
            log.warning("compaction failed (%s); trying again in %.0f s", exc, every)
        else:
            log.info(
                "compaction: removed %d finished executions (%d journal entries, %d signals)",
                report.removed_executions,
                report.removed_journal_entries,
                report.removed_signals,
            )
        stop.wait(every)


__all__ = ["run_worker"]
