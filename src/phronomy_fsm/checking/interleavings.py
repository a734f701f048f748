"""Interleavings: what the checker does to an application at which step, as data.

Owns the vocabulary of the interleaving checker (``docs/operations.md``, "The
interleaving checker"): a :class:`Step` is one thing done at the N-th hit of a crash
point in one process — kill it, send one of the scenario's signals, cancel, fire the
timers early, or pause the worker past its lease while another process takes its
executions over — and an :class:`Interleaving` is a scenario with one step per process
(the run, then each recover). Both have a text form (:meth:`Interleaving.label`,
:func:`parse_interleaving`) that a report prints and ``phronomy-fsm check --only``
reads back, so every violation names a replayable run.

Also here: the crash points of a machine's table (:func:`crash_points`) and which of
them lead an execution to an operator (:func:`parking_points`). The choice of which
interleavings to run is :mod:`phronomy_fsm.checking.plans`. Must not: start processes
or touch a store.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable
from typing import Any

import attrs

from phronomy_fsm.runtime.faults import POINT

#: The engine's own commits an application reaches (``docs/semantics.md``, "Commits").
ENGINE_BARRIERS = ("@start", "@wait", "@final", "@recovery", "@resolution", "@effect", "@cancel")


class Action(enum.StrEnum):
    """What a :class:`Step` does at its point."""

    #: SIGKILL the process (a power cut for it).
    KILL = "kill"
    #: send one of the scenario's signals to every active execution that declares it
    SIGNAL = "signal"
    #: request a cancel of every active top-level execution
    CANCEL = "cancel"
    #: move the clock past every timer (wait and external timeouts fire now)
    TIMER = "timer"
    #: stop the process past its lease; another process claims its executions; resume it
    TAKEOVER = "takeover"


@attrs.frozen
class Step:
    """One injection: ``action`` at the ``nth`` hit of crash point ``point``.

    ``signal`` names the signal of a :attr:`Action.SIGNAL` step (an entry of the
    checker's signal alphabet: ``event`` or ``event#k``)."""

    action: Action
    point: str
    nth: int = 1
    signal: str | None = None

    def label(self) -> str:
        """``[ACTION=]POINT[@N]``: ``kill`` is the default action and is left out
        (the crash matrix's labels are the same); a signal step is
        ``signal:<name>=POINT``."""
        where = self.point if self.nth == 1 else f"{self.point}@{self.nth}"
        if self.action is Action.KILL:
            return where
        head = f"signal:{self.signal}" if self.action is Action.SIGNAL else self.action.value
        return f"{head}={where}"

    @property
    def is_concurrent_with_commit(self) -> bool:
        """True at a ``during`` point: the step happens while the store transaction of
        a commit is open (the injector must not wait for what it starts)."""
        return self.point.endswith(":during")


@attrs.frozen
class Interleaving:
    """A scenario and one step per process: ``steps[0]`` in the process that starts
    the scenario, ``steps[i]`` in the ``i``-th process recovering it (``None``: that
    process runs undisturbed). Processes without a step follow until the executions
    rest."""

    scenario: str
    steps: tuple[Step | None, ...] = ()

    def label(self) -> str:
        """``scenario:STEP[,STEP...]`` (``-`` for a process without a step)."""
        return f"{self.scenario}:" + ",".join("-" if s is None else s.label() for s in self.steps)

    @property
    def kind(self) -> str:
        """The action of its first step (``baseline`` without one): how a report
        groups it."""
        for step in self.steps:
            if step is not None:
                return step.action.value
        return "baseline"


_SIGNAL_NAME = re.compile(r"[A-Za-z_]\w*(#\d+)?")


def parse_step(text: str) -> Step | None:
    """The :class:`Step` of a label written by :meth:`Step.label` (``-``: none).

    Raises:
        ValueError: not a step label (the message shows the form).
    """
    text = text.strip()
    if text in ("", "-"):
        return None
    head, sep, where = text.partition("=")
    if not sep:
        head, where = "kill", text
    name, at, nth_text = where.rpartition("@")
    nth = 1
    if at and name and nth_text.isdigit() and int(nth_text) > 0:
        where, nth = name, int(nth_text)
    if not POINT.fullmatch(where):
        raise ValueError(
            f"{text!r}: {where!r} is not a crash point (barrier:<name>:before|during|after, "
            "effect:<hook>:before or offload:<hook>:after)"
        )
    action_text, _, signal = head.partition(":")
    try:
        action = Action(action_text)
    except ValueError:
        raise ValueError(
            f"{text!r}: unknown action {action_text!r}; expected one of "
            + ", ".join(a.value for a in Action)
        ) from None
    if action is Action.SIGNAL:
        if not _SIGNAL_NAME.fullmatch(signal):
            raise ValueError(f"{text!r}: a signal step is signal:<event>[#k]=<point>")
        return Step(action, where, nth, signal)
    if signal:
        raise ValueError(f"{text!r}: only a signal step names a signal")
    return Step(action, where, nth)


def parse_interleaving(label: str) -> Interleaving:
    """The :class:`Interleaving` of a label written by :meth:`Interleaving.label`.

    Raises:
        ValueError: not an interleaving label.
    """
    scenario, sep, steps = label.partition(":")
    if not sep or not scenario:
        raise ValueError(f"{label!r}: an interleaving is SCENARIO:STEP[,STEP...]")
    parsed = [parse_step(part) for part in _split_steps(steps)]
    return Interleaving(scenario, tuple(parsed))


def _split_steps(text: str) -> list[str]:
    return [part for part in text.split(",")] if text else []


# ------------------------------------------------------------------ crash points


def effect_kinds(table: Any) -> dict[str, str]:
    """The declared effect kind of each offload hook of ``table`` (``at_most_once``
    unless the spec says otherwise)."""
    rows = [s.offload for s in table.states] + [t.offload for t in table.transitions]
    return {r.hook: getattr(r, "effect", None) or "at_most_once" for r in rows if r is not None}


def crash_points(table: Any, engine_barriers: Iterable[str] = ENGINE_BARRIERS) -> list[str]:
    """Every crash point of a machine's table, in a stable order: before, during and
    after each of ``engine_barriers`` and of the table's barriers, then
    ``effect:<hook>:before`` of each offload that is not ``pure`` (the engine starts no
    effect for a pure one) and ``offload:<hook>:after`` of each offload."""
    kinds = effect_kinds(table)
    points = []
    for name in (*engine_barriers, *table.barriers):
        points += [f"barrier:{name}:{when}" for when in ("before", "during", "after")]
    for hook in table.offload_hooks:
        if kinds.get(hook, "at_most_once") != "pure":
            points.append(f"effect:{hook}:before")
        points.append(f"offload:{hook}:after")
    return points


def parking_points(tables: Iterable[Any]) -> list[str]:
    """``effect:<hook>:before`` of every ``at_most_once`` offload of ``tables``: a kill
    there leads the next process to ``recovery_required`` (and so to ``@recovery`` and
    ``@resolution``)."""
    points: list[str] = []
    for table in tables:
        kinds = effect_kinds(table)
        points += [
            f"effect:{hook}:before"
            for hook in table.offload_hooks
            if kinds.get(hook) == "at_most_once" and f"effect:{hook}:before" not in points
        ]
    return points


def engine_events(table: Any) -> set[str]:
    """The events only the engine posts in ``table``: ``state_completed`` and the
    outcome events of its offloads and barriers (``docs/spec-format.md``, "Effects and
    durability"). Every other event can be a signal."""
    events = {"state_completed"}
    for row in [*table.states, *table.transitions]:
        if row.offload is not None:
            events |= {row.offload.completed, row.offload.failed}
        if row.barrier is not None:
            events |= {
                row.barrier.committed,
                row.barrier.not_committed,
                row.barrier.conflict,
                row.barrier.outcome_unknown,
            }
    return events


def max_timeout_seconds(tables: Iterable[Any]) -> float:
    """The longest timeout of any state of ``tables`` (0 without one): how far a
    :attr:`Action.TIMER` step moves the clock, plus a second."""
    return max(
        (s.timeout.seconds for t in tables for s in t.states if s.timeout is not None),
        default=0.0,
    )


__all__ = [
    "ENGINE_BARRIERS",
    "Action",
    "Interleaving",
    "Step",
    "crash_points",
    "effect_kinds",
    "engine_events",
    "max_timeout_seconds",
    "parking_points",
    "parse_interleaving",
    "parse_step",
]
