"""tool_arguments: validating one tool call's arguments, jsonschema-rs against jsonschema.

Why the package depends on jsonschema-rs alone: an agent validates every tool call's
arguments against the tool's JSON schema on the dispatcher loop, before authorization
(``phronomy_fsm.agent.tools.Tool.validate``), so the per-call cost is paid on the one
thread every execution shares. This measures that check — compiled validator, valid
arguments, ``is_valid`` — for the Rust validator the package uses and for the
pure-Python ``jsonschema`` (installed with the ``bench`` extra only), on a
one-property schema and on a larger object schema, in interleaved rounds; rates are
medians of the rounds. Nothing here is a timed assertion.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

SMALL = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
LARGE = {
    "type": "object",
    "properties": {
        "order_id": {"type": "string", "pattern": "^[A-Z][0-9]{4}$"},
        "amount": {"type": "number", "exclusiveMinimum": 0},
        "currency": {"enum": ["EUR", "USD", "GBP"]},
        "reason": {"type": "string", "maxLength": 500},
        "items": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"sku": {"type": "string"}, "quantity": {"type": "integer"}},
                "required": ["sku", "quantity"],
                "additionalProperties": False,
            },
        },
    },
    "required": ["order_id", "amount"],
    "additionalProperties": False,
}
ARGUMENTS = {
    "small": {"n": 3},
    "large": {
        "order_id": "A1001",
        "amount": 25.0,
        "currency": "EUR",
        "reason": "arrived broken",
        "items": [{"sku": "teapot", "quantity": 1}, {"sku": "cup", "quantity": 2}],
    },
}


def add_arguments(parser: Any) -> None:
    """``--calls`` per round, ``--rounds``."""
    parser.add_argument("--calls", type=int, default=20_000, help="validations per round")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds")


def _rate(check: Any, arguments: Any, calls: int) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        check(arguments)
    return calls / (time.perf_counter() - started)


def run(args: Any) -> dict[str, Any]:
    """Validations per second and microseconds per validation, for each library and schema."""
    import jsonschema_rs

    try:
        import jsonschema
    except ImportError:  # the peer is only in the bench extra
        jsonschema = None
    result: dict[str, Any] = {}
    for label, schema in (("small", SMALL), ("large", LARGE)):
        arguments = ARGUMENTS[label]
        checks = {"jsonschema_rs": jsonschema_rs.Draft202012Validator(schema).is_valid}
        if jsonschema is not None:
            checks["jsonschema"] = jsonschema.Draft202012Validator(schema).is_valid
        for check in checks.values():
            assert check(arguments)
            _rate(check, arguments, min(args.calls, 1000))  # warm-up
        rates: dict[str, list[float]] = {name: [] for name in checks}
        for _ in range(args.rounds):
            for name, check in checks.items():
                rates[name].append(_rate(check, arguments, args.calls))
        medians = {name: statistics.median(values) for name, values in rates.items()}
        result[label] = {
            name: {"per_second": round(rate), "microseconds": round(1e6 / rate, 3)}
            for name, rate in medians.items()
        }
        if "jsonschema" in medians:
            result[label]["jsonschema_rs_speedup"] = round(
                medians["jsonschema_rs"] / medians["jsonschema"], 1
            )
    return result
