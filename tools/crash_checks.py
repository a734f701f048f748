"""Invariant checks of one crash-matrix run: the store and the app's logs (issue 6 item 5).

Reads a barrier store after the last process of a run, the JSON-lines logs that
``crash_app.py`` keeps beside it (effects, LLM calls, acknowledgements), the snapshots
the harness took after every process, and the last process's summary, and counts
violations of six invariants:

- ``lost`` — an execution seen (in a snapshot, the effects log or an acknowledgement)
  that is no longer in the store; a result acknowledged to a caller whose durable record
  is not terminal with that status; a failure reported to the caller of an execution
  that is still active or ended successfully;
- ``double_terminal`` — the barrier log shows two terminal commits, or a barrier after
  a terminal one, or a terminal execution changed status or revision between snapshots;
- ``duplicate_effects`` — the same logical tool call (execution, tool, arguments) ran
  under two idempotency keys, or one key ran twice (not counting a deduplicating
  tool's replays);
- ``blind_resends`` — an idempotency key or LLM-call id sent twice with no operator
  resolution of that subject (a ``recovery_resolved`` journal record) in between;
- ``stuck`` — an execution left active that neither waits for an approval nor was
  announced to the operator (``recovery_resolution_required``) by the last process;
- ``journal_inconsistent`` — journal sequences not 1..n, journal head != count, a
  journal record of an unknown execution, barrier revisions not 0..n, a barrier-log row
  the execution's chain does not reach, or the last barrier's status, phase or digest
  not matching the execution record.

One more check is reported beside them (:data:`EXTRA_CHECKS`):
``agent_root_inconsistent`` — the agent root's lifecycle is not ``idle`` when none of
its executions is active (``active``/``suspended`` while one is).

Pure reading: nothing is written. Used by ``crash_matrix.py`` and ``tests/crash``.
"""

from __future__ import annotations

import itertools
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import attrs
from crash_app import log_paths, read_jsonl

from phronomy_fsm.store import SqliteBarrierStore
from phronomy_fsm.store.records import (
    TERMINAL_STATUSES,
    BarrierRecord,
    digest,
    epoch_ms_to_datetime,
    to_json,
)

INVARIANTS = (
    "lost",
    "double_terminal",
    "duplicate_effects",
    "blind_resends",
    "stuck",
    "journal_inconsistent",
)
#: Checked and reported too, but not one of the issue's counters: the agent root's
#: lifecycle agrees with its executions (idle when none is active).
EXTRA_CHECKS = ("agent_root_inconsistent",)
TERMINAL = frozenset(s.value for s in TERMINAL_STATUSES)
SUCCESS = frozenset({"completed", "rejected", "handed_off"})
#: Task errors that refuse an operation before anything is admitted or changed.
REFUSALS = frozenset(
    {
        "AgentBusyError",
        "AgentClosedError",
        "AgentExistsError",
        "ConflictError",
        "InvalidInputError",
        "ApprovalError",
    }
)
#: Acknowledgement sources whose task observes the execution's own outcome.
OUTCOME_SOURCES = frozenset({"invoke", "recovered", "handoff_target"})


@attrs.define
class Findings:
    """Violations found, by invariant: ``counts`` (invariant → number) and
    ``details`` (one dict per violation: ``invariant``, ``message`` and facts)."""

    counts: dict[str, int] = attrs.field(
        factory=lambda: dict.fromkeys(INVARIANTS + EXTRA_CHECKS, 0)
    )
    details: list[dict[str, Any]] = attrs.field(factory=list)

    def add(self, invariant: str, message: str, **facts: Any) -> None:
        """Record one violation of ``invariant`` (one of :data:`INVARIANTS` or
        :data:`EXTRA_CHECKS`). Raises ValueError for another name."""
        if invariant not in self.counts:
            raise ValueError(f"unknown invariant {invariant!r}")
        self.counts[invariant] += 1
        self.details.append({"invariant": invariant, "message": message, **facts})

    @property
    def ok(self) -> bool:
        """No violation."""
        return not any(self.counts.values())


def open_store(db: str | Path) -> SqliteBarrierStore | None:
    """The store read-only, or None when the file does not exist (nothing admitted)."""
    return SqliteBarrierStore(db, read_only=True) if Path(db).exists() else None


def snapshot(db: str | Path) -> dict[str, dict[str, Any]]:
    """``{execution_id: {agent_id, status, phase, revision}}`` as stored now."""
    store = open_store(db)
    if store is None:
        return {}
    try:
        return {
            e.execution_id: {
                "agent_id": e.agent_id,
                "status": e.status.value,
                "phase": e.phase,
                "revision": e.revision,
            }
            for e in store.list_executions()
        }
    finally:
        store.close()


def _ns(when: Any) -> int:
    return int(when.timestamp() * 1_000_000) * 1000


def _all_barrier_rows(
    store: SqliteBarrierStore, executions: dict[str, Any]
) -> dict[str, list[BarrierRecord]]:
    """Every row of the barrier log, by execution and revision — read as an auditor
    would, by scanning the table rather than walking each execution's chain, so a row
    the store did not link (or a broken link) is still seen."""
    histories: dict[str, list[BarrierRecord]] = {eid: [] for eid in executions}
    with store._reading("crash checks") as conn:
        rows = conn.execute(
            "SELECT execution_id, revision, barrier, committed_epoch_ms, digest, status, state"
            " FROM barriers ORDER BY execution_id, revision"
        ).fetchall()
    for eid, rev, barrier, ms, dig, status, phase in rows:
        record = BarrierRecord(eid, rev, barrier, epoch_ms_to_datetime(ms), dig, status, phase)
        histories.setdefault(eid, []).append(record)
    return histories


def check_run(
    db: str | Path,
    *,
    snapshots: list[dict[str, dict[str, Any]]],
    last_summary: dict[str, Any] | None,
) -> Findings:
    """Check every invariant of one run (module docstring).

    Args:
        db: the run's database file (the logs are read beside it).
        snapshots: :func:`snapshot` after each process, in order.
        last_summary: the JSON summary printed by the last process that was not
            killed (None when every process was killed or none printed).

    Returns:
        The :class:`Findings` (empty when every invariant holds).
    """
    findings = Findings()
    paths = log_paths(db)
    effects = [e for e in read_jsonl(paths["effects"]) if e.get("kind") == "tool"]
    llm_calls = [c for c in read_jsonl(paths["llm"]) if c.get("kind") == "llm"]
    acks = read_jsonl(paths["acks"])
    store = open_store(db)
    if store is None:
        for e in effects:
            findings.add(
                "lost",
                "an effect ran for an execution but no store exists",
                execution_id=e.get("execution_id"),
            )
        return findings
    try:
        executions = {e.execution_id: e for e in store.list_executions()}
        journal = {a.agent_id: store.read_journal(a.agent_id) for a in store.list_agents()}
        agents = {a.agent_id: a for a in store.list_agents()}
        histories = _all_barrier_rows(store, executions)
        chains = {eid: store.barrier_history(eid) for eid in executions}
    finally:
        store.close()
    for eid, chain in chains.items():
        if chain != histories.get(eid, []):
            findings.add(
                "journal_inconsistent",
                "the execution's barrier chain does not link every row of its barrier log",
                execution_id=eid,
                chain=[b.revision for b in chain],
                rows=[b.revision for b in histories.get(eid, [])],
            )
    _check_lost(findings, executions, snapshots, effects, acks)
    _check_double_terminal(findings, executions, histories, snapshots)
    _check_duplicate_effects(findings, effects)
    resolutions = _resolutions(journal)
    _check_blind_resends(findings, effects, "tool_invocation_id", "key", resolutions)
    _check_blind_resends(findings, llm_calls, "llm_call_id", "llm_call_id", resolutions)
    _check_stuck(findings, executions, last_summary)
    _check_journal(findings, executions, histories, journal, agents)
    _check_roots(findings, executions, agents)
    return findings


def _check_roots(findings: Findings, executions: dict[str, Any], agents: dict[str, Any]) -> None:
    expected = {"preparing": "active", "active": "active", "suspended": "suspended"}
    for agent_id, root in agents.items():
        active = [e for e in executions.values() if e.agent_id == agent_id and e.is_active]
        want = expected[active[0].status.value] if active else "idle"
        if root.lifecycle.value != want:
            findings.add(
                "agent_root_inconsistent",
                "the agent root's lifecycle disagrees with its executions",
                agent_id=agent_id,
                lifecycle=root.lifecycle.value,
                expected=want,
                active=[e.execution_id for e in active],
            )


def _check_lost(
    findings: Findings,
    executions: dict[str, Any],
    snapshots: list[dict[str, Any]],
    effects: list[dict[str, Any]],
    acks: list[dict[str, Any]],
) -> None:
    seen: dict[str, str] = {}
    for i, snap in enumerate(snapshots):
        for eid in snap:
            seen.setdefault(eid, f"snapshot after process {i}")
    for e in effects:
        seen.setdefault(e["execution_id"], f"effect {e['tool']} {e['key']}")
    for eid, where in seen.items():
        if eid not in executions:
            findings.add(
                "lost",
                "an execution seen earlier is no longer in the store",
                execution_id=eid,
                seen_in=where,
            )
    for ack in acks:
        eid, status, error = str(ack.get("execution_id")), ack.get("status"), ack.get("error")
        stored = executions.get(eid)
        if error is None:
            if stored is None or stored.status.value != status:
                findings.add(
                    "lost",
                    "a result acknowledged to the caller is not the durable terminal record",
                    execution_id=eid,
                    acknowledged=status,
                    stored=None if stored is None else stored.status.value,
                    source=ack.get("source"),
                )
        elif (
            ack.get("source") in OUTCOME_SOURCES
            and error not in REFUSALS
            and stored is not None
            and (stored.status.value not in TERMINAL or stored.status.value in SUCCESS)
        ):
            findings.add(
                "lost",
                "a failure reported to the caller is not the durable terminal record",
                execution_id=eid,
                error=error,
                stored=stored.status.value,
                source=ack.get("source"),
            )


def _check_double_terminal(
    findings: Findings,
    executions: dict[str, Any],
    histories: dict[str, list[Any]],
    snapshots: list[dict[str, Any]],
) -> None:
    for eid, history in histories.items():
        terminal_at = [b.revision for b in history if b.status in TERMINAL]
        if len(terminal_at) > 1:
            findings.add(
                "double_terminal",
                "the barrier log shows more than one terminal commit",
                execution_id=eid,
                revisions=terminal_at,
            )
        elif terminal_at and history and history[-1].revision != terminal_at[0]:
            findings.add(
                "double_terminal",
                "a barrier was committed after the terminal one",
                execution_id=eid,
                terminal_revision=terminal_at[0],
            )
    first_terminal: dict[str, tuple[str, int]] = {}
    final = [
        {eid: {"status": e.status.value, "revision": e.revision} for eid, e in executions.items()}
    ]
    for snap in list(snapshots) + final:
        for eid, row in snap.items():
            if eid in first_terminal:
                if (row["status"], row["revision"]) != first_terminal[eid]:
                    findings.add(
                        "double_terminal",
                        "a terminal execution changed afterwards",
                        execution_id=eid,
                        was=list(first_terminal[eid]),
                        now=[row["status"], row["revision"]],
                    )
                    first_terminal[eid] = (row["status"], row["revision"])
            elif row["status"] in TERMINAL:
                first_terminal[eid] = (row["status"], row["revision"])


def _check_duplicate_effects(findings: Findings, effects: list[dict[str, Any]]) -> None:
    keys_by_call: dict[tuple[str, str, str], set[str]] = defaultdict(set)
    runs_by_key: dict[str, int] = defaultdict(int)
    for e in effects:
        if e.get("replayed"):
            continue
        call = (e["execution_id"], e["tool"], json.dumps(e.get("arguments"), sort_keys=True))
        keys_by_call[call].add(e["key"])
        runs_by_key[e["key"]] += 1
    for (eid, tool, arguments), keys in keys_by_call.items():
        if len(keys) > 1:
            findings.add(
                "duplicate_effects",
                "one logical tool call ran under several idempotency keys",
                execution_id=eid,
                tool=tool,
                arguments=arguments,
                keys=sorted(keys),
            )
    for key, count in runs_by_key.items():
        if count > 1:
            findings.add(
                "duplicate_effects",
                "one idempotency key ran its effect more than once",
                key=key,
                times=count,
            )


def _resolutions(journal: dict[str, list[Any]]) -> dict[str, list[int]]:
    """Subject id (tool invocation or LLM call) → times (ns) of its resolution records."""
    out: dict[str, list[int]] = defaultdict(list)
    for records in journal.values():
        for r in records:
            if r.kind != "recovery_resolved" or not isinstance(r.content, dict):
                continue
            subject = r.content.get("subject") or {}
            for field in ("tool_invocation_id", "llm_call_id"):
                if subject.get(field):
                    out[subject[field]].append(_ns(r.occurred_at))
    return out


def _check_blind_resends(
    findings: Findings,
    entries: list[dict[str, Any]],
    subject_field: str,
    key_field: str,
    resolutions: dict[str, list[int]],
) -> None:
    by_key: dict[str, list[int]] = defaultdict(list)
    for e in entries:
        by_key[e[key_field]].append(int(e["t"]))
    for key, times in by_key.items():
        times.sort()
        for before, after in itertools.pairwise(times):
            if not any(before < t < after for t in resolutions.get(key, ())):
                findings.add(
                    "blind_resends",
                    f"{subject_field} re-sent without an operator resolution in between",
                    key=key,
                    first_ns=before,
                    again_ns=after,
                )


def _check_stuck(
    findings: Findings, executions: dict[str, Any], last_summary: dict[str, Any] | None
) -> None:
    waiting = {
        r["execution_id"]: r.get("waiting_for") for r in (last_summary or {}).get("remaining", [])
    }
    for eid, e in executions.items():
        if not e.is_active:
            continue
        if e.status.value == "suspended" and e.phase == "approval":
            continue
        if waiting.get(eid) == "operator":
            continue
        findings.add(
            "stuck",
            "an execution is left active, neither suspended for approval nor announced to the operator",
            execution_id=eid,
            status=e.status.value,
            phase=e.phase,
            revision=e.revision,
        )


def _check_journal(
    findings: Findings,
    executions: dict[str, Any],
    histories: dict[str, list[Any]],
    journal: dict[str, list[Any]],
    agents: dict[str, Any],
) -> None:
    for agent_id, records in journal.items():
        sequences = [r.sequence for r in records]
        if sequences != list(range(1, len(records) + 1)):
            findings.add(
                "journal_inconsistent",
                "journal sequences are not gapless from 1",
                agent_id=agent_id,
                sequences=sequences[:50],
            )
        if agents[agent_id].journal_head != len(records):
            findings.add(
                "journal_inconsistent",
                "journal head differs from the record count",
                agent_id=agent_id,
                head=agents[agent_id].journal_head,
                count=len(records),
            )
        for r in records:
            if r.execution_id not in executions:
                findings.add(
                    "journal_inconsistent",
                    "a journal record names an unknown execution",
                    agent_id=agent_id,
                    execution_id=r.execution_id,
                    sequence=r.sequence,
                )
    for eid, execution in executions.items():
        history = histories.get(eid, [])
        revisions = [b.revision for b in history]
        if revisions != list(range(execution.revision + 1)):
            findings.add(
                "journal_inconsistent",
                "barrier revisions are not 0..revision",
                execution_id=eid,
                revisions=revisions,
                revision=execution.revision,
            )
        if not history:
            continue
        last = history[-1]
        if (last.status, last.phase) != (execution.status.value, execution.phase):
            findings.add(
                "journal_inconsistent",
                "the last barrier's status/phase differ from the execution",
                execution_id=eid,
                barrier=[last.status, last.phase],
                execution=[execution.status.value, execution.phase],
            )
        elif last.digest != digest(to_json(execution)):
            findings.add(
                "journal_inconsistent",
                "the last barrier's digest differs from the execution record",
                execution_id=eid,
            )
