"""Static durability checks: what a machine needs so that it can survive a crash at any
instant (``docs/spec-format.md`` "Effects and durability").

- ``EFFECT_WITHOUT_BARRIER``: every non-``pure`` effect (an offload declared
  ``idempotent`` or ``at_most_once``) starts only after a *committed edge* since the
  start and since the outcome of any non-``pure`` effect (itself included: a retry
  loop). A committed edge is a transition on the ``committed`` outcome of the barrier
  running in its source state; an event declared ``durable: true`` is not one (its
  sender's commit does not announce this execution's effect). A warning: the engine
  announces every such effect with a commit of its own (``@effect``) before it starts
  (``docs/semantics.md``, "Effects"), so the machine is safe either way; a barrier
  gathers the announcement with the step's commit instead of adding one. Starting an
  execution is committed (the engine's ``@start``) before the initial state is entered,
  so the initial state's own effect is behind that commit (a child execution started by
  its parent's barrier runs its effect at once); leaving the initial state is not a
  commit. Wait and external states do not count: a signal consumed after a wait is not
  durable before the effect runs. Not reported for an effect shorthand (``effect:``):
  writing it chooses the engine's ``@effect`` commit as the announcement.
- ``WAIT_STATE_NO_SIGNAL``: a wait state can be left by a signal or a timer.
- ``STATE_NO_RECOVERY``: an external state that waits only for engine-internal events
  runs something that posts them (an offload, a barrier, a timer).
- ``FAIL_CLOSED_STATE``: the ``fail_closed`` state is not a final state (an unknown name
  is reported with the references).
- ``OUTCOME_NOT_EXHAUSTIVE``: the rows taking an offload's or barrier's outcome in its
  state always move on (the outcome arrives once).
- ``EVENT_IN_BARRIER_STATE``: a row on an outside event declared on a state whose
  barrier's every outcome leaves it (a transition back into the state runs the
  barrier again: only an internal outcome row stays). A state takes no signal while its commit is in
  flight (``docs/semantics.md``, "Signals"), and the outcome moves the session on, so
  the row is never taken; the signal goes to the state the outcome leads to.

*Engine-internal* events are the ones only the engine posts: ``state_completed`` and the
outcome events of offloads and barriers. The checks that conclude from missing rows run
only when every row is known (``CheckContext.rows_complete``).
"""

from __future__ import annotations

from collections import defaultdict, deque

from phronomy_fsm.spec.check_context import CheckContext
from phronomy_fsm.spec.check_rows import is_exhaustive
from phronomy_fsm.spec.model import (
    STATE_COMPLETED,
    BarrierSpec,
    EffectKind,
    OffloadSpec,
    SourceLoc,
    StateKind,
)
from phronomy_fsm.spec.resolve import FlatRow

#: At most this many steps of an offending path are shown.
MAX_PATH_STEPS = 10

#: A node of the effect search: a leaf state, and whether no committed edge was taken
#: since the start or the last non-pure effect's outcome.
_Node = tuple[str, bool]


def run(ctx: CheckContext) -> None:
    """Run every check of this module."""
    work = _Work(ctx)
    _check_fail_closed(ctx)
    if not ctx.rows_complete:
        return
    _check_effects(ctx, work)
    _check_wait_states(ctx, work)
    _check_recovery(ctx, work)
    _check_outcomes(ctx, work)
    _check_barrier_signals(ctx, work)


class _Work:
    """Where each offload and barrier runs (state-level, or carried by a row into its
    target), and which events only the engine posts."""

    def __init__(self, ctx: CheckContext) -> None:
        resolved = ctx.resolved
        self.offloads: dict[str, list[tuple[str, OffloadSpec]]] = defaultdict(list)
        self.barriers: dict[str, list[tuple[str, BarrierSpec]]] = defaultdict(list)
        self.state_offloads: dict[str, tuple[str, OffloadSpec]] = {}
        for state in resolved.leaves:
            base = ctx.state_path(state.name)
            if state.offload is not None:
                self.state_offloads[state.name] = (f"{base}.offload", state.offload)
                self.offloads[state.name].append((f"{base}.offload", state.offload))
            if state.barrier is not None:
                self.barriers[state.name].append((f"{base}.barrier", state.barrier))
        self.row_offloads: dict[str, tuple[str, OffloadSpec]] = {}
        for t in ctx.spec.transitions:
            leaf = resolved.enter(t.target) if t.target is not None else None
            if leaf is None:
                continue
            if t.offload is not None:
                self.offloads[leaf].append((f"{t.where}.offload", t.offload))
                self.row_offloads[t.where] = (f"{t.where}.offload", t.offload)
            if t.barrier is not None:
                self.barriers[leaf].append((f"{t.where}.barrier", t.barrier))
        self.internal: set[str] = {STATE_COMPLETED}
        for entries in self.offloads.values():
            for _, offload in entries:
                self.internal.update((offload.completed, offload.failed))
        for barriers in self.barriers.values():
            for _, barrier in barriers:
                self.internal.update(event for _, event in barrier.outcome_events())
        self.committed: dict[str, set[str]] = {
            state: {b.event_for("committed") for _, b in entries}
            for state, entries in self.barriers.items()
        }
        self.effect_outcomes: dict[str, set[str]] = {
            state: {
                event
                for _, o in entries
                if o.effect is not EffectKind.PURE
                for event in (o.completed, o.failed)
            }
            for state, entries in self.offloads.items()
        }

    def is_committed_edge(self, source: str, event: str) -> bool:
        """True when taking ``event`` in ``source`` follows a durable commit."""
        return event in self.committed.get(source, ())


def _check_fail_closed(ctx: CheckContext) -> None:
    name = ctx.spec.fail_closed
    if name is None or name not in ctx.states:
        return
    leaf = ctx.resolved.enter(name)
    if leaf is not None and ctx.kind_of(leaf) is StateKind.FINAL:
        ctx.report(
            "FAIL_CLOSED_STATE",
            f"fail_closed names final state {leaf!r}; an unproven outcome must stay resolvable "
            "by an operator, so name a wait state (e.g. recovery_required) instead",
            "$.fail_closed",
            ctx.spec.fail_closed_loc,
        )


# effects behind committed barriers -----------------------------------------------


def _check_effects(ctx: CheckContext, work: _Work) -> None:
    resolved = ctx.resolved
    if resolved.initial is None:
        return
    rows_from: dict[str, list[FlatRow]] = defaultdict(list)
    for row in resolved.rows:
        for source in row.sources:
            rows_from[source].append(row)
    start: _Node = (resolved.initial, True)
    parent: dict[_Node, tuple[_Node, str] | None] = {start: None}
    reported: set[str] = set()

    def path_to(node: _Node, last: str | None = None) -> str:
        steps: list[str] = [last] if last else []
        probe: _Node | None = node
        while probe is not None:
            came = parent[probe]
            if came is None:
                steps.append(f"{probe[0]} (initial)")
                break
            previous, event = came
            steps.append(f"--{event}--> {probe[0]}")
            if not previous[1]:  # the effect outcome that made the path dirty
                steps.append(previous[0])
                break
            probe = previous
        steps.reverse()
        if len(steps) > MAX_PATH_STEPS:
            steps = ["...", *steps[-MAX_PATH_STEPS:]]
        return " ".join(steps)

    def violation(path: str, offload: OffloadSpec, node: _Node, via: str | None) -> None:
        if path in reported or offload.direct:
            # an effect shorthand chooses the engine's own @effect commit as its
            # announcement: no barrier state is asked for (docs/spec-format.md)
            return
        reported.add(path)
        ctx.report(
            "EFFECT_WITHOUT_BARRIER",
            f"{offload.effect.value} effect {offload.hook!r} can start without a committed "
            f"barrier since the start or the last non-pure effect: {path_to(node, via)}; "
            "the engine will announce it with an @effect commit of its own before it starts "
            "(one more commit each time); add a barrier state before it whose committed "
            "outcome leads here to gather that announcement with the step's commit, or "
            "declare 'effect: pure' if running it again is harmless",
            path,
            offload.loc,
        )

    def enter(state: str, dirty: bool, node: _Node) -> None:
        own = work.state_offloads.get(state)
        if dirty and own is not None and own[1].effect is not EffectKind.PURE:
            violation(own[0], own[1], node, None)

    enter(start[0], False, start)  # its own effect runs after the @start commit
    queue: deque[_Node] = deque([start])
    while queue:
        node = queue.popleft()
        state, dirty = node
        for row in rows_from.get(state, ()):
            if work.is_committed_edge(state, row.event):
                after = False
            elif row.event in work.effect_outcomes.get(state, ()):
                after = True
            else:
                after = dirty
            target = state if row.internal else row.target
            if target is None:
                continue
            nxt: _Node = (target, after)
            carried = work.row_offloads.get(row.spec.where)
            if after and carried is not None and carried[1].effect is not EffectKind.PURE:
                parent.setdefault(nxt, (node, row.event))
                violation(carried[0], carried[1], nxt, None)
            if nxt == start and not row.internal:  # back in the initial state: no commit
                own = work.state_offloads.get(target)
                if own is not None and own[1].effect is not EffectKind.PURE:
                    violation(own[0], own[1], node, f"--{row.event}--> {target}")
            if nxt in parent:
                continue
            parent[nxt] = (node, row.event)
            if not row.internal:
                enter(target, after, nxt)
            queue.append(nxt)


# signals and recovery ------------------------------------------------------------


def _events_out(ctx: CheckContext, state: str) -> set[str]:
    return ctx.resolved.events_from.get(state, set())


def _check_wait_states(ctx: CheckContext, work: _Work) -> None:
    for state in ctx.resolved.leaves:
        if ctx.kind_of(state.name) is not StateKind.WAIT or state.timeout is not None:
            continue
        if state.name in ctx.partly_damaged:
            continue
        events = _events_out(ctx, state.name)
        if events and events <= work.internal:
            ctx.report(
                "WAIT_STATE_NO_SIGNAL",
                f"wait state {state.name!r} can only be left on engine-internal events "
                f"({', '.join(sorted(events))}), which nothing posts to a halted session; add a "
                "transition on an outside event (a signal such as an approval) or a timeout",
                ctx.state_path(state.name),
                state.loc,
            )


def _check_recovery(ctx: CheckContext, work: _Work) -> None:
    for state in ctx.resolved.leaves:
        if ctx.kind_of(state.name) is not StateKind.EXTERNAL or state.name in ctx.partly_damaged:
            continue
        if (
            state.timeout is not None
            or work.offloads.get(state.name)
            or work.barriers.get(state.name)
        ):
            continue
        events = _events_out(ctx, state.name)
        if events and events <= work.internal:
            ctx.report(
                "STATE_NO_RECOVERY",
                f"external state {state.name!r} waits only for engine-internal events "
                f"({', '.join(sorted(events))}) but starts no offload, barrier or timer; after a "
                "restart nothing could move it — give it the work that posts them, a timeout, "
                "or a transition on an outside event",
                ctx.state_path(state.name),
                state.loc,
            )


def _check_outcomes(ctx: CheckContext, work: _Work) -> None:
    for state in ctx.resolved.leaves:
        owners: list[tuple[str, list[str], SourceLoc]] = [
            (path, [o.completed, o.failed], o.loc) for path, o in work.offloads.get(state.name, ())
        ]
        owners += [
            (path, [event for _, event in b.outcome_events()], b.loc)
            for path, b in work.barriers.get(state.name, ())
        ]
        for path, events, loc in owners:
            for event in events:
                rows = ctx.candidates(state.name, event)
                if rows and not is_exhaustive(rows):
                    ctx.report(
                        "OUTCOME_NOT_EXHAUSTIVE",
                        f"in state {state.name!r} the rows for outcome event {event!r} can all "
                        "fail their guards; the outcome arrives once, so the session would stay "
                        "there for good — add a last unguarded row",
                        path,
                        loc,
                    )


def _check_barrier_signals(ctx: CheckContext, work: _Work) -> None:
    for state, barriers in work.barriers.items():
        if state in ctx.partly_damaged:
            continue
        outcome_rows = [
            row
            for _, barrier in barriers
            for _, event in barrier.outcome_events()
            for row in ctx.candidates(state, event)
        ]
        if any(row.internal for row in outcome_rows):
            continue  # an outcome may keep the session here: the row can be taken after it
        for row in ctx.resolved.rows:
            if state not in row.sources or row.declared_on or row.event in work.internal:
                continue
            ctx.report(
                "EVENT_IN_BARRIER_STATE",
                f"state {state!r} takes outside event {row.event!r}, but it runs a barrier whose "
                "every outcome leaves it, and a state takes no signal while its commit is in "
                "flight: this row is never taken (the signal waits for the state the outcome "
                "leads to); handle the event in the states around the barrier",
                row.spec.where,
                row.spec.loc,
            )
