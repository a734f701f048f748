"""Text forms of the operator's values (:mod:`phronomy_fsm.operator.views`) for the
command line: one execution, a recovery request with the commands that answer it, an
agent's side of an execution, what a recovery left, what an inbox write did.

Every line goes through :func:`~phronomy_fsm.cli._common.echo`, which escapes what a
terminal could act on, so ids, messages and answers read from a store cannot forge
output. Formatting only: nothing here reads or writes a store.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterable
from typing import Any

from phronomy_fsm import operator
from phronomy_fsm.cli._common import echo, format_time
from phronomy_fsm.store.open import redact_dsn

#: Longest text of one conversation message in ``executions show`` (``--json`` has all).
MESSAGE_CHARS = 400


def compact(value: Any) -> str:
    """``value`` as one line of JSON (sorted keys, non-ASCII kept)."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def clip(text: str, limit: int = MESSAGE_CHARS) -> str:
    """``text`` cut to ``limit`` characters, saying how much was left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text) - limit} more characters; --json shows all)"


def subject_lines(request: operator.RecoveryRequest) -> list[str]:
    """The lines of a recovery request: reason, subject, outcomes, commands."""
    lines = [f"  reason: {request.reason}", f"  subject: {request.describe_subject()}"]
    if request.parent_execution_id is not None:
        lines.append(f"  of execution: {request.parent_execution_id}")
    lines.append(f"  allowed outcomes: {', '.join(request.allowed_outcomes)}")
    shape = request.result_shape
    if shape is not None:
        lines.append(f"  succeeded needs --result: {shape.describe()}")
        if shape.example is not None:
            lines.append(f"    e.g. --result '{shape.example}'")
    elif "succeeded" in request.allowed_outcomes:
        lines.append(
            "  succeeded needs --result: the effect's result as JSON (its machine's table is "
            "not registered in this store, so its declared type is unknown)"
        )
    return [
        *lines,
        "  answer with one of:",
        *(f"    {command}" for command in request.commands),
    ]


#: What ``--app MODULE:FACTORY`` stands for, printed where the CLI suggests it.
APP_HINT = (
    "(MODULE:FACTORY: your application's factory, factory(db_path) -> DurableApp; for "
    "agents an agent_app, e.g. phronomy_fsm.demo:create_app for the demo's store)"
)


def owner_line(owner: operator.WorkerLease | None, db: str, finished: bool) -> str:
    """Who runs the execution, and what moves it when nobody does."""
    if finished:
        return "owner: - (finished)"
    if owner is None:
        return (
            "owner: none (never claimed); nothing moves until "
            f"phronomy-fsm recover --db {redact_dsn(db)} --app MODULE:FACTORY {APP_HINT}"
        )
    where = "" if owner.host is None else f" (host {owner.host}, pid {owner.pid})"
    if owner.is_live:
        return f"owner: worker {owner.worker_id}{where}, lease until {format_time(owner.lease_expires_at)}"
    why = "its process is gone" if owner.process_gone else "its lease has ended"
    return (
        f"owner: none live (last worker {owner.worker_id}{where}: {why}); nothing moves until "
        f"phronomy-fsm recover --db {redact_dsn(db)} --app MODULE:FACTORY {APP_HINT}"
    )


def _signal_subject(signal: Any) -> str:
    """What a signal asks for: its event, a resolution's outcome, a cancel's reason."""
    if signal.event is not None:
        return str(signal.event)
    payload = signal.payload if isinstance(signal.payload, dict) else {}
    if signal.kind.value == "resolution":
        return str(payload.get("outcome", "?"))
    if signal.kind.value == "cancel":
        return repr(payload.get("reason", ""))
    return "-"


_WAITS = {
    operator.WAITS_FOR_OPERATOR: "  <- waits for an operator",
    operator.WAITS_FOR_APPROVAL: "  <- waits for a person's approval",
    operator.WAITS_FOR_BUDGET: "  <- waits for a budget extension",
    operator.WAITS_FOR_SIGNAL: "  <- waits for a signal",
}


def approval_lines(approval: operator.ApprovalView) -> list[str]:
    """An approval request: its items and, while pending, the approve commands."""
    state = "pending" if not approval.decided else "decided"
    lines = [f"approval request {approval.request_id} ({state}):"]
    for item in approval.items:
        reason = f"  ({item.reason})" if item.reason else ""
        decided = ""
        if approval.decisions is not None and item.tool_invocation_id in approval.decisions:
            decided = "  approved" if approval.decisions[item.tool_invocation_id] else "  rejected"
        lines.append(
            f"  {item.tool_invocation_id}  {item.tool_name} {compact(item.arguments)}{reason}{decided}"
        )
    if approval.commands:
        lines.append("  decide with:")
        lines += [f"    {command}" for command in approval.commands]
    return lines


def budget_lines(budget: operator.BudgetView) -> list[str]:
    """An agent execution's budget: spent against each limit, the pending request and
    the extend-budget command that answers it."""
    lines = [f"budget (on exhausted: {budget.on_exhausted}):"]
    for name, spent, allowed in budget.rows():
        if allowed is not None or spent:
            lines.append(f"  {name}: spent {spent} of {'no limit' if allowed is None else allowed}")
    request = budget.request
    if request is not None:
        state = (
            "pending" if budget.pending else ("extended" if request.get("decided") else "refused")
        )
        lines.append(
            f"  budget request {request.get('request_id')} ({state}): {request.get('limit')} "
            f"spent {request.get('spent')} of {request.get('allowed')} "
            f"({request.get('calls')} {request.get('call')})"
        )
    if budget.command:
        lines += ["  extend it with:", f"    {budget.command}"]
    return lines


def _message_line(message: operator.MessageView) -> str:
    who = message.role if message.name is None else f"{message.role} {message.name}"
    parts = [] if message.text is None else [clip(message.text)]
    parts += [f"calls {call}" for call in message.tool_calls]
    return f"  {who}: {' | '.join(parts) or '-'}"


def agent_lines(view: operator.AgentView) -> list[str]:
    """The agent's side of an execution (session) or of a tool call."""
    if view.kind == "tool_call":
        lines = [
            f"agent: {view.agent_id} (a tool call of execution {view.parent_execution_id})",
            f"tool: {view.tool_name} {compact(view.arguments)}",
        ]
        if view.result is not None:
            lines.append(f"result: {clip(compact(view.result))}")
        if view.error is not None:
            lines.append(f"error: {view.error}")
        return lines
    text = view.input if isinstance(view.input, str) else compact(view.input)
    lines = [f"agent: {view.agent_id}", f"input: {text}"]
    if view.outcome is not None:
        lines.append(f"outcome: {view.outcome}")
    if view.output is not None:
        lines.append(f"output: {view.output}")
    if view.error is not None:
        lines.append(f"error: {view.error}")
    if view.approval is not None:
        lines += approval_lines(view.approval)
    if view.budget is not None:
        lines += budget_lines(view.budget)
    if view.tool_calls:
        lines.append(f"tool calls: {', '.join(view.tool_calls)}")
    lines.append(f"conversation ({len(view.messages)}):")
    lines += [_message_line(m) for m in view.messages]
    return lines


def echo_detail(detail: operator.ExecutionDetail, db: str) -> None:
    """Print one execution as ``executions show`` does."""
    r = detail.record
    echo(f"execution_id: {r.execution_id}")
    echo(f"machine: {r.machine} (spec version {r.spec_version}, sha256 {r.spec_sha256[:12]})")
    echo(f"status: {r.status.value}{_WAITS.get(detail.waits_for or '', '')}")
    echo(f"state: {r.state}")
    echo(f"revision: {r.revision}")
    resume = f", resumes with {r.resume_event}" if r.resume_event else ""
    echo(f"point: {r.point.value} (set at revision {r.point_revision}{resume})")
    echo(f"created_at: {format_time(r.created_at)}")
    echo(f"updated_at: {format_time(r.updated_at)}")
    if r.deadline_at is not None and r.is_active:
        echo(f"deadline_at: {format_time(r.deadline_at)} (the wait state's timer)")
    if r.expires_at is not None:
        echo(f"expires_at: {format_time(r.expires_at)} (the execution's own deadline)")
    for label, value in (
        ("exclusive_key", r.exclusive_key),
        ("parent_execution_id", r.parent_execution_id),
    ):
        if value is not None:
            echo(f"{label}: {value}")
    if r.labels:
        echo("labels: " + ", ".join(f"{k}={v}" for k, v in sorted(r.labels.items())))
    echo(owner_line(detail.owner, db, r.is_finished))
    if detail.awaits and detail.agent is None:
        echo(f"awaits: {', '.join(detail.awaits)}; send one with (its data: --payload JSON):")
        for event in detail.awaits:
            command = shlex.join(
                ["phronomy-fsm", "signal", r.execution_id, event, "--db", redact_dsn(db)]
                + ["--expected-revision", str(r.revision)]
            )
            echo(f"  {command}")
    if detail.is_held_by_no_live_worker and r.status.value in ("waiting", "recovery_required"):
        echo(
            "  no live worker holds it: what you send waits in its inbox (and a timer does "
            "not fire) until phronomy-fsm recover --app MODULE:FACTORY or a worker claims it"
        )
    for ending in detail.wait_endings:
        echo(f"wait: {ending.describe()}")
    echo(f"context: {clip(compact(r.context), 2000)}")
    echo(f"pending_effects: {', '.join(r.pending_effects) or '-'}")
    if r.error is not None and detail.agent is None:
        echo(f"error: {r.error.render()}")
    if detail.agent is not None:
        for line in agent_lines(detail.agent):
            echo(line)
    if detail.recovery is not None:
        echo("recovery:")
        for line in subject_lines(detail.recovery):
            echo(line)
    echo(f"barriers ({len(detail.barriers)}):")
    for b in detail.barriers:
        echo(f"  r{b.revision}  {b.barrier}  {b.status}/{b.state}  {format_time(b.committed_at)}")
    echo(f"signals ({len(detail.signals)}):")
    for s in detail.signals:
        what = _signal_subject(s)
        done = (
            "pending" if s.consumed_revision is None else f"{s.outcome} at r{s.consumed_revision}"
        )
        expected = "" if s.expected_revision is None else f" expected r{s.expected_revision}"
        echo(f"  #{s.seq}  {s.kind.value} {what}{expected}  from {s.sender or '-'}  {done}")
    echo(f"journal ({len(detail.journal)}):")
    for j in detail.journal:
        echo(f"  r{j.revision}.{j.position}  {j.kind}{_journal_text(j)}")


def _journal_text(entry: Any) -> str:
    """What a journal entry says, briefly: a message's text, a tool result's status
    and error, a final output."""
    data = entry.data if isinstance(entry.data, dict) else {}
    if entry.kind == "tool_result":
        error = data.get("error")
        tail = f": {clip(str(error))}" if error else ""
        return f"  {data.get('tool_name')} {data.get('status')}{tail}"
    if entry.kind == "final_output" and data.get("text") is not None:
        return f"  {clip(str(data['text']))}"
    message = data.get("message")
    if isinstance(message, dict) and isinstance(message.get("content"), str):
        return f"  {clip(message['content'])}"
    return ""


def status_line(entry: operator.RecoveredExecution) -> str:
    """One line of ``recover``: what an execution is doing now."""
    r = entry.record
    found = "" if entry.found_status is None else f" (found {entry.found_status})"
    line = f"{r.execution_id}  {r.machine}  {r.status.value} in {r.state}  r{r.revision}{found}"
    if entry.agent_id is not None:
        line += f"  agent {entry.agent_id}"
    if entry.found_status is None and entry.owner is not None and entry.owner.is_live:
        line += f"  run by live worker {entry.owner.worker_id}"
    elif not entry.at_rest:
        line += "  still moving"
    if entry.awaits and r.machine != operator.AGENT_MACHINE:
        line += f"  awaits {', '.join(entry.awaits)}"
        if r.deadline_at is not None:
            line += f" until {format_time(r.deadline_at)}"
    elif r.status.value == "waiting" and r.machine == operator.AGENT_MACHINE:
        line += "  waits for approval"
    if r.error is not None and r.is_finished:
        line += f"  error: {r.error.render()}"
    return line


def echo_recovery(entries: Iterable[operator.RecoveredExecution]) -> None:
    """Print what recovered executions are doing, with the resolve commands of each
    that waits for an operator and the approve commands of each agent execution that
    waits for a person."""
    for entry in entries:
        echo(f"  {status_line(entry)}")
        if entry.recovery is not None:
            for line in subject_lines(entry.recovery):
                echo(f"  {line}")
        if entry.approval is not None:
            for line in approval_lines(entry.approval):
                echo(f"    {line}")


def echo_receipt(
    headline: str, receipt: operator.InboxReceipt, db: str, applied_here: bool
) -> None:
    """Where an inbox write went (``headline`` names what was written) and who
    applies it."""
    s = receipt.signal
    echo(f"{headline}: signal #{s.seq} ({s.signal_id}) in the inbox of {s.execution_id}")
    if applied_here:
        echo("  recovered in this process (--app); now:")
    elif receipt.is_applied_by_live_owner:
        assert receipt.owner is not None
        echo(f"  applied by live worker {receipt.owner.worker_id}")
    else:
        echo(
            "  no process runs it now; applied when it is recovered: "
            f"phronomy-fsm recover --db {redact_dsn(db)} --app MODULE:FACTORY (or pass --app here)"
        )
        echo(f"  {APP_HINT}")


__all__ = [
    "MESSAGE_CHARS",
    "agent_lines",
    "approval_lines",
    "budget_lines",
    "clip",
    "compact",
    "echo_detail",
    "echo_receipt",
    "echo_recovery",
    "owner_line",
    "status_line",
    "subject_lines",
]
