"""The public value types of the durable engine: machines, results, events, barrier records.

- :class:`Machine` — what an application registers: a generated table, its hooks, the
  type of its context, and how its final states finish;
- :class:`BarrierRecords` and :class:`ChildStart` — what a barrier hook may add to its
  commit (journal entries, child executions);
- :class:`ExecutionResult` — how an execution finished;
- :class:`DurableEvent` — what a runtime reports to listeners (tests, operator tools,
  tracing), on its loop thread;
- :class:`RecoveryReport` — what :meth:`DurableRuntime.recover` found.

Specified in ``docs/semantics.md``.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from phronomy_fsm.durable.claims import OtherSpecExecution
from phronomy_fsm.durable.records import (
    EffectKind,
    ErrorInfo,
    ExecutionRecord,
    ExecutionStatus,
    JournalEntry,
)
from phronomy_fsm.runtime.binding import DEFAULT_STEP_LIMIT
from phronomy_fsm.runtime.plain_hooks import as_hooks
from phronomy_fsm.table import MachineTable


@attrs.frozen
class Machine:
    """A machine the durable runtime can run.

    Args:
        table: the generated ``TABLE`` of the machine.
        hooks: every guard, action and offload hook of the generated ``Hooks``
            Protocol, as an object with one callable attribute per hook (an instance of
            a class implementing ``Hooks``, a module, a ``types.SimpleNamespace``) or a
            mapping of hook name → plain function (kept as a namespace). Actions and
            guards are ``hook(ctx, payload)``; an effect declared with the spec's
            ``effect:`` shorthand is ``effect(snapshot, ectx) -> result``
            (:class:`~phronomy_fsm.runtime.plain_hooks.EffectContext`); the set is
            checked when the machine is registered (``MissingHookError`` names every
            missing hook). Barrier hooks are optional: the runtime commits
            each barrier itself; a barrier hook, when present, is called as
            ``hook(ctx, payload)`` on the loop thread and may return
            :class:`BarrierRecords` to add to that commit (or ``None``).
        context_type: the context's declared type: an attrs class, a msgspec
            ``Struct``, or ``dict`` (``docs/semantics.md``, "The context").
        final_status: the status each named final state finishes with, e.g.
            ``{"rejected": ExecutionStatus.FAILED}``. A final state not named finishes
            ``failed`` when it is called ``failed``, ``cancelled`` when it is called
            ``cancelled``, else ``completed`` (``docs/semantics.md``, "How an
            execution finishes").
        step_limit: transitions a session may take before it fails.
        effect_policy: decides an effect's kind per execution, when the spec's
            declaration is a default the application refines (an agent whose LLM calls
            may be sent again, a tool declared idempotent): called on the loop thread
            as ``effect_policy(ctx, effect_name, declared_kind)`` and returns the
            :class:`~phronomy_fsm.durable.records.EffectKind` to apply. It must be a
            function of the stored context (recovery asks again); a non-pure effect
            stays behind its barrier whatever the policy says (``docs/semantics.md``,
            "Effects").
        records: adds records to the engine's own commits: called on the loop thread
            as ``records(ctx, commit, state)`` for ``@wait``, ``@final``, ``@cancel``
            and an ``@resolution`` that finishes the execution (an operator ended it
            ``failed``) — ``commit`` names which; ``state`` is the state committed — and
            returns :class:`BarrierRecords` or ``None`` — an agent journals its final
            answer this way. A raising hook is logged; the commit goes on without
            records.
    """

    table: MachineTable
    hooks: Any = attrs.field(converter=as_hooks)
    context_type: type = dict
    final_status: Mapping[str, ExecutionStatus] = attrs.field(factory=dict)
    step_limit: int = DEFAULT_STEP_LIMIT
    effect_policy: Callable[[Any, str, EffectKind], EffectKind] | None = None
    records: Callable[[Any, str, str], BarrierRecords | None] | None = None

    @property
    def name(self) -> str:
        """The machine's name (from its table)."""
        return self.table.machine


@attrs.frozen
class ChildStart:
    """A child execution a barrier starts, durably with the barrier's commit.

    Args:
        machine: the child's machine (registered with the same runtime).
        context: its initial context (of that machine's context type).
        execution_id: its id; by default derived from the parent, the barrier's
            revision and the child's position (stable across a replay).
        notify_event: the parent's event its completion is signalled as (payload: a
            dict with ``child_execution_id``, ``machine``, ``status``, ``state`` and
            ``context``); ``None`` sends nothing.
        labels: free labels of the child.
    """

    machine: str
    context: Any
    execution_id: str | None = None
    notify_event: str | None = None
    labels: Mapping[str, Any] = attrs.field(factory=dict)


@attrs.frozen
class BarrierRecords:
    """What a barrier hook adds to its commit: application journal entries (kept
    with the execution, in commit order) and child executions to start."""

    journal: tuple[JournalEntry, ...] = ()
    children: tuple[ChildStart, ...] = ()


@attrs.frozen
class ExecutionResult:
    """How an execution finished: ``status`` (completed, failed, cancelled), the
    final ``state``, its decoded ``context``, the last ``revision`` and, for
    ``failed``, the ``error``."""

    execution_id: str
    machine: str
    status: ExecutionStatus
    state: str
    revision: int
    context: Any = None
    error: ErrorInfo | None = None

    @classmethod
    def from_record(cls, record: ExecutionRecord, context: Any = None) -> ExecutionResult:
        """The result of a finished record (``context`` decoded by the caller)."""
        return cls(
            record.execution_id,
            record.machine,
            record.status,
            record.state,
            record.revision,
            record.context if context is None else context,
            record.error,
        )


class DurableEventKind(enum.StrEnum):
    """What a :class:`DurableEvent` reports."""

    STARTED = "started"
    COMMITTED = "committed"
    WAITING = "waiting"
    RECOVERY_REQUIRED = "recovery_required"
    RESUMED = "resumed"
    FINISHED = "finished"
    EFFECT_STARTED = "effect_started"
    EFFECT_FINISHED = "effect_finished"
    RELEASED = "released"


@attrs.frozen
class DurableEvent:
    """One thing that happened to an execution, reported on the runtime's loop thread
    to its listeners. ``record`` is the committed record for commits (``None``
    otherwise); ``detail`` carries the kind's facts (the effect and its key, the
    barrier's name, why an execution was released). ``effect_finished`` carries the
    work's returned ``value`` or raised ``error`` as they are (not JSON): it reports
    that the work came back, not that its result was applied or made durable — the
    next ``committed`` event of the execution does that."""

    kind: DurableEventKind
    execution_id: str
    machine: str
    record: ExecutionRecord | None = None
    detail: Mapping[str, Any] = attrs.field(factory=dict)


@attrs.frozen
class RecoveryReport:
    """What :meth:`~phronomy_fsm.durable.runtime.DurableRuntime.recover` did:
    ``claimed`` execution ids it now runs (each with the status it was found in),
    ``owned_elsewhere`` ids a live worker holds (with that worker),
    ``unknown_machine`` ids of machines this runtime does not register, and
    ``other_spec`` the executions of its machines, owned by no live worker, that it
    left because it runs none of their specs — the spec they are pinned to is newer,
    or older with no migration declared (``docs/scale-out.md``, "Rolling upgrades")."""

    claimed: tuple[tuple[str, str], ...] = ()
    owned_elsewhere: tuple[tuple[str, str], ...] = ()
    unknown_machine: tuple[tuple[str, str], ...] = ()
    other_spec: tuple[OtherSpecExecution, ...] = ()


__all__ = [
    "BarrierRecords",
    "ChildStart",
    "DurableEvent",
    "DurableEventKind",
    "ExecutionResult",
    "Machine",
    "RecoveryReport",
]
