"""Print a :class:`~phronomy_fsm.table.MachineTable` as a Python module.

The emitter prepares a *view model* from the table object (every value already rendered
as a Python literal by :func:`py_literal`, every row as the call that rebuilds it) and
feeds it to the Jinja template ``templates/machine.py.j2``, which holds nothing but
loops and interpolation (``StrictUndefined``: a missing value is an error, never an
empty string). Rows are printed field by field from the ``NamedTuple`` itself, leaving
out fields that hold their default, so a new table field needs no change here. Because
every value reaches the output only as an ASCII string literal produced here (names are
validated identifiers before they are used as enum members or method names), nothing in
a spec can inject code.

Output is deterministic: no timestamps, no absolute paths, table order for rows, sorted
hook names; printing the same table twice gives the same bytes (``generate --check``
relies on it).
"""

from __future__ import annotations

import hashlib
import re
import textwrap
from collections.abc import Sequence
from importlib import resources
from typing import Any

import attrs

from phronomy_fsm.errors import GenerationError
from phronomy_fsm.table import MachineTable

TEMPLATE_NAME = "machine.py.j2"
REGENERATE_HINT = "phronomy-fsm generate"
_INDENT = "        "


def _template_text() -> str:
    return (resources.files("phronomy_fsm.codegen") / "templates" / TEMPLATE_NAME).read_text(
        "utf-8"
    )


def _environment() -> Any:
    import jinja2  # only the emitter needs Jinja; lowering and the runtime never do

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


def _rows(rows: list[str]) -> str:
    """A tuple of rows: ``()`` when empty, else one row per line."""
    if not rows:
        return "()"
    return "(\n" + "\n".join(rows) + "\n    )"


def _is_row(value: Any) -> bool:
    return isinstance(value, tuple) and hasattr(value, "_fields")


def _row_fields(row: Any, used: set[str]) -> list[tuple[str, str]]:
    """``(field, literal)`` for every field of ``row`` that does not hold its default;
    nested rows are printed as calls, tuples one item a line when long."""
    used.add(type(row).__name__)
    defaults = type(row)._field_defaults
    fields: list[tuple[str, str]] = []
    for name in type(row)._fields:
        value = getattr(row, name)
        if name in defaults and value == defaults[name]:
            continue
        if _is_row(value):
            fields.append(_nested(name, type(value).__name__, _row_fields(value, used)))
        elif isinstance(value, tuple):
            fields.append(_names(name, value))
        else:
            fields.append((name, py_literal(value)))
    return fields


@attrs.frozen
class _Member:
    ident: str
    value: str


@attrs.frozen
class _Field:
    key: str
    value: str


@attrs.frozen
class _Hook:
    name: str
    returns: str
    doc: str
    body: str = "..."
    params: str = "ctx: Any, payload: Any"


@attrs.frozen
class _PayloadClass:
    name: str
    doc: str
    fields: tuple[_Field, ...]


#: ``MachineTable`` fields added after tables were first generated, written only when a
#: spec sets them, so that the tables of specs that do not stay byte for byte the same.
_LEFT_OUT_AT_DEFAULT = frozenset({"final_commit", "limits"})


def build_view_model(
    table: MachineTable, *, source_name: str, description: str = ""
) -> dict[str, Any]:
    """Prepare every value the template interpolates from ``table``, already rendered.

    ``source_name`` is the spec path shown in the header (relative, posix form);
    ``description`` the spec's description, quoted in the module docstring.
    """
    used: set[str] = {"EventRow", "MachineTable", "StateRow", "TransitionRow"}
    table_fields: list[_Field] = []
    for name in MachineTable._fields:
        value = getattr(table, name)
        if name in _LEFT_OUT_AT_DEFAULT and value == MachineTable._field_defaults[name]:
            continue
        if isinstance(value, tuple) and value and _is_row(value[0]):
            rows = [_call(type(r).__name__, _row_fields(r, used), _INDENT) for r in value]
            table_fields.append(_Field(name, _rows(rows)))
        elif isinstance(value, tuple):
            table_fields.append(
                _Field(name, _rows([]) if not value else _names(name, value, "    ")[1])
            )
        else:
            table_fields.append(_Field(name, py_literal(value)))
    hooks = []
    uses = _hook_uses(table)
    direct = _direct_effects(table)
    for names, returns, role in (
        (table.guards, "bool", "Guard"),
        (table.actions, "None", "Action"),
        (table.offload_hooks, "OffloadWork", "Offload hook"),
        (table.barriers, "BarrierWork", "Barrier"),
    ):
        if returns == "BarrierWork" and names:
            used.add(returns)
        for name in names:
            if role == "Offload hook" and name in direct:
                doc = (
                    f"Effect; used by {uses[name]}. A plain function of a frozen snapshot "
                    "of the context and the effect context (idempotency_key, attempt, "
                    "cancellation, deadline), run on a worker; returns the result."
                )
                hooks.append(
                    _Hook(
                        name, "Any", py_docstring(doc, " " * 8), params="snapshot: Any, ectx: Any"
                    )
                )
                continue
            if role == "Offload hook":
                used.add(returns)
            if role == "Barrier":
                # optional under the durable runtime (it commits the barrier itself and
                # calls the hook only for records to add): a real body, so a hooks
                # class that leaves it out is not abstract for mypy
                doc = (
                    f"Barrier; used by {uses[name]}. Under the durable runtime it is "
                    "optional: return BarrierRecords to add records to the commit, or "
                    "None; under a plain Dispatcher, return the commit to run."
                )
                hooks.append(_Hook(name, returns, py_docstring(doc, " " * 8), "return None"))
                continue
            hooks.append(
                _Hook(name, returns, py_docstring(f"{role}; used by {uses[name]}.", " " * 8))
            )
    hooks.sort(key=lambda h: h.name)
    payload_classes = [
        _PayloadClass(
            e.payload or "Payload",
            py_docstring(f"The payload of event {e.name!r} (its declared schema).", "    "),
            tuple(_Field(field, _annotation(kind)) for field, kind in e.fields),
        )
        for e in table.events
        if e.fields
    ]
    doc = (
        f"Transition table of machine {table.machine!r} (spec version {table.version}).\n\n"
        + (description.strip() + "\n\n" if description.strip() else "")
        + "Generated from the spec named in the header; import TABLE and implement Hooks."
    )
    return {
        "header": {
            "source": py_literal(source_name),
            "spec_sha256": table.spec_sha256,
            "template": py_literal(TEMPLATE_NAME),
            "template_sha256": template_sha256(),
            "regenerate": REGENERATE_HINT,
        },
        "module_doc": py_docstring(doc),
        "imports": sorted(used),
        "typing_imports": "Any, Protocol"
        if hooks or any(e.fields for e in table.events)
        else "Protocol",
        "machine": py_literal(table.machine),
        "machine_plain": table.machine,
        "version": py_literal(table.version),
        "spec_sha256": py_literal(table.spec_sha256),
        "states": [_Member(s.name.upper(), py_literal(s.name)) for s in table.states],
        "events": [_Member(e.name.upper(), py_literal(e.name)) for e in table.events],
        "table_fields": table_fields,
        "hooks": hooks,
        "payload_classes": payload_classes,
        "attrs_import": "\n\nimport attrs" if payload_classes else "",
        "all_line": _all_line(
            ["MACHINE", "SPEC_SHA256", "SPEC_VERSION", "TABLE", "Event", "Hooks", "State"]
            + [c.name for c in payload_classes]
        ),
    }


def _all_line(names: list[str]) -> str:
    """``__all__ = [...]`` sorted as ruff's RUF022 wants (constants first), one line
    when it fits in 100 columns, else one name a line."""
    ordered = sorted(names, key=lambda n: (not n.isupper(), n))
    line = "__all__ = [" + ", ".join(f'"{n}"' for n in ordered) + "]"
    if len(line) <= 100:
        return line
    return "__all__ = [\n" + "".join(f'    "{n}",\n' for n in ordered) + "]"


def _annotation(kind: str) -> str:
    """The Python annotation of a payload field type (``any`` is ``Any``)."""
    return " | ".join("Any" if part.strip() == "any" else part.strip() for part in kind.split("|"))


def _direct_effects(table: MachineTable) -> set[str]:
    """Hooks of effects declared with the ``effect:`` shorthand (plain effect functions)."""
    offloads = [s.offload for s in table.states] + [t.offload for t in table.transitions]
    return {o.hook for o in offloads if o is not None and o.direct}


def _hook_uses(table: MachineTable) -> dict[str, str]:
    """Hook name → where the table uses it (``entry of s``, ``state s``, ``transition 3``)."""
    uses: dict[str, list[str]] = {}
    for state in table.states:
        for action in state.entry:
            uses.setdefault(action, []).append(f"entry of {state.name}")
        if state.offload:
            uses.setdefault(state.offload.hook, []).append(f"state {state.name}")
        if state.barrier:
            uses.setdefault(state.barrier.name, []).append(f"state {state.name}")
    for t in table.transitions:
        names = [t.guard] if t.guard else []
        names += list(t.actions)
        names += [t.offload.hook] if t.offload else []
        names += [t.barrier.name] if t.barrier else []
        for name in names:
            uses.setdefault(name, []).append(f"transition {t.index}")
    return {name: ", ".join(dict.fromkeys(where)) for name, where in uses.items()}


def emit(table: MachineTable, *, source_name: str, description: str = "") -> str:
    """Return the module text that defines ``table`` (``TABLE``), its ``State`` and
    ``Event`` enums and its ``Hooks`` Protocol.

    Args:
        table: a lowered table (:func:`phronomy_fsm.codegen.lower.lower`).
        source_name: the spec path written in the header (relative, posix form).
        description: the spec's description, quoted in the module docstring.

    Raises:
        GenerationError: the template failed (a bug, reported with its cause).
    """
    import jinja2

    try:
        template = _environment().from_string(_template_text())
        text: str = template.render(
            **build_view_model(table, source_name=source_name, description=description)
        )
    except jinja2.TemplateError as exc:
        raise GenerationError(f"template {TEMPLATE_NAME} failed: {exc}") from exc
    return text
