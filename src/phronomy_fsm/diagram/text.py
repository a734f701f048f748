"""Text hygiene for diagrams: every name, label and tooltip is made safe for DOT and
Mermaid here, so any valid spec renders (no spec text can break a diagram's syntax).

DOT: quotes, backslashes and ``&`` are escaped and labels are never HTML-like
(``<...>``); a backslash in a tooltip is shown as ``⧵``. Mermaid: entity codes. Whitespace
is collapsed and control characters are replaced everywhere.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

import graphviz

_CONTROL_CATEGORIES = frozenset({"Cc", "Cs", "Co", "Cn"})


def clean_text(text: str) -> str:
    """Return ``text`` on one line: every run of whitespace (newlines, tabs, unicode
    line separators) becomes one space, control characters, lone surrogates and
    unassigned code points become U+FFFD, and the ends are stripped. Used for every
    label and tooltip so no spec text can break a diagram's syntax."""
    out = []
    for ch in " ".join(text.split()):
        out.append("\ufffd" if unicodedata.category(ch) in _CONTROL_CATEGORIES else ch)
    return "".join(out)


def dot_escape(text: str) -> str:
    """Escape one line of text for a DOT label or id, so Graphviz draws it exactly.

    After :func:`clean_text`: ``&`` becomes ``&amp;`` (Graphviz turns character
    entities into characters in labels) and ``\\`` becomes ``\\\\`` (labels are
    escStrings, where ``\\N``, ``\\G``, ``\\l``... would be expanded). The result is
    marked as never being an HTML-like label; the ``graphviz`` package adds the
    surrounding quotes and escapes ``"``.
    """
    return graphviz.nohtml(clean_text(text).replace("&", "&amp;").replace("\\", "\\\\"))


#: What a backslash becomes in tooltips (U+29F5 REVERSE SOLIDUS OPERATOR).
TOOLTIP_BACKSLASH = "\u29f5"


def dot_tooltip(text: str) -> str:
    """Escape text for a DOT tooltip (descriptions; shown on hover in SVG).

    Like :func:`dot_escape`, except that a backslash is shown as ``⧵`` (U+29F5):
    Graphviz versions differ in how many times they expand escape sequences in
    tooltips (2.43 does it twice, turning ``\\\\N`` into the node's name), so no
    escaping of a literal backslash is portable.
    """
    return graphviz.nohtml(clean_text(text).replace("&", "&amp;").replace("\\", TOOLTIP_BACKSLASH))


def dot_text(lines: Iterable[str]) -> str:
    """A DOT string from lines, each escaped by :func:`dot_escape`, joined by ``\\n``
    (centred line breaks)."""
    return graphviz.nohtml("\\n".join(dot_escape(line) for line in lines))


def dot_id(name: str) -> str:
    """A DOT node id for a state name (escaped; quoted by the graphviz package when it
    is not a plain identifier or is a DOT keyword)."""
    return dot_escape(name or "\ufffd")


_MERMAID_ENTITIES = {
    "#": "#35;",
    ";": "#59;",
    ":": "#58;",
    '"': "#quot;",
    "<": "#lt;",
    ">": "#gt;",
    "{": "#123;",
    "}": "#125;",
    "%": "#37;",
    "|": "#124;",
    "`": "#96;",
}
_MERMAID_ID = re.compile(r"[A-Za-z0-9_]+")


def mermaid_text(text: str) -> str:
    """Escape ``text`` for a Mermaid label: one line (see :func:`clean_text`) with the
    characters Mermaid treats specially (``# ; : " < > { } % | ```) as entity codes."""
    return "".join(_MERMAID_ENTITIES.get(ch, ch) for ch in clean_text(text))


def mermaid_id(name: str) -> str:
    """The Mermaid state id of a state name: ``s_<name>`` when the name is made of
    ``[A-Za-z0-9_]`` only (every valid spec), else ``x_`` followed by the hex of its
    UTF-8 bytes. Injective, and never a Mermaid keyword."""
    if _MERMAID_ID.fullmatch(name):
        return "s_" + name
    return "x_" + name.encode("utf-8", "surrogatepass").hex()
