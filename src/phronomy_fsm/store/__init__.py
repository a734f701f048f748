"""The durable barrier store: agents, executions, the journal and the barrier log.

Every durable barrier of an execution (admission, provider and tool barriers,
suspension, approval, terminal outcome) is one atomic :class:`BarrierCommit` handed to
a :class:`BarrierStore`: the execution's revision rises by exactly one under a
compare-and-set, the agent root and journal move with it, and a barrier-log row
records it — all in one transaction, or nothing (issue 4; reference §2, §4.4, §5).

- :mod:`~phronomy_fsm.store.records` — the frozen attrs records and their canonical JSON.
- :mod:`~phronomy_fsm.store.base` — the :class:`BarrierStore` protocol, the
  reconciliation dispositions and :class:`CompactReport`.
- :mod:`~phronomy_fsm.store.sqlite` — :class:`SqliteBarrierStore` (WAL, ``BEGIN
  IMMEDIATE``, busy timeout, ``synchronous=FULL`` by default, group commit).
- :mod:`~phronomy_fsm.store.faults` — :class:`FaultInjectingStore` for tests and the
  crash harness.
- :mod:`~phronomy_fsm.store.compact` — retention.
- :mod:`~phronomy_fsm.store.ownership` — which process owns an agent (the
  ``agent_owners`` claim, :class:`AgentClaim`, :class:`OwnerRecord`).

The store imports only ``records`` and ``errors`` from the rest of the package; see
``docs/store.md`` for the schema, the error taxonomy and durability settings.
"""

from phronomy_fsm.store.base import (
    COMMITTED,
    CONFLICT,
    DISPOSITIONS,
    NOT_COMMITTED,
    BarrierStore,
    CompactReport,
)
from phronomy_fsm.store.faults import Fault, FaultInjectingStore, FaultKind
from phronomy_fsm.store.ownership import AgentClaim, OwnerRecord, ProcessIdentity
from phronomy_fsm.store.records import (
    AgentLifecycle,
    AgentRecord,
    BarrierCommit,
    BarrierRecord,
    CommitReceipt,
    ExecutionRecord,
    ExecutionStatus,
    JournalRecord,
)
from phronomy_fsm.store.schema import SCHEMA_VERSION
from phronomy_fsm.store.sqlite import SqliteBarrierStore

__all__ = [
    "COMMITTED",
    "CONFLICT",
    "DISPOSITIONS",
    "NOT_COMMITTED",
    "SCHEMA_VERSION",
    "AgentClaim",
    "AgentLifecycle",
    "AgentRecord",
    "BarrierCommit",
    "BarrierRecord",
    "BarrierStore",
    "CommitReceipt",
    "CompactReport",
    "ExecutionRecord",
    "ExecutionStatus",
    "Fault",
    "FaultInjectingStore",
    "FaultKind",
    "JournalRecord",
    "OwnerRecord",
    "ProcessIdentity",
    "SqliteBarrierStore",
]
