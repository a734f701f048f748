"""The limits part of the store port (``docs/semantics.md``, "Limits"), on SQLite and
PostgreSQL: slots up to the concurrency, starts within the rate window, pauses, and
slots of a holder that is gone (lease passed, execution taken over or finished)."""

from __future__ import annotations

import pytest

from phronomy_fsm.durable.limits import LimitClaim, LimitStore
from phronomy_fsm.durable.records import ExecutionStatus, Fence

from .conftest import commit, create, step, worker

SLOTS = LimitClaim("api_slots", "t1", concurrency=2)
RATE = LimitClaim("api_rate", "t1", rate=2, per_ms=60_000)


def _running(store, *ids: str, owner: str = "w1") -> None:
    for eid in ids:
        commit(store, create(eid))
        assert store.claim_execution(eid, owner) == 1


def test_the_store_implements_the_limits_port(store):
    assert isinstance(store, LimitStore)


def test_slots_up_to_the_concurrency_and_back(store):
    store.register_worker(worker("w1"), 60)
    _running(store, "e1", "e2", "e3")
    assert store.acquire_limits((SLOTS,), "e1", "k1", "w1").granted
    assert store.acquire_limits((SLOTS,), "e2", "k2", "w1").granted
    full = store.acquire_limits((SLOTS,), "e3", "k3", "w1")
    assert not full.granted and full.retry_after_seconds is None and "api_slots" in full.reason
    holds, pauses = store.limit_holds()
    assert [(h.limit, h.key, h.execution_id, h.effect_key, h.worker_id) for h in holds] == [
        ("api_slots", "t1", "e1", "k1", "w1"),
        ("api_slots", "t1", "e2", "k2", "w1"),
    ] and pauses == []
    store.release_limits("e1", "k1")
    assert store.acquire_limits((SLOTS,), "e3", "k3", "w1").granted
    # an execution starting its next effect gives back what its last one held
    assert store.acquire_limits((SLOTS,), "e3", "k4", "w1").granted
    assert sorted(h.effect_key for h in store.limit_holds()[0]) == ["k2", "k4"]


def test_all_claims_or_none(store):
    store.register_worker(worker("w1"), 60)
    _running(store, "e1", "e2", "e3")
    assert store.acquire_limits((RATE, SLOTS), "e1", "k1", "w1").granted
    assert store.acquire_limits((RATE, SLOTS), "e2", "k2", "w1").granted
    store.release_limits("e1", "k1")
    store.release_limits("e2", "k2")
    refused = store.acquire_limits((RATE, SLOTS), "e3", "k3", "w1")  # the rate is used up
    assert not refused.granted and 59 < refused.retry_after_seconds <= 60
    assert store.limit_holds()[0] == []  # no slot taken for a refused start


def test_a_pause_holds_every_claim_of_its_key(store):
    store.register_worker(worker("w1"), 60)
    _running(store, "e1")
    store.pause_limits((SLOTS,), 30, "429 Too Many Requests")
    store.pause_limits((SLOTS,), 5, "a shorter one does not shorten it")
    paused = store.acquire_limits((SLOTS,), "e1", "k1", "w1")
    assert not paused.granted and 25 < paused.retry_after_seconds <= 30
    (pause,) = store.limit_holds()[1]
    assert (pause.limit, pause.key, pause.reason) == ("api_slots", "t1", "429 Too Many Requests")
    other_key = LimitClaim("api_slots", "t2", concurrency=2)
    assert store.acquire_limits((other_key,), "e1", "k1", "w1").granted


@pytest.mark.parametrize("gone", ["lease_passed", "taken_over", "finished"])
def test_slots_of_a_holder_that_is_gone_are_freed(store, gone):
    store.register_worker(worker("w1"), 60)
    store.register_worker(worker("w2"), 60)
    _running(store, "e1", "e2", "e3")
    assert store.acquire_limits((SLOTS,), "e1", "k1", "w1").granted
    assert store.acquire_limits((SLOTS,), "e2", "k2", "w1").granted
    assert not store.acquire_limits((SLOTS,), "e3", "k3", "w1").granted
    if gone == "lease_passed":
        store.register_worker(worker("w1"), -1)
        assert store.claim_execution("e3", "w2") == 2
        freed = 2
    elif gone == "taken_over":
        store.retire_worker("w1")
        assert store.claim_execution("e1", "w2") == 2
        store.register_worker(worker("w1"), 60)  # w1 lives on; e1 is not its any more
        freed = 1
    else:
        record = store.load_record("e1")
        commit(store, step(record, "@final", Fence("w1", 1), status=ExecutionStatus.COMPLETED))
        freed = 1
    owner = store.execution_owner("e3")[0]
    assert store.acquire_limits((SLOTS,), "e3", "k3", owner).granted
    assert len(store.limit_holds()[0]) == 3 - freed
