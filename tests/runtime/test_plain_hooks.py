"""Hooks as plain functions (docs/spec-format.md "Hooks and the generated Protocol",
"Effect shorthand"): a mapping, a namespace or a module of functions; an effect called
as ``effect(snapshot, ectx)`` on a worker with a frozen snapshot and its effect context;
the set of hooks still checked at binding."""

from __future__ import annotations

import textwrap
import threading
import types
from pathlib import Path
from typing import Any

import attrs
import pytest
from phronomy_fsm.codegen import lower

from phronomy_fsm.durable import DurableRuntime, EffectContext, ExecutionStatus, Machine
from phronomy_fsm.errors import MissingHookError
from phronomy_fsm.runtime import ContextSnapshot, as_hooks, bind_machine
from phronomy_fsm.spec.loader import load_spec_text
from phronomy_fsm.store import SqliteBarrierStore

SPEC = textwrap.dedent(
    """\
    spec_format: 1
    machine: plain
    version: 1
    events: {}
    states:
      start: {kind: auto, initial: true, entry: [count], description: Count.}
      sending:
        description: Send.
        effect: {hook: send, on_completed: {to: sent, actions: [keep]}, on_failed: {to: failed, actions: [keep_error]}}
      sent: {kind: final, description: Sent.}
      failed: {kind: final, description: Failed.}
    transitions:
      - {from: start, event: state_completed, to: sending, description: Send.}
    """
)
TABLE = lower(load_spec_text(SPEC).spec)  # type: ignore[arg-type]


@attrs.define
class Ctx:
    """The test's context."""

    n: int = 0
    items: list[int] = attrs.Factory(list)
    result: dict[str, Any] | None = None
    error: str | None = None


def count(ctx: Ctx, payload: Any) -> None:
    ctx.n += 1


def keep(ctx: Ctx, payload: Any) -> None:
    ctx.result = payload


def keep_error(ctx: Ctx, payload: Exception) -> None:
    ctx.error = f"{type(payload).__name__}: {payload}"


def test_a_snapshot_is_a_frozen_deep_copy() -> None:
    ctx = Ctx(1, [1])
    snapshot = ContextSnapshot(ctx)
    ctx.items.append(2)
    assert (snapshot.n, snapshot.items) == (1, [1])
    with pytest.raises(AttributeError, match="read-only"):
        snapshot.n = 2
    as_dict = ContextSnapshot({"n": 3})
    assert (as_dict.n, as_dict["n"]) == (3, 3)
    with pytest.raises(AttributeError):
        as_dict.missing  # noqa: B018 - reading it is the test


def test_a_mapping_of_functions_is_a_hooks_object_and_the_set_is_checked() -> None:
    hooks = as_hooks({"count": count, "keep": keep})
    assert isinstance(hooks, types.SimpleNamespace) and hooks.keep is keep
    with pytest.raises(MissingHookError) as missing:
        bind_machine(TABLE, {"count": count, "keep": keep})
    assert missing.value.missing == ("keep_error", "send")
    assert "keep_error, send" in str(missing.value)
    module = types.ModuleType("my_hooks")
    module.count = count  # type: ignore[attr-defined]
    with pytest.raises(MissingHookError, match="module 'my_hooks' lacks 3 hook"):
        bind_machine(TABLE, module)


def _run(tmp_path: Path, send: Any, **start: Any) -> Any:
    hooks = {"count": count, "keep": keep, "keep_error": keep_error, "send": send}
    machine = Machine(TABLE, hooks, context_type=Ctx)
    store = SqliteBarrierStore(tmp_path / "plain.db")
    with DurableRuntime(store, machines=[machine], own_store=True) as runtime:
        return runtime.start("plain", Ctx(), execution_id="x-1", **start).result(20)


def test_an_effect_function_gets_its_snapshot_and_effect_context(tmp_path: Path) -> None:
    seen: dict[str, Any] = {}

    def send(snapshot: Any, ectx: EffectContext) -> dict[str, Any]:
        cancelled = ectx.cancellation is None or ectx.cancellation.is_cancelled()
        seen.update(thread=threading.current_thread().name, ectx=ectx, n=snapshot.n)
        seen.update(cancelled=cancelled)
        return {"key": ectx.idempotency_key}

    result = _run(tmp_path, send, timeout_seconds=600)
    assert (result.status, result.state) == (ExecutionStatus.COMPLETED, "sent")
    ectx = seen["ectx"]
    assert (seen["n"], ectx.attempt, ectx.kind) == (1, 1, "at_most_once")
    assert ectx.idempotency_key.startswith("send-") and result.context.result == {
        "key": ectx.idempotency_key
    }
    assert seen["cancelled"] is False  # a live token, cancelled once the state is left
    assert ectx.deadline is not None and ectx.deadline.tzinfo is not None
    assert "offload" in seen["thread"]  # a worker of the offload pool, not the loop


def test_an_effect_that_writes_its_snapshot_fails_and_the_context_is_untouched(
    tmp_path: Path,
) -> None:
    def send(snapshot: Any, ectx: EffectContext) -> None:
        snapshot.n = 99

    result = _run(tmp_path, send)
    assert (result.status, result.state) == (ExecutionStatus.FAILED, "failed")
    assert result.context.n == 1
    assert result.context.error.startswith("AttributeError: a context snapshot is read-only")
