"""``LISTEN`` for the PostgreSQL store: one connection and thread per store that hears
``phronomy_signals`` and ``phronomy_work`` and calls the registered callbacks.

A notification only says *look now*: the durable truth is the inbox and the executions
table, which owners still poll (less often) as the fallback. When the listening
connection breaks (a server restart, a network cut), the thread reconnects with
backoff and then calls every callback with channel :data:`RECONNECTED`, because
notifications sent meanwhile were lost: the callers poll at once.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import psycopg

from phronomy_fsm.store.postgres._commit import SIGNALS_CHANNEL, WORK_CHANNEL

log = logging.getLogger("phronomy_fsm.store.postgres")

#: The channel callbacks get after the listener reconnected (notifications may have
#: been lost: poll).
RECONNECTED = "phronomy_reconnected"

Callback = Callable[[str, str], None]


class Notifier:
    """The listening thread of one store (module docstring).

    Args:
        dsn / connect_kwargs: how to connect (autocommit is forced).
        where: ``host:port/db`` for log lines.
    """

    def __init__(self, dsn: str, connect_kwargs: dict[str, Any], where: str) -> None:
        self._dsn = dsn
        self._kwargs = {**connect_kwargs, "autocommit": True}
        self._where = where
        self._callbacks: list[Callback] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._conn: psycopg.Connection[Any] | None = None
        self.connected = threading.Event()  #: set while LISTEN is in force
        self._thread = threading.Thread(target=self._run, name="phronomy-pg-listen", daemon=True)
        self._thread.start()

    def add(self, callback: Callback) -> Callable[[], None]:
        """Register ``callback(channel, payload)``; returns its remover."""
        with self._lock:
            self._callbacks.append(callback)

        def remove() -> None:
            with self._lock:
                if callback in self._callbacks:
                    self._callbacks.remove(callback)

        return remove

    def _emit(self, channel: str, payload: str) -> None:
        with self._lock:
            callbacks = list(self._callbacks)
        for callback in callbacks:
            try:
                callback(channel, payload)
            except Exception:
                log.exception("notification callback failed")

    def _run(self) -> None:
        delay = 0.1
        first = True
        while not self._stop.is_set():
            try:
                conn = psycopg.connect(self._dsn, **self._kwargs)
            except psycopg.Error as exc:
                log.warning("LISTEN on %s: cannot connect (%s); retrying", self._where, exc)
                self._stop.wait(delay)
                delay = min(delay * 2, 2.0)
                continue
            self._conn = conn
            try:
                conn.execute(f"LISTEN {SIGNALS_CHANNEL}")
                conn.execute(f"LISTEN {WORK_CHANNEL}")
                self.connected.set()
                delay = 0.1
                if not first:
                    log.info("LISTEN on %s: reconnected", self._where)
                    self._emit(RECONNECTED, "")
                first = False
                while not self._stop.is_set():
                    for note in conn.notifies(timeout=0.5):
                        self._emit(note.channel, note.payload)
            except psycopg.Error as exc:
                if not self._stop.is_set():
                    log.warning(
                        "LISTEN on %s: connection lost (%s); reconnecting", self._where, exc
                    )
            finally:
                self.connected.clear()
                self._conn = None
                try:
                    conn.close()
                except psycopg.Error:
                    pass
            self._stop.wait(delay)

    def close(self) -> None:
        """Stop listening and join the thread."""
        self._stop.set()
        self._thread.join(5)


__all__ = ["RECONNECTED", "Notifier"]
