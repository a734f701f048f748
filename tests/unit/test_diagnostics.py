"""Diagnostics that lead to the cause (docs/spec-format.md "Validation codes"): root
causes first, no cascades, the nearest declared name suggested, and semantic checks on
the well-formed parts of a document that has shape errors."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from phronomy_fsm.cli import main
from phronomy_fsm.spec.issues import ROOT_CAUSE_CODES
from phronomy_fsm.spec.validate import check_spec_file
from tests.spec_samples import door, write

#: A review pipeline: eleven states in a chain behind committing_review.
CHAIN = "\n".join(
    [
        "spec_format: 1",
        "machine: review",
        "version: 1",
        "events:",
        "  next: {description: Next.}",
        "states:",
        "  drafting: {kind: external, initial: true, description: Drafting.}",
        "  committing_review: {kind: external, description: Committing the review.}",
        *(f"  step_{i}: {{kind: external, description: Step {i}.}}" for i in range(8)),
        "  published: {kind: final, description: Published.}",
        "transitions:",
        "  - {from: drafting, event: next, to: TARGET, description: Submit.}",
        "  - {from: committing_review, event: next, to: step_0, description: Reviewed.}",
        *(
            f"  - {{from: step_{i}, event: next, to: step_{i + 1}, description: Onwards.}}"
            for i in range(7)
        ),
        "  - {from: step_7, event: next, to: published, description: Publish.}",
        "",
    ]
)


def _check(tmp_path: Path, text: str) -> list[tuple[str, str, str]]:
    result = check_spec_file(write(tmp_path, text))
    return [(i.code, i.path, i.message) for i in result.issues]


def test_one_typo_gives_one_issue_with_the_nearest_name(tmp_path: Path) -> None:
    assert _check(tmp_path, CHAIN.replace("TARGET", "committing_review")) == []
    issues = _check(tmp_path, CHAIN.replace("TARGET", "commiting_review"))
    assert [(code, path) for code, path, _ in issues] == [("UNKNOWN_STATE", "$.transitions[0].to")]
    assert "unknown state 'commiting_review'; did you mean 'committing_review'?" in issues[0][2]


def test_a_typo_without_a_close_name_suppresses_the_cascade(tmp_path: Path) -> None:
    issues = _check(tmp_path, CHAIN.replace("TARGET", "zzz"))
    assert [code for code, _, _ in issues] == ["UNKNOWN_STATE"]
    assert "declared states: " in issues[0][2]  # no suggestion: the list instead


def test_unknown_events_are_suggested_and_their_event_not_reported_unused(
    tmp_path: Path,
) -> None:
    issues = _check(
        tmp_path, door({14: "  - {from: closed, event: opne, to: opened, description: Open.}"})
    )
    assert [(code, path) for code, path, _ in issues] == [
        ("UNKNOWN_EVENT", "$.transitions[0].event")
    ]
    assert "did you mean 'open'?" in issues[0][2]


def test_a_bad_kind_does_not_hide_the_errors_elsewhere(tmp_path: Path) -> None:
    text = door(
        {
            11: "  opened: {kind: extrnal, description: Open.}",
            16: "  - {from: closed, event: lock, to: lokced, description: Lock the door.}",
        },
        append="  - {from: closed, event: open, guard: key, to: opened, description: Never.}\n",
    )
    issues = _check(tmp_path, text)
    codes = [(code, path) for code, path, _ in issues]
    assert ("BAD_VALUE", "$.states.opened.kind") in codes
    assert ("UNKNOWN_STATE", "$.transitions[2].to") in codes
    assert ("SHADOWED_TRANSITION", "$.transitions[3]") in codes
    # nothing that only follows from the unreadable kind
    assert not {c for c, _ in codes} & {"MISSING_KEY", "WORK_CONFLICT", "TRAP_STATE"}
    bad_value = next(m for c, _, m in issues if c == "BAD_VALUE")
    assert "did you mean 'external'?" in bad_value


def test_a_malformed_row_does_not_hide_the_others(tmp_path: Path) -> None:
    text = door(
        {14: "  - {from: closed, to: opened, description: No event.}"},
        append="  - {from: opened, event: close, guard: g, to: closed, description: Shadowed.}\n",
    )
    codes = [(code, path) for code, path, _ in _check(tmp_path, text)]
    assert ("MISSING_KEY", "$.transitions[0].event") in codes
    assert ("SHADOWED_TRANSITION", "$.transitions[3]") in codes
    # the missing row could have made `opened` reachable: not reported as unreachable
    assert "UNREACHABLE_STATE" not in {c for c, _ in codes}


def test_unknown_keys_suggest_the_nearest_key(tmp_path: Path) -> None:
    issues = _check(tmp_path, door({11: "  opened: {kind: external, descripton: Open.}"}))
    unknown = next(m for c, _, m in issues if c == "UNKNOWN_KEY")
    assert "did you mean 'description'?" in unknown


def test_a_comma_in_a_flow_mapping_gets_a_hint(tmp_path: Path) -> None:
    issues = _check(tmp_path, door({11: "  opened: {kind: external, description: Open, or ajar.}"}))
    unknown = next(m for c, _, m in issues if c == "UNKNOWN_KEY")
    assert "quote the value" in unknown


def test_root_causes_come_first(tmp_path: Path) -> None:
    text = door(
        insert={13: "  attic: {kind: final, description: Nobody goes there.}"},
        append=(
            "  - {from: closed, event: open, guard: key, to: opened, description: Shadowed.}\n"
            "  - {from: opened, event: lock, to: atic, description: Typo at the end.}\n"
        ),
    )
    issues = check_spec_file(write(tmp_path, text)).issues
    codes = [i.code for i in issues]
    assert codes[0] == "UNKNOWN_STATE"  # written last, reported first
    first_other = next(n for n, i in enumerate(issues) if i.code not in ROOT_CAUSE_CODES)
    assert all(i.code not in ROOT_CAUSE_CODES for i in issues[first_other:])
    cli = CliRunner().invoke(main, ["validate", str(write(tmp_path, text))])
    assert cli.stderr.splitlines()[0].split(": ")[1].startswith("UNKNOWN_STATE")
