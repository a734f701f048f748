"""Tasks: the one future type callers hold (``docs/runtime.md``, "Tasks").

A :class:`Task` settles exactly once — completed with a value, failed with an error, or
cancelled with :class:`~phronomy_fsm.errors.Cancelled` — and offers every way a caller
waits: blocking :meth:`Task.result` from another thread (with a waiter-local timeout that
never cancels the work), callbacks, and ``await`` from asyncio. Blocking on a
dispatcher's loop thread while the task is pending raises
:class:`~phronomy_fsm.errors.WrongThreadError` (the loop would wait for itself).

It is built on :class:`concurrent.futures.Future`, so ``asyncio.wrap_future`` and the
standard library's waiting tools work on :attr:`Task.future`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import logging
import threading
from collections.abc import Callable, Generator
from typing import Any, Generic, TypeVar

from phronomy_fsm.errors import HOOK_ERRORS, Cancelled, TaskTimeoutError, WrongThreadError

T = TypeVar("T")
log = logging.getLogger("phronomy_fsm.runtime")

#: Thread idents of running dispatcher loops; blocking waits there are refused.
LOOP_THREADS: set[int] = set()

PENDING = "pending"
COMPLETED = "completed"
FAILED = "failed"
CANCELLED = "cancelled"


def on_loop_thread() -> bool:
    """True when the calling thread runs a dispatcher loop."""
    return threading.get_ident() in LOOP_THREADS


class Task(Generic[T]):
    """A settle-once result for callers.

    Args:
        name: shown in ``repr`` and in timeout messages.

    Settlement (:meth:`complete`, :meth:`fail`, :meth:`cancel`) is for the framework;
    the first settlement wins and later ones return ``False``.

    Concurrency: every method is thread-safe. Callbacks run on the settling thread (or
    immediately, on the caller's thread, if the task already settled); an exception
    in a callback is logged and does not affect the task or other callbacks.
    """

    __slots__ = ("__weakref__", "future", "name")

    def __init__(self, name: str = "task") -> None:
        self.name = name
        self.future: cf.Future[T] = cf.Future()
        self.future.set_running_or_notify_cancel()

    def __repr__(self) -> str:
        return f"<Task {self.name} {self.status}>"

    # --- settlement (framework) ------------------------------------------------

    def complete(self, value: T) -> bool:
        """Settle with ``value``; return False if already settled."""
        try:
            self.future.set_result(value)
            return True
        except cf.InvalidStateError:
            return False

    def fail(self, error: BaseException) -> bool:
        """Settle with ``error``; return False if already settled."""
        try:
            self.future.set_exception(error)
            return True
        except cf.InvalidStateError:
            return False

    def cancel(self, reason: str = "cancelled", *, timed_out: bool = False) -> bool:
        """Settle as cancelled (the error is a :class:`Cancelled`); return False if
        already settled. Cancelling a task never interrupts work already running."""
        return self.fail(Cancelled(reason, timed_out=timed_out))

    # --- observation -----------------------------------------------------------

    def done(self) -> bool:
        """True once settled."""
        return self.future.done()

    @property
    def status(self) -> str:
        """``pending``, ``completed``, ``failed`` or ``cancelled``."""
        if not self.future.done():
            return PENDING
        error = self.future.exception()
        if error is None:
            return COMPLETED
        return CANCELLED if isinstance(error, Cancelled) else FAILED

    def result(self, timeout_seconds: float | None = None) -> T:
        """Wait for the value (re-raising the task's error).

        Args:
            timeout_seconds: how long this caller waits; ``None`` waits forever.

        Raises:
            TaskTimeoutError: this waiter gave up; the task is unaffected.
            WrongThreadError: called on a dispatcher loop thread while pending.
            Cancelled: the task was cancelled.
            Exception: whatever error the task failed with.
        """
        self._check_thread()
        try:
            return self.future.result(timeout_seconds)
        except cf.TimeoutError:
            raise TaskTimeoutError(
                f"{self.name}: still pending after {timeout_seconds} s (the task keeps running)",
                task=self.name,
                timeout_seconds=timeout_seconds,
            ) from None

    def error(self, timeout_seconds: float | None = None) -> BaseException | None:
        """Wait, then return the error (``None`` if it completed). Same waiting rules
        as :meth:`result`."""
        self._check_thread()
        try:
            return self.future.exception(timeout_seconds)
        except cf.TimeoutError:
            raise TaskTimeoutError(
                f"{self.name}: still pending after {timeout_seconds} s", task=self.name
            ) from None

    def add_done_callback(self, callback: Callable[[Task[T]], Any]) -> None:
        """Call ``callback(task)`` once settled (immediately if already settled)."""

        def run(_: cf.Future[T]) -> None:
            try:
                callback(self)
            except HOOK_ERRORS:
                log.exception("task %s: done callback raised", self.name)

        self.future.add_done_callback(run)

    def __await__(self) -> Generator[Any, None, T]:
        """``await task`` from asyncio (any running event loop)."""
        return asyncio.wrap_future(self.future).__await__()

    def _check_thread(self) -> None:
        if not self.future.done() and threading.get_ident() in LOOP_THREADS:
            raise WrongThreadError(
                f"{self.name}: blocking wait on the dispatcher loop thread would deadlock; "
                "use add_done_callback instead",
                task=self.name,
            )

    # --- construction helpers ---------------------------------------------------

    @classmethod
    def completed(cls, value: T, name: str = "task") -> Task[T]:
        """A task already completed with ``value``."""
        task: Task[T] = cls(name)
        task.complete(value)
        return task

    @classmethod
    def failed(cls, error: BaseException, name: str = "task") -> Task[Any]:
        """A task already failed with ``error``."""
        task: Task[Any] = cls(name)
        task.fail(error)
        return task
