"""The waiting execution of ``tools/bench.py waiting`` and ``restart`` as a durable app.

An execution of ``waiting_run.yaml`` waits for a person's answer (``kind: "answer"``:
a signal, for as long as it takes) or for a day-long timer (``kind: "timer"``), then
finishes; one of any other kind announces a short step (idempotent, sleeping
``WAITING_STEP_SECONDS``, default 0.001) and finishes — the restart benchmark's
executions that were running when their worker died. The context is a plain dict.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable
from concurrent.futures import Future
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))

from waiting_run import TABLE, Hooks

from phronomy_fsm.durable import Machine
from phronomy_fsm.durable.app import DurableApp
from phronomy_fsm.durable.codec import EncodedJSON
from phronomy_fsm.durable.ports import ExecutionStore
from phronomy_fsm.durable.records import (
    DurableCommit,
    DurablePoint,
    ExecutionRecord,
    ExecutionStatus,
    Fence,
)


class WaitHooks(Hooks):
    """The hooks: route by ``ctx["kind"]``; the step sleeps its simulated latency."""

    def __init__(self) -> None:
        self.step_seconds = float(os.environ.get("WAITING_STEP_SECONDS", "0.001"))

    def wants_answer(self, ctx: Any, payload: Any) -> bool:
        return bool(ctx.get("kind") == "answer")

    def wants_timer(self, ctx: Any, payload: Any) -> bool:
        return bool(ctx.get("kind") == "timer")

    def remember(self, ctx: Any, payload: Any) -> None:
        ctx["answer"] = payload

    def do_step(self, ctx: Any, payload: Any) -> Any:
        delay = self.step_seconds

        def work(octx: Any) -> dict[str, Any]:
            time.sleep(delay)
            return {"stepped": True}

        return work


def machine() -> Machine:
    """The waiting-run machine (context: a dict)."""
    return Machine(TABLE, WaitHooks(), context_type=dict)


def create_app(db: str) -> DurableApp:
    """The application factory (``--app tools.benchmarks._waiting_app.app:create_app``)."""
    return DurableApp(machines=(machine(),))


def waiting_record(
    execution_id: str, kind: str, now: datetime, deadline_at: datetime | None = None
) -> ExecutionRecord:
    """The record of an execution that waits already (revision 0, no owner): in
    ``await_answer`` (``kind="answer"``) or in ``await_timer`` until ``deadline_at``
    (``kind="timer"``; default a day from ``now``). What a worker claims and holds."""
    timer = kind == "timer"
    return ExecutionRecord(
        execution_id=execution_id,
        machine=TABLE.machine,
        spec_version=TABLE.version,
        spec_sha256=TABLE.spec_sha256,
        state="await_timer" if timer else "await_answer",
        point=DurablePoint.WAIT,
        status=ExecutionStatus.WAITING,
        revision=0,
        created_at=now,
        updated_at=now,
        context=EncodedJSON(orjson.dumps({"kind": kind})),
        deadline_at=(deadline_at or now + timedelta(days=1)) if timer else None,
    )


def running_record(execution_id: str, now: datetime) -> ExecutionRecord:
    """The record of an execution its worker left mid-way: its step announced (point
    ``barrier``: recovery resumes it with ``step_committed``, runs the step, finishes)."""
    return ExecutionRecord(
        execution_id=execution_id,
        machine=TABLE.machine,
        spec_version=TABLE.version,
        spec_sha256=TABLE.spec_sha256,
        state="announce_step",
        point=DurablePoint.BARRIER,
        status=ExecutionStatus.RUNNING,
        revision=0,
        created_at=now,
        updated_at=now,
        context=EncodedJSON(orjson.dumps({"kind": "step"})),
        resume_event="step_committed",
    )


def seed(
    store: ExecutionStore,
    records: Iterable[ExecutionRecord],
    *,
    owner: str | None = None,
    batch: int = 2000,
) -> int:
    """Write ``records`` as new executions through the store's group commit, ``batch``
    at a time (owned by worker ``owner`` under token 1, or by nobody); returns how
    many. Raises StorageError."""
    fence = None if owner is None else Fence(owner, 1)
    written = 0
    futures: list[Future[Any]] = []
    for record in records:
        futures.append(store.submit(DurableCommit("@start", record, None, fence)))
        if len(futures) >= batch:
            for future in futures:
                future.result()
            written += len(futures)
            futures = []
    for future in futures:
        future.result()
    return written + len(futures)
