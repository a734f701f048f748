"""Every internal reference of the docs resolves (issue 14 item 7: ``docs/operations.md``
linked a section under a name it does not have).

Checked in ``docs/*.md`` and ``README.md`` (not the generated ``docs/api-reference.md``):

- Markdown links to a repository file, ``[text](path)`` or ``[text](path#anchor)`` /
  ``[text](#anchor)``: the file exists and the anchor is the GitHub slug of one of its
  headings;
- section references by name, the house style — ``docs/store.md``, "Schema" or
  ``docs/getting-started.md`` ("Your own machines") — name a heading of that file;
- ``see "Recovering a store" below`` names a heading of the same file.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted(p for p in (ROOT / "docs").glob("*.md") if p.name != "api-reference.md")
FILES = [*DOCS, ROOT / "README.md"]

_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)
_FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_NAMED = re.compile(r"`?((?:docs/)?[\w.-]+\.md)`?\s*,?\s*\(?\s*\"([^\"]+)\"")
_SAME_FILE = re.compile(r"\"([^\"]+)\"\)?\s+(?:below|above)\b")


def _text(path: Path) -> str:
    """The file without its fenced code blocks (examples may quote anything)."""
    return _FENCE.sub("", path.read_text("utf-8"))


def _plain(text: str) -> str:
    return " ".join(text.replace("`", "").split())


def headings(path: Path) -> set[str]:
    return {_plain(h) for h in _HEADING.findall(_text(path))}


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to ``-``."""
    text = _plain(heading).lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _resolve(source: Path, target: str) -> Path:
    if target.startswith("docs/") or target == "README.md":
        return ROOT / target
    return source.parent / target


def _references(path: Path) -> list[tuple[int, str, Path, str | None, str]]:
    """``(line, kind, target file, anchor or section, raw)`` for each reference."""
    text = _text(path)
    found = []
    for match in _LINK.finditer(text):
        raw = match.group(1)
        if re.match(r"^[a-z][a-z0-9+.-]*:", raw):  # http:, mailto: ...
            continue
        file_part, _, anchor = raw.partition("#")
        target = path if not file_part else _resolve(path, file_part)
        line = text.count("\n", 0, match.start()) + 1
        found.append((line, "link", target, anchor or None, raw))
    for match in _NAMED.finditer(text):
        name, section = match.groups()
        line = text.count("\n", 0, match.start()) + 1
        found.append((line, "section", _resolve(path, name), _plain(section), match.group(0)))
    for match in _SAME_FILE.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        found.append((line, "section", path, _plain(match.group(1)), match.group(0)))
    return found


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_internal_reference_resolves(path: Path) -> None:
    broken = []
    for line, kind, target, name, raw in _references(path):
        where = f"{path.relative_to(ROOT)}:{line}: {' '.join(raw.split())}"
        if not target.exists():
            broken.append(f"{where}: no file {target.relative_to(ROOT)}")
            continue
        if name is None or target.suffix != ".md":
            continue
        names = headings(target)
        if kind == "link" and name not in {slug(h) for h in names}:
            broken.append(f"{where}: {target.name} has no heading with anchor #{name}")
        if kind == "section" and name not in names:
            broken.append(f"{where}: {target.name} has no section {name!r}")
    assert not broken, "\n".join(broken)


def test_the_checker_finds_a_wrong_section_name(tmp_path: Path) -> None:
    doc = tmp_path / "a.md"
    doc.write_text(
        '# A\n\n## Who runs an execution\n\nSee `a.md`, "Who owns an agent", and '
        '[x](#who-runs-an-execution), [y](#nowhere), "Who runs an execution" below.\n',
        "utf-8",
    )
    refs = [(kind, name) for _line, kind, _target, name, _raw in _references(doc)]
    assert ("section", "Who owns an agent") in refs
    assert ("link", "nowhere") in refs and ("link", "who-runs-an-execution") in refs
    assert ("section", "Who runs an execution") in refs
    assert slug("Looking: `executions list` and `executions show`") == (
        "looking-executions-list-and-executions-show"
    )
    assert "Who owns an agent" not in headings(doc)
