"""The engine-port conformance suite: every method of
:class:`~phronomy_fsm.durable.ports.ExecutionStore` and every refusal, run unchanged on
SQLite and PostgreSQL (``store`` is parametrised over both). After each refusal the
store is read back: nothing was written."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from phronomy_fsm.durable.ports import ExecutionStore
from phronomy_fsm.durable.records import (
    DurableReceipt,
    ExecutionStatus,
    Fence,
    JournalEntry,
    MachineRecord,
    SignalKind,
    to_json,
)
from phronomy_fsm.errors import (
    AgentBusyError,
    ConflictError,
    ExecutionFinishedError,
    LeaseLostError,
    NotFoundError,
    OutcomeUnknownError,
    SerializationError,
    SignalRefusedError,
    StorageError,
)
from phronomy_fsm.table import COMMITTED, CONFLICT, NOT_COMMITTED

from .conftest import T0, commit, create, record, signal, step, worker


def snapshot(store: Any, *ids: str) -> dict[str, Any]:
    """Everything the store holds about ``ids`` (and every execution row)."""
    out: dict[str, Any] = {"rows": store.execution_rows(), "workers": store.list_workers()}
    for eid in ids:
        try:
            out[eid] = to_json(store.load_record(eid))
            out[f"{eid}:owner"] = store.execution_owner(eid)[:2]
        except NotFoundError:
            out[eid] = None
        out[f"{eid}:log"] = store.barrier_log(eid)
        out[f"{eid}:signals"] = store.list_signals(eid)
        out[f"{eid}:journal"] = store.journal_entries(eid)
    return out


def refused(store: Any, c: Any, error: type[BaseException], match: str, *ids: str) -> None:
    """``c`` is refused with ``error`` and nothing about ``ids`` changed."""
    before = snapshot(store, *ids)
    with pytest.raises(error, match=match):
        commit(store, c)
    assert snapshot(store, *ids) == before


def test_the_store_implements_the_port(store):
    assert isinstance(store, ExecutionStore)


def test_create_load_list_rows_and_log(store):
    receipt = commit(store, create("e1", exclusive_key="k", labels={"who": "me"}))
    assert isinstance(receipt, DurableReceipt) and receipt.revision == 0
    assert store.load_record("e1") == record("e1", exclusive_key="k", labels={"who": "me"})
    one = commit(store, step(store.load_record("e1"), "charge"))
    assert one.revision == 1 and one.committed_at >= receipt.committed_at
    assert [(b.revision, b.barrier, b.state) for b in store.barrier_log("e1")] == [
        (0, "@start", "s0"),
        (1, "charge", "s1"),
    ]
    commit(store, create("e2", machine="other"))
    assert [r.execution_id for r in store.list_records()] == ["e1", "e2"]
    assert [r.execution_id for r in store.list_records(machine="other")] == ["e2"]
    assert [r.execution_id for r in store.list_records(exclusive_key="k")] == ["e1"]
    assert [r.execution_id for r in store.list_records(active=True, limit=1)] == ["e1"]
    assert store.list_records(status="completed") == []
    rows = {r["execution_id"]: r for r in store.execution_rows()}
    assert (rows["e1"]["revision"], rows["e1"]["state"], rows["e1"]["active"]) == (1, "s1", 1)
    assert [r["execution_id"] for r in store.execution_rows(machine="other")] == ["e2"]
    assert store.barrier_log("nobody") == []
    with pytest.raises(NotFoundError):
        store.load_record("nobody")


def test_every_part_of_a_commit_is_written_together(store):
    commit(store, create("parent"))
    sent = store.send_signal(signal("parent", "s-1"))
    child = record("child", parent_execution_id="parent", machine="kid")
    c = step(
        store.load_record("parent"),
        "launch",
        commit_options={
            "consume_signals": (sent.seq,),
            "children": (child,),
            "send_signals": (signal("other", "note-1"),),
            "journal": (JournalEntry("launched", {"n": 1}), JournalEntry("again", [1, 2])),
        },
    )
    receipt = commit(store, c)
    assert len(receipt.signal_seqs) == 1 and receipt.signal_seqs[0] > sent.seq
    assert store.load_record("child") == child
    assert [
        (s.signal_id, s.consumed_revision, s.outcome) for s in store.list_signals("parent")
    ] == [("s-1", 1, "consumed")]
    assert store.pending_signals("parent") == []
    assert [s.signal_id for s in store.pending_signals("other")] == ["note-1"]
    assert [(j.kind, j.data, j.revision, j.position) for j in store.journal_entries("parent")] == [
        ("launched", {"n": 1}, 1, 0),
        ("again", [1, 2], 1, 1),
    ]
    assert [r.execution_id for r in store.list_records(parent_execution_id="parent")] == ["child"]


def test_an_existing_id_is_a_conflict(store):
    commit(store, create("e1"))
    refused(store, create("e1", context={"other": True}), ConflictError, "already exists", "e1")


def test_an_exclusive_key_admits_one_active_execution(store):
    commit(store, create("a", exclusive_key="k"))
    refused(store, create("b", exclusive_key="k"), AgentBusyError, "'k'", "a", "b")
    done = step(store.load_record("a"), "@final", status=ExecutionStatus.COMPLETED)
    commit(store, done)
    commit(store, create("b", exclusive_key="k"))  # the key is free again
    assert store.load_record("b").exclusive_key == "k"


def test_a_stale_revision_is_a_conflict(store):
    commit(store, create("e1"))
    first = store.load_record("e1")
    commit(store, step(first))
    refused(store, step(first, context={"late": 1}), ConflictError, "revision 1", "e1")


def test_an_unknown_execution_is_not_found(store):
    refused(store, step(record("ghost")), NotFoundError, "does not exist", "ghost")


def test_another_machine_is_a_conflict(store):
    commit(store, create("e1"))
    c = step(store.load_record("e1"), machine="intruder")
    refused(store, c, ConflictError, "runs machine m", "e1")


def test_a_finished_execution_takes_no_more_commits(store):
    commit(store, create("e1"))
    commit(store, step(store.load_record("e1"), "@final", status=ExecutionStatus.FAILED))
    c = step(store.load_record("e1"), "@final", status=ExecutionStatus.COMPLETED)
    refused(store, c, ExecutionFinishedError, "finished", "e1")


def test_commits_are_fenced_by_owner_token_and_lease(store):
    store.register_worker(worker("w1"), 60)
    store.register_worker(worker("w2"), 60)
    commit(store, create("e1", fence=Fence("w1", 1)))
    assert store.execution_owner("e1")[:2] == ("w1", 1)
    current = store.load_record("e1")
    refused(store, step(current, fence=Fence("w2", 1)), LeaseLostError, "owned by worker w1", "e1")
    refused(store, step(current, fence=Fence("w1", 2)), LeaseLostError, "fence", "e1")
    commit(store, step(current, fence=Fence("w1", 1)))
    store.retire_worker("w1")  # its lease has passed (a pause, a partition)
    refused(
        store, step(store.load_record("e1"), fence=Fence("w1", 1)), LeaseLostError, "expired", "e1"
    )
    refused(store, create("e2", fence=Fence("w1", 1)), LeaseLostError, "expired", "e2")
    assert store.claim_execution("e1", "w2") == 2
    refused(store, step(store.load_record("e1"), fence=Fence("w1", 1)), LeaseLostError, "w2", "e1")
    commit(store, step(store.load_record("e1"), fence=Fence("w2", 2)))


def test_signals_that_are_not_pending_refuse_the_whole_commit(store):
    store.register_worker(worker("w1"), 60)
    commit(store, create("e1", fence=Fence("w1", 1)))
    sent = store.send_signal(signal("e1", "s-1"))
    assert store.close_signals("e1", [sent.seq], "rejected: test", fence=Fence("w1", 1)) == 1
    c = step(store.load_record("e1"), commit_options={"consume_signals": (sent.seq,)})
    refused(store, c, ConflictError, "not all pending", "e1")
    c = step(store.load_record("e1"), commit_options={"consume_signals": (sent.seq + 999,)})
    refused(store, c, ConflictError, "not all pending", "e1")


def test_a_waiting_cancel_refuses_a_commit_that_ends_the_execution_by_itself(store):
    commit(store, create("e1"))
    cancel = store.send_signal(signal("e1", "c-1", kind=SignalKind.CANCEL, event=None))
    ending = step(store.load_record("e1"), "@final", status=ExecutionStatus.COMPLETED)
    before = snapshot(store, "e1")
    with pytest.raises(ConflictError, match="cancel request") as refusal:
        commit(store, ending)
    assert refusal.value.reason == "cancel_pending"
    assert refusal.value.signal_seqs == (cancel.seq,)
    assert snapshot(store, "e1") == before  # nothing of it was written
    # nor may the engine end it failed through @cancel (its deadline passed): the
    # request recorded first decides
    deadline = step(store.load_record("e1"), "@cancel", status=ExecutionStatus.FAILED)
    with pytest.raises(ConflictError, match="cancel request") as refusal:
        commit(store, deadline)
    assert refusal.value.reason == "cancel_pending"
    assert snapshot(store, "e1") == before
    # a commit that keeps the execution active is not refused, nor is the cancel's own
    commit(store, step(store.load_record("e1"), "b"))
    commit(
        store,
        step(
            store.load_record("e1"),
            "@cancel",
            status=ExecutionStatus.CANCELLED,
            commit_options={"consume_signals": (cancel.seq,)},
        ),
    )
    assert store.load_record("e1").status is ExecutionStatus.CANCELLED


def test_an_end_that_consumes_the_cancel_or_follows_a_closed_one_is_not_refused(store):
    store.register_worker(worker("w1"), 60)
    commit(store, create("e1", fence=Fence("w1", 1)))
    cancel = store.send_signal(signal("e1", "c-1", kind=SignalKind.CANCEL, event=None))
    assert store.close_signals("e1", [cancel.seq], "dropped: test", fence=Fence("w1", 1)) == 1
    commit(store, step(store.load_record("e1"), "@final", status=ExecutionStatus.FAILED))
    commit(store, create("e2"))
    cancel = store.send_signal(signal("e2", "c-2", kind=SignalKind.CANCEL, event=None))
    ending = step(
        store.load_record("e2"),
        "@resolution",
        status=ExecutionStatus.FAILED,
        commit_options={"consume_signals": (cancel.seq,)},
    )
    commit(store, ending)
    assert store.load_record("e2").status is ExecutionStatus.FAILED


def test_the_commit_that_finishes_an_execution_closes_its_pending_signals(store):
    """Whatever still waits in the inbox of an execution that finishes — a second
    cancel request, a child's completion, an approval nobody asked for any more — is
    closed by that commit, in its transaction: nothing reads a finished inbox again."""
    for eid, barrier, status in (
        ("e1", "@final", ExecutionStatus.COMPLETED),
        ("e2", "@cancel", ExecutionStatus.CANCELLED),
    ):
        commit(store, create(eid))
        kind = SignalKind.CANCEL if barrier == "@cancel" else SignalKind.EVENT
        taken = store.send_signal(signal(eid, f"{eid}-1", kind=kind))
        store.send_signal(signal(eid, f"{eid}-2"))
        if barrier == "@cancel":  # a second cancel request, read while the first applies
            store.send_signal(signal(eid, f"{eid}-3", kind=SignalKind.CANCEL))
        ending = step(
            store.load_record(eid),
            barrier,
            state="over",
            status=status,
            commit_options={"consume_signals": (taken.seq,)},
        )
        commit(store, ending)
        assert store.pending_signals(eid) == []
        outcomes = {s.signal_id: s.outcome for s in store.list_signals(eid)}
        assert outcomes.pop(f"{eid}-1") == "consumed"
        assert set(outcomes.values()) == {"dropped: finished in over"}
    # an active execution's commit closes nothing it did not consume
    commit(store, create("e3"))
    kept = store.send_signal(signal("e3", "e3-1"))
    commit(store, step(store.load_record("e3"), "b"))
    assert [s.seq for s in store.pending_signals("e3")] == [kept.seq]


def test_a_child_that_exists_refuses_the_parents_commit(store):
    commit(store, create("parent"))
    commit(store, create("child"))
    child = record("child", parent_execution_id="parent")
    c = step(store.load_record("parent"), commit_options={"children": (child,)})
    refused(store, c, ConflictError, "child", "parent", "child")


def test_a_signal_sent_twice_by_commits_refuses_the_second(store):
    commit(store, create("a"))
    commit(store, create("b"))
    commit(
        store, step(store.load_record("a"), commit_options={"send_signals": (signal("b", "x"),)})
    )
    c = step(store.load_record("a"), commit_options={"send_signals": (signal("b", "x"),)})
    refused(store, c, ConflictError, "sent already", "a", "b")
    c = step(
        store.load_record("a"), commit_options={"send_signals": (signal("a", "x", event="y"),)}
    )
    before = snapshot(store, "a", "b")
    with pytest.raises(ConflictError, match="execution b") as refusal:
        commit(store, c)
    assert refusal.value.reason == "signal_id_reused"
    assert snapshot(store, "a", "b") == before


def test_a_record_that_is_not_json_is_a_serialization_error(store):
    refused(store, create("e1", context={"bad": {1, 2}}), SerializationError, "bad", "e1")
    commit(store, create("e1"))
    c = step(store.load_record("e1"), context={"bad": object()})
    refused(store, c, SerializationError, "bad", "e1")


def test_a_batch_with_a_refused_commit_commits_the_others(store):
    for i in range(8):
        commit(store, create(f"e{i}"))
    commits = [step(store.load_record(f"e{i}")) for i in range(8)]
    stale = step(record("e3", revision=5))  # expects revision 5
    futures = [store.submit(c) for c in [*commits[:3], stale, *commits[4:]]]
    outcomes = []
    for future in futures:
        try:
            outcomes.append(future.result(60).revision)
        except ConflictError:
            outcomes.append("conflict")
    assert outcomes == [1, 1, 1, "conflict", 1, 1, 1, 1]
    assert [store.load_record(f"e{i}").revision for i in range(8)] == [1, 1, 1, 0, 1, 1, 1, 1]


def test_a_failure_before_commit_is_a_storage_error_and_writes_nothing(store):
    def hook(point: str, commits: tuple[Any, ...]) -> None:
        if point == "write":
            raise OSError("disk unplugged")

    store.install_fault_hook(hook)
    refused(store, create("e1"), StorageError, "disk unplugged", "e1")
    store.install_fault_hook(None)
    commit(store, create("e1"))


def test_a_lost_response_is_reconciled_by_reading_back(store):
    commit(store, create("e1"))
    c = step(store.load_record("e1"))
    assert store.reconcile(c) == NOT_COMMITTED  # still at the expected revision
    assert store.reconcile(create("e2")) == NOT_COMMITTED  # absent

    def hook(point: str, commits: tuple[Any, ...]) -> None:
        if point == "committed":
            raise ConnectionResetError("response lost")

    store.install_fault_hook(hook)
    with pytest.raises(OutcomeUnknownError) as caught:
        commit(store, c)
    store.install_fault_hook(None)
    assert caught.value.intended == c
    assert store.reconcile(c) == COMMITTED
    assert store.reconcile(step(record("e1"), context={"other": 1})) == CONFLICT
    assert store.reconcile(step(record("nobody"))) == CONFLICT


def test_send_signal_checks_the_execution_and_writes_nothing_when_refused(store):
    commit(store, create("e1"))
    cursor = store.signal_cursor()
    first = store.send_signal(signal("e1", "s-1", expected_revision=0))
    assert first.seq > 0 and first.consumed_revision is None
    before = snapshot(store, "e1", "ghost")
    with pytest.raises(NotFoundError):
        store.send_signal(signal("ghost", "s-2"))
    with pytest.raises(SignalRefusedError, match="revision"):
        store.send_signal(signal("e1", "s-3", expected_revision=7))
    with pytest.raises(SerializationError):
        store.send_signal(signal("e1", "s-4", payload={1, 2}))
    assert snapshot(store, "e1", "ghost") == before
    assert [s.signal_id for s in store.signals_since(cursor).signals] == ["s-1"]  # only it
    commit(store, step(store.load_record("e1"), "@final", status=ExecutionStatus.COMPLETED))
    before = snapshot(store, "e1")
    with pytest.raises(ExecutionFinishedError):
        store.send_signal(signal("e1", "s-5"))
    assert snapshot(store, "e1") == before


def test_a_resent_signal_id_is_a_no_op_only_for_the_same_signal(store):
    """Issue 22 item 9: a signal id used before returned the other signal's record and
    wrote nothing, whatever was sent with it — a second approval, an event for another
    execution, was silently lost."""
    commit(store, create("e1"))
    commit(store, create("e2"))
    first = store.send_signal(signal("e1", "s-1", expected_revision=0))
    # the same signal again (a retry: other time, sender, expected revision) is a no-op
    again = signal("e1", "s-1", created_at=T0.replace(year=2031), sender="retry")
    assert store.send_signal(again) == first
    commit(store, step(store.load_record("e1")))  # the execution moved on: still a no-op
    assert store.send_signal(signal("e1", "s-1", expected_revision=0)) == first
    before = snapshot(store, "e1", "e2")
    for other, differs in (
        (signal("e1", "s-1", payload={"x": 2}), "payload"),
        (signal("e1", "s-1", payload={"x": True}), "payload"),  # JSON true is not 1
        (signal("e1", "s-1", event="stop"), "event"),
        (signal("e1", "s-1", kind=SignalKind.CANCEL), "kind"),
        (signal("e2", "s-1"), "execution"),
        (signal("ghost", "s-1"), "execution"),
    ):
        with pytest.raises(SignalRefusedError, match="s-1") as refusal:
            store.send_signal(other)
        assert refusal.value.reason == "signal_id_reused"
        assert refusal.value.signal_id == "s-1"
        assert refusal.value.used_by_execution_id == "e1"
        assert differs in refusal.value.differs
        assert "execution e1" in str(refusal.value) and differs in str(refusal.value)
        assert "nothing was sent" in str(refusal.value)
    assert snapshot(store, "e1", "e2") == before


def test_the_inbox_reads(store):
    store.register_worker(worker("w1"), 60)
    owner = Fence("w1", 1)
    commit(store, create("a", fence=owner))
    commit(store, create("b", fence=owner))
    start = store.signal_cursor()
    sent = [store.send_signal(signal(eid, f"s-{i}")) for i, eid in enumerate("ab")]
    middle = store.signal_cursor()
    sent += [store.send_signal(signal(eid, f"s-{i}")) for i, eid in enumerate("ab", start=2)]
    assert [s.seq for s in sent] == sorted(s.seq for s in sent)
    assert [s.signal_id for s in store.pending_signals("a")] == ["s-0", "s-2"]
    polled = store.signals_since(start)
    assert [s.signal_id for s in polled.signals] == ["s-0", "s-1", "s-2", "s-3"]
    every = store.list_signals("a") + store.list_signals("b")
    assert polled.signals == tuple(sorted(every, key=lambda s: s.seq))  # whole records, in order
    assert [s.signal_id for s in store.signals_since(middle).signals] == ["s-2", "s-3"]
    assert store.signals_since(polled.cursor).signals == ()  # each one is seen once
    assert store.signals_since(store.signal_cursor()).signals == ()
    with pytest.raises(ValueError, match="not a signal cursor"):
        store.signals_since("seq 7")
    assert store.close_signals("a", [sent[0].seq, sent[2].seq], "dropped: test", fence=owner) == 2
    assert store.close_signals("a", [sent[0].seq], "dropped: again", fence=owner) == 0
    assert store.close_signals("a", [], "nothing", fence=owner) == 0
    assert store.pending_signals("a") == []
    assert [(s.signal_id, s.outcome) for s in store.list_signals("a")] == [
        ("s-0", "dropped: test"),
        ("s-2", "dropped: test"),
    ]
    assert [s.signal_id for s in store.signals_since(start).signals] == ["s-1", "s-3"]


def test_closing_signals_is_fenced_by_owner_token_and_lease(store):
    """Issue 22 item 6: a worker back from a network cut past its lease, whose stale
    copy of the execution calls a current approval stale, must not close it — the
    execution's new owner would find no approval and wait for ever."""
    store.register_worker(worker("A"), 60)
    store.register_worker(worker("B"), 60)
    commit(store, create("e1", fence=Fence("A", 1)))
    store.retire_worker("A")  # A is cut off past its lease: B takes the execution over
    assert store.claim_execution("e1", "B") == 2
    commit(store, step(store.load_record("e1"), "@wait", Fence("B", 2)))
    approval = store.send_signal(signal("e1", "approve-1", event="approve", expected_revision=1))
    stale = Fence("A", 1)

    def closing_refused(fence: Fence, match: str) -> None:
        before = snapshot(store, "e1")
        with pytest.raises(LeaseLostError, match=match) as refusal:
            store.close_signals("e1", [approval.seq], "rejected: stale", fence=fence)
        assert refusal.value.execution_id == "e1"
        assert snapshot(store, "e1") == before
        assert [s.seq for s in store.pending_signals("e1")] == [approval.seq]

    closing_refused(stale, "owned by worker B")  # A's lease has passed, and B owns it
    assert store.renew_lease("A", 60) is True  # A is back: a heartbeat, its lease valid
    closing_refused(stale, "owned by worker B")  # still B's, under token 2
    closing_refused(Fence("B", 1), "fence 2")  # the owner, under an older token
    store.retire_worker("B")
    closing_refused(Fence("B", 2), "expired")  # the owner and token, its lease passed
    with pytest.raises(NotFoundError):
        store.close_signals("ghost", [approval.seq], "rejected: stale", fence=stale)
    assert store.renew_lease("B", 60) is True
    assert store.close_signals("e1", [], "nothing", fence=stale) == 0  # nothing to close
    assert store.close_signals("e1", [approval.seq], "dropped: test", fence=Fence("B", 2)) == 1
    assert [(s.seq, s.consumed_revision, s.outcome) for s in store.list_signals("e1")] == [
        (approval.seq, 1, "dropped: test")
    ]


def test_workers_and_their_leases(store):
    store.register_worker(worker("w1"), 60)
    store.register_worker(worker("w1"), 60)  # replaced, not duplicated
    ((listed, heartbeat, expires),) = store.list_workers()
    assert listed == worker("w1") and expires - heartbeat == 60_000
    assert store.renew_lease("w1", 30) is True
    assert store.renew_lease("nobody", 30) is False
    store.retire_worker("w1")
    assert store.list_workers()[0][2] == 0
    commit(store, create("e1"))
    assert store.execution_owner("e1") == (None, 0, None)
    with pytest.raises(NotFoundError):
        store.execution_owner("ghost")
    assert store.execution_fences(["e1", "ghost"]) == {"e1": (None, 0, True)}
    assert store.execution_fences([]) == {}


def test_claiming_an_execution(store):
    store.register_worker(worker("w1"), 60)
    store.register_worker(worker("w2"), 60)
    store.register_worker(worker("late"), -1)  # its lease has passed
    commit(store, create("e1"))
    assert store.claimable_executions(("m",)) == [("e1", "m")]
    assert store.claim_execution("e1", "late") is None  # its own lease is not valid
    assert store.claim_execution("e1", "w1") == 1
    assert store.claimable_executions(("m",)) == []
    assert store.claim_execution("e1", "w2") is None  # a live worker owns it
    assert store.claim_execution("e1", "w1") == 2  # its own: again
    store.retire_worker("w1")
    assert store.claimable_executions(("m",)) == [("e1", "m")]
    assert store.claim_execution("e1", "w2") == 3
    assert store.execution_owner("e1")[:2] == ("w2", 3)
    commit(
        store,
        step(store.load_record("e1"), "@final", Fence("w2", 3), status=ExecutionStatus.COMPLETED),
    )
    assert store.claim_execution("e1", "w2") is None  # finished
    assert store.claimable_executions(("m",)) == []


def test_claims_take_running_before_waiting_and_new_work_first_when_asked(store):
    """Issue 26 (``docs/scale-out.md``, "Running workers"): a restarted worker resumes
    what was running before what only waits, and claims new work at once."""
    store.register_worker(worker("dead"), 60)
    commit(store, create("a1-wait", status=ExecutionStatus.WAITING))
    commit(store, create("a2-wait", status=ExecutionStatus.WAITING))
    commit(store, create("b-run", fence=Fence("dead", 1)))  # left running mid-way
    commit(store, create("c-new"))  # new work: nobody ever claimed it
    store.retire_worker("dead")
    store.register_worker(worker("w1"), 60)
    assert store.claim_executions(("m",), "w1", limit=1, waiting_only=True) == [("a1-wait", "m", 1)]
    assert store.claim_executions(("m",), "w1", limit=1, new_first=True) == [("c-new", "m", 1)]
    assert store.claim_executions(("m",), "w1", limit=1) == [("b-run", "m", 2)]
    assert store.claim_executions(("m",), "w1", limit=5) == [("a2-wait", "m", 1)]


def test_claiming_executions_in_bulk_racing_workers_take_disjoint_sets(store):
    for i in range(40):
        commit(store, create(f"e{i:02d}"))
    commit(store, create("x", machine="other"))
    names = [f"w{i}" for i in range(4)]
    for name in names:
        store.register_worker(worker(name), 60)
    store.register_worker(worker("late"), -1)
    assert store.claim_executions(("m",), "late", limit=5) == []
    assert store.claim_executions((), "w0", limit=5) == []
    got: dict[str, list[tuple[str, str, int]]] = {}
    barrier = threading.Barrier(len(names))

    def claim(name: str) -> None:
        barrier.wait()
        got[name] = []
        while batch := store.claim_executions(("m",), name, limit=3):
            got[name] += batch

    threads = [threading.Thread(target=claim, args=(n,)) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    claimed = [eid for batch in got.values() for eid, _m, _t in batch]
    assert sorted(claimed) == [f"e{i:02d}" for i in range(40)]  # each exactly once
    assert all(token == 1 and machine == "m" for b in got.values() for _e, machine, token in b)
    owners = store.execution_fences([f"e{i:02d}" for i in range(40)])
    for name, batch in got.items():
        assert all(owners[eid][:2] == (name, 1) for eid, _m, _t in batch)
    assert store.claimable_executions(("m",)) == []
    assert store.claimable_executions(("other",)) == [("x", "other")]


def test_machines_are_registered_once_and_loaded(store):
    rec = MachineRecord("m", 1, "a" * 64, {"states": ["s0"]}, T0)
    store.register_machine(rec)
    store.register_machine(MachineRecord("m", 1, "a" * 64, {"changed": True}, T0))  # idempotent
    assert store.load_machine("m") == rec
    assert store.load_machine("m", "a" * 64) == rec
    with pytest.raises(NotFoundError):
        store.load_machine("m", "b" * 64)
    with pytest.raises(NotFoundError, match="never registered"):
        store.load_machine("ghost")


def test_a_reopened_store_reads_what_was_committed(store_opener):
    first = store_opener()
    commit(first, create("e1"))
    first.close()
    again = store_opener()
    assert again.load_record("e1") == record("e1")
    reader = store_opener(read_only=True)
    assert reader.load_record("e1") == record("e1")
    with pytest.raises(StorageError, match="read-only"):
        commit(reader, create("e2"))
