"""LLM providers: the interface, and a deterministic scripted provider.

A provider is called on an offload-pool worker (never on the dispatcher loop) with an
:class:`~phronomy_fsm.agent.types.LLMRequest` and returns an
:class:`~phronomy_fsm.agent.types.LLMResponse`. Streaming providers call ``on_token`` for
each token (the agent turns them into ``token`` events). Any exception is the call's
failure (the execution's ``llm_failed`` event: ``docs/agent.md``). The OpenAI-compatible
HTTP provider lives in :mod:`phronomy_fsm.agent.openai`.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import attrs

from phronomy_fsm.agent.types import LLMRequest, LLMResponse, ToolCall, Usage
from phronomy_fsm.durable.codec import ensure_json
from phronomy_fsm.errors import ConfigurationError, LLMError, SerializationError
from phronomy_fsm.runtime.cancellation import CancellationToken

TokenSink = Callable[[str], None]


def check_response(response: LLMResponse) -> None:
    """Refuse a provider answer the agent could not record, on the worker that got it.

    ``content`` must be a string or None, each tool call's id, name and arguments
    strings, the usage counts non-negative integers, and all of it storable JSON (valid
    Unicode, integers within 64 bits): a value the store would refuse at the next
    barrier would otherwise leave an LLM call whose answer the process holds but cannot
    make durable (a bad answer fails the call here, never a commit).

    Raises:
        LLMError: the answer is malformed; the execution fails with this error.
    """
    problem = None
    if response.content is not None and not isinstance(response.content, str):
        problem = f"content must be text or null, got {type(response.content).__name__}"
    elif not isinstance(response.tool_calls, tuple) or not all(
        isinstance(c, ToolCall)
        and isinstance(c.id, str)
        and isinstance(c.name, str)
        and isinstance(c.arguments_json, str)
        for c in response.tool_calls
    ):
        problem = "tool_calls must be ToolCall(id: str, name: str, arguments_json: str) items"
    elif not isinstance(response.usage, Usage) or not all(
        type(n) is int and n >= 0
        for n in (response.usage.prompt_tokens, response.usage.completion_tokens)
    ):
        problem = f"usage must hold non-negative integer token counts, got {response.usage!r}"
    else:
        try:
            ensure_json(
                [
                    response.content,
                    response.model,
                    response.usage.prompt_tokens,
                    response.usage.completion_tokens,
                    [[c.id, c.name, c.arguments_json] for c in response.tool_calls],
                ]
            )
        except SerializationError as exc:
            problem = f"the answer cannot be recorded: {exc}"
    if problem is not None:
        raise LLMError(
            f"provider answer for call {response.llm_call_id} is malformed: {problem}",
            llm_call_id=response.llm_call_id,
        )


@runtime_checkable
class Provider(Protocol):
    """What the agent needs from an LLM provider. A provider may also have a
    ``provider_name`` string attribute, its name in traces (``gen_ai.provider.name``,
    ``docs/tracing.md``)."""

    def complete(
        self,
        request: LLMRequest,
        *,
        on_token: TokenSink | None = None,
        cancellation: CancellationToken | None = None,
    ) -> LLMResponse:
        """Run one chat completion.

        Args:
            request: messages, tools and the durable ``llm_call_id``.
            on_token: called with each streamed token when ``request.stream``.
            cancellation: set when the execution is cancelled; a provider may stop
                early by raising :class:`~phronomy_fsm.errors.Cancelled`.

        Returns:
            The response, whose ``llm_call_id`` must equal ``request.llm_call_id``.

        Raises:
            LLMError: transport, HTTP or protocol failures (any exception fails the call).

        Concurrency: called on a worker thread; may block.
        """
        ...


@attrs.frozen
class Reply:
    """One scripted LLM answer.

    Args:
        content: the assistant text (streamed token by token when streaming).
        tool_calls: ``(tool_name, arguments)`` pairs; arguments is a dict (encoded as
            JSON) or a raw string (sent as is, e.g. to script malformed JSON).
        usage: token counts to report.
        delay_seconds: real seconds to wait before answering (cancellation-aware).
        error: raise this instead of answering.
    """

    content: str | None = None
    tool_calls: tuple[tuple[str, Any], ...] = ()
    usage: Usage = attrs.field(factory=lambda: Usage(10, 5))
    delay_seconds: float = 0.0
    error: BaseException | None = None


ScriptStep = Reply | BaseException | Callable[[LLMRequest, int], "Reply | LLMResponse"]


#: How the user message that re-asks an agent for valid structured output begins
#: (``docs/agent.md``, "Structured output"); :class:`ScriptedProvider` does not count
#: such a message as a new input.
OUTPUT_RETRY_PREFIX = "Your answer is not valid output: "


def _call_index(request: LLMRequest) -> int:
    """How many assistant answers this execution already has: the number of assistant
    messages after the last user message that is not a re-ask for valid output.
    Deterministic across restarts."""
    count = 0
    for message in reversed(request.messages):
        if message.role == "user" and not (message.content or "").startswith(OUTPUT_RETRY_PREFIX):
            break
        if message.role == "assistant":
            count += 1
    return count


class ScriptedProvider:
    """A deterministic provider for tests and the demo.

    The answer to a request is ``script[i]`` where ``i`` counts the assistant messages
    after the last user message (a re-ask for valid structured output is not one: the
    re-asked answer is the next step) — so a recovered execution that repeats a call gets the
    same answer, whichever process asks. A step may be a :class:`Reply`, an exception
    (raised), or a callable ``(request, i) -> Reply | LLMResponse``. When the script is
    exhausted the last step repeats. Tool-call ids derive from the ``llm_call_id``.

    Attributes:
        requests: every request received, in order (thread-safe append).
        provider_name: ``scripted``, its name in traces (``gen_ai.provider.name``).
    """

    provider_name: str = "scripted"

    def __init__(self, script: Sequence[ScriptStep], *, model: str = "scripted") -> None:
        if not script:
            raise ConfigurationError(
                "a ScriptedProvider needs at least one step (a Reply, an error or a callable)"
            )
        self.script = list(script)
        self.model = model
        self.requests: list[LLMRequest] = []
        self._lock = threading.Lock()

    def complete(
        self,
        request: LLMRequest,
        *,
        on_token: TokenSink | None = None,
        cancellation: CancellationToken | None = None,
    ) -> LLMResponse:
        """Answer from the script (see the class docstring)."""
        with self._lock:
            self.requests.append(request)
        index = _call_index(request)
        step = self.script[min(index, len(self.script) - 1)]
        if isinstance(step, BaseException):
            raise step
        answer: Reply | LLMResponse = step if isinstance(step, Reply) else step(request, index)
        if isinstance(answer, LLMResponse):
            return attrs.evolve(answer, llm_call_id=request.llm_call_id)
        reply = answer
        if reply.delay_seconds:
            waiter = threading.Event()
            if cancellation is not None:
                cancellation.on_cancel(lambda _e: waiter.set())
            waiter.wait(reply.delay_seconds)
        if cancellation is not None:
            cancellation.raise_if_cancelled()
        if reply.error is not None:
            raise reply.error
        if request.stream and on_token is not None and reply.content:
            for token in _tokens(reply.content):
                if cancellation is not None:
                    cancellation.raise_if_cancelled()
                on_token(token)
        digest = hashlib.sha256(request.llm_call_id.encode()).hexdigest()[:10]
        calls = tuple(
            ToolCall(
                f"call_{digest}_{i}",
                name,
                args if isinstance(args, str) else json.dumps(args, sort_keys=True),
            )
            for i, (name, args) in enumerate(reply.tool_calls)
        )
        return LLMResponse(
            request.llm_call_id,
            reply.content,
            calls,
            reply.usage,
            self.model,
            "tool_calls" if calls else "stop",
        )


def _tokens(text: str) -> list[str]:
    """Split text into word-ish tokens that concatenate back to it."""
    tokens: list[str] = []
    current = ""
    for ch in text:
        current += ch
        if ch == " ":
            tokens.append(current)
            current = ""
    if current:
        tokens.append(current)
    return tokens


def failing(message: str) -> LLMError:
    """An :class:`LLMError` to put in a script (convenience)."""
    return LLMError(message)
