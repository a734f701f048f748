"""Answering many executions that wait for an operator at once (``phronomy-fsm resolve
--all`` with a filter, or ``resolve --answers FILE``; ``docs/operations.md``,
"Answering many at once").

Owns choosing the parked executions a filter names, reading a file of answers, and
sending each answer through :func:`~phronomy_fsm.operator.resolve_execution` — so each
is checked against its own execution and revision, exactly as one ``resolve`` is, and
one refused answer neither stops nor undoes the others. Must not print or exit.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

import attrs

from phronomy_fsm.durable.ports import ExecutionStore
from phronomy_fsm.durable.records import ExecutionStatus, SignalKind
from phronomy_fsm.errors import PhronomyError
from phronomy_fsm.operator.actions import DEFAULT_SENDER, resolve_execution
from phronomy_fsm.operator.views import InboxReceipt
from phronomy_fsm.runtime.clock import SYSTEM_CLOCK, Clock

#: The keys one answer of a ``--answers`` file may hold (the first three are required).
ANSWER_KEYS = ("execution_id", "expected_revision", "outcome", "result", "error", "subject")


@attrs.frozen
class ResolutionAnswer:
    """One answer to send: as the arguments of one ``phronomy-fsm resolve``.

    ``expected_revision`` is the revision the answer was written for (refused if the
    execution moved since); ``result`` (any JSON, for ``succeeded``) and ``error`` (for
    ``failed``) as :func:`~phronomy_fsm.operator.resolve_execution` takes them;
    ``subject`` an optional check (``effect:HOOK``, ``execution:ID``, ...)."""

    execution_id: str
    expected_revision: int
    outcome: str
    result: Any = None
    error: str | None = None
    subject: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (the keys of :data:`ANSWER_KEYS`)."""
        return attrs.asdict(self)


@attrs.frozen
class ResolutionAttempt:
    """What sending one :class:`ResolutionAnswer` did: the ``receipt`` of the inbox
    write, or ``refused``: why nothing was written for it (the library error's text)."""

    answer: ResolutionAnswer
    receipt: InboxReceipt | None = None
    refused: str | None = None

    @property
    def is_written(self) -> bool:
        """True when the answer reached the execution's inbox."""
        return self.receipt is not None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "answer": self.answer.to_dict(),
            "written": self.is_written,
            "refused": self.refused,
            "receipt": None if self.receipt is None else self.receipt.to_dict(),
        }


def parked_answers(
    store: ExecutionStore,
    *,
    outcome: str,
    result: Any = None,
    error: str | None = None,
    machine: str | None = None,
    state: str | None = None,
    effect: str | None = None,
) -> tuple[ResolutionAnswer, ...]:
    """One answer (``outcome`` with ``result``/``error``) per execution in
    ``recovery_required`` matching every filter given — its ``machine``, the ``state``
    it is parked in, the ``effect`` (offload hook) its recovery subject names — each
    written for the revision it has now and checking its subject (``effect:HOOK`` or
    ``execution:ID``), oldest first. An execution whose inbox already holds an
    answer not yet applied (no live worker applied it) is left out.

    Raises:
        StorageError: the read failed.
    """
    rows = store.execution_rows(status=ExecutionStatus.RECOVERY_REQUIRED.value, machine=machine)
    answers = []
    for row in rows:
        record = store.load_record(row["execution_id"])
        info = record.recovery
        if record.status is not ExecutionStatus.RECOVERY_REQUIRED or info is None:
            continue  # moved on since the listing
        if state is not None and record.state != state:
            continue
        hook = None if info.subject is None else info.subject.effect
        if effect is not None and hook != effect:
            continue
        if any(
            s.kind is SignalKind.RESOLUTION and s.consumed_revision is None
            for s in store.list_signals(record.execution_id)
        ):
            continue  # answered already: that answer waits in its inbox
        subject = f"execution:{record.execution_id}" if hook is None else f"effect:{hook}"
        answers.append(
            ResolutionAnswer(
                record.execution_id, record.revision, outcome, result, error, subject=subject
            )
        )
    return tuple(answers)


def read_answers(text: str) -> tuple[ResolutionAnswer, ...]:
    """The answers of a ``--answers`` file: a JSON list of objects, or one JSON object
    per line (blank lines skipped), each with ``execution_id``, ``expected_revision``
    and ``outcome`` and optionally ``result``, ``error`` and ``subject``.

    Raises:
        ValueError: the text is not such JSON; the message names the line or item and
            the key.
    """
    stripped = text.strip()
    items: list[tuple[str, Any]] = []
    if stripped.startswith("["):
        try:
            data = json.loads(stripped)
        except json.JSONDecodeError as exc:
            raise ValueError(f"not JSON: {exc}") from None
        items = [(f"item {i + 1}", value) for i, value in enumerate(data)]
    else:
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                items.append((f"line {number}", json.loads(line)))
            except json.JSONDecodeError as exc:
                raise ValueError(f"line {number}: not JSON: {exc}") from None
    return tuple(_answer(where, value) for where, value in items)


def _answer(where: str, value: Any) -> ResolutionAnswer:
    problem = _problem(value)
    if problem is not None:
        raise ValueError(f"{where}: {problem}")
    return ResolutionAnswer(
        value["execution_id"],
        value["expected_revision"],
        value["outcome"],
        value.get("result"),
        value.get("error"),
        value.get("subject"),
    )


def _problem(value: Any) -> str | None:
    """What is wrong with one answer's JSON, or ``None``."""
    if not isinstance(value, dict):
        return f"an answer is a JSON object with {', '.join(ANSWER_KEYS[:3])}"
    unknown = sorted(set(value) - set(ANSWER_KEYS))
    if unknown:
        return f"unknown key {unknown[0]!r}; keys: {', '.join(ANSWER_KEYS)}"
    missing = [key for key in ANSWER_KEYS[:3] if key not in value]
    if missing:
        return f"{missing[0]!r} is missing"
    revision = value["expected_revision"]
    if not isinstance(revision, int) or isinstance(revision, bool):
        return "'expected_revision' must be an integer"
    for key in ("execution_id", "outcome", "error", "subject"):
        if value.get(key) is not None and not isinstance(value[key], str):
            return f"{key!r} must be a string"
    return None


def resolve_many(
    store: ExecutionStore,
    answers: Iterable[ResolutionAnswer],
    *,
    sender: str = DEFAULT_SENDER,
    clock: Clock = SYSTEM_CLOCK,
) -> tuple[ResolutionAttempt, ...]:
    """Send each answer as :func:`~phronomy_fsm.operator.resolve_execution` does, in
    order: each is checked against its execution's stored revision, state and subject
    and written in a transaction of its own; a refused one (any
    :class:`~phronomy_fsm.errors.PhronomyError`) is reported and the next is sent.

    **Durability:** every attempt that is written is committed to its inbox before
    the next is tried; sending the same answers again is refused for those already
    answered (their revision moved, or they no longer wait for an operator).
    """
    attempts = []
    for answer in answers:
        try:
            receipt = resolve_execution(
                store,
                answer.execution_id,
                expected_revision=answer.expected_revision,
                outcome=answer.outcome,
                result=answer.result,
                error=answer.error,
                subject=answer.subject,
                sender=sender,
                clock=clock,
            )
        except PhronomyError as exc:
            attempts.append(ResolutionAttempt(answer, refused=str(exc)))
        else:
            attempts.append(ResolutionAttempt(answer, receipt=receipt))
    return tuple(attempts)


def refused(attempts: Sequence[ResolutionAttempt]) -> tuple[ResolutionAttempt, ...]:
    """The attempts that were refused."""
    return tuple(a for a in attempts if not a.is_written)


__all__ = [
    "ANSWER_KEYS",
    "ResolutionAnswer",
    "ResolutionAttempt",
    "parked_answers",
    "read_answers",
    "refused",
    "resolve_many",
]
