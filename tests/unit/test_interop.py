"""``phronomy_fsm.interop``: table_from_spec and the transitions.Machine it builds."""

from __future__ import annotations

import importlib
import sys

import pytest

from phronomy_fsm.errors import MissingDependencyError
from phronomy_fsm.interop import table_from_spec, to_transitions_machine
from phronomy_fsm.spec.loader import load_spec_text
from phronomy_fsm.spec.model import MachineSpec
from phronomy_fsm.spec.validate import check_spec_file
from tests.spec_samples import REAL_MACHINES, REAL_SPECS, door

transitions = pytest.importorskip("transitions")


def _spec(text: str) -> MachineSpec:
    loaded = load_spec_text(text)
    assert loaded.spec is not None, [i.render() for i in loaded.issues]
    return loaded.spec


@pytest.mark.parametrize(
    ("machine", "path"), list(zip(REAL_MACHINES, REAL_SPECS, strict=True)), ids=REAL_MACHINES
)
def test_table_from_spec_equals_the_generated_table(machine: str, path: object) -> None:
    spec = check_spec_file(path).spec  # type: ignore[arg-type]
    assert spec is not None
    generated = importlib.import_module(f"phronomy_fsm.generated.{machine}")
    assert table_from_spec(spec) == generated.TABLE


GUARDED = door(
    {
        10: "  closed: {kind: auto, initial: true, entry: [log], description: Closed.}",
        14: "  - {from: closed, event: state_completed, guard: not jammed, to: opened, actions: [creak], description: Open.}",
        15: "  - {from: closed, event: state_completed, to: locked, description: Stuck; lock.}",
        16: "  - {from: opened, event: lock, guard: has_key, to: locked, description: Lock.}",
    },
    insert={9: "  knock: {unhandled: ignore, description: Anyone may knock.}"},
    append="  - {from: opened, event: close, description: Push; it stays open.}\n",
)


class Door:
    def __init__(self, *, jammed: bool = False, has_key: bool = True) -> None:
        self.calls: list[str] = []
        self._jammed, self._has_key = jammed, has_key

    def jammed(self) -> bool:
        return self._jammed

    def has_key(self) -> bool:
        return self._has_key

    def log(self) -> None:
        self.calls.append("log")

    def creak(self) -> None:
        self.calls.append("creak")


def test_structure_of_the_machine() -> None:
    model = Door()
    machine = to_transitions_machine(_spec(GUARDED), model, start=False)
    assert model.state == "closed"  # start=False: resting in the initial state
    rows = machine.events["state_completed"].transitions["closed"]
    assert [
        (r.dest, [c.func for c in r.conditions], [c.target for c in r.conditions]) for r in rows
    ] == [
        ("opened", ["jammed"], [False]),  # negated guard -> unless
        ("locked", [], []),
    ]
    assert rows[0].before == ["creak"]
    [internal] = machine.events["close"].transitions["opened"]
    assert internal.dest is None  # internal transition
    assert machine.get_state("locked").final is True
    assert machine.get_state("closed").on_enter[0] == "log"


def test_auto_state_runs_on_start_and_guards_choose() -> None:
    model = Door()
    to_transitions_machine(_spec(GUARDED), model)
    assert model.state == "opened" and model.calls == ["log", "creak"]
    jammed = Door(jammed=True)
    to_transitions_machine(_spec(GUARDED), jammed)
    assert jammed.state == "locked" and jammed.calls == ["log"]


def test_events_no_ops_ignores_and_errors() -> None:
    model = Door(has_key=False)
    to_transitions_machine(_spec(GUARDED), model)
    model.trigger("lock")  # guard fails: a no-op
    assert model.state == "opened"
    model.trigger("knock")  # unhandled: ignore, no row in this state
    assert model.state == "opened"
    with pytest.raises(transitions.MachineError):
        model.trigger("open")  # declared, no row in 'opened', not ignorable
    model._has_key = True
    model.trigger("lock")
    assert model.state == "locked"
    model.trigger("open")  # final: the session is finished, events are dropped
    assert model.state == "locked"


def test_hook_names_that_collide_with_transitions_attributes() -> None:
    spec = _spec(
        door(
            {14: "  - {from: closed, event: open, guard: trigger, to: opened, description: Open.}"}
        )
    )
    with pytest.raises(ValueError, match="trigger"):
        to_transitions_machine(spec, object())


def test_missing_transitions_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "transitions", None)
    with pytest.raises(MissingDependencyError) as caught:
        to_transitions_machine(_spec(door()), object())
    assert caught.value.package == "transitions" and caught.value.extra == "interop"
    assert "pip install 'phronomy-fsm[interop]'" in str(caught.value)


def test_interop_module_imports_without_transitions(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "transitions", None)
    monkeypatch.delitem(sys.modules, "phronomy_fsm.interop")
    module = importlib.import_module("phronomy_fsm.interop")
    assert module.table_from_spec(_spec(door())).initial == "closed"
