"""The layering contracts hold (issue 14 item 2): ``lint-imports`` (import-linter, the
contracts in ``pyproject.toml``) passes, and the one import it cannot see — the
compiler under its installed name ``phronomy_fsm.codegen`` — comes only from the
modules allowed to use the compiler."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[2]

#: Packages and modules allowed to import ``phronomy_fsm.codegen`` (the compiler): the
#: compiler itself, the CLI's ``generate``, diagrams and the pytransitions interop (both
#: lower a spec to a table). The execution chain (generated tables, runtime, engine,
#: stores, agent) must never.
CODEGEN_USERS = ("codegen", "phronomy_fsm.cli", "phronomy_fsm.diagram", "phronomy_fsm.interop")


def test_lint_imports_keeps_every_contract() -> None:
    lint_imports = Path(sys.executable).with_name("lint-imports")
    proc = subprocess.run(
        [str(lint_imports), "--no-cache"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 broken" in proc.stdout


def test_only_the_allowed_modules_import_the_compiler() -> None:
    sys.path.insert(0, str(ROOT))  # the top-level codegen/ folder, as lint-imports sees it
    try:
        graph = grimp.build_graph(
            "phronomy_fsm", "codegen", include_external_packages=True, cache_dir=None
        )
    finally:
        sys.path.remove(str(ROOT))
    users = set()
    # ``phronomy_fsm.codegen.X`` is not a module grimp finds under src/, so it records
    # such an import as one of the root package, with the line that made it
    for importer in graph.find_modules_that_directly_import("phronomy_fsm"):
        for detail in graph.get_import_details(importer=importer, imported="phronomy_fsm"):
            if "phronomy_fsm.codegen" in detail["line_contents"]:
                users.add(importer)
    assert users, "no import of phronomy_fsm.codegen found: the check is blind"
    strays = sorted(
        m for m in users if not any(m == u or m.startswith(u + ".") for u in CODEGEN_USERS)
    )
    assert strays == []
