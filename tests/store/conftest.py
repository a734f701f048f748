"""Fixtures of the SQLite store's tests.

``store_factory`` opens SQLite stores under ``tmp_path`` (the engine port's behaviour
on every backend is ``tests/engine_port``). ``store`` runs every test of
``test_conformance.py`` three ways: plain ``commit()``, the group-commit path
(``commit`` is routed through ``submit().result()``), and through a
``FaultInjectingStore`` with no faults armed.
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


@pytest.fixture
def store_factory(tmp_path: Path) -> Iterator[Callable[..., Any]]:
    """``make(name="store.db", **options)`` opens a SQLite store under ``tmp_path``;
    every store opened is closed at teardown."""
    opened: list[Any] = []

    def make(name: str = "store.db", **options: Any) -> Any:
        options.setdefault("busy_timeout_seconds", 10.0)
        store = SqliteBarrierStore(tmp_path / name, **options)
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
