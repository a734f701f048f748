"""Spec commands of the ``phronomy-fsm`` CLI: ``validate``, ``generate``, ``diagram``.

A thin click layer over :mod:`phronomy_fsm.spec.validate`, ``phronomy_fsm.codegen``,
:mod:`phronomy_fsm.diagram` and :mod:`phronomy_fsm.diagram_files`. Diagnostics go to
stderr as ``file:line:col: CODE message``; results go to stdout. Exit codes: 0 success;
1 invalid spec, stale output, render failure or a malformed ``[tool.phronomy_fsm]``
table; 2 usage error (click's own, and a command that needs paths run where no
``[tool.phronomy_fsm]`` table provides them). Library errors (:class:`PhronomyError`
subclasses) and ``OSError`` become one-line diagnostics and exit code 1, never a
traceback.

Without spec paths, ``generate`` and ``diagram --all`` read ``[tool.phronomy_fsm]``
(``specs``, ``out``, ``diagrams``) from the nearest ``pyproject.toml`` above the working
directory (:mod:`phronomy_fsm.project`), so they behave the same in this repository and
in a user's project.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, NoReturn

import click

from phronomy_fsm.cli._common import fail, one_line
from phronomy_fsm.errors import PhronomyError, ProjectConfigError, SpecError
from phronomy_fsm.project import ProjectConfig, find_pyproject, load_project_config
from phronomy_fsm.spec.issues import SpecIssue
from phronomy_fsm.spec.loader import DEFAULT_MAX_BYTES
from phronomy_fsm.spec.model import MachineSpec
from phronomy_fsm.spec.resolve import resolve_spec
from phronomy_fsm.spec.validate import CheckResult, check_spec_file

_SUFFIX_FORMATS = {
    ".dot": "dot",
    ".gv": "dot",
    ".svg": "svg",
    ".png": "png",
    ".mmd": "mermaid",
    ".mermaid": "mermaid",
}


# ------------------------------------------------------------------------ helpers


def render_issue(issue: SpecIssue) -> str:
    """``file:line:col: CODE message (at path)``; warnings say ``warning:`` before the
    message. Control characters (from file names or spec text) are escaped."""
    prefix = "" if issue.is_error else "warning: "
    return one_line(f"{issue.loc.render()}: {issue.code} {prefix}{issue.message} (at {issue.path})")


#: Warnings of one code in one file printed before the rest are counted on one line.
WARNINGS_SHOWN_PER_CODE = 3


def _echo_issues(issues: Iterable[SpecIssue]) -> None:
    """Print every error, and up to :data:`WARNINGS_SHOWN_PER_CODE` warnings of each
    code per file followed by one line counting the rest (``validate --format json``
    lists
    every one): a spec with no descriptions at all gives four lines, not forty."""
    shown: Counter[tuple[str, str]] = Counter()
    folded: Counter[tuple[str, str]] = Counter()
    for issue in issues:
        key = (issue.loc.file, issue.code)
        if not issue.is_error and shown[key] >= WARNINGS_SHOWN_PER_CODE:
            folded[key] += 1
            continue
        shown[key] += 1
        click.echo(render_issue(issue), err=True)
    for (file, code), count in folded.items():
        click.echo(
            one_line(
                f"{file}: {code} warning: {count} more like these (validate --format json "
                "lists every one)"
            ),
            err=True,
        )


def _fail(message: str) -> NoReturn:
    fail(message)  # fail() escapes it (one_line)


@contextlib.contextmanager
def _errors_to_exit_code() -> Iterator[None]:
    """Turn library errors and OS errors into a one-line diagnostic and exit code 1."""
    try:
        yield
    except SpecError as exc:
        _echo_issues(exc.issues)
        _fail(str(exc))
    except PhronomyError as exc:
        _fail(str(exc))
    except OSError as exc:
        _fail(
            f"{exc.filename + ': ' if isinstance(exc.filename, str) else ''}{exc.strerror or exc}"
        )


def _shown(path: Path) -> str:
    """A path for messages: relative to the working directory when under it."""
    try:
        return Path(os.path.abspath(path)).relative_to(Path.cwd()).as_posix()
    except ValueError:
        return path.as_posix()


def _config() -> ProjectConfig:
    """The project configuration; its absence is a usage error (exit code 2): the
    command needs paths on the command line or a ``[tool.phronomy_fsm]`` table."""
    try:
        return load_project_config()
    except ProjectConfigError as exc:
        if getattr(exc, "missing", False):
            raise click.UsageError(str(exc)) from None
        raise


def _require(config: ProjectConfig, key: str) -> Path:
    try:
        return config.require(key)
    except ProjectConfigError as exc:
        raise click.UsageError(str(exc)) from None


def _optional_config() -> ProjectConfig | None:
    """The project configuration, or ``None`` when there is no ``pyproject.toml`` or
    it has no ``[tool.phronomy_fsm]`` table. A malformed table still raises."""
    try:
        return load_project_config()
    except ProjectConfigError as exc:
        if getattr(exc, "missing", False):
            return None
        raise


def _generate_beside(
    generate: Any, spec_paths: list[Path], *, check: bool, base: Path | None
) -> Any:
    """Run ``generate`` once per folder of ``spec_paths``, writing each module beside
    its spec; one report of every file and issue."""
    by_folder: dict[Path, list[Path]] = {}
    for path in spec_paths:
        by_folder.setdefault(path.parent, []).append(path)
    reports = [
        generate(paths, folder, check=check, base=base, find_orphans=False)
        for folder, paths in by_folder.items()
    ]
    if len(reports) == 1:
        return reports[0]
    import attrs

    first = reports[0]
    return attrs.evolve(
        first,
        files=tuple(f for r in reports for f in r.files),
        issues=tuple(i for r in reports for i in r.issues),
        orphans=(),
    )


def _project_root() -> Path | None:
    pyproject = find_pyproject()
    return pyproject.parent if pyproject is not None else None


# ----------------------------------------------------------------------- validate


@click.command("validate")
@click.argument("specs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="text: diagnostics on stderr; json: one JSON document on stdout.",
)
@click.option(
    "--strict", is_flag=True, help="Fail on warnings too (unused events, missing descriptions)."
)
@click.option(
    "--max-bytes",
    type=click.IntRange(min=1),
    default=DEFAULT_MAX_BYTES,
    show_default=True,
    help="Refuse spec files larger than this many bytes.",
)
def validate_command(specs: tuple[Path, ...], fmt: str, strict: bool, max_bytes: int) -> None:
    """Validate SPEC files: load each, check every rule, report every issue.

    Each issue is printed as FILE:LINE:COL: CODE message (at $.path); the codes are
    listed in docs/spec-format.md. Exits 1 when any spec has an error (or, with
    --strict, a warning).
    """
    with _errors_to_exit_code():
        results = [(path, check_spec_file(path, max_bytes=max_bytes)) for path in specs]
    failed = [path for path, result in results if not _passes(result, strict)]
    if fmt == "json":
        document = {
            "ok": not failed,
            "strict": strict,
            "files": [_json_result(path, result, strict) for path, result in results],
        }
        click.echo(json.dumps(document, indent=2, ensure_ascii=False))
    else:
        for path, result in results:
            _echo_issues(result.issues)
            errors = len(result.errors())
            warnings = len(result.issues) - errors
            if _passes(result, strict):
                spec = result.spec
                assert spec is not None
                states, compounds, rows = _counts(spec)
                inside = f", {compounds} compound state(s)" if compounds else ""
                click.echo(
                    one_line(
                        f"{path}: valid ({spec.machine}: {states} states{inside}, "
                        f"{rows} transitions, {warnings} warning(s))"
                    )
                )
            else:
                click.echo(
                    one_line(f"{path}: invalid ({errors} error(s), {warnings} warning(s))"),
                    err=True,
                )
    if failed:
        raise click.exceptions.Exit(1)


def _passes(result: CheckResult, strict: bool) -> bool:
    return result.ok and not (strict and result.issues)


def _counts(spec: MachineSpec) -> tuple[int, int, int]:
    """``(states, compound states, transitions)`` of the machine the spec describes: the
    leaf states and the rows of its lowered table (``docs/spec-format.md``)."""
    resolved = resolve_spec(spec)
    return len(resolved.leaves), len(resolved.compounds), len(resolved.rows)


def _json_result(path: Path, result: CheckResult, strict: bool) -> dict[str, object]:
    errors = len(result.errors())
    counts = _counts(result.spec) if result.spec is not None else (None, None, None)
    return {
        "file": os.fspath(path),
        "ok": _passes(result, strict),
        "machine": result.spec.machine if result.spec is not None else None,
        "states": counts[0],
        "compound_states": counts[1],
        "transitions": counts[2],
        "errors": errors,
        "warnings": len(result.issues) - errors,
        "issues": [issue.to_json() for issue in result.issues],
    }


# ----------------------------------------------------------------------- generate


@click.command("generate")
@click.argument("specs", nargs=-1, type=click.Path(path_type=Path))
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    help="Output folder (default: 'out' of [tool.phronomy_fsm] in the nearest pyproject.toml).",
)
@click.option(
    "--check", is_flag=True, help="Write nothing; exit 1 listing modules that are stale or missing."
)
def generate_command(specs: tuple[Path, ...], out: Path | None, check: bool) -> None:
    """Compile SPEC files into Python modules of transition tables (<out>/<machine>.py).

    With SPEC arguments and no --out, modules go to the 'out' folder of the
    [tool.phronomy_fsm] table when there is one, else beside each spec (said on
    stderr). Without SPEC arguments the specs and the output folder come from the
    [tool.phronomy_fsm] table (keys 'specs', a list of globs relative to the
    pyproject.toml, and 'out') of the nearest pyproject.toml above the current
    directory. Output is deterministic; unchanged modules are not rewritten. Headers
    name the spec relative to the project root, so the result does not depend on the
    folder you run from. With the project's specs, a generated module in the output
    folder that no spec produces any more is reported as an orphan (to delete; --check
    then fails).
    """
    from phronomy_fsm.codegen import generate

    with _errors_to_exit_code():
        config: ProjectConfig | None = None
        if not specs:
            config = _config()
        elif out is None:
            config = _optional_config()
        spec_paths: list[Path] = list(specs) if specs else config.spec_paths()  # type: ignore[union-attr]
        root = config.root if config is not None else _project_root()
        if out is None and specs and (config is None or config.out is None):
            # Named specs, no --out and no project folder: each module goes beside its spec.
            click.echo(
                "no --out and no 'out' in [tool.phronomy_fsm]: writing each module beside its "
                "spec (pass --out DIR to choose the folder)",
                err=True,
            )
            report = _generate_beside(generate, spec_paths, check=check, base=root)
        else:
            out_dir = out if out is not None else _require(config, "out")  # type: ignore[arg-type]
            report = generate(spec_paths, out_dir, check=check, base=root, find_orphans=not specs)
    _echo_issues(report.issues)
    if not report.ok:
        _fail(f"{sum(1 for i in report.issues if i.is_error)} spec error(s); nothing was written")
    for file in report.files:
        shown = _shown(file.out_path)
        if check:
            if file.changed:
                state = "missing" if not file.out_path.exists() else "stale"
                click.echo(
                    f"{shown}: {state} (from {file.spec_path}); run phronomy-fsm generate", err=True
                )
            else:
                click.echo(f"{shown}: up to date")
        else:
            click.echo(f"{shown}: {'written' if file.changed else 'unchanged'}")
    for orphan in report.orphans:
        click.echo(f"{_shown(orphan)}: orphan (no spec generates it any more); delete it", err=True)
    if check and (report.stale or report.orphans):
        _fail(
            f"{len(report.stale)} generated module(s) out of date, {len(report.orphans)} orphan(s)"
            if report.orphans
            else f"{len(report.stale)} generated module(s) out of date"
        )


# ------------------------------------------------------------------------ diagram


@click.command("diagram")
@click.argument("spec", required=False, type=click.Path(path_type=Path))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["dot", "svg", "png", "mermaid"]),
    help="Output format (default: from the -o suffix, else dot).",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write here instead of stdout (required for png/svg when stdout is a terminal).",
)
@click.option(
    "--view",
    type=click.Choice(["full", "main"]),
    default="full",
    show_default=True,
    help="full: every edge; main: the main path, with failure, fail-closed and "
    "compound-state edges folded into a legend.",
)
@click.option("--no-legend", is_flag=True, help="Leave the legend out of DOT/SVG/PNG output.")
@click.option(
    "--all",
    "all_",
    is_flag=True,
    help="(Re)write <machine>.dot/.svg/.mmd for every spec of [tool.phronomy_fsm] into its 'diagrams' folder.",
)
@click.option(
    "--check", is_flag=True, help="With --all: write nothing; exit 1 listing stale diagrams."
)
@click.option(
    "--execution",
    "execution_id",
    default=None,
    help="Draw this execution over its machine: its current state and the path of its "
    "durable points (needs --db; without SPEC the machine's table registered in the store "
    "is drawn).",
)
@click.option(
    "--db",
    "db",
    default=None,
    type=click.Path(readable=False),
    help="The store holding --execution (a SQLite file or a postgresql:// DSN).",
)
def diagram_command(
    spec: Path | None,
    fmt: str | None,
    output: Path | None,
    view: str,
    no_legend: bool,
    all_: bool,
    check: bool,
    execution_id: str | None,
    db: str | None,
) -> None:
    """Draw the state diagram of SPEC as DOT, SVG, PNG or Mermaid.

    States are styled by kind (auto, external, wait, final); barrier states, wait
    states and the fail-closed state are marked and explained in a legend; compound
    states are drawn as clusters; edges are labelled 'event [guard] / barrier' with
    their actions. --view main draws the main path and lists the folded edges (rows
    on compound states, edges into the fail-closed state, barrier outcomes other than
    committed, offload failures) in a box. SVG and PNG need the Graphviz 'dot' program.

    With --all, the committed diagrams of every spec listed in [tool.phronomy_fsm]
    are refreshed (the full view as .dot, .mmd and .svg, the main view as .main.dot
    and .main.png; texts are compared byte for byte, each image carries the sha256 of
    the DOT it was rendered from); --all --check verifies them without 'dot'.

    With --execution ID --db PATH, one execution is drawn over its machine: its
    current state and the states of its commits, in a distinct colour.
    """
    if all_:
        if (
            spec is not None
            or fmt is not None
            or output is not None
            or no_legend
            or view != "full"
            or execution_id is not None
        ):
            raise click.UsageError(
                "--all takes no SPEC, --format, -o, --view, --no-legend or --execution"
            )
        _diagram_all(check)
        return
    if check:
        raise click.UsageError("--check only applies with --all")
    if (execution_id is None) != (db is None):
        raise click.UsageError("--execution and --db go together")
    if spec is None and execution_id is None:
        raise click.UsageError("give a SPEC file, or --all, or --execution ID --db PATH")
    if fmt is None:
        if output is not None:
            fmt = _SUFFIX_FORMATS.get(output.suffix.lower(), "dot")
        else:
            fmt = "dot"
    binary = fmt in ("svg", "png")
    if binary and output is None and sys.stdout.isatty():
        raise click.UsageError(
            f"{fmt} output is not written to a terminal; pass -o PATH (or redirect stdout)"
        )

    from phronomy_fsm.diagram import (
        build_diagram,
        render_dot,
        render_image,
        render_mermaid,
        render_svg,
    )

    with _errors_to_exit_code():
        highlight = None
        lowered = None
        if spec is not None:
            result = check_spec_file(spec)
            _echo_issues(result.issues)
            if not result.ok or result.spec is None:
                unreadable = any(i.code == "FILE_UNREADABLE" for i in result.issues)
                _fail(
                    f"{spec}: {'cannot read the file' if unreadable else 'invalid spec'}; "
                    "nothing drawn"
                )
            assert result.spec is not None
            diagram = build_diagram(result.spec)
            lowered = _lower(result.spec) if execution_id is not None else None
        if execution_id is not None:
            drawing = _execution_drawing(db or "", execution_id, lowered)
            diagram = drawing.diagram
            highlight = drawing.highlight
        main = view == "main"
        if fmt == "mermaid":
            data = render_mermaid(diagram, view=view, with_actions=not main).encode("utf-8")
        else:
            dot = render_dot(
                diagram,
                legend=not no_legend,
                view=view,
                with_actions=not main,
                highlight=highlight,
            )
            if fmt == "dot":
                data = dot.encode("utf-8")
            elif fmt == "svg":
                data = render_svg(dot)
            else:
                data = render_image(dot, "png")
        if output is not None:
            output.write_bytes(data)
            click.echo(f"{_shown(output)}: written ({fmt})", err=True)
        elif binary:
            sys.stdout.flush()
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()
        else:
            click.echo(data.decode("utf-8"), nl=False)


def _lower(spec: Any) -> Any:
    from phronomy_fsm.codegen.lower import lower

    return lower(spec)


def _execution_drawing(db: str, execution_id: str, table: Any) -> Any:
    """The drawing of one execution (operator library); a spec of another version
    than the execution's is reported on stderr."""
    from phronomy_fsm.operator.drawing import execution_diagram
    from phronomy_fsm.store.open import open_store

    with open_store(db, read_only=True) as store:
        drawing = execution_diagram(store, execution_id, table=table)
    if not drawing.same_spec:
        click.echo(
            f"warning: execution {one_line(execution_id)} runs another version of machine "
            f"{drawing.machine} than the spec given; its path is drawn where names match",
            err=True,
        )
    return drawing


def _diagram_all(check: bool) -> None:
    from phronomy_fsm.diagram_files import write_diagrams

    with _errors_to_exit_code():
        config = _config()
        spec_paths = config.spec_paths()
        out_dir = _require(config, "diagrams")
        report = write_diagrams(spec_paths, out_dir, check=check)
    _echo_issues(report.issues)
    if not report.ok:
        _fail(
            f"{sum(1 for i in report.issues if i.is_error)} spec error(s); no diagram was written"
        )
    for file in report.files:
        shown = _shown(file.path)
        if check:
            if file.changed:
                click.echo(
                    f"{shown}: stale ({file.reason}); run phronomy-fsm diagram --all", err=True
                )
            else:
                click.echo(f"{shown}: up to date")
        else:
            click.echo(f"{shown}: {'written' if file.changed else 'unchanged'}")
    if check and report.stale:
        _fail(f"{len(report.stale)} diagram file(s) out of date")


def register(main: click.Group) -> None:
    """Add ``validate``, ``generate`` and ``diagram`` to the ``phronomy-fsm`` group."""
    main.add_command(validate_command)
    main.add_command(generate_command)
    main.add_command(diagram_command)
