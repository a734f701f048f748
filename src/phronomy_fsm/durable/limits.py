"""Rate and concurrency limits on effects, held across every worker of a store.

Owns what the engine does about the spec's ``limits:`` (``docs/spec-format.md``,
"Limits"; rules in ``docs/semantics.md``, "Limits"):

- :func:`limit_claims` — on the loop thread, as an effect is let start: the limits
  that cover it, each with its key (a label of the execution, a field of the context,
  or one key for all);
- :class:`EffectLimiter` — on the offload pool's thread, once the ``@effect`` commit is
  durable and the lease holds: the **gate** asks the store for a slot of every limit
  (one transaction, :meth:`LimitStore.acquire_limits`); a full limit, a rate window
  used up or a pause answers "not yet" (:class:`~phronomy_fsm.runtime.offload.Defer`)
  and the operation goes back to the pool's queue — no thread waits — to be asked again
  later; the **work wrapper** frees the slots when the work returns, and turns
  :class:`~phronomy_fsm.errors.RateLimited` into a durable pause of the effect's limits
  and a deferral of the same work (same key, same attempt).

The records here are what :class:`LimitStore` (both stores) reads and writes. Must not
import the store or agent layers.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

import attrs

from phronomy_fsm.errors import PhronomyError, RateLimited, SchemaVersionError
from phronomy_fsm.runtime.offload import Defer, DeferWork
from phronomy_fsm.table import LimitRow

log = logging.getLogger("phronomy_fsm.durable")

#: How long an effect whose concurrency limit is full waits before it asks again, in
#: seconds (a random part up to as much again is added, so waiters do not ask in step).
LIMIT_RECHECK_SECONDS = 0.1

#: How long an effect waits before asking again after the store could not answer.
LIMIT_STORE_RETRY_SECONDS = 1.0


@attrs.frozen
class LimitClaim:
    """One limit an effect is about to start under: ``limit`` (its name in the spec),
    ``key`` (``""`` for a limit with one key for all), ``concurrency`` (at most that many
    at once per key, or ``None``) and ``rate`` starts per ``per_ms`` milliseconds per key
    (or ``None``)."""

    limit: str
    key: str
    concurrency: int | None = None
    rate: int | None = None
    per_ms: int | None = None


@attrs.frozen
class LimitDecision:
    """The store's answer to :meth:`LimitStore.acquire_limits`: ``granted`` (the slots
    are held and the starts counted), else why not (``reason``) and, when the store
    knows, when to ask again (``retry_after_seconds``: a rate window that opens, a pause
    that ends; ``None`` for a full concurrency limit)."""

    granted: bool
    retry_after_seconds: float | None = None
    reason: str = ""


@attrs.frozen
class LimitHold:
    """A slot held (``phronomy-fsm limits``): the limit, its key, the effect's
    idempotency key, its execution, the worker running it and since when."""

    limit: str
    key: str
    effect_key: str
    execution_id: str
    worker_id: str
    acquired_at: datetime


@attrs.frozen
class LimitPause:
    """A pause of a limit's key until ``paused_until`` (an outside service said "too many
    requests"); ``reason`` is what it said."""

    limit: str
    key: str
    paused_until: datetime
    reason: str


@runtime_checkable
class LimitStore(Protocol):
    """What the limits need from a store (both stores implement it; thread-safe, never
    on the loop thread; errors of the store taxonomy, ``docs/store.md``)."""

    def acquire_limits(
        self, claims: tuple[LimitClaim, ...], execution_id: str, effect_key: str, worker_id: str
    ) -> LimitDecision:
        """In one transaction: free the slots of ``execution_id`` (it starts a new
        effect) and those whose holder is gone (its worker's lease passed, the
        execution finished or another worker took it over); then, if no claim's key is
        paused, full or out of its rate window, take a slot of each claim with a
        ``concurrency`` and count a start of each with a ``rate``. Writes nothing but
        the cleanup when refused."""
        ...

    def release_limits(self, execution_id: str, effect_key: str) -> None:
        """Free every slot the effect ``effect_key`` of ``execution_id`` holds
        (idempotent)."""
        ...

    def pause_limits(
        self, claims: tuple[LimitClaim, ...], retry_after_seconds: float, reason: str
    ) -> None:
        """Pause every claim's key until ``retry_after_seconds`` from now (store clock);
        a later pause already stored is kept."""
        ...

    def limit_holds(self) -> tuple[list[LimitHold], list[LimitPause]]:
        """Every slot held and every pause not yet over (operator listing)."""
        ...


def _key_of(row: LimitRow, ctx: Any, labels: Mapping[str, Any]) -> str:
    """The key of ``row`` for one execution (``""``: one key for all, or the label or
    field is absent)."""
    if row.key_source is None or row.key_name is None:
        return ""
    if row.key_source == "label":
        value = labels.get(row.key_name)
    elif isinstance(ctx, Mapping):
        value = ctx.get(row.key_name)
    else:
        value = getattr(ctx, row.key_name, None)
    return "" if value is None else str(value)


def limit_claims(
    limits: tuple[LimitRow, ...], effect: str, ctx: Any, labels: Mapping[str, Any]
) -> tuple[LimitClaim, ...]:
    """The claims an effect named ``effect`` (its offload hook) starts under: one per
    limit of ``limits`` that lists it, keyed from ``labels`` (the execution's) or
    ``ctx`` (its context) as the limit says, sorted by limit and key (the order the
    store locks them in). Loop thread."""
    claims = [
        LimitClaim(
            row.name,
            _key_of(row, ctx, labels),
            row.concurrency,
            row.rate,
            None if row.per_seconds is None else int(row.per_seconds * 1000),
        )
        for row in limits
        if effect in row.effects
    ]
    return tuple(sorted(claims, key=lambda c: (c.limit, c.key)))


class EffectLimiter:
    """The limits of one effect about to start (module docstring): its ``claims`` (empty
    for an effect no limit covers: then only a RateLimited it raises is acted on), the
    ``store`` their state lives in, the ``execution_id``, the effect's idempotency
    ``effect_key``, this ``worker_id``, and ``note_write_error`` (the runtime's: a
    SchemaVersionError stops every write).

    Concurrency: :meth:`admit` and :meth:`wrap` run on the offload pool's threads.
    """

    __slots__ = ("claims", "effect_key", "execution_id", "note_write_error", "store", "worker_id")

    def __init__(
        self,
        claims: tuple[LimitClaim, ...],
        store: LimitStore,
        execution_id: str,
        effect_key: str,
        worker_id: str,
        note_write_error: Callable[[BaseException], None],
    ) -> None:
        self.claims = claims
        self.store = store
        self.execution_id = execution_id
        self.effect_key = effect_key
        self.worker_id = worker_id
        self.note_write_error = note_write_error

    def admit(self) -> BaseException | Defer | None:
        """Take the effect's slots: ``None`` when held (the work may start), a
        :class:`~phronomy_fsm.runtime.offload.Defer` when a limit is full, out of its
        rate window or paused (asked again then), or a SchemaVersionError (never
        start). A store that cannot answer defers too (logged). Without claims: ``None``
        at once (nothing is asked of the store)."""
        if not self.claims:
            return None
        try:
            decision = self.store.acquire_limits(
                self.claims, self.execution_id, self.effect_key, self.worker_id
            )
        except SchemaVersionError as exc:
            self.note_write_error(exc)
            return exc
        except PhronomyError as exc:
            log.warning(
                "execution %s: the limits of its effect could not be checked (%s); it asks "
                "again in %g s",
                self.execution_id,
                exc,
                LIMIT_STORE_RETRY_SECONDS,
            )
            return Defer(LIMIT_STORE_RETRY_SECONDS)
        if decision.granted:
            return None
        if decision.retry_after_seconds is not None:
            return Defer(max(0.0, decision.retry_after_seconds))
        return Defer(LIMIT_RECHECK_SECONDS * (1 + random.random()))

    def release(self) -> None:
        """Free the effect's slots (the work returned). A store error is logged: the
        slot is freed anyway when the execution starts its next effect, finishes, or
        another worker takes it over."""
        if not self.claims:
            return
        try:
            self.store.release_limits(self.execution_id, self.effect_key)
        except PhronomyError as exc:
            self.note_write_error(exc)
            log.warning(
                "execution %s: the slots of effect %s could not be freed (%s); they are "
                "freed when the execution moves on or changes hands",
                self.execution_id,
                self.effect_key,
                exc,
            )

    def pause(self, error: RateLimited) -> None:
        """Pause the effect's limits for ``error.retry_after_seconds`` (store clock).
        A store error is logged; the work is deferred all the same. Without claims
        only this effect waits."""
        if not self.claims:
            return
        try:
            self.store.pause_limits(self.claims, float(error.retry_after_seconds), str(error)[:500])
        except PhronomyError as exc:
            self.note_write_error(exc)
            log.warning(
                "execution %s: the pause an outside service asked for could not be stored "
                "(%s); only this effect waits",
                self.execution_id,
                exc,
            )

    def wrap(self, work: Callable[[Any], Any]) -> Callable[[Any], Any]:
        """``work`` that frees the slots when it returns, and turns a
        :class:`~phronomy_fsm.errors.RateLimited` it raises into a durable pause and
        a deferral of the same work (:class:`~phronomy_fsm.runtime.offload.DeferWork`)."""

        def limited(octx: Any) -> Any:
            try:
                return work(octx)
            except RateLimited as exc:
                log.info(
                    "execution %s: effect %s was rate limited: its limits pause for %g s",
                    self.execution_id,
                    self.effect_key,
                    exc.retry_after_seconds,
                )
                self.pause(exc)
                raise DeferWork(exc.retry_after_seconds) from exc
            finally:
                self.release()

        return limited


__all__ = [
    "LIMIT_RECHECK_SECONDS",
    "LIMIT_STORE_RETRY_SECONDS",
    "EffectLimiter",
    "LimitClaim",
    "LimitDecision",
    "LimitHold",
    "LimitPause",
    "LimitStore",
    "limit_claims",
]
