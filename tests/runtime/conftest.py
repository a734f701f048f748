"""Fixtures for runtime tests: machines compiled in memory through the real code
generator, and dispatchers that are always stopped."""

from __future__ import annotations

import textwrap
from typing import Any

import pytest
from phronomy_fsm.codegen import compile_spec, emit, lower

from phronomy_fsm.runtime import Dispatcher, ManualClock, OffloadPool
from phronomy_fsm.spec.loader import load_spec_text


def compile_table(yaml_text: str, *, validated: bool = True) -> Any:
    """Compile a spec through the code generator and return the generated TABLE
    (``validated=False``: a shape the validator refuses, lowered as written, for tests
    of what the engine guarantees where the validator cannot see)."""
    loaded = load_spec_text(textwrap.dedent(yaml_text), source_name="test.yaml")
    assert loaded.spec is not None, [i.render() for i in loaded.issues]
    namespace: dict[str, Any] = {}
    module = (
        compile_spec(loaded.spec)
        if validated
        else emit(lower(loaded.spec), source_name="test.yaml")
    )
    code = compile(module, "generated_test_module", "exec")
    exec(code, namespace)  # noqa: S102 - running our own generated module is the point
    return namespace["TABLE"]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def dispatcher(clock: ManualClock):
    pool = OffloadPool(max_workers=4, queue_size=8, clock=clock)
    d = Dispatcher(pool=pool, clock=clock)
    yield d
    d.stop(timeout_seconds=2)
    pool.shutdown(wait=True, timeout_seconds=2)


class Recorder:
    """A hooks object whose every hook records its calls; guards read ``truth``."""

    def __init__(self, names: tuple[str, ...] = (), truth: dict[str, bool] | None = None) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.truth = dict(truth or {})
        for name in names:
            setattr(self, name, self._make(name))

    def _make(self, name: str):
        def hook(ctx: Any, payload: Any) -> Any:
            self.calls.append((name, payload))
            return self.truth.get(name, True)

        return hook
