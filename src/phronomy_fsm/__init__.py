"""phronomy_fsm: durable LLM-agent executions as explicit, generated finite-state machines.

Layers, each depending only on those before it (``../shared/design/ARCHITECTURE.md``):

- :mod:`phronomy_fsm.spec` — the spec model, YAML loader and validator;
- ``phronomy_fsm.codegen`` — the Jinja compiler (the repository's top-level ``codegen/``);
- :mod:`phronomy_fsm.table` and :mod:`phronomy_fsm.generated` — transition tables;
- :mod:`phronomy_fsm.runtime` — dispatcher loop, offload pool, tasks, timers;
- :mod:`phronomy_fsm.store` — the SQLite barrier store;
- :mod:`phronomy_fsm.agent` — agents, providers, tools, approval and recovery.

Importing this package imports nothing heavy: the runtime never imports jinja2 or the
YAML parser.
"""

__version__ = "0.1.0"
