"""Bad, hostile and huge specs end with exit code 1 and located diagnostics, never a
traceback (issue 2 "Bad input"), through ``phronomy-fsm validate`` (CliRunner) and,
where a spec gets that far, ``generate`` and ``diagram``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from phronomy_fsm.cli import main
from tests.spec_samples import DOOR, door

DIAGNOSTIC = re.compile(r"^spec\.yaml:(\d+):(\d+): ([A-Z][A-Z0-9_]+) (.+)$")


def _run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: str | bytes, *args: str
) -> Result:
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "spec.yaml"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, "utf-8")
    return CliRunner().invoke(main, list(args or ["validate", "spec.yaml"]))


def _codes(result: Result) -> list[str]:
    """Codes of the diagnostics; fails if a stderr line is neither a diagnostic nor the
    summary, or if a diagnostic is not located (line 0 is only for unreadable files)."""
    codes = []
    for line in result.stderr.splitlines():
        if line.startswith(("spec.yaml: invalid", "error: ")):
            continue
        match = DIAGNOSTIC.match(line)
        assert match, f"not a located diagnostic: {line!r}"
        assert int(match.group(1)) >= 1 and int(match.group(2)) >= 1, line
        codes.append(match.group(3))
    return codes


def _assert_rejected(result: Result, *expected: str) -> list[str]:
    assert result.exit_code == 1, (result.exit_code, result.output, result.stderr)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.stderr + result.output
    codes = _codes(result)
    for code in expected:
        assert code in codes, (code, result.stderr)
    return codes


BAD_DOCUMENTS = {
    "invalid_yaml": ("states: {a: [1, 2}\n", ["YAML_SYNTAX"]),
    "tab_indentation": ("machine: x\nstates:\n\ta: 1\n", ["YAML_SYNTAX"]),
    "empty_file": ("", ["EMPTY_SPEC"]),
    "only_whitespace": ("\n\n   \n", ["EMPTY_SPEC"]),
    "explicit_null_document": ("~\n", ["WRONG_TYPE"]),
    "two_documents": (DOOR + "---\n" + DOOR, ["YAML_SYNTAX"]),
    "binary_garbage": (bytes(range(256)) * 4, ["NOT_UTF8"]),
    "png_header": (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", ["NOT_UTF8"]),
    "nul_byte": ("machine: a\x00b\n", ["NOT_UTF8"]),
    "control_character": ("machine: a\x07b\n", ["YAML_SYNTAX"]),
    "list_document": ("- a\n- b\n", ["WRONG_TYPE"]),
    "scalar_document": ("just a string\n", ["WRONG_TYPE"]),
    "list_where_mapping": (door({10: "  closed: [external, initial]"}), ["WRONG_TYPE"]),
    "states_as_list": (
        "spec_format: 1\nmachine: m\nversion: 1\nevents: {}\nstates: [a, b]\ntransitions: []\n",
        ["WRONG_TYPE"],
    ),
    "transitions_as_mapping": (
        door({13: "transitions: {a: 1}", 14: "", 15: "", 16: ""}),
        ["WRONG_TYPE"],
    ),
    "version_is_text": (door({3: "version: one"}), ["WRONG_TYPE"]),
    "version_is_float": (door({3: "version: 1.5"}), ["WRONG_TYPE"]),
    "version_is_bool": (door({3: "version: true"}), ["WRONG_TYPE"]),
    "kind_is_number": (door({11: "  opened: {kind: 5, description: Open.}"}), ["WRONG_TYPE"]),
    "initial_is_yes": (
        door({10: "  closed: {kind: external, initial: yes, description: Closed.}"}),
        ["WRONG_TYPE"],
    ),
    "entry_is_mapping": (
        door({11: "  opened: {kind: external, entry: {a: 1}, description: Open.}"}),
        ["WRONG_TYPE"],
    ),
    "timeout_seconds_text": (
        door(
            {
                11: "  opened: {kind: external, description: Open., timeout: {seconds: ten, event: close}}"
            }
        ),
        ["WRONG_TYPE"],
    ),
    "timeout_seconds_infinite": (
        door(
            {
                11: "  opened: {kind: external, description: Open., timeout: {seconds: .inf, event: close}}"
            }
        ),
        ["TIMEOUT_INVALID"],
    ),
    "from_is_number": (
        door({14: "  - {from: 3, event: open, to: opened, description: Open.}"}),
        ["WRONG_TYPE"],
    ),
    "from_is_empty_list": (
        door({14: "  - {from: [], event: open, to: opened, description: Open.}"}),
        ["MISSING_KEY"],
    ),
    "to_is_list": (
        door({14: "  - {from: closed, event: open, to: [opened], description: Open.}"}),
        ["WRONG_TYPE"],
    ),
    "guard_is_number": (
        door({14: "  - {from: closed, event: open, guard: 7, to: opened, description: Open.}"}),
        ["WRONG_TYPE"],
    ),
    "boolean_state_name": (
        door({11: "  true: {kind: external, description: Open.}"}),
        ["WRONG_TYPE"],
    ),
    "integer_event_name": (door({7: "  42: {description: Close it.}"}), ["WRONG_TYPE"]),
    "mapping_key_is_a_list": (
        door({7: "  ? [a, b]\n  : {description: Close it.}"}),
        ["WRONG_TYPE"],
    ),
    "unknown_top_level_key": (door(append="colour: blue\n"), ["UNKNOWN_KEY"]),
    "unknown_state_key": (
        door({11: "  opened: {kind: external, on_enter: x, description: Open.}"}),
        ["UNKNOWN_KEY"],
    ),
    "unknown_transition_key": (
        door({14: "  - {from: closed, event: open, to: opened, when: x, description: Open.}"}),
        ["UNKNOWN_KEY"],
    ),
    "unknown_barrier_key": (
        door(
            {
                11: "  opened: {kind: external, description: Open., barrier: {name: b, committed: close, oops: 1}}"
            }
        ),
        ["UNKNOWN_KEY"],
    ),
    "missing_machine": (door({2: "# no machine"}), ["MISSING_KEY"]),
    "missing_states": (
        "spec_format: 1\nmachine: m\nversion: 1\nevents: {}\ntransitions: []\n",
        ["MISSING_KEY"],
    ),
    "missing_offload_fields": (
        door({11: "  opened: {kind: external, description: Open., offload: {hook: h}}"}),
        ["MISSING_KEY"],
    ),
    "name_with_quotes": (
        door({11: "  'it''s \"open\"': {kind: external, description: Open.}"}),
        ["INVALID_NAME"],
    ),
    "name_with_backslash": (
        door({11: '  "a\\\\b": {kind: external, description: Open.}'}),
        ["INVALID_NAME"],
    ),
    "name_with_colon": (
        door({11: '  "a:b": {kind: external, description: Open.}'}),
        ["INVALID_NAME"],
    ),
    "name_with_space": (
        door({11: '  "a b": {kind: external, description: Open.}'}),
        ["INVALID_NAME"],
    ),
    "name_with_unicode": (
        door({11: "  ouvért: {kind: external, description: Open.}"}),
        ["INVALID_NAME"],
    ),
    "name_with_newline": (
        door({11: '  "a\\nb": {kind: external, description: Open.}'}),
        ["INVALID_NAME"],
    ),
    "name_is_keyword": (
        door({11: "  return: {kind: external, description: Open.}"}),
        ["RESERVED_NAME"],
    ),
    "name_is_soft_keyword": (
        door({11: "  match: {kind: external, description: Open.}"}),
        ["RESERVED_NAME"],
    ),
    "name_starts_with_underscore": (
        door({11: "  _opened: {kind: external, description: Open.}"}),
        ["RESERVED_NAME"],
    ),
    "guard_named_self": (
        door({14: "  - {from: closed, event: open, guard: self, to: opened, description: Open.}"}),
        ["RESERVED_NAME"],
    ),
    "action_named_payload": (
        door(
            {
                14: "  - {from: closed, event: open, actions: [payload], to: opened, description: Open.}"
            }
        ),
        ["RESERVED_NAME"],
    ),
    "machine_named_table": (door({2: "machine: table"}), ["RESERVED_NAME"]),
    "machine_is_keyword": (door({2: "machine: import"}), ["RESERVED_NAME"]),
    "guard_with_injection": (
        door(
            {
                14: "  - {from: closed, event: open, guard: \"__import__('os').system('x')\", to: opened, description: Open.}"
            }
        ),
        ["INVALID_NAME"],
    ),
    "payload_type_with_code": (
        door({6: '  open: {description: Open it., payload: "int); import os; ("}'}),
        ["INVALID_NAME"],
    ),
    "duplicate_state": (
        door(insert={12: "  opened: {kind: external, description: Again.}"}),
        ["DUPLICATE_KEY"],
    ),
    "duplicate_top_level_key": (door(append="version: 2\n"), ["DUPLICATE_KEY"]),
    "collision_after_normalisation": (
        door({11: "  CLOSED: {kind: external, description: Open.}"}),
        ["NAME_COLLISION"],
    ),
    "event_collision": (door(insert={9: "  OPEN: {description: Shouted.}"}), ["NAME_COLLISION"]),
    "unknown_target": (
        door({14: "  - {from: closed, event: open, to: nowhere, description: Open.}"}),
        ["UNKNOWN_STATE"],
    ),
    "unknown_source": (
        door({14: "  - {from: [closed, attic], event: open, to: opened, description: Open.}"}),
        ["UNKNOWN_STATE"],
    ),
    "unknown_event": (
        door({14: "  - {from: closed, event: kick, to: opened, description: Open.}"}),
        ["UNKNOWN_EVENT"],
    ),
    "shadowed": (
        door(append="  - {from: closed, event: open, to: locked, description: Never.}\n"),
        ["SHADOWED_TRANSITION"],
    ),
    "shadowed_by_guard_and_negation": (
        door(
            {14: "  - {from: closed, event: open, guard: strong, to: opened, description: Open.}"},
            append=(
                "  - {from: closed, event: open, guard: not strong, to: opened, description: Gently.}\n"
                "  - {from: closed, event: open, guard: lucky, to: locked, description: Never.}\n"
            ),
        ),
        ["SHADOWED_TRANSITION"],
    ),
    "unreachable": (
        door(insert={13: "  attic: {kind: final, description: Nobody.}"}),
        ["UNREACHABLE_STATE"],
    ),
    "trap": (
        door(
            insert={13: "  stuck: {kind: external, description: Jammed.}"},
            append="  - {from: opened, event: lock, to: stuck, description: Jam.}\n",
        ),
        ["TRAP_STATE"],
    ),
    "auto_cycle": (
        door(
            {
                10: "  closed: {kind: auto, initial: true, description: Closed.}",
                11: "  opened: {kind: auto, description: Open.}",
                14: "  - {from: closed, event: state_completed, to: opened, description: Open.}",
                15: "  - {from: opened, event: state_completed, to: closed, description: Close.}",
                16: "  - {from: closed, event: lock, to: locked, description: Lock.}",
            }
        ),
        ["AUTO_CYCLE"],
    ),
    "merge_key": ("base: &b {kind: final}\nstates:\n  s: {<<: *b}\n", ["YAML_UNSUPPORTED"]),
    "python_tag": ("machine: !!python/object:os.system x\n", ["YAML_UNSUPPORTED"]),
    "custom_tag": ("machine: !shout door\n", ["YAML_UNSUPPORTED"]),
    "deep_nesting": ("a: " + "[" * 40 + "]" * 40 + "\n", ["YAML_UNSUPPORTED"]),
    "very_deep_nesting": ("a: " + "[" * 5000 + "]" * 5000 + "\n", ["YAML_SYNTAX"]),
    "recursive_alias": ("a: &x [*x]\n", ["YAML_UNSUPPORTED"]),
    "spec_format_text": (door({1: "spec_format: one"}), ["WRONG_TYPE"]),
}


@pytest.mark.parametrize("name", sorted(BAD_DOCUMENTS))
def test_bad_document_is_rejected_with_located_diagnostics(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    content, expected = BAD_DOCUMENTS[name]
    _assert_rejected(_run(tmp_path, monkeypatch, content), *expected)


@pytest.mark.parametrize("name", ["invalid_yaml", "binary_garbage", "shadowed", "name_with_quotes"])
def test_bad_document_through_generate_and_diagram(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    content, expected = BAD_DOCUMENTS[name]
    generated = _run(tmp_path, monkeypatch, content, "generate", "spec.yaml", "--out", "out")
    _assert_rejected(generated, *expected)
    assert not (tmp_path / "out").exists()  # nothing is written for an invalid spec
    for fmt in ("dot", "mermaid", "svg"):
        drawn = CliRunner().invoke(
            main, ["diagram", "spec.yaml", "--format", fmt, "-o", f"d.{fmt}"]
        )
        _assert_rejected(drawn, *expected)
        assert not (tmp_path / f"d.{fmt}").exists()


def test_billion_laughs_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lines = ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for level in range(1, 9):
        refs = ", ".join([f"*l{level - 1}"] * 9)
        lines.append(f"l{level}: &l{level} [{refs}]")
    result = _run(tmp_path, monkeypatch, "\n".join(lines) + "\n")
    codes = _assert_rejected(result, "YAML_UNSUPPORTED")
    assert "more than 2000000 nodes" in result.stderr
    assert len(codes) == 1


def test_ten_megabyte_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    big = DOOR + ("# padding padding padding padding padding padding padding padding\n" * 160_000)
    assert len(big.encode()) > 10_000_000
    result = _run(tmp_path, monkeypatch, big)
    codes = _assert_rejected(result, "SPEC_TOO_LARGE")
    assert codes == ["SPEC_TOO_LARGE"]
    assert "spec.yaml:1:1: SPEC_TOO_LARGE the file has" in result.stderr
    # with the limit raised the same file is read in full, and it is a valid spec
    raised = CliRunner().invoke(main, ["validate", "spec.yaml", "--max-bytes", "20000000"])
    assert raised.exit_code == 0, raised.stderr


def test_ten_megabyte_garbage_with_raised_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    junk = 'key: "' + "x" * 10_500_000 + "\n"  # ~10.5 MB, an unterminated quoted scalar
    result = _run(tmp_path, monkeypatch, junk, "validate", "spec.yaml", "--max-bytes", "20000000")
    _assert_rejected(result, "YAML_SYNTAX")


def test_every_issue_is_reported_not_only_the_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = door(
        {
            11: "  opened: {kind: external, descripton: Open.}",
            14: "  - {from: closed, event: open, to: opened, when: x, description: Open.}",
        },
        append="colour: blue\n",
    )
    result = _run(tmp_path, monkeypatch, text)
    codes = _assert_rejected(result)
    assert codes.count("UNKNOWN_KEY") == 3


def test_json_format_for_bad_input(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    result = _run(
        tmp_path, monkeypatch, b"\xff\xfe garbage", "validate", "spec.yaml", "--format", "json"
    )
    assert result.exit_code == 1
    document = json.loads(result.stdout)
    assert document["ok"] is False
    [file] = document["files"]
    assert file["machine"] is None
    assert file["issues"][0]["code"] == "NOT_UTF8"
    assert (file["issues"][0]["line"], file["issues"][0]["column"]) == (1, 1)
