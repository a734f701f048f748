"""The operator's verbs on schedules: add, list, pause, resume, remove
(``docs/operations.md``, "Schedules").

Any process may call them on a store (a SQLite file or a PostgreSQL DSN) while workers
run: each is one write of the ``schedules`` table, seen by every worker at its next
look. Validation is :func:`phronomy_fsm.durable.schedules.check_schedule` (every bad
field at once; nothing stored on refusal). Must not print or exit (the CLI does).
"""

from __future__ import annotations

from typing import Any

from phronomy_fsm.durable.schedules import (
    ScheduleRecord,
    ScheduleStore,
    new_schedule,
    slot_after,
)
from phronomy_fsm.errors import NotFoundError, ScheduleError


def _schedules(store: Any) -> ScheduleStore:
    if not isinstance(store, ScheduleStore):
        raise ScheduleError(
            f"{type(store).__name__} keeps no schedules: open the store with "
            "phronomy_fsm.store.open_store (SQLite or PostgreSQL)"
        )
    return store


def add_schedule(
    store: Any,
    name: str,
    machine: str,
    cron: str,
    *,
    timezone: str = "UTC",
    overlap: str = "skip",
    catchup_seconds: float | None = None,
    context: Any = None,
    paused: bool = False,
) -> ScheduleRecord:
    """Store a new schedule of ``machine``: its first slot is the first after now
    on the store's clock. ``context`` is a JSON object (or its text): the context
    of every execution it starts; ``paused`` stores it paused.

    Returns:
        The stored :class:`~phronomy_fsm.durable.schedules.ScheduleRecord`.

    Raises:
        ScheduleError: a bad field (each named), or a schedule of that name exists
            (nothing written: remove it first).
        StorageError, SchemaVersionError.
    """
    schedules = _schedules(store)
    record = new_schedule(
        name,
        machine,
        cron,
        timezone=timezone,
        overlap=overlap,
        catchup_seconds=catchup_seconds,
        context=context,
        now=store.store_time(),
    )
    if paused:
        import attrs

        record = attrs.evolve(record, paused=True)
    if not schedules.add_schedule(record):
        raise ScheduleError(
            f"a schedule named {name!r} exists already; nothing was written "
            "(remove it first, or choose another name)",
            schedule=name,
        )
    return record


def list_schedules(store: Any, machines: tuple[str, ...] | None = None) -> list[ScheduleRecord]:
    """Every schedule of the store (of ``machines`` when given), by name.
    Raises ScheduleError (a store without schedules), StorageError."""
    return _schedules(store).list_schedules(machines)


def pause_schedule(store: Any, name: str) -> ScheduleRecord:
    """Pause schedule ``name``: it starts nothing until resumed (a slot waiting
    under ``buffer_one`` is dropped; executions running go on). Idempotent.

    Raises:
        ScheduleError: no such schedule. StorageError, SchemaVersionError.
    """
    schedules = _schedules(store)
    record = _load(schedules, name)
    schedules.set_schedule_paused(name, True, record.next_slot_at)
    return _load(schedules, name)


def resume_schedule(store: Any, name: str) -> ScheduleRecord:
    """Resume schedule ``name`` from the first slot after now (slots that passed
    while it was paused are not started). Idempotent on a running schedule (its next
    slot is kept).

    Raises:
        ScheduleError: no such schedule. StorageError, SchemaVersionError.
    """
    schedules = _schedules(store)
    record = _load(schedules, name)
    if not record.paused:
        return record
    following = slot_after(record.cron, record.timezone, store.store_time())
    schedules.set_schedule_paused(name, False, following)
    return _load(schedules, name)


def remove_schedule(store: Any, name: str) -> ScheduleRecord:
    """Delete schedule ``name``; the executions it started stay. Returns the record
    as it was.

    Raises:
        ScheduleError: no such schedule. StorageError, SchemaVersionError.
    """
    schedules = _schedules(store)
    record = _load(schedules, name)
    if not schedules.remove_schedule(name):
        raise _missing(name)
    return record


def _load(schedules: ScheduleStore, name: str) -> ScheduleRecord:
    try:
        return schedules.load_schedule(name)
    except NotFoundError:
        raise _missing(name) from None


def _missing(name: str) -> ScheduleError:
    return ScheduleError(
        f"no schedule named {name!r} (see `phronomy-fsm schedules list`)", schedule=name
    )


def schedule_to_dict(record: ScheduleRecord) -> dict[str, Any]:
    """The JSON form of a schedule (``schedules list --json``, the console): times
    as ISO 8601 UTC, the context as JSON data."""
    import orjson

    def iso(value: Any) -> str | None:
        return None if value is None else value.isoformat()

    return {
        "name": record.name,
        "machine": record.machine,
        "cron": record.cron,
        "timezone": record.timezone,
        "overlap": record.overlap.value,
        "catchup_seconds": record.catchup_seconds,
        "context": orjson.loads(record.context),
        "paused": record.paused,
        "next_slot_at": iso(record.next_slot_at),
        "buffered_slot_at": iso(record.buffered_slot_at),
        "last_execution_id": record.last_execution_id,
        "started": record.started,
        "skipped": record.skipped,
        "missed": record.missed,
        "duplicates": record.duplicates,
        "claim_owner": record.claim_owner,
        "created_at": iso(record.created_at),
        "updated_at": iso(record.updated_at),
    }


__all__ = [
    "add_schedule",
    "list_schedules",
    "pause_schedule",
    "remove_schedule",
    "resume_schedule",
    "schedule_to_dict",
]
