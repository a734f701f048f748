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
"""

from __future__ import annotations

import enum
import hashlib
import json
from collections.abc import Callable
from typing import Any

import attrs
import jsonschema_rs

from phronomy_fsm.agent.types import ToolSpec
from phronomy_fsm.durable.codec import dumps, ensure_json
from phronomy_fsm.durable.records import EffectKind
from phronomy_fsm.errors import ConfigurationError, SerializationError
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


def tool(
    name: str | None = None,
    *,
    description: str | None = None,
    parameters: dict[str, Any] | None = None,
    requires_approval: bool = False,
    effect: EffectKind | str = EffectKind.AT_MOST_ONCE,
) -> Callable[[Callable[[Any, ToolContext], Any]], Tool]:
    """Decorator: make a :class:`Tool` from ``fn(arguments, context)``; the name
    defaults to the function name and the description to its docstring (the other
    arguments are :class:`Tool`'s)."""

    def make(fn: Callable[[Any, ToolContext], Any]) -> Tool:
        return Tool(
            name or fn.__name__,
            fn,
            description if description is not None else (fn.__doc__ or "").strip(),
            parameters if parameters is not None else dict(DEFAULT_PARAMETERS),
            requires_approval,
            _effect_kind(effect),
        )

    return make


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
