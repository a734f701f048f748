"""A cancel that arrives while a barrier that starts children is committing ends the
parent cancelled, and the children that barrier started cancelled too (issue 22, "a
recorded cancel"; docs/semantics.md "Cancel")."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from phronomy_fsm.durable import DurableRuntime, ExecutionStatus
from phronomy_fsm.store.open import open_store
from phronomy_fsm.testing.deadlines import scaled_seconds, wait_until

from .batch_app import Batch, ItemHooks


class _HeldBarrier:
    """A store that holds the ``launch`` barrier's commit until ``release`` is set (a
    slow disk): the cancel is then applied while that commit is in flight."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.held = threading.Event()
        self.release = threading.Event()

    def submit(self, commit: Any) -> Any:
        if commit.barrier != "launch":
            return self.inner.submit(commit)
        out: Future[Any] = Future()

        def later() -> None:
            self.held.set()
            self.release.wait(scaled_seconds(30))
            inner = self.inner.submit(commit)
            inner.add_done_callback(
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
    """Children whose work waits (a cancel must end them, not their work)."""

    gate = threading.Event()

    def do_item(self, ctx: Any, payload: Any) -> Any:
        def work(octx: Any) -> Any:
            self.gate.wait(scaled_seconds(30))
            return {"item": ctx.name}

        return work


def test_a_cancel_while_a_barrier_that_starts_children_commits_cancels_them_all(
    tmp_path: Path,
) -> None:
    from .test_worker_capacity import _batch_machines

    db = str(tmp_path / "batch.db")
    held = _HeldBarrier(open_store(db))
    runtime = DurableRuntime(
        held, machines=_batch_machines(_Hanging(tmp_path / "items.jsonl")), own_store=False
    )
    try:
        handle = runtime.start("batch_flow", Batch(["x", "y"]), execution_id="batch")
        assert held.held.wait(scaled_seconds(10))
        runtime.cancel("batch", reason="called off")
        held.release.set()
        wait_until(
            lambda: len(runtime.store.list_records(parent_execution_id="batch")) == 2,
            20,
            "the children",
        )
        ids = [c.execution_id for c in runtime.store.list_records(parent_execution_id="batch")]

        def cancelling(eid: str) -> bool:
            child = runtime.engine.live.get(eid)
            return child is None or child.cancel_seq is not None

        # the children's work may have started: a cancel waits for it to come back
        # (docs/semantics.md "Cancel"), so it is let go once both heard the cancel
        wait_until(lambda: all(cancelling(eid) for eid in ids), 20, "the children's cancel")
        _Hanging.gate.set()
        result = handle.result(scaled_seconds(20))
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
    finally:
        _Hanging.gate.set()
        runtime.close(timeout_seconds=5)
        held.inner.close()
