"""The scenarios of the crash matrix (issue 6 item 5): the agents, their scripted LLM
answers and how the driver behaves.

Eight scenarios, as the issue lists them: a plain answer, a tool cycle (two rounds), parallel
tools, approval granted, approval rejected, cancellation, timeout and handoff. Every
scripted tool call carries a unique ``ref`` argument, so a logical tool call is
recognisable in the effects log whatever its idempotency key (``crash_checks``
``duplicate_effects``). The provider is deterministic across processes
(:class:`~phronomy_fsm.agent.providers.ScriptedProvider` answers by the number of
assistant messages), so a recovered execution gets the same answers.

Used by ``crash_app.py`` (which runs them) and ``crash_matrix.py`` (which lists them).
"""

from __future__ import annotations

from typing import Any

import attrs

from phronomy_fsm.agent import Reply
from phronomy_fsm.agent.tools import Authorization, ToolCallView


@attrs.frozen
class AgentDef:
    """One agent of a scenario: its id, its LLM script and its handoff tools.

    ``guarded`` agents also run an input filter, an output filter and an approval
    policy — each offloaded to the pool, so their ``offload:*:after`` points exist;
    unguarded agents take the library's shortcut (empty filter chains and tool-level
    approval are decided without the pool)."""

    agent_id: str
    script: tuple[Reply, ...]
    handoffs: dict[str, str] = attrs.field(factory=dict)
    guarded: bool = False


@attrs.frozen
class Scenario:
    """A scenario: its agents (the first one is invoked), the input, and how the
    driver behaves (``approve``: decision on approval requests; ``cancel_on_tool``:
    cancel once the ``wait_for_cancel`` tool has started; ``timeout_seconds``)."""

    name: str
    agents: tuple[AgentDef, ...]
    input: str
    approve: bool = True
    cancel_on_tool: bool = False
    timeout_seconds: float | None = None

    @property
    def execution_id(self) -> str:
        """The id of the execution ``run`` starts (deterministic)."""
        return f"exec-{self.name}"


def _call(tool: str, **arguments: Any) -> tuple[str, dict[str, Any]]:
    return (tool, arguments)


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            "plain_answer",
            (AgentDef("plain", (Reply(content="The answer is 42."),)),),
            "What is the answer?",
        ),
        Scenario(
            "tool_cycle",
            (
                AgentDef(
                    "cycle",
                    (
                        Reply(tool_calls=(_call("append_note", ref="cycle-1"),)),
                        Reply(
                            content="Noted once.", tool_calls=(_call("append_note", ref="cycle-2"),)
                        ),
                        Reply(content="Both notes are written."),
                    ),
                    guarded=True,
                ),
            ),
            "Write two notes.",
        ),
        Scenario(
            "parallel_tools",
            (
                AgentDef(
                    "parallel",
                    (
                        Reply(
                            tool_calls=(
                                _call("append_note", ref="par-a"),
                                _call("charge", ref="par-b", amount=5),
                            )
                        ),
                        Reply(content="Noted and charged."),
                    ),
                ),
            ),
            "Note it and charge 5.",
        ),
        Scenario(
            "approval_granted",
            (
                AgentDef(
                    "granted",
                    (
                        Reply(tool_calls=(_call("transfer", ref="appr-1", amount=100),)),
                        Reply(content="Transferred."),
                    ),
                    guarded=True,
                ),
            ),
            "Transfer 100.",
        ),
        Scenario(
            "approval_rejected",
            (
                AgentDef(
                    "rejected",
                    (
                        Reply(tool_calls=(_call("transfer", ref="rej-1", amount=100),)),
                        Reply(content="Transferred."),
                    ),
                ),
            ),
            "Transfer 100.",
            approve=False,
        ),
        Scenario(
            "cancellation",
            (
                AgentDef(
                    "cancel",
                    (
                        Reply(tool_calls=(_call("wait_for_cancel", ref="cancel-1"),)),
                        Reply(content="Waited."),
                    ),
                ),
            ),
            "Wait for me.",
            cancel_on_tool=True,
        ),
        Scenario(
            "timeout",
            (
                AgentDef(
                    "timeout",
                    (
                        Reply(tool_calls=(_call("wait_for_cancel", ref="timeout-1"),)),
                        Reply(content="Waited."),
                    ),
                ),
            ),
            "Wait too long.",
            timeout_seconds=1.5,
        ),
        Scenario(
            "handoff",
            (
                AgentDef(
                    "front",
                    (Reply(tool_calls=(_call("to_billing", message="Refund order 7."),)),),
                    {"to_billing": "billing"},
                    guarded=True,
                ),
                AgentDef(
                    "billing",
                    (
                        Reply(tool_calls=(_call("append_note", ref="billing-1"),)),
                        Reply(content="Refund noted."),
                    ),
                ),
            ),
            "I want a refund for order 7.",
        ),
    )
}


def _normalize_spaces(text: str) -> str:
    return " ".join(text.split())


def _redact(text: str) -> str:
    return text.replace("secret", "[redacted]")


def _policy(view: ToolCallView) -> Authorization:
    return Authorization.REQUIRE_APPROVAL if view.requires_approval else Authorization.ALLOW


#: The options of a guarded agent (see :class:`AgentDef`).
GUARDS: dict[str, Any] = {
    "input_filters": (_normalize_spaces,),
    "output_filters": (_redact,),
    "approval_policy": _policy,
}
