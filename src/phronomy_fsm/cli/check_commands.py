"""``phronomy-fsm check``: the interleaving checker for any spec and its application.

``phronomy-fsm check SPEC --app MODULE:FACTORY [--quick | --full] [--seed N] [--jobs N]
[--only LABEL ...] [--keep-failures DIR] [--json]`` runs
:func:`phronomy_fsm.checking.check_app` and prints its report: the figures, each
invariant's count and every violation with the command that replays its interleaving
(``docs/operations.md``, "The interleaving checker"). Exit status 0 when every
invariant holds, 1 when one is broken or the application cannot be checked.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from phronomy_fsm.cli._common import fail, one_line
from phronomy_fsm.errors import PhronomyError

if TYPE_CHECKING:
    from phronomy_fsm.checking import CheckReport


@click.command("check")
@click.argument("spec", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--app",
    "app",
    required=True,
    help="The durable application factory MODULE:FACTORY, factory(db_path) -> DurableApp, "
    "that registers a machine generated from SPEC and declares scenarios to drive it "
    "(imported with the working directory on the path).",
)
@click.option(
    "--quick/--full",
    "quick",
    default=True,
    show_default=True,
    help="--quick: a seeded sample of kills, signals, cancels, timers and takeovers, "
    "spread over the crash points (CI: about a minute a spec on two cores); --full: every "
    "interleaving the plans name.",
)
@click.option("--seed", type=int, default=1, show_default=True, help="The quick form's sample.")
@click.option(
    "--jobs",
    type=click.IntRange(min=1),
    default=2,
    show_default=True,
    help="Interleavings run at once (each runs its processes one after another).",
)
@click.option(
    "--only",
    "only",
    multiple=True,
    metavar="LABEL",
    help="Run only this interleaving (a violation's label, to replay it); repeatable.",
)
@click.option(
    "--keep-failures",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Copy the folder of every run with a violation here (its store, logs, traces).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def check(
    spec: Path,
    app: str,
    quick: bool,
    seed: int,
    jobs: int,
    only: tuple[str, ...],
    keep_failures: Path | None,
    as_json: bool,
) -> None:
    """Explore interleavings of SPEC's executions run by --app, and check invariants.

    At every crash point its scenarios reach, a run kills the process, sends a signal,
    cancels, fires the timers or pauses the worker past its lease while another takes
    over; then it checks that no effect ran twice, every signal's change is applied
    once, no signal is lost and every execution ends, waits for a signal, or waits for
    an operator (docs/operations.md, "The interleaving checker").
    """
    from phronomy_fsm.checking import CheckOptions, check_app

    options = CheckOptions(full=not quick, seed=seed, jobs=jobs, only=only, keep=keep_failures)
    try:
        report = check_app(spec, app, options)
    except PhronomyError as exc:
        fail(str(exc))
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2))
    else:
        click.echo(render_summary(report))
    if not report.is_clean:
        raise SystemExit(1)


def render_summary(report: CheckReport) -> str:
    """The report for a person: figures, each invariant's count, each violation with
    the command that replays its interleaving (escaped: details quote stored data)."""
    kinds = ", ".join(f"{k} {n}" for k, n in report.by_kind.items())
    lines = [
        (
            f"{report.machine} ({report.mode}, seed {report.seed}): {report.interleavings} "
            f"interleavings ({kinds}) in {report.seconds} s; "
            f"{len(report.points_reached)}/{len(report.points)} crash points reached"
        )
    ]
    if report.signals:
        lines.append(f"  signals sent at every step: {', '.join(report.signals)}")
    lines += [f"  {name}: {count}" for name, count in report.invariants.items()]
    if report.points_never_reached:
        lines.append(f"  never reached: {', '.join(report.points_never_reached)}")
    for v in report.violations:
        lines.append(
            one_line(f"VIOLATION {v['invariant']} (execution {v['execution']}): {v['detail']}")
        )
        lines.append(one_line(f"  interleaving: {v['interleaving']}"))
        lines.append(one_line(f"  replay: {v['replay']}"))
    return "\n".join(lines)


def register(main: click.Group) -> None:
    """Add ``check`` to the CLI group."""
    main.add_command(check)
