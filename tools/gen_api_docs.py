#!/usr/bin/env python3
"""Generate ``docs/api-reference.md`` from the docstrings of the supported API only.

``python tools/gen_api_docs.py`` writes the file; ``--check`` exits 1 when the committed
file is stale (``tests/unit/test_api_docs.py`` runs the check). The supported API is
the names in the ``__all__`` of the packages in :data:`API_PACKAGES` (pinned by
``tests/unit/test_public_api.py``), and the public methods and properties of the
classes among them; nothing else is documented, whatever module it lives in. Each
package gets a table of its names with the **whole first sentence** of each docstring
(:func:`first_sentence`), then each name with its signature and full docstring, and
each method with its first sentence. Output is deterministic: packages in the order
of :data:`API_PACKAGES`, names and methods sorted.
"""

from __future__ import annotations

import argparse
import enum
import importlib
import inspect
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "api-reference.md"

#: The packages whose ``__all__`` is the supported API, in the order of the layers.
API_PACKAGES = (
    "phronomy_fsm",
    "phronomy_fsm.errors",
    "phronomy_fsm.spec",
    "phronomy_fsm.codegen",
    "phronomy_fsm.diagram",
    "phronomy_fsm.runtime",
    "phronomy_fsm.durable",
    "phronomy_fsm.store",
    "phronomy_fsm.store.postgres",
    "phronomy_fsm.agent",
    "phronomy_fsm.operator",
    "phronomy_fsm.checking",
    "phronomy_fsm.tracing",
    "phronomy_fsm.console",
    "phronomy_fsm.testing",
)

#: Words ending in a period that do not end a sentence.
_ABBREVIATIONS = frozenset({"e.g", "i.e", "etc", "vs", "cf", "approx", "resp"})
_END = re.compile(r"[.!?](?=\s|$)")


def api_packages() -> list[Any]:
    """Import and return the modules of :data:`API_PACKAGES`, in that order."""
    return [importlib.import_module(name) for name in API_PACKAGES]


def api_members(module: Any) -> list[tuple[str, Any]]:
    """List ``(name, object)`` for every name in ``module.__all__``, sorted by name.

    Raises:
        AttributeError: a name in ``__all__`` does not resolve.
    """
    return sorted((name, getattr(module, name)) for name in getattr(module, "__all__", ()))


def methods(cls: type) -> list[tuple[str, Any]]:
    """List the public methods and properties defined on ``cls`` itself, sorted by name."""
    if issubclass(cls, enum.Enum) or issubclass(cls, BaseException):
        return []  # members and the exception protocol, not an API of their own
    out = []
    for name, obj in vars(cls).items():
        if name.startswith("_"):
            continue
        if isinstance(obj, staticmethod | classmethod):
            obj = obj.__func__
        if inspect.isfunction(obj) or isinstance(obj, property):
            out.append((name, obj))
    return sorted(out, key=lambda item: item[0])


def own_doc(obj: Any) -> str:
    """Return the docstring ``obj`` defines itself (not one inherited or generated), cleaned."""
    if inspect.isclass(obj):
        doc = obj.__dict__.get("__doc__")
        if doc and _is_generated_class_doc(obj, doc):
            doc = None
    elif isinstance(obj, property):
        doc = obj.__doc__
    else:
        doc = getattr(obj, "__doc__", None)
    return inspect.cleandoc(doc or "").strip()


def _is_generated_class_doc(cls: type, doc: str) -> bool:
    # NamedTuple, dataclass and enum write a docstring of their own when the class has none
    return doc.startswith(f"{cls.__name__}(") or doc == "An enumeration."


def first_sentence(doc: str) -> str | None:
    """Return the first whole sentence of a docstring's first paragraph, or ``None``.

    The paragraph's lines are joined; the sentence ends at the first ``.``, ``!`` or
    ``?`` followed by a space or the paragraph's end that is not inside ````code````
    and does not end an abbreviation such as ``e.g.``. ``None`` when the first
    paragraph has no such end (the summary would be cut).
    """
    paragraph = " ".join(doc.strip().split("\n\n", 1)[0].split())
    for match in _END.finditer(paragraph):
        before = paragraph[: match.start()]
        if before.count("``") % 2:
            continue
        if re.split(r"[\s(]", before)[-1].lower() in _ABBREVIATIONS:
            continue
        return paragraph[: match.end()]
    return None


def _signature(obj: Any) -> str:
    try:
        text = str(inspect.signature(obj))
    except (TypeError, ValueError):
        return "(...)"
    return re.sub(r" at 0x[0-9a-fA-F]+>", ">", text)  # default values' reprs carry addresses


def _kind(obj: Any) -> str:
    if inspect.isclass(obj):
        if issubclass(obj, enum.Enum):
            return "enum"
        if issubclass(obj, BaseException):
            return "exception"
        return "class"
    if callable(obj):
        return "def"
    return "constant"


def _summary(obj: Any) -> str:
    if _kind(obj) == "constant":
        text = re.sub(r" at 0x[0-9a-fA-F]+>", ">", repr(obj))  # no addresses: deterministic
        return f"`{text if len(text) <= 70 else text[:67] + '...'}`"
    return first_sentence(own_doc(obj)) or "(no summary)"


def _escape_cell(text: str) -> str:
    return text.replace("|", "\\|")


def render() -> str:
    """Return the whole reference as Markdown."""
    lines = [
        "# API reference",
        "",
        "Generated by `python tools/gen_api_docs.py` from the docstrings of the supported",
        "API: the names in the `__all__` of each package below (pinned by",
        "`tests/unit/test_public_api.py`). Do not edit; anything not listed here is internal",
        "and may change without notice.",
        "",
        "Docstrings cite where a behaviour is specified: a section of a document in `docs/`",
        "(`docs/semantics.md` for the durability rules), or *issue N item M*, the design",
        "issue that asked for it.",
        "",
    ]
    for module in api_packages():
        lines += [f"## `{module.__name__}`", "", own_doc(module), ""]
        members = api_members(module)
        if not members:
            continue
        lines += ["| name | kind | summary |", "|---|---|---|"]
        for name, obj in members:
            lines.append(f"| `{name}` | {_kind(obj)} | {_escape_cell(_summary(obj))} |")
        lines.append("")
        for name, obj in members:
            kind = _kind(obj)
            qualified = f"{module.__name__}.{name}"
            if kind == "constant":
                lines += [f"### {kind} `{qualified}`", "", _summary(obj), ""]
                continue
            signature = "" if kind in ("enum", "exception") else _signature(obj)
            if signature == "(...)":
                signature = ""
            lines += [f"### {kind} `{qualified}{signature}`", "", own_doc(obj), ""]
            if kind == "enum":
                values = ", ".join(f"`{m.name}` (`{m.value!r}`)" for m in obj)
                lines += [f"Members: {values}.", ""]
            if inspect.isclass(obj):
                entries = methods(obj)
                for method_name, method in entries:
                    summary = first_sentence(own_doc(method)) or "(no summary)"
                    if isinstance(method, property):
                        lines.append(f"- **`{method_name}`** (property) — {summary}")
                    else:
                        lines.append(f"- **`{method_name}{_signature(method)}`** — {summary}")
                if entries:
                    lines.append("")
    return "\n".join(line.rstrip() for line in lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    """Write ``docs/api-reference.md``, or with ``--check`` return 1 when it is stale."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="exit 1 if docs/api-reference.md is stale"
    )
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = OUT.read_text("utf-8") if OUT.exists() else ""
        if current != text:
            print(
                f"{OUT.relative_to(ROOT)} is stale; run python tools/gen_api_docs.py",
                file=sys.stderr,
            )
            return 1
        return 0
    OUT.write_text(text, "utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
