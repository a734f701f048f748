"""State diagrams of a machine: a format-neutral diagram IR and its DOT and Mermaid
renderers.

- :mod:`phronomy_fsm.diagram.model`: the IR (:class:`Diagram`, built by
  :func:`build_diagram` from a spec or from a generated ``TABLE`` alone), edge roles for
  the main-path view, and :class:`Highlight` (one execution over its machine);
- :mod:`phronomy_fsm.diagram.dot`: :func:`render_dot` (views ``full`` and ``main``,
  clusters for compound states, a legend, the highlight);
- :mod:`phronomy_fsm.diagram.mermaid`: :func:`render_mermaid`;
- :mod:`phronomy_fsm.diagram.image`: :func:`render_image`, and stamped SVG and PNG
  (:func:`render_svg`, :func:`render_png`) whose freshness can be checked without
  ``dot``;
- :mod:`phronomy_fsm.diagram.text`: escaping, so any valid spec renders.

The committed diagrams under ``docs/diagrams/`` and their freshness check live in
:mod:`phronomy_fsm.diagram_files`; ``docs/spec-format.md`` "Diagrams" describes the
pictures. The runtime never imports this package (it imports ``graphviz``).
"""

from phronomy_fsm.diagram.dot import VIEWS, render_dot
from phronomy_fsm.diagram.image import (
    IMAGE_FORMATS,
    dot_sha256,
    png_dot_sha256,
    render_image,
    render_png,
    render_svg,
    stamp_png,
    stamp_svg,
    svg_dot_sha256,
)
from phronomy_fsm.diagram.mermaid import render_mermaid
from phronomy_fsm.diagram.model import (
    FOLDED_ROLES,
    RECOVERY_STATE,
    Diagram,
    DiagramCluster,
    DiagramEdge,
    DiagramNode,
    Highlight,
    build_diagram,
    highlight_path,
)
from phronomy_fsm.diagram.text import (
    TOOLTIP_BACKSLASH,
    clean_text,
    dot_escape,
    dot_tooltip,
    mermaid_id,
    mermaid_text,
)

__all__ = [
    "FOLDED_ROLES",
    "IMAGE_FORMATS",
    "RECOVERY_STATE",
    "TOOLTIP_BACKSLASH",
    "VIEWS",
    "Diagram",
    "DiagramCluster",
    "DiagramEdge",
    "DiagramNode",
    "Highlight",
    "build_diagram",
    "clean_text",
    "dot_escape",
    "dot_sha256",
    "dot_tooltip",
    "highlight_path",
    "mermaid_id",
    "mermaid_text",
    "png_dot_sha256",
    "render_dot",
    "render_image",
    "render_mermaid",
    "render_png",
    "render_svg",
    "stamp_png",
    "stamp_svg",
    "svg_dot_sha256",
]
