"""What the durable engine derives from a generated table, once per machine.

Owns :class:`MachineFacts` — the static facts recovery and signals need, computed from
a :class:`~phronomy_fsm.table.MachineTable` (never from YAML): the effect each state
starts and its kind, the event a committed barrier posts, the effects each barrier
announces (those reachable from its committed outcome before the next barrier), the
events a signal may carry, and the events each state handles. Also the JSON form of a
table (:func:`table_to_json`, :func:`table_from_json`) that stores keep so operator
tools can check signals and draw executions without the application's code.

The rules these facts implement are in ``docs/semantics.md``; the validator checks the
same rules statically (``docs/spec-format.md``, "Effects and durability").
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from phronomy_fsm.durable.records import EffectKind, ExecutionStatus
from phronomy_fsm.table import (
    FINAL,
    STATE_COMPLETED,
    WAIT,
    BarrierRow,
    CompoundRow,
    EventRow,
    LimitRow,
    MachineTable,
    MigrationRow,
    OffloadRow,
    StateRow,
    TimeoutRow,
    TransitionRow,
)

_DEFAULT_EFFECT = EffectKind.AT_MOST_ONCE


def effect_kind(offload: OffloadRow) -> EffectKind:
    """The declared kind of an offload (``at_most_once`` unless the spec says otherwise)."""
    return EffectKind(getattr(offload, "effect", _DEFAULT_EFFECT.value) or _DEFAULT_EFFECT.value)


def _status_by_name(final_state: str) -> ExecutionStatus:
    """The status a final state finishes with when ``final_status`` does not name it."""
    if final_state == ExecutionStatus.FAILED.value:
        return ExecutionStatus.FAILED
    if final_state == ExecutionStatus.CANCELLED.value:
        return ExecutionStatus.CANCELLED
    return ExecutionStatus.COMPLETED


class MachineFacts:
    """Static facts of one machine for the engine (see the module docstring).

    Args:
        table: the generated table.
        final_status: the status each final state finishes with. A final state
            not named finishes ``failed`` when it is called ``failed``,
            ``cancelled`` when it is called ``cancelled``, else ``completed``
            (``docs/semantics.md``, "How an execution finishes").

    Raises:
        ValueError: ``final_status`` names a state that is not final, or a status
            that is not a finished one.

    Attributes:
        table, machine, fail_closed (state name or None), wait_states, final_states,
        internal_events (events only the engine posts: ``state_completed``, offload
        and barrier outcomes), signal_events (every other declared event),
        handled (state → events with a row from it), committed_event (barrier state
        → its committed event), announced (barrier state → non-pure effects its
        committed outcome reaches before another barrier), final_status.
    """

    def __init__(
        self, table: MachineTable, final_status: Mapping[str, ExecutionStatus] | None = None
    ) -> None:
        self.table = table
        self.machine = table.machine
        self.states: dict[str, StateRow] = {s.name: s for s in table.states}
        self.fail_closed: str | None = getattr(table, "fail_closed", None)
        self.wait_states = frozenset(s.name for s in table.states if s.kind == WAIT)
        self.final_states = frozenset(s.name for s in table.states if s.kind == FINAL)
        internal = {STATE_COMPLETED}
        barriers: list[BarrierRow] = []
        offloads: list[OffloadRow] = []
        for s in table.states:
            if s.offload is not None:
                offloads.append(s.offload)
            if s.barrier is not None:
                barriers.append(s.barrier)
        for t in table.transitions:
            if t.offload is not None:
                offloads.append(t.offload)
            if t.barrier is not None:
                barriers.append(t.barrier)
        for o in offloads:
            internal |= {o.completed, o.failed}
        for b in barriers:
            internal |= {b.committed, b.not_committed, b.conflict, b.outcome_unknown}
        self.internal_events = frozenset(internal)
        self.signal_events = frozenset(e.name for e in table.events) - self.internal_events
        handled: dict[str, set[str]] = {s.name: set() for s in table.states}
        self._rows: dict[str, list[TransitionRow]] = {s.name: [] for s in table.states}
        for t in table.transitions:
            for source in t.sources:
                handled[source].add(t.event)
                self._rows[source].append(t)
        self.handled = {name: frozenset(events) for name, events in handled.items()}
        self.committed_event = {
            s.name: s.barrier.committed for s in table.states if s.barrier is not None
        }
        self.announced = {name: self._announced_from(name) for name in self.committed_event}
        statuses = {name: _status_by_name(name) for name in self.final_states}
        for name, status in (final_status or {}).items():
            if name not in self.final_states:
                raise ValueError(f"machine {self.machine!r}: {name!r} is not a final state")
            status = ExecutionStatus(status)
            if status not in (
                ExecutionStatus.COMPLETED,
                ExecutionStatus.FAILED,
                ExecutionStatus.CANCELLED,
            ):
                raise ValueError(
                    f"a final state finishes completed, failed or cancelled, not {status}"
                )
            statuses[name] = status
        self.final_status = statuses

    def effect_of(self, state: str) -> OffloadRow | None:
        """The offload started on entry of ``state``, if any."""
        row = self.states.get(state)
        return None if row is None else row.offload

    def is_effect(self, offload: OffloadRow) -> bool:
        """True for an offload whose kind is not ``pure``."""
        return effect_kind(offload) is not EffectKind.PURE

    def _announced_from(self, barrier_state: str) -> tuple[str, ...]:
        """Non-pure effects reachable from the committed outcome of ``barrier_state``'s
        barrier before another barrier (each path stops at its first effect)."""
        event = self.committed_event[barrier_state]
        found: list[str] = []
        seen: set[str] = set()
        frontier = [t for t in self._rows[barrier_state] if t.event == event]
        while frontier:
            t = frontier.pop()
            if t.barrier is not None:
                continue
            if t.offload is not None and self.is_effect(t.offload):
                if t.offload.hook not in found:
                    found.append(t.offload.hook)
                continue
            target = t.target
            if target is None or target in seen:
                continue
            seen.add(target)
            row = self.states[target]
            if row.barrier is not None:
                continue
            if row.offload is not None and self.is_effect(row.offload):
                if row.offload.hook not in found:
                    found.append(row.offload.hook)
                continue
            frontier.extend(self._rows[target])
        return tuple(sorted(found))

    def rename_for(self, spec_version: int, spec_sha256: str) -> dict[str, str] | None:
        """The state renames of the declared migration covering an execution pinned to
        another spec, or ``None`` when no migration covers it."""
        if spec_sha256 == self.table.spec_sha256:
            return {}
        for migration in self.table.migrations:
            if migration.covers(spec_version, spec_sha256):
                return dict(migration.rename_states)
        return None


# ------------------------------------------------------------------ table as JSON


def _row(value: Any) -> Any:
    if isinstance(value, tuple) and hasattr(value, "_asdict"):
        return {k: _row(v) for k, v in value._asdict().items()}
    if isinstance(value, tuple):
        return [_row(v) for v in value]
    return value


def table_to_json(table: MachineTable) -> dict[str, Any]:
    """The table as JSON data (NamedTuples become objects, tuples lists)."""
    return _row(table)  # type: ignore[no-any-return]


def _build(cls: type, data: Mapping[str, Any], **nested: Any) -> Any:
    fields = cls._fields  # type: ignore[attr-defined]
    values = {k: v for k, v in data.items() if k in fields}
    for key, convert in nested.items():
        if key in values:
            values[key] = convert(values[key])
    return cls(**values)


def _opt(cls: type) -> Any:
    return lambda v: None if v is None else _build(cls, v)


def _strings(v: Any) -> tuple[str, ...]:
    return tuple(v)


def _iter_rows(items: Any) -> Iterator[Mapping[str, Any]]:
    yield from items or ()


def table_from_json(data: Mapping[str, Any]) -> MachineTable:
    """Rebuild a :class:`MachineTable` from :func:`table_to_json` output (fields this
    code does not know are ignored; missing ones take their defaults).

    Raises:
        KeyError, TypeError: the data is not a table.
    """
    states = tuple(
        _build(
            StateRow,
            s,
            entry=_strings,
            offload=_opt(OffloadRow),
            barrier=_opt(BarrierRow),
            timeout=_opt(TimeoutRow),
        )
        for s in _iter_rows(data["states"])
    )
    events = tuple(
        _build(EventRow, e, fields=lambda pairs: tuple(tuple(p) for p in pairs))
        for e in _iter_rows(data["events"])
    )
    transitions = tuple(
        _build(
            TransitionRow,
            t,
            sources=_strings,
            actions=_strings,
            declared_on=_strings,
            offload=_opt(OffloadRow),
            barrier=_opt(BarrierRow),
        )
        for t in _iter_rows(data["transitions"])
    )
    migrations = tuple(
        _build(
            MigrationRow,
            m,
            rename_states=lambda pairs: tuple(tuple(p) for p in pairs),
        )
        for m in _iter_rows(data.get("migrations"))
    )
    compounds = tuple(_build(CompoundRow, c) for c in _iter_rows(data.get("compounds")))
    limits = tuple(
        _build(LimitRow, lim, effects=_strings) for lim in _iter_rows(data.get("limits"))
    )
    return _build(
        MachineTable,
        data,
        states=lambda _: states,
        compounds=lambda _: compounds,
        events=lambda _: events,
        transitions=lambda _: transitions,
        migrations=lambda _: migrations,
        limits=lambda _: limits,
        guards=_strings,
        actions=_strings,
        offload_hooks=_strings,
        barriers=_strings,
    )


__all__ = ["MachineFacts", "effect_kind", "table_from_json", "table_to_json"]
