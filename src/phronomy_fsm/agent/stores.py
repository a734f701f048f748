"""Stores that Agent.create/load open from a file path.

An application that passes a path instead of a store object gets one shared
:class:`~phronomy_fsm.store.sqlite.SqliteBarrierStore` per database file per process
(so a thousand agents on one file share one writer connection and one group-commit
thread instead of contending with a thousand), counted by lease: each agent that opened
the file holds one, and the store is closed when the last lease is released — by
:meth:`Agent.close` / :meth:`AgentRuntime.close`, once nothing of that agent runs in
this process. A store object passed by the application is never closed here.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from phronomy_fsm.store.base import BarrierStore

_lock = threading.Lock()
#: realpath of the file → [store, number of leases]
_shared: dict[str, list[Any]] = {}


def open_store(
    store: BarrierStore | str | os.PathLike[str], *, must_exist: bool = False
) -> tuple[BarrierStore, str | None]:
    """``(store, lease)``: a store object as given (lease None), or the shared store of
    the file a path names with one more lease (its key) — pass it to
    :func:`release_store` exactly once.

    Args:
        store: a store object, or the path of a SQLite store file.
        must_exist: the path must name an existing, non-empty file (``Agent.load``):
            a missing file is not created and a zero-length one is not initialised
            (issue 11 item 10a). Without it (``Agent.create``) a new store is made.

    Raises:
        NotFoundError: ``must_exist`` and the file does not exist or is empty
            (nothing was created or written); the message says to use
            ``Agent.create`` for a new store.
        StoreError: opening the file failed (not a database, unreadable, newer
            schema...); no lease is taken.
    """
    if not isinstance(store, str | os.PathLike):
        return store, None
    from phronomy_fsm.store import SqliteBarrierStore

    key = os.path.realpath(os.fspath(store))
    with _lock:
        entry = _shared.get(key)
        if entry is None and must_exist:
            _require_existing(key)
        if entry is None:
            entry = _shared[key] = [SqliteBarrierStore(key), 0]
        entry[1] += 1
        return entry[0], key


def _require_existing(path: str) -> None:
    """Raise NotFoundError unless ``path`` exists and is not a zero-length file."""
    from phronomy_fsm.errors import NotFoundError

    try:
        size = os.stat(path).st_size
    except FileNotFoundError:
        raise NotFoundError(
            f"no store at {path} (the file does not exist); Agent.load opens an existing "
            "store: check the path, or use Agent.create to make a new one",
            path=path,
        ) from None
    except OSError:
        return  # not a missing file: the store reports what is wrong with it
    if size == 0 and os.path.isfile(path):
        raise NotFoundError(
            f"{path} is empty (0 bytes), not a phronomy_fsm store; Agent.load opens an "
            "existing store: check the path, or use Agent.create to initialise a new one",
            path=path,
        )


def release_store(lease: str | None) -> None:
    """Give back one lease from :func:`open_store`; the last one closes the store (its
    queued group commits are flushed first). None is a no-op."""
    if lease is None:
        return
    with _lock:
        entry = _shared.get(lease)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] > 0:
            return
        del _shared[lease]
    entry[0].close()


def store_identity(store: BarrierStore) -> Any:
    """The key that identifies a store in a runtime's agent registry: its file path
    when it has one (two store objects on one file are the same store), else the
    object itself."""
    path = getattr(store, "path", None)
    return ("path", str(path)) if path is not None else ("object", id(store))
