"""Interoperability with the ``transitions`` library: a spec as a ``transitions.Machine``.

:func:`to_transitions_machine` builds a machine with the same dispatch semantics as our
table (``transitions`` is used for interoperability and as a differential test oracle):

- states keep their names; ``final`` states are ``final=True`` and drop every event
  (an event for a finished session is dropped);
- each table row becomes one ``transitions`` transition per source state, added in row
  order, so ``transitions``' first-match rule equals ours (the first row whose guard
  passes wins); a guard is a *condition* resolved on the model by name, a negated
  guard (``not name``) an *unless*; actions become ``before`` callbacks and entry
  actions ``on_enter`` callbacks, resolved on the model by name;
- an internal transition (no target) is a ``transitions`` internal transition
  (``dest=None``: no exit, no entry);
- an ``auto`` state posts ``state_completed`` from its ``on_enter`` (after its entry
  actions); the machine is ``queued``, so the post is processed after the current
  transition, first in first out, like our dispatcher's inbox;
- an event with ``unhandled: ignore`` arriving in a state with no row for it is a
  no-op; any other event with no row raises ``transitions.MachineError`` (our
  ``UndeclaredEventError``). A declared event whose guards all fail is a no-op.

Offload hooks, barriers and timeouts are runtime effects whose outcomes are events:
the machine does not start them; feed their outcome events with ``model.trigger``.

``transitions`` is an optional dependency (extra ``interop``), imported lazily.
:func:`table_from_spec` turns a spec model into the same :class:`MachineTable` the code
generator writes (the compiler's own lowering, without Jinja). The runtime does not
import this module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from phronomy_fsm.errors import MissingDependencyError
from phronomy_fsm.spec.model import STATE_COMPLETED, MachineSpec
from phronomy_fsm.table import FINAL, MachineTable

if TYPE_CHECKING:  # pragma: no cover
    import transitions


def _import_transitions() -> Any:
    try:
        import transitions
        import transitions.core
    except ImportError as exc:
        raise MissingDependencyError(
            "the 'transitions' package is needed to build a transitions.Machine; install it with "
            "pip install 'phronomy-fsm[interop]' (from a clone: pip install -e '.[interop]')",
            package="transitions",
            extra="interop",
        ) from exc
    return transitions


def table_from_spec(spec: MachineSpec) -> MachineTable:
    """Return the :class:`~phronomy_fsm.table.MachineTable` the code generator writes
    for ``spec``: it *is* the compiler's lowering (:func:`phronomy_fsm.codegen.lower`),
    so compound states, barrier shorthands and derived events mean the same here.

    Raises ``ValueError`` when no state can be entered as the initial state.
    """
    from phronomy_fsm.codegen.lower import lower

    return lower(spec)


def _never(*_args: Any, **_kwargs: Any) -> bool:
    """The condition of the no-op rows standing for ``unhandled: ignore``."""
    return False


def to_transitions_machine(
    spec_or_table: MachineSpec | MachineTable,
    model: Any,
    *,
    start: bool = True,
    include_actions: bool = True,
    **machine_options: Any,
) -> transitions.Machine:
    """Build a ``transitions.Machine`` equivalent to a spec or a generated table.

    Args:
        spec_or_table: a valid :class:`MachineSpec` or a generated module's ``TABLE``.
        model: the object the machine drives. Its ``state`` attribute holds the state
            name; it must provide every guard as a callable attribute (and, with
            ``include_actions``, every action and entry action), each called with the
            arguments given to ``model.trigger(event, *args, **kwargs)`` (no arguments
            for the ``state_completed`` an auto state posts). ``transitions`` adds
            ``trigger``, ``may_<event>`` and ``is_<state>`` to it.
        start: enter the initial state the way a new session does: run its entry
            actions and, for an ``auto`` state, post ``state_completed`` (which runs
            the whole chain of auto states). With ``False`` the model merely rests in
            the initial state.
        include_actions: resolve actions and entry actions on the model; with
            ``False`` only guards are needed (enough to compare dispatch decisions).
        machine_options: passed to ``transitions.Machine`` (for example
            ``after_state_change`` to trace steps). ``queued=True``,
            ``auto_transitions=False`` and ``ignore_invalid_triggers=False`` are set
            unless given; changing ``queued`` breaks the FIFO semantics of auto states.

    Returns:
        The machine, with ``model`` attached. Send events with
        ``model.trigger(name, ...)``. Because the machine is queued, ``trigger``
        returns ``True`` whether or not a transition fired; observe steps with
        ``after_state_change`` (called once per transition taken, internal ones
        included).

    Raises:
        MissingDependencyError: ``transitions`` is not installed (extra ``interop``).
        ValueError: a guard or action name collides with what ``transitions`` puts on
            the model (the state attribute or ``trigger``).
    """
    tr = _import_transitions()
    table = (
        spec_or_table if isinstance(spec_or_table, MachineTable) else table_from_spec(spec_or_table)
    )
    options = {
        "queued": True,
        "auto_transitions": False,
        "ignore_invalid_triggers": False,
        **machine_options,
    }
    model_attribute = options.get("model_attribute", "state")
    hooks = set(table.guards) | (set(table.actions) if include_actions else set())
    clashes = sorted(hooks & {model_attribute, "trigger"})
    if clashes:
        raise ValueError(
            f"hook name(s) {', '.join(clashes)} collide with attributes transitions sets on the model; "
            "pass model_attribute=... or rename the hook"
        )

    holder: dict[str, Any] = {}

    def post_state_completed(*_args: Any, **_kwargs: Any) -> None:
        holder["machine"].events[STATE_COMPLETED].trigger(model)

    states = []
    for row in table.states:
        on_enter: list[Any] = list(row.entry) if include_actions else []
        if row.kind == "auto":
            on_enter.append(post_state_completed)
        final = row.kind == FINAL
        states.append(
            tr.State(
                row.name,
                on_enter=on_enter or None,
                final=final,
                ignore_invalid_triggers=True if final else None,
            )
        )
    machine = tr.Machine(model=model, states=states, initial=table.initial, **options)
    holder["machine"] = machine
    handled: set[tuple[str, str]] = set()
    for t in table.transitions:
        for source in t.sources:
            handled.add((source, t.event))
            machine.add_transition(
                t.event,
                source,
                t.target,
                conditions=[t.guard] if t.guard and not t.negated else None,
                unless=[t.guard] if t.guard and t.negated else None,
                before=list(t.actions) if include_actions and t.actions else None,
            )
    finals = {row.name for row in table.states if row.kind == FINAL}
    for event in table.events:
        if event.unhandled == "ignore":
            for state in table.states:
                if state.name not in finals and (state.name, event.name) not in handled:
                    machine.add_transition(event.name, state.name, None, conditions=[_never])
        if event.name not in machine.events:
            # declared but used by no row: known to the machine, so triggering it
            # raises MachineError (undeclared in this state) rather than AttributeError
            machine.events[event.name] = machine.event_cls(event.name, machine)
    if start:
        initial = machine.get_state(table.initial)
        start_event = machine.event_cls("__start__", machine)
        initial.enter(tr.core.EventData(initial, start_event, machine, model, args=(), kwargs={}))
    return machine
