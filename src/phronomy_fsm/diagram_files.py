"""Committed diagrams (``docs/diagrams/``) and their freshness check.

For each spec, five files are written next to each other:

- ``<machine>.dot``: the DOT text of the full diagram
  (:func:`phronomy_fsm.diagram.render_dot`); it comes from our code only, so it is
  compared byte for byte;
- ``<machine>.mmd``: the Mermaid text, compared byte for byte;
- ``<machine>.svg``: ``dot``'s rendering of that DOT text, stamped with the DOT's sha256
  in an XML comment;
- ``<machine>.main.dot``: the DOT text of the main-path view, compared byte for byte;
- ``<machine>.main.png``: its rendering as a PNG image, stamped with the DOT's sha256 in
  a ``tEXt`` chunk.

Image bytes vary with the Graphviz version, so the check does not compare them: it
verifies that each stamp matches the fresh DOT text, i.e. that the image was rendered
from exactly the DOT that is committed. Writing re-renders an image only when its stamp
does not match (a Graphviz upgrade does not churn committed images). Checking needs no
``dot`` binary. This is the diagram counterpart of ``generate --check``
(``docs/spec-format.md`` "Diagrams").
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterable
from pathlib import Path

import attrs

from phronomy_fsm.diagram import (
    build_diagram,
    dot_sha256,
    png_dot_sha256,
    render_dot,
    render_mermaid,
    render_png,
    render_svg,
    svg_dot_sha256,
)
from phronomy_fsm.errors import GenerationError
from phronomy_fsm.spec.issues import SpecIssue
from phronomy_fsm.spec.model import MachineSpec
from phronomy_fsm.spec.validate import check_spec_file


@attrs.frozen
class DiagramFile:
    """One committed diagram file: ``path`` (as under ``out_dir``), the machine it
    draws, whether it was (or, when checking, would be) rewritten, and why
    (``"missing"``, ``"differs"``, ``"not stamped"``, ``"rendered from other DOT"``,
    or ``""`` when fresh)."""

    machine: str
    path: Path
    changed: bool
    reason: str = ""


@attrs.frozen
class DiagramReport:
    """What :func:`write_diagrams` did: the files, and every spec issue met."""

    files: tuple[DiagramFile, ...]
    issues: tuple[SpecIssue, ...]

    @property
    def ok(self) -> bool:
        """True when no spec had an error."""
        return not any(i.is_error for i in self.issues)

    @property
    def stale(self) -> tuple[DiagramFile, ...]:
        """Files that differ from what the specs produce now."""
        return tuple(f for f in self.files if f.changed)


def diagram_texts(spec: MachineSpec) -> tuple[str, str]:
    """Return ``(dot, mermaid)`` text of the full diagram of ``spec``, exactly as
    committed."""
    diagram = build_diagram(spec)
    return render_dot(diagram), render_mermaid(diagram)


def main_view_text(spec: MachineSpec) -> str:
    """Return the DOT text of the main-path view of ``spec``, exactly as committed
    (actions left out of edge labels, so the picture stays legible)."""
    return render_dot(build_diagram(spec), view="main", with_actions=False)


def write_diagrams(
    spec_paths: Iterable[str | os.PathLike[str]],
    out_dir: str | os.PathLike[str],
    *,
    check: bool = False,
    render: Callable[[str], bytes] = render_svg,
    render_raster: Callable[[str], bytes] = render_png,
) -> DiagramReport:
    """Write (or check) ``<machine>.dot``, ``.mmd``, ``.svg``, ``.main.dot`` and
    ``.main.png`` for every spec.

    Args:
        spec_paths: spec files; all are validated before anything is written.
        out_dir: the diagrams folder (created when writing).
        check: compare instead of writing; needs no ``dot`` binary.
        render: DOT text → stamped SVG bytes (default :func:`phronomy_fsm.diagram.render_svg`;
            tests substitute a stub).
        render_raster: DOT text → stamped PNG bytes (default
            :func:`phronomy_fsm.diagram.render_png`; tests substitute a stub).

    Returns:
        A :class:`DiagramReport`. Nothing is written when any spec has an error or two
        specs declare the same machine. Unchanged files are not rewritten.

    Raises:
        RenderError: writing needed a new SVG and ``dot`` is missing or failed.
        GenerationError: a file could not be read or written.
    """
    out = Path(out_dir)
    issues: list[SpecIssue] = []
    specs: list[MachineSpec] = []
    machines: dict[str, str] = {}
    for spec_path in spec_paths:
        result = check_spec_file(Path(spec_path))
        issues.extend(result.issues)
        if not result.ok or result.spec is None:
            continue
        if result.spec.machine in machines:
            issues.append(
                SpecIssue(
                    "NAME_COLLISION",
                    f"machine {result.spec.machine!r} is also declared by {machines[result.spec.machine]}; "
                    "both would draw the same diagram files — rename one",
                    "$.machine",
                    result.spec.loc,
                )
            )
            continue
        machines[result.spec.machine] = os.fspath(spec_path)
        specs.append(result.spec)
    if any(i.is_error for i in issues):
        return DiagramReport((), tuple(issues))
    files: list[DiagramFile] = []
    pending: list[tuple[Path, Callable[[], bytes]]] = []
    for spec in specs:
        dot, mermaid = diagram_texts(spec)
        main_dot = main_view_text(spec)
        for suffix, text in ((".dot", dot), (".mmd", mermaid), (".main.dot", main_dot)):
            path = out / f"{spec.machine}{suffix}"
            data = text.encode("utf-8")
            current = _read(path)
            reason = "missing" if current is None else "" if current == data else "differs"
            if reason:
                pending.append((path, _constant(data)))
            files.append(DiagramFile(spec.machine, path, bool(reason), reason))
        for suffix, source, stamp_of, produce in (
            (".svg", dot, svg_dot_sha256, render),
            (".main.png", main_dot, png_dot_sha256, render_raster),
        ):
            path = out / f"{spec.machine}{suffix}"
            current = _read(path)
            if current is None:
                reason = "missing"
            else:
                stamp = stamp_of(current)
                reason = (
                    ""
                    if stamp == dot_sha256(source)
                    else "not stamped"
                    if stamp is None
                    else "rendered from other DOT"
                )
            if reason:
                pending.append((path, functools.partial(produce, source)))
            files.append(DiagramFile(spec.machine, path, bool(reason), reason))
    if not check:
        # render every image first, so a missing or failing dot writes nothing at all
        contents = [(path, produce()) for path, produce in pending]
        for path, data in contents:
            _write(path, data)
    return DiagramReport(tuple(files), tuple(issues))


def _constant(data: bytes) -> Callable[[], bytes]:
    """A producer of already-rendered bytes (no copy)."""
    return lambda: data


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise GenerationError(f"cannot read {path}: {exc}") from exc


def _write(path: Path, data: bytes) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except OSError as exc:
        raise GenerationError(f"cannot write {path}: {exc}") from exc
