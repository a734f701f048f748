"""Session values of the dispatcher: authorities, step records, results, counters,
the live session object and the context handed to offloaded work.

Owns no behaviour beyond tiny accessors; :mod:`phronomy_fsm.runtime.dispatcher` runs
sessions (``docs/runtime.md``: "Stale results" for the authority a result must still
match).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from phronomy_fsm.runtime.binding import MachineBinding, Node
from phronomy_fsm.runtime.cancellation import CancellationToken

if TYPE_CHECKING:
    from phronomy_fsm.runtime.dispatcher import Dispatcher
    from phronomy_fsm.runtime.offload import Defer


class Authority(NamedTuple):
    """What a result must still match to be applied (``docs/runtime.md``, "Stale results")."""

    session_id: int
    revision: int | None
    state: str
    entry_serial: int
    operation_id: int


class StepRecord(NamedTuple):
    """One transition taken, as given to observers."""

    session_id: int
    machine: str
    source: str
    event: str
    guard: str | None
    target: str
    internal: bool
    transition_index: int
    step: int
    monotonic: float


class SessionResult(NamedTuple):
    """How a session ended: ``status`` is ``finished`` (final state) or ``halted``
    (wait state); ``state`` is where it stopped; ``context`` is its context object."""

    session_id: int
    machine: str
    status: str
    state: str
    context: Any


class DispatcherStats:
    """Counters (read them from any thread; exact values need the loop thread)."""

    __slots__ = (
        "backpressure",
        "dropped_stale",
        "dropped_unknown_session",
        "ignored",
        "noops",
        "sessions_failed",
        "sessions_finished",
        "sessions_halted",
        "sessions_started",
    )

    noops: int
    ignored: int
    dropped_unknown_session: int
    dropped_stale: int
    sessions_started: int
    sessions_finished: int
    sessions_halted: int
    sessions_failed: int
    backpressure: int

    def __init__(self) -> None:
        for name in self.__slots__:
            setattr(self, name, 0)

    def as_dict(self) -> dict[str, int]:
        """The counters as a dict."""
        return {name: getattr(self, name) for name in self.__slots__}


class EffectStart(NamedTuple):
    """What a session driver says about an effect it lets start: its declared
    ``kind`` (``pure``, ``idempotent``, ``at_most_once``), its idempotency ``key`` and
    its ``attempt`` (docs/semantics.md, "Effects"), and the execution's own
    ``deadline`` (an aware datetime, or ``None``). Handed to the work as
    ``octx.effect``."""

    kind: str
    key: str
    attempt: int = 1
    deadline: datetime | None = None


#: Returned by :meth:`SessionDriver.offload` when the effect must not start: the
#: driver has halted the session itself (recovery parks it for an operator).
PARKED = object()


class SessionDriver(Protocol):
    """What a durable runtime adds to a session (the dispatcher calls it on the loop
    thread; see :mod:`phronomy_fsm.durable.runtime`). Plain sessions have none."""

    def barrier(self, session: Session, spec: Any, payload: Any) -> Any:
        """Build and start the barrier's commit; return the barrier work."""
        ...

    def offload(self, session: Session, spec: Any, payload: Any) -> Any:
        """Decide about an offload about to start: ``None`` (start it as usual), an
        :class:`EffectStart`, a ``Settled`` outcome to post instead of running it, or
        :data:`PARKED`."""
        ...

    def step(self, session: Session, source: str, target: str) -> None:
        """Called after every transition the session takes."""
        ...

    def may_start_effect(self) -> BaseException | Defer | None:
        """Called on a pool thread just before a non-pure effect's work starts:
        ``None`` to let it start, the error to fail it with, unrun (the worker may
        have lost its lease while the work waited in the queue), or a
        :class:`~phronomy_fsm.runtime.offload.Defer` (not yet: a limit is full)."""
        ...

    def effect_work(self, work: Callable[[Any], Any]) -> Callable[[Any], Any]:
        """The work of a non-pure effect about to be submitted, wrapped as the driver
        needs (its limits' slots freed when it returns; ``docs/semantics.md``,
        "Limits")."""
        ...

    def effect_done(self, name: str, effect: EffectStart, value: Any, error: Any) -> None:
        """An effect's work returned (``value``) or raised (``error``), whether or
        not its result is still authoritative (observation only)."""
        ...


class Session:
    """One live incarnation of a machine. Touched only on the loop thread."""

    __slots__ = (
        "binding",
        "ctx",
        "driver",
        "group",
        "id",
        "limit",
        "node",
        "on_done",
        "op",
        "revision",
        "serial",
        "steps",
        "token",
    )

    def __init__(
        self,
        session_id: int,
        binding: MachineBinding,
        ctx: Any,
        group: Any,
        on_done: Callable[[SessionResult | None, BaseException | None], None] | None,
        revision: int | None,
        limit: int,
    ) -> None:
        self.id = session_id
        self.binding = binding
        self.ctx = ctx
        self.node: Node = binding.initial
        self.serial = 0
        self.steps = 0
        self.revision = revision
        self.group = group
        self.op = 0
        self.on_done = on_done
        self.limit = limit
        self.driver: SessionDriver | None = None
        #: the cancellation token of the offload in flight (durable sessions only)
        self.token: CancellationToken | None = None

    def cancel_work(self, reason: str) -> None:
        """Cancel the token of the offload in flight, if any (loop thread): its work
        is told to stop early — the session left the state, or ended."""
        token, self.token = self.token, None
        if token is not None:
            token.cancel(reason)

    @property
    def state(self) -> str:
        """The current state's name."""
        return self.node.name


class OffloadContext:
    """Handed to offload work on its worker thread.

    Attributes:
        authority: what the result must still match when it comes back.
        effect: the :class:`EffectStart` of a durable execution's effect, else None.
        cancellation: for work of a durable execution, a
            :class:`~phronomy_fsm.runtime.cancellation.CancellationToken` cancelled
            when the session leaves the state or ends (a cancel, a deadline, a lease
            lost): work may check it, or register ``on_cancel`` to abort a blocking
            read (the OpenAI-compatible provider closes its HTTP response). ``None``
            for other sessions; work is never interrupted by force.
    """

    __slots__ = ("_dispatcher", "authority", "cancellation", "effect")

    def __init__(
        self,
        dispatcher: Dispatcher,
        authority: Authority,
        effect: EffectStart | None = None,
        cancellation: CancellationToken | None = None,
    ) -> None:
        self._dispatcher = dispatcher
        self.authority = authority
        #: for an effect of a durable execution: its kind, idempotency key and attempt
        self.effect = effect
        self.cancellation = cancellation

    @property
    def idempotency_key(self) -> str | None:
        """The effect's idempotency key (``None`` outside a durable execution):
        stable across restarts, the same on a re-run after a crash
        (docs/semantics.md, "Idempotency keys")."""
        return None if self.effect is None else self.effect.key

    def emit(self, event: str, payload: Any = None) -> None:
        """Post ``event`` to the session, applied only while this work is still
        authoritative (used for streamed tokens). Thread-safe."""
        self._dispatcher.post_authorized(self.authority, event, payload)

    def is_stale(self) -> bool:
        """A best-effort hint: the session has left the state this work was started
        in (read without the loop's ordering guarantees)."""
        serial = self._dispatcher.session_serial(self.authority.session_id)
        return serial is None or serial != self.authority.entry_serial
