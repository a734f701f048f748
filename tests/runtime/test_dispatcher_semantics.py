"""Dispatcher semantics on small machines compiled through the real code generator
(reference §1.1; issue 3 "Tests")."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from phronomy_fsm.errors import (
    DispatcherStoppedError,
    HookError,
    MissingHookError,
    StepLimitError,
    UndeclaredEventError,
    WrongThreadError,
)
from phronomy_fsm.runtime import Dispatcher, SessionResult, StepRecord, bind_machine

from .conftest import Recorder, compile_table

BASIC = """
machine: basic
version: 1
events:
  go: {}
  back: {}
  poke: {unhandled: ignore}
  ping: {}
  park: {}
states:
  start: {kind: auto, initial: true}
  a: {kind: external, entry: [enter_a]}
  b: {kind: auto, entry: [enter_b]}
  c: {kind: external}
  parked: {kind: wait}
  done: {kind: final}
transitions:
  - {from: start, event: state_completed, to: a}
  - {from: a, event: go, guard: allowed, to: b, actions: [act_go]}
  - {from: a, event: go, guard: not allowed, to: c}
  - {from: a, event: ping, actions: [on_ping]}
  - {from: a, event: park, to: parked}
  - {from: parked, event: back, to: a}
  - {from: b, event: ping, to: c, actions: [on_ping]}
  - {from: b, event: state_completed, to: done}
  - {from: c, event: back, to: a}
  - {from: c, event: go, guard: allowed, to: done}
"""

HOOKS = ("allowed", "act_go", "enter_a", "enter_b", "on_ping")


def run_session(dispatcher: Dispatcher, binding: Any, ctx: Any = None, **kwargs: Any):
    results: list[tuple[SessionResult | None, BaseException | None]] = []
    sid = dispatcher.start_session(
        binding, ctx, on_done=lambda r, e: results.append((r, e)), **kwargs
    )
    dispatcher.run_until_idle()
    return sid, results


def test_initial_auto_state_moves_on_through_the_queue(dispatcher: Dispatcher) -> None:
    hooks = Recorder(HOOKS)
    binding = bind_machine(compile_table(BASIC), hooks)
    states: list[str] = []
    dispatcher.add_observer(lambda rec: states.append(rec.target))
    sid, results = run_session(dispatcher, binding)
    assert results == []  # still live, waiting in `a`
    assert states == ["a"]
    assert [c[0] for c in hooks.calls] == ["enter_a"]
    assert dispatcher.live_sessions() == 1
    assert dispatcher.post(sid, "go")
    dispatcher.run_until_idle()
    assert states == ["a", "b", "done"]


def test_first_passing_guard_wins_and_negation(dispatcher: Dispatcher) -> None:
    hooks = Recorder(HOOKS, truth={"allowed": False})
    binding = bind_machine(compile_table(BASIC), hooks)
    seen: list[str] = []
    dispatcher.add_observer(lambda rec: seen.append(f"{rec.source}>{rec.target}[{rec.guard}]"))
    sid, _ = run_session(dispatcher, binding)
    dispatcher.post(sid, "go")
    dispatcher.run_until_idle()
    assert seen[-1] == "a>c[not allowed]"


def test_declared_event_whose_guards_all_fail_is_a_noop(dispatcher: Dispatcher) -> None:
    hooks = Recorder(HOOKS, truth={"allowed": False})
    binding = bind_machine(compile_table(BASIC), hooks)
    sid, results = run_session(dispatcher, binding)
    dispatcher.post(sid, "go")  # a -> c (not allowed)
    dispatcher.run_until_idle()
    noops = dispatcher.stats.noops
    dispatcher.post(sid, "go")  # from c only a guarded row: guard false -> no-op
    dispatcher.run_until_idle()
    assert dispatcher.stats.noops == noops + 1
    assert results == []
    assert dispatcher.call(dispatcher.session_state, sid) is not None
    dispatcher.run_until_idle()
    state = dispatcher.call(dispatcher.session_state, sid)
    dispatcher.run_until_idle()
    assert state.result() == "c"


def test_undeclared_event_ends_the_session_with_a_typed_error(dispatcher: Dispatcher) -> None:
    binding = bind_machine(compile_table(BASIC), Recorder(HOOKS))
    sid, results = run_session(dispatcher, binding)
    dispatcher.post(sid, "back")  # `a` declares no `back`
    dispatcher.run_until_idle()
    assert len(results) == 1 and results[0][0] is None
    error = results[0][1]
    assert isinstance(error, UndeclaredEventError)
    assert (error.state, error.event) == ("a", "back")
    assert dispatcher.live_sessions() == 0
    assert dispatcher.stats.sessions_failed == 1


def test_unhandled_ignore_events_are_dropped_and_counted(dispatcher: Dispatcher) -> None:
    binding = bind_machine(compile_table(BASIC), Recorder(HOOKS))
    sid, results = run_session(dispatcher, binding)
    dispatcher.post(sid, "poke")
    dispatcher.run_until_idle()
    assert results == [] and dispatcher.stats.ignored == 1


def test_internal_transition_runs_actions_without_reentering(dispatcher: Dispatcher) -> None:
    hooks = Recorder(HOOKS)
    binding = bind_machine(compile_table(BASIC), hooks)
    records: list[StepRecord] = []
    dispatcher.add_observer(records.append)
    sid, _ = run_session(dispatcher, binding)
    dispatcher.post(sid, "ping", "p1")
    dispatcher.run_until_idle()
    assert [c for c in hooks.calls if c[0] != "allowed"] == [("enter_a", None), ("on_ping", "p1")]
    assert records[-1].internal and records[-1].source == records[-1].target == "a"


def test_events_posted_before_the_auto_completion_are_handled_first(dispatcher: Dispatcher) -> None:
    """FIFO: b is auto; a `ping` queued before b's state_completed is handled in b."""
    hooks = Recorder(HOOKS)
    binding = bind_machine(compile_table(BASIC), hooks)
    sid, results = run_session(dispatcher, binding)
    dispatcher.post(sid, "go")  # a -> b, and b posts state_completed behind `ping`
    dispatcher.post(sid, "ping")
    dispatcher.run_until_idle()
    # ping moved b -> c; b's state_completed then arrived stale (wrong entry) and was dropped
    assert dispatcher.call(dispatcher.session_state, sid) is not None
    task = dispatcher.call(dispatcher.session_state, sid)
    dispatcher.run_until_idle()
    assert task.result() == "c"
    assert dispatcher.stats.dropped_stale == 1
    assert results == []


def test_hook_posting_events_gets_them_queued_in_order(dispatcher: Dispatcher) -> None:
    table = compile_table(
        """
        machine: chain
        version: 1
        events: {e1: {}, e2: {}, e3: {}}
        states:
          s0: {kind: external, initial: true}
          s1: {kind: external}
          s2: {kind: external}
          s3: {kind: final}
        transitions:
          - {from: s0, event: e1, to: s1, actions: [post_more]}
          - {from: s1, event: e2, to: s2, actions: [log]}
          - {from: s2, event: e3, to: s3, actions: [log]}
        """
    )
    order: list[str] = []
    holder: dict[str, int] = {}

    class Hooks:
        def post_more(self, ctx: Any, payload: Any) -> None:
            order.append("post_more:start")
            dispatcher.post(holder["sid"], "e2")
            dispatcher.post(holder["sid"], "e3")
            order.append("post_more:end")  # nothing ran re-entrantly in between

        def log(self, ctx: Any, payload: Any) -> None:
            order.append("log")

    binding = bind_machine(table, Hooks())
    results: list[Any] = []
    holder["sid"] = dispatcher.start_session(
        binding, None, on_done=lambda r, e: results.append((r, e))
    )
    dispatcher.post(holder["sid"], "e1")
    dispatcher.run_until_idle()
    assert order == ["post_more:start", "post_more:end", "log", "log"]
    assert results[0][0].state == "s3" and results[0][0].status == "finished"


def test_wait_state_halts_and_resume_start_creates_a_new_incarnation(
    dispatcher: Dispatcher,
) -> None:
    hooks = Recorder(HOOKS)
    binding = bind_machine(compile_table(BASIC), hooks)
    sid, results = run_session(dispatcher, binding)
    dispatcher.post(sid, "park")
    dispatcher.run_until_idle()
    assert results[0][0] == SessionResult(sid, "basic", "halted", "parked", None)
    assert not dispatcher.post(sid, "back")  # halted sessions accept nothing
    hooks.calls.clear()
    sid2, results2 = run_session(dispatcher, binding, at_state="parked", event="back")
    assert sid2 != sid
    # resume start fired `back` directly; `a`'s entry ran because we *entered* a,
    # but no entry work of the resume state itself ran
    assert [c[0] for c in hooks.calls] == ["enter_a"]
    assert results2 == []


def test_resume_start_validates_its_arguments(dispatcher: Dispatcher) -> None:
    binding = bind_machine(compile_table(BASIC), Recorder(HOOKS))
    with pytest.raises(ValueError, match="no state"):
        dispatcher.start_session(binding, None, at_state="nowhere", event="go")
    with pytest.raises(ValueError, match="needs an event"):
        dispatcher.start_session(binding, None, at_state="parked")
    with pytest.raises(ValueError, match="declares no event"):
        dispatcher.start_session(binding, None, at_state="parked", event="nope")


def test_step_limit_stops_a_runaway_session(dispatcher: Dispatcher) -> None:
    binding = bind_machine(compile_table(BASIC), Recorder(HOOKS), step_limit=5)
    sid, results = run_session(dispatcher, binding)
    for _ in range(10):
        dispatcher.post(sid, "ping")
    dispatcher.run_until_idle()
    assert isinstance(results[0][1], StepLimitError)
    assert results[0][1].limit == 5


def test_events_for_unknown_or_finished_sessions_are_dropped_and_counted(
    dispatcher: Dispatcher,
) -> None:
    binding = bind_machine(compile_table(BASIC), Recorder(HOOKS))
    assert not dispatcher.post(123456, "go")
    sid, results = run_session(dispatcher, binding)
    dispatcher.post(sid, "go")
    dispatcher.run_until_idle()
    assert results[0][0].status == "finished"
    before = dispatcher.stats.dropped_unknown_session
    assert not dispatcher.post(sid, "go")
    assert dispatcher.stats.dropped_unknown_session == before + 1


def test_hooks_are_resolved_once_at_bind_time(dispatcher: Dispatcher) -> None:
    lookups: list[str] = []

    class Counting:
        def __getattr__(self, name: str) -> Any:
            if name.startswith("__"):
                raise AttributeError(name)
            lookups.append(name)
            return lambda ctx, payload: True

    binding = bind_machine(compile_table(BASIC), Counting())
    after_bind = len(lookups)
    for _ in range(20):
        sid, _ = run_session(dispatcher, binding)
        dispatcher.post(sid, "ping")
        dispatcher.post(sid, "go")
        dispatcher.run_until_idle()
    assert len(lookups) == after_bind


def test_missing_hooks_are_all_reported() -> None:
    with pytest.raises(MissingHookError) as info:
        bind_machine(compile_table(BASIC), Recorder(("allowed", "enter_a")))
    assert set(info.value.missing) == {"act_go", "enter_b", "on_ping"}


@pytest.mark.parametrize("failing", ["allowed", "act_go", "enter_b"])
def test_a_raising_hook_ends_only_its_session_and_leaves_state_consistent(
    dispatcher: Dispatcher, failing: str
) -> None:
    class Hooks(Recorder):
        pass

    good = Recorder(HOOKS)
    bad = Hooks(HOOKS)

    def boom(ctx: Any, payload: Any) -> Any:
        raise RuntimeError("boom")

    setattr(bad, failing, boom)
    table = compile_table(BASIC)
    good_binding, bad_binding = bind_machine(table, good), bind_machine(table, bad)
    g_sid, g_results = run_session(dispatcher, good_binding)
    b_sid, b_results = run_session(dispatcher, bad_binding)
    dispatcher.post(b_sid, "go")
    dispatcher.run_until_idle()
    error = b_results[0][1]
    assert isinstance(error, HookError) and isinstance(error.__cause__, RuntimeError)
    # guard/action failures leave the session in its source state; entry failures in the target
    assert error.state == ("b" if failing == "enter_b" else "a")
    # the other session is untouched and still works
    dispatcher.post(g_sid, "go")
    dispatcher.run_until_idle()
    assert g_results[0][0].status == "finished"


def test_live_state_is_only_touched_on_the_loop_thread(dispatcher: Dispatcher) -> None:
    binding = bind_machine(compile_table(BASIC), Recorder(HOOKS))
    sid, _ = run_session(dispatcher, binding)
    with pytest.raises(WrongThreadError):
        dispatcher.session_state(sid)
    with pytest.raises(WrongThreadError):
        dispatcher.when_quiescent("g", lambda: None)


def test_step_records_carry_every_field(dispatcher: Dispatcher, clock: Any) -> None:
    binding = bind_machine(compile_table(BASIC), Recorder(HOOKS))
    records: list[StepRecord] = []
    dispatcher.add_observer(records.append)
    clock.advance(7.5)
    sid, _ = run_session(dispatcher, binding)
    dispatcher.post(sid, "go")
    dispatcher.run_until_idle()
    assert [(r.source, r.event, r.guard, r.target, r.step) for r in records] == [
        ("start", "state_completed", None, "a", 1),
        ("a", "go", "allowed", "b", 2),
        ("b", "state_completed", None, "done", 3),
    ]
    assert all(r.session_id == sid and r.machine == "basic" and r.monotonic == 7.5 for r in records)
    assert [r.transition_index for r in records] == [0, 1, 7]


def test_draining_refuses_new_sessions_but_lets_events_flow() -> None:
    dispatcher = Dispatcher()
    hooks = Recorder(HOOKS)
    binding = bind_machine(compile_table(BASIC), hooks)
    dispatcher.start()
    sid, task = dispatcher.start_session_task(binding, None)
    # 'go' is only declared in 'a': wait until the auto state 'start' has completed
    # (its state_completed is a queued turn of its own, reference §1.1)
    for _ in range(10_000):
        if ("enter_a", None) in hooks.calls:
            break
        threading.Event().wait(0.001)
    stopper = threading.Thread(target=dispatcher.stop, kwargs={"timeout_seconds": 5})
    stopper.start()
    # wait until the stop request is visible, then show admission is closed
    for _ in range(10_000):
        if dispatcher.lifecycle == "draining":
            break
        threading.Event().wait(0.001)
    assert dispatcher.lifecycle == "draining"
    with pytest.raises(DispatcherStoppedError):
        dispatcher.start_session(binding, None)
    assert dispatcher.post(sid, "go")  # results and events still flow while draining
    assert task.result(timeout_seconds=5).status == "finished"
    stopper.join(5)
    assert dispatcher.lifecycle == "stopped"


def test_stop_with_sessions_left_fails_them() -> None:
    dispatcher = Dispatcher()
    binding = bind_machine(compile_table(BASIC), Recorder(HOOKS))
    dispatcher.start()
    _, task = dispatcher.start_session_task(binding, None)
    assert dispatcher.stop(timeout_seconds=0.2) is False
    with pytest.raises(DispatcherStoppedError):
        task.result(timeout_seconds=5)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_failed_loop_fails_every_pending_waiter() -> None:
    dispatcher = Dispatcher()
    binding = bind_machine(compile_table(BASIC), Recorder(HOOKS))
    dispatcher.start()
    _, task1 = dispatcher.start_session_task(binding, None)
    _, task2 = dispatcher.start_session_task(binding, None)

    def break_the_loop() -> None:
        raise KeyboardInterrupt  # not an ordinary exception: the loop itself fails

    dispatcher._post((None, break_the_loop, ()))
    for task in (task1, task2):
        with pytest.raises(DispatcherStoppedError):
            task.result(timeout_seconds=5)
    assert dispatcher.lifecycle == "failed"
    with pytest.raises(DispatcherStoppedError):
        dispatcher.start_session(binding, None)
    dispatcher._thread.join(5)  # let the thread's exception surface inside this test


@pytest.mark.timeout(60)
def test_a_thousand_sessions_fed_from_eight_threads_finish_without_deadlock() -> None:
    table = compile_table(
        """
        machine: counter
        version: 1
        events: {tick: {}, stop: {}}
        states:
          counting: {kind: external, initial: true}
          done: {kind: final}
        transitions:
          - {from: counting, event: tick, actions: [count]}
          - {from: counting, event: stop, to: done}
        """
    )

    class Hooks:
        def count(self, ctx: list[int], payload: Any) -> None:
            ctx[0] += 1

    dispatcher = Dispatcher()
    binding = bind_machine(table, Hooks())
    dispatcher.start()
    contexts = [[0] for _ in range(1000)]
    started = [dispatcher.start_session_task(binding, ctx) for ctx in contexts]
    ids = [sid for sid, _ in started]

    def feed(part: list[int]) -> None:
        for _ in range(10):
            for sid in part:
                assert dispatcher.post(sid, "tick")
        for sid in part:
            dispatcher.post(sid, "stop")

    threads = [threading.Thread(target=feed, args=(ids[i::8],)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for _, task in started:
        assert task.result(timeout_seconds=30).state == "done"
    assert all(ctx[0] == 10 for ctx in contexts)
    assert dispatcher.stop(timeout_seconds=10)


def test_a_table_with_equal_but_not_identical_kind_strings_runs_the_same(
    dispatcher: Dispatcher,
) -> None:
    """Issue 22 item 12: a table read back from JSON holds state kinds equal to the
    compiled ones but not the same string objects; the dispatcher compared them with
    ``is``, so such a table bound and then never left its first (auto) state."""
    import json

    table = compile_table(BASIC)
    fresh = json.loads(json.dumps([row.kind for row in table.states]))  # new str objects
    rebuilt = table._replace(
        states=tuple(row._replace(kind=kind) for row, kind in zip(table.states, fresh))
    )
    assert rebuilt == table and rebuilt.states[0].kind is not table.states[0].kind
    hooks = Recorder(HOOKS)
    states: list[str] = []
    dispatcher.add_observer(lambda rec: states.append(rec.target))
    sid, results = run_session(dispatcher, bind_machine(rebuilt, hooks))
    assert states == ["a"]
    assert dispatcher.post(sid, "go")
    dispatcher.run_until_idle()
    assert states == ["a", "b", "done"]
    assert results and results[0][0] is not None and results[0][1] is None
