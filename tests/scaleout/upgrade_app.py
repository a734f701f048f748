"""Two specs of the order machine for the rolling-upgrade tests: ``create_v1`` is the
order app as generated (spec version 1); ``create_v2`` is the same app as a newer spec
of the machine would be — version 2, another sha256, and a migration from version 1
that renames no state — so a v2 worker also runs executions started under v1, and a v1
worker runs none started under v2 (``docs/scale-out.md``, "Rolling upgrades");
``create_v2_without_migration`` runs version 2 only."""

from __future__ import annotations

import hashlib
from typing import Any

import attrs

from phronomy_fsm.durable.app import DurableApp
from phronomy_fsm.table import MigrationRow
from tests.durable.order_app import create_app

#: The sha256 a version-2 spec of the order machine has here.
V2_SHA256 = hashlib.sha256(b"order_flow version 2").hexdigest()


def create_v1(db_path: str) -> DurableApp:
    """The order app of spec version 1 (``--app tests.scaleout.upgrade_app:create_v1``)."""
    return create_app(db_path)  # type: ignore[no-any-return]


def create_v2(db_path: str) -> DurableApp:
    """The order app of spec version 2, migrating version 1
    (``--app tests.scaleout.upgrade_app:create_v2``)."""
    return _version_2(db_path, (MigrationRow(1, None, ()),))


def create_v2_without_migration(db_path: str) -> DurableApp:
    """The order app of spec version 2 declaring no migration: it runs no execution
    started under version 1."""
    return _version_2(db_path, ())


def _version_2(db_path: str, migrations: tuple[MigrationRow, ...]) -> DurableApp:
    app: Any = create_app(db_path)
    machine = app.machines[0]
    table = machine.table._replace(version=2, spec_sha256=V2_SHA256, migrations=migrations)
    return attrs.evolve(app, machines=(attrs.evolve(machine, table=table),))
