"""The lifecycle of a live execution: its :class:`Phase`, and the state it carries.

Owns :class:`LiveExecution` (one execution as this process runs it), the legal moves
of its phase (:data:`PHASE_MOVES`, applied only by the ``LiveExecution`` methods
below), :class:`Halt` (why its session is being stopped), :class:`Replay` and
:class:`Registration` (a registered machine). The rules the phases serve are in
``docs/semantics.md`` ("Commits", "Signals", "Cancel", "Recovery").

A live execution moves along two independent dimensions, and only these methods move
them:

- its **session** (:class:`Phase`): ``RESTING`` (no session: it waits for a signal or
  a timer, is parked for an operator, is being installed or has finished) →
  ``RUNNING`` (:meth:`LiveExecution.session_started`) ⇄ ``AT_BARRIER`` (its spec
  barrier's commit is in flight: :meth:`~LiveExecution.barrier_started`,
  :meth:`~LiveExecution.took_step`) → ``HALTING`` (:meth:`~LiveExecution.halting_for`,
  with a :class:`Halt`) → ``RESTING`` (:meth:`~LiveExecution.session_ended`);
- its **engine commit** (``committing``: ``@effect``, ``@wait``, ``@final``,
  ``@recovery``, ``@resolution``, ``@cancel`` in flight:
  :meth:`~LiveExecution.commit_started` / :meth:`~LiveExecution.commit_settled`).
  It is independent of the session: an ``@effect`` commit is in flight while its
  session runs at the effect, and a cancel may halt that session before the commit's
  outcome.

A cancel being applied (``cancelling``) and the effect bookkeeping
(``effect_since_commit``, ``effect_in_flight``) are facts about the commits, reset by
the engine's one post-commit path (``Engine.committed``). Everything here is touched
on the dispatcher's loop thread only. Must not import the store or agent layers.
"""

from __future__ import annotations

import enum
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from phronomy_fsm.durable.context import ContextCodec
from phronomy_fsm.durable.machines import MachineFacts
from phronomy_fsm.durable.records import (
    EffectRef,
    ExecutionRecord,
    Fence,
    RecoveryInfo,
    ResolutionInfo,
    SignalRecord,
)
from phronomy_fsm.durable.types import ExecutionResult, Machine
from phronomy_fsm.runtime.binding import MachineBinding, is_protocol_stub
from phronomy_fsm.runtime.tasks import Task

if TYPE_CHECKING:
    from phronomy_fsm.durable.limits import EffectLimiter


class Phase(enum.Enum):
    """Where a live execution's session stands (see the module docstring)."""

    #: No session runs: it waits durably (a signal, a timer), is parked for an
    #: operator, is being installed, or has finished.
    RESTING = "resting"
    #: Its session runs: it takes signals between steps.
    RUNNING = "running"
    #: Its session's spec-barrier commit is in flight: it takes no signal until the
    #: commit's outcome moves the session (``docs/semantics.md``, "Signals").
    AT_BARRIER = "at_barrier"
    #: Its session is being stopped; ``LiveExecution.halt`` says why.
    HALTING = "halting"


#: The moves of :class:`Phase` the ``LiveExecution`` methods make: one screen of the
#: whole session lifecycle. A session may end (``RESTING``) from any phase: the
#: dispatcher reports the end of a session that failed, finished or was halted — also
#: the late end of a session superseded by a reinstall, after the new one ended.
PHASE_MOVES: dict[Phase, frozenset[Phase]] = {
    Phase.RESTING: frozenset({Phase.RUNNING, Phase.RESTING}),
    Phase.RUNNING: frozenset({Phase.AT_BARRIER, Phase.HALTING, Phase.RESTING, Phase.RUNNING}),
    Phase.AT_BARRIER: frozenset({Phase.RUNNING, Phase.HALTING, Phase.RESTING}),
    Phase.HALTING: frozenset({Phase.HALTING, Phase.RESTING, Phase.RUNNING}),
}


class Halt(enum.Enum):
    """Why a live execution's session is being stopped (what its end then means)."""

    #: The live copy is dropped and read back from the store, or let go.
    SUPERSEDED = "superseded"
    #: The machine entered its ``fail_closed`` state: recover from the store.
    FAIL_CLOSED = "fail_closed"
    #: A cancel stops it; the cancel path commits once nothing of it runs.
    CANCEL = "cancel"


class Registration:
    """A registered machine: its binding, facts, context codec and record hooks.

    Args:
        machine: the machine (table, hooks, context type).
        binding: its hooks bound to the table (``phronomy_fsm.runtime.bind_machine``).
    """

    __slots__ = ("binding", "codec", "facts", "machine", "record_hooks")

    def __init__(self, machine: Machine, binding: MachineBinding) -> None:
        self.machine = machine
        self.binding = binding
        self.facts = MachineFacts(machine.table, machine.final_status)
        self.codec = ContextCodec(machine.context_type, machine.name)
        hooks = machine.hooks
        self.record_hooks: dict[str, Any] = {
            name: getattr(hooks, name)
            for name in machine.table.barriers
            if callable(getattr(hooks, name, None)) and not is_protocol_stub(hooks, name)
        }


class Replay:
    """Set while a recovered execution re-runs from its last barrier, until it reaches
    its first non-pure effect, a barrier, a wait or a final state.

    ``fresh`` is true only right after this runtime committed ``resolution`` (nothing
    of it has run yet); a resolution read back from the store may have been acted on
    before the process stopped (a ``retry`` may have run its attempt)."""

    __slots__ = ("fresh", "resolution")

    def __init__(self, resolution: ResolutionInfo | None = None, *, fresh: bool = False) -> None:
        self.resolution = resolution
        self.fresh = fresh


class LiveExecution:
    """The live state of one execution in this process (loop thread only).

    Attributes: ``execution_id``; ``reg`` (its machine); ``record`` (as last
    committed); ``ctx`` (the decoded context, ``None`` while it waits); ``fence``;
    ``phase`` (:class:`Phase`) with ``session_id`` (while a session runs) and
    ``halt`` (why it is being stopped, while ``HALTING``); ``state`` (current live
    state); ``pending`` (undelivered inbox signals, in order); ``delivered`` (seqs
    consumed by the next commit); ``replay``; ``parked`` (why it is being parked);
    ``waiters`` (tasks settled when it finishes); ``timer`` and ``expiry`` (its wait's
    timer and its own deadline); ``moved`` (its session has entered a state since it
    started: a wait it re-commits without having left it keeps its timer's deadline); ``effect_since_commit`` (an effect started since
    the last commit that set the durable point: the next one needs an announcement of
    its own); ``effect_in_flight`` / ``effect_outcome`` (the last non-pure effect
    started since that commit, and what it reported back: a cancel's record names
    them); ``cancelling`` (the cancel request being applied: the same request read
    again, or another, changes nothing; the children a commit in flight started are
    cancelled with it as they arrive); ``announcement`` (the outcome of the
    ``@effect`` commit the effect being started waits for: ``None`` once committed,
    else the error); ``delivery_scheduled`` (a look for the next signal its live
    session takes is queued on the loop); ``committing`` (an engine commit is in
    flight).
    """

    __slots__ = (
        "announcement",
        "cancelling",
        "committing",
        "ctx",
        "delivered",
        "delivery_scheduled",
        "effect_in_flight",
        "effect_outcome",
        "effect_since_commit",
        "execution_id",
        "expiry",
        "fence",
        "halt",
        "limiter",
        "moved",
        "parked",
        "pending",
        "phase",
        "record",
        "reg",
        "replay",
        "session_id",
        "state",
        "timer",
        "waiters",
    )

    def __init__(self, reg: Registration, record: ExecutionRecord, fence: Fence) -> None:
        self.execution_id = record.execution_id
        self.reg = reg
        self.record = record
        self.ctx: Any = None
        self.fence = fence
        self.phase = Phase.RESTING
        self.session_id: int | None = None
        self.halt: Halt | None = None
        self.moved = False
        self.state = record.state
        self.pending: list[SignalRecord] = []
        self.delivered: list[int] = []
        self.replay: Replay | None = None
        self.parked: RecoveryInfo | None = None
        self.waiters: list[Task[ExecutionResult]] = []
        self.timer: Any = None
        self.expiry: Any = None
        self.delivery_scheduled = False
        self.cancelling: SignalRecord | None = None
        self.effect_since_commit = False
        self.effect_in_flight: EffectRef | None = None
        self.effect_outcome: str | None = None
        self.announcement: Future[BaseException | None] | None = None
        #: the limits of the effect being started now (``docs/semantics.md``, "Limits")
        self.limiter: EffectLimiter | None = None
        self.committing = False

    def __repr__(self) -> str:
        return (
            f"<LiveExecution {self.execution_id} {self.state} r{self.record.revision} "
            f"{self.phase.value}>"
        )

    # ------------------------------------------------------------- phase moves

    def _enter(self, phase: Phase) -> None:
        # Why an assert: a move outside PHASE_MOVES is an engine bug the suite must
        # catch; production keeps the move it was asked for.
        assert phase in PHASE_MOVES[self.phase], f"{self!r}: {self.phase} -> {phase}"
        self.phase = phase

    def session_starting(self) -> None:
        """A session is about to start or resume (``RESTING`` → ``RUNNING``; the
        session id follows from :meth:`session_started`)."""
        self.halt = None
        self.moved = False
        self._enter(Phase.RUNNING)

    def session_started(self, session_id: int) -> None:
        """The dispatcher started session ``session_id`` for it."""
        self.session_id = session_id

    def barrier_started(self) -> None:
        """Its session's barrier commit is submitted: no signal until its outcome
        moves the session (a halting session stays ``HALTING``)."""
        if self.phase is Phase.RUNNING:
            self._enter(Phase.AT_BARRIER)

    def took_step(self, serial: int) -> None:
        """Its session took a transition into the state entry numbered ``serial``: a
        move settles (or leaves) the barrier of its source state; every session starts
        at entry serial 1, so a higher one means it entered a state since."""
        if self.phase is Phase.AT_BARRIER:
            self._enter(Phase.RUNNING)
        if serial != 1:
            self.moved = True

    def halting_for(self, why: Halt) -> None:
        """Its session is being stopped for ``why`` (remembered until it ends)."""
        self.halt = why
        self._enter(Phase.HALTING)

    def session_ended(self) -> Halt | None:
        """Its session ended: ``RESTING``; returns why it was being stopped, if it
        was."""
        halt, self.halt = self.halt, None
        self.session_id = None
        self._enter(Phase.RESTING)
        return halt

    def commit_started(self) -> None:
        """An engine commit of it is submitted."""
        self.committing = True

    def commit_settled(self) -> None:
        """The engine commit's outcome arrived (or its submit failed)."""
        self.committing = False

    @property
    def is_halting(self) -> bool:
        """True while its session is being stopped."""
        return self.phase is Phase.HALTING


__all__ = [
    "PHASE_MOVES",
    "Halt",
    "LiveExecution",
    "Phase",
    "Registration",
    "Replay",
]
