"""Claims by spec, on both stores (``docs/scale-out.md``, "Rolling upgrades"): a claim
takes an execution only when the claiming worker's machine runs its spec — the same
sha256, or an older spec one of its migrations covers (by version, or by version and
sha256) — and a commit that moves an execution to another spec (a migration applied)
moves the column claims match on. Before, claims matched the machine's name only."""

from __future__ import annotations

from typing import Any

from phronomy_fsm.durable.claims import RunnableSpecs
from phronomy_fsm.durable.records import ExecutionStatus, Fence
from phronomy_fsm.table import MigrationRow

from .conftest import commit, create, step, worker
from .test_conformance import snapshot

A, B, C, D = ("a" * 64, "b" * 64, "c" * 64, "d" * 64)
#: execution id -> (spec version, spec sha256) of machine "m"
PINNED = {"e-v1": (1, A), "e-v1b": (1, D), "e-v2": (2, B), "e-v2d": (2, D), "e-v3": (3, C)}
OLD = RunnableSpecs("m", 1, A)
NEW = RunnableSpecs("m", 2, B, (MigrationRow(1, None, ()),))
NEW_PINNED = RunnableSpecs("m", 2, B, (MigrationRow(1, A, (("s0", "s0"),)),))


def _fill(store: Any) -> None:
    for eid, (version, sha) in PINNED.items():
        commit(store, create(eid, spec_version=version, spec_sha256=sha))
    commit(store, create("x", machine="other"))


def test_a_claim_takes_only_what_the_worker_s_spec_runs(store):
    _fill(store)
    for specs in (OLD, NEW, NEW_PINNED):
        expected = [eid for eid, (v, sha) in PINNED.items() if specs.runs(v, sha)]
        got = [eid for eid, _m in store.claimable_executions((specs,))]
        assert got == expected, specs
        others = [(eid, v, sha) for eid, (v, sha) in PINNED.items() if eid not in expected]
        assert [(e, v, s) for e, _m, v, s in store.other_spec_executions((specs,))] == others
    assert [e for e, _m in store.claimable_executions((OLD,))] == ["e-v1"]
    assert [e for e, _m in store.claimable_executions((NEW,))] == ["e-v1", "e-v1b", "e-v2"]
    assert [e for e, _m in store.claimable_executions((NEW_PINNED,))] == ["e-v1", "e-v2"]
    # a bare name still runs every spec (operator tools), and machines stay apart
    assert len(store.claimable_executions(("m",))) == len(PINNED)
    assert store.claimable_executions((RunnableSpecs("other", 1, A),)) == [("x", "other")]

    store.register_worker(worker("old"), 60)
    store.register_worker(worker("new"), 60)
    before = snapshot(store, *PINNED)
    assert store.claim_execution("e-v2", "old", runs=OLD) is None  # not its spec
    assert snapshot(store, *PINNED) == before
    assert store.claim_executions((OLD,), "old", limit=10) == [("e-v1", "m", 1)]
    claimed = store.claim_executions((NEW,), "new", limit=10)
    assert [(e, t) for e, _m, t in claimed] == [("e-v1b", 1), ("e-v2", 1)]
    assert store.claim_executions((OLD, NEW), "new", limit=10) == []
    assert store.other_spec_executions((OLD,)) == [
        ("e-v2d", "m", 2, D),
        ("e-v3", "m", 3, C),
    ]  # e-v1b and e-v2 are owned now: not left waiting
    # an operator's claim without a spec takes anything (recover --park-other-specs)
    assert store.claim_execution("e-v3", "new", runs=NEW) is None
    assert store.claim_execution("e-v3", "new") == 1


def test_a_commit_under_a_newer_spec_moves_the_execution_to_it(store):
    """What a worker of the newer spec commits after applying a migration: from then
    on a worker of the older spec no longer claims the execution."""
    _fill(store)
    store.register_worker(worker("new"), 60)
    assert store.claim_execution("e-v1", "new", runs=NEW) == 1
    moved = step(store.load_record("e-v1"), fence=Fence("new", 1), spec_version=2, spec_sha256=B)
    commit(store, moved)
    store.retire_worker("new")
    assert "e-v1" not in [e for e, _m in store.claimable_executions((OLD,))]
    assert "e-v1" in [e for e, _m in store.claimable_executions((NEW,))]
    # the same through the store's other commit path (SQLite: a transaction of its
    # own instead of the group's one-statement batch)
    store.register_worker(worker("new"), 60)
    assert store.claim_execution("e-v1b", "new", runs=NEW) == 1
    waiting = step(
        store.load_record("e-v1b"),
        "@wait",
        Fence("new", 1),
        spec_version=2,
        spec_sha256=B,
        status=ExecutionStatus.WAITING,
    )
    store.commit(waiting)
    store.retire_worker("new")
    assert [e for e, _m in store.claimable_executions((OLD,))] == []
    assert store.other_spec_executions((OLD,))[:2] == [("e-v1", "m", 2, B), ("e-v1b", "m", 2, B)]
