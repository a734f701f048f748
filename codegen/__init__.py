"""The spec compiler: lower a validated spec to its table object, print it as a module.

Installed as ``phronomy_fsm.codegen`` (the repository keeps it in the top-level
``codegen/`` folder), so it works after a plain ``pip install`` on users' own specs.

- :func:`lower` (:mod:`phronomy_fsm.codegen.lower`): spec → ``MachineTable``, once;
- :func:`emit` (:mod:`phronomy_fsm.codegen.emit`): ``MachineTable`` → module text,
  through a dumb Jinja template (Jinja is imported only when emitting);
- :func:`compile_spec` (one spec → module text) and :func:`generate` (spec files →
  ``<out>/<machine>.py``, with a ``check`` mode for freshness).
"""

from phronomy_fsm.codegen.compiler import (
    GeneratedFile,
    GenerateReport,
    compile_spec,
    display_path,
    generate,
)
from phronomy_fsm.codegen.emit import build_view_model, emit, py_literal, template_sha256
from phronomy_fsm.codegen.lower import lower

__all__ = [
    "GenerateReport",
    "GeneratedFile",
    "build_view_model",
    "compile_spec",
    "display_path",
    "emit",
    "generate",
    "lower",
    "py_literal",
    "template_sha256",
]
