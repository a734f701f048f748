"""Fixtures of the engine-port conformance suite: ``store`` is a fresh store of each
backend (a SQLite file; a PostgreSQL database on the session's server), and helpers
that build records and commits."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from phronomy_fsm.durable.records import (
    DurableCommit,
    DurablePoint,
    ExecutionRecord,
    ExecutionStatus,
    Fence,
    SignalKind,
    SignalRecord,
    WorkerRecord,
)
from phronomy_fsm.store.open import open_store

T0 = datetime(2030, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)
SHA = "a" * 64


@pytest.fixture(params=["sqlite", "postgres"])
def store_opener(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[..., Any]]:
    """``open(**options)`` opens the test's store (the same one each time); every store
    opened is closed at teardown."""
    target = (
        str(tmp_path / "store.db")
        if request.param == "sqlite"
        else str(request.getfixturevalue("pg_dsn"))
    )
    opened: list[Any] = []

    def make(**options: Any) -> Any:
        store = open_store(target, **options)
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


@pytest.fixture
def store(store_opener: Callable[..., Any]) -> Any:
    """A fresh store of the parametrised backend."""
    return store_opener()


def record(
    execution_id: str = "e1",
    *,
    revision: int = 0,
    status: ExecutionStatus = ExecutionStatus.RUNNING,
    state: str = "s0",
    machine: str = "m",
    context: Any = None,
    **changes: Any,
) -> ExecutionRecord:
    """An execution record (point start at revision 0, barrier after)."""
    return ExecutionRecord(
        execution_id=execution_id,
        machine=machine,
        spec_version=changes.pop("spec_version", 1),
        spec_sha256=changes.pop("spec_sha256", SHA),
        state=state,
        point=DurablePoint.START if revision == 0 else DurablePoint.BARRIER,
        status=status,
        revision=revision,
        created_at=T0,
        updated_at=T0 + timedelta(seconds=revision),
        context={"n": revision} if context is None else context,
        **changes,
    )


def create(execution_id: str = "e1", fence: Fence | None = None, **changes: Any) -> DurableCommit:
    """The ``@start`` commit of a new execution."""
    return DurableCommit("@start", record(execution_id, **changes), None, fence)


def step(
    previous: ExecutionRecord,
    barrier: str = "b",
    fence: Fence | None = None,
    commit_options: dict[str, Any] | None = None,
    **changes: Any,
) -> DurableCommit:
    """A commit moving ``previous`` one revision on (``commit_options`` go to the
    DurableCommit: consume_signals, children, send_signals, journal)."""
    changes.setdefault("state", f"s{previous.revision + 1}")
    changes.setdefault("exclusive_key", previous.exclusive_key)
    changes.setdefault("parent_execution_id", previous.parent_execution_id)
    nxt = record(
        previous.execution_id,
        revision=previous.revision + 1,
        machine=changes.pop("machine", previous.machine),
        **changes,
    )
    return DurableCommit(barrier, nxt, previous.revision, fence, **(commit_options or {}))


def signal(execution_id: str, signal_id: str, **changes: Any) -> SignalRecord:
    """An event signal."""
    return SignalRecord(
        signal_id=signal_id,
        execution_id=execution_id,
        kind=changes.pop("kind", SignalKind.EVENT),
        created_at=changes.pop("created_at", T0),
        event=changes.pop("event", "go"),
        payload=changes.pop("payload", {"x": 1}),
        **changes,
    )


def worker(worker_id: str = "w1") -> WorkerRecord:
    """A worker row."""
    return WorkerRecord(
        worker_id=worker_id,
        host="test-host",
        pid=1,
        name=worker_id,
        started_at=T0,
        heartbeat_at=T0,
        lease_expires_at=T0,
    )


def commit(store: Any, c: DurableCommit) -> Any:
    """Commit through the port's group-commit path."""
    return store.submit(c).result(timeout=60)
