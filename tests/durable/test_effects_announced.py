"""Every non-pure effect is announced by its own commit (issue 22 item 1;
docs/semantics.md "Effects"): an at_most_once effect that comes after a wait — the
validator accepts it, a barrier precedes the wait — is never run again after a crash
that followed it; recovery parks the execution with the key the attempt used."""

from __future__ import annotations

from phronomy_fsm.durable import DurableEventKind, ExecutionStatus

from .conftest import kill_at
from .late_effect_app import create_app
from .order_app import read_ledger

APP = "tests.durable.late_effect_app:create_app"


def test_a_crash_after_an_effect_that_followed_a_wait_parks_instead_of_running_it_again(
    tmp_path, store_target, open_runtime
):
    kill_at(tmp_path, "offload:ship:after", app=APP, db=store_target)
    ledger = tmp_path / "ledger.jsonl"
    assert [e["effect"] for e in read_ledger(ledger)] == ["ship"]
    app = create_app(str(tmp_path / "store.db"))
    runtime, events = open_runtime(list(app.machines))
    runtime.recover()
    events.wait_for(
        lambda e: e.kind in (DurableEventKind.RECOVERY_REQUIRED, DurableEventKind.FINISHED)
    )
    record = runtime.handle("late-1").record()
    shipped = read_ledger(ledger)
    assert [e["effect"] for e in shipped] == ["ship"], "ran again after the crash"
    assert record.status is ExecutionStatus.RECOVERY_REQUIRED
    assert record.recovery.subject.effect == "ship"
    assert record.recovery.subject.key == shipped[0]["key"]  # the key the attempt used
