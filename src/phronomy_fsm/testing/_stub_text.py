"""How the stub LLM server cuts text into stream pieces (both wire formats)."""

from __future__ import annotations


def split_words(text: str) -> list[str]:
    """Pieces of ``text`` ending after each space (at least two when possible)."""
    pieces, current = [], ""
    for ch in text:
        current += ch
        if ch == " ":
            pieces.append(current)
            current = ""
    if current:
        pieces.append(current)
    if len(pieces) == 1 and len(text) > 1:
        half = len(text) // 2
        pieces = [text[:half], text[half:]]
    return pieces


def split_fixed(text: str, size: int = 7) -> list[str]:
    """Pieces of ``text`` of ``size`` characters (one empty piece for empty text)."""
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]
