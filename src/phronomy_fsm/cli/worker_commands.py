"""``phronomy-fsm worker``: run a worker process against a shared store.

``phronomy-fsm worker --db DSN --app MODULE:FACTORY [--concurrency N]`` registers the
application's machines, then claims and runs executions started by any process, until
SIGTERM or SIGINT: it then stops claiming, lets running executions reach a resting
point, and ends its lease so other workers take what is left at once
(``docs/scale-out.md``). Logs go to stderr, one line per claim, takeover and let-go.
"""

from __future__ import annotations

import logging
import signal
import threading
from typing import Any

import click

from phronomy_fsm.cli._common import fail, log_with_timestamps
from phronomy_fsm.errors import PhronomyError


@click.command("worker")
@click.option(
    "--db",
    "db",
    required=True,
    help="The store: a postgresql:// DSN (several workers, several hosts) or a SQLite file.",
)
@click.option(
    "--app",
    "app",
    required=True,
    help="Durable application factory MODULE:FACTORY: factory(db) -> DurableApp.",
)
@click.option(
    "--concurrency",
    type=click.IntRange(min=1),
    default=16,
    show_default=True,
    help="Most executions this worker runs at once (waiting or parked ones do not count).",
)
@click.option(
    "--lease-seconds",
    type=click.FloatRange(min=0.5),
    default=10.0,
    show_default=True,
    help="The worker's lease: a dead worker's executions are taken over after it.",
)
@click.option(
    "--scan-seconds",
    type=click.FloatRange(min=0.01),
    default=None,
    help="How often to look for runnable executions [default: a quarter of the lease].",
)
@click.option(
    "--poll-seconds",
    type=click.FloatRange(min=0.01),
    default=None,
    help="Inbox poll interval [default: 1 with notifications, else 0.05].",
)
@click.option(
    "--notify/--no-notify",
    default=True,
    show_default=True,
    help="Use PostgreSQL LISTEN/NOTIFY to hear signals and new work at once (turn it off "
    "behind a transaction pooler: polling only).",
)
@click.option("--name", default="phronomy-worker", show_default=True, help="Worker name.")
@click.option(
    "--probe-processes/--no-probe-processes",
    default=True,
    show_default=True,
    envvar="PHRONOMY_WORKER_PROBE_PROCESSES",
    help="Retire workers of this host whose process is gone without waiting for their "
    "lease (off: the lease path, as a worker on another host sees it).",
)
@click.option(
    "--compact-older-than-days",
    "compact_older_than_days",
    type=click.FloatRange(min=0),
    default=None,
    help="Also compact the store on a schedule: remove finished executions older than "
    "this many days (docs/store.md, Compaction).",
)
@click.option(
    "--compact-keep",
    "compact_keep",
    multiple=True,
    metavar="MACHINE=DAYS",
    help="With --compact-older-than-days: keep MACHINE's finished executions this many "
    "days instead; repeatable.",
)
@click.option(
    "--compact-every-seconds",
    "compact_every_seconds",
    type=click.FloatRange(min=0, min_open=True),
    default=3600.0,
    show_default=True,
    help="How often the worker compacts (the first time at start).",
)
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    default="info",
    show_default=True,
)
def worker(
    db: str,
    app: str,
    concurrency: int,
    lease_seconds: float,
    scan_seconds: float | None,
    poll_seconds: float | None,
    notify: bool,
    name: str,
    probe_processes: bool,
    compact_older_than_days: float | None,
    compact_keep: tuple[str, ...],
    compact_every_seconds: float,
    log_level: str,
) -> None:
    """Run executions of an application's machines started by any process, sharing
    the store with other workers (docs/scale-out.md). Stops on SIGTERM/SIGINT."""
    from phronomy_fsm.cli.store_commands import parse_keep
    from phronomy_fsm.operator.worker import run_worker

    keep_days = parse_keep(compact_keep)
    if keep_days and compact_older_than_days is None:
        raise click.UsageError("--compact-keep needs --compact-older-than-days")

    log_with_timestamps(log_level)
    stop = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        logging.getLogger("phronomy_fsm.worker").info(
            "%s received: stopping", signal.Signals(signum).name
        )
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        run_worker(
            db,
            app,
            concurrency=concurrency,
            lease_seconds=lease_seconds,
            notifications=notify,
            poll_seconds=poll_seconds,
            scan_seconds=scan_seconds,
            name=name,
            probe_processes=probe_processes,
            stop=stop,
            compact_older_than_days=compact_older_than_days,
            compact_keep_days=keep_days,
            compact_every_seconds=compact_every_seconds,
        )
    except (PhronomyError, OSError, ValueError) as exc:
        fail(str(exc))


def register(main: click.Group) -> None:
    """Add ``worker`` to the CLI group."""
    main.add_command(worker)
