"""Fixtures of the store conformance suite.

``store_factory`` is parametrised over backends (only ``"sqlite"`` today; a
PostgreSQL store adds a param here and must pass the same tests). ``store`` runs every
conformance test three ways: plain ``commit()``, the group-commit path (``commit`` is
routed through ``submit().result()``), and through a ``FaultInjectingStore`` with no
faults armed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from phronomy_fsm.store import FaultInjectingStore, SqliteBarrierStore


class ViaSubmit:
    """A store whose ``commit`` goes through the group-commit path."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def commit(self, commit: Any) -> Any:
        return self.inner.submit(commit).result(timeout=60)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@pytest.fixture(params=["sqlite"])
def store_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[..., Any]]:
    """``make(name="store.db", **options)`` opens a store of the parametrised backend;
    every store opened is closed at teardown."""
    opened: list[Any] = []

    def make(name: str = "store.db", **options: Any) -> Any:
        if request.param == "sqlite":
            options.setdefault("busy_timeout_seconds", 10.0)
            store = SqliteBarrierStore(tmp_path / name, **options)
        else:  # pragma: no cover - future backends
            raise AssertionError(request.param)
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


@pytest.fixture(params=["commit", "submit", "fault_wrapper"])
def store(request: pytest.FixtureRequest, store_factory: Callable[..., Any]) -> Any:
    """A fresh store, used through the parametrised write path."""
    inner = store_factory()
    if request.param == "submit":
        return ViaSubmit(inner)
    if request.param == "fault_wrapper":
        return FaultInjectingStore(inner)
    return inner
