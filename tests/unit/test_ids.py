"""Execution and record ids (agent/durable.py): well formed, unique, and never shared
between a process and a child it forks (both would write to the same store)."""

from __future__ import annotations

import os
import re

from phronomy_fsm.agent.durable import new_id, new_record_id


def test_new_id_shape_and_uniqueness() -> None:
    ids = [new_id() for _ in range(20000)]
    assert all(re.fullmatch(r"[0-9a-f]{32}", i) for i in ids)
    assert len(set(ids)) == len(ids)


def test_forked_child_draws_different_ids() -> None:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: report its next ids, then exit without running pytest teardown
        os.close(read)
        os.write(write, f"{new_id()} {new_record_id()}".encode())
        os._exit(0)
    os.close(write)
    parent_ids = (new_id(), new_record_id())
    child = b""
    while chunk := os.read(read, 1024):
        child += chunk
    os.close(read)
    os.waitpid(pid, 0)
    child_id, child_record = child.decode().split()
    assert child_id != parent_ids[0]
    assert child_record[:16] != parent_ids[1][:16]
