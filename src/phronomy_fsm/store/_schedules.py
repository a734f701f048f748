"""The ``schedules`` table on both stores (``docs/store.md``, "Schema"; the rules are in
``docs/operations.md``, "Schedules").

Owns the SQL of :class:`~phronomy_fsm.durable.schedules.ScheduleStore`, written once
for both backends: statements use ``?`` placeholders and the token ``{now}`` (the
store's clock in epoch ms), which each store turns into its own dialect through
``_schedule_sql`` — SQLite's ``?`` and this host's clock, PostgreSQL's ``%s`` and the
server's clock (every lease in a PostgreSQL store is measured on the server's clock).
It must not decide anything about slots or overlap: that is
:mod:`phronomy_fsm.durable.schedules`. Mixed into both stores.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from phronomy_fsm.durable.codec import datetime_to_epoch_ms, epoch_ms_to_datetime
from phronomy_fsm.durable.schedules import OverlapPolicy, ScheduleRecord, ScheduleTick
from phronomy_fsm.errors import NotFoundError

_COLUMNS = (
    "name, machine, cron, timezone, overlap, catchup_seconds, context, paused,"
    " next_slot_epoch_ms, created_epoch_ms, updated_epoch_ms, buffered_slot_epoch_ms,"
    " last_execution_id, started, skipped, missed, duplicates, claim_owner,"
    " claim_expires_epoch_ms"
)


def _ms(value: datetime | None) -> int | None:
    return None if value is None else datetime_to_epoch_ms(value)


def _at(value: Any) -> datetime | None:
    return None if value is None else epoch_ms_to_datetime(int(value))


def _record(row: tuple[Any, ...]) -> ScheduleRecord:
    (name, machine, cron, zone, overlap, catchup, context, paused, next_ms, created_ms,
     updated_ms, buffered_ms, last, started, skipped, missed, duplicates, owner,
     expires_ms) = row  # fmt: skip
    next_slot = epoch_ms_to_datetime(int(next_ms))
    return ScheduleRecord(
        name=name,
        machine=machine,
        cron=cron,
        timezone=zone,
        overlap=OverlapPolicy(overlap),
        catchup_seconds=None if catchup is None else float(catchup),
        context=context,
        paused=bool(paused),
        next_slot_at=next_slot,
        created_at=epoch_ms_to_datetime(int(created_ms)),
        updated_at=epoch_ms_to_datetime(int(updated_ms)),
        buffered_slot_at=_at(buffered_ms),
        last_execution_id=last,
        started=int(started),
        skipped=int(skipped),
        missed=int(missed),
        duplicates=int(duplicates),
        claim_owner=owner,
        claim_expires_at=_at(expires_ms) if owner is not None else None,
    )


class ScheduleSql:
    """The schedule methods of a store (module docstring)."""

    def _schedule_sql(
        self, operation: str, sql: str, params: tuple[Any, ...], *, write: bool
    ) -> list[tuple[Any, ...]]:  # provided by the store
        raise NotImplementedError

    def add_schedule(self, record: ScheduleRecord) -> bool:
        """Store a new schedule; False when one of that name exists (nothing
        written). Raises StorageError, SchemaVersionError."""
        rows = self._schedule_sql(
            "add_schedule",
            f"INSERT INTO schedules({_COLUMNS}) VALUES"
            " (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT (name) DO NOTHING RETURNING name",
            (
                record.name,
                record.machine,
                record.cron,
                record.timezone,
                record.overlap.value,
                record.catchup_seconds,
                record.context,
                record.paused,
                _ms(record.next_slot_at),
                _ms(record.created_at),
                _ms(record.updated_at),
                _ms(record.buffered_slot_at),
                record.last_execution_id,
                record.started,
                record.skipped,
                record.missed,
                record.duplicates,
                None,
                0,
            ),
            write=True,
        )
        return bool(rows)

    def list_schedules(self, machines: tuple[str, ...] | None = None) -> list[ScheduleRecord]:
        """Every schedule (only those of ``machines`` when given), by name. Raises
        StorageError."""
        sql = f"SELECT {_COLUMNS} FROM schedules"
        params: tuple[Any, ...] = ()
        if machines is not None:
            if not machines:
                return []
            sql += f" WHERE machine IN ({', '.join('?' for _ in machines)})"
            params = tuple(machines)
        rows = self._schedule_sql("list_schedules", sql + " ORDER BY name", params, write=False)
        return [_record(row) for row in rows]

    def load_schedule(self, name: str) -> ScheduleRecord:
        """The schedule ``name``. Raises NotFoundError, StorageError."""
        rows = self._schedule_sql(
            "load_schedule",
            f"SELECT {_COLUMNS} FROM schedules WHERE name = ?",
            (name,),
            write=False,
        )
        if not rows:
            raise NotFoundError(f"no schedule named {name!r}", schedule=name)
        return _record(rows[0])

    def set_schedule_paused(self, name: str, paused: bool, next_slot_at: datetime) -> bool:
        """Pause (the next slot is kept; a buffered slot is dropped), or resume with
        ``next_slot_at`` as the next slot; False when no such schedule. Raises
        StorageError, SchemaVersionError."""
        if paused:
            sql = (
                "UPDATE schedules SET paused = ?, buffered_slot_epoch_ms = NULL,"
                " updated_epoch_ms = {now} WHERE name = ? RETURNING name"
            )
            params: tuple[Any, ...] = (True, name)
        else:
            sql = (
                "UPDATE schedules SET paused = ?, next_slot_epoch_ms = ?,"
                " updated_epoch_ms = {now} WHERE name = ? RETURNING name"
            )
            params = (False, _ms(next_slot_at), name)
        return bool(self._schedule_sql("set_schedule_paused", sql, params, write=True))

    def remove_schedule(self, name: str) -> bool:
        """Delete schedule ``name`` (the executions it started stay); False when no
        such schedule. Raises StorageError, SchemaVersionError."""
        rows = self._schedule_sql(
            "remove_schedule",
            "DELETE FROM schedules WHERE name = ? RETURNING name",
            (name,),
            write=True,
        )
        return bool(rows)

    def claim_schedule(
        self, name: str, worker_id: str, claim_seconds: float
    ) -> ScheduleRecord | None:
        """Take schedule ``name`` for ``worker_id`` for ``claim_seconds`` when it is not
        paused, a slot is due or buffered on the store's clock, and no other claim
        holds; the record as claimed, else None. Raises StorageError,
        SchemaVersionError."""
        claim_ms = int(claim_seconds * 1000)
        rows = self._schedule_sql(
            "claim_schedule",
            "UPDATE schedules SET claim_owner = ?, claim_expires_epoch_ms = {now} + ?"
            " WHERE name = ? AND paused = ?"
            " AND (next_slot_epoch_ms <= {now} OR buffered_slot_epoch_ms IS NOT NULL)"
            " AND (claim_owner IS NULL OR claim_owner = ? OR claim_expires_epoch_ms < {now})"
            f" RETURNING {_COLUMNS}",
            (worker_id, claim_ms, name, False, worker_id),
            write=True,
        )
        return _record(rows[0]) if rows else None

    def advance_schedule(
        self, name: str, worker_id: str, expected_next_slot_at: datetime, tick: ScheduleTick
    ) -> bool:
        """Record ``tick`` and release the claim, only while ``worker_id`` holds it and
        the next slot is still ``expected_next_slot_at``; False when not (nothing
        written). Raises StorageError, SchemaVersionError."""
        rows = self._schedule_sql(
            "advance_schedule",
            "UPDATE schedules SET next_slot_epoch_ms = ?, buffered_slot_epoch_ms = ?,"
            " last_execution_id = ?, started = started + ?, skipped = skipped + ?,"
            " missed = missed + ?, duplicates = duplicates + ?, claim_owner = NULL,"
            " claim_expires_epoch_ms = 0, updated_epoch_ms = {now}"
            " WHERE name = ? AND claim_owner = ? AND next_slot_epoch_ms = ? RETURNING name",
            (
                _ms(tick.next_slot_at),
                _ms(tick.buffered_slot_at),
                tick.last_execution_id,
                tick.started,
                tick.skipped,
                tick.missed,
                tick.duplicates,
                name,
                worker_id,
                _ms(expected_next_slot_at),
            ),
            write=True,
        )
        return bool(rows)

    def count_schedule_starts(self, name: str, started: int, duplicates: int) -> None:
        """Add to the counts of schedule ``name`` without touching anything else:
        what a worker whose claim lapsed did (its starts happened; its other
        changes are another worker's to make). Raises StorageError,
        SchemaVersionError."""
        self._schedule_sql(
            "count_schedule_starts",
            "UPDATE schedules SET started = started + ?, duplicates = duplicates + ?"
            " WHERE name = ? RETURNING name",
            (started, duplicates, name),
            write=True,
        )


__all__ = ["ScheduleSql"]
