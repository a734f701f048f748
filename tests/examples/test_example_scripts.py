"""The example scripts run as a user runs them: separate processes on one store, a
decision sent from another process, and a ``kill -9`` in the middle of a task followed
by its recovery in a new process."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from pathlib import Path

import order_workflow as ow
import review_agent as ra

from .conftest import EXAMPLES, clean_env

TIMEOUT_SECONDS = 60


def run(script: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run ``docs/examples/<script>`` with ``args`` in ``cwd``; return what it did."""
    return subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args],
        cwd=cwd,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_SECONDS,
        check=False,
    )


def test_the_payout_runs_and_a_second_run_finds_it_finished(tmp_path: Path) -> None:
    for _ in range(2):
        proc = run("payout.py", "payouts.db", cwd=tmp_path)
        assert (proc.returncode, proc.stdout) == (0, "completed done 3\n"), proc.stderr


def test_an_order_is_approved_from_another_process_between_two_runs(tmp_path: Path) -> None:
    first = run("order_workflow.py", "run", "o-1", "--db", "shop.db", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert "order o-1: waiting in awaiting_approval" in first.stdout
    signal_proc = run(
        "order_workflow.py", "signal", "o-1", "approve", "--db", "shop.db", cwd=tmp_path
    )
    assert signal_proc.returncode == 0, signal_proc.stderr
    second = run("order_workflow.py", "run", "--db", "shop.db", cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    assert "order o-1: recovered (waiting)" in second.stdout
    assert second.stdout.splitlines()[-1].startswith(
        "order o-1: completed in delivered (charged 3000 cents"
    )
    again = run("order_workflow.py", "signal", "o-1", "reject", "--db", "shop.db", cwd=tmp_path)
    assert again.returncode == 1 and "has finished" in again.stderr
    effects = ow.ShopEffects.beside(tmp_path / "shop.db")
    assert sorted(e.effect for e in effects.effects()) == [
        "charge_card",
        "send_confirmation",
        "ship_order",
    ]


def test_orders_the_person_answers_at_once(tmp_path: Path) -> None:
    approved = run(
        "order_workflow.py", "run", "o-a", "--person", "approve", "--db", "shop.db", cwd=tmp_path
    )
    rejected = run(
        "order_workflow.py", "run", "o-r", "--person", "reject", "--db", "shop.db", cwd=tmp_path
    )
    assert approved.returncode == rejected.returncode == 0, approved.stderr + rejected.stderr
    lines = rejected.stdout.splitlines()
    assert any(line.startswith("order o-a: completed in delivered") for line in lines)
    assert any(line.startswith("order o-r: cancelled in cancelled") for line in lines)


def test_a_task_killed_while_it_waits_is_approved_and_sent_by_a_new_process(tmp_path: Path) -> None:
    """``kill -9`` the service while the reply waits for approval; a person approves
    from another process meanwhile; a new service recovers the task and sends once."""
    service = subprocess.Popen(
        [
            sys.executable,
            str(EXAMPLES / "review_agent.py"),
            "run",
            "t-1",
            "--request",
            "Order A1 arrived broken.",
            "--person",
            "nobody",
            "--db",
            "agent.db",
        ],
        cwd=tmp_path,
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    watchdog = threading.Timer(TIMEOUT_SECONDS, service.kill)
    watchdog.start()
    seen = []
    try:
        assert service.stdout is not None
        for line in service.stdout:
            seen.append(line)
            if line.startswith("review_agent t-1: waiting in awaiting_approval"):
                service.send_signal(signal.SIGKILL)
                break
        service.wait(TIMEOUT_SECONDS)
    finally:
        watchdog.cancel()
    assert service.returncode == -signal.SIGKILL, "".join(seen) + service.stderr.read()
    effects = ra.AgentEffects.beside(tmp_path / "agent.db", ra.scripted_provider())
    assert effects.sent.entries() == []

    decided = run("review_agent.py", "signal", "t-1", "approve", "--db", "agent.db", cwd=tmp_path)
    assert decided.returncode == 0, decided.stderr
    resumed = run("review_agent.py", "run", "--db", "agent.db", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "t-1: recovered (waiting)" in resumed.stdout
    assert (
        "task t-1: completed in delivered (lookup_order ok; open_ticket ok; sent r-"
        in resumed.stdout
    )
    assert [s["execution_id"] for s in effects.sent.entries()] == ["t-1"]
    assert len(effects.tickets.entries()) == 1
    assert [c["effect"] for c in effects.llm_calls.entries()] == ["call_planner", "call_reviewer"]


def test_an_order_killed_after_its_charge_is_finished_by_the_operator_once(tmp_path: Path) -> None:
    """``kill -9`` the service as soon as the card ledger shows the charge — wherever
    the order then stood (charging, mailing, waiting, shipping...) — and let a new
    service with the operator finish it: one charge, one confirmation, one shipment."""
    effects = ow.ShopEffects.beside(tmp_path / "shop.db")
    service = subprocess.Popen(
        [
            sys.executable,
            str(EXAMPLES / "order_workflow.py"),
            "run",
            "o-k",
            "--person",
            "approve",
            "--db",
            "shop.db",
        ],
        cwd=tmp_path,
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    watchdog = threading.Timer(TIMEOUT_SECONDS, service.kill)
    watchdog.start()
    try:
        assert service.stdout is not None
        for line in service.stdout:
            if "charge_card (at_most_once)" in line:
                break
        while service.poll() is None and not effects.card.entries():
            threading.Event().wait(0.005)
        service.send_signal(signal.SIGKILL)
        service.wait(TIMEOUT_SECONDS)
    finally:
        watchdog.cancel()
    resumed = run(
        "order_workflow.py",
        "run",
        "--person",
        "approve",
        "--operator",
        "--db",
        "shop.db",
        cwd=tmp_path,
    )
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert resumed.stdout.splitlines()[-1].startswith("order o-k: completed in delivered")
    counts = sorted(e.effect for e in effects.effects())
    assert counts == ["charge_card", "send_confirmation", "ship_order"], counts


def test_the_mcp_agent_uses_the_notes_server_and_deletes_only_after_approval(
    tmp_path: Path,
) -> None:
    """docs/examples/mcp_agent.py: offline (the stub LLM), its MCP server started over
    stdio for each call; the delete waits for the approval it prints."""
    proc = run("mcp_agent.py", str(tmp_path / "run"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[:3] == [
        "tool notes_list_notes: effect pure",
        "tool notes_save_note: effect idempotent",
        "tool notes_delete_note: effect at_most_once",
    ]
    assert lines[3].startswith("approve notes_delete_note {'title': 'call'} (sha256 ")
    assert lines[4] == "completed: Saved two notes and deleted the call note; one note is left."
    assert lines[5] == 'notes left: {   "milk": "buy 2 litres" }'
