"""Test support shipped with the package, for testing applications built on phronomy_fsm.

- :class:`StubLLMServer` (:mod:`phronomy_fsm.testing.stub_llm`): a scripted LLM
  server on a loopback address, speaking OpenAI chat completions and Anthropic
  Messages, to run :class:`~phronomy_fsm.agent.OpenAICompatibleProvider` or
  :class:`~phronomy_fsm.agent.AnthropicProvider` (and so an agent) against real HTTP
  without a real LLM; also runnable as ``python -m phronomy_fsm.testing.stub_llm``
  (``docs/getting-started.md``, "A local stub of the API").

Nothing in the library imports this package; importing it starts nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from phronomy_fsm.testing.stub_llm import ReceivedRequest, StubLLMServer

__all__ = ["ReceivedRequest", "StubLLMServer"]


def __getattr__(name: str) -> Any:
    # Imported on first use rather than here, so that ``python -m
    # phronomy_fsm.testing.stub_llm`` does not find its module imported already by its
    # package (runpy warns about that).
    if name in __all__:
        from phronomy_fsm.testing import stub_llm

        return getattr(stub_llm, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
