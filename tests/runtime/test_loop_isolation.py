"""One session's bad input or raising hook never ends the shared loop (issue 11 items 2
and 3): a malformed ``post`` is refused with a typed error, a hook raising any
``BaseException`` ends only its own session, and callers of a loop that did fail get
an error instead of waiting for ever.

Real components: a dispatcher running on its own thread, machines compiled through the
real code generator.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from phronomy_fsm.errors import (
    Cancelled,
    DispatcherStoppedError,
    DispatchInputError,
    HookError,
)
from phronomy_fsm.runtime import Dispatcher, OffloadPool, SessionResult, bind_machine
from phronomy_fsm.runtime.clock import SystemClock

from .conftest import Recorder, compile_table

PINGPONG = """
machine: pingpong
version: 1
events:
  ping: {}
  stop: {}
states:
  start: {kind: auto, initial: true}
  ready: {kind: external}
  done: {kind: final}
transitions:
  - {from: start, event: state_completed, to: ready}
  - {from: ready, event: ping, actions: [on_ping]}
  - {from: ready, event: stop, to: done}
"""


class Ends:
    """Collects how sessions ended, with a way to wait for one."""

    def __init__(self) -> None:
        self.ended: dict[int, tuple[SessionResult | None, BaseException | None]] = {}
        self._cond = threading.Condition()

    def callback(self, sid_box: list[int]) -> Any:
        def done(result: SessionResult | None, error: BaseException | None) -> None:
            with self._cond:
                self.ended[sid_box[0]] = (result, error)
                self._cond.notify_all()

        return done

    def wait(self, sid: int, timeout: float = 10.0) -> tuple[Any, BaseException | None]:
        with self._cond:
            assert self._cond.wait_for(lambda: sid in self.ended, timeout), f"{sid} never ended"
            return self.ended[sid]


@pytest.fixture
def running() -> Any:
    pool = OffloadPool(max_workers=2, queue_size=8)
    d = Dispatcher(pool=pool)
    d.start()
    yield d
    d.stop(timeout_seconds=2, wait_for_sessions=False)
    pool.shutdown(wait=True, timeout_seconds=2)


def _start(d: Dispatcher, binding: Any, ends: Ends) -> int:
    """Start a session and wait until it rests in ``ready``: its start and then the
    ``state_completed`` it posts to itself are each handled before a round trip
    through the FIFO inbox returns."""
    box: list[int] = []
    sid = d.start_session(binding, None, on_done=ends.callback(box))
    box.append(sid)
    d.call(lambda: None).result(10)
    assert d.call(d.session_state, sid).result(10) == "ready"
    return sid


def _pings_reach(d: Dispatcher, sid: int, hooks: Recorder) -> bool:
    """Post a ping and wait (through the loop's own FIFO) until it was handled."""
    before = len(hooks.calls)
    assert d.post(sid, "ping")
    d.call(lambda: None).result(10)  # FIFO: the ping was handled before this call
    return len(hooks.calls) == before + 1


@pytest.mark.parametrize(
    "event",
    [["x"], {"a": 1}, b"ping", 42, None],
    ids=["list", "dict", "bytes", "int", "none"],
)
def test_a_malformed_event_is_refused_at_post_and_the_loop_keeps_running(
    running: Dispatcher, event: Any
) -> None:
    hooks = Recorder(("on_ping",))
    binding = bind_machine(compile_table(PINGPONG), hooks)
    ends = Ends()
    victim, bystander = _start(running, binding, ends), _start(running, binding, ends)
    with pytest.raises(DispatchInputError, match="event must be a str"):
        running.post(victim, event)
    assert running.lifecycle == "running"
    assert _pings_reach(running, victim, hooks) and _pings_reach(running, bystander, hooks)
    assert running.post(bystander, "stop")
    assert ends.wait(bystander)[0].state == "done"


def test_an_event_whose_hash_raises_is_refused_at_post(running: Dispatcher) -> None:
    class Hostile(str):
        def __hash__(self) -> int:
            raise RuntimeError("no hash for you")

    hooks = Recorder(("on_ping",))
    binding = bind_machine(compile_table(PINGPONG), hooks)
    ends = Ends()
    sid = _start(running, binding, ends)
    with pytest.raises(DispatchInputError):
        running.post(sid, Hostile("ping"))
    with pytest.raises(DispatchInputError):
        running.post_authorized(running.call(running.authority, sid).result(10), ["x"])
    assert _pings_reach(running, sid, hooks)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"session_id": ["x"]},
        {"session_id": True},
        {"session_id": "1"},
    ],
    ids=["list-id", "bool-id", "str-id"],
)
def test_a_malformed_session_id_is_refused_at_post(running: Dispatcher, kwargs: Any) -> None:
    hooks = Recorder(("on_ping",))
    binding = bind_machine(compile_table(PINGPONG), hooks)
    sid = _start(running, binding, Ends())
    with pytest.raises(DispatchInputError, match="session id"):
        running.post(kwargs["session_id"], "ping")
    assert _pings_reach(running, sid, hooks)


def test_state_completed_posted_from_outside_never_reaches_the_loop(
    running: Dispatcher,
) -> None:
    class Explosive:
        def __ne__(self, other: object) -> bool:
            raise RuntimeError("compared")

        __eq__ = __ne__
        __hash__ = object.__hash__

    hooks = Recorder(("on_ping",))
    binding = bind_machine(compile_table(PINGPONG), hooks)
    sid = _start(running, binding, Ends())
    running.post(sid, "state_completed", Explosive())
    assert running.lifecycle == "running"
    assert _pings_reach(running, sid, hooks)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"group": ["unhashable"]},
        {"step_limit": "ten"},
        {"step_limit": 0},
        {"at_state": ["ready"]},
        {"at_state": "ready", "event": ["ping"]},
    ],
    ids=["group", "step-limit-type", "step-limit-zero", "at-state", "event"],
)
def test_malformed_session_starts_are_refused_with_a_typed_error(
    running: Dispatcher, kwargs: Any
) -> None:
    hooks = Recorder(("on_ping",))
    binding = bind_machine(compile_table(PINGPONG), hooks)
    with pytest.raises(DispatchInputError):
        running.start_session(binding, None, **kwargs)
    sid = _start(running, binding, Ends())
    assert _pings_reach(running, sid, hooks)


@pytest.mark.parametrize(
    "raised",
    [Cancelled("from a hook"), GeneratorExit(), type("Odd", (BaseException,), {})()],
    ids=["Cancelled", "GeneratorExit", "bare-BaseException"],
)
def test_a_hook_raising_a_base_exception_ends_only_its_session(
    running: Dispatcher, raised: BaseException
) -> None:
    hooks = Recorder(("on_ping",))
    binding = bind_machine(compile_table(PINGPONG), hooks)
    poisoned = Recorder(("on_ping",))

    def boom(ctx: Any, payload: Any) -> None:
        raise raised

    poisoned.on_ping = boom  # type: ignore[method-assign]
    bad_binding = bind_machine(compile_table(PINGPONG), poisoned)
    ends = Ends()
    victim = _start(running, bad_binding, ends)
    bystander = _start(running, binding, ends)
    assert running.post(victim, "ping")
    result, error = ends.wait(victim)
    assert result is None and isinstance(error, HookError) and error.__cause__ is raised
    assert running.lifecycle == "running"
    assert _pings_reach(running, bystander, hooks)


def test_observers_and_done_callbacks_raising_base_exceptions_are_contained(
    running: Dispatcher,
) -> None:
    hooks = Recorder(("on_ping",))
    binding = bind_machine(compile_table(PINGPONG), hooks)

    def observer(record: Any) -> None:
        raise Cancelled("observer")

    running.add_observer(observer)

    def done(result: Any, error: Any) -> None:
        raise GeneratorExit

    sid = running.start_session(binding, None, on_done=done)
    running.call(lambda: None).result(10)
    running.call(lambda: None).result(10)
    assert running.post(sid, "stop")
    other = _start(running, binding, Ends())
    assert _pings_reach(running, other, hooks)
    assert running.lifecycle == "running"


class BreakableClock(SystemClock):
    """The system clock, until told to raise from ``monotonic`` (on the loop thread)."""

    def __init__(self) -> None:
        self.broken = threading.Event()

    def monotonic(self) -> float:
        if self.broken.is_set() and threading.current_thread().name == "breakable-loop":
            raise Cancelled("the clock broke")
        return super().monotonic()


def test_callers_of_a_failed_loop_get_an_error_instead_of_waiting() -> None:
    clock = BreakableClock()
    pool = OffloadPool(max_workers=1, queue_size=4, clock=clock)
    d = Dispatcher(pool=pool, clock=clock, name="breakable-loop")
    d.start()
    try:
        hooks = Recorder(("on_ping",))
        binding = bind_machine(compile_table(PINGPONG), hooks)
        ends = Ends()
        parked = _start(d, binding, ends)
        clock.broken.set()
        d.call_soon(lambda: None)  # wakes the loop, which then reads the broken clock
        _, error = ends.wait(parked)
        assert isinstance(error, DispatcherStoppedError) and d.lifecycle == "failed"
        with pytest.raises(DispatcherStoppedError):
            d.call(lambda: 1).result(10)
        with pytest.raises(DispatcherStoppedError):
            d.call_soon(lambda: None)
        with pytest.raises(DispatcherStoppedError):
            d.start_session(binding, None)
    finally:
        d.stop(timeout_seconds=2)
        pool.shutdown(wait=True, timeout_seconds=2)
