"""The state of the effects' limits in both stores: slots held, starts counted, pauses.

Owns the SQL of :class:`~phronomy_fsm.durable.limits.LimitStore` for SQLite
(:class:`SqliteLimits`, one ``BEGIN IMMEDIATE`` transaction each: the file's writer
lock serialises every worker) and PostgreSQL (:class:`PostgresLimits`, one transaction
each, which first takes a transaction-scoped advisory lock per claimed limit key in a
fixed order, so two workers never both see the last free slot). The rules are in
``docs/semantics.md``, "Limits"; tables in :mod:`phronomy_fsm.store.schema`
(``0006_effect_limits``) and :mod:`phronomy_fsm.store.postgres.schema`
(``0004_effect_limits``). Times are the store's clock in epoch milliseconds.

A slot's holder is **gone** when its execution is no longer active, is owned by
another worker (taken over), or its worker's lease has passed: every acquire frees such
slots of the keys it looks at, so a worker killed while holding one leaks nothing
once its lease expires. Must not import the engine's runtime.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from phronomy_fsm.durable.codec import epoch_ms_to_datetime
from phronomy_fsm.durable.limits import LimitClaim, LimitDecision, LimitHold, LimitPause

#: The seed of ``hashtextextended(limit || NUL || key, seed)``: the advisory lock of a
#: limit's key on PostgreSQL.
LIMIT_LOCK_SEED = 0x70687233

_GONE = (
    "DELETE FROM limit_slots WHERE limit_name = {p} AND limit_key = {p} AND NOT EXISTS ("
    " SELECT 1 FROM executions e JOIN workers w ON w.worker_id = e.owner_id"
    " WHERE e.execution_id = limit_slots.execution_id"
    " AND e.owner_id = limit_slots.worker_id AND e.active {active}"
    " AND w.lease_expires_epoch_ms > {p})"
)


def _decide(
    run: Callable[[str, tuple[Any, ...]], list[tuple[Any, ...]]],
    p: str,
    active: str,
    now_ms: int,
    claims: tuple[LimitClaim, ...],
    execution_id: str,
    effect_key: str,
    worker_id: str,
) -> LimitDecision:
    """The acquire of both stores (``run(sql, params)`` executes one statement in the
    open transaction and returns its rows; ``p`` is the dialect's placeholder)."""
    run(f"DELETE FROM limit_slots WHERE execution_id = {p}", (execution_id,))
    waits: list[float] = []
    reasons: list[str] = []
    full = False
    for c in claims:
        run(_GONE.format(p=p, active=active), (c.limit, c.key, now_ms))
        rows = run(
            f"SELECT paused_until_epoch_ms, reason FROM limit_pauses"
            f" WHERE limit_name = {p} AND limit_key = {p}",
            (c.limit, c.key),
        )
        if rows and int(rows[0][0]) > now_ms:
            waits.append((int(rows[0][0]) - now_ms) / 1000)
            reasons.append(f"{c.limit}[{c.key}] paused: {rows[0][1]}")
        if c.concurrency is not None:
            held = run(
                f"SELECT count(*) FROM limit_slots WHERE limit_name = {p} AND limit_key = {p}",
                (c.limit, c.key),
            )
            if int(held[0][0]) >= c.concurrency:
                full = True
                reasons.append(f"{c.limit}[{c.key}] holds {c.concurrency} of {c.concurrency}")
        if c.rate is not None and c.per_ms is not None:
            run(
                f"DELETE FROM limit_starts WHERE limit_name = {p} AND limit_key = {p}"
                f" AND started_epoch_ms <= {p}",
                (c.limit, c.key, now_ms - c.per_ms),
            )
            rows = run(
                f"SELECT count(*), min(started_epoch_ms) FROM limit_starts"
                f" WHERE limit_name = {p} AND limit_key = {p}",
                (c.limit, c.key),
            )
            if int(rows[0][0]) >= c.rate:
                waits.append((int(rows[0][1]) + c.per_ms - now_ms) / 1000)
                reasons.append(f"{c.limit}[{c.key}] started {c.rate} in its window")
    if reasons:
        # a full concurrency limit: ask again soon (None); else when the last wait ends
        retry = None if full else max(waits)
        return LimitDecision(False, retry, "; ".join(reasons))
    for c in claims:
        if c.concurrency is not None:
            run(
                "INSERT INTO limit_slots(limit_name, limit_key, effect_key, execution_id,"
                f" worker_id, acquired_epoch_ms) VALUES ({p}, {p}, {p}, {p}, {p}, {p})",
                (c.limit, c.key, effect_key, execution_id, worker_id, now_ms),
            )
        if c.rate is not None:
            run(
                "INSERT INTO limit_starts(limit_name, limit_key, started_epoch_ms)"
                f" VALUES ({p}, {p}, {p})",
                (c.limit, c.key, now_ms),
            )
    return LimitDecision(True)


def _pause(
    run: Callable[[str, tuple[Any, ...]], list[tuple[Any, ...]]],
    p: str,
    now_ms: int,
    claims: tuple[LimitClaim, ...],
    retry_after_seconds: float,
    reason: str,
) -> None:
    until = now_ms + int(retry_after_seconds * 1000)
    for c in claims:
        run(
            "INSERT INTO limit_pauses(limit_name, limit_key, paused_until_epoch_ms, reason)"
            f" VALUES ({p}, {p}, {p}, {p}) ON CONFLICT (limit_name, limit_key) DO UPDATE SET"
            " paused_until_epoch_ms = excluded.paused_until_epoch_ms, reason = excluded.reason"
            " WHERE excluded.paused_until_epoch_ms > limit_pauses.paused_until_epoch_ms",
            (c.limit, c.key, until, reason),
        )


def _listing(
    slots: list[tuple[Any, ...]], pauses: list[tuple[Any, ...]]
) -> tuple[list[LimitHold], list[LimitPause]]:
    return (
        [
            LimitHold(str(a), str(b), str(c), str(d), str(e), epoch_ms_to_datetime(int(f)))
            for a, b, c, d, e, f in slots
        ],
        [LimitPause(str(a), str(b), epoch_ms_to_datetime(int(c)), str(d)) for a, b, c, d in pauses],
    )


_SLOTS = (
    "SELECT limit_name, limit_key, effect_key, execution_id, worker_id, acquired_epoch_ms"
    " FROM limit_slots ORDER BY limit_name, limit_key, acquired_epoch_ms"
)
_PAUSES = (
    "SELECT limit_name, limit_key, paused_until_epoch_ms, reason FROM limit_pauses"
    " WHERE paused_until_epoch_ms > {p} ORDER BY limit_name, limit_key"
)


class SqliteLimits:
    """The limits' SQL on SQLite (module docstring); mixed into
    :class:`~phronomy_fsm.store.sqlite.SqliteBarrierStore`."""

    def maintenance_transaction(self, operation: str) -> Any:  # provided by the store
        raise NotImplementedError

    def _commit_time(self) -> tuple[int, datetime]:  # provided by the store
        raise NotImplementedError

    def acquire_limits(
        self, claims: tuple[LimitClaim, ...], execution_id: str, effect_key: str, worker_id: str
    ) -> LimitDecision:
        """See :meth:`phronomy_fsm.durable.limits.LimitStore.acquire_limits`. Raises
        StorageError, SchemaVersionError."""
        with self.maintenance_transaction("acquire_limits") as cur:
            # read once the write lock is held: a wait for it must not date the start back
            now_ms, _ = self._commit_time()

            def run(sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
                return list(cur.execute(sql, params).fetchall())

            return _decide(run, "?", "= 1", now_ms, claims, execution_id, effect_key, worker_id)

    def release_limits(self, execution_id: str, effect_key: str) -> None:
        """See :meth:`phronomy_fsm.durable.limits.LimitStore.release_limits`."""
        with self.maintenance_transaction("release_limits") as cur:
            cur.execute(
                "DELETE FROM limit_slots WHERE execution_id = ? AND effect_key = ?",
                (execution_id, effect_key),
            )

    def pause_limits(
        self, claims: tuple[LimitClaim, ...], retry_after_seconds: float, reason: str
    ) -> None:
        """See :meth:`phronomy_fsm.durable.limits.LimitStore.pause_limits`."""
        with self.maintenance_transaction("pause_limits") as cur:
            now_ms, _ = self._commit_time()

            def run(sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
                return list(cur.execute(sql, params).fetchall())

            _pause(run, "?", now_ms, claims, retry_after_seconds, reason)

    def limit_holds(self) -> tuple[list[LimitHold], list[LimitPause]]:
        """See :meth:`phronomy_fsm.durable.limits.LimitStore.limit_holds`."""
        now_ms, _ = self._commit_time()
        with self.snapshot("limit_holds") as conn:  # type: ignore[attr-defined]
            slots = list(conn.execute(_SLOTS).fetchall())
            pauses = list(conn.execute(_PAUSES.format(p="?"), (now_ms,)).fetchall())
        return _listing(slots, pauses)


class PostgresLimits:
    """The limits' SQL on PostgreSQL (module docstring); mixed into
    :class:`~phronomy_fsm.store.postgres.PostgresStore`."""

    def _reading(self, operation: str, fn: Callable[[Any], Any]) -> Any:  # from the store
        raise NotImplementedError

    def _writing(  # from the store
        self, operation: str, fn: Callable[[Any], Any], *, execution_id: str | None = None
    ) -> Any:
        raise NotImplementedError

    @staticmethod
    def _runner(cur: Any) -> Callable[[str, tuple[Any, ...]], list[tuple[Any, ...]]]:
        def run(sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
            cur.execute(sql, params)
            return list(cur.fetchall()) if cur.description is not None else []

        return run

    @staticmethod
    def _now_ms(cur: Any) -> int:
        cur.execute("SELECT phronomy_now_ms()")
        return int(cur.fetchone()[0])

    def acquire_limits(
        self, claims: tuple[LimitClaim, ...], execution_id: str, effect_key: str, worker_id: str
    ) -> LimitDecision:
        """See :meth:`phronomy_fsm.durable.limits.LimitStore.acquire_limits`; the keys'
        advisory locks are taken first, in the claims' order (sorted). Raises
        StorageError, SchemaVersionError."""

        def fn(cur: Any) -> LimitDecision:
            for c in claims:
                cur.execute(
                    "SELECT pg_advisory_xact_lock(hashtextextended(%s, %s))",
                    (f"{c.limit}\x1f{c.key}", LIMIT_LOCK_SEED),
                )
            now_ms = self._now_ms(cur)
            return _decide(
                self._runner(cur), "%s", "", now_ms, claims, execution_id, effect_key, worker_id
            )

        return self._writing("acquire_limits", fn)  # type: ignore[no-any-return]

    def release_limits(self, execution_id: str, effect_key: str) -> None:
        """See :meth:`phronomy_fsm.durable.limits.LimitStore.release_limits`."""

        def fn(cur: Any) -> None:
            cur.execute(
                "DELETE FROM limit_slots WHERE execution_id = %s AND effect_key = %s",
                (execution_id, effect_key),
            )

        self._writing("release_limits", fn)

    def pause_limits(
        self, claims: tuple[LimitClaim, ...], retry_after_seconds: float, reason: str
    ) -> None:
        """See :meth:`phronomy_fsm.durable.limits.LimitStore.pause_limits`."""

        def fn(cur: Any) -> None:
            _pause(self._runner(cur), "%s", self._now_ms(cur), claims, retry_after_seconds, reason)

        self._writing("pause_limits", fn)

    def limit_holds(self) -> tuple[list[LimitHold], list[LimitPause]]:
        """See :meth:`phronomy_fsm.durable.limits.LimitStore.limit_holds`."""

        def fn(cur: Any) -> tuple[list[LimitHold], list[LimitPause]]:
            now_ms = self._now_ms(cur)
            cur.execute(_SLOTS)
            slots = list(cur.fetchall())
            cur.execute(_PAUSES.format(p="%s"), (now_ms,))
            return _listing(slots, list(cur.fetchall()))

        return self._reading("limit_holds", fn)  # type: ignore[no-any-return]


__all__ = ["LIMIT_LOCK_SEED", "PostgresLimits", "SqliteLimits"]
