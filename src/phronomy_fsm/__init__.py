"""phronomy_fsm: durable executions of explicit finite-state machines generated from YAML specs.

The supported API is what the subpackages list in their ``__all__`` (pinned by
``tests/unit/test_public_api.py``; ``docs/api-reference.md`` documents exactly that):

- :mod:`phronomy_fsm.spec` — the spec model, YAML loader and validator;
- ``phronomy_fsm.codegen`` — the compiler (spec → table → generated module; the
  repository's top-level ``codegen/``);
- :mod:`phronomy_fsm.diagram` — diagrams of a machine;
- :mod:`phronomy_fsm.runtime` — the dispatcher, offload pool, tasks, timers, fault plans;
- :mod:`phronomy_fsm.durable` — the durable engine: executions, barriers, recovery,
  signals;
- :mod:`phronomy_fsm.store` — the SQLite and PostgreSQL stores;
- :mod:`phronomy_fsm.agent` — LLM agents on the durable engine;
- :mod:`phronomy_fsm.operator` — operator actions the CLI and the console call;
- :mod:`phronomy_fsm.errors` — the exception hierarchy;
- :mod:`phronomy_fsm.testing` — test support (a stub OpenAI-compatible server).

Dependencies point one way, in that order (spec first, the CLI last); ``lint-imports``
checks it (the contracts in ``pyproject.toml``). Importing this package imports nothing
heavy: the runtime never imports jinja2 or the YAML parser.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
