"""The durable engine's stores: executions, the barrier log, the inbox, the journal.

Every commit of an execution is one atomic
:class:`~phronomy_fsm.durable.records.DurableCommit`: the execution's revision rises by
exactly one under a compare-and-set (and, under a lease, the owner's fencing token),
its barrier-log row, consumed signals, child executions, signals sent and journal
entries are written with it — all in one transaction, or nothing. The engine
programs against :class:`~phronomy_fsm.durable.ports.ExecutionStore`; every backend
passes the same conformance suite (``tests/engine_port``).

- :mod:`~phronomy_fsm.store.sqlite` — :class:`SqliteBarrierStore`, the embedded
  default (one file, WAL, ``BEGIN IMMEDIATE``, busy timeout, ``synchronous=FULL`` by
  default, group commit);
- :mod:`~phronomy_fsm.store.postgres` — the PostgreSQL store (workers on several hosts);
- :func:`~phronomy_fsm.store.open.open_store` — the store named by a path or a DSN;
- :mod:`~phronomy_fsm.store.schema` — the SQLite schema, its version and migrations;
  :mod:`~phronomy_fsm.store.legacy` — the agent layer's executions of versions 1-4,
  converted by migration 5;
- :mod:`~phronomy_fsm.store.compact` — retention (:class:`CompactReport`);
- :mod:`~phronomy_fsm.store.faults` — :class:`FaultInjectingStore` for tests and the
  crash harness.

The store imports the durable records and errors, never the agent, spec or dispatcher
layers. ``docs/store.md`` has the schema, the error taxonomy, durability settings,
compaction and the command line.
"""

from typing import TYPE_CHECKING

from phronomy_fsm._lazy import lazy_exports

# Imported on first use (PEP 562, phronomy_fsm._lazy): importing one submodule of
# this package must not import the others.
if TYPE_CHECKING:
    from phronomy_fsm.store.compact import CompactReport
    from phronomy_fsm.store.faults import Fault, FaultInjectingStore, FaultKind
    from phronomy_fsm.store.open import open_store
    from phronomy_fsm.store.schema import SCHEMA_VERSION
    from phronomy_fsm.store.sqlite import SqliteBarrierStore

__all__ = [
    "SCHEMA_VERSION",
    "CompactReport",
    "Fault",
    "FaultInjectingStore",
    "FaultKind",
    "SqliteBarrierStore",
    "open_store",
]

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(
        globals(),
        {
            "phronomy_fsm.store.compact": ("CompactReport",),
            "phronomy_fsm.store.faults": (
                "Fault",
                "FaultInjectingStore",
                "FaultKind",
            ),
            "phronomy_fsm.store.open": ("open_store",),
            "phronomy_fsm.store.schema": ("SCHEMA_VERSION",),
            "phronomy_fsm.store.sqlite": ("SqliteBarrierStore",),
        },
    )
