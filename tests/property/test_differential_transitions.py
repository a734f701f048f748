"""Differential test: our generated tables against ``transitions`` (issue 2 item 8).

Random event sequences go through (a) :func:`reference_step`, a small reference
stepping function over a generated ``TABLE`` — first passing guard wins, guards read
from a random truth table, auto states post ``state_completed`` through a FIFO queue,
internal transitions keep the state, ``unhandled: ignore`` events and events for a
finished session are dropped — and (b) the ``transitions.Machine`` built by
:func:`phronomy_fsm.interop.to_transitions_machine` from the spec. For every event both
must make the same decision (fired / no-op / error), visit the same states and run the
same actions in the same order.

A third participant is the real dispatcher (``phronomy_fsm.runtime``) driving the same
generated table (issue 3 "Tests"): it must agree with both on every event. Offloads and
barriers it would start are parked (a pool that never runs work, barriers that never
report), timers never fire (a manual clock), so only the table's semantics are compared.
``state_completed`` posted from outside is the one deliberate difference: the dispatcher
drops it as stale (it is the engine's own event).
"""

from __future__ import annotations

import importlib
import types
from collections import deque
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from phronomy_fsm.codegen import compile_spec, lower

from phronomy_fsm.errors import UndeclaredEventError
from phronomy_fsm.interop import to_transitions_machine
from phronomy_fsm.runtime import Dispatcher, ManualClock, bind_machine
from phronomy_fsm.runtime.offload import Operation
from phronomy_fsm.spec.loader import load_spec_text
from phronomy_fsm.spec.model import MachineSpec
from phronomy_fsm.spec.validate import check_spec_file
from phronomy_fsm.table import AUTO, FINAL, STATE_COMPLETED, MachineTable, PendingBarrier
from tests.spec_samples import FIXTURE_SPECS, REAL_MACHINES, REAL_SPECS
from tests.spec_strategies import dump, valid_specs

transitions = pytest.importorskip("transitions")

FIRED, NOOP, ERROR = "fired", "noop", "error"
UNKNOWN_EVENT = "no_such_event_xyz"


# ----------------------------------------------------------- reference model


def reference_enter(
    table: MachineTable, state: str, truth: dict[str, bool], actions: list[str]
) -> list[str]:
    """Start a session in ``state``: run its entry actions; an auto state posts
    ``state_completed``. Returns the states visited while draining the queue."""
    kinds = {s.name: s for s in table.states}
    actions.extend(kinds[state].entry)
    if kinds[state].kind != AUTO:
        return []
    return reference_step(table, state, STATE_COMPLETED, truth, actions)[2]


def reference_step(
    table: MachineTable, state: str, event: str, truth: dict[str, bool], actions: list[str]
) -> tuple[str, str, list[str]]:
    """Deliver ``event`` in ``state`` and drain the queue it causes.

    Returns ``(decision, final state, visited states)``: ``fired`` when a row was taken
    for ``event``, ``noop`` when it was dropped (guards all failed, ``unhandled:
    ignore``, or the session is finished), ``error`` when no row exists and the event is
    not ignorable (the dispatcher ends the session with ``UndeclaredEventError``).
    ``visited`` lists the state after every row taken, internal rows included.
    """
    states = {s.name: s for s in table.states}
    policy = {e.name: e.unhandled for e in table.events}
    queue = deque([event])
    visited: list[str] = []
    while queue:
        current = queue.popleft()
        if states[state].kind == FINAL:
            continue  # an event for a finished session is dropped
        rows = [r for r in table.transitions if state in r.sources and r.event == current]
        if not rows:
            if policy.get(current) == "ignore":
                continue
            return ERROR, state, visited
        taken = next((r for r in rows if r.guard is None or truth[r.guard] != r.negated), None)
        if taken is None:
            continue  # a declared event whose guards all fail is a no-op
        actions.extend(taken.actions)
        if taken.target is not None:
            state = taken.target
            actions.extend(states[state].entry)
            if states[state].kind == AUTO:
                queue.append(STATE_COMPLETED)
        visited.append(state)
    return (FIRED if visited else NOOP), state, visited


# ------------------------------------------------------- transitions harness


class Model:
    """A model whose guards read a truth table and whose actions are recorded."""

    def __init__(self, table: MachineTable) -> None:
        self.truth: dict[str, bool] = {}
        self.actions: list[str] = []
        self.visited: list[str] = []
        for guard in table.guards:
            setattr(self, guard, self._guard(guard))
        for action in table.actions:
            setattr(self, action, self._action(action))

    def _guard(self, name: str) -> Callable[..., bool]:
        return lambda *args, **kwargs: self.truth[name]

    def _action(self, name: str) -> Callable[..., None]:
        return lambda *args, **kwargs: self.actions.append(name)

    def record(self, *args: Any, **kwargs: Any) -> None:
        self.visited.append(self.state)  # type: ignore[attr-defined]


def machine_step(model: Model, event: str) -> tuple[str, list[str]]:
    model.visited = []
    try:
        model.trigger(event)  # type: ignore[attr-defined]
    except transitions.MachineError:
        return ERROR, model.visited
    except AttributeError as exc:  # transitions' answer to an event name it never saw
        assert "Do not know event named" in str(exc)
        return ERROR, model.visited
    return (FIRED if model.visited else NOOP), model.visited


# ------------------------------------------------------------ dispatcher harness


class _ParkingPool:
    """An offload pool that accepts work and never runs it (offloads stay in flight)."""

    def __init__(self) -> None:
        self.ids = 0

    def submit(self, fn: Any, *args: Any, name: str = "op", **kwargs: Any) -> Operation:
        self.ids += 1
        return Operation(self.ids, name, 0.0)

    def shutdown(self, **kwargs: Any) -> None:
        pass


class DispatcherHarness:
    """The real dispatcher, driven on the calling thread, with hooks that read the same
    truth table and record the same actions as the transitions model."""

    def __init__(self, table: MachineTable, truth: dict[str, bool]) -> None:
        self.truth = truth
        self.actions: list[str] = []
        self.visited: list[str] = []
        self.ended: BaseException | None = None
        hooks = types.SimpleNamespace()
        for guard in table.guards:
            setattr(hooks, guard, lambda ctx, payload, g=guard: self.truth[g])
        for action in table.actions:
            setattr(hooks, action, lambda ctx, payload, a=action: self.actions.append(a))
        for hook in table.offload_hooks:
            setattr(hooks, hook, lambda ctx, payload: lambda octx: None)
        for barrier in table.barriers:
            setattr(hooks, barrier, lambda ctx, payload: PendingBarrier(lambda report: None))
        self.dispatcher = Dispatcher(pool=_ParkingPool(), clock=ManualClock())  # type: ignore[arg-type]
        self.dispatcher.add_observer(lambda record: self.visited.append(record.target))
        self.binding = bind_machine(table, hooks)
        self.declared = {e.name for e in table.events}
        self.halted_in: str | None = None
        self.sid = self.dispatcher.start_session(self.binding, None, on_done=self._done)
        self.dispatcher.run_until_idle(wait_for_work=False)

    def _done(self, result: Any, error: BaseException | None) -> None:
        self.ended = error
        self.halted_in = result.state if result is not None and result.status == "halted" else None

    def step(self, event: str) -> tuple[str, list[str]]:
        self.visited = []
        self.actions = []
        if self.halted_in is not None and event not in self.declared:
            return ERROR, []  # a resume start refuses an event the machine does not declare
        if self.halted_in is not None and event != STATE_COMPLETED:
            # a wait state halted the session; an outside call resumes it: a new
            # incarnation starts there and fires the event (reference §1.1 resume start)
            state, self.halted_in = self.halted_in, None
            self.sid = self.dispatcher.start_session(
                self.binding, None, at_state=state, event=event, on_done=self._done
            )
            accepted = True
        else:
            accepted = self.dispatcher.post(self.sid, event)
        self.dispatcher.run_until_idle(wait_for_work=False)
        if isinstance(self.ended, UndeclaredEventError):
            return ERROR, self.visited
        assert accepted or not self.visited
        return (FIRED if self.visited else NOOP), self.visited


# ------------------------------------------------------------------- driver


def run_differential(
    spec: MachineSpec, table: MachineTable, data: st.DataObject, steps: int = 25
) -> None:
    model = Model(table)
    model.truth = {g: data.draw(st.booleans(), label=f"initial guard {g}") for g in table.guards}
    to_transitions_machine(spec, model, after_state_change=model.record)
    ref_actions: list[str] = []
    ref_visited = reference_enter(table, table.initial, model.truth, ref_actions)
    assert model.visited == ref_visited
    assert model.actions == ref_actions
    engine = DispatcherHarness(table, model.truth)
    assert engine.visited == ref_visited and engine.actions == ref_actions
    state = ref_visited[-1] if ref_visited else table.initial
    assert model.state == state  # type: ignore[attr-defined]
    all_events = [e.name for e in table.events]
    for _ in range(steps):
        handled = sorted(
            {
                r.event
                for r in table.transitions
                if state in r.sources and r.event != STATE_COMPLETED
            }
        )
        event = data.draw(
            st.one_of(
                st.sampled_from(handled) if handled else st.sampled_from(all_events),
                st.sampled_from(all_events),
                st.just(UNKNOWN_EVENT),
            ).filter(lambda e: e != UNKNOWN_EVENT or data.draw(st.integers(0, 9)) == 0),
            label="event",
        )
        truth = {g: data.draw(st.booleans(), label=f"guard {g}") for g in table.guards}
        model.truth = truth
        engine.truth = truth
        model.actions = []
        ref_actions = []
        decision, state_after, visited = reference_step(table, state, event, truth, ref_actions)
        got_decision, got_visited = machine_step(model, event)
        assert (got_decision, got_visited) == (decision, visited), (state, event, truth)
        assert model.actions == ref_actions, (state, event)
        engine_decision, engine_visited = engine.step(event)
        if event == STATE_COMPLETED:  # the engine's own event: dropped when posted from outside
            assert (engine_decision, engine_visited) == (NOOP, [])
            return
        assert (engine_decision, engine_visited) == (decision, visited), (
            "dispatcher",
            state,
            event,
            truth,
        )
        assert engine.actions == ref_actions, ("dispatcher", state, event)
        if decision == ERROR:
            return  # the dispatcher ends the session here
        state = state_after
        assert model.state == state  # type: ignore[attr-defined]


# -------------------------------------------------------------------- tests

REAL = {
    name: (
        check_spec_file(path).spec,
        importlib.import_module(f"phronomy_fsm.generated.{name}").TABLE,
    )
    for name, path in zip(REAL_MACHINES, REAL_SPECS, strict=True)
}
#: The agent's first specs (compound states, cancel detours), compiled here.
for _path in FIXTURE_SPECS:
    _fixture = check_spec_file(_path).spec
    assert _fixture is not None
    REAL[_path.stem] = (_fixture, lower(_fixture))


@pytest.mark.parametrize("machine", sorted(REAL))
@settings(
    max_examples=120,
    deadline=None,
    # a small machine (tool_call: one effect, two ends) has few long paths to draw
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(data=st.data())
def test_real_specs_agree_with_transitions_and_the_dispatcher(
    machine: str, data: st.DataObject
) -> None:
    spec, table = REAL[machine]
    assert spec is not None
    run_differential(spec, table, data)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec_data=valid_specs(), data=st.data())
def test_generated_specs_agree_with_transitions_and_the_dispatcher(
    spec_data: dict[str, Any], data: st.DataObject
) -> None:
    loaded = load_spec_text(dump(spec_data))
    assert loaded.spec is not None
    module = types.ModuleType("generated_under_test")
    exec(compile(compile_spec(loaded.spec), "<generated>", "exec"), module.__dict__)  # noqa: S102
    run_differential(loaded.spec, module.TABLE, data)


def test_reference_semantics_on_a_known_path() -> None:
    # the reference itself, on agent_session: admission committed (no cancel) leads
    # through the input filter to the preparation barrier
    _spec, table = REAL["agent_session_v1"]
    actions: list[str] = []
    assert reference_enter(table, "idle", {}, actions) == ["admitting"]
    decision, state, visited = reference_step(
        table, "admitting", "admission_committed", {g: False for g in table.guards}, actions
    )
    assert (decision, state, visited) == (FIRED, "filtering_input", ["filtering_input"])
    decision, state, visited = reference_step(table, "calling_llm", "llm_stream_chunk", {}, actions)
    assert (decision, state, visited) == (FIRED, "calling_llm", ["calling_llm"])  # internal
    assert actions[-1] == "deliver_token"
    assert reference_step(table, "calling_llm", "quiesced", {}, [])[0] == NOOP  # unhandled: ignore
    assert reference_step(table, "calling_llm", "approval_decided", {}, [])[0] == ERROR
    truth = {g: False for g in table.guards} | {"cancel_pending": True}
    assert reference_step(table, "admitting", "admission_committed", truth, [])[1] == "cancelling"
