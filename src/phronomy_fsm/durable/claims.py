"""Which executions a worker may claim: the specs its registered machines run.

Owns :class:`RunnableSpecs` — one registered machine's spec and the older specs its
declared migrations cover — :class:`SpecKeys`, the flat keys a store's claim statement
matches executions against, and :class:`OtherSpecExecution`, an execution a worker
left because it runs none of its specs. A worker claims an execution only when one of
its :class:`RunnableSpecs` runs the execution's spec (``docs/scale-out.md``, "Rolling
upgrades"): during a rolling upgrade an old worker leaves the executions started under
a newer spec for a worker that runs it, instead of claiming them and parking them
``spec_changed``. The rule for "covers" is :meth:`phronomy_fsm.table.MigrationRow.covers`,
the one the engine also applies when it installs an execution
(:meth:`~phronomy_fsm.durable.machines.MachineFacts.rename_for`).

Must not: read or write a store (the stores turn :class:`SpecKeys` into SQL).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

import attrs

from phronomy_fsm.table import MachineTable, MigrationRow


@attrs.frozen
class RunnableSpecs:
    """The specs of one machine a worker runs: its own, and every older one a
    migration of it covers.

    Attributes:
        machine: the machine's name.
        spec_version / spec_sha256: the registered spec.
        migrations: the spec's declared migrations (``from_version``, and
            ``from_sha256`` when it names one; the renames do not matter here).
    """

    machine: str
    spec_version: int
    spec_sha256: str
    migrations: tuple[MigrationRow, ...] = ()

    @classmethod
    def of(cls, table: MachineTable) -> RunnableSpecs:
        """The specs a runtime that registered ``table`` runs."""
        return cls(table.machine, table.version, table.spec_sha256, tuple(table.migrations))

    def runs(self, spec_version: int, spec_sha256: str) -> bool:
        """True when an execution pinned to spec ``spec_version`` / ``spec_sha256`` of
        this machine can run here: the same spec, or one a migration covers."""
        return spec_sha256 == self.spec_sha256 or any(
            m.covers(spec_version, spec_sha256) for m in self.migrations
        )

    def describe(self) -> str:
        """What it runs, for messages: ``version 2 (sha256 1a2b3c4d5e6f) and, by
        migration, version 1``."""
        text = f"version {self.spec_version} (sha256 {self.spec_sha256[:12]})"
        if not self.migrations:
            return text + " and declares no migration"
        older = ", ".join(
            f"version {m.from_version}"
            + ("" if m.from_sha256 is None else f" (sha256 {m.from_sha256[:12]})")
            for m in self.migrations
        )
        return f"{text} and, by migration, {older}"


class SpecKeys(NamedTuple):
    """What a store's claim statement matches executions against, as flat strings
    (``machine/...``: machine names hold no ``/``; a sha256 is hex):

    - ``machines``: every machine named (the indexed filter);
    - ``any_spec``: machines named without specs (every spec of them matches);
    - ``shas``: ``machine/spec_sha256`` of each registered spec;
    - ``versions``: ``machine/spec_version`` of each migration that names no sha256;
    - ``pairs``: ``machine/spec_version/spec_sha256`` of each migration that names one.

    An execution matches when its machine is in ``any_spec``, or its
    ``machine/spec_sha256`` is in ``shas``, or ``machine/spec_version`` (read from
    its stored record) is in ``versions``, or ``machine/spec_version/spec_sha256`` is
    in ``pairs`` — exactly :meth:`RunnableSpecs.runs`.
    """

    machines: tuple[str, ...]
    any_spec: tuple[str, ...]
    shas: tuple[str, ...]
    versions: tuple[str, ...]
    pairs: tuple[str, ...]

    @property
    def needs_version(self) -> bool:
        """True when matching reads an execution's spec version (some migration)."""
        return bool(self.versions or self.pairs)


#: What a claim filters by: a machine's name (every spec of it) or its RunnableSpecs.
Claimable = str | RunnableSpecs


def spec_keys(machines: Iterable[Claimable]) -> SpecKeys:
    """The :class:`SpecKeys` of ``machines``: names (any spec) or RunnableSpecs."""
    names: list[str] = []
    any_spec: list[str] = []
    shas: list[str] = []
    versions: list[str] = []
    pairs: list[str] = []
    for item in machines:
        if isinstance(item, str):
            names.append(item)
            any_spec.append(item)
            continue
        names.append(item.machine)
        shas.append(f"{item.machine}/{item.spec_sha256}")
        for m in item.migrations:
            if m.from_sha256 is None:
                versions.append(f"{item.machine}/{m.from_version}")
            else:
                pairs.append(f"{item.machine}/{m.from_version}/{m.from_sha256}")
    return SpecKeys(
        tuple(dict.fromkeys(names)),
        tuple(any_spec),
        tuple(shas),
        tuple(versions),
        tuple(pairs),
    )


@attrs.frozen
class OtherSpecExecution:
    """An active execution, owned by no live worker, that a runtime left for a worker
    that runs its spec: it started under (or was last migrated to) spec
    ``spec_version`` / ``spec_sha256`` of ``machine``, which none of the runtime's
    :class:`RunnableSpecs` runs."""

    execution_id: str
    machine: str
    spec_version: int
    spec_sha256: str


def describe_left(
    left: Iterable[OtherSpecExecution], specs: Iterable[RunnableSpecs], *, limit: int = 5
) -> str:
    """Why executions were left, for a log line or a report: ``left 2 execution(s)
    whose spec it does not run: order_flow spec version 2 (sha256 ...): o-1, o-2;
    this worker runs order_flow version 1 (sha256 ...) and declares no migration``.
    At most ``limit`` ids are named per spec."""
    left = list(left)
    groups: dict[tuple[str, int, str], list[str]] = {}
    for e in left:
        groups.setdefault((e.machine, e.spec_version, e.spec_sha256), []).append(e.execution_id)
    parts = []
    for (machine, version, sha), ids in sorted(groups.items()):
        named = ", ".join(ids[:limit]) + (
            f" and {len(ids) - limit} more" if len(ids) > limit else ""
        )
        parts.append(f"{machine} spec version {version} (sha256 {sha[:12]}): {named}")
    machines = {m for m, _v, _s in groups}
    runs = "; ".join(f"{s.machine} {s.describe()}" for s in specs if s.machine in machines)
    return (
        f"left {len(left)} execution(s) whose spec it does not run: "
        + "; ".join(parts)
        + (f"; this worker runs {runs}" if runs else "")
    )


def machine_names(machines: Iterable[Claimable]) -> tuple[str, ...]:
    """The machine names of ``machines`` (names or RunnableSpecs), each once, in order."""
    return tuple(dict.fromkeys(m if isinstance(m, str) else m.machine for m in machines))


__all__ = [
    "Claimable",
    "OtherSpecExecution",
    "RunnableSpecs",
    "SpecKeys",
    "describe_left",
    "machine_names",
    "spec_keys",
]
