"""Applications of the durable engine, as operator tools and the crash harness load them.

An application module exposes a **factory** ``factory(db: str) -> DurableApp`` (named on
the command line as ``--app MODULE:FACTORY``). ``db`` is the ``--db`` value as given:
a SQLite file path, or on PostgreSQL a ``postgresql://`` DSN — open it with
:func:`phronomy_fsm.store.open_store` when the application needs the store, and keep
any files of its own (a ledger of effects) somewhere that does not depend on it being
a path. The same factory serves ``phronomy-fsm worker``, ``recover --app``, ``resolve
--app`` / ``signal --app``, the crash-injection matrix and ``phronomy-fsm check``; only
``machines`` is required, the rest feeds the harness and the checker. The :class:`DurableApp` lists
its machines — what ``phronomy-fsm recover`` needs to resume executions — and,
optionally, what the crash-injection harness and the interleaving checker
(``phronomy-fsm check``) need to drive it: scenarios that start executions, how a
person answers a waiting execution, how an operator answers one in
``recovery_required`` (from the application's own record of what happened outside),
that record of effects, and which signals each stored execution holds the change of —
all of which the checker checks (``docs/operations.md``, "The crash-injection matrix"
and "The interleaving checker").

The checker's contract for signals: every dict payload it sends (a person's answer, a
signal it injects) carries one more key, :data:`SIGNAL_MARK`, whose value is the
signal's id. An application that keeps the payloads its actions apply in its
context (or in a record of its own) reports them through
:attr:`DurableApp.applied_signals`; the checker then requires that every signal the
store marks consumed — of an event every row takes with an action — is reported
exactly once, and nothing else.
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from phronomy_fsm.durable.records import ExecutionRecord
from phronomy_fsm.durable.types import Machine
from phronomy_fsm.errors import ConfigurationError

#: The key the interleaving checker adds to every dict payload it sends: the signal's
#: id, so an application can report which signals its context holds (module docstring).
SIGNAL_MARK = "check_signal"


@attrs.frozen
class EffectEntry:
    """One effect as the application recorded it outside the store: the execution,
    the effect (offload hook) name, its kind, its idempotency key and attempt."""

    execution_id: str
    effect: str
    kind: str
    key: str
    attempt: int = 1
    result: Any = None


@attrs.frozen
class Answer:
    """A reply the harness (or a scripted person) sends: a signal ``event`` with
    ``payload``, or an operator resolution ``outcome`` with ``result``/``error``."""

    event: str | None = None
    payload: Any = None
    outcome: str | None = None
    result: Any = None
    error: str | None = None


@attrs.frozen
class Scenario:
    """How the crash harness drives one run.

    Args:
        start: starts the run's executions on a runtime; returns their ids (use fixed
            ids, so a restarted run finds them).
        on_waiting: for an execution in ``waiting``, the signal a person sends
            (``None``: leave it waiting).
        drive: what the application does by itself while it runs, besides answering
            waits: called with the runtime in every process of a run (the first and
            each recovering one), repeatedly until nothing is active — e.g. start a
            handoff's target once the handoff is committed, or cancel an execution.
            It must be idempotent (it is called again after a restart).
        signals: signals (``Answer(event=..., payload=...)``) the interleaving checker
            may send at any step, besides those ``on_waiting`` answers (which it
            learns by running the scenario once); e.g. a signal a person may send
            early, or one the machine handles in a state the scenario never waits in.
    """

    start: Callable[[Any], Sequence[str]]
    on_waiting: Callable[[ExecutionRecord], Answer | None] = lambda record: None
    drive: Callable[[Any], None] | None = None
    signals: Sequence[Answer] = ()


@attrs.frozen
class DurableApp:
    """What an application gives the operator tools, the workers and the crash harness:
    the application contract (module docstring; ``docs/tutorial.md`` builds one).

    A minimal one::

        def create_app(db: str) -> DurableApp:   # db: a SQLite path or a postgresql:// DSN
            return DurableApp(machines=(Machine(TABLE, MyHooks(), MyContext),))

    Args:
        machines: the machines it runs (``recover`` registers them).
        scenarios: named :class:`Scenario` objects for the crash harness.
        operator: for an execution in ``recovery_required``, what an operator who
            knows the truth answers (from ``effects``); the harness calls it.
        effects: reads the application's record of effects that really happened.
        accept: which executions of its machines it runs (``None``: every one); a
            runtime running the application claims only those it accepts (an agent
            application: the executions of the agents it configures).
        attach: called with a runtime built for the application, once its machines
            are registered and before it claims anything; returns a function to call
            before that runtime closes (or None). An agent application starts the
            handoffs its agents committed this way.
        listeners: called with every
            :class:`~phronomy_fsm.durable.types.DurableEvent` of a runtime that runs
            the machines (an agent application keeps its conversations' history this
            way); the operator tools and the harness pass them to the runtime.
        applied_signals: for a stored execution record, the payloads of the signals
            whose change its context holds, one entry per application (the payload
            as the action received it, with its :data:`SIGNAL_MARK`); ``None`` when
            the application does not track them. Read the context of ``record`` —
            or, if the application applies signals outside its context, its own
            record of them: the checker then finds a signal applied twice after a
            crash. Payloads without the mark are ignored, and so are signals of an
            event some row takes without an action (no application code sees them).
    """

    machines: tuple[Machine, ...]
    scenarios: Mapping[str, Scenario] = attrs.field(factory=dict)
    operator: Callable[[ExecutionRecord], Answer | None] | None = None
    effects: Callable[[], Sequence[EffectEntry]] | None = None
    accept: Callable[[ExecutionRecord], bool] | None = None
    attach: Callable[[Any], Callable[[], None] | None] | None = None
    listeners: tuple[Callable[[Any], None], ...] = ()
    applied_signals: Callable[[ExecutionRecord], Sequence[Any]] | None = None


def attach_app(app: DurableApp, runtime: Any) -> Callable[[], None]:
    """Call ``app.attach(runtime)`` when the application has one; returns the function
    to call before ``runtime`` closes (a no-op otherwise)."""
    detach = app.attach(runtime) if app.attach is not None else None
    return detach if detach is not None else (lambda: None)


def load_app(spec: str, db_path: str) -> DurableApp:
    """Import ``MODULE:FACTORY`` and call ``factory(db_path)``.

    The module is imported with the working directory on ``sys.path`` (as ``python
    -m`` does).

    Raises:
        ConfigurationError: malformed spec, import failure, a factory that does not
            take the store path, or one that does not return a DurableApp (the
            message names the factory and what to fix).
    """
    factory = load_factory(spec)
    try:
        inspect.signature(factory).bind(db_path)
    except TypeError as exc:
        raise ConfigurationError(
            f"--app {spec}: a durable application factory takes the store path, "
            f"factory(db_path) -> DurableApp ({exc})"
        ) from exc
    try:
        app = factory(db_path)
    except Exception as exc:  # application code: reported, not re-raised
        raise ConfigurationError(f"--app {spec} failed: {type(exc).__name__}: {exc}") from exc
    if not isinstance(app, DurableApp):
        raise ConfigurationError(
            f"--app {spec} returned {type(app).__name__}, not a phronomy_fsm.durable.app.DurableApp"
        )
    return app


def load_factory(spec: str) -> Callable[..., Any]:
    """Import ``MODULE:FACTORY`` and return the callable.

    Raises ConfigurationError naming what is wrong."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ConfigurationError(f"--app expects MODULE:FACTORY, got {spec!r}")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise ConfigurationError(f"--app {spec}: cannot import {module_name!r}: {exc}") from exc
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise ConfigurationError(f"--app {spec}: {module_name!r} has no callable {attr!r}")
    return factory  # type: ignore[no-any-return]


def is_durable_factory(factory: Callable[..., Any]) -> bool:
    """True when ``factory`` takes one positional argument (the store path), the
    durable application's contract; agent factories take ``(agent_id, db_path)``."""
    try:
        inspect.signature(factory).bind("db")
    except TypeError:
        return False
    return True


__all__ = [
    "SIGNAL_MARK",
    "Answer",
    "DurableApp",
    "EffectEntry",
    "Scenario",
    "attach_app",
    "is_durable_factory",
    "load_app",
    "load_factory",
]
