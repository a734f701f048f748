"""A generic durable application for any spec, as the interleaving checker drives it.

``create_app(db_path)`` compiles the spec named by ``PHRONOMY_CHECK_SPEC`` (a path)
and runs it with hooks made up from its table, so that generated specs
(``tests/spec_strategies.py``, :func:`durable_specs`) can be checked with
``phronomy-fsm check SPEC --app tests.checking.generic_app:create_app``:

- every action keeps each marked signal payload it receives in the context's
  ``applied`` list (what :attr:`DurableApp.applied_signals` reports);
- every guard reads the context only (``len(applied)`` is even), so a replay decides
  as the live run did;
- every effect writes to a ledger beside the store (``<stem>-effects/ledger.jsonl``):
  an ``at_most_once`` one each call, an ``idempotent`` one once per key, a ``pure`` one
  nothing;
- scenario ``main`` starts execution ``g-1`` and answers a wait with the first signal
  its state handles that leaves it (payload ``{"by": "checker"}``); every signal of the
  machine may be sent at any step (``Scenario.signals``); the operator answers from the
  ledger (``succeeded`` when the key is in it, else ``retry``).

``PHRONOMY_CHECK_DEFECT`` seeds a defect, to show the checker finds it:

- ``fresh_key``: idempotent effects deduplicate under a key of their own, not the
  engine's (the checker reports ``idempotent_keys``);
- ``signal_outside_context``: actions apply a signal to a record outside the context,
  which ``applied_signals`` reads (a replay after a crash applies it again:
  ``signals_applied``);
- ``unannounced_effect``: the engine as it was before effects were announced by a
  commit of their own (an effect after a wait is started at once, keyed by the last
  commit): an ``at_most_once`` effect after a wait runs twice after a crash
  (``duplicate_effects``);
- ``no_lease_check``: a runtime that starts effects without checking that its lease
  still holds: a worker paused past its lease runs an ``at_most_once`` effect that the
  worker which took the execution over ran too (``duplicate_effects``).
"""

from __future__ import annotations

import fcntl
import json
import os
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from phronomy_fsm.codegen import compile_spec

from phronomy_fsm.durable import ExecutionRecord, Machine
from phronomy_fsm.durable.app import SIGNAL_MARK, Answer, DurableApp, EffectEntry, Scenario
from phronomy_fsm.spec.loader import load_spec_text

SPEC_VARIABLE = "PHRONOMY_CHECK_SPEC"
DEFECT_VARIABLE = "PHRONOMY_CHECK_DEFECT"
EXECUTION = "g-1"


class Ledger:
    """An append-only JSON-lines file, each line fsynced (an outside system's record)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def append(self, entry: dict[str, Any]) -> None:
        """Append one entry."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, (json.dumps(entry, sort_keys=True) + "\n").encode())
            os.fsync(fd)
        finally:
            os.close(fd)

    def entries(self) -> list[dict[str, Any]]:
        """Every entry (a line cut short by a kill is skipped)."""
        if not self.path.exists():
            return []
        out = []
        for line in self.path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
        return out

    @contextmanager
    def locked(self) -> Iterator[None]:
        """An exclusive lock across processes."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(f"{self.path}.lock", os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)


def load_table(path: Path) -> Any:
    """Compile the spec at ``path`` and return its table (the spec must be valid)."""
    loaded = load_spec_text(path.read_bytes(), source_name=str(path))
    if loaded.spec is None:
        raise ValueError(f"{path}: " + "; ".join(i.render() for i in loaded.issues))
    namespace: dict[str, Any] = {}
    exec(compile(compile_spec(loaded.spec), str(path), "exec"), namespace)  # noqa: S102
    return namespace["TABLE"]


def _engine_events(table: Any) -> set[str]:
    from phronomy_fsm.checking.interleavings import engine_events

    return engine_events(table)


def make_hooks(table: Any, ledger: Ledger, signals: Ledger, defect: str | None) -> Any:
    """A hooks object with every guard, action and offload hook ``table`` names."""
    kinds = {}
    for row in [*table.states, *table.transitions]:
        if row.offload is not None:
            kinds[row.offload.hook] = row.offload.effect or "at_most_once"

    def action(self: Any, ctx: dict[str, Any], payload: Any) -> None:
        if isinstance(payload, dict) and SIGNAL_MARK in payload:
            if defect == "signal_outside_context":
                signals.append({"execution_id": ctx["id"], "payload": payload})
            else:
                ctx["applied"].append(payload)

    def guard(self: Any, ctx: dict[str, Any], payload: Any) -> bool:
        return len(ctx["applied"]) % 2 == 0

    def offload(hook: str) -> Callable[..., Any]:
        kind = kinds.get(hook, "at_most_once")

        def prepare(self: Any, ctx: dict[str, Any], payload: Any) -> Any:
            execution_id = ctx["id"]

            def work(octx: Any) -> dict[str, Any]:
                if kind == "pure":
                    return {"hook": hook}
                key = octx.effect.key
                if kind == "idempotent" and defect == "fresh_key":
                    key = f"{hook}-{uuid.uuid4().hex}"
                entry = {
                    "execution_id": execution_id,
                    "effect": hook,
                    "kind": kind,
                    "key": key,
                    "attempt": octx.effect.attempt,
                    "result": {"hook": hook, "key": key},
                }
                if kind == "idempotent":
                    with ledger.locked():
                        done = [e for e in ledger.entries() if e["key"] == key]
                        if not done:
                            ledger.append(entry)
                else:
                    ledger.append(entry)
                return entry["result"]  # type: ignore[no-any-return]

            return work

        return prepare

    members: dict[str, Any] = {name: guard for name in table.guards}
    members.update({name: action for name in table.actions})
    members.update({hook: offload(hook) for hook in table.offload_hooks})
    return type("GenericHooks", (), members)()


def seed_engine_defect(defect: str | None) -> None:
    """Break the engine as ``unannounced_effect`` and ``no_lease_check`` say (module
    docstring)."""
    if defect == "no_lease_check":
        from phronomy_fsm.durable.runtime import DurableRuntime

        DurableRuntime.lease_error = lambda self, execution_id: None  # type: ignore[method-assign]
        return
    if defect != "unannounced_effect":
        return
    from phronomy_fsm.durable.effects import Effects
    from phronomy_fsm.durable.keys import idempotency_key

    def announce(self: Any, live: Any, session: Any, spec: Any, kind: Any, payload: Any) -> Any:
        live.announcement = None
        key = idempotency_key(live.execution_id, live.record.point_revision, spec.name)
        return self.effect_start(live, spec.name, kind, key, 1)

    Effects.announce = announce  # type: ignore[method-assign]


def create_app(db_path: str) -> DurableApp:
    """The application (module docstring)."""
    spec = Path(os.environ[SPEC_VARIABLE])
    defect = os.environ.get(DEFECT_VARIABLE) or None
    seed_engine_defect(defect)
    table = load_table(spec)
    folder = Path(db_path).resolve().parent / f"{Path(db_path).stem}-effects"
    ledger = Ledger(folder / "ledger.jsonl")
    signals = Ledger(folder / "signals.jsonl")
    machine = Machine(table, make_hooks(table, ledger, signals, defect), context_type=dict)
    internal = _engine_events(table)
    outside = sorted(e.name for e in table.events if e.name not in internal)

    def start(runtime: Any) -> list[str]:
        runtime.start(table.machine, {"id": EXECUTION, "applied": []}, execution_id=EXECUTION)
        return [EXECUTION]

    def on_waiting(record: ExecutionRecord) -> Answer | None:
        rows = [
            r for r in table.transitions if record.state in r.sources and r.event not in internal
        ]
        rows.sort(key=lambda r: (r.target is None or r.target == record.state, r.index))
        if not rows:
            return None
        return Answer(event=rows[0].event, payload={"by": "checker"})

    def operator(record: ExecutionRecord) -> Answer | None:
        info = record.recovery
        if info is None or info.subject is None:
            return Answer(outcome="failed", error="nothing to resume")
        found = [e for e in ledger.entries() if e["key"] == info.subject.key]
        if found:
            return Answer(outcome="succeeded", result=found[-1]["result"])
        return Answer(outcome="retry")

    def effects() -> list[EffectEntry]:
        return [
            EffectEntry(e["execution_id"], e["effect"], e["kind"], e["key"], e["attempt"])
            for e in ledger.entries()
        ]

    def applied_signals(record: ExecutionRecord) -> list[Any]:
        if defect == "signal_outside_context":
            return [
                e["payload"] for e in signals.entries() if e["execution_id"] == record.execution_id
            ]
        context = record.context if isinstance(record.context, dict) else {}
        return list(context.get("applied", []))

    return DurableApp(
        machines=(machine,),
        scenarios={
            "main": Scenario(
                start,
                on_waiting,
                signals=[Answer(event=e, payload={"by": "checker"}) for e in outside],
            )
        },
        operator=operator,
        effects=effects,
        applied_signals=applied_signals,
    )
