"""The operator console in the browser: ``phronomy-fsm console --db PATH_OR_DSN``.

A small web application (Starlette, served by uvicorn; server-rendered Jinja pages, one
stylesheet and one script of its own, no front-end build) over one store of the durable
engine, SQLite or PostgreSQL, for executions of **any** machine — agents' included:

- the executions list (filters by machine, status and exclusive key / agent, paging,
  counts per status; executions that wait for an operator stand out, and each row says
  who it waits for);
- one execution: its machine's diagram with the current state and the path of its
  commits highlighted, its barrier timeline, signals with their outcomes, journal,
  pending effects, a form per event its waiting state takes, the operator's
  ``recovery_required`` request with a resolve form, and cancel. An agent's execution
  also shows its conversation and, while it waits for approval, approve or reject per
  tool call; a tool call shows its tool and arguments.

Everything it writes goes through :mod:`phronomy_fsm.operator` — the functions behind
``phronomy-fsm signal``, ``approve``, ``resolve`` and ``cancel`` — with the revision
the page showed, so a stale page shows a conflict instead of acting. Safe by default:
loopback only, a token to write (never needed on the command line), sessions that
sign-out and idleness end on the server, CSRF-checked forms, ``--read-only``
(:mod:`~phronomy_fsm.console.security`). What a machine's application alone knows how
to show comes from a per-machine **presenter** (:mod:`~phronomy_fsm.console.presenters`:
the generic one, and the agent's).

Modules: :mod:`.security`, :mod:`.forms` (parsing), :mod:`.views` (view-models),
:mod:`.presenters`, :mod:`.pages` (reading handlers), :mod:`.actions` (writing
handlers), :mod:`.app` (the application and its middleware), :mod:`.server`
(serving). Described in ``docs/console.md``. Needs the ``console`` extra
(``pip install 'phronomy-fsm[console]'``).

Must not: write to a store except through :mod:`phronomy_fsm.operator`; be imported by
the engine, the runtime, the store, the agent or the operator library.
"""

from phronomy_fsm.console.app import ConsoleStores, create_app
from phronomy_fsm.console.presenters import (
    AGENT_PRESENTER,
    GENERIC_PRESENTER,
    Action,
    AgentPresenter,
    ApprovalAction,
    ApprovalItem,
    ExecutionView,
    GenericPresenter,
    MessageLine,
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
    "AGENT_PRESENTER",
    "DEFAULT_PORT",
    "GENERIC_PRESENTER",
    "TOKEN_ENV",
    "Action",
    "AgentPresenter",
    "ApprovalAction",
    "ApprovalItem",
    "ConsoleSecurity",
    "ConsoleStores",
    "ExecutionView",
    "GenericPresenter",
    "MessageLine",
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
