"""What the durable examples share: the outside world's records and a small service loop.

Not part of the library: ``order_workflow.py`` and ``review_agent.py`` import it to keep
their own files about their machines (docs/getting-started.md, "Your own machines").

- :class:`JsonLines` is an append-only, fsynced JSON-lines file: the examples' stand-in
  for an outside system that keeps its own record of what it did (a card processor's
  ledger, an outbox). Each effect appends one entry carrying the execution, the effect,
  its kind, its idempotency key and attempt, and the result it returned — what the
  crash harness counts and what a truthful operator reads.
- :func:`serve` drives a runtime's executions until none is active, acting as the person
  who answers a wait state and, when asked to, as the operator who resolves an execution
  in ``recovery_required``;
- :func:`service_main` is an example's command line around it (``run`` and ``signal``).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import queue
import sys
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from phronomy_fsm.durable import (
    DurableEvent,
    DurableEventKind,
    DurableRuntime,
    ExecutionRecord,
    ExecutionStatus,
    send_signal,
)
from phronomy_fsm.durable.app import Answer, DurableApp, EffectEntry
from phronomy_fsm.errors import PhronomyError
from phronomy_fsm.store import SqliteBarrierStore

#: How :func:`serve` may act as the person: send ``approve`` or ``reject`` at once,
#: ``nobody`` answers (timers expire), or ``later`` (return while executions wait).
PERSON_CHOICES = ("approve", "reject", "nobody", "later")


class JsonLines:
    """An append-only JSON-lines file, each line fsynced: an outside system's own record.

    Args:
        path: the file (created, with its folder, on the first append).

    Concurrency: appends from several threads or processes do not interleave (one
    ``write`` with ``O_APPEND``); :meth:`locked` makes a check-then-append atomic.
    """

    def __init__(self, path: Path) -> None:
        self.path = path

    def append(self, entry: dict[str, Any]) -> None:
        """Append ``entry`` (JSON data) as one line and fsync it."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = json.dumps(entry, sort_keys=True) + "\n"
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line.encode())
            os.fsync(fd)
        finally:
            os.close(fd)

    def entries(self) -> list[dict[str, Any]]:
        """Every entry, oldest first (a last line cut short by a kill is skipped)."""
        if not self.path.exists():
            return []
        out = []
        for line in self.path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
        return out

    def find(self, key: str) -> dict[str, Any] | None:
        """The first entry recorded under idempotency key ``key``, or ``None``."""
        return next((e for e in self.entries() if e.get("key") == key), None)

    def record(
        self, *, execution_id: str, effect: str, kind: str, key: str, attempt: int, result: Any
    ) -> Any:
        """Append one effect entry and return ``result`` (what the work returns)."""
        self.append(
            {
                "execution_id": execution_id,
                "effect": effect,
                "kind": kind,
                "key": key,
                "attempt": attempt,
                "result": result,
            }
        )
        return result

    def effects(self) -> list[EffectEntry]:
        """The entries as the crash harness reads them."""
        return [
            EffectEntry(
                e["execution_id"], e["effect"], e["kind"], e["key"], e["attempt"], e["result"]
            )
            for e in self.entries()
        ]

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold an exclusive lock (``flock`` on ``<file>.lock``) across processes."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(f"{self.path}.lock", os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def once(self, key: str, make: Callable[[], dict[str, Any]]) -> Any:
        """Idempotent by key: the result recorded under ``key``, or ``make()``'s entry
        appended now (``make`` returns the entry; it runs under :meth:`locked`)."""
        with self.locked():
            done = self.find(key)
            if done is not None:
                return done["result"]
            entry = make()
            self.append(entry)
            return entry["result"]


def truthful_answer(record: ExecutionRecord, ledgers: Collection[JsonLines]) -> Answer:
    """What an operator who checks the outside systems answers for ``record`` (in
    ``recovery_required``).

    The subject is the effect whose outcome a crash left unknown, with its idempotency
    key. Found in a ledger, the effect happened: ``succeeded`` with the recorded result
    (the machine goes on as if the work had returned it). Not found, it provably did not
    happen — the entry is written by the effect itself — so ``retry``. An execution that
    cannot be resumed at all (no subject: its spec changed or its context cannot be
    read) is ended ``failed``.
    """
    info = record.recovery
    if info is None or info.subject is None:
        return Answer(outcome="failed", error=info.reason if info else "nothing to resume")
    for ledger in ledgers:
        entry = ledger.find(info.subject.key)
        if entry is not None:
            return Answer(outcome="succeeded", result=entry["result"])
    return Answer(outcome="retry")


def event_line(event: DurableEvent) -> str | None:
    """One line about a runtime event worth showing (effects, waits, parks, ends)."""
    kind, who = event.kind, f"{event.machine} {event.execution_id}"
    if kind is DurableEventKind.EFFECT_STARTED:
        d = event.detail
        return f"{who}: {d['effect']} ({d['kind']}) key {d['key']} attempt {d['attempt']}"
    if kind is DurableEventKind.WAITING and event.record is not None:
        return f"{who}: waiting in {event.record.state} (revision {event.record.revision})"
    if kind is DurableEventKind.RECOVERY_REQUIRED:
        return f"{who}: needs an operator: {event.detail.get('reason')}"
    if kind is DurableEventKind.FINISHED and event.record is not None:
        return f"{who}: finished {event.record.status.value} in {event.record.state}"
    return None


def printing_listener(events: queue.SimpleQueue[DurableEvent]) -> Callable[[DurableEvent], None]:
    """A runtime listener that prints :func:`event_line` and queues the event for
    :func:`serve` (it runs on the runtime's loop thread, so it only does that)."""

    def listen(event: DurableEvent) -> None:
        line = event_line(event)
        if line is not None:
            print(line, flush=True)
        events.put(event)

    return listen


def serve(
    runtime: DurableRuntime,
    *,
    person: str,
    person_states: Collection[str],
    operator: Callable[[ExecutionRecord], Answer] | None,
    events: queue.SimpleQueue[DurableEvent],
    timeout_seconds: float,
    out: Callable[[str], None] = print,
) -> int:
    """Drive the active executions of ``runtime``'s machines until none is left.

    Args:
        person: one of :data:`PERSON_CHOICES`. ``approve`` / ``reject`` sends that
            event (payload ``{"by": "person"}``) to every execution waiting in one of
            ``person_states``, naming the revision it saw; ``nobody`` never answers (a
            wait state's timer decides); ``later`` returns as soon as every active
            execution waits for a person (or an operator, without ``operator``).
        operator: answers executions in ``recovery_required`` (``None``: nobody does;
            :func:`serve` returns once only such executions are left).
        events: the runtime's events (:func:`printing_listener` puts them there); each
            wakes the loop to look at the store again.
        timeout_seconds: give up after this long.

    Returns:
        0 when nothing is left to do (or only executions waiting for a person, with
        ``later``), 3 when executions wait for an operator and ``operator`` is
        ``None``, 1 when ``timeout_seconds`` passed first (the executions live on in
        the store; run again to resume them).

    Concurrency: call it on the thread that owns ``runtime`` (not its loop thread).
    """
    if person not in PERSON_CHOICES:
        raise ValueError(f"person must be one of {PERSON_CHOICES}, not {person!r}")
    deadline = time.monotonic() + timeout_seconds
    answered: set[tuple[str, int]] = set()
    machines = set(runtime.machines)
    while True:
        active = [r for r in runtime.store.list_records(active=True) if r.machine in machines]
        if not active:
            return 0
        parked = [r for r in active if r.status is ExecutionStatus.RECOVERY_REQUIRED]
        for_person = [
            r for r in active if r.status is ExecutionStatus.WAITING and r.state in person_states
        ]
        for record in for_person if person in ("approve", "reject") else ():
            if (record.execution_id, record.revision) in answered:
                continue
            answered.add((record.execution_id, record.revision))
            try:
                runtime.signal(
                    record.execution_id,
                    person,
                    {"by": "person"},
                    expected_revision=record.revision,
                    signal_id=f"{record.execution_id}-person-r{record.revision}",
                )
            except PhronomyError as exc:  # it moved on meanwhile (its timer fired)
                out(f"{record.execution_id}: {person} refused: {exc}")
        for record in parked if operator is not None else ():
            if (record.execution_id, record.revision) in answered:
                continue
            answered.add((record.execution_id, record.revision))
            answer = operator(record)
            out(f"{record.machine} {record.execution_id}: the operator answers {answer.outcome}")
            try:
                runtime.resolve(
                    record.execution_id,
                    expected_revision=record.revision,
                    outcome=answer.outcome or "failed",
                    result=answer.result,
                    error=answer.error,
                    signal_id=f"{record.execution_id}-operator-r{record.revision}",
                )
            except PhronomyError as exc:
                out(f"{record.execution_id}: the resolution was refused: {exc}")
        idle = [r for r in parked if operator is None]
        idle += [r for r in for_person if person == "later"]
        if len(idle) == len(active):
            return 3 if parked and operator is None else 0
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return 1
        try:
            events.get(timeout=remaining)
        except queue.Empty:
            return 1


def service_main(
    argv: Sequence[str] | None,
    *,
    noun: str,
    app: Callable[[str], DurableApp],
    start: Callable[[DurableRuntime, argparse.Namespace], None],
    describe: Callable[[ExecutionRecord], str],
    person_states: Collection[str],
    run_options: Callable[[argparse.ArgumentParser], None] = lambda parser: None,
) -> int:
    """A durable example's command line: ``run [ID] --db DB [--person P] [--operator]``
    (start ``ID``, resume every unfinished execution, :func:`serve` them, print each with
    ``describe``) and ``signal ID approve|reject --db DB`` (from any process).

    Args:
        argv: the arguments (``None``: ``sys.argv[1:]``).
        noun: what an execution is called in messages (``order``).
        app: the application factory (``app(db_path)``): its machines run over the SQLite
            store, its operator answers with ``--operator``.
        start: ``start(runtime, args)`` starts execution ``args.id`` (called only when
            an id is given).
        describe: one line about a stored execution.
        person_states: where a person answers (``--person``).
        run_options: adds the ``run`` command's own options to its parser.

    Returns:
        The exit code: 0 done, 1 gave up waiting or a signal was refused, 2 usage, 3 an
        execution waits for an operator (run again with ``--operator``).
    """
    parser = argparse.ArgumentParser(description=f"A durable {noun} service (example).")
    sub = parser.add_subparsers(dest="command", required=True)
    run_cmd = sub.add_parser("run", help=f"start a {noun}, resume every unfinished one")
    run_cmd.add_argument("id", nargs="?", help=f"start this {noun} (its execution id)")
    run_cmd.add_argument("--db", required=True, help="the SQLite store")
    run_cmd.add_argument("--person", choices=PERSON_CHOICES, default="later")
    run_cmd.add_argument("--operator", action="store_true", help="resolve parked executions")
    run_cmd.add_argument("--timeout-seconds", type=float, default=60.0)
    run_options(run_cmd)
    signal_cmd = sub.add_parser("signal", help=f"a person answers a waiting {noun}")
    signal_cmd.add_argument("id")
    signal_cmd.add_argument("decision", choices=("approve", "reject"))
    signal_cmd.add_argument("--db", required=True)
    args = parser.parse_args(argv)
    if args.command == "signal":  # writes to the durable inbox; any process may
        with SqliteBarrierStore(args.db) as store:
            try:
                sent = send_signal(store, args.id, args.decision, {"by": "person"})
            except PhronomyError as exc:
                print(f"error: {exc}", file=sys.stderr)
                return 1
        print(f"{noun} {args.id}: {args.decision} recorded (signal {sent.signal_id})")
        return 0
    events: queue.SimpleQueue[DurableEvent] = queue.SimpleQueue()
    application = app(args.db)
    store = SqliteBarrierStore(args.db)
    listeners = [printing_listener(events)]
    with DurableRuntime(store, machines=application.machines, listeners=listeners) as rt:
        if args.id is not None:
            start(rt, args)
        for execution_id, status in rt.recover().claimed:
            print(f"{noun} {execution_id}: recovered ({status})")
        code = serve(
            rt,
            person=args.person,
            person_states=person_states,
            operator=application.operator if args.operator else None,
            events=events,
            timeout_seconds=args.timeout_seconds,
        )
    for machine in application.machines:
        for record in store.list_records(machine=machine.name):
            print(describe(record))
    store.close()
    if code == 3:
        print(f"a {noun} waits for an operator: run again with --operator", file=sys.stderr)
    elif code == 1:
        print(f"gave up after {args.timeout_seconds:g} s; run again to resume", file=sys.stderr)
    return code


__all__ = [
    "PERSON_CHOICES",
    "JsonLines",
    "event_line",
    "printing_listener",
    "serve",
    "service_main",
    "truthful_answer",
]
