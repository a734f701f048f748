"""The agent layer: agents whose executions run on the generated machines (issue 5).

Start here: :class:`Agent` (create/load, invoke, stream, approve, cancel, resolve),
:class:`Tool` / :func:`tool`, :class:`ScriptedProvider` / :class:`Reply`, and the
OpenAI-compatible provider in :mod:`phronomy_fsm.agent.openai`.
"""

from phronomy_fsm.agent.agent import Agent, EventStream
from phronomy_fsm.agent.openai import OpenAICompatibleProvider
from phronomy_fsm.agent.providers import Provider, Reply, ScriptedProvider
from phronomy_fsm.agent.runtime import AgentRuntime
from phronomy_fsm.agent.tools import Authorization, Tool, ToolCallView, ToolContext, tool
from phronomy_fsm.agent.types import (
    AgentEvent,
    AgentResult,
    LLMRequest,
    LLMResponse,
    Message,
    ToolCall,
    Usage,
)

__all__ = [
    "Agent",
    "AgentEvent",
    "AgentResult",
    "AgentRuntime",
    "Authorization",
    "EventStream",
    "LLMRequest",
    "LLMResponse",
    "Message",
    "OpenAICompatibleProvider",
    "Provider",
    "Reply",
    "ScriptedProvider",
    "Tool",
    "ToolCall",
    "ToolCallView",
    "ToolContext",
    "Usage",
    "tool",
]
