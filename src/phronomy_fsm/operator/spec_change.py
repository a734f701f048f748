"""A gate for spec changes: can the new machines continue every execution in flight?

:func:`check_spec_change` reads every execution of a store that has not finished and
says, for each, whether the new tables (the specs a deploy would run) can continue it,
and if not, why — the rules of ``docs/operations.md``, "Checking a spec change against
the executions in flight". ``phronomy-fsm migrate --check`` prints it and exits
non-zero when any execution would be stranded, so CI can refuse the deploy.

An execution is *stranded* when no worker of the new code would claim it, or when one
would and could not resume it where it stands: its pinned spec is neither the new one
nor covered by a migration; its state (renamed by that migration) is not in the new
spec; the wait it is halted in is no longer a wait, or lost the timer it was armed
with, or no longer takes a signal waiting in its inbox; the effect it announced is not
where the new spec runs it (recovery would start another); the committed outcome it
resumes with has no row from its state; its context no longer loads as the new
context type. Read-only: nothing is written.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping
from typing import Any

import attrs

from phronomy_fsm.durable.context import ContextCodec
from phronomy_fsm.durable.records import (
    DurablePoint,
    ExecutionRecord,
    SignalKind,
)
from phronomy_fsm.errors import ContextSerializationError
from phronomy_fsm.table import WAIT, MachineTable

#: Executions read from the store at a time.
PAGE = 500


class Verdict(enum.StrEnum):
    """What the new code would do with one execution in flight."""

    #: a worker of the new code claims it and resumes it where it stands
    CONTINUES = "continues"
    #: nothing of the new code resumes it (the reasons say why)
    STRANDED = "stranded"
    #: its machine is not among the checked ones (only specs were given, not the app)
    NOT_CHECKED = "not_checked"


@attrs.frozen
class ExecutionVerdict:
    """One execution in flight and what the new code would do with it.

    ``state`` is its stored state; ``new_state`` the name the new spec gives it (after
    a migration's renames; ``None`` when the machine is not checked); ``pinned`` its
    spec as ``v<version> (<sha256 prefix>)``; ``reasons`` one sentence per problem
    (empty unless stranded)."""

    execution_id: str
    machine: str
    status: str
    point: str
    state: str
    new_state: str | None
    pinned: str
    verdict: Verdict
    reasons: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "execution_id": self.execution_id,
            "machine": self.machine,
            "status": self.status,
            "point": self.point,
            "state": self.state,
            "new_state": self.new_state,
            "pinned": self.pinned,
            "verdict": self.verdict.value,
            "reasons": list(self.reasons),
        }


@attrs.frozen
class SpecChangeReport:
    """Every execution in flight and its verdict (oldest first); ``machines`` maps each
    checked machine to its new spec as ``v<version> (<sha256 prefix>)``."""

    machines: dict[str, str]
    executions: tuple[ExecutionVerdict, ...]

    @property
    def stranded(self) -> tuple[ExecutionVerdict, ...]:
        """The executions the new code would strand."""
        return tuple(v for v in self.executions if v.verdict is Verdict.STRANDED)

    @property
    def ok(self) -> bool:
        """True when the new code strands none."""
        return not self.stranded

    def counts(self) -> dict[str, int]:
        """How many executions got each verdict (every verdict named, zeros too)."""
        out = {v.value: 0 for v in Verdict}
        for e in self.executions:
            out[e.verdict.value] += 1
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "ok": self.ok,
            "machines": dict(self.machines),
            "counts": self.counts(),
            "executions": [e.to_dict() for e in self.executions],
        }


def pinned_name(version: int, sha256: str) -> str:
    """A spec as people read it: ``v3 (3b1fc0a2e9d4)``."""
    return f"v{version} ({sha256[:12]})"


def check_spec_change(
    store: Any,
    tables: Mapping[str, MachineTable],
    *,
    context_types: Mapping[str, type] | None = None,
    whole_application: bool = False,
) -> SpecChangeReport:
    """Check every execution of ``store`` that has not finished against the new
    ``tables`` (machine name -> table) and say which the new code would strand.

    Args:
        store: an open store (SQLite or PostgreSQL); only read.
        tables: the new machines' tables, by machine name.
        context_types: the new context type of each machine (from the application): a
            context that no longer loads strands its execution. ``None``: not checked.
        whole_application: ``tables`` are every machine the new code runs, so an
            execution of a machine not among them is stranded (otherwise it is
            ``not_checked``).

    Returns:
        The report; :attr:`SpecChangeReport.ok` is false when any is stranded.

    Raises:
        StorageError: the store could not be read.

    The rules: ``docs/operations.md``, "Checking a spec change against the executions
    in flight".
    """
    codecs = {
        machine: ContextCodec(context_type, machine)
        for machine, context_type in (context_types or {}).items()
    }
    verdicts = [
        _verdict(store, record, tables, codecs, whole_application)
        for record in _active_records(store)
    ]
    return SpecChangeReport(
        machines={name: pinned_name(t.version, t.spec_sha256) for name, t in tables.items()},
        executions=tuple(verdicts),
    )


def _active_records(store: Any) -> Iterator[ExecutionRecord]:
    offset = 0
    while True:
        page = store.list_records(active=True, limit=PAGE, offset=offset)
        yield from page
        if len(page) < PAGE:
            return
        offset += len(page)


def _verdict(
    store: Any,
    record: ExecutionRecord,
    tables: Mapping[str, MachineTable],
    codecs: Mapping[str, ContextCodec],
    whole_application: bool,
) -> ExecutionVerdict:
    table = tables.get(record.machine)

    def verdict(new_state: str | None, reasons: tuple[str, ...] = ()) -> ExecutionVerdict:
        if new_state is None and not reasons:
            judged = Verdict.NOT_CHECKED
        else:
            judged = Verdict.STRANDED if reasons else Verdict.CONTINUES
        return ExecutionVerdict(
            execution_id=record.execution_id,
            machine=record.machine,
            status=record.status.value,
            point=record.point.value,
            state=record.state,
            new_state=new_state,
            pinned=pinned_name(record.spec_version, record.spec_sha256),
            verdict=judged,
            reasons=reasons,
        )

    if table is None:
        if not whole_application:
            return verdict(None)
        return verdict(
            None,
            (
                (
                    f"the new application runs no machine {record.machine!r}: no worker would "
                    "claim it; keep the machine until its executions finish, or cancel them"
                ),
            ),
        )
    reasons: list[str] = []
    new_state = table.migrated_state(record.spec_version, record.spec_sha256, record.state)
    if record.spec_sha256 != table.spec_sha256 and not any(
        m.covers(record.spec_version, record.spec_sha256) for m in table.migrations
    ):
        reasons.append(
            f"it is pinned to spec {pinned_name(record.spec_version, record.spec_sha256)}, "
            f"which no migration of the new spec {pinned_name(table.version, table.spec_sha256)} "
            f"covers: no worker of the new spec claims it (declare `migrations: "
            f"[{{from_version: {record.spec_version}}}]`, with rename_states for renamed "
            "states; docs/spec-format.md, Migrations)"
        )
    else:
        reasons.extend(_where_it_stands(store, record, table, new_state))
    codec = codecs.get(record.machine)
    if codec is not None:
        try:
            codec.decode(record.context)
        except ContextSerializationError as exc:
            reasons.append(f"its context no longer loads: {exc}")
    return verdict(new_state, tuple(reasons))


def _where_it_stands(
    store: Any, record: ExecutionRecord, table: MachineTable, new_state: str
) -> list[str]:
    """The problems resuming ``record`` at ``new_state`` of ``table`` would meet."""
    states = {row.name: row for row in table.states}
    named = new_state if new_state == record.state else f"{record.state} (now {new_state})"
    row = states.get(new_state)
    if row is None:
        return [
            (
                f"its state {named} is not in the new spec: rename it in a migration's "
                "rename_states, or keep the state until its executions leave it"
            )
        ]
    reasons: list[str] = []
    if record.point is DurablePoint.WAIT:
        if row.kind != WAIT:
            reasons.append(
                f"it waits in {named}, which the new spec makes a {row.kind} state: "
                "recovery would not resume it as a wait"
            )
        elif record.deadline_at is not None and row.timeout is None:
            reasons.append(
                f"its wait in {named} has a timer due {record.deadline_at.isoformat()}, and "
                "the new spec gives the state no timeout: it would never fire"
            )
        events = {e.name for e in table.events}
        for signal in store.pending_signals(record.execution_id):
            if signal.kind is SignalKind.EVENT and signal.event not in events:
                reasons.append(
                    f"a signal waiting in its inbox ({signal.signal_id}) names the event "
                    f"{signal.event!r}, which the new spec does not declare"
                )
    elif record.point is DurablePoint.EFFECT and record.announced is not None:
        hook = record.announced.effect
        if record.effect_row is None:
            runs = row.offload is not None and row.offload.hook == hook
        else:
            runs = (
                record.effect_row < len(table.transitions)
                and new_state in table.transitions[record.effect_row].sources
                and (offload := table.transitions[record.effect_row].offload) is not None
                and offload.hook == hook
            )
        if not runs:
            where = "its entry" if record.effect_row is None else f"row {record.effect_row}"
            reasons.append(
                f"it announced the {record.announced.kind.value} effect {hook} "
                f"(idempotency key {record.announced.key}) at {where} of {named}, and the new "
                "spec runs no such effect there: recovery would not settle it (let these "
                "executions pass the effect first, or keep the rows in place)"
            )
    elif record.point is DurablePoint.BARRIER and record.resume_event is not None:
        event = record.resume_event
        if not any(new_state in t.sources and t.event == event for t in table.transitions):
            reasons.append(
                f"it resumes {named} with the committed outcome {event!r}, and the new spec "
                "has no row from that state on it"
            )
    return reasons


__all__ = [
    "ExecutionVerdict",
    "SpecChangeReport",
    "Verdict",
    "check_spec_change",
    "pinned_name",
]
