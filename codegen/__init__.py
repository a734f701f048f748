"""The spec compiler: Jinja templates that turn validated specs into transition-table
modules. Installed as ``phronomy_fsm.codegen`` (the repository keeps it in the top-level
``codegen/`` folder), so it works after a plain ``pip install`` on users' own specs.

Entry points: :func:`compile_spec` (one spec → module text) and :func:`generate`
(spec files → ``<out>/<machine>.py``, with a ``check`` mode for freshness).
"""

from phronomy_fsm.codegen.compiler import (
    GeneratedFile,
    GenerateReport,
    build_view_model,
    compile_spec,
    display_path,
    generate,
    py_literal,
    template_sha256,
)

__all__ = [
    "GenerateReport",
    "GeneratedFile",
    "build_view_model",
    "compile_spec",
    "display_path",
    "generate",
    "py_literal",
    "template_sha256",
]
