"""Lower a spec to the table object the dispatcher runs: the one compiler of the project.

:func:`lower` turns a :class:`~phronomy_fsm.spec.model.MachineSpec` into a
:class:`~phronomy_fsm.table.MachineTable`, once. Its meaning comes from
:func:`phronomy_fsm.spec.resolve.resolve_spec` (compound states flattened onto the
leaf states inside them with the descendants-first priority, barrier shorthands and
fail-closed defaults turned into rows, derived outcome events declared), so the
validator and the compiler read one semantics. :mod:`phronomy_fsm.codegen.emit` prints
the object as a module; :func:`phronomy_fsm.interop.table_from_spec` is this function.

Only the standard library, the spec layer and :mod:`phronomy_fsm.table` are imported
(no Jinja): lowering is usable wherever a table is needed.
"""

from __future__ import annotations

from phronomy_fsm.spec.model import BarrierSpec, LimitSpec, MachineSpec, OffloadSpec, parse_rate
from phronomy_fsm.spec.resolve import resolve_spec
from phronomy_fsm.table import (
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


def _offload(offload: OffloadSpec | None) -> OffloadRow | None:
    if offload is None:
        return None
    return OffloadRow(
        offload.hook, offload.completed, offload.failed, offload.effect.value, offload.direct
    )


def _barrier(barrier: BarrierSpec | None) -> BarrierRow | None:
    if barrier is None:
        return None
    return BarrierRow(barrier.name, *(event for _, event in barrier.outcome_events()))


def lower(spec: MachineSpec) -> MachineTable:
    """Return the :class:`~phronomy_fsm.table.MachineTable` of ``spec``.

    The table holds the leaf states in document order, the effective events (implicit
    ``state_completed`` first, declared events, then derived barrier outcome events),
    the flat rows in lowered order numbered from 0 (``docs/spec-format.md`` "Compound
    states" gives the order), the sorted hook names, the migrations, ``fail_closed``,
    the compound states and ``final_commit``. Deterministic: equal specs give equal tables.

    ``spec`` should be valid (the code generator validates first). An invalid spec still
    lowers without raising where it can; a state whose kind could not be read becomes
    ``"external"`` and rows whose target cannot be entered become internal.

    Raises:
        ValueError: no state can be entered as the initial state.
    """
    resolved = resolve_spec(spec)
    if resolved.initial is None:
        raise ValueError(f"machine {spec.machine!r} has no initial state that can be entered")
    states = tuple(
        StateRow(
            name=s.name,
            kind=s.kind.value if s.kind is not None else "external",
            entry=s.entry,
            offload=_offload(s.offload),
            barrier=_barrier(s.barrier),
            timeout=TimeoutRow(float(s.timeout.seconds), s.timeout.event) if s.timeout else None,
            description=s.description,
            parent=s.parent,
        )
        for s in resolved.leaves
    )
    transitions = tuple(
        TransitionRow(
            index=i,
            sources=row.sources,
            event=row.event,
            target=row.target,
            guard=row.spec.guard.name if row.spec.guard else None,
            negated=bool(row.spec.guard and row.spec.guard.negated),
            actions=row.spec.actions,
            offload=_offload(row.spec.offload),
            barrier=_barrier(row.spec.barrier),
            description=row.spec.description,
            declared_on=row.declared_on,
        )
        for i, row in enumerate(resolved.rows)
    )
    guards, actions, offload_hooks, barriers = spec.hook_names()
    return MachineTable(
        machine=spec.machine,
        version=spec.version,
        spec_sha256=spec.source_sha256,
        initial=resolved.initial,
        states=states,
        events=tuple(
            EventRow(e.name, e.payload, e.unhandled.value, e.description, e.durable, e.fields)
            for e in resolved.events
        ),
        transitions=transitions,
        guards=guards,
        actions=actions,
        offload_hooks=offload_hooks,
        barriers=barriers,
        migrations=tuple(
            MigrationRow(m.from_version, m.from_sha256, m.rename_states) for m in spec.migrations
        ),
        fail_closed=spec.fail_closed,
        compounds=tuple(
            CompoundRow(c.name, c.parent, resolved.initial_child(c.name) or "", c.description)
            for c in resolved.compounds
        ),
        final_commit=spec.final_commit,
        limits=tuple(_limit_row(limit) for limit in spec.limits),
    )


def _limit_row(limit: LimitSpec) -> LimitRow:
    """The table row of a (validated) limit: its key split, its rate parsed."""
    source, name = limit.key_parts or (None, None)
    rate = None if limit.rate is None else parse_rate(limit.rate)
    return LimitRow(
        limit.name,
        tuple(limit.effects),
        source,
        name,
        limit.concurrency,
        None if rate is None else rate[0],
        None if rate is None else rate[1],
    )
