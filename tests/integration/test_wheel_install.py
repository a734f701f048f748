"""The compiler works after a plain, non-editable ``pip install`` (issue 2 item 6;
ARCHITECTURE.md "Generated code": "The compiler must work for users on their own specs
after a plain pip install of the package, not only from a source checkout").

Builds the wheel, installs it with its dependencies into a fresh virtual environment
(pip's configured indexes), and in a user's project folder — with its own
``pyproject.toml`` ``[tool.phronomy_fsm]`` table — runs that environment's
``phronomy-fsm validate``, ``generate``, ``generate --check`` and ``diagram --all``,
then imports the generated module with that environment's interpreter.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.spec_samples import REPO, door

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def _run(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert result.returncode == 0, f"{args}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    return result


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("wheel")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    wheels = root / "wheels"
    _run(
        [sys.executable, "-m", "pip", "wheel", str(REPO), "--no-deps", "-q", "-w", str(wheels)],
        root,
        env,
    )
    [wheel] = wheels.glob("phronomy_fsm-*.whl")
    venv = root / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], root, env)
    _run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)], root, env)
    return venv


def test_installed_package_is_not_the_source_tree(installed: Path, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    code = (
        "import json, phronomy_fsm, phronomy_fsm.codegen, phronomy_fsm.cli\n"
        "from phronomy_fsm.spec.schema import load_spec_schema\n"
        "from phronomy_fsm.codegen.emit import template_sha256\n"
        "print(json.dumps([phronomy_fsm.__file__, phronomy_fsm.codegen.__file__,"
        " load_spec_schema()['title'], template_sha256()]))\n"
    )
    out = _run([str(installed / "bin" / "python"), "-c", code], tmp_path, env)
    package, codegen, title, template = json.loads(out.stdout)
    assert package.startswith(str(installed)) and codegen.startswith(str(installed))
    assert "site-packages" in codegen
    assert title.startswith("phronomy-fsm machine spec")
    from phronomy_fsm.codegen import template_sha256

    assert template == template_sha256()  # the same template ships in the wheel


def test_user_project_generate_and_import(installed: Path, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    project = tmp_path / "user-project"
    (project / "machines").mkdir(parents=True)
    (project / "machines" / "door.yaml").write_text(door())
    (project / "pyproject.toml").write_text(
        '[project]\nname = "user-app"\nversion = "1"\n\n'
        '[tool.phronomy_fsm]\nspecs = ["machines/*.yaml"]\nout = "app/fsm"\ndiagrams = "docs/diagrams"\n'
    )
    cli = str(installed / "bin" / "phronomy-fsm")
    python = str(installed / "bin" / "python")

    validated = _run([cli, "validate", "machines/door.yaml", "--format", "json"], project, env)
    assert json.loads(validated.stdout)["ok"] is True
    stale = subprocess.run(
        [cli, "generate", "--check"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert stale.returncode == 1 and "app/fsm/door.py: missing" in stale.stderr
    generated = _run([cli, "generate"], project, env)
    assert generated.stdout.strip() == "app/fsm/door.py: written"
    _run([cli, "generate", "--check"], project / "machines", env)  # from a sub-folder too
    module = (project / "app" / "fsm" / "door.py").read_text()
    assert module.splitlines()[1].startswith('# spec: "machines/door.yaml" sha256=')
    # the installed compiler writes exactly what the source tree's compiler writes
    from phronomy_fsm.codegen import compile_spec

    from phronomy_fsm.spec.loader import load_spec_text

    spec = load_spec_text(door(), source_name="machines/door.yaml").spec
    assert spec is not None
    assert module == compile_spec(spec)

    code = (
        "import json, sys\n"
        "sys.path.insert(0, '.')\n"
        "from app.fsm import door\n"
        "print(json.dumps([door.TABLE.machine, door.TABLE.initial, [s.value for s in door.State],"
        " len(door.TABLE.transitions), sorted(m for m in sys.modules if m.split('.')[0] in ('jinja2', 'yaml'))]))\n"
    )
    out = _run([python, "-c", code], project, env)
    machine, initial, states, rows, heavy = json.loads(out.stdout)
    assert (machine, initial, states, rows) == ("door", "closed", ["closed", "opened", "locked"], 3)
    assert heavy == []  # importing a generated module pulls in neither jinja2 nor yaml

    if shutil.which("dot") is not None:
        _run([cli, "diagram", "--all"], project, env)
        assert sorted(p.name for p in (project / "docs" / "diagrams").iterdir()) == [
            "door.dot",
            "door.main.dot",
            "door.main.png",
            "door.mmd",
            "door.svg",
        ]
        _run([cli, "diagram", "--all", "--check"], project, env)


def test_the_stub_llm_server_ships_in_the_wheel(installed: Path, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    python = str(installed / "bin" / "python")
    out = _run([python, "-m", "phronomy_fsm.testing.stub_llm", "--help"], tmp_path, env)
    assert "--port" in out.stdout
    where = _run(
        [python, "-c", "import phronomy_fsm.testing.stub_llm as m; print(m.__file__)"],
        tmp_path,
        env,
    )
    assert where.stdout.strip().startswith(str(installed))


def test_the_console_ships_its_pages_and_asks_for_its_extra(
    installed: Path, tmp_path: Path
) -> None:
    """The wheel holds the console's templates and static files (package data); without
    the ``console`` extra, ``phronomy-fsm console`` says which extra to install."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    code = (
        "import json, pathlib, phronomy_fsm\n"
        "root = pathlib.Path(phronomy_fsm.__file__).parent / 'console'\n"
        "print(json.dumps(sorted(p.relative_to(root).as_posix() for p in root.rglob('*.*')"
        " if p.suffix in ('.html', '.css', '.js'))))\n"
    )
    files = json.loads(_run([str(installed / "bin" / "python"), "-c", code], tmp_path, env).stdout)
    assert {"templates/execution.html", "static/console.css", "static/console.js"} <= set(files)
    result = subprocess.run(
        [str(installed / "bin" / "phronomy-fsm"), "console", "--db", str(tmp_path / "x.db")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 1
    assert "pip install 'phronomy-fsm[console]'" in result.stderr
