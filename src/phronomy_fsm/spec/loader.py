"""Read a YAML spec into the spec model, keeping the line and column of every node.

Pipeline: bytes (size-limited) → UTF-8 text → a PyYAML node graph composed by a loader
whose booleans follow YAML 1.2 (only ``true``/``false``; ``on``, ``off``, ``yes``, ``no``
stay strings, so a state called ``on`` stays a state called ``on``) → plain values with
a side table of source locations → frozen attrs values, shaped node by node by
:mod:`phronomy_fsm.spec.shaping` from the one table of the format's shape
(:mod:`phronomy_fsm.spec.shape`: extra keys refused, scalars never coerced).

Nothing here raises on bad input: :func:`load_spec` returns the model (or ``None``), a
partial model of the well-formed parts, and every issue found, each located (codes in
:mod:`phronomy_fsm.spec.issues`). Semantic checks (reachability, barriers, names, ...)
live in :mod:`phronomy_fsm.spec.validate`. The runtime never imports this module.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

import attrs
import yaml

from phronomy_fsm.spec.issues import SpecIssue
from phronomy_fsm.spec.model import MachineSpec, SourceLoc
from phronomy_fsm.spec.shaping import (
    ALLOWED_KEYS,
    SUPPORTED_FORMATS,
    Located,
    shape_document,
)
from phronomy_fsm.spec.yaml_reader import (
    NodeReader,
    SpecYamlCLoader,
    SpecYamlLoader,
    YamlProblem,
    render_path,
)

__all__ = [
    "ALLOWED_KEYS",
    "DEFAULT_MAX_BYTES",
    "SUPPORTED_FORMATS",
    "LoadResult",
    "load_spec",
    "load_spec_text",
]

#: Default size limit for a spec file, in bytes. A 1,000-state / 5,000-transition spec
#: is well under 1 MiB; anything near this limit is almost certainly not a spec.
DEFAULT_MAX_BYTES = 4 * 1024 * 1024


# ------------------------------------------------------------------- public API


@attrs.frozen
class LoadResult:
    """What :func:`load_spec` found: the model (``None`` when the document could not
    be shaped into one without error) and every issue met while reading (never only the
    first). ``partial`` is the model of the well-formed parts even when ``spec`` is
    ``None`` (``None`` only when nothing could be read), and ``damaged`` lists the
    document paths it lacks, so the validator can check the rest without cascades."""

    spec: MachineSpec | None
    issues: tuple[SpecIssue, ...]
    partial: MachineSpec | None = None
    damaged: frozenset[str] = frozenset()


def load_spec_text(
    text: str | bytes, *, source_name: str = "<memory>", max_bytes: int = DEFAULT_MAX_BYTES
) -> LoadResult:
    """Parse spec text (``str`` or UTF-8 ``bytes``) into a :class:`MachineSpec`.

    Args:
        text: the YAML document.
        source_name: the name used in locations and in ``MachineSpec.source_name``.
        max_bytes: documents larger than this are refused with ``SPEC_TOO_LARGE``.

    Returns:
        A :class:`LoadResult`; never raises for bad input. Structural problems are in
        ``issues``; semantic checks are the validator's job.
    """
    raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else bytes(text)
    if len(raw) > max_bytes:
        return LoadResult(None, (_too_large_issue(source_name, len(raw), max_bytes),))
    try:
        decoded = raw.decode("utf-8")
        if "\x00" in decoded:
            nul = raw.index(b"\x00")
            raise UnicodeDecodeError("utf-8", raw, nul, nul + 1, "NUL byte")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1  # in bytes
        return LoadResult(
            None,
            (
                SpecIssue(
                    "NOT_UTF8",
                    f"byte {exc.start} is not UTF-8 text ({exc.reason}); a spec is a YAML text file",
                    "$",
                    SourceLoc(source_name, line, column),
                ),
            ),
        )
    with _gc_paused():
        return _load_decoded(raw, decoded, source_name)


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while a document is parsed and shaped.

    Composing a large spec allocates tens of thousands of acyclic objects; each
    allocation threshold crossed would otherwise run a collection over them all
    (about a third of the load time of a 5,000-transition spec). The previous state is
    restored; cycles created meanwhile (recursive YAML aliases, exception tracebacks)
    are collected once the collector runs again.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _load_decoded(raw: bytes, decoded: str, source_name: str) -> LoadResult:
    """Parse and shape a decoded document (see :func:`load_spec_text`)."""
    top = SourceLoc(source_name, 1, 1)
    sha = hashlib.sha256(raw).hexdigest()
    reader = NodeReader(source_name)
    try:
        loader = (SpecYamlCLoader or SpecYamlLoader)(decoded)
        try:
            node = loader.get_single_node()
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        loc = SourceLoc(source_name, mark.line + 1, mark.column + 1) if mark else top
        problem = exc.problem or str(exc)
        context = f" ({exc.context})" if exc.context else ""
        return LoadResult(
            None, (SpecIssue("YAML_SYNTAX", f"invalid YAML: {problem}{context}", "$", loc),)
        )
    except yaml.reader.ReaderError as exc:
        # a character YAML does not allow (control characters): locate it by position
        # (libyaml counts UTF-8 bytes, PyYAML's reader counts characters)
        if SpecYamlCLoader is not None:
            before = raw[: exc.position].decode("utf-8", "replace")
        else:
            before = decoded[: exc.position]
        line = before.count("\n") + 1
        column = len(before) - (before.rfind("\n") + 1) + 1
        return LoadResult(
            None,
            (
                SpecIssue(
                    "YAML_SYNTAX",
                    f"invalid YAML: {exc.reason}",
                    "$",
                    SourceLoc(source_name, line, column),
                ),
            ),
        )
    except (yaml.YAMLError, RecursionError) as exc:
        return LoadResult(None, (SpecIssue("YAML_SYNTAX", f"invalid YAML: {exc}", "$", top),))
    if node is None:
        return LoadResult(
            None,
            (
                SpecIssue(
                    "EMPTY_SPEC",
                    "the file holds no YAML document; see docs/spec-format.md",
                    "$",
                    top,
                ),
            ),
        )
    try:
        data = reader.read(node, ())
    except YamlProblem as problem:
        found = reader.issues + [
            SpecIssue(problem.code, problem.message, render_path(problem.path), problem.loc)
        ]
        return LoadResult(None, tuple(found))
    except RecursionError:
        return LoadResult(
            None, (SpecIssue("YAML_UNSUPPORTED", "the document nests too deeply", "$", top),)
        )
    shaped = shape_document(data, Located(source_name, reader.locs), source_name, sha)
    return LoadResult(shaped.spec, (*reader.issues, *shaped.issues), shaped.partial, shaped.damaged)


def load_spec(
    path: str | os.PathLike[str],
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    source_name: str | None = None,
) -> LoadResult:
    """Read and parse the spec file at ``path``.

    ``source_name`` defaults to ``path`` as given (relative paths stay relative, so
    diagnostics and generated headers hold no absolute paths). An unreadable file is
    reported as ``FILE_UNREADABLE``; files over ``max_bytes`` are not read in full.
    """
    name = source_name if source_name is not None else os.fspath(path)
    p = Path(path)
    try:
        size = p.stat().st_size
        if size > max_bytes:
            return LoadResult(None, (_too_large_issue(name, size, max_bytes),))
        raw = p.read_bytes()
    except OSError as exc:
        return LoadResult(
            None,
            (
                SpecIssue(
                    "FILE_UNREADABLE",
                    f"cannot read the spec: {exc.strerror or exc}",
                    "$",
                    SourceLoc(name, 0, 0),
                ),
            ),
        )
    return load_spec_text(raw, source_name=name, max_bytes=max_bytes)


def _too_large_issue(name: str, size: int, max_bytes: int) -> SpecIssue:
    return SpecIssue(
        "SPEC_TOO_LARGE",
        f"the file has {size} bytes, more than the limit of {max_bytes}; "
        "split the machine or raise the limit (--max-bytes)",
        "$",
        SourceLoc(name, 1, 1),
    )
