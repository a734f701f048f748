"""Diagrams: the IR, DOT and Mermaid renderers, ``dot`` rendering, committed diagrams
and their freshness check. The IR is built from the lowered table, so every expectation
here is stated against :func:`phronomy_fsm.codegen.lower` (compound states and their
rows, the main-path view and the execution overlay are in ``test_diagram_views.py``)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from xml.etree import ElementTree

import attrs
import pytest
from click.testing import CliRunner
from phronomy_fsm.codegen import lower

from phronomy_fsm.cli import main
from phronomy_fsm.diagram import (
    build_diagram,
    clean_text,
    dot_sha256,
    mermaid_id,
    mermaid_text,
    png_dot_sha256,
    render_dot,
    render_image,
    render_mermaid,
    render_png,
    render_svg,
    stamp_png,
    stamp_svg,
    svg_dot_sha256,
)
from phronomy_fsm.diagram_files import diagram_texts, write_diagrams
from phronomy_fsm.errors import RenderError
from phronomy_fsm.spec.loader import load_spec_text
from phronomy_fsm.spec.model import MachineSpec
from phronomy_fsm.spec.validate import check_spec_file
from tests.spec_samples import FIXTURE_SPECS, REAL_SPECS, REPO, door, yaml_quoted

needs_dot = pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz dot is not installed")
SVG = "{http://www.w3.org/2000/svg}"
XLINK = "{http://www.w3.org/1999/xlink}"


def _spec(path: Path) -> MachineSpec:
    result = check_spec_file(path)
    assert result.ok and result.spec is not None
    return result.spec


def _spec_text(text: str) -> MachineSpec:
    loaded = load_spec_text(text)
    assert loaded.spec is not None, [i.render() for i in loaded.issues]
    return loaded.spec


def _dot_json(dot: str) -> dict:
    out = subprocess.run(["dot", "-Tjson"], input=dot.encode(), capture_output=True, check=True)
    return json.loads(out.stdout)


# ---------------------------------------------------------------------- IR


@pytest.mark.parametrize(
    "path", REAL_SPECS + FIXTURE_SPECS, ids=[p.stem for p in REAL_SPECS + FIXTURE_SPECS]
)
def test_ir_has_every_state_and_one_edge_per_row_and_source(path: Path) -> None:
    spec = _spec(path)
    table = lower(spec)
    diagram = build_diagram(spec)
    assert diagram == attrs.evolve(build_diagram(table), description=spec.description)
    assert [n.name for n in diagram.nodes] == [s.name for s in table.states]
    assert [c.name for c in diagram.clusters] == [c.name for c in table.compounds]
    expected = [
        (t.index, s, t.target or s) for t in table.transitions for s in t.declared_on or t.sources
    ]
    assert [(e.index, e.source, e.target) for e in diagram.edges] == expected
    assert diagram.initial == table.initial


def test_ir_marks_and_labels() -> None:
    spec = _spec(REPO / "tests" / "fixtures" / "specs" / "agent_session_v1.yaml")
    nodes = {n.name: n for n in build_diagram(spec).nodes}
    assert nodes["recovery_required"].is_recovery and nodes["recovery_required"].is_wait
    assert nodes["suspended"].is_wait and not nodes["suspended"].is_recovery
    assert nodes["terminalizing"].is_barrier and nodes["terminalizing"].barrier == "terminal_commit"
    assert "offload: call_llm" in nodes["calling_llm"].details
    edges = build_diagram(spec).edges
    into_terminal = next(
        e for e in edges if e.source == "output_filtering" and e.guard == "output_blocked"
    )
    assert into_terminal.title == "output_filtered [output_blocked] / terminal_commit"
    assert into_terminal.label_lines() == (into_terminal.title, "do: mark_blocked")
    internal = next(e for e in edges if e.internal)
    assert (internal.source, internal.target, internal.event) == (
        "calling_llm",
        "calling_llm",
        "llm_stream_chunk",
    )
    assert internal.title == "internal: llm_stream_chunk"


# ---------------------------------------------------------------------- DOT


@needs_dot
@pytest.mark.parametrize(
    "path", REAL_SPECS + FIXTURE_SPECS, ids=[p.stem for p in REAL_SPECS + FIXTURE_SPECS]
)
def test_dot_has_every_state_and_every_edge(path: Path) -> None:
    table = lower(_spec(path))
    graph = _dot_json(render_dot(build_diagram(table)))
    ids = [o.get("id", "") for o in graph["objects"]]
    states = sorted(i.removeprefix("state:") for i in ids if i.startswith("state:"))
    assert states == sorted(s.name for s in table.states)
    clusters = sorted(i.removeprefix("compound:") for i in ids if i.startswith("compound:"))
    assert clusters == sorted(c.name for c in table.compounds)
    edges = [e for e in graph["edges"] if re.fullmatch(r"t\d+:\w+", e.get("id", ""))]
    expected = sorted(
        f"t{t.index}:{s}" for t in table.transitions for s in t.declared_on or t.sources
    )
    assert sorted(e["id"] for e in edges) == expected
    names = {o["_gvid"]: o["name"] for o in graph["objects"]}
    for edge in edges:
        index, source = edge["id"][1:].split(":")
        row = table.transitions[int(index)]
        if row.declared_on:  # drawn from the cluster, through one of its states
            assert names[edge["tail"]] in row.sources
        else:
            assert names[edge["tail"]] == source
        assert names[edge["head"]] == (row.target or source)
        assert edge["label"].startswith(("internal: " if row.target is None else "") + row.event)
    legend = [i for i in ids if i.startswith("legend:")]
    assert {"legend:auto", "legend:wait", "legend:barrier", "legend:recovery"} <= set(legend)


def test_dot_marks_kinds_barriers_waits_and_recovery() -> None:
    dot = render_dot(
        build_diagram(_spec(REPO / "tests" / "fixtures" / "specs" / "agent_session_v1.yaml"))
    )
    lines = {
        m.group(1): m.group(0) for m in re.finditer(r"^\t(\w+) \[label=.*$", dot, re.MULTILINE)
    }
    assert 'fillcolor="#dbeafe"' in lines["idle"]  # auto
    assert "dashed" in lines["suspended"] and "wait (halts durably)" in lines["suspended"]
    assert (
        "penwidth=2.5" in lines["terminalizing"]
        and "barrier: terminal_commit" in lines["terminalizing"]
    )
    assert (
        "FAIL-CLOSED" in lines["recovery_required"] and "penwidth=3" in lines["recovery_required"]
    )
    assert "peripheries=2" in lines["completed"]  # final
    assert "cluster_legend" in dot
    assert "cluster_legend" not in render_dot(build_diagram(_spec(REAL_SPECS[0])), legend=False)
    assert re.search(r"^\tcalling_llm -> calling_llm \[.*style=dashed", dot, re.MULTILINE)


def test_parallel_edges_and_self_loops_are_all_drawn() -> None:
    text = door(
        append=(
            "  - {from: opened, event: open, guard: windy, to: closed, description: Blown shut.}\n"
            "  - {from: opened, event: open, description: Already open.}\n"
            "  - {from: closed, event: close, to: closed, description: Slam it again.}\n"
        )
    )
    dot = render_dot(build_diagram(_spec_text(text)))
    assert len(re.findall(r"^\topened -> closed \[", dot, re.MULTILINE)) == 2  # parallel
    assert len(re.findall(r"^\topened -> opened \[", dot, re.MULTILINE)) == 1  # internal
    assert len(re.findall(r"^\tclosed -> closed \[", dot, re.MULTILINE)) == 1  # reflexive
    assert 'label="internal: open"' in dot
    mermaid = render_mermaid(build_diagram(_spec_text(text)))
    assert mermaid.count("s_opened --> s_closed : ") == 2
    assert "s_opened --> s_opened : internal#58; open" in mermaid
    assert "s_closed --> s_closed : close" in mermaid


def test_output_is_deterministic() -> None:
    first = diagram_texts(_spec(REAL_SPECS[0]))
    second = diagram_texts(_spec(REAL_SPECS[0]))
    assert first == second
    assert first[0].endswith("}\n") and first[1].endswith("\n")


def test_dot_escapes_hostile_text() -> None:
    nasty = 'say "hi" \\N \\l \\ <b>bold</b> & é \U0001f600 \u2028 line\nbreak \x01'
    spec = _spec_text(
        door({11: f"  opened: {{kind: external, description: {yaml_quoted(nasty)}}}"})
    )
    dot = render_dot(build_diagram(spec))
    line = next(x for x in dot.splitlines() if x.startswith("\topened ["))
    assert (
        'tooltip="say \\"hi\\" \u29f5N \u29f5l \u29f5 <b>bold</b> &amp; é \U0001f600 line break \ufffd"'
        in line
    )
    assert "\n" not in line and "\u2028" not in line


@needs_dot
def test_hostile_text_survives_dot(tmp_path: Path) -> None:
    nasty = 'say "hi" \\N \\G \\ <b>bold</b> & é \U0001f600 \u202e'
    spec = _spec_text(
        door({11: f"  opened: {{kind: external, description: {yaml_quoted(nasty)}}}"})
    )
    svg = render_image(render_dot(build_diagram(spec)), "svg")
    root = ElementTree.fromstring(svg)
    group = next(g for g in root.iter(f"{SVG}g") if g.get("id") == "state:opened")
    titles = [a.get(f"{XLINK}title") for a in group.iter(f"{SVG}a")]
    assert titles == [clean_text(nasty).replace("\\", "\u29f5")]


# ---------------------------------------------------------------------- Mermaid


@pytest.mark.parametrize(
    "path", REAL_SPECS + FIXTURE_SPECS, ids=[p.stem for p in REAL_SPECS + FIXTURE_SPECS]
)
def test_mermaid_has_every_state_and_every_edge(path: Path) -> None:
    spec = _spec(path)
    table = lower(spec)
    text = render_mermaid(build_diagram(spec))
    assert text.startswith("---\ntitle: ") and "\nstateDiagram-v2\n" in text
    declared = re.findall(r'^ +state "(\w+)" as (s_\w+)$', text, re.MULTILINE)
    assert sorted(name for name, _ in declared) == sorted(
        [s.name for s in table.states] + [c.name for c in table.compounds]
    )
    composites = re.findall(r"^ +state (s_\w+) \{$", text, re.MULTILINE)
    # the named @final commit (a frame around the final states) comes first
    framed = [mermaid_id(table.final_commit)] if table.final_commit else []
    assert composites == framed + [mermaid_id(c.name) for c in table.compounds]
    edges = re.findall(r"^    (s_\w+) --> (s_\w+) : (.+)$", text, re.MULTILINE)
    expected = [
        (mermaid_id(s), mermaid_id(t.target or s))
        for t in table.transitions
        for s in t.declared_on or t.sources
    ]
    assert [(a, b) for a, b, _ in edges] == expected
    assert len(re.findall(r"^    \[\*\] --> ", text, re.MULTILINE)) == 1
    assert len(re.findall(r"^ +\[\*\] --> ", text, re.MULTILINE)) == 1 + len(table.compounds)
    assert len(re.findall(r"^    s_\w+ --> \[\*\]$", text, re.MULTILINE)) == sum(
        s.kind == "final" for s in table.states
    )
    classes = dict(re.findall(r"^    class (s_\w+) (\w+)$", text, re.MULTILINE))
    if spec.state("recovery_required") is not None:
        assert classes["s_recovery_required"] == "recovery"


def test_mermaid_escaping() -> None:
    raw = 'a "b" #c; d: {e} <f> 100% x|y `z`\nnext'
    escaped = mermaid_text(raw)
    assert (
        escaped
        == "a #quot;b#quot; #35;c#59; d#58; #123;e#125; #lt;f#gt; 100#37; x#124;y #96;z#96; next"
    )
    assert not set('"<>{};:|`%#\n') & set(re.sub(r"#\w+;", "", escaped))
    assert mermaid_id("a b") == "x_612062" and mermaid_id("a_x20_b") == "s_a_x20_b"
    assert mermaid_id("end") == "s_end"


# ---------------------------------------------------------------------- images


@needs_dot
@pytest.mark.parametrize(
    "path", REAL_SPECS + FIXTURE_SPECS, ids=[p.stem for p in REAL_SPECS + FIXTURE_SPECS]
)
def test_dot_renders_svg_and_png(path: Path) -> None:
    table = lower(_spec(path))
    dot = render_dot(build_diagram(table))
    svg = render_svg(dot)
    assert svg_dot_sha256(svg) == dot_sha256(dot)
    root = ElementTree.fromstring(svg)
    groups = {g.get("id"): g.get("class") for g in root.iter(f"{SVG}g")}
    assert sum(1 for k, v in groups.items() if k and k.startswith("state:") and v == "node") == len(
        table.states
    )
    edges = sum(1 for k, v in groups.items() if k and re.fullmatch(r"t\d+:\w+", k) and v == "edge")
    assert edges == sum(len(t.declared_on or t.sources) for t in table.transitions)
    png = render_png(dot)
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 1000
    assert png_dot_sha256(png) == dot_sha256(dot)


def test_missing_dot_is_a_render_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no dot anywhere
    with pytest.raises(RenderError) as caught:
        render_image("digraph { a -> b }", "svg")
    assert caught.value.reason == "missing" and caught.value.format == "svg"
    assert "apt-get install graphviz" in str(caught.value)


@needs_dot
def test_failing_dot_is_a_render_error() -> None:
    with pytest.raises(RenderError) as caught:
        render_image("digraph { a -> }", "png")
    assert caught.value.reason == "failed"
    assert "syntax error" in str(caught.value)
    with pytest.raises(ValueError):
        render_image("digraph {}", "pdf")


def test_stamp_is_after_the_xml_declaration() -> None:
    svg = b'<?xml version="1.0" encoding="UTF-8"?>\n<svg/>\n'
    stamped = stamp_svg(svg, "digraph {}")
    assert stamped.startswith(
        b'<?xml version="1.0" encoding="UTF-8"?>\n<!-- phronomy-fsm rendered-from-dot sha256='
    )
    assert svg_dot_sha256(stamped) == dot_sha256("digraph {}")
    assert svg_dot_sha256(svg) is None
    assert stamp_svg(b"<svg/>", "x").startswith(b"<!-- phronomy-fsm")


def test_png_stamp_is_a_text_chunk_after_the_header() -> None:
    png = _fake_png("digraph {}")
    assert png_dot_sha256(png) == dot_sha256("digraph {}")
    length = int.from_bytes(png[33:37], "big")
    assert png[37:41] == b"tEXt" and length == 102  # right after IHDR: keyword, NUL, sha256
    assert png_dot_sha256(png[:33] + png[33 + 12 + length :]) is None  # chunk removed
    assert png_dot_sha256(b"GIF89a") is None
    with pytest.raises(ValueError):
        stamp_png(b"not a png", "x")


# ------------------------------------------------------- committed diagrams


def test_committed_diagrams_are_fresh() -> None:
    report = write_diagrams(REAL_SPECS, REPO / "docs" / "diagrams", check=True)
    assert report.ok
    assert [str(f.path.name) for f in report.stale] == []
    assert len(report.files) == 5 * len(REAL_SPECS)


def _fake_svg(dot: str) -> bytes:
    return stamp_svg(b'<?xml version="1.0"?>\n<svg xmlns="http://www.w3.org/2000/svg"/>\n', dot)


#: the smallest PNG: signature, a 1x1 grey IHDR, one IDAT, IEND
_TINY_PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010800000000"
    "3a7e9b550000000a49444154789c636000000002000148afa4710000000049454e44ae426082"
)


def _fake_png(dot: str) -> bytes:
    return stamp_png(_TINY_PNG, dot)


def test_freshness_check_catches_stale_diagrams(tmp_path: Path) -> None:
    spec_path = REAL_SPECS[0]
    out = tmp_path / "diagrams"
    written = write_diagrams([spec_path], out, render=_fake_svg, render_raster=_fake_png)
    assert sorted(f.reason for f in written.files) == ["missing"] * 5
    assert write_diagrams([spec_path], out, check=True).stale == ()
    machine = spec_path.stem
    dot_file, mmd_file, svg_file = (out / f"{machine}{s}" for s in (".dot", ".mmd", ".svg"))

    original = dot_file.read_text()
    dot_file.write_text(original.replace("Legend", "Legends"))
    stale = write_diagrams([spec_path], out, check=True).stale
    assert [(f.path, f.reason) for f in stale] == [(dot_file, "differs")]
    dot_file.write_text(original)

    svg_file.write_bytes(_fake_svg(original + "// edited\n"))
    assert [(f.path, f.reason) for f in write_diagrams([spec_path], out, check=True).stale] == [
        (svg_file, "rendered from other DOT")
    ]
    svg_file.write_bytes(b"<svg/>")
    assert [f.reason for f in write_diagrams([spec_path], out, check=True).stale] == ["not stamped"]
    mmd_file.unlink()
    assert {f.reason for f in write_diagrams([spec_path], out, check=True).stale} == {
        "missing",
        "not stamped",
    }
    png_file = out / f"{machine}.main.png"
    png_file.write_bytes(_fake_png("digraph { other }"))
    assert (png_file, "rendered from other DOT") in {
        (f.path, f.reason) for f in write_diagrams([spec_path], out, check=True).stale
    }
    # writing repairs everything, and re-renders only what is stale
    calls: list[str] = []
    write_diagrams(
        [spec_path],
        out,
        render=lambda d: calls.append(d) or _fake_svg(d),
        render_raster=lambda d: calls.append(d) or _fake_png(d),
    )
    assert len(calls) == 2
    assert write_diagrams([spec_path], out, check=True).stale == ()
    write_diagrams([spec_path], out, render=lambda d: calls.append(d) or _fake_svg(d))
    assert len(calls) == 2  # fresh images kept as they are


def test_check_needs_no_dot_and_write_fails_cleanly_without_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "diagrams"
    shutil.copytree(REPO / "docs" / "diagrams", out)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert write_diagrams(REAL_SPECS, out, check=True).stale == ()
    (out / f"{REAL_SPECS[0].stem}.svg").unlink()
    (out / f"{REAL_SPECS[0].stem}.dot").write_text("stale")
    with pytest.raises(RenderError):
        write_diagrams(REAL_SPECS, out)
    assert (out / f"{REAL_SPECS[0].stem}.dot").read_text() == "stale"  # nothing written


def test_invalid_spec_writes_no_diagram(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(door({12: "  locked: {kind: external, description: x}"}))
    report = write_diagrams([bad], tmp_path / "out", render=_fake_svg)
    assert not report.ok and report.files == ()
    assert not (tmp_path / "out").exists()


def test_duplicate_machines_are_refused(tmp_path: Path) -> None:
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text(door())
    b.write_text(door())
    report = write_diagrams([a, b], tmp_path / "out", render=_fake_svg)
    assert [i.code for i in report.issues] == ["NAME_COLLISION"]


# ------------------------------------------------------------------- CLI


@needs_dot
def test_cli_diagram_formats(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "door.yaml").write_text(door())
    runner = CliRunner()
    dot = runner.invoke(main, ["diagram", "door.yaml"])
    assert dot.exit_code == 0 and dot.stdout.startswith("// Generated by phronomy-fsm")
    mermaid = runner.invoke(main, ["diagram", "door.yaml", "--format", "mermaid"])
    assert mermaid.exit_code == 0 and "stateDiagram-v2" in mermaid.stdout
    svg = runner.invoke(main, ["diagram", "door.yaml", "-o", "door.svg"])
    assert svg.exit_code == 0 and svg_dot_sha256((tmp_path / "door.svg").read_bytes())
    png = runner.invoke(
        main, ["diagram", "door.yaml", "--format", "png"]
    )  # stdout is not a tty here
    assert png.exit_code == 0 and png.stdout_bytes.startswith(b"\x89PNG")
    no_legend = runner.invoke(main, ["diagram", "door.yaml", "--no-legend"])
    assert "cluster_legend" not in no_legend.stdout


def test_cli_diagram_usage_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "door.yaml").write_text(door())
    runner = CliRunner()
    for args in (
        ["diagram"],
        ["diagram", "door.yaml", "--check"],
        ["diagram", "door.yaml", "--all"],
        ["diagram", "door.yaml", "--format", "gif"],
    ):
        result = runner.invoke(main, args)
        assert result.exit_code == 2, (args, result.output)
    # an unknown -o suffix falls back to DOT, as --help says
    result = runner.invoke(main, ["diagram", "door.yaml", "-o", "door.txt"])
    assert result.exit_code == 0 and "digraph" in (tmp_path / "door.txt").read_text()


def test_cli_diagram_without_dot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "door.yaml").write_text(door())
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    result = CliRunner().invoke(main, ["diagram", "door.yaml", "--format", "svg", "-o", "door.svg"])
    assert result.exit_code == 1
    assert result.stderr.startswith(
        "error: cannot render svg: the Graphviz 'dot' program is not installed"
    )
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "door.svg").exists()
    # text formats need no binary
    assert CliRunner().invoke(main, ["diagram", "door.yaml", "--format", "mermaid"]).exit_code == 0


def test_cli_diagram_all_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project = tmp_path / "project"
    (project / "specs").mkdir(parents=True)
    (project / "specs" / "door.yaml").write_text(door())
    (project / "pyproject.toml").write_text(
        '[tool.phronomy_fsm]\nspecs = ["specs/*.yaml"]\nout = "gen"\ndiagrams = "docs/diagrams"\n'
    )
    (project / "sub").mkdir()
    monkeypatch.chdir(project / "sub")  # found by walking up
    runner = CliRunner()
    stale = runner.invoke(main, ["diagram", "--all", "--check"])
    assert stale.exit_code == 1
    assert "docs/diagrams/door.dot: stale (missing)" in stale.stderr
    monkeypatch.setattr("phronomy_fsm.diagram_files.render_svg", _fake_svg)
    monkeypatch.setattr("phronomy_fsm.diagram_files.render_png", _fake_png)
    written = runner.invoke(main, ["diagram", "--all"])
    assert written.exit_code == 0, written.stderr
    assert sorted(p.name for p in (project / "docs" / "diagrams").iterdir()) == [
        "door.dot",
        "door.main.dot",
        "door.main.png",
        "door.mmd",
        "door.svg",
    ]
    assert runner.invoke(main, ["diagram", "--all", "--check"]).exit_code == 0
    # the DOT records the spec's sha256, so any edit of the spec makes the diagrams stale
    (project / "specs" / "door.yaml").write_text(door({4: "description: Changed."}))
    again = runner.invoke(main, ["diagram", "--all", "--check"])
    assert again.exit_code == 1
    assert "docs/diagrams/door.dot: stale (differs)" in again.stderr
    assert "docs/diagrams/door.svg: stale (rendered from other DOT)" in again.stderr
    assert "docs/diagrams/door.mmd: up to date" in again.stdout
