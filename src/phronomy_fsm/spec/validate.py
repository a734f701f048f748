"""Static checks of a loaded spec: names, references, structure, barriers, timeouts.

:func:`validate_spec` collects **every** issue (it never stops at the first), each with a
stable code from :data:`phronomy_fsm.spec.issues.CODES`, a document path and a location.
The rules come from ``../shared/design/ARCHITECTURE.md`` ("Specs": unknown or duplicate
names, identifiers, collisions after normalisation, exactly one initial state, nothing
leaves a final state, unreachable and trap states, shadowed transitions, non-exhaustive
auto states, auto-only cycles, barrier outcomes, wait states with no way out), plus
issue 2's offload-event and hook-name rules. ``docs/spec-format.md`` lists the codes.
"""

from __future__ import annotations

import keyword
import os
import re
from collections import defaultdict, deque
from collections.abc import Iterable, Iterator

import attrs

from phronomy_fsm.runtime.timers import check_delay
from phronomy_fsm.spec.issues import SpecIssue, sort_issues
from phronomy_fsm.spec.loader import DEFAULT_MAX_BYTES, load_spec
from phronomy_fsm.spec.model import (
    STATE_COMPLETED,
    BarrierSpec,
    MachineSpec,
    OffloadSpec,
    SourceLoc,
    StateKind,
    StateSpec,
    TimeoutSpec,
    TransitionSpec,
)
from phronomy_fsm.spec.yaml_reader import render_path


def _path(section: str, name: str) -> str:
    """The document path of a named state or event, in the loader's notation."""
    return render_path((section, name))


_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_PAYLOAD_TYPE = re.compile(
    r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*(\[[A-Za-z0-9_., \[\]|]*\])?\Z"
)

#: Names a guard, action, offload hook or barrier may not take: they are the parameter
#: names of every generated Protocol method, or would confuse the generated API.
RESERVED_HOOK_NAMES = frozenset({"self", "ctx", "payload", "work"})
#: Names a machine may not take (they are modules of the generated package).
RESERVED_MACHINE_NAMES = frozenset({"table", "runtime", "generated"})


@attrs.frozen
class CheckResult:
    """A spec as loaded and validated: ``spec`` is ``None`` when it could not be read;
    ``issues`` holds loader and validator issues, sorted by location."""

    spec: MachineSpec | None
    issues: tuple[SpecIssue, ...]

    @property
    def ok(self) -> bool:
        """True when there is a spec and no issue of severity error."""
        return self.spec is not None and not any(i.is_error for i in self.issues)

    def errors(self) -> tuple[SpecIssue, ...]:
        """The issues of severity error."""
        return tuple(i for i in self.issues if i.is_error)


def check_spec_file(
    path: str | os.PathLike[str], *, max_bytes: int = DEFAULT_MAX_BYTES
) -> CheckResult:
    """Load the spec at ``path`` and validate it; never raises for bad input.

    Returns a :class:`CheckResult` with every issue found by the loader and, when a
    model could be built, by :func:`validate_spec`.
    """
    loaded = load_spec(path, max_bytes=max_bytes)
    issues = list(loaded.issues)
    if loaded.spec is not None:
        issues.extend(validate_spec(loaded.spec))
    return CheckResult(loaded.spec, tuple(sort_issues(issues)))


def validate_spec(spec: MachineSpec) -> list[SpecIssue]:
    """Return every issue in ``spec`` (an empty list when it is valid).

    Issues of severity ``warning`` (unused events, missing descriptions) do not make a
    spec invalid. The result is sorted by location.
    """
    return sort_issues(list(_Validator(spec).run()))


class _Validator:
    def __init__(self, spec: MachineSpec) -> None:
        self.spec = spec
        self.states = {s.name: s for s in spec.states}
        self.events = {e.name: e for e in spec.events}
        self.auto_declared = spec.implicit_state_completed
        self.rows: dict[tuple[str, str], list[TransitionSpec]] = defaultdict(list)
        for t in spec.transitions:
            for source in t.sources:
                self.rows[(source, t.event)].append(t)

    # helpers -----------------------------------------------------------------

    def issue(self, code: str, message: str, path: str, loc: SourceLoc) -> SpecIssue:
        return SpecIssue(code, message, path, loc)

    def event_known(self, name: str) -> bool:
        return name in self.events or (name == STATE_COMPLETED and self.auto_declared)

    def handled(self, state: str, event: str) -> bool:
        return bool(self.rows.get((state, event)))

    def run(self) -> Iterator[SpecIssue]:
        yield from self.check_names()
        yield from self.check_references()
        yield from self.check_initial()
        yield from self.check_finals()
        yield from self.check_state_completed()
        yield from self.check_work()
        yield from self.check_shadowing()
        yield from self.check_auto()
        yield from self.check_graph()
        yield from self.check_migrations()
        yield from self.check_usage()

    # names -------------------------------------------------------------------

    def check_name(
        self, name: str, what: str, path: str, loc: SourceLoc, *, hook: bool = False
    ) -> Iterator[SpecIssue]:
        if not _IDENT.match(name):
            yield self.issue(
                "INVALID_NAME",
                f"{what} name {name!r} is not an identifier: use ASCII letters, digits and "
                "underscores, not starting with a digit (e.g. 'calling_llm')",
                path,
                loc,
            )
            return
        if keyword.iskeyword(name) or keyword.issoftkeyword(name):
            yield self.issue(
                "RESERVED_NAME", f"{what} name {name!r} is a Python keyword; rename it", path, loc
            )
        elif name.startswith("_"):
            yield self.issue(
                "RESERVED_NAME",
                f"{what} name {name!r} starts with an underscore, which the generated code "
                "reserves; rename it",
                path,
                loc,
            )
        elif hook and name in RESERVED_HOOK_NAMES:
            yield self.issue(
                "RESERVED_NAME",
                f"{what} name {name!r} is a parameter name of every generated hook method; rename it",
                path,
                loc,
            )

    def check_names(self) -> Iterator[SpecIssue]:
        spec = self.spec
        yield from self.check_name(spec.machine, "machine", "$.machine", spec.loc)
        if spec.machine in RESERVED_MACHINE_NAMES:
            yield self.issue(
                "RESERVED_NAME",
                f"machine name {spec.machine!r} is a module of the generated package; rename it",
                "$.machine",
                spec.loc,
            )
        if spec.version < 1:
            yield self.issue(
                "BAD_VALUE", f"version must be 1 or more, got {spec.version}", "$.version", spec.loc
            )
        for kind, items in (("state", spec.states), ("event", spec.events)):
            seen: dict[str, str] = {}
            for item in items:
                path = f"$.{kind}s.{item.name}"
                yield from self.check_name(item.name, kind, path, item.loc)
                folded = item.name.upper()
                if folded in seen and seen[folded] != item.name:
                    yield self.issue(
                        "NAME_COLLISION",
                        f"{kind} {item.name!r} and {seen[folded]!r} both become the generated "
                        f"member {folded}; rename one of them",
                        path,
                        item.loc,
                    )
                seen.setdefault(folded, item.name)
        for event in spec.events:
            if event.payload is not None and not _PAYLOAD_TYPE.match(event.payload):
                yield self.issue(
                    "INVALID_NAME",
                    f"payload type {event.payload!r} of event {event.name!r} is not a type name "
                    "(a dotted identifier such as 'agent.LLMResult')",
                    _path("events", event.name) + ".payload",
                    event.loc,
                )
        # hook names: guards, actions, offload hooks and barriers share the namespace
        # of the generated Protocol's methods.
        categories: dict[str, dict[str, tuple[str, SourceLoc]]] = defaultdict(dict)
        for name, category, path, loc in self.hook_uses():
            yield from self.check_name(name, category, path, loc, hook=True)
            categories[name].setdefault(category, (path, loc))
        for name, uses in sorted(categories.items()):
            if len(uses) > 1:
                kinds = sorted(uses)
                path, loc = uses[kinds[1]]
                yield self.issue(
                    "NAME_CLASH",
                    f"{name!r} is used as {' and as '.join(kinds)}; each hook name must have one "
                    "role because it becomes one method of the generated Protocol — rename one",
                    path,
                    loc,
                )

    def hook_uses(self) -> Iterator[tuple[str, str, str, SourceLoc]]:
        for state in self.spec.states:
            base = _path("states", state.name)
            for i, action in enumerate(state.entry):
                yield action, "action", f"{base}.entry[{i}]", state.loc
            if state.offload:
                yield state.offload.hook, "offload hook", f"{base}.offload.hook", state.offload.loc
            if state.barrier:
                yield state.barrier.name, "barrier", f"{base}.barrier.name", state.barrier.loc
        for t in self.spec.transitions:
            base = f"$.transitions[{t.index}]"
            if t.guard:
                yield t.guard.name, "guard", f"{base}.guard", t.guard.loc
            for i, action in enumerate(t.actions):
                yield action, "action", f"{base}.actions[{i}]", t.loc
            if t.offload:
                yield t.offload.hook, "offload hook", f"{base}.offload.hook", t.offload.loc
            if t.barrier:
                yield t.barrier.name, "barrier", f"{base}.barrier.name", t.barrier.loc

    # references --------------------------------------------------------------

    def check_references(self) -> Iterator[SpecIssue]:
        known_states = ", ".join(sorted(self.states)) or "(none)"
        for t in self.spec.transitions:
            base = f"$.transitions[{t.index}]"
            seen_sources: set[str] = set()
            for i, source in enumerate(t.sources):
                if source in seen_sources:
                    yield self.issue(
                        "BAD_VALUE",
                        f"state {source!r} is listed twice in 'from'",
                        f"{base}.from[{i}]",
                        t.loc,
                    )
                seen_sources.add(source)
                if source not in self.states:
                    yield self.issue(
                        "UNKNOWN_STATE",
                        f"transition leaves unknown state {source!r}; declared states: {known_states}",
                        f"{base}.from",
                        t.loc,
                    )
            if not t.sources:
                yield self.issue("MISSING_KEY", "'from' names no state", f"{base}.from", t.loc)
            if t.target is not None and t.target not in self.states:
                yield self.issue(
                    "UNKNOWN_STATE",
                    f"transition goes to unknown state {t.target!r}; declared states: {known_states}",
                    f"{base}.to",
                    t.loc,
                )
            if not self.event_known(t.event):
                yield self.issue(
                    "UNKNOWN_EVENT",
                    f"transition fires on undeclared event {t.event!r}; declare it under 'events'",
                    f"{base}.event",
                    t.loc,
                )
        for path, event, loc in self.work_events():
            if not self.event_known(event):
                yield self.issue(
                    "UNKNOWN_EVENT",
                    f"event {event!r} is not declared; declare it under 'events'",
                    path,
                    loc,
                )

    def work_events(self) -> Iterator[tuple[str, str, SourceLoc]]:
        for owner_path, offload, barrier, timeout in self.work_owners():
            if offload:
                yield f"{owner_path}.offload.completed", offload.completed, offload.loc
                yield f"{owner_path}.offload.failed", offload.failed, offload.loc
            if barrier:
                for outcome, event in barrier.outcome_events():
                    if event is not None:
                        yield f"{owner_path}.barrier.{outcome}", event, barrier.loc
            if timeout:
                yield f"{owner_path}.timeout.event", timeout.event, timeout.loc

    def work_owners(
        self,
    ) -> Iterator[tuple[str, OffloadSpec | None, BarrierSpec | None, TimeoutSpec | None]]:
        for s in self.spec.states:
            yield _path("states", s.name), s.offload, s.barrier, s.timeout
        for t in self.spec.transitions:
            yield f"$.transitions[{t.index}]", t.offload, t.barrier, None

    # initial and final -------------------------------------------------------

    def check_initial(self) -> Iterator[SpecIssue]:
        initial = self.spec.initial_states
        if not initial:
            yield self.issue(
                "NO_INITIAL_STATE",
                "no state is marked 'initial: true'; mark exactly one",
                "$.states",
                self.spec.loc,
            )
        for extra in initial[1:]:
            yield self.issue(
                "MULTIPLE_INITIAL_STATES",
                f"state {extra.name!r} is also marked initial (first: {initial[0].name!r}); keep one",
                _path("states", extra.name) + ".initial",
                extra.loc,
            )
        for state in initial[:1]:
            if state.kind in (StateKind.WAIT, StateKind.FINAL):
                yield self.issue(
                    "INITIAL_STATE_KIND",
                    f"initial state {state.name!r} is a {state.kind.value} state; a session must be "
                    "able to start running there (use auto or external)",
                    _path("states", state.name) + ".kind",
                    state.loc,
                )
        if not any(s.is_final for s in self.spec.states):
            yield self.issue(
                "NO_FINAL_STATE",
                "no state has kind 'final'; every session must be able to end",
                "$.states",
                self.spec.loc,
            )

    def check_finals(self) -> Iterator[SpecIssue]:
        for t in self.spec.transitions:
            for source in t.sources:
                state = self.states.get(source)
                if state is not None and state.is_final:
                    yield self.issue(
                        "FINAL_STATE_EXIT",
                        f"transition leaves final state {source!r}; nothing may leave a final state "
                        "(make it external or wait, or remove the row)",
                        f"$.transitions[{t.index}].from",
                        t.loc,
                    )
        for state in self.spec.states:
            if state.is_final and (state.entry or state.offload or state.barrier or state.timeout):
                yield self.issue(
                    "FINAL_STATE_EXIT",
                    f"final state {state.name!r} declares entry work; a final state only ends the "
                    "session — move the work to the transition into it",
                    _path("states", state.name),
                    state.loc,
                )

    # state_completed ---------------------------------------------------------

    def check_state_completed(self) -> Iterator[SpecIssue]:
        declared = self.events.get(STATE_COMPLETED)
        if declared is not None and declared.payload is not None:
            yield self.issue(
                "STATE_COMPLETED_MISUSE",
                "state_completed is posted by the engine without a payload; remove 'payload'",
                _path("events", STATE_COMPLETED) + ".payload",
                declared.loc,
            )
        for t in self.spec.transitions:
            if t.event != STATE_COMPLETED:
                continue
            for source in t.sources:
                state = self.states.get(source)
                if state is not None and state.kind is not StateKind.AUTO:
                    yield self.issue(
                        "STATE_COMPLETED_MISUSE",
                        f"state_completed is only posted in auto states, but {source!r} is "
                        f"{state.kind.value}; this row can never fire",
                        f"$.transitions[{t.index}].event",
                        t.loc,
                    )
            if t.target is None:
                yield self.issue(
                    "STATE_COMPLETED_MISUSE",
                    "an internal state_completed row leaves the auto state stuck; give it a target",
                    f"$.transitions[{t.index}]",
                    t.loc,
                )
        for path, event, loc in self.work_events():
            if event == STATE_COMPLETED:
                yield self.issue(
                    "STATE_COMPLETED_MISUSE",
                    "state_completed is reserved for auto states; name a dedicated event here",
                    path,
                    loc,
                )

    # offloads, barriers, timeouts ---------------------------------------------

    def check_work(self) -> Iterator[SpecIssue]:
        for state in self.spec.states:
            base = _path("states", state.name)
            yield from self.check_work_owner(
                base, state, state.offload, state.barrier, [state.name], state.loc
            )
            if state.timeout is not None:
                timeout = state.timeout
                if state.kind not in (StateKind.EXTERNAL, StateKind.WAIT):
                    yield self.issue(
                        "TIMEOUT_INVALID",
                        f"{state.kind.value} state {state.name!r} cannot wait, so a timeout never "
                        "fires there; put it on an external or wait state",
                        f"{base}.timeout",
                        timeout.loc,
                    )
                try:
                    check_delay(timeout.seconds, "timeout seconds")
                except ValueError as exc:
                    yield self.issue(
                        "TIMEOUT_INVALID", str(exc), f"{base}.timeout.seconds", timeout.loc
                    )
                if self.event_known(timeout.event) and not self.handled(state.name, timeout.event):
                    yield self.issue(
                        "TIMEOUT_INVALID",
                        f"state {state.name!r} has no transition for its timeout event {timeout.event!r}",
                        f"{base}.timeout.event",
                        timeout.loc,
                    )
        for t in self.spec.transitions:
            base = f"$.transitions[{t.index}]"
            if t.target is None:
                if t.offload or t.barrier:
                    yield self.issue(
                        "INTERNAL_TRANSITION_WORK",
                        "an internal transition (no 'to') cannot start an offload or barrier; "
                        "give it a target state that handles the outcome events",
                        base,
                        t.loc,
                    )
                continue
            target = self.states.get(t.target)
            if target is None:
                continue
            yield from self.check_work_owner(
                base, target, t.offload, t.barrier, [t.target], t.loc, via_transition=True
            )

    def check_work_owner(
        self,
        base: str,
        state: StateSpec,
        offload: OffloadSpec | None,
        barrier: BarrierSpec | None,
        handlers: list[str],
        loc: SourceLoc,
        *,
        via_transition: bool = False,
    ) -> Iterator[SpecIssue]:
        if offload is None and barrier is None:
            return
        where = f"target state {state.name!r}" if via_transition else f"state {state.name!r}"
        if offload is not None and barrier is not None:
            yield self.issue(
                "WORK_CONFLICT",
                "declare either an offload or a barrier here, not both; chain two states instead",
                base,
                loc,
            )
        if via_transition and (state.offload is not None or state.barrier is not None):
            yield self.issue(
                "WORK_CONFLICT",
                f"{where} already starts its own offload or barrier; a transition into it may not add another",
                base,
                loc,
            )
        if state.kind is not StateKind.EXTERNAL:
            yield self.issue(
                "WORK_CONFLICT",
                f"{where} is {state.kind.value}; offloads and barriers need an external state that "
                "waits for their outcome events",
                base,
                loc,
            )
            return
        if offload is not None:
            for outcome in ("completed", "failed"):
                event = getattr(offload, outcome)
                if self.event_known(event) and not any(self.handled(h, event) for h in handlers):
                    yield self.issue(
                        "OFFLOAD_EVENT_UNHANDLED",
                        f"{where} runs offload hook {offload.hook!r} but has no transition for its "
                        f"{outcome} event {event!r}",
                        f"{base}.offload.{outcome}",
                        offload.loc,
                    )
        if barrier is not None:
            seen: dict[str, str] = {}
            for outcome, event in barrier.outcome_events():
                if event is None:
                    yield self.issue(
                        "BARRIER_OUTCOME_UNHANDLED",
                        f"barrier {barrier.name!r} names no event for outcome {outcome!r}; add "
                        f"'{outcome}: <event>' and a transition for it",
                        f"{base}.barrier",
                        barrier.loc,
                    )
                    continue
                if event in seen:
                    yield self.issue(
                        "BAD_VALUE",
                        f"barrier {barrier.name!r} uses event {event!r} for both {seen[event]!r} and "
                        f"{outcome!r}; each outcome needs its own event",
                        f"{base}.barrier.{outcome}",
                        barrier.loc,
                    )
                seen[event] = outcome
                if self.event_known(event) and not any(self.handled(h, event) for h in handlers):
                    yield self.issue(
                        "BARRIER_OUTCOME_UNHANDLED",
                        f"{where} commits barrier {barrier.name!r} but has no transition for its "
                        f"{outcome} event {event!r}",
                        f"{base}.barrier.{outcome}",
                        barrier.loc,
                    )

    # shadowing and auto states ----------------------------------------------

    def check_shadowing(self) -> Iterator[SpecIssue]:
        for (state, event), rows in self.rows.items():
            covered: set[tuple[str, bool]] = set()
            unguarded: TransitionSpec | None = None
            for row in rows:
                reason = None
                if unguarded is not None:
                    reason = f"row {unguarded.index} has no guard and always wins"
                elif row.guard is not None and (row.guard.name, row.guard.negated) in covered:
                    reason = f"an earlier row has the same guard {row.guard.render()!r}"
                elif any((g, True) in covered and (g, False) in covered for g, _ in covered):
                    reason = (
                        "earlier rows test a guard and its negation, so one of them always wins"
                    )
                if reason is not None:
                    yield self.issue(
                        "SHADOWED_TRANSITION",
                        f"from {state!r} on {event!r} this row can never fire: {reason}; reorder or "
                        "remove it",
                        f"$.transitions[{row.index}]",
                        row.loc,
                    )
                    continue
                if row.guard is None:
                    unguarded = row
                else:
                    covered.add((row.guard.name, row.guard.negated))

    def check_auto(self) -> Iterator[SpecIssue]:
        for state in self.spec.states:
            if state.kind is not StateKind.AUTO:
                continue
            rows = self.rows.get((state.name, STATE_COMPLETED), [])
            guards = {(r.guard.name, r.guard.negated) for r in rows if r.guard is not None}
            exhaustive = any(r.guard is None for r in rows) or any(
                (g, not n) in guards for g, n in guards
            )
            if not exhaustive:
                what = (
                    "has no state_completed transition"
                    if not rows
                    else "has state_completed rows whose guards can all fail"
                )
                yield self.issue(
                    "AUTO_NOT_EXHAUSTIVE",
                    f"auto state {state.name!r} {what}; add a last unguarded row so the session "
                    "always moves on",
                    _path("states", state.name),
                    state.loc,
                )
        # cycles of auto states linked by state_completed rows (Tarjan's SCC)
        graph: dict[str, list[str]] = defaultdict(list)
        for t in self.spec.transitions:
            if t.event != STATE_COMPLETED or t.target is None:
                continue
            for source in t.sources:
                src, dst = self.states.get(source), self.states.get(t.target)
                if src and dst and src.kind is StateKind.AUTO and dst.kind is StateKind.AUTO:
                    graph[source].append(t.target)
        for component in _strongly_connected(graph):
            if len(component) > 1 or component[0] in graph.get(component[0], []):
                first = min(component, key=lambda n: (self.states[n].loc, n))
                cycle = " -> ".join(sorted(component))
                yield self.issue(
                    "AUTO_CYCLE",
                    f"auto states {cycle} form a cycle that runs without outside input; make one of "
                    "them external or break the cycle",
                    _path("states", first),
                    self.states[first].loc,
                )

    # reachability ------------------------------------------------------------

    def check_graph(self) -> Iterator[SpecIssue]:
        forward: dict[str, set[str]] = defaultdict(set)
        backward: dict[str, set[str]] = defaultdict(set)
        for t in self.spec.transitions:
            if t.target is None or t.target not in self.states:
                continue
            for source in t.sources:
                if source in self.states:
                    forward[source].add(t.target)
                    backward[t.target].add(source)
        initial = self.spec.initial_states
        if initial:
            reached = _reach([initial[0].name], forward)
            for state in self.spec.states:
                if state.name not in reached:
                    yield self.issue(
                        "UNREACHABLE_STATE",
                        f"state {state.name!r} cannot be reached from the initial state "
                        f"{initial[0].name!r}; add a transition into it or remove it",
                        _path("states", state.name),
                        state.loc,
                    )
        finals = [s.name for s in self.spec.states if s.is_final]
        if not finals:
            return
        can_finish = _reach(finals, backward)
        for state in self.spec.states:
            if state.name in can_finish:
                continue
            if state.kind is StateKind.WAIT and not forward.get(state.name):
                yield self.issue(
                    "WAIT_STATE_NO_EXIT",
                    f"wait state {state.name!r} has no transition out; the outside call that resumes "
                    "it needs an event to fire — add one",
                    _path("states", state.name),
                    state.loc,
                )
                continue
            yield self.issue(
                "TRAP_STATE",
                f"no path leads from state {state.name!r} to a final state; a session entering it "
                "could never end — add a way out",
                _path("states", state.name),
                state.loc,
            )

    # migrations and usage ----------------------------------------------------

    def check_migrations(self) -> Iterator[SpecIssue]:
        seen: set[tuple[int, str | None]] = set()
        for i, migration in enumerate(self.spec.migrations):
            base = f"$.migrations[{i}]"
            key = (migration.from_version, migration.from_sha256)
            if key in seen:
                yield self.issue(
                    "DUPLICATE_MIGRATION",
                    f"another migration already covers version {migration.from_version}"
                    + (f" with sha256 {migration.from_sha256}" if migration.from_sha256 else ""),
                    base,
                    migration.loc,
                )
            seen.add(key)
            if migration.from_version > self.spec.version:
                yield self.issue(
                    "BAD_VALUE",
                    f"migration from version {migration.from_version} is newer than this spec "
                    f"(version {self.spec.version}); migrations map older specs to this one",
                    f"{base}.from_version",
                    migration.loc,
                )
            if migration.from_sha256 is not None and not re.fullmatch(
                r"[0-9a-f]{64}", migration.from_sha256
            ):
                yield self.issue(
                    "BAD_VALUE",
                    "from_sha256 must be 64 lowercase hex digits (the sha256 of the old spec file)",
                    f"{base}.from_sha256",
                    migration.loc,
                )
            for old, new in migration.rename_states:
                yield from self.check_name(
                    old, "state", f"{base}.rename_states.{old}", migration.loc
                )
                if new not in self.states:
                    yield self.issue(
                        "UNKNOWN_STATE",
                        f"migration maps {old!r} to {new!r}, which this spec does not declare",
                        f"{base}.rename_states.{old}",
                        migration.loc,
                    )

    def check_usage(self) -> Iterator[SpecIssue]:
        used = {t.event for t in self.spec.transitions}
        for event in self.spec.events:
            if event.name not in used:
                yield self.issue(
                    "UNUSED_EVENT",
                    f"event {event.name!r} is declared but no transition uses it",
                    _path("events", event.name),
                    event.loc,
                )
        for state in self.spec.states:
            if not state.description.strip():
                yield self.issue(
                    "MISSING_DESCRIPTION",
                    f"state {state.name!r} has no description",
                    _path("states", state.name),
                    state.loc,
                )
        for t in self.spec.transitions:
            if not t.description.strip():
                yield self.issue(
                    "MISSING_DESCRIPTION",
                    f"transition {t.render()} has no description",
                    f"$.transitions[{t.index}]",
                    t.loc,
                )


def _reach(starts: Iterable[str], edges: dict[str, set[str]]) -> set[str]:
    seen = set(starts)
    queue = deque(seen)
    while queue:
        node = queue.popleft()
        for nxt in edges.get(node, ()):
            if nxt not in seen:
                seen.add(nxt)
                queue.append(nxt)
    return seen


def _strongly_connected(graph: dict[str, list[str]]) -> list[list[str]]:
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
