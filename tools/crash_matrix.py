"""The crash-injection matrix: the agent's by default, any durable machine's with ``--spec``.

By default it kills the agent application of :mod:`agent_crash_app` (agents built with
:func:`phronomy_fsm.agent.app.agent_app`, a deterministic LLM and tools that record every
call beside the store) with SIGKILL at every crash point of the agent's two machines
(``fsm_specs/agent_session.yaml``, ``fsm_specs/tool_call.yaml``): before, during and
after each barrier and each engine commit (``@start``, ``@wait``, ``@final``,
``@recovery``, ``@resolution``, ``@cancel``), before each non-pure effect starts and
right after each offloaded piece of work returns. It restarts the application with
``recover`` until its executions finish, answering as a person (approvals) and as a
truthful operator, and checks the generic invariants of :mod:`durable_crash` and the
agent's of :mod:`agent_crash_checks`. The harness is :mod:`durable_crash`'s
(``docs/operations.md``, "The crash-injection matrix").

Usage::

    python tools/crash_matrix.py [--quick] [--json | --markdown] [--jobs N]
        [--keep-failures DIR] [--scenario NAME ...] [--plan SCENARIO:POINT[,POINT] ...]
    python tools/crash_matrix.py --spec SPEC --app MODULE:FACTORY [--quick] [--json]
        [--jobs N] [--keep-failures DIR]

``--quick`` kills every point once (with a scenario that reaches it) plus the two-kill
plans; the full mode kills each point at every hit (up to 4) in every scenario.
``--scenario`` limits the agent matrix to some scenarios; ``--plan`` runs only the given
plans (a failing run's label, to reproduce it). With ``--spec`` and ``--app`` it runs
the matrix of any durable machine: ``MODULE:FACTORY`` builds a
:class:`~phronomy_fsm.durable.app.DurableApp` that registers a machine generated from
``SPEC``.

Exit status: 0 when every invariant count is 0, 1 otherwise, 2 on a usage error.

``phronomy-fsm check SPEC --app MODULE:FACTORY`` (``docs/operations.md``, "The
interleaving checker") runs these kills and more for any durable machine: a signal, a
cancel, the timers or a takeover at every crash point, and more invariants.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for _path in (str(ROOT), str(ROOT / "tools")):
    if _path not in sys.path:
        sys.path.insert(0, _path)

import durable_crash

#: The agent's application, as the harness loads it.
AGENT_APP = "tools.agent_crash_app:create_app"
#: The agent's specs: its session and its tool calls.
AGENT_SPECS = (ROOT / "fsm_specs" / "agent_session.yaml", ROOT / "fsm_specs" / "tool_call.yaml")


def agent_matrix(
    *,
    quick: bool,
    jobs: int,
    keep: Path | None = None,
    scenarios: list[str] | None = None,
    plans: list[str] | None = None,
) -> dict[str, Any]:
    """Run the agent's matrix (module docstring); return :func:`durable_crash.matrix`'s
    report, whose ``invariants`` hold the agent's counts too."""
    import agent_crash_checks

    return durable_crash.matrix(
        list(AGENT_SPECS),
        AGENT_APP,
        quick=quick,
        jobs=jobs,
        keep=keep,
        checks=durable_crash.Checks(agent_crash_checks.INVARIANTS, agent_crash_checks.check_run),
        engine_barriers=(*durable_crash.ENGINE_BARRIERS, "@cancel"),
        scenarios=scenarios,
        plans=None if plans is None else [durable_crash.parse_plan(p) for p in plans],
    )


def main(argv: list[str] | None = None) -> int:
    """The command line (module docstring)."""
    parser = argparse.ArgumentParser(
        description="Crash-injection matrix: the agent's, or any durable machine's with --spec."
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--markdown", action="store_true", help="print the per-point table as Markdown"
    )
    parser.add_argument("--quick", action="store_true", help="kill every crash point once (CI)")
    parser.add_argument("--jobs", type=int, default=2, help="runs in parallel (default 2)")
    parser.add_argument(
        "--keep-failures", type=Path, default=None, help="copy the folder of each failing run here"
    )
    parser.add_argument("--scenario", action="append", help="limit to these scenarios")
    parser.add_argument(
        "--plan",
        action="append",
        metavar="SCENARIO:POINT[,POINT...]",
        help="run only these plans (one armed point per process, '-' for none)",
    )
    parser.add_argument("--spec", type=Path, help="a durable machine's spec (with --app)")
    parser.add_argument(
        "--app",
        metavar="MODULE:FACTORY",
        help="with --spec: the DurableApp factory that runs the machine (e.g. "
        "docs.examples.order_workflow:create_app)",
    )
    args = parser.parse_args(argv)
    if args.spec is not None or args.app is not None:
        if args.spec is None or args.app is None:
            parser.error("--spec and --app go together")
        if args.scenario or args.plan or args.markdown:
            parser.error(
                "--scenario, --plan and --markdown apply to the agent's matrix, not --spec"
            )
        forwarded = ["matrix", "--spec", str(args.spec), "--app", args.app]
        forwarded += ["--jobs", str(args.jobs)] + (["--quick"] if args.quick else [])
        forwarded += ["--json"] if args.json else []
        if args.keep_failures is not None:
            forwarded += ["--keep-failures", str(args.keep_failures)]
        return durable_crash.main(forwarded)
    report = agent_matrix(
        quick=args.quick,
        jobs=args.jobs,
        keep=args.keep_failures,
        scenarios=args.scenario,
        plans=args.plan,
    )
    if args.json:
        print(json.dumps(report, indent=2))
    if args.markdown:
        print(durable_crash.render_markdown(report))
    if not args.json and not args.markdown:
        print(durable_crash.render_summary(report))
    return 0 if not any(report["invariants"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
