"""Tools: name, description, JSON-schema arguments, approval, re-send policy and the
idempotency key.

A :class:`Tool` wraps a function ``fn(arguments, context)`` run on an offload-pool
worker, in a ``tool_call`` child execution that the agent's ``tool_dispatch`` barrier
started (``docs/agent.md``, "Tools"). ``context.idempotency_key`` is the tool invocation
id: stable for one tool call of one LLM response of one execution, across restarts, so a
tool with side effects can deduplicate. ``Tool.effect`` says what recovery may do when a
crash leaves it unknown whether the tool ran (``docs/semantics.md``, "Effects"):
``at_most_once`` (the default: an operator decides), ``idempotent`` (run again with the
same key) or ``pure`` (a read: run again).

Arguments are validated against the tool's JSON schema (Draft 2020-12, by the compiled
validator of jsonschema-rs) before authorization; invalid arguments make that tool call fail with a message the LLM
sees as the tool result.

A **typed tool** (:meth:`Tool.from_function`, or :func:`tool` on a function with typed
parameters) is made from an annotated function: its parameters become the schema
(:mod:`phronomy_fsm.agent.typed`), its docstring the description, and on the worker the
validated JSON arguments are converted to the annotated types before the call
(``docs/agent.md``, "Typed tools").
"""

from __future__ import annotations

import enum
import hashlib
import inspect
import json
import re
import typing
from collections.abc import Callable
from typing import Any

import attrs
import jsonschema_rs

from phronomy_fsm.agent.typed import CONVERTER as _CONVERTER
from phronomy_fsm.agent.typed import describe, parameters_schema, to_json
from phronomy_fsm.agent.types import ToolSpec
from phronomy_fsm.durable.codec import dumps, ensure_json
from phronomy_fsm.durable.records import EffectKind
from phronomy_fsm.errors import (
    ConfigurationError,
    SerializationError,
    ToolArgumentsError,
    TypeSchemaError,
)
from phronomy_fsm.runtime.cancellation import CancellationToken

#: Default of the agent option ``max_tool_result_bytes``: the most UTF-8 bytes of a
#: tool result's text (or of a tool's error) that are journaled and sent to the LLM
#: (docs/getting-started.md "Tools and approval").
DEFAULT_MAX_TOOL_RESULT_BYTES = 256 * 1024

DEFAULT_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {},
    "additionalProperties": True,
}


@attrs.frozen
class ToolContext:
    """What a tool function receives besides its arguments.

    ``idempotency_key`` equals ``tool_invocation_id``; ``cancellation`` is set when the
    execution is cancelled or runs past its deadline (the tool is never interrupted; it
    may poll it or register ``on_cancel``); ``attempt`` is 1, or more when recovery
    runs an ``idempotent`` tool again (or an operator asked for a retry)."""

    tool_invocation_id: str
    tool_call_id: str
    execution_id: str
    agent_id: str
    cancellation: CancellationToken
    attempt: int = 1

    @property
    def idempotency_key(self) -> str:
        """The stable key of this tool call (the tool invocation id)."""
        return self.tool_invocation_id


class Authorization(enum.StrEnum):
    """An approval policy's decision for one tool call (``docs/agent.md``, "Approval")."""

    ALLOW = "allow"
    REQUIRE_APPROVAL = "require_approval"
    DENY = "deny"


@attrs.frozen
class ToolCallView:
    """What an approval policy sees: the tool, the parsed arguments and the ids."""

    tool_name: str
    arguments: Any
    tool_call_id: str
    tool_invocation_id: str
    execution_id: str
    requires_approval: bool


ApprovalPolicy = Callable[[ToolCallView], "Authorization | str | bool"]


def _effect_kind(value: Any) -> EffectKind:
    """An :class:`EffectKind` from itself or its value. Raises ConfigurationError."""
    try:
        return EffectKind(value)
    except ValueError:
        raise ConfigurationError(
            f"effect must be one of {', '.join(k.value for k in EffectKind)}, got {value!r}"
        ) from None


@attrs.frozen
class Tool:
    """A tool the LLM may call.

    Args:
        name: the function name the LLM uses (``[A-Za-z0-9_-]{1,64}``).
        fn: ``fn(arguments: dict, context: ToolContext) -> JSON`` — runs on a worker.
        description: told to the LLM.
        parameters: JSON schema of the arguments object.
        requires_approval: a person must approve each call (unless an agent-level
            approval policy decides otherwise).
        effect: what recovery may do when a crash leaves it unknown whether a call
            ran: ``at_most_once`` (default; an operator answers), ``idempotent`` (the
            tool deduplicates by ``context.idempotency_key``: it is called again with
            the same key) or ``pure`` (it changes nothing: called again). An
            :class:`~phronomy_fsm.durable.records.EffectKind` or its value.

    Raises:
        ConfigurationError: bad name, an invalid JSON schema or an unknown effect.
    """

    name: str
    fn: Callable[[Any, ToolContext], Any] = attrs.field(eq=False)
    description: str = ""
    parameters: dict[str, Any] = attrs.field(factory=lambda: dict(DEFAULT_PARAMETERS))
    requires_approval: bool = False
    effect: EffectKind = attrs.field(default=EffectKind.AT_MOST_ONCE, converter=_effect_kind)
    _validator: Any = attrs.field(init=False, eq=False, repr=False, default=None)

    def __attrs_post_init__(self) -> None:
        import re

        if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", self.name):
            raise ConfigurationError(
                f"tool name {self.name!r} must be 1-64 characters of letters, digits, '_' or '-'"
            )
        # Arguments are checked on the dispatcher loop for every call, so they are
        # validated by jsonschema-rs's compiled validator (100-300 times faster than the
        # pure-Python jsonschema: python tools/bench.py tool_arguments). Compiling checks
        # the schema against the Draft 2020-12 metaschema first.
        try:
            validator = jsonschema_rs.Draft202012Validator(self.parameters)
        except jsonschema_rs.ValidationError as exc:
            where = "/".join(map(str, exc.instance_path))
            raise ConfigurationError(
                f"tool {self.name!r}: invalid JSON schema: {exc.message}"
                + (f" (at {where})" if where else "")
            ) from exc
        except jsonschema_rs.ReferencingError as exc:
            raise ConfigurationError(
                f"tool {self.name!r}: JSON schema cannot be compiled: {exc}"
            ) from exc
        object.__setattr__(self, "_validator", validator)

    @classmethod
    def from_function(
        cls,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        requires_approval: bool = False,
        effect: EffectKind | str = EffectKind.AT_MOST_ONCE,
    ) -> Tool:
        """A typed tool made from an annotated function (``docs/agent.md``, "Typed
        tools").

        Each parameter becomes a property of the arguments object, typed by its
        annotation (the kinds :mod:`phronomy_fsm.agent.typed` supports), required
        unless it has a default (a JSON scalar default is written into the schema);
        one parameter annotated :class:`ToolContext` receives the context instead.
        The description is the docstring's first paragraph and each property's
        description its line in an ``Args:`` section. On the worker the arguments
        are converted to the annotated types (cattrs; ``model_validate`` for
        Pydantic models) and ``fn`` is called with them as keywords; what it returns
        is turned back into JSON (attrs instances, Pydantic models, enums).

        Args:
            fn: the function; its name is the tool's unless ``name`` is given.
            name, description, requires_approval, effect: as for :class:`Tool`.

        Raises:
            TypeSchemaError: a parameter has no annotation, an annotation has no JSON
                Schema, or the function takes ``*args``/``**kwargs`` or a positional-
                only parameter (the message names the parameter).
            ConfigurationError: as for :class:`Tool`.
        """
        tool_name = name or getattr(fn, "__name__", "") or ""
        schema, call = _typed_call(fn, tool_name)
        return cls(
            tool_name,
            call,
            description if description is not None else doc_summary(fn),
            schema,
            requires_approval,
            _effect_kind(effect),
        )

    def spec(self) -> ToolSpec:
        """What the LLM is told about this tool."""
        return ToolSpec(self.name, self.description, self.parameters)

    def validate(self, arguments_json: str) -> tuple[Any, str | None]:
        """Parse and validate arguments; return ``(arguments, None)`` or
        ``(None, message)`` where the message tells the LLM what was wrong."""
        try:
            arguments = json.loads(arguments_json) if arguments_json.strip() else {}
        except ValueError as exc:
            return None, f"invalid arguments for tool {self.name!r}: not JSON ({exc})"
        try:
            ensure_json(arguments)  # e.g. an integer beyond 64 bits, a lone surrogate
        except SerializationError as exc:
            return None, f"invalid arguments for tool {self.name!r}: {exc}"
        if self._validator.is_valid(arguments):
            return arguments, None
        errors = sorted(
            self._validator.iter_errors(arguments), key=lambda e: list(map(str, e.instance_path))
        )
        details = "; ".join(
            f"{'/'.join(map(str, e.instance_path)) or '(root)'}: {e.message}" for e in errors[:5]
        )
        return None, f"invalid arguments for tool {self.name!r}: {details}"


@typing.overload
def tool(name: Callable[..., Any], /) -> Tool: ...


@typing.overload
def tool(
    name: str | None = None,
    *,
    description: str | None = None,
    parameters: dict[str, Any] | None = None,
    requires_approval: bool = False,
    effect: EffectKind | str = EffectKind.AT_MOST_ONCE,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    name: str | Callable[..., Any] | None = None,
    *,
    description: str | None = None,
    parameters: dict[str, Any] | None = None,
    requires_approval: bool = False,
    effect: EffectKind | str = EffectKind.AT_MOST_ONCE,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Decorator: make a :class:`Tool` of a function, as ``@tool`` or ``@tool(...)``.

    A function of the plain form — exactly ``(arguments, context)`` with neither
    annotated beyond ``dict``/``Any``/``ToolContext`` — or any function given explicit
    ``parameters`` is wrapped as it is: ``fn(arguments, context)``, with
    ``parameters`` (default: any object) as its schema. Any other function is a typed
    tool (:meth:`Tool.from_function`). The name defaults to the function's name and
    the description to its docstring (the first paragraph for a typed tool); the
    other arguments are :class:`Tool`'s (``docs/agent.md``, "Typed tools").

    Raises:
        TypeSchemaError: a typed tool's parameter cannot be described (see
            :meth:`Tool.from_function`).
        ConfigurationError: as for :class:`Tool`.
    """
    if callable(name):  # bare @tool
        return tool()(name)
    tool_name = name

    def make(fn: Callable[..., Any]) -> Tool:
        if parameters is None and not is_plain_tool_function(fn):
            return Tool.from_function(
                fn,
                name=tool_name,
                description=description,
                requires_approval=requires_approval,
                effect=effect,
            )
        return Tool(
            tool_name or fn.__name__,
            fn,
            description if description is not None else (fn.__doc__ or "").strip(),
            parameters if parameters is not None else dict(DEFAULT_PARAMETERS),
            requires_approval,
            _effect_kind(effect),
        )

    return make


_PLAIN_ARGUMENTS = (inspect.Parameter.empty, Any, dict, "Any", "dict", "dict[str, Any]")
_PLAIN_CONTEXT = (inspect.Parameter.empty, Any, "Any", "ToolContext")


def is_plain_tool_function(fn: Callable[..., Any]) -> bool:
    """True when ``fn`` has the plain tool form ``fn(arguments, context)``: exactly two
    positional parameters without defaults, the first unannotated or annotated
    ``dict``/``dict[str, Any]``/``Any``, the second unannotated or annotated
    ``ToolContext``/``Any`` (``docs/agent.md``, "Typed tools")."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return True  # a builtin or C callable: nothing to derive a schema from
    if len(params) != 2 or any(
        p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) or p.default is not p.empty
        for p in params
    ):
        return False
    first, second = (p.annotation for p in params)
    first_plain = (
        first in _PLAIN_ARGUMENTS
        or typing.get_origin(first) is dict
        and (typing.get_args(first) in ((str, Any),))
    )
    return first_plain and (second in _PLAIN_CONTEXT or second is ToolContext)


def doc_summary(fn: Callable[..., Any]) -> str:
    """The first paragraph of ``fn``'s docstring, its lines joined by spaces ("" for
    none)."""
    doc = inspect.getdoc(fn) or ""
    paragraph = doc.strip().split("\n\n", 1)[0]
    return " ".join(line.strip() for line in paragraph.splitlines()).strip()


_SECTION = re.compile(r"^(Args|Arguments|Parameters|Params):\s*$")
_ENTRY = re.compile(r"^(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


def doc_arguments(fn: Callable[..., Any]) -> dict[str, str]:
    """Parameter name → description, from a Google-style ``Args:`` section of ``fn``'s
    docstring (``name: text`` or ``name (type): text``, continued on more indented
    lines); empty when there is none."""
    lines = (inspect.getdoc(fn) or "").splitlines()
    out: dict[str, str] = {}
    inside, indent, current = False, None, None
    for line in lines:
        if not inside:
            inside = bool(_SECTION.match(line.strip())) and not line.startswith(" ")
            continue
        if not line.strip():
            current = None
            continue
        width = len(line) - len(line.lstrip())
        if width == 0:  # the next section
            break
        if indent is None:
            indent = width
        entry = _ENTRY.match(line.strip())
        if width == indent and entry:
            current = entry.group(1)
            out[current] = entry.group(2).strip()
        elif current is not None and width > indent:
            out[current] = (out[current] + " " + line.strip()).strip()
    return out


def resolved_hints(fn: Callable[..., Any]) -> dict[str, Any]:
    """``fn``'s annotations resolved to types. Names a string annotation cannot find
    in ``fn``'s module (types defined in the function that defines ``fn``, under
    ``from __future__ import annotations``) are looked up in the locals of the frames
    that are defining the tool, innermost first — as Pydantic resolves a model
    defined in a function. Raises NameError when none has them."""
    try:
        return typing.get_type_hints(fn)
    except NameError as exc:
        first = exc
    current = inspect.currentframe()
    frame = current.f_back if current is not None else None  # the caller's
    for _ in range(8):
        frame = frame.f_back if frame is not None else None
        if frame is None:
            break
        try:
            return typing.get_type_hints(fn, localns=dict(frame.f_locals))
        except NameError:
            continue
    raise first


def _typed_call(
    fn: Callable[..., Any], tool_name: str
) -> tuple[dict[str, Any], Callable[[Any, ToolContext], Any]]:
    """The arguments schema of typed tool ``fn`` and the ``(arguments, context)``
    function that converts the arguments and calls it. Raises TypeSchemaError."""
    where = f"tool {tool_name!r}"
    if not callable(fn):
        raise TypeSchemaError(f"{where}: {fn!r} is not a function", where=where, annotation="")
    try:
        signature = inspect.signature(fn)
        hints = resolved_hints(fn)
    except (NameError, TypeError, ValueError) as exc:
        raise TypeSchemaError(
            f"{where}: the annotations of {getattr(fn, '__qualname__', fn)!r} cannot be "
            f"resolved ({exc}); define the types it names at module level",
            where=where,
            annotation="",
        ) from exc
    context_name: str | None = None
    params: list[tuple[str, Any, bool, Any, str | None]] = []
    described = doc_arguments(fn)
    for param in signature.parameters.values():
        at = f"{where}, parameter {param.name!r}"
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
            raise TypeSchemaError(
                f"{at}: a typed tool is called with keyword arguments, so *args, **kwargs "
                "and positional-only parameters cannot be filled; name each argument",
                where=at,
                annotation=str(param.kind),
            )
        hint = hints.get(param.name, inspect.Parameter.empty)
        if hint is inspect.Parameter.empty:
            raise TypeSchemaError(
                f"{at} has no annotation; annotate it (str, int, list[str], an attrs "
                "class...) so its JSON Schema can be derived",
                where=at,
                annotation="",
            )
        if hint is ToolContext:
            if context_name is not None:
                raise TypeSchemaError(
                    f"{at}: only one parameter may receive the ToolContext",
                    where=at,
                    annotation="ToolContext",
                )
            context_name = param.name
            continue
        required = param.default is inspect.Parameter.empty
        params.append((param.name, hint, required, param.default, described.get(param.name)))
    schema = parameters_schema(params, where=where)
    types_by_name = {name: hint for name, hint, *_ in params}

    def call(arguments: Any, context: ToolContext) -> Any:
        given = arguments if isinstance(arguments, dict) else {}
        kwargs: dict[str, Any] = {}
        for key, value in given.items():
            try:
                kwargs[key] = _CONVERTER.structure(value, types_by_name[key])
            except Exception as exc:
                raise ToolArgumentsError(
                    f"invalid arguments for tool {tool_name!r}: {key}: {describe(exc)}",
                    tool_name=tool_name,
                    parameter=key,
                ) from exc
        if context_name is not None:
            kwargs[context_name] = context
        return to_json(fn(**kwargs))

    call.__name__ = getattr(fn, "__name__", tool_name)
    call.__doc__ = getattr(fn, "__doc__", None)
    call.__wrapped__ = fn  # type: ignore[attr-defined]
    return schema, call


def arguments_sha256(arguments: Any) -> str:
    """The sha256 (64 hex digits) of the canonical JSON of a tool call's parsed
    ``arguments`` (sorted keys, compact: :func:`phronomy_fsm.durable.codec.dumps`), the
    hash an approval is bound to (``docs/agent.md``, "Approval"). Pure.

    Raises:
        SerializationError: ``arguments`` is not JSON data.
    """
    return hashlib.sha256(dumps(arguments)).hexdigest()


def normalize_authorization(value: Any) -> Authorization:
    """Turn a policy's answer into an :class:`Authorization`: ``True`` → allow,
    ``False`` → deny, a string or enum member as named.

    Raises ConfigurationError for anything else."""
    if isinstance(value, Authorization):
        return value
    if value is True:
        return Authorization.ALLOW
    if value is False:
        return Authorization.DENY
    try:
        return Authorization(value)
    except ValueError:
        raise ConfigurationError(
            f"approval policy returned {value!r}; return 'allow', 'require_approval', 'deny' or a bool"
        ) from None


@attrs.frozen
class ToolResult:
    """What a tool call produced, as the agent records it (the ``execution_completed``
    payload of the ``tool_invocation`` machine).

    ``value`` is the JSON result — or, when its text was longer than the agent's
    ``max_tool_result_bytes``, the kept text itself (a string); ``content`` is the
    text the LLM sees; ``original_bytes`` is the UTF-8 size of the whole text when it
    was cut, else None (it is journaled with the ``tool_result`` record)."""

    value: Any
    content: str
    original_bytes: int | None = None


def cap_text(
    text: str, max_bytes: int | None, what: str = "the tool returned"
) -> tuple[str, int | None]:
    """``(text, None)`` when ``text`` fits in ``max_bytes`` UTF-8 bytes (or there is no
    cap); otherwise ``(kept, original_bytes)``: the longest prefix of at most
    ``max_bytes`` bytes that ends on a character boundary, then a note saying how much
    there was (``[truncated: the tool returned N bytes; the first M are kept
    (max_tool_result_bytes=...)]``). Pure. Issue 11 item 10c.

    Args:
        text: valid Unicode (no lone surrogates).
        max_bytes: the cap in bytes, or None for none.
        what: how the note names the source (``the tool returned``, ``the tool's
            error was``).
    """
    if max_bytes is None or len(text) * 4 <= max_bytes:  # cannot exceed: no encoding
        return text, None
    encoded = text.encode("utf-8")
    if len(encoded) <= max_bytes:
        return text, None
    kept = encoded[:max_bytes].decode("utf-8", "ignore")
    note = (
        f"\n[truncated: {what} {len(encoded)} bytes; the first {len(kept.encode('utf-8'))} "
        f"are kept (max_tool_result_bytes={max_bytes})]"
    )
    return kept + note, len(encoded)


def capped_result(result: Any, max_bytes: int | None) -> ToolResult:
    """The :class:`ToolResult` of a tool's JSON ``result`` under the cap
    ``max_bytes`` (None: no cap): its text (:func:`tool_result_text`) is measured in
    UTF-8 bytes and, when longer, replaced by :func:`cap_text`'s kept prefix and note,
    which then stands for the result everywhere (journal, LLM). Runs on a worker."""
    text = tool_result_text(result)
    kept, original = cap_text(text, max_bytes)
    if original is None:
        return ToolResult(result, text)
    return ToolResult(kept, kept, original)


def tool_result_text(result: Any) -> str:
    """The text the LLM sees for a tool result (strings as they are, else JSON)."""
    if isinstance(result, str):
        return result
    try:
        return json.dumps(result, sort_keys=True, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(result)
