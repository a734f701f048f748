"""Every pointer from the code into ``docs/`` names a section that exists (issue 21 item 9:
comments and docstrings still named sections the docs had renamed or dropped, such as
``docs/store.md`` "Commit latency").

Checked in ``src/``, ``codegen/`` and ``tools/`` (Python files and templates): a
``docs/NAME.md`` followed by one or more quoted section titles, in the forms the code
uses —

- ``docs/semantics.md``, "Cancel"  /  ``docs/store.md`` "Schema"  /  ``docs/runtime.md``:
  "Stale results" (in docstrings; the title may run over a line break);
- (``docs/agent.md``, "Outcomes")  /  ``docs/semantics.md`` ("Commits", "Leases and
  fencing")  /  "A" and "B";
- docs/semantics.md, 'Barriers' (in messages and comments; a ``#`` may continue it on the
  next line).

The named file must exist and have a heading with that title (headings as
``tests/unit/test_doc_links.py`` reads them: code spans and runs of spaces do not count).
"""

from __future__ import annotations

import re
from pathlib import Path

from .test_doc_links import headings

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("src", "codegen", "tools")
SUFFIXES = {".py", ".j2"}

# Between the file and its first title: backticks, a comma or colon, an opening
# parenthesis, spaces, and at most one line break (then maybe a comment's `#`).
_GAP = r"`{0,2}[ \t]*[,:]?[ \t]*(?:\n[ \t]*(?:#[ \t]*)?)?\(?[ \t]*"
# A title starts with a capital letter and may run over one line break (a wrapped
# docstring or a comment's next `#` line).
_BREAK = r"[ \t]*\n[ \t]*(?:#[ \t]*)?"
_TITLE = rf"\"[A-Z][^\"\n]*(?:{_BREAK}[^\"\n]+)?\"" + "|" + rf"'[A-Z][^'\n]*(?:{_BREAK}[^'\n]+)?'"
_MORE = rf"(?:[ \t]*(?:,|and)(?:{_BREAK}|[ \t]+)?(?:{_TITLE}))*"
_POINTER = re.compile(rf"docs/(?P<file>[\w.-]+\.md){_GAP}(?P<titles>(?:{_TITLE}){_MORE})")
_ONE_TITLE = re.compile(_TITLE)


def _plain(text: str) -> str:
    """A title as written in code: quotes, comment markers and line breaks dropped."""
    text = re.sub(r"\n[ \t]*#", " ", text[1:-1])
    return " ".join(text.replace("`", "").split())


def pointers(text: str) -> list[tuple[int, str, str]]:
    """``(line, file name, section title)`` for each section a pointer in ``text`` names."""
    found = []
    for match in _POINTER.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        for title in _ONE_TITLE.finditer(match.group("titles")):
            found.append((line, match.group("file"), _plain(title.group(0))))
    return found


def _sources() -> list[Path]:
    return [
        path
        for folder in FOLDERS
        for path in sorted((ROOT / folder).rglob("*"))
        if path.suffix in SUFFIXES and "egg-info" not in path.parts[-2]
    ]


def test_every_pointer_into_the_docs_names_a_section_that_exists() -> None:
    broken, seen = [], 0
    for path in _sources():
        for line, name, title in pointers(path.read_text("utf-8")):
            seen += 1
            where = f"{path.relative_to(ROOT)}:{line}: docs/{name}, {title!r}"
            target = ROOT / "docs" / name
            if not target.exists():
                broken.append(f"{where}: no file docs/{name}")
            elif title not in headings(target):
                broken.append(f"{where}: docs/{name} has no section {title!r}")
    assert seen > 100, f"the pattern found only {seen} pointers: it no longer matches the code"
    assert not broken, "\n".join(broken)


def test_the_pointer_forms_the_code_uses_are_found() -> None:
    text = (
        '"""See ``docs/semantics.md``, "Cancel", and ``docs/store.md`` "Schema".\n'
        'Sessions (``docs/runtime.md``: "Stale results"); (``docs/agent.md``, "Outcomes").\n'
        '``docs/semantics.md`` ("Commits", "Leases and\nfencing") and ``docs/spec-format.md``\n'
        '"Compound states" and "Barrier shorthand".\n'
        "    # the rule (docs/store.md,\n    # 'Error taxonomy')\n"
        "raise X(\"a dict (docs/semantics.md, 'The context')\")\n"
        '"the file holds no YAML document; see docs/spec-format.md",\n    "$",\n'
    )
    assert pointers(text) == [
        (1, "semantics.md", "Cancel"),
        (1, "store.md", "Schema"),
        (2, "runtime.md", "Stale results"),
        (2, "agent.md", "Outcomes"),
        (3, "semantics.md", "Commits"),
        (3, "semantics.md", "Leases and fencing"),
        (4, "spec-format.md", "Compound states"),
        (4, "spec-format.md", "Barrier shorthand"),
        (6, "store.md", "Error taxonomy"),
        (8, "semantics.md", "The context"),
    ]
