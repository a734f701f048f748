"""The agent's ids: checked application ids, fresh random ids and the derived ones.

- :func:`check_agent_id` / :func:`check_execution_id` apply the engine's id rule
  (:func:`phronomy_fsm.durable.keys.check_id`: 1-128 printable characters, no
  whitespace, control or format characters) and raise the agent's error types;
- :func:`new_id` — an LLM call id, an approval request id (32 hex digits);
- :func:`tool_invocation_id` — one tool call's id: its child execution's id and the
  tool's idempotency key, derived so that a replay after a crash finds the same one;
- :func:`handoff_target_execution_id` — the execution a handoff starts on its target
  agent, derived so that the handoff is started once however often it is retried.

``docs/agent.md`` ("Ids") states the rules.
"""

from __future__ import annotations

import hashlib
import os
import random

from phronomy_fsm.durable.keys import check_id
from phronomy_fsm.errors import ConfigurationError, InvalidIdError, InvalidInputError

# Ids are drawn from a generator seeded from the OS's random source rather than from
# ``os.urandom`` per call: ``getrandom(2)`` releases the GIL, and on the dispatcher loop
# thread every release waits for the GIL back behind the store and worker threads. Ids
# need uniqueness, not secrecy: 128 bits from a 19937-bit state seeded with 256 OS
# bits, reseeded in a forked child so parent and child never share a stream.
_random = random.Random()


def _seed() -> None:
    _random.seed(os.urandom(32))


_seed()
os.register_at_fork(after_in_child=_seed)


def new_id() -> str:
    """A fresh random id: 32 lowercase hex digits (128 random bits, like uuid4)."""
    return f"{_random.getrandbits(128):032x}"


def check_agent_id(agent_id: object) -> str:
    """Return ``agent_id`` when it is a usable agent id, else raise
    ConfigurationError saying what an id may be (``docs/agent.md``, "Ids")."""
    try:
        return check_id(agent_id, "agent_id")
    except InvalidIdError as exc:
        raise ConfigurationError(str(exc)) from None


def check_execution_id(execution_id: object, agent_id: str) -> str:
    """Return ``execution_id`` when it is a usable execution id, else raise
    InvalidInputError (leave it out to get a random id)."""
    try:
        return check_id(execution_id, "execution_id")
    except InvalidIdError as exc:
        raise InvalidInputError(
            f"{exc}. Leave execution_id out to get a random id", agent_id=agent_id
        ) from None


def tool_invocation_id(
    execution_id: str, llm_call_id: str, tool_call_id: str, tool_name: str
) -> str:
    """The id of one tool call: ``tool-`` and 32 hex digits of
    sha256(execution, LLM call, the provider's tool-call id, tool name) — the same for
    the same call after a restart; the ``tool_call`` child execution's id and the
    tool's idempotency key."""
    raw = f"{execution_id}\x00{llm_call_id}\x00{tool_call_id}\x00{tool_name}".encode()
    return "tool-" + hashlib.sha256(raw).hexdigest()[:32]


def handoff_target_execution_id(source_execution_id: str, target_agent_id: str) -> str:
    """The execution id a handoff's target runs under: ``handoff-target-`` and 40 hex
    digits of sha256(source execution, target agent) — starting it twice finds the
    first (``docs/agent.md``, "Handoffs")."""
    raw = f"{source_execution_id}\0{target_agent_id}".encode()
    return "handoff-target-" + hashlib.sha256(raw).hexdigest()[:40]


__all__ = [
    "check_agent_id",
    "check_execution_id",
    "handoff_target_execution_id",
    "new_id",
    "tool_invocation_id",
]
