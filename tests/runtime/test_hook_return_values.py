"""A guard that returns something other than a bool, or an action that returns a value,
is logged with the machine, the hook's name and what it returned — once per hook — and
the session goes on as documented (docs/runtime.md, "Sessions"): the guard's truth value
decides, the action's value is ignored."""

from __future__ import annotations

import logging
from typing import Any

from phronomy_fsm.runtime import Dispatcher, bind_machine

from .conftest import compile_table

SPEC = """
machine: returns
version: 1
events:
  go: {}
states:
  start: {kind: auto, initial: true, entry: [prepare]}
  ready: {kind: external}
  done: {kind: final}
  other: {kind: final}
transitions:
  - {from: start, event: state_completed, to: ready}
  - {from: ready, event: go, guard: chosen, to: done, actions: [finish]}
  - {from: ready, event: go, to: other}
"""


class Hooks:
    def __init__(self, verdict: Any) -> None:
        self.verdict = verdict
        self.finished = 0

    def prepare(self, ctx: Any, payload: Any) -> Any:
        return "prepared"  # an entry action's value: ignored, logged

    def chosen(self, ctx: Any, payload: Any) -> Any:
        return self.verdict

    def finish(self, ctx: Any, payload: Any) -> Any:
        self.finished += 1
        return 42  # ignored, logged


def run(verdict: Any, sessions: int = 2) -> tuple[list[str], Hooks]:
    dispatcher = Dispatcher()
    hooks = Hooks(verdict)
    binding = bind_machine(compile_table(SPEC), hooks)
    ends: list[str] = []
    for _ in range(sessions):
        sid = dispatcher.start_session(
            binding, object(), on_done=lambda result, error: ends.append(result.state)
        )
        dispatcher.run_until_idle()
        dispatcher.post(sid, "go")
        dispatcher.run_until_idle()
    dispatcher.stop()
    return ends, hooks


def test_a_guard_returning_a_non_bool_is_logged_and_read_by_its_truth(caplog: Any) -> None:
    with caplog.at_level(logging.WARNING, logger="phronomy_fsm"):
        ends, hooks = run("no")  # a non-empty string: true
    assert ends == ["done", "done"] and hooks.finished == 2
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    guard = [w for w in warnings if "guard 'chosen'" in w]
    assert len(guard) == 1  # once per hook, not per call
    assert "returned str 'no', not a bool" in guard[0] and "'returns'" in guard[0]
    action = [w for w in warnings if "action 'finish'" in w]
    assert len(action) == 1 and "returned int 42, which is ignored" in action[0]
    entry = [w for w in warnings if "entry action 'prepare'" in w]
    assert len(entry) == 1 and "returned str 'prepared'" in entry[0]


def test_a_falsy_non_bool_takes_the_next_row_and_a_bool_logs_nothing(caplog: Any) -> None:
    with caplog.at_level(logging.WARNING, logger="phronomy_fsm"):
        ends, _hooks = run(0, sessions=1)
    assert ends == ["other"]
    assert any("guard 'chosen' returned int 0" in r.getMessage() for r in caplog.records)
    caplog.clear()

    class Quiet(Hooks):
        def prepare(self, ctx: Any, payload: Any) -> None:
            return None

        def finish(self, ctx: Any, payload: Any) -> None:
            self.finished += 1

    dispatcher = Dispatcher()
    binding = bind_machine(compile_table(SPEC), Quiet(True))
    with caplog.at_level(logging.WARNING, logger="phronomy_fsm"):
        sid = dispatcher.start_session(binding, object())
        dispatcher.run_until_idle()
        dispatcher.post(sid, "go")
        dispatcher.run_until_idle()
    dispatcher.stop()
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_a_returned_value_whose_repr_raises_is_logged_by_its_type(caplog: Any) -> None:
    class Hostile:
        def __repr__(self) -> str:
            raise SystemExit("from repr")

    class Returns(Hooks):
        def finish(self, ctx: Any, payload: Any) -> Any:
            self.finished += 1
            return Hostile()

    dispatcher = Dispatcher()
    binding = bind_machine(compile_table(SPEC), Returns(True))
    ends: list[Any] = []
    with caplog.at_level(logging.WARNING, logger="phronomy_fsm"):
        sid = dispatcher.start_session(
            binding, object(), on_done=lambda result, error: ends.append((result, error))
        )
        dispatcher.run_until_idle()
        dispatcher.post(sid, "go")
        dispatcher.run_until_idle()
    dispatcher.stop()
    [(result, error)] = ends
    assert error is None and result.state == "done"  # logging it did not end the session
    assert any("returned Hostile <Hostile>" in r.getMessage() for r in caplog.records)
