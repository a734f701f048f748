"""Images of diagrams through the Graphviz ``dot`` binary, and their provenance stamps.

SVG and PNG bytes vary between Graphviz versions, so committed images are not compared
byte for byte: each carries the sha256 of the DOT text it was rendered from (an XML
comment in SVG, a ``tEXt`` chunk in PNG), and the freshness check compares that stamp
with the sha256 of the fresh DOT text (``docs/spec-format.md`` "Diagrams").
"""

from __future__ import annotations

import hashlib
import re
import struct
import zlib

import graphviz

from phronomy_fsm.diagram.text import clean_text
from phronomy_fsm.errors import RenderError

#: Image formats :func:`render_image` produces through the ``dot`` binary.
IMAGE_FORMATS = ("svg", "png")


def render_image(dot_source: str, fmt: str) -> bytes:
    """Render DOT text to an image through the Graphviz ``dot`` binary.

    Args:
        dot_source: DOT text (from :func:`render_dot`).
        fmt: ``"svg"`` or ``"png"``.

    Returns:
        The image bytes as ``dot`` wrote them.

    Raises:
        ValueError: ``fmt`` is not one of :data:`IMAGE_FORMATS`.
        RenderError: ``dot`` is not installed (``reason="missing"``) or exited with an
            error (``reason="failed"``, with the first line of its stderr).
    """
    if fmt not in IMAGE_FORMATS:
        raise ValueError(f"image format must be one of {IMAGE_FORMATS}, got {fmt!r}")
    try:
        return graphviz.pipe("dot", fmt, dot_source.encode("utf-8"), quiet=True)
    except graphviz.ExecutableNotFound:
        raise RenderError(
            f"cannot render {fmt}: the Graphviz 'dot' program is not installed or not on PATH "
            "(Debian: apt-get install graphviz; or use --format dot or mermaid)",
            format=fmt,
            reason="missing",
        ) from None
    except graphviz.CalledProcessError as exc:
        stderr = (
            exc.stderr.decode("utf-8", "replace")
            if isinstance(exc.stderr, bytes)
            else str(exc.stderr or "")
        )
        first = (
            clean_text(stderr.strip().splitlines()[0])
            if stderr.strip()
            else f"exit status {exc.returncode}"
        )
        raise RenderError(
            f"cannot render {fmt}: dot failed: {first}", format=fmt, reason="failed"
        ) from None
    except OSError as exc:
        raise RenderError(
            f"cannot render {fmt}: cannot run dot: {exc}", format=fmt, reason="failed"
        ) from None


# --------------------------------------------------------------- SVG provenance

_STAMP_PREFIX = "phronomy-fsm rendered-from-dot sha256="
_STAMP_RE = re.compile(rb"<!-- phronomy-fsm rendered-from-dot sha256=([0-9a-f]{64}) -->")


def dot_sha256(dot_source: str) -> str:
    """The sha256 (hex) of DOT text, as UTF-8 bytes."""
    return hashlib.sha256(dot_source.encode("utf-8")).hexdigest()


def stamp_svg(svg: bytes, dot_source: str) -> bytes:
    """Return ``svg`` with an XML comment recording the sha256 of the DOT text it was
    rendered from, inserted after the XML declaration (or at the start). SVG bytes vary
    between Graphviz versions; the stamp lets a freshness check prove provenance
    without re-rendering."""
    stamp = f"<!-- {_STAMP_PREFIX}{dot_sha256(dot_source)} -->\n".encode("ascii")
    if svg.startswith(b"<?xml"):
        end = svg.find(b"?>")
        if end != -1:
            head = svg[: end + 2]
            rest = svg[end + 2 :].lstrip(b"\r\n")
            return head + b"\n" + stamp + rest
    return stamp + svg


def svg_dot_sha256(svg: bytes) -> str | None:
    """Return the DOT sha256 recorded by :func:`stamp_svg` in ``svg``, or ``None`` when
    there is no stamp (only the first 4 KiB are searched)."""
    match = _STAMP_RE.search(svg[:4096])
    return match.group(1).decode("ascii") if match else None


def render_svg(dot_source: str) -> bytes:
    """Render DOT text to SVG and stamp it with the DOT's sha256.

    Raises:
        RenderError: as :func:`render_image`.
    """
    return stamp_svg(render_image(dot_source, "svg"), dot_source)


# --------------------------------------------------------------- PNG provenance

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_PNG_KEYWORD = b"phronomy-fsm rendered-from-dot sha256"


def stamp_png(png: bytes, dot_source: str) -> bytes:
    """Return ``png`` with a ``tEXt`` chunk recording the sha256 of the DOT text it was
    rendered from, inserted right after the ``IHDR`` chunk.

    Raises:
        ValueError: ``png`` is not a PNG image.
    """
    if not png.startswith(_PNG_SIGNATURE) or png[12:16] != b"IHDR":
        raise ValueError("not a PNG image")
    ihdr_end = 8 + 8 + struct.unpack(">I", png[8:12])[0] + 4
    data = _PNG_KEYWORD + b"\x00" + dot_sha256(dot_source).encode("ascii")
    chunk = struct.pack(">I", len(data)) + b"tEXt" + data
    chunk += struct.pack(">I", zlib.crc32(b"tEXt" + data) & 0xFFFFFFFF)
    return png[:ihdr_end] + chunk + png[ihdr_end:]


def png_dot_sha256(png: bytes) -> str | None:
    """Return the DOT sha256 recorded by :func:`stamp_png`, or ``None`` when there is
    no stamp (or ``png`` is not a PNG image)."""
    if not png.startswith(_PNG_SIGNATURE):
        return None
    offset = 8
    while offset + 8 <= len(png):
        length = struct.unpack(">I", png[offset : offset + 4])[0]
        kind = png[offset + 4 : offset + 8]
        body = png[offset + 8 : offset + 8 + length]
        if kind == b"tEXt" and body.startswith(_PNG_KEYWORD + b"\x00"):
            value = body[len(_PNG_KEYWORD) + 1 :].decode("ascii", "replace")
            return value if re.fullmatch(r"[0-9a-f]{64}", value) else None
        if kind == b"IDAT":
            return None
        offset += 12 + length
    return None


def render_png(dot_source: str) -> bytes:
    """Render DOT text to PNG and stamp it with the DOT's sha256.

    Raises:
        RenderError: as :func:`render_image`.
    """
    return stamp_png(render_image(dot_source, "png"), dot_source)
