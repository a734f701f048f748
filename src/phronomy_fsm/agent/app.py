"""Agents as a durable application: what operator tools, workers and the crash harness
load with ``--app MODULE:FACTORY``.

:func:`agent_app` builds a :class:`~phronomy_fsm.durable.app.DurableApp` whose machines
are the agent's two machines, with hooks reading the given agents' configurations: a
runtime built from it (``phronomy-fsm recover --app``, ``phronomy-fsm worker --app``,
``tools/durable_crash.py``) runs, recovers and answers the executions of those agents
— and claims no other agent's (``DurableApp.accept``); it also starts the handoffs
those agents committed whose target is one of them (``DurableApp.attach``).
:func:`start_execution` starts an agent execution on such a runtime (a scenario of the
crash harness does). The agents must exist in the store (``Agent.create``).
``docs/agent.md`` ("Running agents elsewhere") shows a factory.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from phronomy_fsm.agent.config import AgentConfig
from phronomy_fsm.agent.directory import AgentDirectory
from phronomy_fsm.agent.executions import AgentExecutions, start_execution
from phronomy_fsm.agent.journal import history
from phronomy_fsm.agent.runtime import agent_machines
from phronomy_fsm.durable.app import Answer, DurableApp, EffectEntry, Scenario
from phronomy_fsm.durable.records import ExecutionRecord


def agent_app(
    store: Any,
    configs: Sequence[AgentConfig],
    *,
    scenarios: Mapping[str, Scenario] | None = None,
    operator: Callable[[ExecutionRecord], Answer | None] | None = None,
    effects: Callable[[], Sequence[EffectEntry]] | None = None,
) -> DurableApp:
    """The durable application of ``configs``' agents (module docstring).

    Args:
        store: the store their executions are in (their histories are read from it),
            or what an ``--app`` factory is given — the path of a SQLite store file or
            a PostgreSQL DSN — which is opened read-only for that and closed again.
        configs: the agents (:meth:`AgentConfig.build`), unique by id.
        scenarios / operator / effects: as :class:`~phronomy_fsm.durable.app.DurableApp`
            (for the crash harness).

    Raises:
        ValueError: two configurations share an agent id.
        StorageError, SchemaVersionError: the histories could not be read.
    """
    if isinstance(store, str | os.PathLike):
        from phronomy_fsm.store.open import open_store

        with open_store(store, read_only=True) as opened:
            return agent_app(
                opened, configs, scenarios=scenarios, operator=operator, effects=effects
            )
    directory = AgentDirectory()
    for config in configs:
        try:
            directory.add(config, history(store, config.agent_id))
        except KeyError:
            raise ValueError(f"agent {config.agent_id!r} is configured twice") from None
    ids = frozenset(c.agent_id for c in configs)

    def accept(record: ExecutionRecord) -> bool:
        return record.labels.get("agent_id") in ids

    def attach(runtime: Any) -> Callable[[], None]:
        # the directory's actions on this runtime: handoffs committed by these agents
        # start where their target is configured; those nobody started start now
        executions = AgentExecutions(runtime, directory, name=f"{runtime.name}-agents")
        for agent_id in sorted(ids):
            executions.queue_handoffs(agent_id, executions.pending_handoffs(agent_id))
        return executions.close

    return DurableApp(
        machines=agent_machines(directory),
        scenarios=dict(scenarios or {}),
        operator=operator,
        effects=effects,
        accept=accept,
        attach=attach,
        listeners=(directory.observe,),
    )


__all__ = ["agent_app", "start_execution"]
