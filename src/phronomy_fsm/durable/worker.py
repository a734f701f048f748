"""A worker process: runs the executions of an application's machines that any process
started, many workers sharing one store (``docs/scale-out.md``).

A :class:`Worker` wraps a :class:`~phronomy_fsm.durable.runtime.DurableRuntime` (its
lease, heartbeat, inbox and fencing) with a **claim loop**: every ``scan_seconds`` — and
at once when the store notifies that work appeared (PostgreSQL ``phronomy_work``) or
when one of its executions finished — it claims runnable executions up to its free
capacity (``concurrency`` minus the executions it runs; those waiting for a signal or
an operator do not count) and resumes each by the rules
of recovery: a new one enters its initial state, one whose worker died is replayed from
its last commit, a waiting one waits again, a parked one waits for an operator. Dead
workers are found two ways: a worker on this host whose process is provably gone is
retired at once (``retire_dead_workers``); any other's executions become claimable when
its lease passes on the store's clock, so a dead worker's executions are taken over
within about one lease plus one scan.

A worker claims only executions whose spec its machines run — their own spec, or an
older one a declared migration covers; the others wait for a worker that runs them, and
its log says so, about once a lease (``docs/scale-out.md``, "Rolling upgrades"). Once the
store refuses a write because newer code migrated its schema, the worker stops: it
claims nothing more, lets its executions go without writing, and :meth:`Worker.run`
ends with the SchemaVersionError (``phronomy-fsm worker`` exits 1 saying so).

``phronomy-fsm worker --db DSN --app MODULE:FACTORY [--concurrency N]`` runs one
(:mod:`phronomy_fsm.cli.worker_commands`);
:func:`phronomy_fsm.operator.worker.run_worker` is the same as a call (it opens the
store, which this layer must not do: the stores sit above the engine).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, cast

from phronomy_fsm.durable.app import DurableApp, attach_app
from phronomy_fsm.durable.claims import describe_left
from phronomy_fsm.durable.ports import ExecutionStore, NotifyingStore
from phronomy_fsm.durable.runtime import DEFAULT_LEASE_SECONDS, DurableRuntime
from phronomy_fsm.durable.schedules import ScheduleRunner
from phronomy_fsm.durable.types import DurableEvent, DurableEventKind
from phronomy_fsm.errors import PhronomyError, SchemaVersionError

log = logging.getLogger("phronomy_fsm.worker")

#: Default number of executions one worker holds at once.
DEFAULT_CONCURRENCY = 16
#: Most waiting executions one pass of the claim loop takes besides its capacity (they
#: rest as an index entry until their signal or timer: ``docs/runtime.md``).
WAITING_BATCH = 500


class Worker:
    """Claims and runs executions of ``app``'s machines from ``store`` (module docstring).

    Args:
        store: an :class:`~phronomy_fsm.durable.ports.ExecutionStore` (any backend;
            PostgreSQL for several hosts).
        app: the :class:`~phronomy_fsm.durable.app.DurableApp` whose machines it runs.
        concurrency: most executions running at once (≥ 1); executions waiting durably
            or parked for an operator stay held without counting.
        lease_seconds: the worker's lease (heartbeat every third of it).
        scan_seconds: how often it looks for runnable executions without being told
            (default: a quarter of the lease).
        poll_seconds: the inbox poll (default 0.05 s; 1 s when the store notifies).
        max_offload: the offload pool's threads (effects running at once).
        name: the worker's name (logs, the workers table).
        listeners: more :class:`DurableEvent` listeners (loop thread).
        own_store: close ``store`` when the worker stops.
        probe_processes: retire workers of this host whose process is provably gone
            at each scan, without waiting for their lease (default on; off measures
            the lease path as a worker on another host sees it:
            ``phronomy-fsm worker --no-probe-processes``).

    Raises:
        ValueError: a bound is not positive.
        StorageError: the worker cannot register in the store.
    """

    def __init__(
        self,
        store: ExecutionStore,
        app: DurableApp,
        *,
        concurrency: int = DEFAULT_CONCURRENCY,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        scan_seconds: float | None = None,
        poll_seconds: float | None = None,
        max_offload: int | None = None,
        name: str = "phronomy-worker",
        listeners: tuple[Any, ...] = (),
        own_store: bool = False,
        probe_processes: bool = True,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        notifies = callable(getattr(store, "add_listener", None)) and bool(
            getattr(store, "notifications", False)
        )
        self.store = store
        self.app = app
        self.concurrency = int(concurrency)
        self.scan_seconds = float(scan_seconds or lease_seconds / 4)
        self.claimed_total = 0
        self.probe_processes = probe_processes
        #: the SchemaVersionError that stopped this worker, once one did
        self.refused: SchemaVersionError | None = None
        #: executions left for another spec at the last look, and when to look next
        self._left: frozenset[str] = frozenset()
        self._next_left_check = 0.0
        #: when (time.monotonic) the next pass looks for stranded claims
        self._next_stranded_check = 0.0
        self._wake = threading.Event()
        self._stop = threading.Event()
        self.runtime = DurableRuntime(
            store,
            machines=app.machines,
            lease_seconds=lease_seconds,
            poll_seconds=poll_seconds or (1.0 if notifies else 0.05),
            max_workers=max_offload or max(4, min(64, self.concurrency * 2)),
            listeners=[self._on_event, *app.listeners, *listeners],
            name=name,
            own_store=own_store,
        )
        self._detach = attach_app(app, self.runtime)
        self.worker_id = self.runtime.worker_id
        self.runtime.add_refusal_listener(self._on_refused)
        self._unlisten = (
            cast(NotifyingStore, store).add_listener(self._on_notification)
            if notifies
            else (lambda: None)
        )
        self._thread: threading.Thread | None = None
        machines = {m.name: m for m in app.machines}
        #: starts the due slots of the schedules of its machines at each pass
        #: (``docs/operations.md``, "Schedules")
        self.schedules = ScheduleRunner(
            store,
            lambda: machines,
            self.worker_id,
            claim_seconds=lease_seconds,
            clock=self.runtime.clock,
        )

    # ------------------------------------------------------------------ events

    def _on_notification(self, channel: str, payload: str) -> None:
        if channel != "phronomy_signals":  # work appeared, or the listener reconnected
            self._wake.set()

    def _on_refused(self, error: SchemaVersionError) -> None:
        self.refused = error
        self.stop()

    def _on_event(self, event: DurableEvent) -> None:
        kind = event.kind
        if kind in (DurableEventKind.FINISHED, DurableEventKind.RELEASED):
            if kind is DurableEventKind.RELEASED:
                log.warning(
                    "worker %s: let go of execution %s (%s)",
                    self.worker_id,
                    event.execution_id,
                    event.detail.get("reason", "another worker owns it"),
                )
            self._wake.set()

    @property
    def running(self) -> int:
        """How many of the executions it holds are running now — the ones its
        ``concurrency`` limits: an execution waiting durably (for a person, a timer) or
        parked for an operator is held but not counted, so waiting work never keeps a
        worker from claiming new work (counted on the loop thread)."""
        runtime = self.runtime
        try:
            return int(runtime.dispatcher.call(runtime.engine.running_count).result(10))
        except (PhronomyError, TimeoutError):
            # the loop did not answer (closing, or busy for seconds): claim nothing now
            return self.concurrency

    @property
    def held(self) -> int:
        """How many executions this worker holds now (live in its engine, or resting
        there until their signal or timer; counted on the loop thread, after every
        install queued so far)."""
        runtime = self.runtime
        try:
            return int(runtime.dispatcher.call(lambda: len(runtime.engine.held_ids())).result(10))
        except (PhronomyError, TimeoutError):
            return 0

    # ------------------------------------------------------------------ the loop

    def scan(self) -> list[tuple[str, str]]:
        """One pass of the claim loop: start the due slots of its machines' schedules
        (``docs/operations.md``, "Schedules"), retire dead workers on this host, resume the
        executions it owns but does not run (a claim whose answer was lost:
        :meth:`DurableRuntime.resume_stranded`), then claim up to the free capacity.
        Returns ``[(execution_id, status)]`` claimed or resumed. Raises StorageError."""
        try:  # first: what it starts is claimed below at once
            self.schedules.tick()
        except SchemaVersionError:
            raise
        except PhronomyError as exc:  # claiming must not wait for the schedules
            log.warning("worker %s: schedules not run this pass: %s", self.worker_id, exc)
        if self.probe_processes:
            self.runtime.retire_dead_workers()
        claimed: list[tuple[str, str]] = []
        now = time.monotonic()
        if now >= self._next_stranded_check:
            # Why not every pass: it reads every execution owned here (a hundred
            # thousand waiting ones, during a restart's backlog); a stranded claim is
            # resumed once seen twice, min_age apart, so twice per min_age is enough
            min_age = max(1.0, self.scan_seconds)
            self._next_stranded_check = now + min_age / 2
            claimed += self.runtime.resume_stranded(min_age_seconds=min_age)
        free = self.concurrency - self.running
        working: list[tuple[str, str]] = []
        if free > 0:
            working = self.runtime.claim(free, accept=self.app.accept)
            claimed += working
        reached_waiting = any(status == "waiting" for _e, status in working)
        if self.app.accept is None and (free <= 0 or reached_waiting):
            # waiting ones use no capacity: a batch of them, once the capacity is used
            # or the claim reached them (claims take running ones first, so a claim
            # that found none found nothing claimable at all)
            claimed += self.runtime.claim(WAITING_BATCH, waiting_only=True)
        self._report_left()
        if claimed:
            self.claimed_total += len(claimed)
            resumed = [f"{eid} ({status})" for eid, status in claimed]
            log.info(
                "worker %s: claimed %d execution(s): %s%s",
                self.worker_id,
                len(claimed),
                ", ".join(resumed[:5]),
                " ..." if len(resumed) > 5 else "",
            )
        return claimed

    def _report_left(self) -> None:
        """About once a lease, log the executions left for a worker of another spec
        when they changed since the last look (``docs/scale-out.md``, "Rolling
        upgrades"): during an upgrade an old worker says what it leaves, and why."""
        now = time.monotonic()
        if now < self._next_left_check:
            return
        self._next_left_check = now + max(self.runtime.lease_seconds, self.scan_seconds)
        left = self.runtime.left_for_others()
        accept = self.app.accept
        if accept is not None:  # an agent application: only the agents it runs
            left = tuple(e for e in left if accept(self.store.load_record(e.execution_id)))
        ids = frozenset(e.execution_id for e in left)
        if ids != self._left and left:
            log.warning(
                "worker %s: %s; they wait for a worker that runs their spec",
                self.worker_id,
                describe_left(left, self.runtime.runnable_specs),
            )
        self._left = ids

    def run(self, stop: threading.Event | None = None) -> None:
        """Claim and run until :meth:`stop` (or ``stop`` is set); then close.
        Store errors are logged and the loop goes on (the store may be restarting).

        Raises:
            SchemaVersionError: newer code migrated the store: the worker stopped
                writing (its executions were let go) and closed.
        """
        log.info(
            "worker %s started: machines %s, concurrency %d, lease %.1f s, store %s",
            self.worker_id,
            ", ".join(self.runtime.machines),
            self.concurrency,
            self.runtime.lease_seconds,
            getattr(self.store, "path", "?"),
        )
        try:
            while not self._stop.is_set() and not (stop is not None and stop.is_set()):
                try:
                    claimed = self.scan()
                except SchemaVersionError:  # the runtime logged it and stops
                    break
                except PhronomyError as exc:
                    log.warning("worker %s: claim scan failed: %s", self.worker_id, exc)
                    claimed = []
                except Exception:  # the claim loop must outlive one bad scan
                    log.exception("worker %s: claim scan failed", self.worker_id)
                    claimed = []
                if claimed and self.running < self.concurrency:
                    continue  # there may be more: look again at once
                try:  # no later than the next slot of a schedule
                    wait = self.schedules.seconds_until_due(self.scan_seconds)
                except PhronomyError:
                    wait = self.scan_seconds
                self._wake.wait(max(0.01, wait))
                self._wake.clear()
        finally:
            self.close()
        if self.refused is not None:
            raise self.refused

    def start(self) -> Worker:
        """Run :meth:`run` on a background thread; returns ``self`` (a
        SchemaVersionError that ends it is kept in :attr:`refused`)."""
        self._thread = threading.Thread(
            target=self._run_quietly, name=f"{self.worker_id}-claim", daemon=True
        )
        self._thread.start()
        return self

    def _run_quietly(self) -> None:
        try:
            self.run()
        except SchemaVersionError:
            pass  # logged by the runtime; kept in self.refused

    def stop(self) -> None:
        """Ask the loop to stop (it closes the worker)."""
        self._stop.set()
        self._wake.set()

    def close(self, timeout_seconds: float = 10.0) -> None:
        """Stop claiming, let running executions reach a resting point for up to
        ``timeout_seconds``, end the lease (others claim what is left at once).
        Idempotent."""
        self._stop.set()
        self._wake.set()
        self._unlisten()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout_seconds + 5)
        self._detach()
        self.runtime.close(timeout_seconds=timeout_seconds)
        log.info("worker %s stopped (claimed %d in all)", self.worker_id, self.claimed_total)

    def wait_idle(self, timeout_seconds: float) -> bool:
        """Wait until this worker holds nothing; False on timeout (for tests)."""
        deadline = time.monotonic() + timeout_seconds
        while self.held:
            if time.monotonic() >= deadline:
                return False
            self._wake.wait(0.05)
        return True


__all__ = ["DEFAULT_CONCURRENCY", "WAITING_BATCH", "Worker"]
