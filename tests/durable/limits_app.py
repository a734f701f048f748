"""The app of the limits tests (``docs/semantics.md``, "Limits"): one call to an outside
API per execution, under the limits of ``specs/limited_flow.yaml`` (2 at once and 4 a
second per tenant).

The call appends its start and end (wall time, process id, execution, idempotency key,
attempt) to a **calls ledger**, fsynced, in the folder ``PHRONOMY_APP_DIR`` names (else
beside the SQLite file), so a test can check that no more than the limit ever ran at
once, across processes. It takes ``PHRONOMY_TEST_EFFECT_SECONDS``. When the file
``rate_limit_once`` exists in that folder, the first call to remove it raises
:class:`~phronomy_fsm.errors.RateLimited` with the number of seconds the file holds —
without calling — and records that.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import attrs

sys.path.insert(0, str(Path(__file__).resolve().parent / "generated"))

from limited_flow import TABLE, Hooks

from phronomy_fsm.durable import ExecutionStatus, Machine
from phronomy_fsm.errors import RateLimited


@attrs.define
class Call:
    """The context of one call."""

    call_id: str
    tenant: str
    answer: dict[str, Any] | None = None


def app_folder(db: str) -> Path:
    """Where the ledger and the flag file live (module docstring)."""
    folder = os.environ.get("PHRONOMY_APP_DIR")
    if folder:
        return Path(folder)
    return Path(db).resolve().parent


def record(ledger: Path, entry: dict[str, Any]) -> None:
    """Append one entry to the ledger and fsync it."""
    line = json.dumps(entry, sort_keys=True) + "\n"
    fd = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line.encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def read_ledger(folder: Path) -> list[dict[str, Any]]:
    """Every entry recorded so far."""
    ledger = folder / "calls.jsonl"
    if not ledger.exists():
        return []
    return [json.loads(line) for line in ledger.read_text().splitlines() if line.strip()]


class CallHooks(Hooks):
    """The hooks: the call records itself to the ledger in ``folder``."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def call_api(self, ctx: Call, payload: Any) -> Any:
        folder, call_id = self.folder, ctx.call_id
        delay = float(os.environ.get("PHRONOMY_TEST_EFFECT_SECONDS", "0") or 0)

        def work(octx: Any) -> dict[str, Any]:
            ledger = folder / "calls.jsonl"
            base = {
                "call": call_id,
                "pid": os.getpid(),
                "key": octx.effect.key,
                "attempt": octx.effect.attempt,
            }
            flag = folder / "rate_limit_once"
            try:
                seconds = float(flag.read_text())
                flag.unlink()  # only one caller removes it
            except (FileNotFoundError, ValueError):
                pass
            else:
                record(ledger, {**base, "event": "rate_limited", "at": time.time()})
                raise RateLimited(seconds, "429 Too Many Requests")
            record(ledger, {**base, "event": "start", "at": time.time()})
            if delay:
                time.sleep(delay)
            record(ledger, {**base, "event": "end", "at": time.time()})
            return {"answered": call_id}

        return work

    def call(self, ctx: Call, payload: Any) -> None:
        return None


def create_app(db: str) -> Any:
    """The application factory (``--app tests.durable.limits_app:create_app``)."""
    from phronomy_fsm.durable.app import DurableApp

    return DurableApp(
        machines=(
            Machine(
                TABLE,
                CallHooks(app_folder(db)),
                context_type=Call,
                final_status={"failed": ExecutionStatus.FAILED},
            ),
        ),
    )
