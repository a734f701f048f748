"""The spec commands of ``phronomy-fsm`` end to end through click's CliRunner:
``--help`` everywhere, exit codes 0/1/2, diagnostics on stderr, JSON on stdout, and the
``[tool.phronomy_fsm]`` project table (ARCHITECTURE.md "CLI"; issue 2 item 9)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from phronomy_fsm.cli import main
from phronomy_fsm.errors import ProjectConfigError
from phronomy_fsm.project import find_pyproject, load_project_config
from tests.spec_samples import REAL_SPECS, REPO, door

RUNNER = CliRunner()


@pytest.mark.parametrize("command", [[], ["validate"], ["generate"], ["diagram"]])
def test_help_everywhere(command: list[str]) -> None:
    for flag in ("--help", "-h"):
        result = RUNNER.invoke(main, [*command, flag])
        assert result.exit_code == 0
        assert result.stdout.startswith("Usage: ")
    if command == ["validate"]:
        assert (
            "--format [text|json]" in result.stdout
            and "--strict" in result.stdout
            and "--max-bytes" in result.stdout
        )
    if command == ["generate"]:
        assert "--out DIRECTORY" in result.stdout and "--check" in result.stdout
    if command == ["diagram"]:
        assert "--format [dot|svg|png|mermaid]" in result.stdout and "--all" in result.stdout


def test_usage_errors_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for args in (
        ["validate"],
        ["validate", "x.yaml", "--format", "xml"],
        ["validate", "x", "--max-bytes", "0"],
        ["nope"],
    ):
        assert RUNNER.invoke(main, args).exit_code == 2, args
    no_project = RUNNER.invoke(main, ["generate"])
    assert no_project.exit_code == 2
    assert "no pyproject.toml found" in no_project.stderr


def test_generate_without_out_writes_beside_the_spec(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 23 item 4: named specs, no --out, no project table -> each module beside
    its spec, and stderr says so and what to pass instead."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "door.yaml").write_text(door())
    result = RUNNER.invoke(main, ["generate", "specs/door.yaml"])
    assert result.exit_code == 0, result.stderr
    written = sorted(p.name for p in (tmp_path / "specs").glob("*.py"))
    assert len(written) == 1 and written[0].endswith(".py")
    assert f"specs/{written[0]}: written" in result.stdout
    assert "writing each module beside its spec (pass --out DIR" in result.stderr
    check = RUNNER.invoke(main, ["generate", "specs/door.yaml", "--check"])
    assert check.exit_code == 0, check.stderr


def test_generate_without_out_uses_the_project_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Named specs, no --out, a [tool.phronomy_fsm] table with 'out': modules go there."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text('[tool.phronomy_fsm]\nout = "gen"\n')
    (tmp_path / "door.yaml").write_text(door())
    result = RUNNER.invoke(main, ["generate", "door.yaml"])
    assert result.exit_code == 0, result.stderr
    assert [p.parent.name for p in tmp_path.rglob("*.py")] == ["gen"]
    assert "beside its spec" not in result.stderr


def test_validate_real_specs_text_and_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    paths = [str(p.relative_to(REPO)) for p in REAL_SPECS]
    text = RUNNER.invoke(main, ["validate", *paths, "--strict"])
    assert text.exit_code == 0, text.stderr
    assert text.stderr == ""
    assert "fsm_specs/agent_session.yaml: valid (agent_session: 21 states" in text.stdout
    assert "fsm_specs/tool_call.yaml: valid (tool_call: 3 states" in text.stdout
    result = RUNNER.invoke(main, ["validate", *paths, "--format", "json"])
    assert result.exit_code == 0
    document = json.loads(result.stdout)
    assert document["ok"] is True and document["strict"] is False
    assert [f["file"] for f in document["files"]] == paths
    assert all(f["ok"] and f["errors"] == 0 and f["issues"] == [] for f in document["files"])
    assert sum(f["transitions"] for f in document["files"]) == 48 + 2  # agent_session, tool_call


def test_validate_mixed_files_reports_each(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "good.yaml").write_text(door())
    (tmp_path / "warn.yaml").write_text(door({11: "  opened: {kind: external}"}))
    (tmp_path / "bad.yaml").write_text(
        door({10: "  closed: {kind: external, description: Closed.}"})
    )
    result = RUNNER.invoke(
        main, ["validate", "good.yaml", "warn.yaml", "bad.yaml", "--format", "json"]
    )
    assert result.exit_code == 1
    files = {f["file"]: f for f in json.loads(result.stdout)["files"]}
    assert files["good.yaml"]["ok"] and files["warn.yaml"]["ok"] and not files["bad.yaml"]["ok"]
    assert files["warn.yaml"]["warnings"] == 1
    assert files["bad.yaml"]["issues"][0] == {
        "code": "NO_INITIAL_STATE",
        "severity": "error",
        "message": "no state is marked 'initial: true'; mark exactly one",
        "path": "$.states",
        "file": "bad.yaml",
        "line": 1,
        "column": 1,
    }
    strict = RUNNER.invoke(main, ["validate", "good.yaml", "warn.yaml", "--strict"])
    assert strict.exit_code == 1
    assert (
        "warn.yaml:11:3: MISSING_DESCRIPTION warning: state 'opened' has no description"
        in strict.stderr
    )
    assert "warn.yaml: invalid (0 error(s), 1 warning(s))" in strict.stderr
    small = RUNNER.invoke(main, ["validate", "good.yaml", "--max-bytes", "100"])
    assert small.exit_code == 1 and "good.yaml:1:1: SPEC_TOO_LARGE" in small.stderr


def test_generate_with_explicit_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "door.yaml").write_text(door())
    result = RUNNER.invoke(main, ["generate", "door.yaml", "--out", "pkg/fsm"])
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "pkg/fsm/door.py: written\n"
    again = RUNNER.invoke(main, ["generate", "door.yaml", "--out", "pkg/fsm"])
    assert again.stdout == "pkg/fsm/door.py: unchanged\n"
    assert (
        RUNNER.invoke(main, ["generate", "door.yaml", "--out", "pkg/fsm", "--check"]).exit_code == 0
    )


def test_diagnostic_lines_escape_control_characters(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    name = "bad\nname.yaml"
    (tmp_path / name).write_text("states: [\n")
    result = RUNNER.invoke(main, ["validate", name])
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert lines[0].startswith("bad\\nname.yaml:2:1: YAML_SYNTAX ")
    assert len(lines) == 2  # the diagnostic and the summary, each on one line


# ------------------------------------------------------------- project table


def _pyproject(folder: Path, body: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "pyproject.toml"
    path.write_text(body)
    return path


def test_nearest_pyproject_wins(tmp_path: Path) -> None:
    outer = _pyproject(tmp_path, '[tool.phronomy_fsm]\nspecs = ["a/*.yaml"]\n')
    inner = _pyproject(tmp_path / "sub", '[project]\nname = "x"\n')
    (tmp_path / "sub" / "deeper").mkdir()
    assert find_pyproject(tmp_path / "sub" / "deeper") == inner
    assert find_pyproject(tmp_path) == outer
    with pytest.raises(ProjectConfigError) as caught:
        load_project_config(tmp_path / "sub")
    assert caught.value.missing is True and "no [tool.phronomy_fsm] table" in str(caught.value)


def test_config_values(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _pyproject(
        tmp_path, '[tool.phronomy_fsm]\nspecs = ["specs/*.yaml", "more/x.yaml"]\nout = "gen"\n'
    )
    for name in ("specs/b.yaml", "specs/a.yaml", "more/x.yaml"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(door())
    monkeypatch.chdir(tmp_path / "specs")
    config = load_project_config()
    assert config.root == tmp_path.resolve() and config.out == tmp_path.resolve() / "gen"
    assert config.diagrams is None
    assert [p.name for p in config.spec_paths()] == [
        "x.yaml",
        "a.yaml",
        "b.yaml",
    ]  # sorted by full path
    with pytest.raises(ProjectConfigError, match="no 'diagrams' key") as caught:
        config.require("diagrams")
    assert caught.value.missing is True


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("[tool.phronomy_fsm\n", "invalid TOML"),
        ('[tool.phronomy_fsm]\nspecs = ["*.yaml"]\nouts = "x"\n', "unknown key 'outs'"),
        ("[tool.phronomy_fsm]\nspecs = 3\n", "specs must be a list of glob strings"),
        ('[tool.phronomy_fsm]\nspecs = ["*.yaml"]\nout = 1\n', "out must be a folder path string"),
        ('[tool.phronomy_fsm]\nspecs = ["nothing/*.yaml"]\nout = "gen"\n', "matches no file"),
        ('[tool.phronomy_fsm]\nspecs = ["/abs/*.yaml"]\nout = "gen"\n', "must be relative"),
        ('[tool.phronomy_fsm]\nspecs = []\nout = "gen"\n', "specs is empty"),
    ],
)
def test_malformed_tables_exit_1_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str, message: str
) -> None:
    _pyproject(tmp_path, body)
    monkeypatch.chdir(tmp_path)
    for args in (["generate"], ["generate", "--check"], ["diagram", "--all", "--check"]):
        result = RUNNER.invoke(main, args)
        assert result.exit_code == 1, (args, result.output, result.stderr)
        assert result.stderr.startswith("error: ") and message in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1


def test_this_repository_is_configured() -> None:
    config = load_project_config(REPO)
    assert config.spec_paths() and config.out is not None and config.diagrams is not None
    assert {p.name for p in config.spec_paths()} == {p.name for p in REAL_SPECS}


def test_many_warnings_of_one_code_are_counted_after_the_first_three(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    spec = "\n".join(
        [
            "machine: bare",
            "version: 1",
            "states:",
            "  s0: {kind: external, initial: true}",
            *(f"  s{i}: {{kind: external}}" for i in range(1, 7)),
            "  done: {kind: final}",
            "events:",
            "  go: {}",
            "transitions:",
            *(f"  - {{from: s{i}, event: go, to: s{i + 1}}}" for i in range(6)),
            "  - {from: s6, event: go, to: done}",
        ]
    )
    (tmp_path / "bare.yaml").write_text(spec + "\n")
    text = RUNNER.invoke(main, ["validate", "bare.yaml"])
    warnings = [line for line in text.stderr.splitlines() if "MISSING_DESCRIPTION" in line]
    assert len(warnings) == 4, text.stderr
    assert warnings[-1] == (
        "bare.yaml: MISSING_DESCRIPTION warning: 12 more like these "
        "(validate --format json lists every one)"
    )
    listed = json.loads(RUNNER.invoke(main, ["validate", "bare.yaml", "--format", "json"]).stdout)
    (only,) = listed["files"]
    assert only["warnings"] == 15 and len(only["issues"]) == 15
