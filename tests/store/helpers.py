"""Builders shared by the SQLite store tests: engine execution records and commits."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import attrs

from phronomy_fsm.durable.records import (
    DurableCommit,
    DurablePoint,
    ExecutionRecord,
    ExecutionStatus,
    Fence,
    JournalEntry,
    SignalKind,
    SignalRecord,
)

T0 = datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)
SHA = "ab" * 32


def new_execution(execution_id: str, **fields: Any) -> ExecutionRecord:
    """A revision-0 execution of machine ``m`` (running, point start, state ``s0``)."""
    values: dict[str, Any] = {
        "execution_id": execution_id,
        "machine": "m",
        "spec_version": 1,
        "spec_sha256": SHA,
        "state": "s0",
        "point": DurablePoint.START,
        "status": ExecutionStatus.RUNNING,
        "revision": 0,
        "created_at": T0,
        "updated_at": T0,
        "context": {"messages": [{"role": "user", "content": "hello"}]},
    }
    values.update(fields)
    return ExecutionRecord(**values)


def create(execution_id: str, fence: Fence | None = None, **fields: Any) -> DurableCommit:
    """The ``@start`` commit of a new execution (made under ``fence`` when given)."""
    return DurableCommit("@start", new_execution(execution_id, **fields), None, fence)


def admit(store: Any, execution_id: str, exclusive_key: str | None = None) -> ExecutionRecord:
    """Create ``execution_id`` (revision 0) through ``store.commit``; the stored record."""
    store.commit(create(execution_id, exclusive_key=exclusive_key))
    return store.load_record(execution_id)  # type: ignore[no-any-return]


def advance(ex: ExecutionRecord, **changes: Any) -> ExecutionRecord:
    """``ex`` one revision on (state ``s<revision>``, point barrier, a second later)."""
    revision = ex.revision + 1
    values: dict[str, Any] = {
        "revision": revision,
        "state": f"s{revision}",
        "point": DurablePoint.BARRIER,
        "point_revision": revision,
        "updated_at": ex.updated_at + timedelta(seconds=1),
    }
    values.update(changes)
    return attrs.evolve(ex, **values)


def step(ex: ExecutionRecord, barrier: str = "b", **changes: Any) -> DurableCommit:
    """The next commit of ``ex`` (``changes`` go to the record; the commit options
    ``consume_signals``, ``children``, ``send_signals``, ``journal`` and ``fence`` go to
    the commit)."""
    options = {
        key: changes.pop(key)
        for key in ("consume_signals", "children", "send_signals", "journal", "fence")
        if key in changes
    }
    return DurableCommit(barrier, advance(ex, **changes), ex.revision, **options)


def finish(
    ex: ExecutionRecord, status: ExecutionStatus = ExecutionStatus.COMPLETED, **changes: Any
) -> DurableCommit:
    """An ``@final`` commit ending ``ex`` with ``status`` and one journal entry."""
    changes.setdefault("journal", (JournalEntry(f"execution_{status.value}", {"n": 1}),))
    changes.setdefault("point", DurablePoint.FINAL)
    return step(ex, "@final", status=status, state="done", **changes)


def signal(execution_id: str, signal_id: str, **fields: Any) -> SignalRecord:
    """An event signal for ``execution_id``."""
    values: dict[str, Any] = {
        "signal_id": signal_id,
        "execution_id": execution_id,
        "kind": SignalKind.EVENT,
        "created_at": T0,
        "event": "go",
        "payload": {"x": 1},
    }
    values.update(fields)
    return SignalRecord(**values)


def journal(count: int, kind: str = "note") -> tuple[JournalEntry, ...]:
    """``count`` journal entries ``{"n": i}``."""
    return tuple(JournalEntry(kind, {"n": i}) for i in range(count))
