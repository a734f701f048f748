"""Static checks of a loaded spec: names, references, hierarchy, structure, barriers,
timeouts and durability.

:func:`validate_spec` collects **every** issue (it never stops at the first), each with a
stable code from :data:`phronomy_fsm.spec.issues.CODES`, a document path and a location;
``docs/spec-format.md`` lists the codes with a failing example each. The checks live in
three modules that share a :class:`~phronomy_fsm.spec.check_context.CheckContext`:

- this one: names, references (with "did you mean"), compound states, the initial and
  final states, migrations and usage;
- :mod:`phronomy_fsm.spec.check_rows`: work (offloads, barriers, timeouts), shadowed
  rows, auto states, reachability;
- :mod:`phronomy_fsm.spec.check_durability`: effects behind committed barriers, wait
  states a signal can leave, recovery of external states, the fail-closed state.

Diagnostics lead to the cause: unknown names are checked first, and the later checks
read the spec *as if* each mistyped name were its nearest declared one, so one typo
gives one issue; parts the loader could not read are skipped rather than reported again;
issues are ordered root causes first (:func:`phronomy_fsm.spec.issues.sort_issues`).
"""

from __future__ import annotations

import keyword
import os
import re
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import attrs

from phronomy_fsm.spec import check_durability, check_rows
from phronomy_fsm.spec.check_context import CheckContext
from phronomy_fsm.spec.issues import SpecIssue, sort_issues
from phronomy_fsm.spec.loader import DEFAULT_MAX_BYTES, load_spec
from phronomy_fsm.spec.model import (
    BARRIER_OUTCOMES,
    OFFLOAD_OUTCOMES,
    EffectKind,
    MachineSpec,
    OutcomeTargetSpec,
    SourceLoc,
    StateKind,
    TransitionSpec,
    parse_rate,
)
from phronomy_fsm.spec.resolve import resolve_spec
from phronomy_fsm.spec.suggest import did_you_mean, nearest

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_PAYLOAD_TYPE = re.compile(
    r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*(\[[A-Za-z0-9_., \[\]|]*\])?\Z"
)

#: Names a guard, action, offload hook or barrier may not take: they are the parameter
#: names of every generated Protocol method, or would confuse the generated API.
RESERVED_HOOK_NAMES = frozenset({"self", "ctx", "payload", "work"})
#: Names a machine may not take (they are modules of the generated package).
RESERVED_MACHINE_NAMES = frozenset({"table", "runtime", "generated"})


def name_problem(name: str, what: str, *, hook: bool = False) -> tuple[str, str] | None:
    """``(code, message)`` when ``name`` cannot be a ``what`` name (``docs/spec-format.md``
    "Names"): not an identifier, a keyword, a leading underscore, or (``hook``) a
    parameter name of the generated hook methods; ``None`` when it is fine."""
    if not _IDENT.match(name):
        return (
            "INVALID_NAME",
            (
                f"{what} name {name!r} is not an identifier: use ASCII letters, digits and "
                "underscores, not starting with a digit (e.g. 'calling_llm')"
            ),
        )
    if keyword.iskeyword(name) or keyword.issoftkeyword(name):
        return "RESERVED_NAME", f"{what} name {name!r} is a Python keyword; rename it"
    if name.startswith("_"):
        return (
            "RESERVED_NAME",
            (
                f"{what} name {name!r} starts with an underscore, which the generated code "
                "reserves; rename it"
            ),
        )
    if hook and name in RESERVED_HOOK_NAMES:
        return (
            "RESERVED_NAME",
            f"{what} name {name!r} is a parameter name of every generated hook method; rename it",
        )
    return None


@attrs.frozen
class CheckResult:
    """A spec as loaded and validated: ``spec`` is ``None`` when it could not be read
    without a shape error; ``issues`` holds loader and validator issues, root causes
    first. The validator still checks the well-formed parts of a document with shape
    errors, so every independent problem is reported in one run."""

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

    Returns a :class:`CheckResult` with every issue found by the loader and by
    :func:`validate_spec`, which also checks the well-formed parts of a document that
    has shape errors (its ``spec`` is then ``None``).
    """
    loaded = load_spec(path, max_bytes=max_bytes)
    issues = list(loaded.issues)
    model = loaded.spec if loaded.spec is not None else loaded.partial
    if model is not None:
        issues.extend(validate_spec(model, damaged=loaded.damaged))
    return CheckResult(loaded.spec, tuple(sort_issues(issues)))


def validate_spec(spec: MachineSpec, *, damaged: frozenset[str] = frozenset()) -> list[SpecIssue]:
    """Return every issue in ``spec`` (an empty list when it is valid).

    Args:
        spec: a loaded spec (or the partial model of a document with shape errors).
        damaged: document paths the loader could not read (``LoadResult.damaged``);
            checks that would only report their consequences are skipped.

    Issues of severity ``warning`` (unused events, missing descriptions) do not make a
    spec invalid. The result is sorted root causes first, then by location.
    """
    validator = _Validator(spec, damaged)
    return sort_issues(validator.run())


class _Validator:
    """Runs every check; see the module docstring for the order and the repairs."""

    def __init__(self, spec: MachineSpec, damaged: frozenset[str]) -> None:
        self.spec = spec
        self.damaged = damaged
        self.written = resolve_spec(spec)
        self.first_issues: list[SpecIssue] = []
        #: unknown name -> nearest declared name (None: no close match)
        self.state_fixes: dict[str, str | None] = {}
        self.event_fixes: dict[str, str | None] = {}

    def report(self, code: str, message: str, path: str, loc: SourceLoc) -> None:
        self.first_issues.append(SpecIssue(code, message, path, loc))

    def run(self) -> list[SpecIssue]:
        self.check_names()
        self.check_references()
        repaired = self.repaired_spec()
        unresolved = None in self.state_fixes.values() or None in self.event_fixes.values()
        resolved = self.written if repaired is self.spec else resolve_spec(repaired)
        ctx = CheckContext(repaired, resolved, damaged=self.damaged, unresolved=unresolved)
        _check_hierarchy(ctx)
        _check_initial_and_final(ctx)
        check_rows.run(ctx)
        check_durability.run(ctx)
        _check_migrations(ctx)
        _check_limits(ctx)
        _check_usage(ctx, suggested=set(self.event_fixes.values()) - {None})
        return self.first_issues + ctx.issues

    # names -------------------------------------------------------------------

    def check_name(
        self, name: str, what: str, path: str, loc: SourceLoc, *, hook: bool = False
    ) -> None:
        problem = name_problem(name, what, hook=hook)
        if problem is not None:
            self.report(problem[0], problem[1], path, loc)

    def check_names(self) -> None:
        spec = self.spec
        if "$.machine" not in self.damaged:
            self.check_name(spec.machine, "machine", "$.machine", spec.loc)
            if spec.machine in RESERVED_MACHINE_NAMES:
                self.report(
                    "RESERVED_NAME",
                    f"machine name {spec.machine!r} is a module of the generated package; rename it",
                    "$.machine",
                    spec.loc,
                )
        if spec.version < 1 and "$.version" not in self.damaged:
            self.report(
                "BAD_VALUE", f"version must be 1 or more, got {spec.version}", "$.version", spec.loc
            )
        first_decl: dict[str, tuple[str, SourceLoc]] = {}
        for state in spec.states:
            path = spec.path_of(state)
            if state.name in first_decl and first_decl[state.name][1] != state.loc:
                other = first_decl[state.name]
                self.report(
                    "DUPLICATE_STATE",
                    f"state {state.name!r} is declared twice (first at line {other[1].line}, "
                    f"{other[0]}); state names are global across compound states — rename one",
                    path,
                    state.loc,
                )
            first_decl.setdefault(state.name, (path, state.loc))
        for kind, items in (("state", spec.states), ("event", spec.events)):
            seen: dict[str, str] = {}
            for item in items:
                path = (
                    spec.path_of(item)  # type: ignore[arg-type]
                    if kind == "state"
                    else f"$.events.{item.name}"
                )
                self.check_name(item.name, kind, path, item.loc)
                folded = item.name.upper()
                if folded in seen and seen[folded] != item.name:
                    self.report(
                        "NAME_COLLISION",
                        f"{kind} {item.name!r} and {seen[folded]!r} both become the generated "
                        f"member {folded}; rename one of them",
                        path,
                        item.loc,
                    )
                seen.setdefault(folded, item.name)
        for event in spec.events:
            if event.payload is not None and not _PAYLOAD_TYPE.match(event.payload):
                self.report(
                    "INVALID_NAME",
                    f"payload type {event.payload!r} of event {event.name!r} is not a type name "
                    "(a dotted identifier such as 'agent.LLMResult')",
                    f"$.events.{event.name}.payload",
                    event.loc,
                )
        if spec.fail_closed is not None:
            self.check_name(spec.fail_closed, "state", "$.fail_closed", spec.fail_closed_loc)
        if spec.final_commit is not None:
            self.check_name(spec.final_commit, "state", "$.final_commit", spec.final_commit_loc)
            if spec.state(spec.final_commit) is not None:
                self.report(
                    "DUPLICATE_STATE",
                    f"final_commit names state {spec.final_commit!r}; the @final commit is "
                    "drawn as a frame of its own around the final states — give it a name no "
                    "state has",
                    "$.final_commit",
                    spec.final_commit_loc,
                )
        # guards, actions, offload hooks and barriers share the generated Protocol
        categories: dict[str, dict[str, tuple[str, SourceLoc]]] = defaultdict(dict)
        for name, category, path, loc in _hook_uses(spec):
            self.check_name(name, category, path, loc, hook=True)
            categories[name].setdefault(category, (path, loc))
        for path, barrier, _ in spec.barriers():
            if barrier.event_prefix is not None:
                self.check_name(
                    barrier.event_prefix, "event prefix", f"{path}.event_prefix", barrier.loc
                )
        for name, uses in sorted(categories.items()):
            if len(uses) > 1:
                kinds = sorted(uses)
                path, loc = uses[kinds[1]]
                self.report(
                    "NAME_CLASH",
                    f"{name!r} is used as {' and as '.join(kinds)}; each hook name must have one "
                    "role because it becomes one method of the generated Protocol — rename one",
                    path,
                    loc,
                )

    # references --------------------------------------------------------------

    def unknown_state(self, name: str, what: str, path: str, loc: SourceLoc) -> None:
        known = self.written.states
        hint = did_you_mean(name, known)
        if name not in self.state_fixes:
            self.state_fixes[name] = nearest(name, known)
        listing = "" if hint else f"; declared states: {', '.join(sorted(known)) or '(none)'}"
        self.report("UNKNOWN_STATE", f"{what} unknown state {name!r}{hint}{listing}", path, loc)

    def unknown_event(self, name: str, what: str, path: str, loc: SourceLoc) -> None:
        known = self.written.event_names
        hint = did_you_mean(name, known)
        if name not in self.event_fixes:
            self.event_fixes[name] = nearest(name, known)
        self.report(
            "UNKNOWN_EVENT",
            f"{what} undeclared event {name!r}{hint}; declare it under 'events'",
            path,
            loc,
        )

    def check_references(self) -> None:
        states = self.written.states
        check_states = "$.states" not in self.damaged
        check_events = "$.events" not in self.damaged
        for declared in self.written.declared:
            t = declared.spec
            if declared.origin == "fail_closed":
                continue  # its target is the fail_closed state, checked below
            base = t.where
            seen_sources: set[str] = set()
            for i, source in enumerate(t.sources):
                if source in seen_sources:
                    self.report(
                        "BAD_VALUE",
                        f"state {source!r} is listed twice in 'from'",
                        f"{base}.from[{i}]",
                        t.loc,
                    )
                seen_sources.add(source)
                around = set(self.written.ancestors(source)) & set(t.sources)
                if around:
                    self.report(
                        "BAD_VALUE",
                        f"state {source!r} is inside {min(around)!r}, also listed in "
                        "'from'; a row on a compound state already applies to every state in it",
                        f"{base}.from[{i}]",
                        t.loc,
                    )
                if check_states and source not in states:
                    self.unknown_state(source, "transition leaves", f"{base}.from", t.loc)
            if not t.sources:
                self.report("MISSING_KEY", "'from' names no state", f"{base}.from", t.loc)
            if check_states and t.target is not None and t.target not in states:
                where = f"{base}.to" if declared.origin == "transition" else base
                self.unknown_state(t.target, "transition goes to", where, t.loc)
            if check_events and t.event not in self.written.event_names:
                self.unknown_event(t.event, "transition fires on", f"{base}.event", t.loc)
        if check_events:
            for path, event, loc in _work_events(self.spec):
                if event not in self.written.event_names:
                    self.unknown_event(event, "names", path, loc)
        fail_closed = self.spec.fail_closed
        if check_states and fail_closed is not None and fail_closed not in states:
            hint = did_you_mean(fail_closed, states)
            self.state_fixes.setdefault(fail_closed, nearest(fail_closed, states))
            self.report(
                "FAIL_CLOSED_STATE",
                f"fail_closed names unknown state {fail_closed!r}{hint}; name the state unproven "
                "barrier outcomes go to (e.g. a wait state recovery_required)",
                "$.fail_closed",
                self.spec.fail_closed_loc,
            )

    def repaired_spec(self) -> MachineSpec:
        """The spec with each unknown name that has a close match replaced by it."""
        fixes_s = {k: v for k, v in self.state_fixes.items() if v is not None}
        fixes_e = {k: v for k, v in self.event_fixes.items() if v is not None}
        if not fixes_s and not fixes_e:
            return self.spec

        def st(name: str | None) -> str | None:
            return fixes_s.get(name, name) if name is not None else None

        def ev(name: str) -> str:
            return fixes_e.get(name, name)

        def target(t: OutcomeTargetSpec) -> OutcomeTargetSpec:
            return attrs.evolve(t, to=fixes_s.get(t.to, t.to))

        def work(owner: object) -> dict[str, Any]:
            changes: dict[str, Any] = {}
            offload = getattr(owner, "offload", None)
            if offload is not None:
                changes["offload"] = attrs.evolve(
                    offload, completed=ev(offload.completed), failed=ev(offload.failed)
                )
            barrier = getattr(owner, "barrier", None)
            if barrier is not None:
                b_changes: dict[str, Any] = {}
                for outcome in BARRIER_OUTCOMES:
                    named = getattr(barrier, outcome)
                    if named is not None:
                        b_changes[outcome] = ev(named)
                    targets = barrier.targets_for(outcome)
                    if targets is not None:
                        b_changes[f"on_{outcome}"] = tuple(target(t) for t in targets)
                changes["barrier"] = attrs.evolve(barrier, **b_changes)
            effect = getattr(owner, "effect", None)
            if effect is not None:
                changes["effect"] = attrs.evolve(
                    effect,
                    **{
                        f"on_{outcome}": tuple(target(t) for t in targets)
                        for outcome in OFFLOAD_OUTCOMES
                        if (targets := effect.targets_for(outcome)) is not None
                    },
                )
            timeout = getattr(owner, "timeout", None)
            if timeout is not None:
                changes["timeout"] = attrs.evolve(timeout, event=ev(timeout.event))
            return changes

        rows = tuple(
            attrs.evolve(
                t,
                sources=tuple(st(s) or s for s in t.sources),
                target=st(t.target),
                event=ev(t.event),
                **work(t),
            )
            for t in self.spec.transitions
        )
        states = tuple(attrs.evolve(s, **work(s)) for s in self.spec.states)
        return attrs.evolve(
            self.spec, transitions=rows, states=states, fail_closed=st(self.spec.fail_closed)
        )


def _hook_uses(spec: MachineSpec) -> Iterator[tuple[str, str, str, SourceLoc]]:
    """``(name, role, path, loc)`` of every guard, action, offload hook and barrier."""
    for state in spec.states:
        base = spec.state_path(state.name)
        for i, action in enumerate(state.entry):
            yield action, "action", f"{base}.entry[{i}]", state.loc
        if state.offload:
            yield state.offload.hook, "offload hook", f"{base}.offload.hook", state.offload.loc
    for t in spec.transitions:
        base = t.where
        if t.guard:
            yield t.guard.name, "guard", f"{base}.guard", t.guard.loc
        for i, action in enumerate(t.actions):
            yield action, "action", f"{base}.actions[{i}]", t.loc
        if t.offload:
            yield t.offload.hook, "offload hook", f"{base}.offload.hook", t.offload.loc
    for path, barrier, _ in spec.barriers():
        yield barrier.name, "barrier", f"{path}.name", barrier.loc
        for outcome in BARRIER_OUTCOMES:
            for i, target in enumerate(barrier.targets_for(outcome) or ()):
                where = f"{path}.on_{outcome}[{i}]"
                if target.guard:
                    yield target.guard.name, "guard", f"{where}.guard", target.guard.loc
                for j, action in enumerate(target.actions):
                    yield action, "action", f"{where}.actions[{j}]", target.loc
    for path, effect, _ in spec.effects():
        for outcome in OFFLOAD_OUTCOMES:
            for i, target in enumerate(effect.targets_for(outcome) or ()):
                where = f"{path}.on_{outcome}[{i}]"
                if target.guard:
                    yield target.guard.name, "guard", f"{where}.guard", target.guard.loc
                for j, action in enumerate(target.actions):
                    yield action, "action", f"{where}.actions[{j}]", target.loc


def _work_events(spec: MachineSpec) -> Iterator[tuple[str, str, SourceLoc]]:
    """``(path, event, loc)`` of every event an offload, barrier or timeout names."""
    owners: list[tuple[str, object]] = [(spec.state_path(s.name), s) for s in spec.states]
    owners += [(t.where, t) for t in spec.transitions]
    for base, owner in owners:
        offload = getattr(owner, "offload", None)
        if offload is not None:
            yield f"{base}.offload.completed", offload.completed, offload.loc
            yield f"{base}.offload.failed", offload.failed, offload.loc
        barrier = getattr(owner, "barrier", None)
        if barrier is not None:
            for outcome in BARRIER_OUTCOMES:
                named = getattr(barrier, outcome)
                if named is not None:
                    yield f"{base}.barrier.{outcome}", named, barrier.loc
        timeout = getattr(owner, "timeout", None)
        if timeout is not None:
            yield f"{base}.timeout.event", timeout.event, timeout.loc


# hierarchy ---------------------------------------------------------------------


def _check_hierarchy(ctx: CheckContext) -> None:
    resolved = ctx.resolved
    entering: dict[str, list[TransitionSpec]] = defaultdict(list)
    for declared in resolved.declared:
        if declared.spec.target is not None:
            entering[declared.spec.target].append(declared.spec)
    for state in resolved.compounds:
        path = ctx.state_path(state.name)
        written = [
            key
            for key, value in (
                ("kind", state.kind),
                ("entry", state.entry),
                ("offload", state.offload),
                ("barrier", state.barrier),
                ("timeout", state.timeout),
            )
            if value
        ]
        if written:
            ctx.report(
                "COMPOUND_STATE_WORK",
                f"compound state {state.name!r} declares {', '.join(written)}; a compound state "
                "only groups states (description, initial, states) — put kind and work on "
                "the states inside it",
                path,
                state.loc,
            )
        # every declaration inside it, repeated names included (DUPLICATE_STATE says so)
        inside = [s for s in ctx.spec.states if s.parent == state.name]
        children = [s.name for s in inside]
        initial = [s.name for s in inside if s.initial]
        if not initial:
            into = entering.get(state.name, [])
            why = (
                f"; {len(into)} row(s) enter it (e.g. {into[0].where}) and cannot know which "
                "child to enter"
                if into
                else ""
            )
            what = "declares no states" if not children else "marks no child 'initial: true'"
            ctx.report(
                "COMPOUND_NO_INITIAL",
                f"compound state {state.name!r} {what}{why}; mark exactly one child initial",
                path,
                state.loc,
            )
        marked = [s for s in inside if s.initial]
        for extra in marked[1:]:
            ctx.report(
                "MULTIPLE_INITIAL_STATES",
                f"state {extra.name!r} is also marked initial inside {state.name!r} (first: "
                f"{initial[0]!r}); keep one",
                ctx.spec.path_of(extra) + ".initial",
                extra.loc,
            )


# initial and final -----------------------------------------------------------


def _check_initial_and_final(ctx: CheckContext) -> None:
    spec, resolved = ctx.spec, ctx.resolved
    if ctx.states_damaged:
        return
    initial = spec.initial_states
    if not initial:
        where = "top-level state" if resolved.compounds else "state"
        ctx.report(
            "NO_INITIAL_STATE",
            f"no {where} is marked 'initial: true'; mark exactly one",
            "$.states",
            spec.loc,
        )
    for extra in initial[1:]:
        ctx.report(
            "MULTIPLE_INITIAL_STATES",
            f"state {extra.name!r} is also marked initial (first: {initial[0].name!r}); keep one",
            ctx.state_path(extra.name) + ".initial",
            extra.loc,
        )
    if initial and resolved.initial is not None:
        leaf = resolved.states[resolved.initial]
        kind = ctx.kind_of(leaf.name)
        if kind in (StateKind.WAIT, StateKind.FINAL):
            assert kind is not None
            ctx.report(
                "INITIAL_STATE_KIND",
                f"initial state {leaf.name!r} is a {kind.value} state; a session must be able "
                "to start running there (use auto or external)",
                ctx.state_path(leaf.name) + ".kind",
                leaf.loc,
            )
    if not ctx.kind_unknown and not any(s.is_final for s in resolved.leaves):
        ctx.report(
            "NO_FINAL_STATE",
            "no state has kind 'final'; every session must be able to end",
            "$.states",
            spec.loc,
        )
    for row in resolved.rows:
        if row.declared_on:
            continue  # rows on compound states skip final states (lowering)
        for source in row.sources:
            if ctx.kind_of(source) is StateKind.FINAL:
                ctx.report(
                    "FINAL_STATE_EXIT",
                    f"transition leaves final state {source!r}; nothing may leave a final state "
                    "(make it external or wait, or remove the row)",
                    f"{row.spec.where}.from",
                    row.spec.loc,
                )
    for state in resolved.leaves:
        if state.is_final and state.has_work:
            ctx.report(
                "FINAL_STATE_EXIT",
                f"final state {state.name!r} declares entry work; a final state only ends the "
                "session — move the work to the transition into it",
                ctx.state_path(state.name),
                state.loc,
            )


# limits -----------------------------------------------------------------------


def _check_limits(ctx: CheckContext) -> None:
    """Every limit names declared, non-pure effects, a key of a known form, and a
    concurrency or rate of at least 1 (``docs/spec-format.md``, "Limits")."""
    spec = ctx.spec
    kinds: dict[str, EffectKind] = {}
    for state in spec.states:
        if state.offload is not None:
            kinds.setdefault(state.offload.hook, state.offload.effect)
    for row in spec.transitions:
        if row.offload is not None:
            kinds.setdefault(row.offload.hook, row.offload.effect)
    for limit in spec.limits:
        base = f"$.limits.{limit.name}"
        problem = name_problem(limit.name, "limit")
        if problem is not None:
            ctx.report(problem[0], problem[1], base, limit.loc)
        if not limit.effects:
            ctx.report(
                "LIMIT_UNKNOWN_EFFECT",
                f"limit {limit.name!r} covers no effect: list the offload hooks it limits "
                "under effects",
                f"{base}.effects",
                limit.loc,
            )
        for effect in limit.effects:
            kind = kinds.get(effect)
            if kind is None:
                ctx.report(
                    "LIMIT_UNKNOWN_EFFECT",
                    f"limit {limit.name!r} names effect {effect!r}, which no state or "
                    "transition of this spec offloads" + did_you_mean(effect, sorted(kinds)),
                    f"{base}.effects",
                    limit.loc,
                )
            elif kind is EffectKind.PURE:
                ctx.report(
                    "LIMIT_PURE_EFFECT",
                    f"limit {limit.name!r} names the pure effect {effect!r}; a pure effect "
                    "starts without the engine's gate, so no limit applies to it: declare "
                    "it idempotent or at_most_once, or drop it from the limit",
                    f"{base}.effects",
                    limit.loc,
                )
        if limit.key is not None and limit.key_parts is None:
            ctx.report(
                "LIMIT_BAD_KEY",
                f"limit {limit.name!r} has key {limit.key!r}: write label.<name> (a label "
                "of the execution) or context.<field> (a field of its context), or leave "
                "key out for one key for all",
                f"{base}.key",
                limit.loc,
            )
        if limit.concurrency is None and limit.rate is None:
            ctx.report(
                "LIMIT_BAD_NUMBER",
                f"limit {limit.name!r} sets neither concurrency nor rate: give at least one",
                base,
                limit.loc,
            )
        if limit.concurrency is not None and limit.concurrency < 1:
            ctx.report(
                "LIMIT_BAD_NUMBER",
                f"limit {limit.name!r}: concurrency must be at least 1, got {limit.concurrency}",
                f"{base}.concurrency",
                limit.loc,
            )
        if limit.rate is not None:
            rate = parse_rate(limit.rate)
            if rate is None or rate[0] < 1:
                ctx.report(
                    "LIMIT_BAD_NUMBER",
                    f"limit {limit.name!r}: rate {limit.rate!r} is not '<N> per "
                    "second|minute|hour' with N at least 1 (e.g. '600 per minute')",
                    f"{base}.rate",
                    limit.loc,
                )


# migrations and usage ----------------------------------------------------------


def _check_migrations(ctx: CheckContext) -> None:
    spec = ctx.spec
    seen: set[tuple[int, str | None]] = set()
    for i, migration in enumerate(spec.migrations):
        base = f"$.migrations[{i}]"
        key = (migration.from_version, migration.from_sha256)
        if key in seen:
            ctx.report(
                "DUPLICATE_MIGRATION",
                f"another migration already covers version {migration.from_version}"
                + (f" with sha256 {migration.from_sha256}" if migration.from_sha256 else ""),
                base,
                migration.loc,
            )
        seen.add(key)
        if migration.from_version > spec.version:
            ctx.report(
                "BAD_VALUE",
                f"migration from version {migration.from_version} is newer than this spec "
                f"(version {spec.version}); migrations map older specs to this one",
                f"{base}.from_version",
                migration.loc,
            )
        if migration.from_sha256 is not None and not re.fullmatch(
            r"[0-9a-f]{64}", migration.from_sha256
        ):
            ctx.report(
                "BAD_VALUE",
                "from_sha256 must be 64 lowercase hex digits (the sha256 of the old spec file)",
                f"{base}.from_sha256",
                migration.loc,
            )
        for old, new in migration.rename_states:
            where = f"{base}.rename_states.{old}"
            problem = name_problem(old, "state")
            if problem is not None:
                ctx.report(problem[0], problem[1], where, migration.loc)
            if new not in ctx.states:
                ctx.report(
                    "UNKNOWN_STATE",
                    f"migration maps {old!r} to {new!r}, which this spec does not declare"
                    + did_you_mean(new, ctx.states),
                    where,
                    migration.loc,
                )
            elif ctx.resolved.is_compound(new):
                ctx.report(
                    "BAD_VALUE",
                    f"migration maps {old!r} to compound state {new!r}; an execution is always "
                    "in a leaf state — name one inside it",
                    where,
                    migration.loc,
                )


def _check_usage(ctx: CheckContext, *, suggested: set[str | None]) -> None:
    spec = ctx.spec
    used = {row.event for row in ctx.resolved.rows}
    if ctx.rows_complete:
        for event in spec.events:
            if event.name not in used and event.name not in suggested:
                ctx.report(
                    "UNUSED_EVENT",
                    f"event {event.name!r} is declared but no transition uses it",
                    f"$.events.{event.name}",
                    event.loc,
                )
    for state in spec.states:
        if not state.description.strip():
            ctx.report(
                "MISSING_DESCRIPTION",
                f"state {state.name!r} has no description",
                ctx.state_path(state.name),
                state.loc,
            )
    for t in spec.transitions:
        if not t.description.strip():
            ctx.report(
                "MISSING_DESCRIPTION",
                f"transition {t.render()} has no description",
                t.where,
                t.loc,
            )
