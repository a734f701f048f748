"""The minimal durable machine of docs/getting-started.md ("Your own machines"), step 5:
a process killed right after the bank answered is recovered by a new one, which parks the
payout in ``recovery_required``; the operator answers as the guide shows."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import attrs
import payout
import pytest

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
            "paying",
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
            result={"invoice": "INV-7", "cents": 12_000, "key": subject.key},
        )
        result = runtime.handle("INV-7").result(10)
        log = [b.barrier for b in store.barrier_log("INV-7")]
    assert (result.status, result.state) == (ExecutionStatus.COMPLETED, "done")
    assert result.context.receipt == {"invoice": "INV-7", "cents": 12_000, "key": subject.key}
    assert result.context.confirmed_by == "ana"
    assert log == ["@start", "@wait", "@effect", "@recovery", "@resolution", "@final"]


#: Reads the store from a new process: how many signals INV-8 holds.
READ_BACK = """
import sys
from phronomy_fsm.store import SqliteBarrierStore
with SqliteBarrierStore(sys.argv[1]) as store:
    print(len(store.list_signals("INV-8")))
"""


def _read_back(db: Path) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", READ_BACK, str(db)],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return proc.stdout.strip()


def test_a_signal_whose_payload_misses_its_declared_type_is_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    """``confirm`` declares ``payload: {by: str}``: the library and the CLI refuse a wrong
    payload with SignalPayloadError, and a new process finds no signal in the store."""
    from click.testing import CliRunner

    from phronomy_fsm.cli import main as cli
    from phronomy_fsm.errors import SignalPayloadError

    db = tmp_path / "payouts.db"
    with DurableRuntime(SqliteBarrierStore(db), machines=[payout.PAYOUT], own_store=True) as rt:
        rt.start("payout", payout.Payout("INV-8", 100), execution_id="INV-8")
        with pytest.raises(SignalPayloadError) as refused:
            rt.signal("INV-8", "confirm", {"by": 7, "note": "x"})
        for wrong in ("ana", {}, {"by": None}, {"by": True}):
            with pytest.raises(SignalPayloadError):
                rt.signal("INV-8", "confirm", wrong)
    assert refused.value.reason == "payload_type"
    assert refused.value.problems == (
        "field 'by' must be str, got int",
        "unexpected field 'note' (declared: by)",
    )
    assert _read_back(db) == "0"
    cli_run = CliRunner().invoke(
        cli, ["signal", "INV-8", "confirm", "--db", str(db), "--payload", '{"by": 3}']
    )
    assert cli_run.exit_code == 1, cli_run.output
    assert "does not fit its declared type (ConfirmPayload)" in cli_run.output
    assert _read_back(db) == "0"
    ok = CliRunner().invoke(
        cli, ["signal", "INV-8", "confirm", "--db", str(db), "--payload", '{"by": "ana"}']
    )
    assert ok.exit_code == 0, ok.output
    assert _read_back(db) == "1"


def test_the_generated_payload_class_holds_the_declared_fields() -> None:
    from machines.payout import ConfirmPayload

    assert attrs.fields_dict(ConfirmPayload).keys() == {"by"}
    assert ConfirmPayload(by="ana").by == "ana"
