"""Which interleavings a check runs, from what each scenario reached undisturbed.

Owns the choice (``docs/operations.md``, "The interleaving checker"). The runner first
runs every scenario once without a step (its *baseline*): the crash points each
reaches, how often, and the signals a person sends in it. From those:

- **crash**: a kill at every point a scenario reaches — in the full form at each hit
  (up to :data:`NTH_CAP`) in every scenario, in the quick form once, spread over the
  scenarios — plus two-kill runs: a kill at an ``at_most_once`` effect (which parks
  the execution) followed by a kill at each point only a recovery reaches, and a
  second kill during the attempt an operator's ``retry`` started (the crash matrix's
  plans, ``tools/crash_matrix.py``);
- **signal**: each signal of the alphabet sent at each point (so also while a commit
  is in flight, at ``during``), and at the points only a recovery reaches (``@recovery``,
  ``@resolution``: after a kill at an ``at_most_once`` effect);
- **cancel**: a cancel requested at each point;
- **timer**: the clock moved past every timeout at each point, for machines with
  timeouts (a wait's timer racing its answer, an external state's timer firing early);
- **takeover**: the process paused past its lease at each point that is not inside a
  commit (a paused SQLite writer would hold the database), while another process
  claims its executions, then resumed.

The quick form takes a sample of each kind no larger than its :class:`Budget`, drawn
with the given seed (the two-kill plans all); the full form takes them all.
Must not: start processes.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping, Sequence

import attrs

from phronomy_fsm.checking.interleavings import Action, Interleaving, Step

#: Most hits of one point a full check aims at, per scenario.
NTH_CAP = 4


@attrs.frozen
class Budget:
    """How many interleavings of each kind a quick check samples (``None``: every
    one, as the full form; ``crash`` counts plans of a kill at one point — each point
    once, spread over the scenarios — on top of which the two-kill plans come when
    ``two_kills``). A sample takes one interleaving per point before it takes a
    second at any."""

    crash: int | None = 20
    signal: int | None = 10
    cancel: int | None = 6
    timer: int | None = 3
    takeover: int | None = 2
    two_kills: bool = True


#: The quick form's budget: about a minute a spec on two cores (CI).
QUICK = Budget()
#: Every interleaving the plans can name (the full form).
FULL = Budget(None, None, None, None, None)


@attrs.frozen
class Baseline:
    """What one scenario did undisturbed: the points its first process reached (with
    their hit counts)."""

    scenario: str
    reached: Counter[str]


def plan_interleavings(
    points: Sequence[str],
    baselines: Sequence[Baseline],
    signals: Sequence[str],
    *,
    parking: Sequence[str],
    full: bool,
    budget: Budget = QUICK,
    has_timers: bool,
    seed: int,
) -> list[Interleaving]:
    """The interleavings of a check (module docstring).

    Args:
        points: the crash points of the checked spec's machine, in order.
        baselines: one per scenario, in the order to prefer them.
        signals: the names of the signal alphabet.
        parking: ``effect:<hook>:before`` of the ``at_most_once`` effects of the
            application's machines.
        full: every interleaving (``budget`` is then ignored).
        has_timers: some machine of the application has a timeout.
        seed: the quick form's sample.
    """
    rng = random.Random(seed)
    if full:
        budget = FULL
    reached = {p for b in baselines for p in b.reached}
    plans: list[Interleaving] = []
    plans += _crashes(points, baselines, full=full, parking=parking, budget=budget, rng=rng)

    def candidates(action: Action, only: Sequence[str] | None = None) -> list[Interleaving]:
        out = []
        for b in baselines:
            for point in points:
                if (only is not None and point not in only) or not b.reached.get(point):
                    continue
                hits = min(b.reached[point], NTH_CAP) if full else 1
                for nth in range(1, hits + 1):
                    if action is Action.SIGNAL:
                        out += [
                            Interleaving(b.scenario, (Step(action, point, nth, name),))
                            for name in signals
                        ]
                    else:
                        out.append(Interleaving(b.scenario, (Step(action, point, nth),)))
        return out

    plans += _sample(candidates(Action.SIGNAL), budget.signal, rng)
    plans += _sample(candidates(Action.CANCEL), budget.cancel, rng)
    if has_timers:
        plans += _sample(candidates(Action.TIMER), budget.timer, rng)
    pausable = [p for p in points if not p.endswith(":during")]
    plans += _sample(candidates(Action.TAKEOVER, pausable), budget.takeover, rng)
    # what only a recovery reaches: a kill that parks, then a signal or cancel there
    leaders = [
        (b.scenario, p) for b in baselines for p in parking if b.reached.get(p) and p in points
    ][:1]
    recovery_only = [p for p in points if p not in reached and _is_recovery_point(p)]
    extra = []
    for scenario, leader in leaders:
        for point in recovery_only:
            extra += [
                Interleaving(
                    scenario, (Step(Action.KILL, leader), Step(Action.SIGNAL, point, 1, s))
                )
                for s in signals
            ]
            extra.append(
                Interleaving(scenario, (Step(Action.KILL, leader), Step(Action.CANCEL, point)))
            )
    plans += _sample(extra, None if full else (budget.signal or 0) // 4, rng)
    return plans


def _is_recovery_point(point: str) -> bool:
    """A point of the commits only a parked execution's recovery makes."""
    return point.startswith(("barrier:@recovery:", "barrier:@resolution:"))


def _sample(items: list[Interleaving], size: int | None, rng: random.Random) -> list[Interleaving]:
    """``size`` of ``items`` (all when ``None``), spread over their points first: one
    per point in a random order, then the rest."""
    if size is None or len(items) <= size:
        return items
    shuffled = list(items)
    rng.shuffle(shuffled)
    seen: set[str] = set()
    first: list[Interleaving] = []
    rest: list[Interleaving] = []
    for item in shuffled:
        point = item.steps[-1].point if item.steps[-1] is not None else ""
        (rest if point in seen else first).append(item)
        seen.add(point)
    return (first + rest)[:size]


def _crashes(
    points: Sequence[str],
    baselines: Sequence[Baseline],
    *,
    full: bool,
    parking: Sequence[str],
    budget: Budget,
    rng: random.Random,
) -> list[Interleaving]:
    """The crash matrix's plans (module docstring)."""
    plans: list[Interleaving] = []
    covered: set[str] = set()
    order = [b.scenario for b in baselines]
    by_name: Mapping[str, Counter[str]] = {b.scenario: b.reached for b in baselines}
    if not full:  # each point once, spread over the scenarios that reach it
        load: Counter[str] = Counter()
        for point in points:
            reaching = [s for s in order if by_name[s].get(point)]
            if not reaching:
                continue
            chosen = min(reaching, key=lambda s: (load[s], order.index(s)))
            load[chosen] += 1
            covered.add(point)
            plans.append(Interleaving(chosen, (Step(Action.KILL, point),)))
        plans = _sample(plans, budget.crash, rng)
    else:
        for scenario in order:
            for point in points:
                hits = by_name[scenario].get(point, 0)
                if hits:
                    covered.add(point)
                for nth in range(1, min(hits, NTH_CAP) + 1):
                    plans.append(Interleaving(scenario, (Step(Action.KILL, point, nth),)))
    if not budget.two_kills:
        return plans
    reached_in_run = {p for b in baselines for p in b.reached}
    parked = [p for p in parking if p in reached_in_run]
    # a second kill during an operator's retry of an at_most_once effect
    for point in parked:
        if point not in points:
            continue
        scenario = next(s for s in order if by_name[s].get(point))
        hook = point.split(":")[1]
        for second in (point, f"offload:{hook}:after"):
            plans.append(
                Interleaving(scenario, (Step(Action.KILL, point), Step(Action.KILL, second)))
            )
    # points only a recovery reaches: a kill that leads to one, then a kill there
    recovery_only = [
        p for p in points if p not in covered and p not in reached_in_run and _is_recovery_point(p)
    ]
    leaders = parked or [p for p in points if p.startswith("effect:")]
    for point in recovery_only:
        for scenario in order:
            reaching = [leader for leader in leaders if by_name[scenario].get(leader)]
            for leader in reaching[: len(reaching) if full else 1]:
                plans.append(
                    Interleaving(scenario, (Step(Action.KILL, leader), Step(Action.KILL, point)))
                )
            if not full and reaching:
                break
    return plans


__all__ = ["FULL", "NTH_CAP", "QUICK", "Baseline", "Budget", "plan_interleavings"]
