"""The effect shorthand and payload schemas (docs/spec-format.md "Effect shorthand",
"Payload schemas"): derived outcome events and rows, the inferred kind, named events,
conflicts with other work, no barrier asked for, payload schemas read, checked and
generated as classes."""

from __future__ import annotations

import textwrap
from typing import Any

import pytest
from phronomy_fsm.codegen import lower
from phronomy_fsm.codegen.emit import emit

from phronomy_fsm.spec.loader import load_spec_text
from phronomy_fsm.spec.model import MachineSpec
from phronomy_fsm.spec.validate import validate_spec
from phronomy_fsm.table import payload_problems

BASE = textwrap.dedent(
    """\
    spec_format: 1
    machine: shop
    version: 1
    events:
      buy: {payload: PAYLOAD, description: Buy.}
    states:
      idle: {kind: external, initial: true, description: Idle.}
      sending:
        description: Send it.
    EFFECT
      sent: {kind: final, description: Sent.}
      failed: {kind: final, description: Failed.}
    transitions:
      - {from: idle, event: buy, to: sending, description: Send.}
    """
)
SHORT = "effect: {hook: send, kind: idempotent, result: Receipt, on_completed: {to: sent, actions: [keep]}, on_failed: failed}\n"


def _load(effect: str = SHORT, payload: str = "dict") -> Any:
    text = BASE.replace("EFFECT\n", textwrap.indent(effect, " " * 4)).replace("PAYLOAD", payload)
    return load_spec_text(text)


def _spec(effect: str = SHORT, payload: str = "dict") -> MachineSpec:
    loaded = _load(effect, payload)
    assert loaded.spec is not None, [i.render() for i in loaded.issues]
    return loaded.spec  # type: ignore[no-any-return]


def _codes(spec: MachineSpec, *, errors_only: bool = False) -> list[str]:
    return [i.code for i in validate_spec(spec) if i.is_error or not errors_only]


def test_the_shorthand_derives_events_rows_and_the_kind() -> None:
    spec = _spec()
    assert _codes(spec) == []
    table = lower(spec)
    sending = table.state("sending")
    assert sending.kind == "external"
    assert sending.offload == ("send", "send_completed", "send_failed", "idempotent", True)
    events = {e.name: e.payload for e in table.events}
    assert events == {"buy": "dict", "send_completed": "Receipt", "send_failed": "Exception"}
    assert [(t.sources, t.event, t.target, t.actions) for t in table.transitions] == [
        (("sending",), "send_completed", "sent", ("keep",)),
        (("sending",), "send_failed", "failed", ()),
        (("idle",), "buy", "sending", ()),
    ]
    assert (table.actions, table.offload_hooks) == (("keep",), ("send",))


def test_named_events_and_rows_in_transitions_keep_working() -> None:
    effect = "effect: {hook: send, completed: done, failed: broke}\n"
    text = BASE.replace("EFFECT\n", textwrap.indent(effect, " " * 4)).replace("PAYLOAD", "dict")
    text = text.replace(
        "events:\n",
        "events:\n  done: {payload: dict, description: Done.}\n"
        "  broke: {payload: Exception, description: Broke.}\n",
    )
    text += "  - {from: sending, event: done, to: sent, description: Done.}\n"
    text += "  - {from: sending, event: broke, to: failed, description: Broke.}\n"
    loaded = load_spec_text(text)
    assert loaded.spec is not None
    assert _codes(loaded.spec) == []
    assert lower(loaded.spec).state("sending").offload.completed == "done"


def test_an_outcome_without_target_or_row_is_unhandled() -> None:
    spec = _spec("effect: {hook: send, on_completed: sent}\n")
    assert "OFFLOAD_EVENT_UNHANDLED" in _codes(spec, errors_only=True)


def test_an_unknown_target_is_reported_with_a_suggestion() -> None:
    spec = _spec("effect: {hook: send, on_completed: snet, on_failed: failed}\n")
    issues = [i for i in validate_spec(spec) if i.code == "UNKNOWN_STATE"]
    assert len(issues) == 1 and "did you mean 'sent'" in issues[0].message
    assert issues[0].path == "$.states.sending.effect.on_completed[0]"


def test_an_effect_beside_an_offload_is_a_work_conflict() -> None:
    both = "effect: {hook: send, on_completed: sent, on_failed: failed}\n"
    both += "offload: {hook: other, completed: buy, failed: buy}\n"
    issues = [i for i in validate_spec(_spec(both)) if i.code == "WORK_CONFLICT"]
    assert [i.path for i in issues] == ["$.states.sending.effect"]
    assert "both an effect and an offload" in issues[0].message


def test_no_barrier_is_asked_for_an_effect_shorthand_unlike_the_long_form() -> None:
    assert "EFFECT_WITHOUT_BARRIER" not in _codes(_spec())
    long_form = (
        "kind: external\noffload: {hook: send, completed: send_completed, failed: send_failed}\n"
    )
    text = BASE.replace("EFFECT\n", textwrap.indent(long_form, " " * 4)).replace("PAYLOAD", "dict")
    text = text.replace(
        "events:\n",
        "events:\n  send_completed: {description: Done.}\n  send_failed: {description: Broke.}\n",
    )
    text += "  - {from: sending, event: send_completed, to: sent, description: Done.}\n"
    text += "  - {from: sending, event: send_failed, to: failed, description: Broke.}\n"
    loaded = load_spec_text(text)
    assert loaded.spec is not None
    assert "EFFECT_WITHOUT_BARRIER" in _codes(loaded.spec)


def test_a_payload_schema_becomes_fields_and_a_generated_class() -> None:
    spec = _spec(payload="{by: str, note: str | None, count: int}")
    buy = spec.event("buy")
    assert buy is not None
    assert (buy.payload, buy.fields) == (
        "BuyPayload",
        (("by", "str"), ("note", "str | None"), ("count", "int")),
    )
    text = emit(lower(spec), source_name="shop.yaml")
    assert "@attrs.frozen\nclass BuyPayload:" in text
    assert "    note: str | None\n" in text
    assert "def send(self, snapshot: Any, ectx: Any, /) -> Any:" in text
    namespace: dict[str, Any] = {}
    exec(compile(text, "shop.py", "exec"), namespace)  # noqa: S102 - our own generated module
    assert namespace["BuyPayload"](by="a", note=None, count=1).count == 1
    assert "BuyPayload" in namespace["__all__"]


def test_a_payload_schema_with_an_unknown_type_is_a_bad_value() -> None:
    loaded = _load(payload="{by: string}")
    issues = [i for i in loaded.issues if i.code == "BAD_VALUE"]
    assert len(issues) == 1 and "did you mean 'str'" in issues[0].message


@pytest.mark.parametrize(
    ("payload", "problems"),
    [
        ({"by": "ana", "count": 1}, []),
        ({"by": "ana", "note": None, "count": 1.0}, ["field 'count' must be int, got float"]),
        ({"by": True, "count": True}, ["field 'by' must be str, got bool", "field 'count' must be int, got bool"]),
        ({"count": 1, "extra": 1}, ["field 'by' (str) is missing", "unexpected field 'extra' (declared: by, note, count)"]),
        ("ana", ["expected a mapping with fields by, note, count, got str"]),
    ],
)  # fmt: skip
def test_payload_problems_lists_every_mismatch(payload: Any, problems: list[str]) -> None:
    fields = (("by", "str"), ("note", "str | None"), ("count", "int"))
    assert payload_problems(fields, payload) == problems
    assert payload_problems((), payload) == []
