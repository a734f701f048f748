"""The invariants the checker holds every run to, read from the store and the run's log.

Owns what "correct" means for a checked run (``docs/operations.md``, "The interleaving
checker", lists them for users). Each is computed from what lasts after the processes
ended: the store (records, barrier logs, inboxes), the run's log
(:mod:`phronomy_fsm.checking.runfiles`) and the application's own record of effects and
of applied signals (:class:`~phronomy_fsm.durable.app.DurableApp` ``effects`` and
``applied_signals``):

- ``lost``: a start the runtime acknowledged is missing from the store, or a finish it
  acknowledged is not what the store holds;
- ``double_terminal``: more than one finishing commit, or two outcomes acknowledged;
- ``duplicate_effects``: an ``at_most_once`` effect recorded twice with one key and
  attempt, or an attempt recorded although it had left no trace when the (truthful)
  operator answered ``retry`` or ``not_performed`` about it — it ran after the
  question, e.g. in a worker whose lease had passed;
- ``blind_resends``: an ``at_most_once`` effect run again (a later attempt) without an
  operator's ``retry``;
- ``idempotent_keys``: an ``idempotent`` effect run under a key of the engine's form
  (``<effect>-`` and 32 hex digits) that no durable announcement of its execution
  gives (one key per announcement: the key is derived from the revision of the commit
  that announced the effect, ``docs/semantics.md`` "Idempotency keys"); keys of an
  application's own form are not judged;
- ``question_keys``: an operator asked about an effect under a key no durable
  announcement gives, or answering ``retry`` or ``not_performed`` about an attempt that
  ran under another key (of that announcement or a later one);
- ``signals_applied``: a signal the store marks consumed whose change the application
  does not report exactly once, or a change reported for a signal not consumed (asked
  only about events every row takes with an action: a row without one changes the
  state alone, and no application code sees its signal);
- ``lost_signals``: a signal the store acknowledged that is not in the inbox, or one
  that is neither consumed, nor closed with a reason (``rejected: ...``,
  ``dropped: ...``), nor pending on an execution that waits;
- ``stuck``: an execution that is not finished, not waiting in a state a signal or its
  timer leaves, and not waiting for an operator with a question it can answer;
- ``app_errors``: a process that ended for another reason than its step (the runner
  counts them from exit statuses).

Must not: start processes or write to the store (it opens it read-only).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from phronomy_fsm.checking.interleavings import effect_kinds, engine_events
from phronomy_fsm.checking.runfiles import read_log
from phronomy_fsm.durable.app import SIGNAL_MARK, DurableApp, load_app
from phronomy_fsm.durable.keys import idempotency_key

INVARIANTS = (
    "lost",
    "double_terminal",
    "duplicate_effects",
    "blind_resends",
    "idempotent_keys",
    "question_keys",
    "signals_applied",
    "lost_signals",
    "stuck",
    "app_errors",
)
#: Commits that announce no effect: a key derived from one of them is no announcement's.
NOT_ANNOUNCING = frozenset({"@wait", "@final", "@cancel", "@recovery"})
FINISHING = frozenset({"@final", "@cancel", "@resolution"})


@attrs.frozen
class Violation:
    """One broken invariant: which, the execution it concerns (``None`` for the run
    as a whole) and what was seen."""

    invariant: str
    execution_id: str | None
    detail: str

    def to_dict(self) -> dict[str, Any]:
        """The JSON form."""
        return {"invariant": self.invariant, "execution": self.execution_id, "detail": self.detail}


@attrs.frozen
class StoreFacts:
    """What the checker reads from a store after a run."""

    records: Mapping[str, Any]
    barrier_logs: Mapping[str, Sequence[Any]]
    signals: Mapping[str, Sequence[Any]]


def read_store(db: str) -> StoreFacts | None:
    """Read every execution, its barrier log and its inbox (``None``: the run never
    created the store)."""
    from phronomy_fsm.errors import SchemaVersionError
    from phronomy_fsm.store.open import is_postgres_dsn, open_store

    if not is_postgres_dsn(db) and not Path(db).exists():
        return None
    try:
        store = open_store(db, read_only=True)
    except SchemaVersionError:  # a database the run never initialised
        return None
    with store:
        records = {r.execution_id: r for r in store.list_records()}
        logs = {eid: store.barrier_log(eid) for eid in records}
        signals = {eid: store.list_signals(eid) for eid in records}
    return StoreFacts(records, logs, signals)


def load_run_app(app_ref: str, db: str) -> DurableApp:
    """The application of a run, built over its store (its files beside it)."""
    return load_app(app_ref, db)


def check_run(app_ref: str, db: str, folder: Path) -> list[Violation]:
    """Every invariant of the module docstring but ``app_errors``, for the run in
    ``folder`` on the store ``db``."""
    log = read_log(folder)
    facts = read_store(db)
    if facts is None:
        started = {e["execution_id"] for e in log if e["what"] == "started"}
        return [
            Violation("lost", eid, "started, but the store was never created") for eid in started
        ]
    app = load_run_app(app_ref, db)
    tables = {m.table.machine: m.table for m in app.machines}
    out: list[Violation] = []
    out += _lifecycle(log, facts)
    keys = _announced_keys(facts, tables)
    out += _effects(app, facts, keys)
    out += _questions(log, app, facts, keys)
    out += _signals(log, app, facts, tables)
    out += _stuck(facts, tables)
    return out


def _lifecycle(log: list[dict[str, Any]], facts: StoreFacts) -> list[Violation]:
    out = []
    finished: dict[str, set[tuple[str, str]]] = {}
    for entry in log:
        if entry["what"] == "started" and entry["execution_id"] not in facts.records:
            out.append(Violation("lost", entry["execution_id"], "its start was acknowledged"))
        elif entry["what"] == "finished":
            finished.setdefault(entry["execution_id"], set()).add((entry["status"], entry["state"]))
    for eid, outcomes in finished.items():
        record = facts.records.get(eid)
        if record is None or not record.is_finished:
            out.append(Violation("lost", eid, f"acknowledged finished {sorted(outcomes)}"))
        elif {(record.status.value, record.state)} != outcomes:
            out.append(
                Violation(
                    "double_terminal",
                    eid,
                    f"acknowledged {sorted(outcomes)}, stored "
                    f"{record.status.value} in {record.state}",
                )
            )
    for eid, entries in facts.barrier_logs.items():
        ends = [
            b
            for b in entries
            if b.barrier in FINISHING and b.status in ("completed", "failed", "cancelled")
        ]
        if len(ends) > 1:
            out.append(
                Violation(
                    "double_terminal",
                    eid,
                    "finishing commits " + ", ".join(f"{b.barrier}@{b.revision}" for b in ends),
                )
            )
    return out


def _announced_keys(facts: StoreFacts, tables: Mapping[str, Any]) -> set[str]:
    """Every key a durable announcement gives: one per (execution, revision of a
    commit that may announce an effect, effect of its machine)."""
    keys = set()
    for eid, record in facts.records.items():
        table = tables.get(record.machine)
        if table is None:
            continue
        hooks = [h for h, kind in effect_kinds(table).items() if kind != "pure"]
        for entry in facts.barrier_logs.get(eid, ()):
            if entry.barrier in NOT_ANNOUNCING:
                continue
            keys |= {idempotency_key(eid, entry.revision, hook) for hook in hooks}
    return keys


def is_engine_key(key: str, effect: str) -> bool:
    """True when ``key`` has the form of the engine's idempotency keys for ``effect``
    (``<effect>-`` and 32 hex digits): the application says it ran the effect under
    the key the engine gave it. An application may key an effect by ids of its own
    (an agent's tool call id); those the checker cannot derive, and does not judge."""
    head, sep, digits = key.rpartition("-")
    return bool(sep) and head == effect and len(digits) == 32 and _is_hex(digits)


def _is_hex(text: str) -> bool:
    return all(c in "0123456789abcdef" for c in text)


def _retries(facts: StoreFacts) -> Counter[str]:
    retries: Counter[str] = Counter()
    for eid, signals in facts.signals.items():
        for s in signals:
            if (
                s.kind.value == "resolution"
                and isinstance(s.payload, dict)
                and s.payload.get("outcome") == "retry"
                and s.outcome == "consumed"
            ):
                retries[eid] += 1
    return retries


def _effects(app: DurableApp, facts: StoreFacts, keys: set[str]) -> list[Violation]:
    out = []
    effects = list(app.effects()) if app.effects is not None else []
    once = [e for e in effects if e.kind == "at_most_once"]
    for (key, attempt), count in Counter((e.key, e.attempt) for e in once).items():
        if count > 1:
            eid = next(e.execution_id for e in once if e.key == key)
            out += [
                Violation("duplicate_effects", eid, f"{key} attempt {attempt} ran {count} times")
            ] * (count - 1)
    retries = _retries(facts)
    for e in once:
        if e.attempt > 1 and retries[e.execution_id] < e.attempt - 1:
            out.append(
                Violation(
                    "blind_resends",
                    e.execution_id,
                    f"{e.effect} attempt {e.attempt} ({e.key}) after "
                    f"{retries[e.execution_id]} retry answer(s)",
                )
            )
    for e in effects:
        if e.kind == "idempotent" and is_engine_key(e.key, e.effect) and e.key not in keys:
            out.append(
                Violation(
                    "idempotent_keys",
                    e.execution_id,
                    f"{e.effect} ran under key {e.key}, which no durable announcement gives",
                )
            )
    return out


def _questions(
    log: list[dict[str, Any]], app: DurableApp, facts: StoreFacts, keys: set[str]
) -> list[Violation]:
    """The operator's questions against the keys and the effects that ran. The
    application's operator answers truthfully (``DurableApp.operator``), so a ``retry``
    or ``not_performed`` means that, when asked, the attempt had left no trace."""
    out = []
    effects = list(app.effects()) if app.effects is not None else []

    def announced_at(eid: str, effect: str, key: str) -> int | None:
        return next(
            (
                b.revision
                for b in facts.barrier_logs.get(eid, ())
                if idempotency_key(eid, b.revision, effect) == key
            ),
            None,
        )

    for q in log:
        if q["what"] != "question" or q.get("key") is None:
            continue
        eid, key, effect = q["execution_id"], q["key"], q["effect"]
        if key not in keys:
            out.append(
                Violation(
                    "question_keys",
                    eid,
                    f"the operator was asked about {effect} under key {key}, which no "
                    "durable announcement gives",
                )
            )
            continue
        if q.get("outcome") not in ("retry", "not_performed"):
            continue
        asked = announced_at(eid, effect, key)
        for e in effects:
            if e.execution_id != eid or e.effect != effect or e.attempt != q.get("attempt"):
                continue
            if e.key == key:
                out.append(
                    Violation(
                        "duplicate_effects",
                        eid,
                        f"{effect} attempt {e.attempt} ({key}) ran, though it had left no trace "
                        f"when the operator answered {q['outcome']} (process {q['process']}): "
                        "it ran after the question",
                    )
                )
            elif (announced_at(eid, effect, e.key) or -1) >= (asked if asked is not None else 0):
                out.append(
                    Violation(
                        "question_keys",
                        eid,
                        f"the operator was asked about {effect} attempt {e.attempt} under "
                        f"key {key} and answered {q['outcome']}, but that attempt ran under "
                        f"{e.key}",
                    )
                )
    return out


def _mark_of(payload: Any) -> str | None:
    if isinstance(payload, dict) and isinstance(payload.get(SIGNAL_MARK), str):
        return payload[SIGNAL_MARK]  # type: ignore[no-any-return]
    return None


def acting_events(table: Any) -> set[str]:
    """The events every row of ``table`` takes with an action: a signal of one of
    them always reaches the application's code, which can report it. A row without
    actions changes nothing but the state, so its signals are not asked about."""
    rows: dict[str, list[Any]] = {}
    for row in table.transitions:
        rows.setdefault(row.event, []).append(row)
    return {event for event, taken in rows.items() if all(r.actions for r in taken)}


def _signals(
    log: list[dict[str, Any]], app: DurableApp, facts: StoreFacts, tables: Mapping[str, Any]
) -> list[Violation]:
    out = []
    for entry in log:
        if entry["what"] != "sent":
            continue
        eid = entry["execution_id"]
        if not any(s.signal_id == entry["signal_id"] for s in facts.signals.get(eid, ())):
            out.append(
                Violation(
                    "lost_signals",
                    eid,
                    f"signal {entry['signal_id']} ({entry.get('event') or entry.get('kind')}) "
                    "was acknowledged but is not in the inbox",
                )
            )
    for eid, signals in facts.signals.items():
        record = facts.records[eid]
        for s in signals:
            what = f"signal {s.signal_id} ({s.event or s.kind.value})"
            if s.outcome == "consumed":
                continue
            if s.outcome is not None:
                head, _, why = s.outcome.partition(":")
                if head in ("rejected", "dropped") and why.strip():
                    continue
                out.append(Violation("lost_signals", eid, f"{what} closed as {s.outcome!r}"))
            elif record.status.value not in ("waiting", "recovery_required"):
                out.append(
                    Violation(
                        "lost_signals",
                        eid,
                        f"{what} is still pending on an execution {record.status.value} in "
                        f"{record.state}",
                    )
                )
    if app.applied_signals is None:
        return out
    for eid, record in facts.records.items():
        table = tables.get(record.machine)
        tracked = acting_events(table) if table is not None else set()
        consumed = Counter(
            m
            for s in facts.signals.get(eid, ())
            if s.kind.value == "event" and s.outcome == "consumed" and s.event in tracked
            for m in [_mark_of(s.payload)]
            if m is not None
        )
        applied = Counter(m for p in app.applied_signals(record) for m in [_mark_of(p)] if m)
        for mark in sorted(set(consumed) | set(applied)):
            if consumed[mark] != applied[mark]:
                out.append(
                    Violation(
                        "signals_applied",
                        eid,
                        f"signal {mark}: consumed {consumed[mark]} time(s), its change applied "
                        f"{applied[mark]} time(s)",
                    )
                )
    return out


def _stuck(facts: StoreFacts, tables: Mapping[str, Any]) -> list[Violation]:
    out = []
    for eid, record in facts.records.items():
        if record.is_finished:
            continue
        status = record.status.value
        table = tables.get(record.machine)
        if status == "waiting" and table is not None:
            internal = engine_events(table)
            state = next((s for s in table.states if s.name == record.state), None)
            leaves = any(
                record.state in row.sources and row.event not in internal
                for row in table.transitions
            )
            if state is not None and (leaves or state.timeout is not None):
                continue
            out.append(Violation("stuck", eid, f"waits in {record.state}, which nothing leaves"))
        elif status == "recovery_required":
            info = record.recovery
            hooks = set(table.offload_hooks) if table is not None else set()
            if (
                info is not None
                and info.allowed_outcomes
                and (info.subject is None or info.subject.effect in hooks)
            ):
                continue
            out.append(Violation("stuck", eid, "waits for an operator with no question to answer"))
        else:
            out.append(Violation("stuck", eid, f"{status} in {record.state}, and nothing runs it"))
    return out


__all__ = ["INVARIANTS", "StoreFacts", "Violation", "check_run", "load_run_app", "read_store"]
