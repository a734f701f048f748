"""Model-based test: the dispatcher against a tiny reference interpreter of the table
(hypothesis RuleBasedStateMachine; STYLE.md "Tests"; issue 3 "Tests")."""

from __future__ import annotations

from collections import deque
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, rule

from phronomy_fsm.runtime import Dispatcher, bind_machine
from phronomy_fsm.table import STATE_COMPLETED, MachineTable

from .conftest import compile_table

SPEC = """
machine: model
version: 1
events:
  a: {}
  b: {}
  c: {}
  n: {unhandled: ignore}
states:
  s0: {kind: auto, initial: true}
  s1: {kind: external}
  s2: {kind: auto}
  s3: {kind: external}
  s4: {kind: wait}
  s5: {kind: auto}
  end: {kind: final}
transitions:
  - {from: s0, event: state_completed, to: s1}
  - {from: s1, event: a, guard: g1, to: s2}
  - {from: s1, event: a, guard: not g2, to: s3}
  - {from: s1, event: b, actions: [act]}
  - {from: s1, event: c, to: s4}
  - {from: s2, event: state_completed, guard: g2, to: s3}
  - {from: s2, event: state_completed, to: s1}
  - {from: s2, event: b, to: s5}
  - {from: s3, event: a, to: s1}
  - {from: s3, event: b, guard: g1, to: s5}
  - {from: s3, event: c, to: end}
  - {from: s4, event: a, to: s1}
  - {from: s5, event: state_completed, guard: g3, to: end}
  - {from: s5, event: state_completed, guard: not g3, to: s3}
"""
TABLE: MachineTable = compile_table(SPEC)
GUARDS = ("g1", "g2", "g3")


class Reference:
    """A direct reading of the semantics in reference §1.1 over the generated table."""

    def __init__(self, table: MachineTable, truth: dict[str, bool]) -> None:
        self.table = table
        self.truth = truth
        self.kinds = {s.name: s.kind for s in table.states}
        self.ignored = {e.name for e in table.events if e.unhandled == "ignore"}
        self.state = table.initial
        self.serial = 1
        self.status: str | None = None  # finished / halted / error
        self.queue: deque[tuple[str, int | None]] = deque()
        self.actions = 0
        self._entered()

    def rows(self, event: str) -> list[Any]:
        return [t for t in self.table.transitions if self.state in t.sources and t.event == event]

    def _entered(self) -> None:
        kind = self.kinds[self.state]
        if kind == "auto":
            self.queue.append((STATE_COMPLETED, self.serial))
        elif kind == "final":
            self.status = "finished"
        elif kind == "wait":
            self.status = "halted"

    def deliver(self, event: str, serial: int | None) -> None:
        if self.status is not None:
            return
        if event == STATE_COMPLETED and serial != self.serial:
            return
        rows = self.rows(event)
        if not rows:
            if event not in self.ignored:
                self.status = "error"
            return
        for row in rows:
            if row.guard is None or self.truth[row.guard] is not row.negated:
                break
        else:
            return
        self.actions += len(row.actions)
        if row.target is None:
            return
        self.state = row.target
        self.serial += 1
        self._entered()


class Hooks:
    def __init__(self, truth: dict[str, bool]) -> None:
        self.truth = truth
        self.actions = 0

    def g1(self, ctx: Any, payload: Any) -> bool:
        return self.truth["g1"]

    def g2(self, ctx: Any, payload: Any) -> bool:
        return self.truth["g2"]

    def g3(self, ctx: Any, payload: Any) -> bool:
        return self.truth["g3"]

    def act(self, ctx: Any, payload: Any) -> None:
        self.actions += 1


class DispatcherVersusReference(RuleBasedStateMachine):
    sessions = Bundle("sessions")

    def __init__(self) -> None:
        super().__init__()
        self.truth = {g: False for g in GUARDS}
        self.hooks = Hooks(self.truth)
        self.dispatcher = Dispatcher()
        self.binding = bind_machine(TABLE, self.hooks)
        self.models: dict[int, Reference] = {}
        self.outcomes: dict[int, tuple[str, str]] = {}

    def teardown(self) -> None:
        self.dispatcher.stop(timeout_seconds=1)

    def _record(self, sid: int) -> Any:
        def done(result: Any, error: BaseException | None) -> None:
            self.outcomes[sid] = (
                ("error", "") if error is not None else (result.status, result.state)
            )

        return done

    @rule(target=sessions)
    def start(self) -> int:
        holder: dict[str, int] = {}
        sid = self.dispatcher.start_session(
            self.binding, None, on_done=lambda r, e: self._record(holder["sid"])(r, e)
        )
        holder["sid"] = sid
        self.models[sid] = Reference(TABLE, self.truth)
        return sid

    @rule(sid=sessions, event=st.sampled_from(["a", "b", "c", "n"]))
    def post(self, sid: int, event: str) -> None:
        model = self.models[sid]
        accepted = self.dispatcher.post(sid, event)
        if model.status is None:
            model.queue.append((event, None))
        else:
            assert not accepted  # ended sessions accept nothing

    @rule(guard=st.sampled_from(GUARDS))
    def flip(self, guard: str) -> None:
        # flip only between runs, so both sides see the same truth for queued events
        self.run()
        self.truth[guard] = not self.truth[guard]

    @rule()
    def run(self) -> None:
        self.dispatcher.run_until_idle()
        for model in self.models.values():
            while model.queue:
                event, serial = model.queue.popleft()
                model.deliver(event, serial)

    @invariant()
    def agree(self) -> None:
        self.run()
        live = self.dispatcher.call(
            lambda: {sid: self.dispatcher.session_state(sid) for sid in self.models}
        )
        self.dispatcher.run_until_idle()
        states = live.result()
        for sid, model in self.models.items():
            if model.status is None:
                assert states[sid] == model.state, (sid, states[sid], model.state)
                assert sid not in self.outcomes
            else:
                assert states[sid] is None
                status, state = self.outcomes[sid]
                assert status == model.status
                if status != "error":
                    assert state == model.state
        assert self.hooks.actions == sum(m.actions for m in self.models.values())


DispatcherVersusReference.TestCase.settings = settings(
    max_examples=60,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestDispatcherVersusReference = DispatcherVersusReference.TestCase
