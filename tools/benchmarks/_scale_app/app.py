"""The scripted agent run of ``tools/bench.py scale`` as a durable application.

Seven steps — LLM, tool, LLM, tool, LLM, tool, LLM — each announced by a barrier that
also makes the previous answer durable (``scripted_run.yaml``). An LLM call sleeps
``SCALE_LLM_SECONDS`` (default 0.02) and is ``idempotent``; a tool call sleeps
``SCALE_TOOL_SECONDS`` (default 0.005) and is ``at_most_once``. With ``SCALE_LEDGER``
naming a file, every call appends one fsynced line (execution, step, idempotency key,
attempt) so the kill-a-worker run can count duplicate effects and blind re-sends.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import attrs

sys.path.insert(0, str(Path(__file__).resolve().parent))

from scripted_run import TABLE, Hooks

from phronomy_fsm.durable import Machine
from phronomy_fsm.durable.app import Answer, DurableApp, EffectEntry

STEPS = ("llm1", "tool1", "llm2", "tool2", "llm3", "tool3", "llm4")


@attrs.define
class Run:
    """The context of one scripted run: its id and the answers so far."""

    run_id: str
    answers: list[Any] = attrs.Factory(list)


def _append(ledger: str, entry: dict[str, Any]) -> None:
    fd = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (json.dumps(entry, sort_keys=True) + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def read_ledger(ledger: str | None) -> list[dict[str, Any]]:
    """Every call recorded so far."""
    if not ledger or not os.path.exists(ledger):
        return []
    with open(ledger) as fh:
        return [json.loads(line) for line in fh if line.strip()]


class RunHooks(Hooks):
    """The hooks: every step sleeps its simulated latency and answers."""

    def __init__(self) -> None:
        self.llm = float(os.environ.get("SCALE_LLM_SECONDS", "0.02"))
        self.tool = float(os.environ.get("SCALE_TOOL_SECONDS", "0.005"))
        self.ledger = os.environ.get("SCALE_LEDGER") or None

    def remember(self, ctx: Run, payload: Any) -> None:
        ctx.answers.append(payload)

    def _step(self, name: str, ctx: Run) -> Any:
        delay = self.llm if name.startswith("llm") else self.tool
        ledger, run_id = self.ledger, ctx.run_id

        def work(octx: Any) -> dict[str, Any]:
            time.sleep(delay)
            result = {"step": name, "text": f"{name} answer for {run_id}"}
            if ledger:
                effect = octx.effect
                _append(
                    ledger,
                    {
                        "run": run_id,
                        "step": name,
                        "key": effect.key,
                        "attempt": effect.attempt,
                        "result": result,
                    },
                )
            return result

        return work


def _offload(step: str) -> Any:
    def call(self: RunHooks, ctx: Run, payload: Any) -> Any:
        return self._step(step, ctx)

    call.__name__ = call.__qualname__ = f"call_{step}"
    return call


for _step_name in STEPS:  # real methods, so the binding finds them
    setattr(RunHooks, f"call_{_step_name}", _offload(_step_name))


def machine() -> Machine:
    """The scripted-run machine."""
    return Machine(TABLE, RunHooks(), context_type=Run)


def create_app(db: str) -> DurableApp:
    """The application factory (``--app tools.benchmarks._scale_app.app:create_app``)."""
    ledger = os.environ.get("SCALE_LEDGER") or None

    def operator(record: Any) -> Answer | None:
        subject = record.recovery.subject if record.recovery is not None else None
        if subject is None:
            return Answer(outcome="failed", error="cannot be resumed")
        done = [e for e in read_ledger(ledger) if e["key"] == subject.key]
        if done:
            return Answer(outcome="succeeded", result=done[-1]["result"])
        return Answer(outcome="retry")

    def effects() -> list[EffectEntry]:
        return [
            EffectEntry(
                e["run"],
                e["step"],
                "idempotent" if e["step"].startswith("llm") else "at_most_once",
                e["key"],
                e["attempt"],
                e["result"],
            )
            for e in read_ledger(ledger)
        ]

    return DurableApp(machines=(machine(),), operator=operator, effects=effects)
