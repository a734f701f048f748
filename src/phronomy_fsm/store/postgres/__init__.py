"""The PostgreSQL store of the durable engine (``docs/scale-out.md``).

- :mod:`~phronomy_fsm.store.postgres.store` — :class:`PostgresStore`, the engine's
  store port on PostgreSQL (psycopg 3, a connection pool, group commit, leases on the
  server's clock, ``LISTEN/NOTIFY``);
- :mod:`~phronomy_fsm.store.postgres.schema` — tables, version and named migrations;
- :mod:`~phronomy_fsm.store.postgres.listen` — the notification thread;
- :mod:`~phronomy_fsm.store.postgres.server` — a throwaway server from the
  distribution's binaries (tests, the crash matrix, the benchmark).

Importing this package needs psycopg (``pip install 'phronomy-fsm[postgres]'``).
"""

from phronomy_fsm.store.postgres.store import PostgresStore

__all__ = ["PostgresStore"]
