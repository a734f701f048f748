"""Effects and their announcements: what the engine decides as an offload starts.

Owns :class:`Effects`, the engine's part that decides about every offload a session
is about to start (``docs/semantics.md``, "Effects"):

- a ``pure`` effect just runs; every other starts with its idempotency key and
  attempt (``octx.effect``), derived from the commit that covers it;
- an effect the last durable point does not cover (a wait, a timer, another effect
  came between) is **announced** by an ``@effect`` commit of its own — the state,
  the context and the input its work reads, the effect with its kind, key and
  attempt — and its work starts only once that commit is durable (the dispatcher's
  gate waits for it);
- while an execution is **replayed** after a restart, the first effect it reaches
  decides: ``pure`` runs again, ``idempotent`` runs again with the same key,
  ``at_most_once`` parks the execution in ``recovery_required``; a committed
  resolution is applied there instead of running the effect.

Loop thread only. Must not import the store or agent layers.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

import attrs

from phronomy_fsm.durable import points
from phronomy_fsm.durable.codec import ensure_json
from phronomy_fsm.durable.lifecycle import LiveExecution
from phronomy_fsm.durable.parking import EFFECT_OUTCOMES
from phronomy_fsm.durable.points import EngineBarrier
from phronomy_fsm.durable.records import (
    DurablePoint,
    EffectKind,
    EffectRef,
    RecoveryInfo,
    ResolutionOutcome,
)
from phronomy_fsm.durable.types import DurableEventKind
from phronomy_fsm.errors import (
    ContextSerializationError,
    EffectFailedError,
    EffectNotPerformedError,
    SerializationError,
)
from phronomy_fsm.runtime.binding import MachineBinding
from phronomy_fsm.runtime.session import PARKED, EffectStart, Session
from phronomy_fsm.table import Settled

if TYPE_CHECKING:
    from phronomy_fsm.durable.engine import Engine

#: How long an announced effect's work waits (on its pool thread) for the ``@effect``
#: commit before it gives up without starting, in seconds.
ANNOUNCEMENT_WAIT_SECONDS = 60.0


def _row_index_of(binding: MachineBinding, spec: Any) -> int | None:
    """The index of the transition whose own offload is ``spec`` (``None``: none)."""
    for node in binding.nodes.values():
        for cand in node.rows.values():
            for row in cand if isinstance(cand, tuple) else (cand,):
                if getattr(row, "offload", None) is spec:
                    return int(row.index)
    return None


class Effects:
    """The engine's effects (see the module docstring).

    Args:
        engine: the engine that owns this part (loop thread).
    """

    __slots__ = ("engine",)

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def offload(self, live: LiveExecution, session: Session, spec: Any, payload: Any) -> Any:
        """Decide about an offload about to start (see the module docstring)."""
        kind = EffectKind(spec.effect)
        policy = live.reg.machine.effect_policy
        if policy is not None:
            kind = EffectKind(policy(session.ctx, spec.name, kind))
        if kind is EffectKind.PURE:
            return None
        key = live.record.effect_key(live.record.point_revision, spec.name)
        replay = live.replay
        if replay is not None:
            live.replay = None
            ref = EffectRef(spec.name, kind, session.node.name, key)
            resolution = replay.resolution
            if resolution is not None:
                subject = resolution.subject
                if subject is None or subject.effect != spec.name or subject.key != key:
                    self.engine.parking.park_diverged(
                        live, session, subject, f"effect {spec.name} (key {key})"
                    )
                    return PARKED
                outcome = resolution.outcome
                # the answered effect is this commit's: the next one needs its own
                live.effect_since_commit = True
                if outcome is ResolutionOutcome.SUCCEEDED:
                    return Settled(resolution.result)
                if outcome is ResolutionOutcome.FAILED:
                    return Settled(
                        error=EffectFailedError(
                            resolution.error or "failed", effect=spec.name, key=key
                        )
                    )
                if outcome is ResolutionOutcome.NOT_PERFORMED:
                    return Settled(
                        error=EffectNotPerformedError(
                            f"{spec.name} was not performed (operator resolution); it is not "
                            "sent again",
                            effect=spec.name,
                            key=key,
                        )
                    )
                attempt = subject.attempt + 1
                if kind is EffectKind.AT_MOST_ONCE and not replay.fresh:
                    # the retried attempt may have run before the process stopped
                    self.engine.parking.park(
                        live,
                        session,
                        RecoveryInfo(
                            reason=(
                                f"the at_most_once effect {spec.name} (attempt {attempt}, "
                                "retried by an operator) may or may not have run before the "
                                "process stopped"
                            ),
                            subject=attrs.evolve(subject, attempt=attempt),
                            allowed_outcomes=EFFECT_OUTCOMES,
                            detected_at=self.engine.now(),
                        ),
                    )
                    return PARKED
                return self.effect_start(live, spec.name, kind, key, attempt)
            if kind is EffectKind.AT_MOST_ONCE:
                self.engine.parking.park(
                    live,
                    session,
                    RecoveryInfo(
                        reason=(
                            f"the at_most_once effect {spec.name} may or may not have run "
                            "before the process stopped"
                        ),
                        subject=ref,
                        allowed_outcomes=EFFECT_OUTCOMES,
                        detected_at=self.engine.now(),
                    ),
                )
                return PARKED
            # the effect the replayed commit announced runs again with its key: the
            # commit covers it, it is not announced anew (a new key would be a new effect)
            live.announcement = None
            return self.effect_start(live, spec.name, kind, key, 1)
        if live.effect_since_commit or live.record.point not in (
            DurablePoint.BARRIER,
            DurablePoint.START,
        ):
            # the durable point does not cover this effect (a wait, a timer, an effect
            # came between): it is announced by a commit of its own before it starts
            return self.announce(live, session, spec, kind, payload)
        live.announcement = None
        return self.effect_start(live, spec.name, kind, key, 1)

    def announce(
        self, live: LiveExecution, session: Session, spec: Any, kind: EffectKind, payload: Any
    ) -> Any:
        """Commit ``@effect`` — the state, the context and the input the work reads (none
        for a plain effect function of the effect shorthand: it reads its snapshot), the
        effect with its kind, its key (derived from this commit) and attempt — and let
        the work start once it committed (the gate waits for it). A recovery from it
        decides about the effect as after a barrier (``docs/semantics.md``,
        "Effects")."""
        state = session.node.name
        revision = live.record.revision + 1
        key = live.record.effect_key(revision, spec.name)
        if spec.direct:  # a plain effect function reads only its snapshot: no input to store
            payload = None
        try:
            ensure_json(
                payload,
                what=f"the input of effect {spec.name} (the payload of the event that "
                "entered its state; an announced effect's input is stored: make it JSON "
                "data, or put what the effect needs in the context — docs/semantics.md, "
                '"Effects")',
            )
            context = self.engine.encode(live)
        except (SerializationError, ContextSerializationError) as exc:
            live.announcement = None
            return Settled(error=exc)  # not started: its failed event says why
        row = None
        if session.node.offload is not spec:
            row = next(
                (
                    r.index
                    for cand in session.node.rows.values()
                    for r in (cand if isinstance(cand, tuple) else (cand,))
                    if r.offload is spec
                ),
                None,
            )
            if row is None:  # a transition's offload, taken into this state
                row = _row_index_of(live.reg.binding, spec)
        record = points.effect_announced(
            live.record,
            self.engine.now(),
            effect=EffectRef(spec.name, kind, state, key),
            context=context,
            payload=payload,
            row=row,
        )
        announced: Future[BaseException | None] = Future()
        live.announcement = announced
        consume = tuple(live.delivered)

        def committed() -> None:
            live.effect_since_commit = True  # the effect it announced starts now
            live.effect_in_flight = record.announced
            announced.set_result(None)
            self.engine.delivery.react(live)  # signals (a cancel) held back while it was in flight

        def refused(error: BaseException) -> None:
            live.effect_in_flight = None  # never started: the gate refused it
            announced.set_result(error)

        try:
            self.engine.engine_commit(
                live,
                EngineBarrier.EFFECT,
                record,
                consume=consume,
                on_committed=committed,
                on_refused=refused,
            )
        except BaseException as exc:
            announced.set_result(exc)
            raise
        return self.effect_start(live, spec.name, kind, key, 1)

    def effect_start(
        self, live: LiveExecution, name: str, kind: EffectKind, key: str, attempt: int
    ) -> EffectStart:
        """Let an effect start: report it and hand its kind, key and attempt to the
        work (``octx.effect``)."""
        self.engine.crash_point(f"effect:{name}:before")
        live.effect_since_commit = True
        live.effect_in_flight = EffectRef(name, kind, live.state, key, attempt)
        live.effect_outcome = None
        self.engine.emit(
            DurableEventKind.EFFECT_STARTED,
            live,
            effect=name,
            kind=kind.value,
            key=key,
            attempt=attempt,
        )
        return EffectStart(kind.value, key, attempt, live.record.expires_at)


__all__ = ["ANNOUNCEMENT_WAIT_SECONDS", "Effects"]
