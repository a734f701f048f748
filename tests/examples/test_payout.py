"""The minimal durable machine of docs/getting-started.md ("Your own machines"), step 5:
a process killed right after the bank answered is recovered by a new one, which parks the
payout in ``recovery_required``; the operator answers as the guide shows."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import payout

from phronomy_fsm.durable import DurableEventKind, DurableRuntime, ExecutionStatus
from phronomy_fsm.store import SqliteBarrierStore

from .conftest import EXAMPLES, Events, clean_env

#: A process that pays INV-7 and kills itself (SIGKILL) once the bank's answer is back,
#: before the machine has applied it.
KILLED_AFTER_THE_BANK = f"""
import sys
sys.path.insert(0, {str(EXAMPLES)!r})
import payout
from phronomy_fsm.durable import DurableRuntime
from phronomy_fsm.runtime.faults import FaultPlan
from phronomy_fsm.store import SqliteBarrierStore

faults = FaultPlan("offload:send_payment:after")
store = SqliteBarrierStore(sys.argv[1], faults=faults)
runtime = DurableRuntime(store, machines=[payout.PAYOUT], faults=faults)
runtime.start("payout", payout.Payout("INV-7", 12_000), execution_id="INV-7")
runtime.signal("INV-7", "confirm", {{"by": "ana"}})
runtime.handle("INV-7").result(30)
"""


def test_a_payout_cut_short_waits_for_the_operator_then_finishes(
    tmp_path: Path, events: Events
) -> None:
    db = tmp_path / "payouts.db"
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_AFTER_THE_BANK, str(db)],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    store = SqliteBarrierStore(db)
    with DurableRuntime(
        store, machines=[payout.PAYOUT], listeners=[events], own_store=True
    ) as runtime:
        report = runtime.recover()
        assert report.claimed == (("INV-7", "running"),)
        events.wait_for(lambda e: e.kind is DurableEventKind.RECOVERY_REQUIRED)
        record = runtime.store.load_record("INV-7")
        assert (record.status, record.state) == (
            ExecutionStatus.RECOVERY_REQUIRED,
            "announcing_payment",
        )
        subject = record.recovery.subject
        assert (subject.effect, subject.attempt, subject.key[:13]) == (
            "send_payment",
            1,
            "send_payment-",
        )
        runtime.resolve(
            "INV-7",
            expected_revision=record.revision,
            outcome="succeeded",
            result={"invoice": "INV-7", "amount_cents": 12_000, "key": subject.key},
        )
        result = runtime.handle("INV-7").result(10)
        log = [b.barrier for b in store.barrier_log("INV-7")]
    assert (result.status, result.state) == (ExecutionStatus.COMPLETED, "done")
    assert result.context.receipt == {
        "invoice": "INV-7",
        "amount_cents": 12_000,
        "key": subject.key,
    }
    assert result.context.confirmed_by == "ana"
    assert log == ["@start", "@wait", "payment", "@recovery", "@resolution", "@final"]
