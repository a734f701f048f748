"""The agent layer: LLM agents whose executions run on the durable engine.

Start here: :class:`Agent` (create or load, invoke, stream, approve, resolve, cancel),
:class:`Tool` / :func:`tool`, :class:`ScriptedProvider` / :class:`Reply`, the
OpenAI-compatible :class:`OpenAICompatibleProvider` and the Anthropic Messages
:class:`AnthropicProvider`. The events an agent delivers and
its results are typed (:mod:`phronomy_fsm.agent.events`); :meth:`Agent.events` reads an
execution's events back from the store, resumable by cursor
(:mod:`phronomy_fsm.agent.streams`). ``docs/agent.md`` describes
the behaviour; ``docs/semantics.md`` the durability rules underneath.
"""

from phronomy_fsm.agent.agent import Agent, EventStream
from phronomy_fsm.agent.anthropic import AnthropicProvider
from phronomy_fsm.agent.config import AgentConfig, ListenerErrorPolicy, LLMResend
from phronomy_fsm.agent.events import (
    AgentEvent,
    AgentResult,
    AgentStatus,
    ApprovalItem,
    ApprovalRequired,
    Cancelled,
    Done,
    EventType,
    Failed,
    HandedOff,
    RecoveryRequired,
    TimedOut,
    Token,
    ToolCalled,
    ToolResulted,
)
from phronomy_fsm.agent.openai import OpenAICompatibleProvider
from phronomy_fsm.agent.providers import Provider, Reply, ScriptedProvider
from phronomy_fsm.agent.runtime import AgentRuntime
from phronomy_fsm.agent.streams import ExecutionEvents, StoredEvent
from phronomy_fsm.agent.tools import Authorization, Tool, ToolCallView, ToolContext, tool
from phronomy_fsm.agent.types import LLMRequest, LLMResponse, Message, ToolCall, Usage

__all__ = [
    "Agent",
    "AgentConfig",
    "AgentEvent",
    "AgentResult",
    "AgentRuntime",
    "AgentStatus",
    "AnthropicProvider",
    "ApprovalItem",
    "ApprovalRequired",
    "Authorization",
    "Cancelled",
    "Done",
    "EventStream",
    "EventType",
    "ExecutionEvents",
    "Failed",
    "HandedOff",
    "LLMRequest",
    "LLMResend",
    "LLMResponse",
    "ListenerErrorPolicy",
    "Message",
    "OpenAICompatibleProvider",
    "Provider",
    "RecoveryRequired",
    "Reply",
    "ScriptedProvider",
    "StoredEvent",
    "TimedOut",
    "Token",
    "Tool",
    "ToolCall",
    "ToolCallView",
    "ToolCalled",
    "ToolContext",
    "ToolResulted",
    "Usage",
    "tool",
]
