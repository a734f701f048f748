"""Typed tools (docs/agent.md, "Typed tools"): the JSON Schema derived from a function's
annotations for each supported kind, refusals at definition time, the plain form kept,
and a real agent run whose tool receives its arguments converted to their types."""

from __future__ import annotations

import enum
from typing import Any, Literal, TypedDict

import attrs
import pydantic
import pytest

from phronomy_fsm.agent import Agent, Reply, ScriptedProvider, Tool, ToolContext, tool
from phronomy_fsm.agent.tools import DEFAULT_PARAMETERS
from phronomy_fsm.errors import ConfigurationError, TypeSchemaError

from .conftest import Events


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


@attrs.frozen
class Filters:
    tags: list[str]
    color: Color | None = None


@attrs.frozen
class Node:
    name: str
    children: list[Node] = attrs.Factory(list)


class Point(TypedDict):
    x: int
    y: int


class Hit(pydantic.BaseModel):
    title: str
    score: float = 0.0


def schema_of(annotation: Any) -> dict[str, Any]:
    """The arguments schema of a one-parameter typed tool ``f(value: annotation)``."""

    def f(value: Any) -> None:
        return None

    f.__annotations__ = {"value": annotation}
    return Tool.from_function(f).parameters


def one(prop: dict[str, Any], defs: dict[str, Any] | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {"value": prop},
        "required": ["value"],
        "additionalProperties": False,
    }
    if defs:
        schema["$defs"] = defs
    return schema


@pytest.mark.parametrize(
    ("annotation", "expected"),
    [
        (str, one({"type": "string"})),
        (int, one({"type": "integer"})),
        (float, one({"type": "number"})),
        (bool, one({"type": "boolean"})),
        (None, one({"type": "null"})),
        (Any, one({})),
        (list[int], one({"type": "array", "items": {"type": "integer"}})),
        (set[str], one({"type": "array", "items": {"type": "string"}, "uniqueItems": True})),
        (tuple[str, ...], one({"type": "array", "items": {"type": "string"}})),
        (
            tuple[str, int],
            one(
                {
                    "type": "array",
                    "prefixItems": [{"type": "string"}, {"type": "integer"}],
                    "minItems": 2,
                    "maxItems": 2,
                }
            ),
        ),
        (
            dict[str, float],
            one({"type": "object", "additionalProperties": {"type": "number"}}),
        ),
        (int | None, one({"anyOf": [{"type": "integer"}, {"type": "null"}]})),
        (int | str, one({"anyOf": [{"type": "integer"}, {"type": "string"}]})),
        (Literal["asc", "desc"], one({"enum": ["asc", "desc"]})),
        (Color, one({"$ref": "#/$defs/Color"}, {"Color": {"enum": ["red", "blue"]}})),
        (
            Filters,
            one(
                {"$ref": "#/$defs/Filters"},
                {
                    "Filters": {
                        "type": "object",
                        "properties": {
                            "tags": {"type": "array", "items": {"type": "string"}},
                            "color": {"anyOf": [{"$ref": "#/$defs/Color"}, {"type": "null"}]},
                        },
                        "required": ["tags"],
                        "additionalProperties": False,
                    },
                    "Color": {"enum": ["red", "blue"]},
                },
            ),
        ),
        (
            Node,  # recursive: the definition refers to itself
            one(
                {"$ref": "#/$defs/Node"},
                {
                    "Node": {
                        "type": "object",
                        "properties": {
                            "name": {"type": "string"},
                            "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}},
                        },
                        "required": ["name"],
                        "additionalProperties": False,
                    }
                },
            ),
        ),
        (
            Point,
            one(
                {"$ref": "#/$defs/Point"},
                {
                    "Point": {
                        "type": "object",
                        "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
                        "required": ["x", "y"],
                        "additionalProperties": False,
                    }
                },
            ),
        ),
        (
            Hit,  # Pydantic's own schema, under $defs
            one(
                {"$ref": "#/$defs/Hit"},
                {
                    "Hit": {
                        "type": "object",
                        "title": "Hit",
                        "properties": {
                            "title": {"type": "string", "title": "Title"},
                            "score": {"type": "number", "title": "Score", "default": 0.0},
                        },
                        "required": ["title"],
                    }
                },
            ),
        ),
    ],
    ids=lambda v: getattr(v, "__name__", None) or repr(v)[:30],
)
def test_each_supported_annotation_has_its_exact_schema(
    annotation: Any, expected: dict[str, Any]
) -> None:
    assert schema_of(annotation) == expected


def test_a_function_becomes_a_tool_with_its_docstring_defaults_and_context() -> None:
    @tool(requires_approval=True, effect="pure")
    def search(
        query: str,
        ctx: ToolContext,
        limit: int = 5,
        order: Literal["asc", "desc"] = "asc",
        filters: Filters | None = None,
    ) -> list[Hit]:
        """Search the catalogue
        for products.

        Only the first paragraph is the description.

        Args:
            query: what to look for.
            limit (int): the most hits
                to return.
            unknown: not a parameter; ignored.

        Returns:
            the hits.
        """
        return []

    assert (search.name, search.requires_approval, search.effect.value) == (
        "search",
        True,
        "pure",
    )
    assert search.description == "Search the catalogue for products."
    assert search.parameters == {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "what to look for."},
            "limit": {
                "type": "integer",
                "description": "the most hits to return.",
                "default": 5,
            },
            "order": {"enum": ["asc", "desc"], "default": "asc"},
            "filters": {"anyOf": [{"$ref": "#/$defs/Filters"}, {"type": "null"}], "default": None},
        },
        "required": ["query"],
        "additionalProperties": False,
        "$defs": {
            "Filters": {
                "type": "object",
                "properties": {
                    "tags": {"type": "array", "items": {"type": "string"}},
                    "color": {"anyOf": [{"$ref": "#/$defs/Color"}, {"type": "null"}]},
                },
                "required": ["tags"],
                "additionalProperties": False,
            },
            "Color": {"enum": ["red", "blue"]},
        },
    }
    # the schema is what the arguments are checked against (jsonschema-rs)
    assert (
        search.validate('{"query": "pen", "filters": {"tags": ["a"], "color": "red"}}')[1] is None
    )
    _, error = search.validate('{"query": "pen", "filters": {"tags": ["a"], "color": "green"}}')
    assert error is not None and "filters:" in error and "green" in error


def test_the_plain_form_is_kept_for_arguments_and_context_functions() -> None:
    @tool()
    def plain(arguments, context):  # type: ignore[no-untyped-def]
        """A plain tool."""
        return arguments

    @tool("annotated_plain")
    def annotated(arguments: dict[str, Any], context: ToolContext) -> Any:
        return arguments

    explicit = tool("explicit", parameters={"type": "object"})(lambda a, c: a)
    for made in (plain, annotated):
        assert made.parameters == DEFAULT_PARAMETERS
        assert made.fn({"anything": 1}, None) == {"anything": 1}  # called as it is
    assert annotated.name == "annotated_plain"
    assert explicit.parameters == {"type": "object"}


class Opaque:
    pass


@pytest.mark.parametrize(
    ("signature", "needle"),
    [
        ("def f(when: datetime.datetime) -> None: ...", "parameter 'when'"),
        ("def f(query) -> None: ...", "parameter 'query' has no annotation"),
        ("def f(*names: str) -> None: ...", "parameter 'names'"),
        ("def f(**options: str) -> None: ...", "parameter 'options'"),
        ("def f(a: int, /) -> None: ...", "parameter 'a'"),
        ("def f(counts: dict[int, str]) -> None: ...", "keys of dict[int, str] must be str"),
        ("def f(thing: Opaque) -> None: ...", "the type Opaque has no JSON Schema"),
        ("def f(x: Filters | Hit) -> None: ...", "several structured members"),
        ("def f(x: Literal[1.5]) -> None: ...", "Literal value 1.5"),
        ("def f(bad: list[Opaque]) -> None: ...", "parameter 'bad'"),
    ],
)
def test_unsupported_annotations_are_refused_naming_the_parameter(
    signature: str, needle: str
) -> None:
    import datetime

    namespace: dict[str, Any] = {
        "datetime": datetime,
        "Opaque": Opaque,
        "Filters": Filters,
        "Hit": Hit,
        "Literal": Literal,
    }
    exec(signature, namespace)  # noqa: S102 - each signature is a literal of this test
    with pytest.raises(TypeSchemaError) as info:
        Tool.from_function(namespace["f"])
    assert needle in str(info.value)
    assert "tool 'f'" in str(info.value)
    assert isinstance(info.value, ConfigurationError)


def test_an_attrs_field_of_an_unsupported_type_is_refused_naming_the_field() -> None:
    @attrs.frozen
    class Bad:
        when: Opaque

    def f(bad: Bad) -> None:
        return None

    with pytest.raises(TypeSchemaError, match=r"parameter 'bad'.*field 'when'"):
        Tool.from_function(f)


def test_an_agent_run_gives_the_tool_typed_arguments_and_records_its_typed_result(
    store: Any, runtime: Any, events: Events
) -> None:
    seen: list[Any] = []

    @tool
    def search(
        query: str, filters: Filters, hit: Hit, order: Literal["asc", "desc"], ctx: ToolContext
    ) -> list[Hit]:
        """Search."""
        seen.append((query, filters, hit, order, ctx.idempotency_key))
        return [hit, Hit(title=query.upper(), score=filters.tags.count("x"))]

    arguments = {
        "query": "pen",
        "filters": {"tags": ["x", "y", "x"], "color": "blue"},
        "hit": {"title": "first"},
        "order": "desc",
    }
    provider = ScriptedProvider(
        [Reply(tool_calls=(("search", arguments),)), Reply(content="Found two.")]
    )
    agent = Agent.create("typed", provider=provider, runtime=runtime, tools=[search])
    result = agent.invoke("find pens", wait_seconds=30)
    assert (result.status.value, result.output) == ("completed", "Found two.")
    [(query, filters, hit, order, key)] = seen
    assert (query, order) == ("pen", "desc")
    assert filters == Filters(tags=["x", "y", "x"], color=Color.BLUE)
    assert hit == Hit(title="first", score=0.0)
    assert key.startswith("tool-")
    # the typed result went back to the LLM as JSON
    tool_message = provider.requests[1].messages[-1]
    assert tool_message.role == "tool"
    assert tool_message.content == (
        '[{"score": 0.0, "title": "first"}, {"score": 2.0, "title": "PEN"}]'
    )
    assert provider.requests[0].tools[0].parameters == search.parameters


def test_arguments_a_pydantic_validator_refuses_fail_the_call_and_the_llm_is_told(
    store: Any, runtime: Any
) -> None:
    class Positive(pydantic.BaseModel):
        n: int

        @pydantic.field_validator("n")
        @classmethod
        def positive(cls, value: int) -> int:
            if value <= 0:
                raise ValueError("n must be positive")
            return value

    ran: list[Any] = []

    def count(item: Positive) -> int:
        ran.append(item)
        return item.n

    counted = Tool.from_function(count, name="count")
    provider = ScriptedProvider(
        [Reply(tool_calls=(("count", {"item": {"n": -1}}),)), Reply(content="It failed.")]
    )
    agent = Agent.create("refused", provider=provider, runtime=runtime, tools=[counted])
    assert agent.invoke("count", wait_seconds=30).output == "It failed."
    assert ran == []
    told = provider.requests[1].messages[-1].content or ""
    assert told.startswith("Error: ToolArgumentsError: invalid arguments for tool 'count': item:")
    assert "n must be positive" in told


def test_union_arguments_convert_to_the_member_their_json_is_of() -> None:
    got: list[Any] = []

    def f(a: Filters | int, b: float | str, c: Color | None = None) -> tuple[Any, ...]:
        got.append((a, b, c))
        return (a, {b}, c)  # a tuple, a set, an attrs instance and an enum come back as JSON

    typed = Tool.from_function(f)
    assert typed.fn({"a": {"tags": ["t"]}, "b": 2, "c": "red"}, None) == [
        {"tags": ["t"], "color": None},
        [2.0],
        "red",
    ]
    typed.fn({"a": 7, "b": "two"}, None)
    assert got == [(Filters(tags=["t"]), 2.0, Color.RED), (7, "two", None)]
    assert type(got[0][1]) is float
