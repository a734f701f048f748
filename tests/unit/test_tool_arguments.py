"""Tool argument validation (agent/tools.py): what the LLM is told when its arguments
do not match the tool's JSON schema, and what a bad schema raises."""

from __future__ import annotations

import pytest

from phronomy_fsm.agent import Tool
from phronomy_fsm.errors import ConfigurationError

SCHEMA = {
    "type": "object",
    "properties": {
        "order_id": {"type": "string", "pattern": "^A[0-9]+$"},
        "lines": {"type": "array", "items": {"type": "integer", "minimum": 1}},
    },
    "required": ["order_id"],
    "additionalProperties": False,
}


def _tool() -> Tool:
    return Tool("lookup", lambda args, ctx: None, "find an order", SCHEMA)


def test_valid_arguments_are_parsed() -> None:
    assert _tool().validate('{"order_id": "A12", "lines": [1, 2]}') == (
        {"order_id": "A12", "lines": [1, 2]},
        None,
    )
    assert _tool().validate("   ") == (None, _tool().validate("{}")[1])


def test_errors_name_the_path_of_each_bad_value() -> None:
    arguments, message = _tool().validate('{"order_id": "B1", "lines": [1, 0], "x": 1}')
    assert arguments is None
    assert message is not None
    assert message.startswith("invalid arguments for tool 'lookup': ")
    assert "(root): " in message and "'x'" in message  # additionalProperties at the root
    assert "lines/1: " in message and "minimum of 1" in message
    assert "order_id: " in message and "^A[0-9]+$" in message


def test_missing_required_property_is_reported_at_the_root() -> None:
    _, message = _tool().validate("{}")
    assert message is not None and "(root): " in message and "order_id" in message


def test_non_json_arguments() -> None:
    arguments, message = _tool().validate("{order_id: A1}")
    assert arguments is None and message is not None and "not JSON" in message


@pytest.mark.parametrize(
    "schema", [{"type": "nonsense"}, {"type": "object", "properties": {"a": {"minimum": "x"}}}]
)
def test_invalid_schema_is_a_configuration_error(schema: dict) -> None:
    with pytest.raises(ConfigurationError, match="invalid JSON schema"):
        Tool("t", lambda args, ctx: None, "", schema)
