"""The operator console in the browser: ``phronomy-fsm console --db PATH_OR_DSN``.

A small web application (Starlette, served by uvicorn; server-rendered Jinja pages, one
stylesheet and one script of its own, no front-end build) over one store of the durable
engine, SQLite or PostgreSQL, for executions of **any** machine:

- the executions list (filters by machine, status and exclusive key / agent, paging,
  counts per status; executions that wait for an operator stand out);
- one execution: its machine's diagram with the current state and the path of its
  commits highlighted, its barrier timeline, signals with their outcomes, journal,
  pending effects, a form per event its waiting state takes, the operator's
  ``recovery_required`` request with a resolve form, and cancel.

Everything it writes goes through :mod:`phronomy_fsm.operator` — the functions behind
``phronomy-fsm signal``, ``resolve`` and ``cancel`` — with the revision the page
showed, so a stale page shows a conflict instead of acting. Safe by default: loopback
only, a token to write, CSRF-checked forms, ``--read-only``
(:mod:`~phronomy_fsm.console.security`). What a machine's application alone knows how
to show (an agent's conversation, its per-tool-call approvals) comes from a per-machine
**presenter** (:mod:`~phronomy_fsm.console.presenters`).

Modules: :mod:`.security`, :mod:`.forms` (parsing), :mod:`.views` (view-models),
:mod:`.presenters`, :mod:`.app` (routes and handlers), :mod:`.server` (serving).
Described in ``docs/console.md``. Needs the ``console`` extra
(``pip install 'phronomy-fsm[console]'``).

Must not: write to a store except through :mod:`phronomy_fsm.operator`; be imported by
the engine, the runtime or the store.
"""

from phronomy_fsm.console.app import ConsoleStores, create_app
from phronomy_fsm.console.presenters import (
    GENERIC_PRESENTER,
    ExecutionView,
    GenericPresenter,
    Presenter,
    Section,
    SignalAction,
    default_presenters,
)
from phronomy_fsm.console.security import TOKEN_ENV, ConsoleSecurity
from phronomy_fsm.console.server import (
    DEFAULT_PORT,
    PreparedConsole,
    bind_socket,
    prepare_console,
    serve_console,
)

__all__ = [
    "DEFAULT_PORT",
    "GENERIC_PRESENTER",
    "TOKEN_ENV",
    "ConsoleSecurity",
    "ConsoleStores",
    "ExecutionView",
    "GenericPresenter",
    "PreparedConsole",
    "Presenter",
    "Section",
    "SignalAction",
    "bind_socket",
    "create_app",
    "default_presenters",
    "prepare_console",
    "serve_console",
]
