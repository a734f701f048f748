"""Fork and restart an execution from a past commit, with a plan of what runs again.

:func:`plan_fork` reads an execution's kept commits (``docs/store.md``, "Kept commits")
and says what starting a new execution from one of them would do: which state it
resumes in, and every effect it may run — each effect the machine can reach from there
(its registered table), with its kind, and for each the original ran after that commit,
the commit that announced it and the idempotency key it would carry again.
:func:`fork_execution` writes the fork once the plan allows it: an ``at_most_once``
effect that may run is refused unless the caller names it (``allow_effects``);
an idempotent one keeps its original key, so the service it calls recognises it,
unless the caller asks for new keys (``new_keys``). Rules: ``docs/operations.md``,
"Fork and restart from a past commit". ``phronomy-fsm fork`` and the console call these.

The fork is a new execution, unowned, at revision 0, holding the record the chosen
commit wrote (its state, durable point and context), which a worker — or ``recover`` —
claims and resumes like any other. Not carried over: the original's inbox, its
children, its journal, its own deadline and its parent.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import attrs

from phronomy_fsm.durable.keys import check_id, idempotency_key, new_execution_id
from phronomy_fsm.durable.points import EngineBarrier
from phronomy_fsm.durable.records import (
    DurableCommit,
    DurablePoint,
    EffectKind,
    ExecutionRecord,
    ExecutionStatus,
    KeyOrigin,
)
from phronomy_fsm.errors import ExecutionExistsError, ForkRefusedError, NotFoundError
from phronomy_fsm.runtime.clock import SYSTEM_CLOCK, Clock
from phronomy_fsm.table import MachineTable


@attrs.frozen
class PlannedEffect:
    """An effect the fork may run: its hook name and ``kind``; if the original ran it
    after the fork's commit, the ``revision`` of the commit that announced it and the
    idempotency ``key`` it ran under, else ``None`` for both (the machine can reach it
    from where the fork starts); the key the fork's run of that same announcement
    would carry (``fork_key``, ``None`` when the original did not run it); and whether
    the plan allows it."""

    effect: str
    kind: EffectKind
    revision: int | None
    key: str | None
    fork_key: str | None
    allowed: bool

    @property
    def ran_before(self) -> bool:
        """True when the original ran it after the fork's commit."""
        return self.revision is not None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "effect": self.effect,
            "kind": self.kind.value,
            "revision": self.revision,
            "key": self.key,
            "fork_key": self.fork_key,
            "ran_before": self.ran_before,
            "allowed": self.allowed,
        }


@attrs.frozen
class ForkPlan:
    """What forking ``source`` at ``revision`` into ``execution_id`` would do: the
    ``state``, ``point`` and ``status`` it resumes from, whether it keeps the
    original's idempotency keys (``same_keys``), the ``effects`` that would run again,
    and the ``refusals`` (empty: the fork may be written)."""

    source: str
    revision: int
    execution_id: str
    machine: str
    state: str
    point: str
    status: str
    same_keys: bool
    effects: tuple[PlannedEffect, ...]
    refusals: tuple[str, ...]

    @property
    def ok(self) -> bool:
        """True when nothing refuses the fork."""
        return not self.refusals

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "source": self.source,
            "revision": self.revision,
            "execution_id": self.execution_id,
            "machine": self.machine,
            "state": self.state,
            "point": self.point,
            "status": self.status,
            "same_keys": self.same_keys,
            "effects": [e.to_dict() for e in self.effects],
            "refusals": list(self.refusals),
            "ok": self.ok,
        }


def _table(store: Any, record: ExecutionRecord) -> MachineTable | None:
    """The machine table registered for the record's spec (``None`` when no runtime
    registered it in this store)."""
    from phronomy_fsm.durable.machines import table_from_json

    try:
        machine = store.load_machine(record.machine, record.spec_sha256)
    except NotFoundError:
        return None
    return table_from_json(machine.table)


def reachable_effects(table: MachineTable, state: str, *, entering: bool) -> dict[str, EffectKind]:
    """Every effect (hook -> kind) the machine can run from ``state`` on: the offloads
    of the states it can reach and of the rows it can take; ``state``'s own only when
    the fork enters it (``entering``: from a start) rather than resumes in it."""
    from phronomy_fsm.durable.machines import effect_kind

    states = {row.name: row for row in table.states}
    found: dict[str, EffectKind] = {}
    seen = {state}
    todo = [state]
    while todo:
        here = todo.pop()
        row = states.get(here)
        if row is not None and row.offload is not None and (here != state or entering):
            found.setdefault(row.offload.hook, effect_kind(row.offload))
        for t in table.transitions:
            if here not in t.sources:
                continue
            if t.offload is not None:
                found.setdefault(t.offload.hook, effect_kind(t.offload))
            if t.target is not None and t.target not in seen:
                seen.add(t.target)
                todo.append(t.target)
    return found


def _history(
    kept: dict[int, ExecutionRecord | None], revision: int
) -> tuple[dict[str, tuple[int, EffectKind | None, str]], list[int]]:
    """The effects the original announced after ``revision`` (hook -> the first
    ``(revision, kind, key)``; kind ``None`` when only a barrier named it) and the
    later revisions the store did not keep."""
    ran: dict[str, tuple[int, EffectKind | None, str]] = {}
    missing: list[int] = []
    for later, record in sorted(kept.items()):
        if later <= revision:
            continue
        if record is None:
            missing.append(later)
            continue
        if record.point_revision != later:
            continue
        if record.point is DurablePoint.EFFECT and record.announced is not None:
            a = record.announced
            ran.setdefault(a.effect, (later, a.kind, a.key))
        elif record.point is DurablePoint.BARRIER:
            for name in record.pending_effects:
                ran.setdefault(name, (later, None, record.effect_key(later, name)))
    return ran, missing


def key_origin(base: ExecutionRecord, source: str, revision: int) -> KeyOrigin:
    """Where a fork of ``source`` at ``revision`` (whose record there is ``base``) takes
    its idempotency keys from: the original's, followed back through ``base``'s own
    origin when ``source`` is itself a fork."""
    origin = base.key_origin
    if origin is None:
        return KeyOrigin(source, revision)
    return KeyOrigin(origin.execution_id, origin.revision + revision)


def plan_fork(
    store: Any,
    source: str,
    revision: int,
    *,
    execution_id: str | None = None,
    allow_effects: Iterable[str] = (),
    new_keys: bool = False,
) -> ForkPlan:
    """The plan of forking execution ``source`` at its commit ``revision``.

    Args:
        store: an open store.
        source: the execution to fork (active or finished).
        revision: the commit to start from (the state it left, its context).
        execution_id: the fork's id (default: a new random one).
        allow_effects: hook names of at_most_once effects that may run again.
        new_keys: give effects that run again new idempotency keys (derived from the
            fork's id) instead of the original's.

    Returns:
        The plan; :attr:`ForkPlan.ok` is false when the fork would be refused.

    Raises:
        NotFoundError: no execution ``source``.
        ForkRefusedError: no plan can be made (no such commit, or the store did not
            keep it): ``reasons`` says why and what to do.
        InvalidIdError: a malformed ``execution_id``.
        StorageError: the store could not be read.
    """
    fork_id = check_id(execution_id) if execution_id is not None else new_execution_id()
    current = store.load_record(source)
    kept = store.kept_records(source)
    if revision not in kept:
        have = f"{min(kept)}..{max(kept)}" if kept else "none"
        raise ForkRefusedError(
            f"execution {source} has no commit at revision {revision} (its revisions: {have})",
            reasons=(f"no commit at revision {revision}",),
            plan=None,
        )
    base = kept[revision]
    if base is None:
        raise ForkRefusedError(
            f"the store did not keep the record of {source}'s commit {revision} (commit "
            "bodies were off when it was made: phronomy-fsm store settings "
            "--keep-commit-bodies on keeps those made from now on)",
            reasons=(f"revision {revision} was not kept",),
            plan=None,
        )
    allowed = set(allow_effects)
    root = key_origin(base, source, revision)
    ran, missing = _history(kept, revision)
    refusals: list[str] = []
    if missing:
        refusals.append(
            f"the store did not keep revisions {', '.join(map(str, missing))} of {source}: "
            "what the original ran after the fork's commit cannot all be listed"
        )
    table = _table(store, base)
    if table is None:
        refusals.append(
            f"no runtime registered the {base.machine} machine of this spec in the store: "
            "the effects the fork may run cannot be listed (run a worker of it once)"
        )
        reachable: dict[str, EffectKind] = {}
    else:
        reachable = reachable_effects(table, base.state, entering=base.point is DurablePoint.START)
    effects: list[PlannedEffect] = []
    for name in [*ran, *(n for n in reachable if n not in ran)]:
        before = ran.get(name)
        kind = reachable.get(name) or (before[1] if before else None) or EffectKind.AT_MOST_ONCE
        if kind is EffectKind.PURE:
            continue
        fork_key = None
        if before is not None:
            relative = before[0] - revision
            fork_key = (
                idempotency_key(fork_id, relative, name)
                if new_keys
                else idempotency_key(root.execution_id, root.revision + relative, name)
            )
        ok = kind is not EffectKind.AT_MOST_ONCE or name in allowed
        if not ok:
            what = (
                f"ran after revision {revision} (announced at {before[0]}, key {before[2]})"
                if before is not None
                else f"can run from {base.state}"
            )
            refusals.append(
                f"the at_most_once effect {name} {what}: pass --allow-effect {name} if "
                "running it (again) is what you want"
            )
        effects.append(
            PlannedEffect(
                name,
                kind,
                None if before is None else before[0],
                None if before is None else before[2],
                fork_key,
                ok,
            )
        )
    refusals.extend(_where_it_starts(store, source, revision, base, current))
    return ForkPlan(
        source=source,
        revision=revision,
        execution_id=fork_id,
        machine=base.machine,
        state=base.state,
        point=base.point.value,
        status=base.status.value,
        same_keys=not new_keys,
        effects=tuple(effects),
        refusals=tuple(refusals),
    )


def _where_it_starts(
    store: Any, source: str, revision: int, base: ExecutionRecord, current: ExecutionRecord
) -> list[str]:
    """Why the fork cannot resume from ``base`` (empty when it can)."""
    reasons: list[str] = []
    if base.point is DurablePoint.FINAL:
        reasons.append(
            f"revision {revision} finished the execution ({base.status.value}): fork from an "
            "earlier commit"
        )
    elif base.point is DurablePoint.EFFECT:
        reasons.append(
            f"revision {revision} announced the effect "
            f"{base.announced.effect if base.announced else '?'}, which may have run: fork "
            f"from revision {revision - 1}, where the plan lists it"
        )
    if base.status is ExecutionStatus.RECOVERY_REQUIRED:
        reasons.append(
            f"at revision {revision} the execution waited for an operator: fork from "
            f"revision {base.point_revision}"
        )
    elif base.point_revision != revision and base.point is not DurablePoint.FINAL:
        reasons.append(
            f"revision {revision} kept the durable point of revision {base.point_revision} "
            f"(an operator's commit): fork from revision {base.point_revision}"
        )
    for child in store.list_records(parent_execution_id=source):
        if child.created_at <= base.updated_at and (
            child.is_active or child.updated_at > base.updated_at
        ):
            reasons.append(
                f"at revision {revision} its child {child.execution_id} was still running: "
                "children are not forked, so the fork would wait for it for ever; fork "
                "from a commit before it started or after it reported back"
            )
            break
    if (
        current.is_active
        and current.exclusive_key is not None
        and current.exclusive_key == base.exclusive_key
    ):
        reasons.append(
            f"{source} is still active with the exclusive key {current.exclusive_key!r}: "
            "cancel it first (a restart), then fork"
        )
    return reasons


def fork_execution(
    store: Any,
    source: str,
    revision: int,
    *,
    execution_id: str | None = None,
    allow_effects: Iterable[str] = (),
    new_keys: bool = False,
    clock: Clock = SYSTEM_CLOCK,
) -> ForkPlan:
    """Write the fork :func:`plan_fork` plans, if it allows it; returns the plan.

    Raises:
        ForkRefusedError: the plan refuses it (``reasons``, ``plan``); nothing written.
        NotFoundError, InvalidIdError, StorageError: as :func:`plan_fork`.
        ExecutionExistsError: the fork's id is taken by another execution.
        AgentBusyError: an execution with the same exclusive key became active.

    Durability: one creating commit (barrier ``@fork``, ``EngineBarrier.FORK``); a worker claims it.
    """
    from phronomy_fsm.durable.submit import commit_start

    plan = plan_fork(
        store,
        source,
        revision,
        execution_id=execution_id,
        allow_effects=allow_effects,
        new_keys=new_keys,
    )
    if not plan.ok:
        raise ForkRefusedError(
            f"fork of {source} at revision {revision} refused: " + "; ".join(plan.refusals),
            reasons=plan.refusals,
            plan=plan,
        )
    base = store.kept_records(source)[revision]
    now = clock.now()
    record = attrs.evolve(
        base,
        execution_id=plan.execution_id,
        revision=0,
        point_revision=0,
        created_at=now,
        updated_at=now,
        parent_execution_id=None,
        notify_event=None,
        expires_at=None,
        recovery=None,
        resolution=None,
        error=None,
        labels={**base.labels, "forked_from": f"{source}@{revision}"},
        key_origin=None if new_keys else key_origin(base, source, revision),
    )
    if not commit_start(store, DurableCommit(EngineBarrier.FORK.value, record, None, None)):
        raise ExecutionExistsError(
            f"an execution {plan.execution_id} exists already: choose another --execution-id",
            execution_id=plan.execution_id,
        )
    return plan


__all__ = [
    "ForkPlan",
    "PlannedEffect",
    "fork_execution",
    "key_origin",
    "plan_fork",
    "reachable_effects",
]
