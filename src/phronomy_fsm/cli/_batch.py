"""``phronomy-fsm resolve --all`` and ``resolve --answers FILE``: many answers at once
over :mod:`phronomy_fsm.operator.batch` (``docs/operations.md``, "Answering many at
once"). Parses, calls the library, prints one line per answer; exit 1 when any answer
was refused, 0 otherwise (also when nothing matched)."""

from __future__ import annotations

import sys
from typing import Any

import click

from phronomy_fsm import operator
from phronomy_fsm.cli._common import echo, emit_json, fail, open_store, parse_json_option


def resolve_batch(
    *,
    db: str,
    outcome: str | None,
    result: str | None,
    error: str | None,
    filters: dict[str, str | None],
    answers_file: Any,
    dry_run: bool,
    sender: str,
    as_json: bool,
) -> None:
    """Choose or read the answers, send each (unless ``dry_run``), print what each
    did and exit as the module docstring says. Raises click.UsageError for --all
    without a filter or --outcome, and for --answers with --outcome/--result/--error."""
    if answers_file is None:
        if not any(filters.values()):
            raise click.UsageError("--all needs --machine, --state or --effect")
        if outcome is None:
            raise click.UsageError("--all needs --outcome")
    elif outcome is not None or result is not None or error is not None:
        raise click.UsageError("--answers FILE holds each answer's outcome, result and error")
    answers: tuple[operator.ResolutionAnswer, ...]
    if answers_file is not None:
        try:
            answers = operator.read_answers(answers_file.read())
        except ValueError as exc:
            fail(f"{answers_file.name}: {exc}; nothing was written")
    value = parse_json_option(result, "--result")
    with open_store(db, read_only=dry_run) as store:
        if answers_file is None:
            assert outcome is not None
            answers = operator.parked_answers(
                store, outcome=outcome, result=value, error=error, **filters
            )
        if dry_run:
            if as_json:
                emit_json({"answers": [a.to_dict() for a in answers], "written": False})
                return
            echo(f"{len(answers)} answer(s); --dry-run: nothing was written")
            for a in answers:
                echo(f"  {a.execution_id}  r{a.expected_revision}  {a.outcome}  {a.subject or ''}")
            return
        attempts = operator.resolve_many(store, answers, sender=sender)
    bad = [a for a in attempts if not a.is_written]
    if as_json:
        emit_json({"attempts": [a.to_dict() for a in attempts], "refused": len(bad)})
    else:
        for attempt in attempts:
            a = attempt.answer
            if attempt.receipt is not None:
                owner = (
                    "applied by its live worker"
                    if attempt.receipt.is_applied_by_live_owner
                    else "waits for phronomy-fsm recover (no live worker)"
                )
                echo(f"written  {a.execution_id}  r{a.expected_revision}  {a.outcome}: {owner}")
            else:
                echo(
                    f"refused  {a.execution_id}  r{a.expected_revision}  {a.outcome}: {attempt.refused}"
                )
        echo(f"{len(attempts) - len(bad)} written, {len(bad)} refused")
    if bad:
        sys.exit(1)
