"""Offload hooks, barriers, timers, quiescence and authority (reference §7.3-§7.6)."""

from __future__ import annotations

import concurrent.futures as cf
import threading
from typing import Any

import pytest

from phronomy_fsm.errors import BackpressureError
from phronomy_fsm.runtime import Dispatcher, ManualClock, OffloadPool, SessionResult, bind_machine
from phronomy_fsm.table import BarrierOutcome

from .conftest import compile_table

WORK = """
machine: work
version: 1
events:
  done: {}
  failed: {}
  chunk: {}
  cancel: {unhandled: ignore}
  c_ok: {}
  c_no: {}
  c_conflict: {}
  c_unknown: {}
  expired: {}
  resume: {}
states:
  calling:
    kind: external
    initial: true
    offload: {hook: call, completed: done, failed: failed, effect: pure}
  committing:
    kind: external
    barrier: {name: commit, committed: c_ok, not_committed: c_no, conflict: c_conflict, outcome_unknown: c_unknown}
  waiting:
    kind: external
    timeout: {seconds: 5, event: expired}
  cancelled: {kind: external}
  ok: {kind: final}
  bad: {kind: final}
transitions:
  - {from: calling, event: chunk, actions: [on_chunk]}
  - {from: calling, event: done, to: committing, actions: [record]}
  - {from: calling, event: failed, to: bad, actions: [record]}
  - {from: calling, event: cancel, to: cancelled}
  - {from: committing, event: c_ok, to: waiting, actions: [record]}
  - {from: committing, event: c_no, to: bad, actions: [record]}
  - {from: committing, event: c_conflict, to: bad, actions: [record]}
  - {from: committing, event: c_unknown, to: bad, actions: [record]}
  - {from: waiting, event: expired, to: bad, actions: [record]}
  - {from: waiting, event: resume, to: ok}
  - {from: cancelled, event: resume, to: ok}
"""


class WorkHooks:
    """Configurable hooks: ``work`` is what the offload runs, ``barrier`` what the
    barrier returns."""

    def __init__(self) -> None:
        self.work: Any = lambda octx: "value"
        self.barrier: Any = lambda: BarrierOutcome("committed", revision=1)
        self.records: list[tuple[str, Any]] = []
        self.chunks: list[Any] = []

    def call(self, ctx: Any, payload: Any) -> Any:
        return self.work

    def commit(self, ctx: Any, payload: Any) -> Any:
        return self.barrier

    def record(self, ctx: Any, payload: Any) -> None:
        self.records.append(("record", payload))

    def on_chunk(self, ctx: Any, payload: Any) -> None:
        self.chunks.append(payload)


def start(dispatcher: Dispatcher, hooks: WorkHooks, **kwargs: Any) -> tuple[int, list[Any]]:
    results: list[Any] = []
    binding = bind_machine(compile_table(WORK), hooks)
    sid = dispatcher.start_session(
        binding, None, on_done=lambda r, e: results.append((r, e)), **kwargs
    )
    return sid, results


def state_of(dispatcher: Dispatcher, sid: int) -> str | None:
    task = dispatcher.call(dispatcher.session_state, sid)
    dispatcher.run_until_idle(wait_for_work=False)
    return task.result()


def test_offload_value_becomes_the_completed_event(dispatcher: Dispatcher) -> None:
    hooks = WorkHooks()
    sid, _ = start(dispatcher, hooks)
    dispatcher.run_until_idle()
    assert hooks.records[0] == ("record", "value")
    assert hooks.records[1][1].outcome == "committed"
    assert state_of(dispatcher, sid) == "waiting"


def test_offload_error_becomes_the_failed_event(dispatcher: Dispatcher) -> None:
    hooks = WorkHooks()
    error = ValueError("provider down")

    def fail(octx: Any) -> Any:
        raise error

    hooks.work = fail
    _sid, results = start(dispatcher, hooks)
    dispatcher.run_until_idle()
    assert hooks.records == [("record", error)]
    assert results[0][0].state == "bad"


def test_offload_hook_that_raises_while_preparing_is_the_offloads_failure(
    dispatcher: Dispatcher,
) -> None:
    class Hooks(WorkHooks):
        def call(self, ctx: Any, payload: Any) -> Any:
            raise KeyError("no such provider")

    hooks = Hooks()
    _sid, results = start(dispatcher, hooks)
    dispatcher.run_until_idle()
    assert isinstance(hooks.records[0][1], KeyError)
    assert results[0][0].state == "bad"


def test_emitted_events_flow_while_authoritative_and_are_dropped_after(
    dispatcher: Dispatcher,
) -> None:
    hooks = WorkHooks()
    release = threading.Event()
    contexts: list[Any] = []

    def work(octx: Any) -> Any:
        contexts.append(octx)
        octx.emit("chunk", "tok1")
        octx.emit("chunk", "tok2")
        release.wait(5)
        return "late"

    hooks.work = work
    sid, _ = start(dispatcher, hooks)
    for _ in range(200):
        dispatcher.run_until_idle(wait_for_work=False)
        if len(hooks.chunks) == 2:
            break
        threading.Event().wait(0.005)
    assert hooks.chunks == ["tok1", "tok2"]
    dispatcher.post(sid, "cancel")  # leave the state: result authority is revoked at once
    dispatcher.run_until_idle(wait_for_work=False)
    stale_before = dispatcher.stats.dropped_stale
    contexts[0].emit("chunk", "tok3")
    release.set()
    dispatcher.run_until_idle()  # waits for the work to come back
    assert hooks.chunks == ["tok1", "tok2"]
    assert ("record", "late") not in hooks.records
    assert dispatcher.stats.dropped_stale == stale_before + 2  # the late chunk and the late result
    assert state_of(dispatcher, sid) == "cancelled"


def test_a_full_pool_is_backpressure_delivered_as_the_failed_event() -> None:
    clock = ManualClock()
    pool = OffloadPool(max_workers=1, queue_size=0, clock=clock)
    dispatcher = Dispatcher(pool=pool, clock=clock)
    blocker = threading.Event()
    pool.submit(blocker.wait, 5)  # occupies the only slot
    hooks = WorkHooks()
    _sid, results = start(dispatcher, hooks)
    dispatcher.run_until_idle(wait_for_work=False)
    assert isinstance(hooks.records[0][1], BackpressureError)
    assert results[0][0].state == "bad"
    assert dispatcher.stats.backpressure == 1
    blocker.set()
    pool.shutdown()


@pytest.mark.parametrize(
    ("outcome", "state"),
    [
        (BarrierOutcome("committed", revision=4), "waiting"),
        (BarrierOutcome("not_committed", error=RuntimeError("x")), "bad"),
        (BarrierOutcome("conflict"), "bad"),
        (BarrierOutcome("outcome_unknown"), "bad"),
    ],
)
def test_each_barrier_outcome_posts_its_event(
    dispatcher: Dispatcher, outcome: BarrierOutcome, state: str
) -> None:
    hooks = WorkHooks()
    hooks.barrier = lambda: outcome
    sid, _ = start(dispatcher, hooks, revision=3)
    dispatcher.run_until_idle()
    assert hooks.records[1] == ("record", outcome)
    assert state_of(dispatcher, sid) == (state if state != "bad" else None)
    if outcome.outcome == "committed":
        authority = dispatcher.call(dispatcher.authority, sid)
        dispatcher.run_until_idle()
        assert authority.result().revision == 4  # the live revision follows the commit


def test_barrier_work_that_raises_is_outcome_unknown(dispatcher: Dispatcher) -> None:
    hooks = WorkHooks()

    def explode() -> Any:
        raise OSError("disk I/O error")

    hooks.barrier = explode
    _sid, _results = start(dispatcher, hooks)
    dispatcher.run_until_idle()
    outcome = hooks.records[1][1]
    assert outcome.outcome == "outcome_unknown" and isinstance(outcome.error, OSError)


def test_barrier_hook_that_raises_while_preparing_is_not_committed(dispatcher: Dispatcher) -> None:
    class Hooks(WorkHooks):
        def commit(self, ctx: Any, payload: Any) -> Any:
            raise TypeError("cannot serialise")

    hooks = Hooks()
    start(dispatcher, hooks)
    dispatcher.run_until_idle()
    assert hooks.records[1][1].outcome == "not_committed"


def test_barrier_may_return_a_future_settled_elsewhere(dispatcher: Dispatcher) -> None:
    hooks = WorkHooks()
    future: cf.Future[BarrierOutcome] = cf.Future()
    hooks.barrier = future
    sid, _ = start(dispatcher, hooks)
    dispatcher.run_until_idle(wait_for_work=False)
    assert dispatcher.in_flight(None) == 1
    threading.Thread(
        target=future.set_result, args=(BarrierOutcome("committed", revision=9),)
    ).start()
    dispatcher.run_until_idle()
    assert state_of(dispatcher, sid) == "waiting"
    assert dispatcher.in_flight(None) == 0


def test_state_timeout_fires_on_the_manual_clock_only_while_in_the_state(
    dispatcher: Dispatcher, clock: ManualClock
) -> None:
    hooks = WorkHooks()
    sid, results = start(dispatcher, hooks)
    dispatcher.run_until_idle()
    assert state_of(dispatcher, sid) == "waiting"
    clock.advance(4.9)
    dispatcher.run_until_idle()
    assert results == []
    clock.advance(0.2)
    dispatcher.run_until_idle()
    assert results[0][0].state == "bad" and hooks.records[-1] == ("record", None)

    sid2, results2 = start(dispatcher, hooks)
    dispatcher.run_until_idle()
    dispatcher.post(sid2, "resume")  # leave before the deadline
    dispatcher.run_until_idle()
    clock.advance(10)
    dispatcher.run_until_idle()
    assert results2[0][0] == SessionResult(sid2, "work", "finished", "ok", None)


def test_quiescence_waits_for_abandoned_work_to_physically_finish(dispatcher: Dispatcher) -> None:
    hooks = WorkHooks()
    release = threading.Event()
    hooks.work = lambda octx: release.wait(5)
    sid, _ = start(dispatcher, hooks, group="exec-1")
    dispatcher.run_until_idle(wait_for_work=False)
    dispatcher.post(sid, "cancel")
    fired: list[str] = []
    dispatcher.call_soon(lambda: dispatcher.when_quiescent("exec-1", lambda: fired.append("quiet")))
    dispatcher.run_until_idle(wait_for_work=False)
    assert state_of(dispatcher, sid) == "cancelled"  # logically done with the call...
    assert fired == [] and dispatcher.in_flight("exec-1") == 1  # ...but it still runs
    release.set()
    dispatcher.run_until_idle()
    assert fired == ["quiet"] and dispatcher.in_flight("exec-1") == 0
    # already quiescent: the callback runs at once
    dispatcher.call_soon(lambda: dispatcher.when_quiescent("exec-1", lambda: fired.append("again")))
    dispatcher.run_until_idle()
    assert fired == ["quiet", "again"]


def test_results_of_a_previous_incarnation_are_dropped(dispatcher: Dispatcher) -> None:
    """A result carrying another session id, revision or operation id is stale."""
    hooks = WorkHooks()
    gate = threading.Event()
    hooks.work = lambda octx: gate.wait(5) and "v"
    sid, _ = start(dispatcher, hooks)
    dispatcher.run_until_idle(wait_for_work=False)
    authority = dispatcher.call(dispatcher.authority, sid)
    dispatcher.run_until_idle(wait_for_work=False)
    current = authority.result()
    before = dispatcher.stats.dropped_stale
    for forged in (
        current._replace(session_id=current.session_id + 1000),
        current._replace(revision=77),
        current._replace(operation_id=current.operation_id + 1),
        current._replace(entry_serial=current.entry_serial - 1),
    ):
        dispatcher.post_authorized(forged, "done", "forged")
    dispatcher.run_until_idle(wait_for_work=False)
    assert dispatcher.stats.dropped_stale == before + 4
    assert hooks.records == []
    gate.set()
    dispatcher.run_until_idle()
    assert hooks.records[0] == ("record", "v")


def test_offload_work_may_omit_the_context_parameter(dispatcher: Dispatcher) -> None:
    hooks = WorkHooks()
    hooks.work = lambda: "no context needed"
    start(dispatcher, hooks)
    dispatcher.run_until_idle()
    assert hooks.records[0] == ("record", "no context needed")


def test_an_undeclared_event_says_the_machine_does_not_know_it(dispatcher: Dispatcher) -> None:
    from phronomy_fsm.errors import UndeclaredEventError

    hooks = WorkHooks()
    hooks.work = lambda octx: threading.Event().wait(5)
    sid, results = start(dispatcher, hooks)
    dispatcher.run_until_idle(wait_for_work=False)
    dispatcher.post(sid, "paid")
    dispatcher.run_until_idle(wait_for_work=False)
    error = results[0][1]
    assert isinstance(error, UndeclaredEventError) and "not declared by the machine" in str(error)
