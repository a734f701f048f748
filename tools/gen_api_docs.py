#!/usr/bin/env python3
"""Generate ``docs/api-reference.md`` from the docstrings of the public API.

``python tools/gen_api_docs.py`` writes the file; ``--check`` exits 1 when the committed
file is stale (a test runs the check). The public API is every module of the
``phronomy_fsm`` package (the generated tables excepted) and, in each, the classes and
functions it defines whose names do not start with an underscore, with their public
methods. Output is deterministic: modules, members and methods sorted by name.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import pkgutil
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "api-reference.md"
SKIP_PREFIXES = ("phronomy_fsm.generated.",)


def public_modules() -> list[Any]:
    """Every module of the package, sorted, except generated tables and ``__main__``."""
    import phronomy_fsm

    names = ["phronomy_fsm"] + sorted(
        m.name
        for m in pkgutil.walk_packages(phronomy_fsm.__path__, "phronomy_fsm.")
        if not m.name.startswith(SKIP_PREFIXES)
    )
    modules = []
    for name in names:
        if name.rsplit(".", 1)[-1].startswith("_"):
            continue
        modules.append(importlib.import_module(name))
    return modules


def members(module: Any) -> list[tuple[str, Any]]:
    """Public classes and functions defined in ``module`` (not re-exported ones)."""
    out = []
    for name, obj in vars(module).items():
        if name.startswith("_") or not (inspect.isclass(obj) or inspect.isfunction(obj)):
            continue
        if getattr(obj, "__module__", None) != module.__name__:
            continue
        out.append((name, obj))
    return sorted(out)


def methods(cls: type) -> list[tuple[str, Any]]:
    """Public methods and properties defined on ``cls`` itself."""
    out = []
    for name, obj in vars(cls).items():
        if name.startswith("_"):
            continue
        if isinstance(obj, (staticmethod, classmethod)):
            obj = obj.__func__
        if inspect.isfunction(obj) or isinstance(obj, property):
            out.append((name, obj))
    return sorted(out, key=lambda item: item[0])


def _signature(obj: Any) -> str:
    try:
        text = str(inspect.signature(obj))
    except (TypeError, ValueError):
        return "(...)"
    return re.sub(r" at 0x[0-9a-fA-F]+>", ">", text)  # default values' reprs carry addresses


def _doc(obj: Any) -> str:
    return inspect.cleandoc(obj.__doc__ or "").strip()


def render() -> str:
    """The whole reference as Markdown."""
    lines = [
        "# API reference",
        "",
        "Generated from the docstrings by `python tools/gen_api_docs.py`; do not edit.",
        "",
        "Docstrings cite where a behaviour comes from: *reference §N* is a section of the",
        "behaviour reference of phronomy 0.27 (the Ruby framework this library re-implements),",
        "kept with the design documents beside the repository; *issue N item M* is the",
        "project's design issue that specified it. The user-facing documents are in `docs/`.",
        "",
    ]
    for module in public_modules():
        lines += [f"## `{module.__name__}`", "", _doc(module), ""]
        for name, obj in members(module):
            kind = "class" if inspect.isclass(obj) else "def"
            signature = (
                "" if inspect.isclass(obj) and _signature(obj) == "(...)" else _signature(obj)
            )
            lines += [f"### {kind} `{name}{signature}`", "", _doc(obj), ""]
            if inspect.isclass(obj):
                for method_name, method in methods(obj):
                    if isinstance(method, property):
                        lines += [
                            f"- **`{method_name}`** (property) — {_doc(method).splitlines()[0] if _doc(method) else ''}"
                        ]
                    else:
                        first = _doc(method).splitlines()[0] if _doc(method) else ""
                        lines += [f"- **`{method_name}{_signature(method)}`** — {first}"]
                lines.append("")
    return "\n".join(line.rstrip() for line in lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
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
