"""MCP tools: an agent takes the tools of any MCP server, over stdio or streamable HTTP.

This module owns the declaration of an MCP server (:class:`McpServer`), the listing of
its tools (:class:`McpToolInfo`) and the turning of each into a phronomy
:class:`~phronomy_fsm.agent.tools.Tool` whose function calls the server through the
official ``mcp`` Python SDK (the optional extra ``mcp``: ``pip install
'phronomy-fsm[mcp]'``). It owns nothing of how a call runs: an MCP tool call is a tool
call like any other — validated against the server's input schema, authorized by the
approval policy, approved where it says (bound to the hash of its arguments), announced
by the ``tool_dispatch`` commit, run as a ``tool_call`` child execution and journaled
(``docs/agent.md``, "MCP tools").

Every call opens its own connection (a stdio server is started for it; an HTTP server
is reached anew) and closes it when the call returns, so a process that crashed during
a call reconnects by simply calling again, and recovery follows the tool's effect kind
(``docs/agent.md``, "Re-send policies"): from the server's annotations —
``readOnlyHint`` → ``pure``, ``idempotentHint`` → ``idempotent``, otherwise
``at_most_once`` — unless the declaration overrides it per tool.

The SDK is imported only when a server is listed or called, so importing this module
costs nothing when MCP is not used.
"""

from __future__ import annotations

import asyncio
import enum
import re
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from phronomy_fsm.agent.tools import Tool, ToolContext
from phronomy_fsm.durable.records import EffectKind
from phronomy_fsm.errors import ConfigurationError, McpError

if TYPE_CHECKING:  # the SDK is optional: only its types are needed here
    from mcp import Client

#: The ``_meta`` keys of every ``tools/call`` request: what a server may use to
#: deduplicate a repeated call (the idempotency key is stable across restarts).
META_IDEMPOTENCY_KEY = "io.phronomy/idempotency_key"
META_TOOL_INVOCATION_ID = "io.phronomy/tool_invocation_id"
META_EXECUTION_ID = "io.phronomy/execution_id"
META_AGENT_ID = "io.phronomy/agent_id"
META_ATTEMPT = "io.phronomy/attempt"

_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


class McpTransport(enum.StrEnum):
    """How an MCP server is reached: ``stdio`` (a command started per call) or
    ``http`` (streamable HTTP at a URL)."""

    STDIO = "stdio"
    HTTP = "http"


@attrs.frozen
class McpToolInfo:
    """One tool as an MCP server lists it.

    Attributes:
        name: the server's name for it (what ``tools/call`` is sent with).
        description: told to the LLM ("" when the server gives none).
        input_schema: the JSON schema of its arguments object.
        read_only: the ``readOnlyHint`` annotation (None when absent).
        idempotent: the ``idempotentHint`` annotation (None when absent).
    """

    name: str
    description: str = ""
    input_schema: Mapping[str, Any] = attrs.field(factory=dict)
    read_only: bool | None = None
    idempotent: bool | None = None

    def effect(self) -> EffectKind:
        """The effect kind its annotations say: ``pure`` when read-only,
        ``idempotent`` when idempotent, else ``at_most_once``."""
        if self.read_only:
            return EffectKind.PURE
        if self.idempotent:
            return EffectKind.IDEMPOTENT
        return EffectKind.AT_MOST_ONCE

    def to_json(self) -> dict[str, Any]:
        """JSON data of this listing entry (:meth:`from_json` reads it back)."""
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": dict(self.input_schema),
            "read_only": self.read_only,
            "idempotent": self.idempotent,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> McpToolInfo:
        """The entry :meth:`to_json` wrote. Raises ConfigurationError on bad data."""
        try:
            return cls(
                str(data["name"]),
                str(data.get("description") or ""),
                dict(data.get("input_schema") or {}),
                data.get("read_only"),
                data.get("idempotent"),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigurationError(f"not an MCP tool listing entry: {data!r} ({exc})") from exc


def _effects(value: Mapping[str, Any] | None) -> Mapping[str, EffectKind]:
    result: dict[str, EffectKind] = {}
    for name, kind in dict(value or {}).items():
        try:
            result[str(name)] = EffectKind(kind)
        except ValueError:
            raise ConfigurationError(
                f"MCP tool {name!r}: effect must be one of "
                f"{', '.join(k.value for k in EffectKind)}, got {kind!r}"
            ) from None
    return result


@attrs.frozen
class McpServer:
    """An MCP server whose tools an agent takes (``docs/agent.md``, "MCP tools").

    Make one with :meth:`stdio` or :meth:`http`; pass it to the agent as
    ``mcp_servers=[...]`` (``Agent.create`` / ``Agent.load``), which lists its tools
    once, when the agent's configuration is built, or turn its tools into
    :class:`~phronomy_fsm.agent.tools.Tool` objects yourself with :meth:`tools`.

    Attributes:
        transport: :class:`McpTransport`.
        command / args / env / cwd: the stdio server's command line, extra environment
            variables (over the SDK's default environment) and working directory.
        url: the streamable HTTP endpoint (``http://127.0.0.1:8000/mcp``).
        prefix: put before each tool's name for the LLM (``"files_"``): keeps the tools
            of several servers apart.
        effects: MCP tool name → effect kind, overriding what its annotations say.
        requires_approval: True (every tool of the server), False, or the MCP names of
            the tools a person must approve.
        timeout_seconds: the most seconds one listing or call may take, connecting
            included (a call past it fails with McpError).
    """

    transport: McpTransport
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] | None = None
    cwd: str | None = None
    url: str | None = None
    prefix: str = ""
    effects: Mapping[str, EffectKind] = attrs.field(factory=dict, converter=_effects)
    requires_approval: bool | frozenset[str] = False
    timeout_seconds: float = 60.0

    def __attrs_post_init__(self) -> None:
        if self.transport is McpTransport.STDIO and not self.command:
            raise ConfigurationError("an MCP stdio server needs a command to start it")
        if self.transport is McpTransport.HTTP and not (
            isinstance(self.url, str) and re.match(r"https?://", self.url)
        ):
            raise ConfigurationError(
                f"an MCP HTTP server needs an http:// or https:// URL, got {self.url!r}"
            )
        if self.prefix and not re.fullmatch(r"[A-Za-z0-9_-]{1,32}", self.prefix):
            raise ConfigurationError(
                f"MCP tool prefix {self.prefix!r} must be 1-32 letters, digits, '_' or '-'"
            )
        if not (isinstance(self.timeout_seconds, (int, float)) and self.timeout_seconds > 0):
            raise ConfigurationError(
                f"timeout_seconds must be a positive number of seconds, got {self.timeout_seconds!r}"
            )

    @classmethod
    def stdio(
        cls,
        command: str,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        *,
        cwd: str | None = None,
        prefix: str = "",
        effects: Mapping[str, EffectKind | str] | None = None,
        requires_approval: bool | Collection[str] = False,
        timeout_seconds: float = 60.0,
    ) -> McpServer:
        """A server started as ``command args...`` that speaks MCP on its stdin and
        stdout (one process per listing and per call). The other arguments are the
        attributes of the class. Raises ConfigurationError."""
        return cls(
            McpTransport.STDIO,
            command=command,
            args=tuple(str(a) for a in args),
            env=None if env is None else dict(env),
            cwd=cwd,
            prefix=prefix,
            effects=effects or {},  # type: ignore[arg-type]  # converted
            requires_approval=_approval(requires_approval),
            timeout_seconds=timeout_seconds,
        )

    @classmethod
    def http(
        cls,
        url: str,
        *,
        prefix: str = "",
        effects: Mapping[str, EffectKind | str] | None = None,
        requires_approval: bool | Collection[str] = False,
        timeout_seconds: float = 60.0,
    ) -> McpServer:
        """A server reached over streamable HTTP at ``url``. The other arguments are
        the attributes of the class. Raises ConfigurationError."""
        return cls(
            McpTransport.HTTP,
            url=url,
            prefix=prefix,
            effects=effects or {},  # type: ignore[arg-type]  # converted
            requires_approval=_approval(requires_approval),
            timeout_seconds=timeout_seconds,
        )

    def describe(self) -> str:
        """How the server is named in errors: its URL or its command line."""
        if self.transport is McpTransport.HTTP:
            return str(self.url)
        return " ".join([str(self.command), *self.args])

    # -------------------------------------------------------------- the SDK

    def _client(self) -> Client:
        try:
            from mcp import Client, StdioServerParameters
        except ImportError as exc:  # the extra is not installed
            raise McpError(
                "MCP tools need the official MCP SDK: pip install 'phronomy-fsm[mcp]'",
                server=self.describe(),
            ) from exc
        if self.transport is McpTransport.HTTP:
            return Client(str(self.url), read_timeout_seconds=self.timeout_seconds)
        params = StdioServerParameters(
            command=str(self.command),
            args=list(self.args),
            env=None if self.env is None else dict(self.env),
            cwd=self.cwd,
        )
        return Client(params, read_timeout_seconds=self.timeout_seconds)

    def _run(self, what: str, work: Any, tool_name: str | None = None) -> Any:
        """Run ``work(client)`` on a fresh connection, on this thread (an offload
        worker or the caller's: never a running event loop's)."""

        async def main() -> Any:
            async with asyncio.timeout(self.timeout_seconds):
                async with self._client() as client:
                    return await work(client)

        try:
            return asyncio.run(main())
        except McpError:
            raise
        except Exception as exc:
            raise McpError(
                f"MCP server {self.describe()} ({self.transport.value}): {what} failed: "
                f"{_reason(exc)}",
                server=self.describe(),
                tool_name=tool_name,
            ) from exc

    def list_tools(self) -> tuple[McpToolInfo, ...]:
        """Connect, list every tool the server has (all pages), disconnect.

        Raises:
            McpError: the server cannot be started or reached, does not answer within
                ``timeout_seconds``, or the SDK is not installed.
        """

        async def work(client: Client) -> tuple[McpToolInfo, ...]:
            listed: list[McpToolInfo] = []
            cursor: str | None = None
            for _page in range(1000):  # a server that pages forever is not followed
                page = await client.list_tools(cursor=cursor)
                for tool in page.tools:
                    notes = tool.annotations
                    listed.append(
                        McpToolInfo(
                            tool.name,
                            tool.description or "",
                            dict(tool.input_schema),
                            None if notes is None else notes.read_only_hint,
                            None if notes is None else notes.idempotent_hint,
                        )
                    )
                cursor = page.next_cursor
                if cursor is None:
                    break
            return tuple(listed)

        return self._run("listing its tools", work)  # type: ignore[no-any-return]

    def call_tool(
        self, name: str, arguments: Mapping[str, Any], meta: Mapping[str, Any] | None = None
    ) -> Any:
        """Call the server's tool ``name`` with ``arguments`` on a fresh connection and
        return its result as JSON: the structured content when the server gives one,
        else the text of its content blocks (joined by newlines), else the blocks as
        JSON. ``meta`` goes in the request's ``_meta``.

        Raises:
            McpError: the tool answered with an error (``isError``; the message is its
                text), the server cannot be reached or did not answer within
                ``timeout_seconds`` — the call may then have run.
        """

        async def work(client: Client) -> Any:
            sent: Any = dict(meta or {})  # RequestParamsMeta: a TypedDict open to any key
            return await client.call_tool(name, dict(arguments), meta=sent)

        result = self._run(f"calling tool {name!r}", work, name)
        if result.is_error:
            raise McpError(
                f"MCP tool {name!r} of {self.describe()} answered with an error: "
                f"{_content_text(result.content) or 'no text'}",
                server=self.describe(),
                tool_name=name,
            )
        if result.structured_content is not None:
            return result.structured_content
        return _content_value(result.content)

    # -------------------------------------------------------------- tools

    def tools(self, listing: Sequence[McpToolInfo] | None = None) -> list[Tool]:
        """The server's tools as :class:`~phronomy_fsm.agent.tools.Tool` objects:
        name (``prefix`` + the MCP name, characters outside ``[A-Za-z0-9_-]`` replaced
        by ``_``), description, input schema, effect (``effects`` over the
        annotations) and approval; each calls the server with the call's ids in
        ``_meta`` (:data:`META_IDEMPOTENCY_KEY` and the others).

        Args:
            listing: the tools as listed before (:meth:`list_tools`, perhaps kept as
                :meth:`McpToolInfo.to_json`); None: listed now.

        Raises:
            ConfigurationError: two tools get the same name, a name is too long, an
                ``effects`` or ``requires_approval`` name is not a listed tool, or a
                tool's input schema is not a valid JSON schema.
            McpError: listing failed (see :meth:`list_tools`).
        """
        infos = tuple(self.list_tools() if listing is None else listing)
        names = {info.name for info in infos}
        approval = self.requires_approval
        named = set(self.effects) | (set(approval) if isinstance(approval, frozenset) else set())
        unknown = sorted(named - names)
        if unknown:
            raise ConfigurationError(
                f"MCP server {self.describe()} lists no tool {', '.join(map(repr, unknown))} "
                f"(it lists {', '.join(sorted(names)) or 'none'})"
            )
        made: dict[str, Tool] = {}
        for info in infos:
            tool = self._tool(info)
            if tool.name in made:
                raise ConfigurationError(
                    f"MCP server {self.describe()}: tools {info.name!r} and another both "
                    f"become {tool.name!r}; give the server a prefix or rename one"
                )
            made[tool.name] = tool
        return list(made.values())

    def _tool(self, info: McpToolInfo) -> Tool:
        name = self.prefix + re.sub(r"[^A-Za-z0-9_-]", "_", info.name)
        if not _NAME.fullmatch(name):
            raise ConfigurationError(
                f"MCP tool {info.name!r} of {self.describe()} becomes {name!r}, which is not "
                "1-64 letters, digits, '_' or '-'"
            )
        approval = self.requires_approval
        needs_approval = info.name in approval if isinstance(approval, frozenset) else approval
        server, mcp_name = self, info.name

        def call(arguments: Any, context: ToolContext) -> Any:
            meta = {
                META_IDEMPOTENCY_KEY: context.idempotency_key,
                META_TOOL_INVOCATION_ID: context.tool_invocation_id,
                META_EXECUTION_ID: context.execution_id,
                META_AGENT_ID: context.agent_id,
                META_ATTEMPT: context.attempt,
            }
            return server.call_tool(mcp_name, arguments if arguments is not None else {}, meta)

        schema = dict(info.input_schema) or {"type": "object"}
        return Tool(
            name,
            call,
            info.description,
            schema,
            requires_approval=bool(needs_approval),
            effect=self.effects.get(info.name, info.effect()),
        )


def _approval(value: bool | Collection[str]) -> bool | frozenset[str]:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) or not all(isinstance(v, str) for v in value):
        raise ConfigurationError(
            f"requires_approval must be True, False or a collection of MCP tool names, got {value!r}"
        )
    return frozenset(value)


def mcp_tools(servers: Sequence[McpServer]) -> list[Tool]:
    """The tools of every server, listed now, in order (:meth:`McpServer.tools`).

    Raises:
        ConfigurationError: see :meth:`McpServer.tools`; also an item that is not an
            :class:`McpServer`.
        McpError: a server could not be listed.
    """
    tools: list[Tool] = []
    for server in servers:
        if not isinstance(server, McpServer):
            raise ConfigurationError(
                f"mcp_servers must be McpServer objects (McpServer.stdio(...) or "
                f"McpServer.http(...)), got {server!r}"
            )
        tools.extend(server.tools())
    return tools


def _reason(exc: BaseException) -> str:
    """The innermost useful text of an exception (task groups wrap the real one)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, TimeoutError):
        return "no answer in time (timeout_seconds)"
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"


def _content_text(blocks: Sequence[Any]) -> str:
    return "\n".join(
        str(getattr(b, "text", "")) for b in blocks if getattr(b, "type", "") == "text"
    )


def _content_value(blocks: Sequence[Any]) -> Any:
    """Text blocks joined by newlines; any other block kind as its JSON."""
    if all(getattr(b, "type", "") == "text" for b in blocks):
        return _content_text(blocks)
    return [b.model_dump(mode="json", by_alias=True, exclude_none=True) for b in blocks]


__all__ = [
    "META_AGENT_ID",
    "META_ATTEMPT",
    "META_EXECUTION_ID",
    "META_IDEMPOTENCY_KEY",
    "META_TOOL_INVOCATION_ID",
    "McpServer",
    "McpToolInfo",
    "McpTransport",
    "mcp_tools",
]
