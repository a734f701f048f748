"""One process of a checked run: the application, driven, with at most one step armed.

The runner (:mod:`phronomy_fsm.checking.runner`) starts each process of a run as
``python -m phronomy_fsm.checking.child MODE --app M:F --db DB --dir FOLDER --scenario S
--process N [--step STEP]``. ``MODE`` is ``run`` (start the scenario's executions),
``recover`` (resume what the store holds) or ``takeover`` (claim executions from a
worker whose lease passed, waiting until there is one). The process runs a
:class:`~phronomy_fsm.durable.runtime.DurableRuntime` over the application's machines
and, until its executions rest, does what a person and an operator would: answers a
waiting execution as the scenario says (its payload marked with
:data:`~phronomy_fsm.durable.app.SIGNAL_MARK`), fires the timer of one nobody answers
(by advancing the run's clock), and answers an execution in ``recovery_required`` as
the application's operator says. Everything it does and sees is appended to the run's
log (:mod:`phronomy_fsm.checking.runfiles`).

The armed step fires at the N-th hit of its crash point (:class:`StepPlan`, a
:class:`~phronomy_fsm.runtime.faults.FaultPlan` given to the runtime and the store):
a kill, a signal, a cancel, the timers, or a pause past the lease (SIGSTOP; the runner
resumes the process after another one took its executions over). The step runs on the
thread that hit the point; what it sends goes through the runtime from a thread of its
own, which the step waits for — except at a ``during`` point, inside a commit's
transaction, where it lets it wait for the commit instead.

Exit status (a protocol with the runner, not a user interface): 0 when nothing of the
scenario is active or everything active rests (waits for a signal nobody will send,
or for an operator who does not answer), 3 when the drive time ran out, 4 when a
taking-over process could not open the store (:data:`BLOCKED`), 2 on bad arguments;
anything else is an application error.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from phronomy_fsm.checking.interleavings import (
    Action,
    Step,
    engine_events,
    max_timeout_seconds,
    parse_step,
)
from phronomy_fsm.checking.runfiles import (
    ALPHABET,
    BLOCKED,
    CLOCK,
    RunLog,
    SkewClock,
    trace_path,
)
from phronomy_fsm.runtime.faults import FaultPlan

#: Longest a process drives its executions before it gives up (exit 3).
DRIVE_SECONDS = 20.0
#: Longest a taking-over process waits for something to claim.
TAKEOVER_SECONDS = 20.0
#: Rounds in a row with everything at rest before a process ends.
QUIET_ROUNDS = 3
#: Longest a step waits for the signal or cancel it sent.
STEP_WAIT_SECONDS = 10.0


class StepPlan(FaultPlan):
    """A fault plan that traces every crash point and, at the ``nth`` hit of the
    step's point, kills the process or calls :attr:`act` with the step."""

    def __init__(self, step: Step | None, trace: Callable[[str], None]) -> None:
        super().__init__(None, trace=trace)
        self.step = step
        self.left = step.nth if step is not None else 0
        self.act: Callable[[Step], None] | None = None

    def hit(self, point: str) -> None:
        """Trace ``point``; fire the step at its hit (never returns for a kill)."""
        if self.trace is not None:
            self.trace(point)
        step = self.step
        if step is None or point != step.point:
            return
        with self._lock:
            self.left -= 1
            if self.left != 0:
                return
        if step.action is Action.KILL:
            os.kill(os.getpid(), signal.SIGKILL)
        if self.act is not None:
            self.act(step)


def mark(payload: Any, signal_id: str) -> Any:
    """``payload`` with the checker's mark (a dict payload only)."""
    from phronomy_fsm.durable.app import SIGNAL_MARK

    if isinstance(payload, dict):
        return {**payload, SIGNAL_MARK: signal_id}
    return payload


class Child:
    """The state of one child process (module docstring)."""

    def __init__(self, args: argparse.Namespace) -> None:
        from phronomy_fsm.durable import DurableRuntime
        from phronomy_fsm.durable.app import load_app
        from phronomy_fsm.store.open import open_store

        self.args = args
        self.folder = Path(args.dir).resolve()
        self.log = RunLog(self.folder, args.process)
        self.step = parse_step(args.step) if args.step else None
        trace_fd = os.open(
            trace_path(self.folder, args.process), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600
        )

        def trace(point: str) -> None:
            os.write(trace_fd, f"{point}\n".encode())

        self.plan = StepPlan(self.step, trace)
        self.clock = SkewClock(self.folder / CLOCK)
        alphabet = self.folder / ALPHABET
        self.alphabet: dict[str, dict[str, Any]] = (
            json.loads(alphabet.read_text()) if alphabet.exists() else {}
        )
        self.app = load_app(args.app, args.db)
        self.scenario = self.app.scenarios[args.scenario]
        self.tables = {m.table.machine: m.table for m in self.app.machines}
        self.store = open_store(args.db, faults=self.plan)
        self.runtime = DurableRuntime(
            self.store,
            machines=self.app.machines,
            faults=self.plan,
            listeners=[self.listen, *self.app.listeners],
            own_store=True,
            lease_seconds=args.lease_seconds,
            clock=self.clock,
        )
        self.plan.act = self.act
        self.sent: set[str] = set()

    # ------------------------------------------------------------------ what it sees

    def listen(self, event: Any) -> None:
        """Log acknowledged starts and finishes and every effect's start."""
        from phronomy_fsm.durable import DurableEventKind

        if event.kind is DurableEventKind.STARTED:
            self.log.write("started", execution_id=event.execution_id)
        elif event.kind is DurableEventKind.FINISHED and event.record is not None:
            self.log.write(
                "finished",
                execution_id=event.execution_id,
                status=event.record.status.value,
                state=event.record.state,
            )
        elif event.kind is DurableEventKind.EFFECT_STARTED:
            detail = event.detail
            self.log.write(
                "effect_started",
                execution_id=event.execution_id,
                effect=detail.get("effect"),
                kind=detail.get("kind"),
                key=detail.get("key"),
                attempt=detail.get("attempt"),
            )

    # ------------------------------------------------------------------ the step

    def act(self, step: Step) -> None:
        """Fire ``step`` (not a kill) on the thread that hit its point."""
        self.log.write("injected", step=step.label())
        if step.action is Action.TAKEOVER:
            self.pause()
            return
        if step.action is Action.TIMER:
            self.clock.advance(max_timeout_seconds(self.tables.values()) + 1.0)
            return
        work = self.inject_signal if step.action is Action.SIGNAL else self.inject_cancel
        thread = threading.Thread(target=work, args=(step,), name="check-step", daemon=True)
        thread.start()
        if not step.is_concurrent_with_commit:
            thread.join(STEP_WAIT_SECONDS)

    def pause(self) -> None:
        """Stop the whole process until the runner resumes it (SIGCONT).

        A SQLite store's writer is held first (its lock, private to the store: this is
        test machinery), so no write transaction is open while the process is stopped:
        the database stays writable for the process that takes over, as it would be
        for a worker paused between two commits. A commit in flight finishes first."""
        lock = getattr(self.store, "_write_lock", None)
        held = lock is not None and lock.acquire(timeout=STEP_WAIT_SECONDS)
        try:
            self.log.write("paused", worker_id=self.runtime.worker_id)
            # directed at this thread, so the stop takes it before it goes on (a signal
            # to the process may be taken by another thread a moment later)
            signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)
            self.log.write("resumed")
        finally:
            if held and lock is not None:
                lock.release()

    def inject_signal(self, step: Step) -> None:
        """Send the step's signal to every active execution whose machine declares it."""
        choice = self.alphabet.get(step.signal or "")
        if choice is None:
            self.log.write("refused", error=f"no signal {step.signal!r} in the alphabet")
            return
        event = choice["event"]
        for record in self._active():
            table = self.tables[record.machine]
            if event not in {e.name for e in table.events} or event in engine_events(table):
                continue
            signal_id = f"inject-{self.args.process}-{record.execution_id}"
            self._send(record.execution_id, event, choice.get("payload"), signal_id, "inject")

    def inject_cancel(self, step: Step) -> None:
        """Request a cancel of every active top-level execution."""
        from phronomy_fsm.errors import PhronomyError

        for record in self._active():
            if record.parent_execution_id is not None:
                continue
            try:
                sent = self.runtime.cancel(
                    record.execution_id, reason="cancelled by the interleaving checker"
                )
            except PhronomyError as exc:
                self.log.write("refused", execution_id=record.execution_id, error=repr(exc))
                continue
            self.log.write(
                "sent",
                execution_id=record.execution_id,
                signal_id=sent.signal_id,
                event=None,
                kind="cancel",
                by="inject",
            )

    # ------------------------------------------------------------------ driving

    def _active(self) -> list[Any]:
        return [r for r in self.store.list_records(active=True) if r.machine in self.tables]

    def _send(
        self,
        execution_id: str,
        event: str,
        payload: Any,
        signal_id: str,
        by: str,
        expected_revision: int | None = None,
    ) -> bool:
        """Send a marked signal; log it. True when this process had not sent it yet."""
        from phronomy_fsm.errors import PhronomyError

        if signal_id in self.sent:
            return False
        self.sent.add(signal_id)
        try:
            record = self.runtime.signal(
                execution_id,
                event,
                mark(payload, signal_id),
                signal_id=signal_id,
                expected_revision=expected_revision,
            )
        except PhronomyError as exc:
            self.log.write(
                "refused", execution_id=execution_id, signal_id=signal_id, error=repr(exc)
            )
            return True
        self.log.write(
            "sent",
            execution_id=execution_id,
            signal_id=record.signal_id,
            event=event,
            payload=payload,
            kind="event",
            by=by,
        )
        return True

    def start(self) -> None:
        """Start the scenario, resume the store, or take executions over (``MODE``)."""
        from phronomy_fsm.errors import PhronomyError

        mode = self.args.mode
        if mode == "run":
            try:
                self.scenario.start(self.runtime)
            except PhronomyError as exc:  # refused, nothing acknowledged: not an error
                self.log.write("refused", error=repr(exc))
        elif mode == "recover":
            self.runtime.recover(accept=self.app.accept)
        else:
            deadline = time.monotonic() + TAKEOVER_SECONDS
            while time.monotonic() < deadline and self._active():
                try:
                    claimed = self.runtime.recover(accept=self.app.accept).claimed
                except PhronomyError as exc:  # the paused process holds the database
                    self.log.write("refused", error=repr(exc))
                    claimed = ()
                if claimed:
                    self.log.write("claimed", executions=[eid for eid, _ in claimed])
                    return
                time.sleep(0.1)
            self.log.write("claimed", executions=[])

    def drive(self) -> int:
        """Answer, fire timers and resolve until everything rests (module docstring)."""
        from phronomy_fsm.errors import PhronomyError

        deadline = time.monotonic() + self.args.drive_seconds
        quiet = 0
        while time.monotonic() < deadline:
            if self.scenario.drive is not None:
                try:
                    self.scenario.drive(self.runtime)
                except PhronomyError:
                    pass  # it moved on meanwhile: again at the next round
            active = self._active()
            if not active:
                return 0
            acted = False
            for record in active:
                try:
                    acted |= self._answer(record)
                except PhronomyError:
                    acted = True  # it moved on meanwhile: look again
            resting = all(r.status.value in ("waiting", "recovery_required") for r in active)
            if not acted and resting and self.runtime.wait_at_rest(0.2):
                quiet += 1
                if quiet >= QUIET_ROUNDS:
                    return 0
            else:
                quiet = 0
            time.sleep(0.02)
        return 3

    def _answer(self, record: Any) -> bool:
        """Do what a person or an operator does for ``record``; True when it did
        something new."""
        status = record.status.value
        if status == "waiting":
            answer = self.scenario.on_waiting(record)
            if answer is not None and answer.event is not None:
                signal_id = f"{record.execution_id}-w{record.revision}"
                return self._send(
                    record.execution_id,
                    answer.event,
                    answer.payload,
                    signal_id,
                    "answer",
                    expected_revision=record.revision,
                )
            if record.deadline_at is not None:
                ahead = (record.deadline_at - self.clock.now()).total_seconds()
                if ahead > -1.0:  # nobody answers: its timer fires now
                    self.clock.advance(max(ahead, 0.0) + 0.01)
                    return True
            return False
        if status == "recovery_required" and self.app.operator is not None:
            signal_id = f"{record.execution_id}-res{record.revision}"
            if signal_id in self.sent:
                return False
            answer = self.app.operator(record)
            if answer is None or answer.outcome is None:
                return False
            subject = record.recovery.subject if record.recovery is not None else None
            self.log.write(
                "question",
                execution_id=record.execution_id,
                revision=record.revision,
                effect=None if subject is None else subject.effect,
                key=None if subject is None else subject.key,
                attempt=None if subject is None else subject.attempt,
                outcome=answer.outcome,
            )
            self.sent.add(signal_id)
            self.runtime.resolve(
                record.execution_id,
                expected_revision=record.revision,
                outcome=answer.outcome,
                result=answer.result,
                error=answer.error,
                signal_id=signal_id,
            )
            return True
        return False

    def run(self) -> int:
        """Start, drive, close; the exit status (module docstring)."""
        from phronomy_fsm.durable.app import attach_app

        detach = attach_app(self.app, self.runtime)
        try:
            self.start()
            return self.drive()
        finally:
            detach()
            self.runtime.close(timeout_seconds=5)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one child process (module docstring); its exit status."""
    parser = argparse.ArgumentParser(prog="python -m phronomy_fsm.checking.child")
    parser.add_argument("mode", choices=("run", "recover", "takeover"))
    parser.add_argument("--app", required=True)
    parser.add_argument("--db", required=True)
    parser.add_argument("--dir", required=True)
    parser.add_argument("--scenario", required=True)
    parser.add_argument("--process", type=int, default=0)
    parser.add_argument("--step")
    parser.add_argument("--lease-seconds", type=float, default=5.0)
    parser.add_argument("--drive-seconds", type=float, default=DRIVE_SECONDS)
    args = parser.parse_args(list(argv) if argv is not None else None)
    if args.mode != "takeover":
        return Child(args).run()
    from phronomy_fsm.errors import StorageError

    try:  # a process paused inside a write transaction holds a SQLite database
        child = Child(args)
    except StorageError as exc:
        RunLog(Path(args.dir).resolve(), args.process).write("blocked", error=repr(exc))
        return BLOCKED
    return child.run()


if __name__ == "__main__":
    sys.exit(main())
