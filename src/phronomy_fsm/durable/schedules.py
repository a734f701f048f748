"""Schedules: executions of a machine started on a cron schedule, once per slot.

Owns the schedule's value (:class:`ScheduleRecord`), its validation (the cron
expression and time zone are read by ``croniter`` and ``zoneinfo``, never by a parser
of ours), the arithmetic of slots (which slots are due, which are missed, which the
catch-up window still starts), the overlap policies, and :class:`ScheduleRunner`, the
part of a worker that starts the due slots. It must not hold SQL: the stores keep
schedules behind :class:`ScheduleStore` (``store/_schedules.py``). The rules are in
``docs/operations.md``, "Schedules".

Exactly one start per slot: the slot names the execution id
(``sched:<name>:<slot, UTC, ISO 8601>``), so a second start of the same slot — by a
worker whose claim on the schedule lapsed while it worked — is refused by the store's
unique execution id and counted in :attr:`ScheduleRecord.duplicates`, not raised. The
claim on the schedule row (an owner and a lease, and a compare-and-set on the next
slot when the tick is recorded) keeps two workers from computing the same slots in the
first place.
"""

from __future__ import annotations

import enum
import logging
import math
import re
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol, runtime_checkable
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import attrs
import orjson

from phronomy_fsm.durable.points import EngineBarrier
from phronomy_fsm.durable.records import DurableCommit
from phronomy_fsm.durable.submit import commit_start, start_record
from phronomy_fsm.durable.types import Machine
from phronomy_fsm.errors import (
    ContextSerializationError,
    ExecutionExistsError,
    PhronomyError,
    ScheduleError,
)
from phronomy_fsm.runtime.clock import SYSTEM_CLOCK, Clock

log = logging.getLogger("phronomy_fsm.schedules")

#: What a schedule name may hold (it is part of every execution id it starts).
NAME_PATTERN = re.compile(r"[A-Za-z0-9_.-]{1,64}")

#: Most due slots one tick looks at (a catch-up window is cut to its newest ones).
MAX_SLOTS_PER_TICK = 1000

#: How long a worker's claim on a schedule row lasts while it starts its slots.
DEFAULT_CLAIM_SECONDS = 10.0


class OverlapPolicy(enum.StrEnum):
    """What a slot does while the schedule's previous execution is still active
    (``docs/operations.md``, "Schedules")."""

    #: the slot is skipped (counted in ``skipped``)
    SKIP = "skip"
    #: the slot starts anyway
    ALLOW = "allow"
    #: at most one slot waits and starts once the active execution has finished;
    #: further slots meanwhile are skipped
    BUFFER_ONE = "buffer_one"


@attrs.frozen
class ScheduleRecord:
    """A schedule as stored (``docs/store.md``, "Schema", table ``schedules``).

    Args:
        name: 1-64 of ``A-Z a-z 0-9 _ . -``; part of each execution id.
        machine: the machine whose executions it starts.
        cron: a cron expression croniter reads: five fields, or six with the sixth
            giving seconds (``* * * * * *`` is every second).
        timezone: an IANA zone name (``Europe/Paris``, ``UTC``): the slots are the
            cron's times in that zone, daylight saving included.
        overlap: the :class:`OverlapPolicy`.
        catchup_seconds: slots missed while no worker ran are started when at most
            this old; ``None`` (the default) starts only the newest missed slot.
        context: the JSON text of the context of every execution it starts.
        paused: a paused schedule starts nothing; resuming starts from the next slot.
        next_slot_at: the first slot not yet handled (aware UTC).
        buffered_slot_at: the slot waiting under ``buffer_one``, if any.
        last_execution_id: the newest execution it started.
        started / skipped / missed / duplicates: counts of slots started, skipped by
            the overlap policy, missed outside the catch-up window, and starts that
            found their execution id taken (another worker's start of the slot).
        claim_owner / claim_expires_at: the worker starting its slots now, and until
            when its claim holds.
        created_at / updated_at: aware UTC.
    """

    name: str
    machine: str
    cron: str
    timezone: str
    overlap: OverlapPolicy
    catchup_seconds: float | None
    context: str
    paused: bool
    next_slot_at: datetime
    created_at: datetime
    updated_at: datetime
    buffered_slot_at: datetime | None = None
    last_execution_id: str | None = None
    started: int = 0
    skipped: int = 0
    missed: int = 0
    duplicates: int = 0
    claim_owner: str | None = None
    claim_expires_at: datetime | None = None


@attrs.frozen
class ScheduleTick:
    """What one tick of a schedule changes, recorded by
    :meth:`ScheduleStore.advance_schedule`: the new next slot, the buffered slot, the
    newest execution and the counts to add."""

    next_slot_at: datetime
    buffered_slot_at: datetime | None
    last_execution_id: str | None
    started: int = 0
    skipped: int = 0
    missed: int = 0
    duplicates: int = 0


@runtime_checkable
class ScheduleStore(Protocol):
    """The schedules of a store (both stores implement it): ``docs/store.md``, table
    ``schedules``. Synchronous, thread-safe; raises only store errors
    (StorageError, SchemaVersionError); never on a dispatcher's loop thread."""

    def add_schedule(self, record: ScheduleRecord) -> bool:
        """Store a new schedule; False when the name exists (nothing written)."""
        ...

    def list_schedules(self, machines: tuple[str, ...] | None = None) -> list[ScheduleRecord]:
        """Every schedule (of ``machines`` when given), by name."""
        ...

    def load_schedule(self, name: str) -> ScheduleRecord:
        """One schedule. Raises NotFoundError."""
        ...

    def set_schedule_paused(self, name: str, paused: bool, next_slot_at: datetime) -> bool:
        """Pause, or resume from ``next_slot_at`` (a pause keeps its next slot and
        drops a buffered one); False when no such schedule."""
        ...

    def remove_schedule(self, name: str) -> bool:
        """Delete a schedule (its executions stay); False when no such schedule."""
        ...

    def claim_schedule(
        self, name: str, worker_id: str, claim_seconds: float
    ) -> ScheduleRecord | None:
        """Take the schedule for ``claim_seconds`` when it is not paused, has a slot
        due (or a buffered one) on the store's clock, and nobody else's claim holds;
        the record as claimed, else None."""
        ...

    def advance_schedule(
        self, name: str, worker_id: str, expected_next_slot_at: datetime, tick: ScheduleTick
    ) -> bool:
        """Record ``tick`` and release the claim, only while ``worker_id`` holds it
        and the next slot is still ``expected_next_slot_at`` (compare-and-set);
        False when not (nothing written)."""
        ...

    def count_schedule_starts(self, name: str, started: int, duplicates: int) -> None:
        """Add to the ``started`` and ``duplicates`` counts only (the tick of a
        worker whose claim lapsed)."""
        ...


def check_schedule(
    name: str,
    machine: str,
    cron: str,
    timezone: str,
    overlap: str,
    catchup_seconds: float | None,
    context: Any,
) -> tuple[ZoneInfo, OverlapPolicy, str]:
    """Validate a schedule's fields, collecting every problem.

    Returns:
        ``(zone, policy, context JSON text)``.

    Raises:
        ScheduleError: one line per bad field, saying what to give instead.
    """
    from croniter import croniter

    problems: list[str] = []
    if not NAME_PATTERN.fullmatch(name):
        problems.append(f"name {name!r}: use 1-64 of A-Z a-z 0-9 _ . -")
    if not machine:
        problems.append("machine: name the machine whose executions it starts")
    if not croniter.is_valid(cron):
        problems.append(
            f"cron {cron!r}: not a cron expression croniter reads (five fields, or six "
            "with seconds last: '* * * * * *' is every second)"
        )
    zone: ZoneInfo | None = None
    try:
        zone = ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError):
        problems.append(f"timezone {timezone!r}: not an IANA zone name (e.g. UTC, Europe/Paris)")
    try:
        policy = OverlapPolicy(overlap)
    except ValueError:
        policy = OverlapPolicy.SKIP
        problems.append(f"overlap {overlap!r}: one of {', '.join(p.value for p in OverlapPolicy)}")
    if catchup_seconds is not None and not (
        math.isfinite(catchup_seconds) and catchup_seconds >= 0
    ):
        problems.append(f"catchup_seconds {catchup_seconds!r}: a number of seconds, 0 or more")
    text = ""
    if isinstance(context, str):
        try:
            context = orjson.loads(context)
        except orjson.JSONDecodeError as exc:
            problems.append(f"context: not JSON ({exc})")
            context = {}
    if not isinstance(context, dict):
        problems.append("context: a JSON object (the machine's context)")
    else:
        text = orjson.dumps(context, option=orjson.OPT_SORT_KEYS).decode()
    if problems or zone is None:
        raise ScheduleError(
            f"schedule {name!r} refused; nothing was stored:\n  " + "\n  ".join(problems),
            schedule=name,
            problems=tuple(problems),
        )
    return zone, policy, text


def new_schedule(
    name: str,
    machine: str,
    cron: str,
    *,
    timezone: str = "UTC",
    overlap: str = "skip",
    catchup_seconds: float | None = None,
    context: Any = None,
    now: datetime,
) -> ScheduleRecord:
    """A validated new schedule whose first slot is the first one after ``now``
    (``docs/operations.md``, "Schedules").

    Raises:
        ScheduleError: as :func:`check_schedule`.
    """
    zone, policy, text = check_schedule(
        name, machine, cron, timezone, overlap, catchup_seconds, {} if context is None else context
    )
    return ScheduleRecord(
        name=name,
        machine=machine,
        cron=cron,
        timezone=timezone,
        overlap=policy,
        catchup_seconds=catchup_seconds,
        context=text,
        paused=False,
        next_slot_at=slot_after(cron, zone, now),
        created_at=now,
        updated_at=now,
    )


def slot_after(cron: str, zone: ZoneInfo | str, moment: datetime) -> datetime:
    """The first slot of ``cron`` in ``zone`` strictly after ``moment`` (aware UTC)."""
    from croniter import croniter

    tz = ZoneInfo(zone) if isinstance(zone, str) else zone
    following = croniter(cron, moment.astimezone(tz)).get_next(datetime)
    return following.astimezone(UTC)  # type: ignore[no-any-return]


def execution_id_for(name: str, slot: datetime) -> str:
    """The execution id of a schedule's slot: ``sched:<name>:<slot UTC ISO 8601>``."""
    return f"sched:{name}:{slot.astimezone(UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}"


def due_slots(record: ScheduleRecord, now: datetime) -> tuple[list[datetime], int, datetime]:
    """What one tick of ``record`` at ``now`` does with the slots that have passed
    (``docs/operations.md``, "Schedules").

    Returns:
        ``(slots to start, oldest first; how many passed slots are missed; the next
        slot after now)``. The slots to start are those from the record's next slot
        up to ``now`` that are at most ``catchup_seconds`` old — at least the newest
        one, at most :data:`MAX_SLOTS_PER_TICK` (the newest). The missed ones are
        the passed slots older than those, counted up to :data:`MAX_SLOTS_PER_TICK`
        (a longer downtime is not counted further: counting means stepping through
        every slot). Each step is croniter's, in the record's zone.
    """
    from croniter import croniter

    zone = ZoneInfo(record.timezone)
    first = record.next_slot_at
    if first > now:
        return [], 0, first
    floor = max(first, now - timedelta(seconds=record.catchup_seconds or 0.0))
    # newest first, back to the window's floor: a long window is cut to its newest
    # slots without stepping through the older ones
    back = croniter(record.cron, (now + timedelta(microseconds=1)).astimezone(zone))
    newest: datetime = back.get_prev(datetime).astimezone(UTC)
    slots = [newest]  # the newest passed slot always starts (it is >= first)
    while len(slots) < MAX_SLOTS_PER_TICK:
        earlier: datetime = back.get_prev(datetime).astimezone(UTC)
        if earlier < floor:
            break
        slots.append(earlier)
    slots.reverse()
    missed = 0
    slot = first
    while slot < slots[0] and missed < MAX_SLOTS_PER_TICK:
        missed += 1
        slot = slot_after(record.cron, zone, slot)
    return slots, missed, slot_after(record.cron, zone, now)


class ScheduleRunner:
    """Starts the due slots of the schedules of the machines a worker runs
    (``docs/operations.md``, "Schedules").

    Each :meth:`tick` reads the schedules of ``machines()`` (one indexed read), and for
    each with a slot due claims its row (:meth:`ScheduleStore.claim_schedule`), starts
    the slots the catch-up window and the overlap policy allow — each a new execution
    with no owner, for any worker to claim, its id named by the slot, its context the
    schedule's and its labels ``schedule`` and ``slot`` — and records the tick with a
    compare-and-set (:meth:`ScheduleStore.advance_schedule`).

    Args:
        store: an ExecutionStore that is also a :class:`ScheduleStore`.
        machines: returns the machines to run schedules of, by name.
        worker_id: the claimant's name.
        claim_seconds: how long a claim on a schedule row holds.
        clock: the clock of execution records' times.
        on_started: called (no arguments) after a tick started an execution.
        starter: how a slot's execution is started, ``starter(machine, context,
            execution_id, labels) -> created``; default: committed with no owner
            for any worker to claim (:func:`~phronomy_fsm.durable.submit.commit_start`);
            :meth:`DurableRuntime.run_schedules` runs them in its runtime instead.

    Concurrency: one thread calls :meth:`tick` (the worker's claim loop, or
    :meth:`start`'s thread).
    """

    def __init__(
        self,
        store: Any,
        machines: Callable[[], dict[str, Machine]],
        worker_id: str,
        *,
        claim_seconds: float = DEFAULT_CLAIM_SECONDS,
        clock: Clock = SYSTEM_CLOCK,
        on_started: Callable[[], None] | None = None,
        starter: Callable[[Machine, Any, str, dict[str, Any]], bool] | None = None,
    ) -> None:
        self.store = store
        self.machines = machines
        self.worker_id = worker_id
        self.claim_seconds = claim_seconds
        self.clock = clock
        self.on_started = on_started
        self.starter = starter
        #: when the earliest schedule read at the last tick is due (aware UTC)
        self.next_due_at: datetime | None = None
        self.started_total = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def enabled(self) -> bool:
        """False when the store keeps no schedules (a store wrapper without them)."""
        return isinstance(self.store, ScheduleStore)

    def seconds_until_due(self, at_most: float) -> float:
        """How long the caller may wait before the next tick: until the earliest slot
        seen at the last tick, at most ``at_most`` (schedules added since are seen
        at the next tick)."""
        if self.next_due_at is None:
            return at_most
        left = (self.next_due_at - self.store.store_time()).total_seconds()
        return max(0.0, min(at_most, left))

    def tick(self) -> list[str]:
        """Start what is due now; returns the execution ids started.

        Raises:
            StorageError, SchemaVersionError: the store failed (nothing more this tick).
        """
        if not self.enabled:
            return []
        machines = self.machines()
        if not machines:
            return []
        started: list[str] = []
        now = self.store.store_time()
        earliest: datetime | None = None
        for record in self.store.list_schedules(tuple(sorted(machines))):
            if record.paused:
                continue
            due = record.next_slot_at <= now or record.buffered_slot_at is not None
            if due:
                claimed = self.store.claim_schedule(record.name, self.worker_id, self.claim_seconds)
                if claimed is not None:
                    record = claimed
                    started += self._run(claimed, machines[claimed.machine])
                    record = self.store.load_schedule(claimed.name)
            if earliest is None or record.next_slot_at < earliest:
                earliest = record.next_slot_at
        self.next_due_at = earliest
        if started:
            self.started_total += len(started)
            if self.on_started is not None:
                self.on_started()
        return started

    def _run(self, record: ScheduleRecord, machine: Machine) -> list[str]:
        """One claimed schedule: start its slots, then record the tick."""
        now = self.store.store_time()
        slots, missed, next_slot = due_slots(record, now)
        active = self._is_active(record.last_execution_id)
        buffered = record.buffered_slot_at
        last = record.last_execution_id
        started: list[str] = []
        counts = {"skipped": 0, "duplicates": 0}

        def start(slot: datetime) -> None:
            nonlocal last, active
            eid = execution_id_for(record.name, slot)
            try:
                created = self._start(record, machine, slot, eid)
            except (ContextSerializationError, ExecutionExistsError) as exc:
                # the schedule's context does not fit the machine (any more), or the
                # id runs another machine: retrying cannot help, so the slot is
                # skipped and the schedule goes on (the log says why)
                log.error("schedule %s: slot %s not started: %s", record.name, eid, exc)
                counts["skipped"] += 1
                return
            if created:
                started.append(eid)
            else:
                counts["duplicates"] += 1
            last, active = eid, True

        if buffered is not None and not active:
            start(buffered)
            buffered = None
        policy = record.overlap
        for slot in slots:
            if policy is OverlapPolicy.ALLOW or not active:
                start(slot)
            elif policy is OverlapPolicy.BUFFER_ONE and buffered is None:
                buffered = slot
            else:
                counts["skipped"] += 1
        tick = ScheduleTick(
            next_slot_at=next_slot,
            buffered_slot_at=buffered,
            last_execution_id=last,
            started=len(started),
            skipped=counts["skipped"],
            missed=missed,
            duplicates=counts["duplicates"],
        )
        if not self.store.advance_schedule(record.name, self.worker_id, record.next_slot_at, tick):
            # another worker took the row over (our claim lapsed): its starts of these
            # slots find their ids taken, so nothing started twice; what this tick
            # did is still counted
            self.store.count_schedule_starts(record.name, len(started), counts["duplicates"])
            log.warning(
                "schedule %s: the claim of worker %s lapsed; its tick was not recorded",
                record.name,
                self.worker_id,
            )
        if missed:
            log.info(
                "schedule %s: %d slot(s) missed outside the catch-up window", record.name, missed
            )
        return started

    def _is_active(self, execution_id: str | None) -> bool:
        if execution_id is None:
            return False
        try:
            return bool(self.store.load_record(execution_id).is_active)
        except PhronomyError:  # removed by compaction: not active
            return False

    def _start(self, record: ScheduleRecord, machine: Machine, slot: datetime, eid: str) -> bool:
        """Commit the start of one slot's execution; False when its id was taken."""
        from phronomy_fsm.durable.context import ContextCodec

        codec = ContextCodec(machine.context_type, machine.name)
        context = codec.decode(orjson.loads(record.context))
        labels = {"schedule": record.name, "slot": slot.astimezone(UTC).isoformat()}
        if self.starter is not None:
            created = self.starter(machine, context, eid, labels)
        else:
            created = self._submit(machine, codec.encode(context), eid, labels)
        if created:
            log.info("schedule %s: started %s", record.name, eid)
        else:
            log.info("schedule %s: %s was started already (another worker)", record.name, eid)
        return created

    def _submit(self, machine: Machine, encoded: bytes, eid: str, labels: dict[str, Any]) -> bool:
        start = start_record(
            machine, encoded, execution_id=eid, exclusive_key=None, labels=labels, clock=self.clock
        )
        return commit_start(self.store, DurableCommit(EngineBarrier.START.value, start, None, None))

    # ------------------------------------------------------------------ own thread

    def start(self, poll_seconds: float = 1.0) -> ScheduleRunner:
        """Tick on a thread of its own every ``poll_seconds`` at most (sooner when a
        slot is due) until :meth:`close`; what a :class:`DurableRuntime` built with
        ``run_schedules=True`` does. Returns ``self``."""
        self._thread = threading.Thread(
            target=self._loop, args=(poll_seconds,), name=f"{self.worker_id}-schedules", daemon=True
        )
        self._thread.start()
        return self

    def _loop(self, poll_seconds: float) -> None:
        while not self._stop.is_set():
            try:
                self.tick()
                wait = self.seconds_until_due(poll_seconds)
            except Exception:  # the loop must outlive a failing store
                log.exception("schedules of %s: tick failed", self.worker_id)
                wait = poll_seconds
            self._stop.wait(max(0.01, wait))

    def close(self, timeout_seconds: float = 10.0) -> None:
        """Stop the thread of :meth:`start` (idempotent)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout_seconds)


__all__ = [
    "DEFAULT_CLAIM_SECONDS",
    "MAX_SLOTS_PER_TICK",
    "NAME_PATTERN",
    "OverlapPolicy",
    "ScheduleRecord",
    "ScheduleRunner",
    "ScheduleStore",
    "ScheduleTick",
    "check_schedule",
    "due_slots",
    "execution_id_for",
    "new_schedule",
    "slot_after",
]
