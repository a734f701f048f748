"""A cancel that arrives while a barrier that starts children is committing ends the
parent cancelled, and the children that barrier started cancelled too (issue 22, "a
recorded cancel"; docs/semantics.md "Cancel")."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from phronomy_fsm.durable import DurableRuntime, ExecutionStatus
from phronomy_fsm.store.open import open_store
from phronomy_fsm.testing.deadlines import scaled_seconds, wait_until

from .batch_app import Batch, ItemHooks


class _HeldBarrier:
    """A store that holds the ``launch`` barrier's commit until ``release`` is set (a
    slow disk): the cancel is then applied while that commit is in flight. Held
    ``before`` the store writes it, or ``after`` (written, its outcome not yet back:
    the children's rows are in the store but not yet live in the runtime)."""

    def __init__(self, inner: Any, where: str) -> None:
        self.inner = inner
        self.where = where
        self.held = threading.Event()
        self.release = threading.Event()

    def submit(self, commit: Any) -> Any:
        if commit.barrier != "launch":
            return self.inner.submit(commit)
        out: Future[Any] = Future()

        def later() -> None:
            if self.where == "after":
                written = self.inner.submit(commit)
                written.exception(scaled_seconds(30))
            self.held.set()
            self.release.wait(scaled_seconds(30))
            if self.where == "before":
                written = self.inner.submit(commit)
            written.add_done_callback(
                lambda f: (
                    out.set_exception(f.exception())
                    if f.exception() is not None
                    else out.set_result(f.result())
                )
            )

        threading.Thread(target=later, daemon=True).start()
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class _Hanging(ItemHooks):
    """Children whose work records that it started, then waits (a cancel must end
    them, not their work)."""

    gate = threading.Event()
    started: list[str]

    def do_item(self, ctx: Any, payload: Any) -> Any:
        def work(octx: Any) -> Any:
            self.started.append(ctx.name)
            self.gate.wait(scaled_seconds(30))
            return {"item": ctx.name}

        return work


@pytest.mark.parametrize("where", ["before", "after"])
def test_a_cancel_while_a_barrier_that_starts_children_commits_cancels_them_all(
    tmp_path: Path, where: str
) -> None:
    """The cancel is applied while the barrier's commit is in flight — held
    ``before`` the store writes it, or ``after`` (the children's rows are in the store
    but not yet live in the runtime, so the cascade also writes each a cancel request
    of its own). The children that commit started are cancelled as it lands, before
    any of their work starts, and every request is consumed by a ``@cancel`` commit,
    not left pending on a finished execution (found by the interleaving checker on the
    agent machine; a child that started its work after its parent's cancel was seen
    completing in CI)."""
    from .test_worker_capacity import _batch_machines

    db = str(tmp_path / "batch.db")
    held = _HeldBarrier(open_store(db), where)
    hooks = _Hanging(tmp_path / "items.jsonl")
    hooks.gate = threading.Event()
    hooks.started = []
    runtime = DurableRuntime(held, machines=_batch_machines(hooks), own_store=False)
    try:
        handle = runtime.start("batch_flow", Batch(["x", "y"]), execution_id="batch")
        assert held.held.wait(scaled_seconds(10))
        runtime.cancel("batch", reason="called off")

        def parent_cancelling() -> bool:
            parent = runtime.engine.live.get("batch")
            return parent is None or parent.cancelling is not None

        wait_until(parent_cancelling, 20, "the parent to apply its cancel")
        held.release.set()
        result = handle.result(scaled_seconds(20))
        hooks.gate.set()
        assert result.status is ExecutionStatus.CANCELLED
        children = runtime.store.list_records(parent_execution_id="batch")
        assert sorted(c.context["name"] for c in children) == ["x", "y"]
        wait_until(
            lambda: all(
                runtime.store.load_record(c.execution_id).status is ExecutionStatus.CANCELLED
                for c in children
            ),
            20,
            "the children to be cancelled",
        )
        assert hooks.started == []
        reader = open_store(db, read_only=True)
        try:
            for eid in ["batch", *(c.execution_id for c in children)]:
                assert reader.pending_signals(eid) == [], eid
        finally:
            reader.close()
    finally:
        hooks.gate.set()
        runtime.close(timeout_seconds=5)
        held.inner.close()
