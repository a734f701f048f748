"""Compile validated specs into Python modules of transition tables.

The compiler prepares a *view model* (every value already rendered as a Python literal
by :func:`py_literal`) and feeds it to the Jinja template ``templates/machine.py.j2``,
which holds nothing but loops and interpolation (``StrictUndefined``: a missing value is
an error, never an empty string). Because every value from a spec reaches the output
only as an ASCII string literal produced here (names are validated identifiers before
they are used as enum members or method names), nothing in a spec can inject code.

Output is deterministic: no timestamps, no absolute paths, spec order for rows, sorted
hook names. ``phronomy-fsm generate --check`` compares it byte for byte with the
checked-in modules (ARCHITECTURE.md "Generated code"; issue 2 item 6).
"""

from __future__ import annotations

import hashlib
import os
import re
import textwrap
from collections.abc import Iterable, Sequence
from importlib import resources
from pathlib import Path, PurePath
from typing import Any

import attrs
import jinja2

from phronomy_fsm.errors import GenerationError, SpecError
from phronomy_fsm.spec.issues import SpecIssue
from phronomy_fsm.spec.model import BarrierSpec, MachineSpec
from phronomy_fsm.spec.validate import check_spec_file, validate_spec
from phronomy_fsm.table import AT_MOST_ONCE

TEMPLATE_NAME = "machine.py.j2"
REGENERATE_HINT = "phronomy-fsm generate"
_INDENT = "        "


def _template_text() -> str:
    return (resources.files("phronomy_fsm.codegen") / "templates" / TEMPLATE_NAME).read_text(
        "utf-8"
    )


def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def template_sha256() -> str:
    """The sha256 (hex) of the module template, recorded in every generated header."""
    return hashlib.sha256(_template_text().encode("utf-8")).hexdigest()


def py_literal(value: Any) -> str:
    """Render ``value`` as a Python literal using only ASCII characters.

    Strings use double quotes; everything outside printable ASCII is escaped (the same
    escapes JSON uses for the Basic Multilingual Plane, ``\\UXXXXXXXX`` beyond it, so
    an emoji round-trips as itself and not as two lone surrogates), so no newline,
    quote or unicode line separator in a spec can end the literal and ``eval`` of the
    result gives back exactly ``value``. Supports ``None``, ``bool``, ``int``,
    ``float``, ``str`` and tuples of these. Raises ``TypeError`` for anything else.
    """
    if value is None or isinstance(value, bool):
        return repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        text = repr(value)
        if text in ("inf", "-inf", "nan"):
            raise TypeError(f"cannot render non-finite float {value!r}")
        return text
    if isinstance(value, str):
        if _PLAIN_ASCII.match(value):
            return f'"{value}"'
        return '"' + "".join(_escape_char(ch) for ch in value) + '"'
    if isinstance(value, tuple):
        if not value:
            return "()"
        inner = ", ".join(py_literal(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    raise TypeError(f"cannot render {type(value).__name__} as a literal")


#: printable ASCII except the double quote and the backslash: written as is
_PLAIN_ASCII = re.compile(r"[ !#-\[\]-~]*\Z")
_SHORT_ESCAPES = {
    '"': '\\"',
    "\\": "\\\\",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\b": "\\b",
    "\f": "\\f",
}


def _escape_char(ch: str) -> str:
    short = _SHORT_ESCAPES.get(ch)
    if short is not None:
        return short
    code = ord(ch)
    if 0x20 <= code < 0x7F:
        return ch
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def py_docstring(text: str, indent: str = "") -> str:
    """Render ``text`` as a triple-quoted docstring when that is provably safe (printable
    ASCII and newlines only, no backslash, no triple quote, no trailing quote), wrapped
    at 88 columns; otherwise fall back to :func:`py_literal`, which is always safe."""
    safe = all(" " <= ch <= "~" or ch == "\n" for ch in text)
    if not safe or "\\" in text or '"""' in text or text.endswith('"'):
        return py_literal(text)
    paragraphs = text.strip().split("\n\n")
    width = max(40, 88 - len(indent))
    lines: list[str] = []
    for paragraph in paragraphs:
        if lines:
            lines.append("")
        lines.extend(textwrap.wrap(" ".join(paragraph.split()), width) or [""])
    if len(lines) == 1 and len(lines[0]) + len(indent) + 6 <= 88:
        return f'"""{lines[0]}"""'
    body = "\n".join(f"{indent}{line}" if line else "" for line in lines[1:])
    return f'"""{lines[0]}\n' + (body + "\n" if body else "") + f'{indent}"""'


def _call(name: str, fields: Sequence[tuple[str, str]], indent: str) -> str:
    """Render ``Name(\\n key=value,\\n ...)`` with a magic trailing comma (ruff-stable)."""
    inner = indent + "    "
    lines = [f"{indent}{name}("]
    lines += [f"{inner}{key}={value}," for key, value in fields]
    lines.append(f"{indent}),")
    return "\n".join(lines)


_LINE = 100
_FIELD_INDENT = _INDENT + "    "


def _nested(key: str, name: str, fields: Sequence[tuple[str, str]]) -> tuple[str, str]:
    """A row-valued field: ``Name(k=v, ...)`` on one line when it fits in 100 columns
    (as ruff-format would leave it), otherwise one argument per line."""
    inline = f"{name}(" + ", ".join(f"{k}={v}" for k, v in fields) + ")"
    if len(_FIELD_INDENT) + len(key) + 1 + len(inline) + 1 <= _LINE:
        return key, inline
    inner = _FIELD_INDENT + "    "
    body = "".join(f"{inner}{k}={v},\n" for k, v in fields)
    return key, f"{name}(\n{body}{_FIELD_INDENT})"


def _names(key: str, names: Sequence[Any], indent: str = _FIELD_INDENT) -> tuple[str, str]:
    """A tuple-valued field, inline when it fits in 100 columns, else one item a line."""
    inline = py_literal(tuple(names))
    if len(indent) + len(key) + 1 + len(inline) + 1 <= _LINE:
        return key, inline
    inner = indent + "    "
    body = "".join(f"{inner}{py_literal(n)},\n" for n in names)
    return key, f"(\n{body}{indent})"


def _offload(offload: Any) -> tuple[str, str]:
    fields = [
        ("hook", py_literal(offload.hook)),
        ("completed", py_literal(offload.completed)),
        ("failed", py_literal(offload.failed)),
    ]
    if offload.effect.value != AT_MOST_ONCE:
        fields.append(("effect", py_literal(offload.effect.value)))
    return _nested("offload", "OffloadRow", fields)


def _barrier(barrier: BarrierSpec) -> tuple[str, str]:
    fields = [("name", py_literal(barrier.name))]
    fields += [(outcome, py_literal(event)) for outcome, event in barrier.outcome_events()]
    return _nested("barrier", "BarrierRow", fields)


def _rows(rows: list[str]) -> str:
    """A tuple of rows: ``()`` when empty, else one row per line."""
    if not rows:
        return "()"
    return "(\n" + "\n".join(rows) + "\n    )"


@attrs.frozen
class _Member:
    ident: str
    value: str


@attrs.frozen
class _Hook:
    name: str
    returns: str
    doc: str


def build_view_model(spec: MachineSpec, *, source_name: str) -> dict[str, Any]:
    """Prepare every value the template interpolates, already rendered as literals.

    ``spec`` must be valid (the caller validated it). ``source_name`` is the path shown
    in the header (relative, posix form).
    """
    used_rows: set[str] = {"EventRow", "MachineTable", "StateRow", "TransitionRow"}
    events = spec.effective_events()

    state_rows = []
    for state in spec.states:
        fields = [("name", py_literal(state.name)), ("kind", py_literal(state.kind.value))]
        if state.entry:
            fields.append(_names("entry", state.entry))
        if state.offload:
            fields.append(_offload(state.offload))
            used_rows.add("OffloadRow")
        if state.barrier:
            fields.append(_barrier(state.barrier))
            used_rows.add("BarrierRow")
        if state.timeout:
            fields.append(
                _nested(
                    "timeout",
                    "TimeoutRow",
                    [
                        ("seconds", py_literal(float(state.timeout.seconds))),
                        ("event", py_literal(state.timeout.event)),
                    ],
                )
            )
            used_rows.add("TimeoutRow")
        if state.description:
            fields.append(("description", py_literal(state.description)))
        state_rows.append(_call("StateRow", fields, _INDENT))

    event_rows = []
    for event in events:
        fields = [("name", py_literal(event.name))]
        if event.payload is not None:
            fields.append(("payload", py_literal(event.payload)))
        if event.unhandled.value != "error":
            fields.append(("unhandled", py_literal(event.unhandled.value)))
        if event.description:
            fields.append(("description", py_literal(event.description)))
        if event.durable:
            fields.append(("durable", "True"))
        event_rows.append(_call("EventRow", fields, _INDENT))

    transition_rows = []
    for t in spec.transitions:
        fields = [
            ("index", py_literal(t.index)),
            _names("sources", t.sources),
            ("event", py_literal(t.event)),
            ("target", py_literal(t.target)),
        ]
        if t.guard is not None:
            fields.append(("guard", py_literal(t.guard.name)))
            if t.guard.negated:
                fields.append(("negated", "True"))
        if t.actions:
            fields.append(_names("actions", t.actions))
        if t.offload:
            fields.append(_offload(t.offload))
            used_rows.add("OffloadRow")
        if t.barrier:
            fields.append(_barrier(t.barrier))
            used_rows.add("BarrierRow")
        if t.description:
            fields.append(("description", py_literal(t.description)))
        transition_rows.append(_call("TransitionRow", fields, _INDENT))

    migration_rows = []
    for m in spec.migrations:
        used_rows.add("MigrationRow")
        migration_rows.append(
            _call(
                "MigrationRow",
                [
                    ("from_version", py_literal(m.from_version)),
                    ("from_sha256", py_literal(m.from_sha256)),
                    _names("rename_states", tuple((old, new) for old, new in m.rename_states)),
                ],
                _INDENT,
            )
        )

    guards, actions, offloads, barriers = spec.hook_names()
    hooks = []
    uses = _hook_uses(spec)
    for names, returns, role in (
        (guards, "bool", "Guard"),
        (actions, "None", "Action"),
        (offloads, "OffloadWork", "Offload hook"),
        (barriers, "BarrierWork", "Barrier"),
    ):
        if returns in ("OffloadWork", "BarrierWork") and names:
            used_rows.add(returns)
        for name in names:
            hooks.append(
                _Hook(name, returns, py_docstring(f"{role}; used by {uses[name]}.", " " * 8))
            )
    hooks.sort(key=lambda h: h.name)
    doc = (
        f"Transition table of machine {spec.machine!r} (spec version {spec.version}).\n\n"
        + (spec.description.strip() + "\n\n" if spec.description.strip() else "")
        + "Generated from the spec named in the header; import TABLE and implement Hooks."
    )
    return {
        "header": {
            "source": py_literal(source_name),
            "spec_sha256": spec.source_sha256,
            "template": py_literal(TEMPLATE_NAME),
            "template_sha256": template_sha256(),
            "regenerate": REGENERATE_HINT,
        },
        "module_doc": py_docstring(doc),
        "imports": sorted(used_rows),
        "typing_imports": "Any, Protocol" if hooks else "Protocol",
        "machine": py_literal(spec.machine),
        "machine_plain": spec.machine,
        "version": py_literal(spec.version),
        "spec_sha256": py_literal(spec.source_sha256),
        "initial": py_literal(spec.initial_states[0].name),
        "states": [_Member(s.name.upper(), py_literal(s.name)) for s in spec.states],
        "events": [_Member(e.name.upper(), py_literal(e.name)) for e in events],
        "state_rows": _rows(state_rows),
        "event_rows": _rows(event_rows),
        "transition_rows": _rows(transition_rows),
        "migration_rows": _rows(migration_rows),
        "guards": _names("guards", guards, "    ")[1],
        "actions": _names("actions", actions, "    ")[1],
        "offload_hooks": _names("offload_hooks", offloads, "    ")[1],
        "barriers": _names("barriers", barriers, "    ")[1],
        "fail_closed": py_literal(spec.fail_closed),
        "hooks": hooks,
    }


def _hook_uses(spec: MachineSpec) -> dict[str, str]:
    uses: dict[str, list[str]] = {}
    for state in spec.states:
        for action in state.entry:
            uses.setdefault(action, []).append(f"entry of {state.name}")
        if state.offload:
            uses.setdefault(state.offload.hook, []).append(f"state {state.name}")
        if state.barrier:
            uses.setdefault(state.barrier.name, []).append(f"state {state.name}")
    for t in spec.transitions:
        names = [t.guard.name] if t.guard else []
        names += list(t.actions)
        names += [t.offload.hook] if t.offload else []
        names += [t.barrier.name] if t.barrier else []
        for name in names:
            uses.setdefault(name, []).append(f"transition {t.index}")
    return {name: ", ".join(dict.fromkeys(where)) for name, where in uses.items()}


def compile_spec(spec: MachineSpec, *, source_name: str | None = None) -> str:
    """Return the Python module text for ``spec``.

    Args:
        spec: a loaded spec; it is validated first.
        source_name: the path written in the header; defaults to ``spec.source_name``
            made relative (an absolute path is reduced to its file name).

    Raises:
        SpecError: the spec has validation errors (``issues`` lists them all).
        GenerationError: the template failed (a bug, reported with its cause).
    """
    errors = [i for i in validate_spec(spec) if i.is_error]
    if errors:
        raise SpecError(
            f"{spec.source_name}: {len(errors)} validation error(s)", issues=tuple(errors)
        )
    return _render_module(
        spec, display_path(source_name if source_name is not None else spec.source_name)
    )


def _render_module(spec: MachineSpec, name: str) -> str:
    """Render an already validated ``spec``; ``name`` is the header's source path."""
    env = _environment()
    try:
        template = env.from_string(_template_text())
        return template.render(**build_view_model(spec, source_name=name))
    except jinja2.TemplateError as exc:
        raise GenerationError(f"template {TEMPLATE_NAME} failed: {exc}") from exc


def display_path(path: str | os.PathLike[str], base: Path | None = None) -> str:
    """Return ``path`` relative to ``base`` (default: the working directory) in posix
    form; an absolute path outside ``base`` is reduced to its file name, so generated
    files never hold absolute paths.

    Without ``base`` a relative path is returned as given. With ``base`` a relative path
    is first taken relative to the working directory, so the result does not depend on
    the folder the command runs from (``generate`` from a sub-folder of a project writes
    the same headers as from its root)."""
    p = Path(path)
    if not p.is_absolute():
        if base is None:
            return PurePath(p).as_posix()
        p = Path.cwd() / p
    base = (base or Path.cwd()).resolve()
    try:
        return p.resolve().relative_to(base).as_posix()
    except ValueError:
        return p.name


@attrs.frozen
class GeneratedFile:
    """One output of :func:`generate`: the module path, its text, and whether the file
    on disk differed (``changed``) before writing (or, with ``check``, would differ)."""

    spec_path: str
    machine: str
    out_path: Path
    text: str
    changed: bool


#: The first line of every generated module (codegen/templates/machine.py.j2); a
#: module that starts with it and that no spec produces any more is an orphan.
GENERATED_MARKER = "# Generated by phronomy-fsm."


@attrs.frozen
class GenerateReport:
    """What :func:`generate` did: files produced, every spec issue met (errors make
    the run fail; warnings do not), and ``orphans``: generated modules in the output
    folder that none of the specs produces (a spec was removed or its machine renamed;
    listed only when asked for, never deleted)."""

    files: tuple[GeneratedFile, ...]
    issues: tuple[SpecIssue, ...]
    orphans: tuple[Path, ...] = ()

    @property
    def ok(self) -> bool:
        """True when no spec had an error."""
        return not any(i.is_error for i in self.issues)

    @property
    def stale(self) -> tuple[GeneratedFile, ...]:
        """Files whose checked-in content differs from the fresh output."""
        return tuple(f for f in self.files if f.changed)


def generate(
    spec_paths: Iterable[str | os.PathLike[str]],
    out_dir: str | os.PathLike[str],
    *,
    check: bool = False,
    base: Path | None = None,
    find_orphans: bool = False,
) -> GenerateReport:
    """Validate and compile every spec into ``out_dir/<machine>.py``.

    Args:
        spec_paths: spec files; all are validated before anything is written.
        out_dir: the output folder (created if missing, unless ``check``).
        check: compare with the files on disk instead of writing them.
        base: folder that header paths are made relative to (default: cwd).
        find_orphans: also list generated modules in ``out_dir`` that no spec of
            ``spec_paths`` produces; only meaningful when ``spec_paths`` is the whole
            project (``[tool.phronomy_fsm]``), not a few specs of it.

    Returns:
        A :class:`GenerateReport`. Nothing is written when any spec has an error, or
        when two specs declare the same machine name. Files whose content is unchanged
        are not rewritten (their modification time is kept).

    Raises:
        GenerationError: the output folder cannot be written.
    """
    out = Path(out_dir)
    issues: list[SpecIssue] = []
    compiled: list[tuple[str, MachineSpec]] = []
    machines: dict[str, str] = {}
    for spec_path in spec_paths:
        result = check_spec_file(spec_path)
        issues.extend(result.issues)
        if not result.ok or result.spec is None:
            continue
        spec = result.spec
        if spec.machine in machines:
            issues.append(
                SpecIssue(
                    "NAME_COLLISION",
                    f"machine {spec.machine!r} is also declared by {machines[spec.machine]}; both would "
                    f"generate {spec.machine}.py — rename one",
                    "$.machine",
                    spec.loc,
                )
            )
            continue
        machines[spec.machine] = os.fspath(spec_path)
        compiled.append((display_path(spec_path, base), spec))
    if any(i.is_error for i in issues):
        return GenerateReport((), tuple(issues))
    files = []
    for shown, spec in compiled:
        text = _render_module(spec, shown)  # validated above by check_spec_file
        target = out / f"{spec.machine}.py"
        try:
            current = target.read_text("utf-8") if target.exists() else None
        except OSError as exc:
            raise GenerationError(f"cannot read {target}: {exc}") from exc
        changed = current != text
        if changed and not check:
            try:
                out.mkdir(parents=True, exist_ok=True)
                tmp = target.with_suffix(".py.tmp")
                tmp.write_text(text, "utf-8", newline="\n")
                os.replace(tmp, target)
            except OSError as exc:
                raise GenerationError(f"cannot write {target}: {exc}") from exc
        files.append(GeneratedFile(shown, spec.machine, target, text, changed))
    orphans = _orphans(out, {f.out_path.name for f in files}) if find_orphans else ()
    return GenerateReport(tuple(files), tuple(issues), orphans)


def _orphans(out: Path, produced: set[str]) -> tuple[Path, ...]:
    """Modules in ``out`` that start with :data:`GENERATED_MARKER` but are not in
    ``produced`` (file names), sorted."""
    found = []
    for path in sorted(out.glob("*.py")) if out.is_dir() else ():
        if path.name in produced:
            continue
        try:
            with path.open("r", encoding="utf-8", errors="replace") as fh:
                first = fh.readline()
        except OSError:
            continue
        if first.startswith(GENERATED_MARKER):
            found.append(path)
    return tuple(found)
