"""Binding a generated table to an application's hooks: done once, not per event.

:func:`bind_machine` turns a :class:`~phronomy_fsm.table.MachineTable` and a hooks object
(an implementation of the generated ``Hooks`` Protocol) into a :class:`MachineBinding`:
one compiled :class:`Node` per state whose ``rows`` map each event to its candidate
transitions with guards, actions, offload hooks and barriers already resolved to bound
methods once, at registration, rather than per event. Every missing hook is reported at
once by :class:`~phronomy_fsm.errors.MissingHookError`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from phronomy_fsm.errors import MissingHookError
from phronomy_fsm.runtime.plain_hooks import as_hooks, describe_hooks, effect_work
from phronomy_fsm.table import (
    AUTO,
    EXTERNAL,
    FINAL,
    STATE_KINDS,
    WAIT,
    BarrierRow,
    MachineTable,
    OffloadRow,
)

Hook = Callable[[Any, Any], Any]

#: Default step limit per session (``docs/runtime.md``, "Sessions"; machines may set their own).
DEFAULT_STEP_LIMIT = 100_000


class Row:
    """One compiled transition: resolved guard and actions, target node (``None`` for an
    internal transition), and optional transition-level work."""

    __slots__ = (
        "action",
        "action_names",
        "actions",
        "barrier",
        "event",
        "guard",
        "guard_name",
        "index",
        "internal",
        "negated",
        "offload",
        "target",
    )

    def __init__(self) -> None:
        self.index = 0
        self.event = ""
        self.target: Node | None = None
        self.guard: Hook | None = None
        self.guard_name: str | None = None
        self.negated = False
        self.actions: tuple[Hook, ...] = ()
        self.action_names: tuple[str, ...] = ()
        self.offload: OffloadWorkSpec | None = None
        self.barrier: BarrierWorkSpec | None = None
        self.internal = False
        self.action: Hook | None = None

    def render_guard(self) -> str | None:
        """The guard as written (``name`` / ``not name``), or None."""
        if self.guard_name is None:
            return None
        return f"not {self.guard_name}" if self.negated else self.guard_name


class OffloadWorkSpec:
    """A resolved offload: the preparing hook, its two outcome events, its declared
    effect kind (``pure``, ``idempotent`` or ``at_most_once``) and ``direct``: the hook is
    a plain effect function of the effect shorthand (wrapped by ``effect_work``; it reads
    only its context snapshot, never the payload of the event that entered the state)."""

    __slots__ = ("completed", "direct", "effect", "failed", "name", "prepare")

    def __init__(
        self,
        name: str,
        prepare: Hook,
        completed: str,
        failed: str,
        effect: str = "at_most_once",
        *,
        direct: bool = False,
    ) -> None:
        self.name, self.prepare, self.completed, self.failed = name, prepare, completed, failed
        self.effect = effect
        self.direct = direct


class BarrierWorkSpec:
    """A resolved barrier: the hook preparing the commit and the outcome → event row."""

    __slots__ = ("name", "prepare", "row")

    def __init__(self, name: str, prepare: Hook, row: BarrierRow) -> None:
        self.name, self.prepare, self.row = name, prepare, row


class Node:
    """One compiled state.

    ``rows`` maps an event to a bare :class:`Row` when that event has exactly one row
    that the dispatcher may take on its inlined fast path (no guard, a target, no
    transition-level work, at most one action), otherwise to a tuple of candidate rows
    tried in table order. ``mode`` says what entering the state takes: 0 nothing (an
    external state with no entry work, timer or offload/barrier), 1 only posting
    ``state_completed`` (such an auto state), 2 the general entry procedure.
    """

    __slots__ = (
        "barrier",
        "entry",
        "entry_names",
        "get",
        "kind",
        "mode",
        "name",
        "offload",
        "rows",
        "timeout",
    )

    def __init__(self, name: str, kind: str) -> None:
        self.name = name
        self.kind = kind
        self.rows: dict[str, Row | tuple[Row, ...]] = {}
        self.get = self.rows.get  # bound once: the dispatcher's hottest lookup
        self.entry: tuple[Hook, ...] = ()
        self.entry_names: tuple[str, ...] = ()
        self.offload: OffloadWorkSpec | None = None
        self.barrier: BarrierWorkSpec | None = None
        self.timeout: tuple[float, str] | None = None
        self.mode = 2

    def __repr__(self) -> str:
        return f"<Node {self.name} {self.kind}>"


class MachineBinding:
    """A table bound to a hooks object; shared by every session of that machine.

    Attributes:
        table: the generated table.
        hooks: the application's hooks object.
        machine: the machine name.
        nodes: state name → :class:`Node`.
        initial: the initial node.
        ignored: events declared ``unhandled: ignore``.
        events: every declared event.
        step_limit: default step limit for sessions of this binding.
    """

    __slots__ = (
        "events",
        "hooks",
        "ignored",
        "initial",
        "machine",
        "nodes",
        "on_barrier_outcome",
        "on_transition",
        "step_limit",
        "table",
    )

    def __init__(
        self,
        table: MachineTable,
        hooks: Any,
        nodes: dict[str, Node],
        step_limit: int,
        on_transition: Callable[[Any, str, str], None] | None = None,
        on_barrier_outcome: Callable[[Any, str, Any], None] | None = None,
    ) -> None:
        self.table = table
        self.hooks = hooks
        self.machine = table.machine
        self.nodes = nodes
        self.initial = nodes[table.initial]
        self.ignored = frozenset(e.name for e in table.events if e.unhandled == "ignore")
        self.events = frozenset(e.name for e in table.events)
        self.step_limit = step_limit
        self.on_transition = on_transition
        self.on_barrier_outcome = on_barrier_outcome

    def __repr__(self) -> str:
        return f"<MachineBinding {self.machine} ({len(self.nodes)} states)>"


def _offload_work(
    offload: OffloadRow | None, resolve: Callable[[str], Hook]
) -> OffloadWorkSpec | None:
    if offload is None:
        return None
    hook = resolve(offload.hook)
    direct = bool(getattr(offload, "direct", False))
    if direct:  # the effect shorthand: a plain function
        hook = effect_work(hook)
    return OffloadWorkSpec(
        offload.hook,
        hook,
        offload.completed,
        offload.failed,
        getattr(offload, "effect", "at_most_once"),
        direct=direct,
    )


def _barrier_work(
    barrier: BarrierRow | None, resolve: Callable[[str], Hook]
) -> BarrierWorkSpec | None:
    if barrier is None:
        return None
    return BarrierWorkSpec(barrier.name, resolve(barrier.name), barrier)


def is_protocol_stub(hooks: Any, name: str) -> bool:
    """True when ``hooks.name`` is inherited from a ``typing.Protocol`` class (the
    generated ``Hooks`` Protocol's own ``...`` stub) rather than implemented."""
    for cls in type(hooks).__mro__:
        if name in vars(cls):
            return bool(getattr(cls, "_is_protocol", False))
    return False


def _missing(table: MachineTable, hooks: Any, optional: frozenset[str]) -> list[str]:
    missing = []
    for name in table.hook_names():
        if name in optional:
            continue
        if not callable(getattr(hooks, name, None)) or is_protocol_stub(hooks, name):
            missing.append(name)
    return missing


def bind_machine(
    table: MachineTable,
    hooks: Any,
    *,
    step_limit: int = DEFAULT_STEP_LIMIT,
    on_transition: Callable[[Any, str, str], None] | None = None,
    on_barrier_outcome: Callable[[Any, str, Any], None] | None = None,
    optional: frozenset[str] = frozenset(),
    fast_path: bool = True,
) -> MachineBinding:
    """Resolve every hook of ``table`` on ``hooks`` and compile the state nodes.

    Args:
        table: a generated ``TABLE``.
        hooks: any object with a callable attribute for each guard, action, offload hook
            and barrier the table names (the generated ``Hooks`` Protocol): a class
            instance, a module, a ``types.SimpleNamespace``, or a mapping of name →
            function (:func:`~phronomy_fsm.runtime.plain_hooks.as_hooks`). Each is
            called as ``hook(ctx, payload)`` on the loop thread, except an effect
            declared with the ``effect:`` shorthand (``OffloadRow.direct``): a plain
            function ``effect(snapshot, ectx) -> result`` called on a worker
            (:func:`~phronomy_fsm.runtime.plain_hooks.effect_work`).
        step_limit: transitions a session may take before it fails with
            :class:`~phronomy_fsm.errors.StepLimitError` (``docs/runtime.md``, "Sessions").
        on_transition: called as ``on_transition(ctx, source, target)`` (state names) on
            the loop thread after every transition of this binding's sessions, internal
            ones included (its sessions then skip the dispatcher's inlined fast path).
            A raising hook is logged and ignored.
        on_barrier_outcome: called as ``on_barrier_outcome(ctx, state, outcome)`` on the
            loop thread when an authoritative barrier outcome arrives, *before* its event
            is delivered — the place to apply a committed record to live state so that
            guards and actions of every row see it. A raising hook ends the session.
        optional: hook names that may be absent (resolved to ``None``); the durable
            runtime supplies barrier work itself (docs/semantics.md, "Barrier hooks").
        fast_path: False keeps every row off the dispatcher's inlined fast path (the
            durable runtime's step hook must see every transition).

    Raises:
        MissingHookError: hooks are missing, not callable, or only the generated
            Protocol's own stub (a hooks class that subclasses ``Hooks`` and forgets
            one); ``missing`` lists them all.
        ValueError: the table is inconsistent (an unknown kind or state name) — tables
            from the code generator never are.
    """
    hooks = as_hooks(hooks)
    missing = _missing(table, hooks, optional)
    if missing:
        raise MissingHookError(
            f"{describe_hooks(hooks)} lacks {len(missing)} hook(s) required by machine "
            f"{table.machine!r}: {', '.join(missing)} (implement every method of the generated "
            "Hooks Protocol; inheriting its stub is not enough)",
            machine=table.machine,
            missing=tuple(missing),
        )

    def resolve(name: str) -> Any:
        if name in optional and (
            not callable(getattr(hooks, name, None)) or is_protocol_stub(hooks, name)
        ):
            return None
        return getattr(hooks, name)

    nodes: dict[str, Node] = {}
    for state in table.states:
        if state.kind not in STATE_KINDS:
            raise ValueError(f"state {state.name!r} has unknown kind {state.kind!r}")
        node = Node(state.name, state.kind)
        node.entry = tuple(resolve(a) for a in state.entry)
        node.entry_names = tuple(state.entry)
        node.offload = _offload_work(state.offload, resolve)
        node.barrier = _barrier_work(state.barrier, resolve)
        if state.timeout is not None:
            node.timeout = (float(state.timeout.seconds), state.timeout.event)
        nodes[state.name] = node

    candidates: dict[tuple[str, str], list[Row]] = {}
    for t in table.transitions:
        for source in t.sources:
            row = Row()
            row.index = t.index
            row.event = t.event
            row.internal = t.target is None
            row.target = None if t.target is None else nodes[t.target]
            if t.guard is not None:
                row.guard = resolve(t.guard)
                row.guard_name = t.guard
                row.negated = t.negated
            row.actions = tuple(resolve(a) for a in t.actions)
            row.action_names = tuple(t.actions)
            row.offload = _offload_work(t.offload, resolve)
            row.barrier = _barrier_work(t.barrier, resolve)
            candidates.setdefault((source, t.event), []).append(row)
    for node in nodes.values():
        simple = (
            not node.entry
            and node.offload is None
            and node.barrier is None
            and node.timeout is None
        )
        node.mode = (
            0 if simple and node.kind == EXTERNAL else 1 if simple and node.kind == AUTO else 2
        )
    for (source, event), rows in candidates.items():
        only = rows[0]
        fast = (
            fast_path
            and on_transition is None
            and len(rows) == 1
            and only.guard is None
            and not only.internal
            and only.offload is None
            and only.barrier is None
            and len(only.actions) <= 1
        )
        if fast:
            only.action = only.actions[0] if only.actions else None
        nodes[source].rows[event] = only if fast else tuple(rows)
    return MachineBinding(table, hooks, nodes, step_limit, on_transition, on_barrier_outcome)


__all__ = [
    "AUTO",
    "DEFAULT_STEP_LIMIT",
    "EXTERNAL",
    "FINAL",
    "WAIT",
    "MachineBinding",
    "Node",
    "Row",
    "bind_machine",
    "is_protocol_stub",
]
