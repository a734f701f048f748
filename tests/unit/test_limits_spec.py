"""The spec's ``limits:`` (``docs/spec-format.md``, "Limits"): read, lowered into the
table's ``LimitRow`` rows (rate parsed, key split), and the claims an effect starts
under (its key read from a label or a context field)."""

from __future__ import annotations

import attrs

from phronomy_fsm.durable.limits import LimitClaim, limit_claims
from phronomy_fsm.interop import table_from_spec as lower
from phronomy_fsm.spec.loader import load_spec_text
from phronomy_fsm.spec.model import parse_rate
from phronomy_fsm.table import LimitRow
from tests.spec_samples import door

OFFLOAD = (
    "  opened: {kind: external, description: Open., offload: {hook: ventilate, completed: close,"
    " failed: close, effect: idempotent}}"
)
LIMITS = """\
limits:
  fans_per_room:
    effects: [ventilate]
    key: context.room
    concurrency: 4
  fans_total:
    effects: ventilate
    rate: 600 per minute
  fans_per_agent:
    effects: [ventilate]
    key: label.agent_id
    rate: 2/hours
"""


def test_limits_are_lowered_into_the_table() -> None:
    spec = load_spec_text(door({11: OFFLOAD}, append=LIMITS)).spec
    assert spec is not None
    assert lower(spec).limits == (
        LimitRow("fans_per_room", ("ventilate",), "context", "room", 4),
        LimitRow("fans_total", ("ventilate",), None, None, None, 600, 60.0),
        LimitRow("fans_per_agent", ("ventilate",), "label", "agent_id", None, 2, 3600.0),
    )
    assert lower(load_spec_text(door()).spec).limits == ()  # type: ignore[arg-type]


def test_rates_parse_only_in_their_form() -> None:
    assert parse_rate("600 per minute") == (600, 60.0)
    assert parse_rate(" 5 / second ") == (5, 1.0)
    assert parse_rate("10 per day") is None
    assert parse_rate("per minute") is None


@attrs.define
class Room:
    room: str | None


def test_an_effect_claims_each_limit_that_covers_it_with_its_key() -> None:
    table = lower(load_spec_text(door({11: OFFLOAD}, append=LIMITS)).spec)  # type: ignore[arg-type]
    claims = limit_claims(table.limits, "ventilate", Room("kitchen"), {"agent_id": "a-7"})
    assert claims == (
        LimitClaim("fans_per_agent", "a-7", None, 2, 3_600_000),
        LimitClaim("fans_per_room", "kitchen", 4, None, None),
        LimitClaim("fans_total", "", None, 600, 60_000),
    )
    # a missing label or field counts under the empty key; other effects claim nothing
    missing = limit_claims(table.limits, "ventilate", {"room": None}, {})
    assert {(c.limit, c.key) for c in missing} == {
        ("fans_per_agent", ""),
        ("fans_per_room", ""),
        ("fans_total", ""),
    }
    assert limit_claims(table.limits, "creak", Room("kitchen"), {}) == ()
