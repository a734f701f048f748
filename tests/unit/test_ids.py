"""The agent's ids (agent/ids.py): fresh ids well formed, unique, never shared between a
process and a child it forks (both would write to the same store); derived ids stable."""

from __future__ import annotations

import os
import re

import pytest

from phronomy_fsm.agent.ids import (
    check_agent_id,
    check_execution_id,
    handoff_target_execution_id,
    new_id,
    tool_invocation_id,
)
from phronomy_fsm.errors import ConfigurationError, InvalidInputError


def test_new_id_shape_and_uniqueness() -> None:
    ids = [new_id() for _ in range(20000)]
    assert all(re.fullmatch(r"[0-9a-f]{32}", i) for i in ids)
    assert len(set(ids)) == len(ids)


def test_forked_child_draws_different_ids() -> None:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: report its next id, then exit without running pytest teardown
        os.close(read)
        os.write(write, new_id().encode())
        os._exit(0)
    os.close(write)
    parent_id = new_id()
    child = b""
    while chunk := os.read(read, 1024):
        child += chunk
    os.close(read)
    os.waitpid(pid, 0)
    assert child.decode() != parent_id


def test_derived_ids_are_stable_and_distinct() -> None:
    one = tool_invocation_id("e", "llm", "call_1", "lookup")
    assert one == tool_invocation_id("e", "llm", "call_1", "lookup")
    assert re.fullmatch(r"tool-[0-9a-f]{32}", one)
    assert one != tool_invocation_id("e", "llm", "call_2", "lookup")
    assert one != tool_invocation_id("e", "llm2", "call_1", "lookup")
    target = handoff_target_execution_id("source", "billing")
    assert target == handoff_target_execution_id("source", "billing")
    assert target != handoff_target_execution_id("source", "sales")
    assert target.startswith("handoff-target-")


@pytest.mark.parametrize("bad", ["", "a b", "x" * 129, "\u202eevil", 7, None, "tab\t"])
def test_bad_ids_are_refused_with_the_agent_error_types(bad: object) -> None:
    with pytest.raises(ConfigurationError, match="agent_id"):
        check_agent_id(bad)
    with pytest.raises(InvalidInputError, match="Leave execution_id out"):
        check_execution_id(bad, "a")
    assert check_agent_id("support-bot/é") == "support-bot/é"
