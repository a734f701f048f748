"""Every validation code has a failing example with its expected file:line:col.

Each case is a spec text that triggers ``code``; the test asserts that an issue with
that code is reported at the expected location (and path), both from the library
(``check_spec_file``) and through ``phronomy-fsm validate`` (exit code 1, the
``file:line:col: CODE`` line on stderr). ``test_every_code_has_a_case`` keeps the list
complete and ``test_every_code_is_documented`` keeps docs/spec-format.md in step with
:data:`phronomy_fsm.spec.issues.CODES` (issue 2 "Done when").
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from phronomy_fsm.cli import main
from phronomy_fsm.spec.issues import CODES, Severity
from phronomy_fsm.spec.validate import check_spec_file
from tests.spec_samples import DOOR, REPO, door

#: ``opened`` with an offload (its effect spliced in with ``%``)
OFFLOAD = (
    "  opened: {kind: external, description: Open., offload: {hook: ventilate, completed: close,"
    " failed: lock%s}}"
)

# (code, spec text or bytes, "line:col", document path of the issue)
CASES: list[tuple[str, str | bytes, str, str]] = [
    ("SPEC_TOO_LARGE", DOOR + "#" * (4 * 1024 * 1024), "1:1", "$"),
    ("NOT_UTF8", b"spec_format: 1\nmachine: \xff\xfe\n", "2:10", "$"),
    ("YAML_SYNTAX", door({7: "  close: {description: Close it."}), "8:7", "$"),
    ("YAML_UNSUPPORTED", door({4: "description: !!binary aGVsbG8="}), "4:14", "$.description"),
    ("EMPTY_SPEC", "# nothing but a comment\n", "1:1", "$"),
    ("DUPLICATE_KEY", door(insert={8: "  open: {description: Again.}"}), "8:3", "$.events.open"),
    (
        "WRONG_TYPE",
        door({5: "events: [open, close, lock]", 6: "", 7: "", 8: ""}),
        "5:1",
        "$.events",
    ),
    (
        "UNKNOWN_KEY",
        door({11: "  opened: {kind: external, descripton: Open.}"}),
        "11:28",
        "$.states.opened.descripton",
    ),
    (
        "MISSING_KEY",
        door({14: "  - {from: closed, to: opened, description: Open the door.}"}),
        "14:5",
        "$.transitions[0].event",
    ),
    (
        "BAD_VALUE",
        door({11: "  opened: {kind: manual, description: Open.}"}),
        "11:12",
        "$.states.opened.kind",
    ),
    ("UNSUPPORTED_FORMAT", door({1: "spec_format: 2"}), "1:1", "$.spec_format"),
    (
        "INVALID_NAME",
        door({11: '  "open door": {kind: external, description: Open.}'}),
        "11:3",
        "$.states.open door",
    ),
    (
        "RESERVED_NAME",
        door({11: "  class: {kind: external, description: Open.}"}),
        "11:3",
        "$.states.class",
    ),
    (
        "NAME_COLLISION",
        door({11: "  Closed: {kind: external, description: Open.}"}),
        "11:3",
        "$.states.Closed",
    ),
    (
        "NAME_CLASH",
        door(
            {
                14: "  - {from: closed, event: open, guard: unlocked, to: opened, actions: [unlocked], description: Open.}"
            }
        ),
        "14:33",
        "$.transitions[0].guard",
    ),
    (
        "UNKNOWN_STATE",
        door({14: "  - {from: closed, event: open, to: ajar, description: Open the door.}"}),
        "14:5",
        "$.transitions[0].to",
    ),
    (
        "UNKNOWN_EVENT",
        door({14: "  - {from: closed, event: push, to: opened, description: Open the door.}"}),
        "14:5",
        "$.transitions[0].event",
    ),
    (
        "NO_INITIAL_STATE",
        door({10: "  closed: {kind: external, description: Closed.}"}),
        "1:1",
        "$.states",
    ),
    (
        "MULTIPLE_INITIAL_STATES",
        door({11: "  opened: {kind: external, initial: true, description: Open.}"}),
        "11:3",
        "$.states.opened.initial",
    ),
    (
        "INITIAL_STATE_KIND",
        door({10: "  closed: {kind: wait, initial: true, description: Closed.}"}),
        "10:3",
        "$.states.closed.kind",
    ),
    (
        "FINAL_STATE_EXIT",
        door(append="  - {from: locked, event: open, to: opened, description: Break in.}\n"),
        "17:5",
        "$.transitions[3].from",
    ),
    (
        "UNREACHABLE_STATE",
        door(insert={13: "  attic: {kind: final, description: Nobody goes there.}"}),
        "13:3",
        "$.states.attic",
    ),
    (
        "TRAP_STATE",
        door(
            insert={13: "  stuck: {kind: external, description: Jammed.}"},
            append="  - {from: opened, event: lock, to: stuck, description: Jam it.}\n",
        ),
        "13:3",
        "$.states.stuck",
    ),
    (
        "NO_FINAL_STATE",
        door({12: "  locked: {kind: external, description: Locked.}"}),
        "1:1",
        "$.states",
    ),
    (
        "SHADOWED_TRANSITION",
        door(
            append="  - {from: closed, event: open, guard: key_present, to: opened, description: Never fires.}\n"
        ),
        "17:5",
        "$.transitions[3]",
    ),
    (
        "AUTO_NOT_EXHAUSTIVE",
        door(
            {
                10: "  closed: {kind: auto, initial: true, description: Closed.}",
                14: "  - {from: closed, event: state_completed, guard: wants_open, to: opened, description: Open.}",
                16: "  - {from: opened, event: lock, to: locked, description: Lock the door.}",
            }
        ),
        "10:3",
        "$.states.closed",
    ),
    (
        "AUTO_CYCLE",
        door(
            {
                10: "  closed: {kind: auto, initial: true, description: Closed.}",
                11: "  opened: {kind: auto, description: Open.}",
                14: "  - {from: closed, event: state_completed, to: opened, description: Open the door.}",
                15: "  - {from: opened, event: state_completed, guard: not tired, to: closed, description: Close.}",
                16: "  - {from: opened, event: state_completed, to: locked, description: Lock the door.}",
            }
        ),
        "10:3",
        "$.states.closed",
    ),
    (
        "STATE_COMPLETED_MISUSE",
        door(
            insert={9: "  state_completed: {description: Posted by the engine.}"},
            append="  - {from: opened, event: state_completed, to: locked, description: Cannot fire.}\n",
        ),
        "18:5",
        "$.transitions[3].event",
    ),
    (
        "WAIT_STATE_NO_EXIT",
        door(
            insert={13: "  parked: {kind: wait, description: Waits forever.}"},
            append="  - {from: opened, event: lock, to: parked, description: Park it.}\n",
        ),
        "13:3",
        "$.states.parked",
    ),
    (
        "WORK_CONFLICT",
        door(
            insert={
                12: "  sealing: {kind: auto, description: Sealing., offload: {hook: seal, completed: open, failed: close}}"
            },
            append=(
                "  - {from: opened, event: lock, to: sealing, description: Seal.}\n"
                "  - {from: sealing, event: state_completed, to: locked, description: Sealed.}\n"
            ),
        ),
        "12:3",
        "$.states.sealing",
    ),
    (
        "OFFLOAD_EVENT_UNHANDLED",
        door(
            {
                11: "  opened: {kind: external, description: Open., offload: {hook: ventilate, completed: close, failed: lock}}"
            }
        ),
        "11:48",
        "$.states.opened.offload.failed",
    ),
    (
        "BARRIER_OUTCOME_UNHANDLED",
        door(
            {
                11: "  opened: {kind: external, description: Open., barrier: {name: log_opening, committed: close,"
                " not_committed: lock}}"
            }
        ),
        "11:48",
        "$.states.opened.barrier",
    ),
    (
        "TIMEOUT_INVALID",
        door(
            {
                11: "  opened: {kind: external, description: Open., timeout: {seconds: 0, event: close}}"
            }
        ),
        "11:48",
        "$.states.opened.timeout.seconds",
    ),
    (
        "INTERNAL_TRANSITION_WORK",
        door(
            append="  - {from: opened, event: open, description: Already open., offload: {hook: creak, completed: close, failed: lock}}\n"
        ),
        "17:5",
        "$.transitions[3]",
    ),
    (
        "DUPLICATE_MIGRATION",
        door(
            {3: "version: 2"}, append="migrations:\n  - {from_version: 1}\n  - {from_version: 1}\n"
        ),
        "19:5",
        "$.migrations[1]",
    ),
    # limits (docs/spec-format.md, "Limits"): reported at the limit
    (
        "LIMIT_UNKNOWN_EFFECT",
        door(
            {11: OFFLOAD % ", effect: idempotent"},
            append="limits:\n  fans: {effects: [ventilat], concurrency: 1}\n",
        ),
        "18:3",
        "$.limits.fans.effects",
    ),
    (
        "LIMIT_PURE_EFFECT",
        door(
            {11: OFFLOAD % ", effect: pure"},
            append="limits:\n  fans: {effects: [ventilate], concurrency: 1}\n",
        ),
        "18:3",
        "$.limits.fans.effects",
    ),
    (
        "LIMIT_BAD_KEY",
        door(
            {11: OFFLOAD % ", effect: idempotent"},
            append="limits:\n  fans: {effects: [ventilate], key: agent_id, concurrency: 1}\n",
        ),
        "18:3",
        "$.limits.fans.key",
    ),
    (
        "LIMIT_BAD_NUMBER",
        door(
            {11: OFFLOAD % ", effect: idempotent"},
            append="limits:\n  fans: {effects: [ventilate], rate: 10 per day}\n",
        ),
        "18:3",
        "$.limits.fans.rate",
    ),
    (
        "LIMIT_BAD_NUMBER",
        door(
            {11: OFFLOAD % ", effect: idempotent"},
            append="limits:\n  fans: {effects: [ventilate], concurrency: 0}\n",
        ),
        "18:3",
        "$.limits.fans.concurrency",
    ),
    (
        "UNUSED_EVENT",
        door(insert={9: "  knock: {description: Nobody answers.}"}),
        "9:3",
        "$.events.knock",
    ),
    ("MISSING_DESCRIPTION", door({11: "  opened: {kind: external}"}), "11:3", "$.states.opened"),
    # compound states
    (
        "DUPLICATE_STATE",
        door(
            {
                11: "  opened: {description: Open., states: {closed: {kind: external, initial: true,"
                " description: Again.}}}"
            }
        ),
        "11:41",
        "$.states.opened.states.closed",
    ),
    # the name diagrams give the @final commit must not be a state's
    ("DUPLICATE_STATE", door(insert={4: "final_commit: locked"}), "4:1", "$.final_commit"),
    (
        "COMPOUND_NO_INITIAL",
        door(
            {
                11: "  opened: {description: Open., states: {ajar: {kind: external, description: Ajar.}}}"
            }
        ),
        "11:3",
        "$.states.opened",
    ),
    (
        "COMPOUND_STATE_WORK",
        door(
            {
                11: "  opened: {kind: external, description: Open., states: {ajar: {kind: external,"
                " initial: true, description: Ajar.}}}"
            }
        ),
        "11:3",
        "$.states.opened",
    ),
    # durability
    (
        "EFFECT_WITHOUT_BARRIER",
        door(
            {11: OFFLOAD % ""},
            append="  - {from: opened, event: lock, to: locked, description: Lock.}\n",
        ),
        "11:48",
        "$.states.opened.offload",
    ),
    (
        "WAIT_STATE_NO_SIGNAL",
        door(
            {11: OFFLOAD % ", effect: pure"},
            insert={13: "  parked: {kind: wait, description: Parked.}"},
            append=(
                "  - {from: opened, event: lock, to: parked, description: Park it.}\n"
                "  - {from: parked, event: close, to: closed, description: Never posted here.}\n"
            ),
        ),
        "13:3",
        "$.states.parked",
    ),
    (
        "STATE_NO_RECOVERY",
        door(
            {11: OFFLOAD % ", effect: pure"},
            insert={13: "  ajar: {kind: external, description: Ajar.}"},
            append=(
                "  - {from: opened, event: lock, to: ajar, description: Leave it ajar.}\n"
                "  - {from: ajar, event: close, to: closed, description: Never posted here.}\n"
            ),
        ),
        "13:3",
        "$.states.ajar",
    ),
    ("FAIL_CLOSED_STATE", door(insert={4: "fail_closed: locked"}), "4:1", "$.fail_closed"),
    (
        "EVENT_IN_BARRIER_STATE",
        door(
            {
                11: "  opened: {kind: external, description: Open., barrier: "
                "{name: seal, on_committed: closed, on_not_committed: locked}}",
            },
        ),
        "15:5",
        "$.transitions[1]",
    ),
    (
        "OUTCOME_NOT_EXHAUSTIVE",
        door(
            {
                11: OFFLOAD % ", effect: pure",
                15: "  - {from: opened, event: close, guard: sunny, to: closed, description: Close.}",
            },
            append="  - {from: opened, event: lock, to: locked, description: Lock.}\n",
        ),
        "11:48",
        "$.states.opened.offload",
    ),
]


def _spec_file(tmp_path: Path, text: str | bytes) -> Path:
    path = tmp_path / "spec.yaml"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, "utf-8")
    return path


def test_every_code_has_a_case() -> None:
    covered = {case[0] for case in CASES} | {"FILE_UNREADABLE"}
    assert covered == set(CODES)


def test_the_base_spec_is_clean(tmp_path: Path) -> None:
    result = check_spec_file(_spec_file(tmp_path, DOOR))
    assert result.ok and result.issues == ()


@pytest.mark.parametrize(("code", "text", "where", "path"), CASES, ids=[c[0] for c in CASES])
def test_code_is_reported_at_its_location(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    code: str,
    text: str | bytes,
    where: str,
    path: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    _spec_file(tmp_path, text)
    result = check_spec_file(Path("spec.yaml"))
    found = [(f"{i.loc.line}:{i.loc.column}", i.path) for i in result.issues if i.code == code]
    assert (where, path) in found, [i.render() for i in result.issues]
    issue = next(i for i in result.issues if i.code == code and i.path == path)
    assert issue.loc.file == "spec.yaml"
    assert issue.message  # says what is wrong and how to fix it
    if CODES[code][0] is Severity.ERROR:
        assert not result.ok
    else:
        assert result.ok  # a warning alone keeps the spec valid


@pytest.mark.parametrize(("code", "text", "where", "path"), CASES, ids=[c[0] for c in CASES])
def test_code_through_the_cli(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    code: str,
    text: str | bytes,
    where: str,
    path: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    _spec_file(tmp_path, text)
    strict = CODES[code][0] is Severity.WARNING
    args = ["validate", "spec.yaml"] + (["--strict"] if strict else [])
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert f"spec.yaml:{where}: {code} " in result.stderr
    assert "Traceback" not in result.output + result.stderr


def test_warnings_pass_without_strict(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    _spec_file(tmp_path, door(insert={9: "  knock: {description: Nobody answers.}"}))
    result = CliRunner().invoke(main, ["validate", "spec.yaml"])
    assert result.exit_code == 0
    assert "spec.yaml:9:3: UNUSED_EVENT warning: " in result.stderr


def test_file_unreadable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = check_spec_file(Path("missing.yaml"))
    assert [i.code for i in result.issues] == ["FILE_UNREADABLE"]
    assert result.issues[0].loc.file == "missing.yaml"
    (tmp_path / "folder.yaml").mkdir()
    cli = CliRunner().invoke(main, ["validate", "missing.yaml", "folder.yaml"])
    assert cli.exit_code == 1
    assert "missing.yaml:0:0: FILE_UNREADABLE cannot read the spec" in cli.stderr
    assert "folder.yaml:0:0: FILE_UNREADABLE" in cli.stderr


def test_every_code_is_documented() -> None:
    doc = (REPO / "docs" / "spec-format.md").read_text("utf-8")
    missing = [code for code in CODES if f"`{code}`" not in doc]
    assert missing == []


def test_documented_codes_exist() -> None:
    import re

    doc = (REPO / "docs" / "spec-format.md").read_text("utf-8")
    table = doc[doc.index("## Validation codes") :]
    listed = set(re.findall(r"^\| `([A-Z_0-9]+)` \|", table, flags=re.MULTILINE))
    assert listed == set(CODES)
