"""Validation checks over the flat table: work (offloads, barriers, timeouts),
``state_completed``, shadowed rows, auto states and reachability.

Each check reads the rows of :class:`~phronomy_fsm.spec.resolve.ResolvedMachine` (rows
declared on compound states already apply to the states inside them, in priority order)
and reports through the :class:`~phronomy_fsm.spec.check_context.CheckContext`. Checks
that conclude from a *missing* row run only when every row is known
(``CheckContext.rows_complete``). The codes are listed in ``docs/spec-format.md``.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Iterable, Sequence

from phronomy_fsm.spec.check_context import CheckContext
from phronomy_fsm.spec.model import (
    STATE_COMPLETED,
    BarrierSpec,
    OffloadSpec,
    SourceLoc,
    StateKind,
    StateSpec,
)
from phronomy_fsm.spec.resolve import FlatRow
from phronomy_fsm.table import check_delay


def run(ctx: CheckContext) -> None:
    """Run every check of this module."""
    _check_state_completed(ctx)
    _check_work(ctx)
    _check_shadowing(ctx)
    _check_auto(ctx)
    _check_graph(ctx)


def is_exhaustive(rows: Sequence[FlatRow]) -> bool:
    """True when one of ``rows`` always passes: an unguarded row, or a guard and its
    negation."""
    guards = {(r.spec.guard.name, r.spec.guard.negated) for r in rows if r.spec.guard}
    return any(r.spec.guard is None for r in rows) or any((g, not n) in guards for g, n in guards)


# state_completed -----------------------------------------------------------------


def _check_state_completed(ctx: CheckContext) -> None:
    declared = next((e for e in ctx.spec.events if e.name == STATE_COMPLETED), None)
    if declared is not None and declared.payload is not None:
        ctx.report(
            "STATE_COMPLETED_MISUSE",
            "state_completed is posted by the engine without a payload; remove 'payload'",
            f"$.events.{STATE_COMPLETED}.payload",
            declared.loc,
        )
    reported: set[str] = set()
    for row in ctx.resolved.rows:
        if row.event != STATE_COMPLETED:
            continue
        where = row.spec.where
        for source in row.sources:
            kind = ctx.kind_of(source)
            if kind is not None and kind is not StateKind.AUTO and where not in reported:
                reported.add(where)
                ctx.report(
                    "STATE_COMPLETED_MISUSE",
                    f"state_completed is only posted in auto states, but {source!r} is "
                    f"{kind.value}; this row can never fire there",
                    f"{where}.event",
                    row.spec.loc,
                )
        if row.internal and f"{where}#internal" not in reported:
            reported.add(f"{where}#internal")
            ctx.report(
                "STATE_COMPLETED_MISUSE",
                "an internal state_completed row leaves the auto state stuck; give it a target",
                where,
                row.spec.loc,
            )
    for path, event, loc in _owned_work_events(ctx):
        if event == STATE_COMPLETED:
            ctx.report(
                "STATE_COMPLETED_MISUSE",
                "state_completed is reserved for auto states; name a dedicated event here",
                path,
                loc,
            )


def _owned_work_events(ctx: CheckContext) -> Iterable[tuple[str, str, SourceLoc]]:
    owners: list[tuple[str, object]] = [(ctx.state_path(s.name), s) for s in ctx.spec.states]
    owners += [(t.where, t) for t in ctx.spec.transitions]
    for base, owner in owners:
        offload = getattr(owner, "offload", None)
        if offload is not None:
            yield f"{base}.offload.completed", offload.completed, offload.loc
            yield f"{base}.offload.failed", offload.failed, offload.loc
        barrier = getattr(owner, "barrier", None)
        if barrier is not None:
            for outcome, event in barrier.outcome_events():
                yield f"{base}.barrier.{outcome}", event, barrier.loc
        timeout = getattr(owner, "timeout", None)
        if timeout is not None:
            yield f"{base}.timeout.event", timeout.event, timeout.loc


# offloads, barriers, timeouts ---------------------------------------------------


def _check_work(ctx: CheckContext) -> None:
    resolved = ctx.resolved
    for state in resolved.leaves:
        base = ctx.state_path(state.name)
        effect = state.effect
        if effect is not None and (
            state.barrier is not None or state.offload != effect.as_offload()
        ):
            other = "a barrier" if state.barrier is not None else "an offload"
            ctx.report(
                "WORK_CONFLICT",
                f"state {state.name!r} declares both an effect and {other}; a state runs one "
                "piece of work — chain two states instead",
                f"{base}.effect",
                effect.loc,
            )
        _check_work_owner(ctx, base, state, state.offload, state.barrier, state.loc)
        timeout = state.timeout
        if timeout is None or state.name in ctx.kind_unknown:
            continue
        if state.kind not in (StateKind.EXTERNAL, StateKind.WAIT):
            assert state.kind is not None
            ctx.report(
                "TIMEOUT_INVALID",
                f"{state.kind.value} state {state.name!r} cannot wait, so a timeout never "
                "fires there; put it on an external or wait state",
                f"{base}.timeout",
                timeout.loc,
            )
        try:
            check_delay(timeout.seconds, "timeout seconds")
        except ValueError as exc:
            ctx.report("TIMEOUT_INVALID", str(exc), f"{base}.timeout.seconds", timeout.loc)
        if (
            ctx.rows_complete
            and ctx.event_known(timeout.event)
            and not ctx.handled(state.name, timeout.event)
        ):
            ctx.report(
                "TIMEOUT_INVALID",
                f"state {state.name!r} has no transition for its timeout event {timeout.event!r}",
                f"{base}.timeout.event",
                timeout.loc,
            )
    for t in ctx.spec.transitions:
        if t.target is None:
            if t.offload or t.barrier:
                ctx.report(
                    "INTERNAL_TRANSITION_WORK",
                    "an internal transition (no 'to') cannot start an offload or barrier; "
                    "give it a target state that handles the outcome events",
                    t.where,
                    t.loc,
                )
            continue
        leaf = resolved.enter(t.target)
        if leaf is None:
            continue
        _check_work_owner(
            ctx, t.where, resolved.states[leaf], t.offload, t.barrier, t.loc, via_transition=True
        )


def _check_work_owner(
    ctx: CheckContext,
    base: str,
    state: StateSpec,
    offload: OffloadSpec | None,
    barrier: BarrierSpec | None,
    loc: SourceLoc,
    *,
    via_transition: bool = False,
) -> None:
    if offload is None and barrier is None:
        return
    where = f"target state {state.name!r}" if via_transition else f"state {state.name!r}"
    if offload is not None and barrier is not None:
        ctx.report(
            "WORK_CONFLICT",
            "declare either an offload or a barrier here, not both; chain two states instead",
            base,
            loc,
        )
    if via_transition and (state.offload is not None or state.barrier is not None):
        ctx.report(
            "WORK_CONFLICT",
            f"{where} already starts its own offload or barrier; a transition into it may not "
            "add another",
            base,
            loc,
        )
    if state.name in ctx.kind_unknown:
        return
    if state.kind is not StateKind.EXTERNAL:
        assert state.kind is not None
        ctx.report(
            "WORK_CONFLICT",
            f"{where} is {state.kind.value}; offloads and barriers need an external state that "
            "waits for their outcome events",
            base,
            loc,
        )
        return
    complete = ctx.rows_complete
    if offload is not None:
        for outcome in ("completed", "failed"):
            event = getattr(offload, outcome)
            if complete and ctx.event_known(event) and not ctx.handled(state.name, event):
                ctx.report(
                    "OFFLOAD_EVENT_UNHANDLED",
                    f"{where} runs offload hook {offload.hook!r} but has no transition for its "
                    f"{outcome} event {event!r}",
                    f"{base}.offload.{outcome}",
                    offload.loc,
                )
    if barrier is not None:
        seen: dict[str, str] = {}
        for outcome, event in barrier.outcome_events():
            named = not barrier.is_derived(outcome)
            if event in seen:
                ctx.report(
                    "BAD_VALUE",
                    f"barrier {barrier.name!r} uses event {event!r} for both {seen[event]!r} and "
                    f"{outcome!r}; each outcome needs its own event",
                    f"{base}.barrier.{outcome}",
                    barrier.loc,
                )
            seen[event] = outcome
            if complete and ctx.event_known(event) and not ctx.handled(state.name, event):
                fix = f"add 'on_{outcome}: <state>' or a transition for it"
                if outcome in ("conflict", "outcome_unknown") and ctx.spec.fail_closed is None:
                    fix += ", or declare the machine's fail_closed state"
                ctx.report(
                    "BARRIER_OUTCOME_UNHANDLED",
                    f"{where} commits barrier {barrier.name!r} but has no transition for its "
                    f"{outcome} event {event!r}; {fix}",
                    f"{base}.barrier.{outcome}" if named else f"{base}.barrier",
                    barrier.loc,
                )


# shadowing -------------------------------------------------------------------------


def _shadow_reason(rows: Sequence[FlatRow], index: int) -> str | None:
    """Why ``rows[index]`` can never fire after ``rows[:index]``, or ``None``."""
    covered: set[tuple[str, bool]] = set()
    for earlier in rows[:index]:
        if earlier.spec.guard is None:
            return f"{earlier.spec.where} has no guard and always wins"
        covered.add((earlier.spec.guard.name, earlier.spec.guard.negated))
    row = rows[index]
    if row.spec.guard is not None and (row.spec.guard.name, row.spec.guard.negated) in covered:
        return f"an earlier row has the same guard {row.spec.guard.render()!r}"
    if any((g, True) in covered and (g, False) in covered for g, _ in covered):
        return "earlier rows test a guard and its negation, so one of them always wins"
    return None


def _check_shadowing(ctx: CheckContext) -> None:
    #: compound-declared row -> (leaves where it is a candidate, leaves where shadowed)
    on_compounds: dict[int, tuple[FlatRow, set[str], dict[str, str]]] = {}
    for (state, event), rows in ctx.resolved.candidates.items():
        for index, row in enumerate(rows):
            reason = _shadow_reason(rows, index)
            if row.declared_on:
                entry = on_compounds.setdefault(id(row), (row, set(), {}))
                entry[1].add(state)
                if reason is not None:
                    entry[2][state] = reason
                continue
            if reason is not None:
                ctx.report(
                    "SHADOWED_TRANSITION",
                    f"from {state!r} on {event!r} this row can never fire: {reason}; reorder or "
                    "remove it",
                    row.spec.where,
                    row.spec.loc,
                )
    for row, leaves, shadowed in on_compounds.values():
        if leaves and set(shadowed) == leaves:
            state = min(leaves)
            ctx.report(
                "SHADOWED_TRANSITION",
                f"this row on {', '.join(row.declared_on)} can never fire on {row.event!r}: in "
                f"every state inside, an earlier or more specific row always wins (in "
                f"{state!r}: {shadowed[state]}); remove it",
                row.spec.where,
                row.spec.loc,
            )


# auto states -------------------------------------------------------------------------


def _check_auto(ctx: CheckContext) -> None:
    for state in ctx.resolved.leaves:
        if not ctx.is_auto(state.name):
            continue
        rows = ctx.candidates(state.name, STATE_COMPLETED)
        if not is_exhaustive(rows):
            what = (
                "has no state_completed transition"
                if not rows
                else "has state_completed rows whose guards can all fail"
            )
            ctx.report(
                "AUTO_NOT_EXHAUSTIVE",
                f"auto state {state.name!r} {what}; add a last unguarded row so the session "
                "always moves on",
                ctx.state_path(state.name),
                state.loc,
            )
    graph: dict[str, list[str]] = defaultdict(list)
    for row in ctx.resolved.rows:
        if row.event != STATE_COMPLETED or row.target is None:
            continue
        for source in row.sources:
            if ctx.is_auto(source) and ctx.is_auto(row.target):
                graph[source].append(row.target)
    for component in strongly_connected(graph):
        if len(component) > 1 or component[0] in graph.get(component[0], []):
            first = min(component, key=lambda n: (ctx.states[n].loc, n))
            cycle = " -> ".join(sorted(component))
            ctx.report(
                "AUTO_CYCLE",
                f"auto states {cycle} form a cycle that runs without outside input; make one of "
                "them external or break the cycle",
                ctx.state_path(first),
                ctx.states[first].loc,
            )


# reachability ----------------------------------------------------------------------


def edges(ctx: CheckContext) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """``(forward, backward)`` adjacency between leaf states over the flat rows."""
    forward: dict[str, set[str]] = defaultdict(set)
    backward: dict[str, set[str]] = defaultdict(set)
    for row in ctx.resolved.rows:
        if row.target is None:
            continue
        for source in row.sources:
            forward[source].add(row.target)
            backward[row.target].add(source)
    return forward, backward


def _check_graph(ctx: CheckContext) -> None:
    if not ctx.rows_complete:
        return
    resolved = ctx.resolved
    forward, backward = edges(ctx)
    if resolved.initial is not None:
        reached = reach([resolved.initial], forward)
        for state in resolved.leaves:
            if state.name not in reached:
                ctx.report(
                    "UNREACHABLE_STATE",
                    f"state {state.name!r} cannot be reached from the initial state "
                    f"{resolved.initial!r}; add a transition into it or remove it",
                    ctx.state_path(state.name),
                    state.loc,
                )
    finals = [s.name for s in resolved.leaves if s.is_final]
    if not finals:
        return
    can_finish = reach(finals, backward)
    for state in resolved.leaves:
        if state.name in can_finish:
            continue
        if state.kind is StateKind.WAIT and not forward.get(state.name):
            ctx.report(
                "WAIT_STATE_NO_EXIT",
                f"wait state {state.name!r} has no transition out; the outside call that resumes "
                "it needs an event to fire — add one",
                ctx.state_path(state.name),
                state.loc,
            )
            continue
        ctx.report(
            "TRAP_STATE",
            f"no path leads from state {state.name!r} to a final state; a session entering it "
            "could never end — add a way out",
            ctx.state_path(state.name),
            state.loc,
        )


def reach(starts: Iterable[str], adjacency: dict[str, set[str]]) -> set[str]:
    """Every node reachable from ``starts`` (included) over ``adjacency``."""
    seen = set(starts)
    queue = deque(seen)
    while queue:
        node = queue.popleft()
        for nxt in adjacency.get(node, ()):
            if nxt not in seen:
                seen.add(nxt)
                queue.append(nxt)
    return seen


def strongly_connected(graph: dict[str, list[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative (specs may have thousands of states)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    result: list[list[str]] = []
    counter = 0
    nodes = set(graph) | {n for targets in graph.values() for n in targets}
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, iter(graph.get(root, ())))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, it = work[-1]
            advanced = False
            for nxt in it:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(graph.get(nxt, ()))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                result.append(component)
    return result
