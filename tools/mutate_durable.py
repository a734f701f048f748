"""A small mutation runner over the durable engine's checks (issue 22, "Done when").

Finds mutants in ``src/phronomy_fsm/durable/*.py`` and ``src/phronomy_fsm/store/refusals.py``
with the standard library's ``ast`` — no third-party mutation tool — applies one at a time
to the file, runs the tests against it with a wall-clock cap, restores the file (always:
on success, failure, timeout, Ctrl-C and SIGTERM) and records each verdict in a JSON file.

Operators (each a small, local change that a test of a check should notice):

- ``cmp``: flip one comparison — ``==``/``!=``, ``<``/``>=``, ``>``/``<=``,
  ``is``/``is not``, ``in``/``not in``;
- ``negate``: negate the condition of an ``if``, ``elif``, ``while`` or conditional
  expression;
- ``drop_and`` / ``drop_or``: drop one operand of an ``and``/``or``;
- ``raise_guard`` / ``return_guard``: replace the body of an ``if`` that ends in a
  ``raise`` or an early ``return`` with ``pass``;
- ``drop_call``: delete a call statement that writes, closes, notifies, releases,
  fences or announces (the verbs of :data:`EFFECTFUL_VERBS`; logging and crash-point
  hooks are left alone).

Cosmetic code is skipped: ``__repr__``/``__str__``, logging calls, docstrings,
``if TYPE_CHECKING``, assertions and ``__init__.py`` (exports only).

Verdicts: ``killed`` (the tests failed, the failing tests fail again when run once
more on the mutant, and they pass on the unmutated file), ``flaky_kill`` (the failing
tests passed when run again on the mutant: the failure was the machine's load, not the
mutant), ``clean_failure`` (they fail on clean code too), ``survived``, ``timeout`` (the
run went past its cap) and ``invalid`` (the mutant did not compile). The run has two
stages: every mutant runs the quick tests (``--tests``), and a mutant that survives them
runs the slower confirming tests (``--confirm-tests``: the checker without a defect and
the crash matrix) before it is called a survivor. ``recheck OUT`` applies the second
run to the kills of a results file written without it.

``--root DIR`` mutates another checkout (a copy of this worktree, say) and puts its
``src`` first on ``PYTHONPATH`` for the tests and their subprocesses, so a long run does
not leave this worktree's sources mutated under other work. Bytecode is never written
for a mutant (``PYTHONDONTWRITEBYTECODE``) and the file's times are restored with its
text, so no stale ``.pyc`` can stand in for either version.

Usage::

    python tools/mutate_durable.py list [--op OP] [--file engine.py]
    python tools/mutate_durable.py run --sample 70 --seed 22 --out /tmp/mutation.json
    python tools/mutate_durable.py run --ids ID [ID ...] --out /tmp/mutation.json
    python tools/mutate_durable.py show ID
    python tools/mutate_durable.py recheck /tmp/mutation.json
    python tools/mutate_durable.py summary /tmp/mutation.json
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import random
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Self

ROOT = Path(__file__).resolve().parents[1]
TARGETS = ("src/phronomy_fsm/durable/*.py", "src/phronomy_fsm/store/refusals.py")

#: The quick tests every mutant runs: ``tests/durable`` without its two slow crash
#: matrices (the confirming stage runs the SQLite one) and on SQLite only — the engine
#: code mutated here is the same on both backends, and the PostgreSQL runs double the
#: time.
QUICK_TESTS = (
    "-x -q -n 2 -p no:randomly -p no:cacheprovider tests/durable -m 'not slow' -k 'not postgres'"
)
#: What a mutant that survives the quick tests runs before it counts as a survivor: the
#: checker on its seeded machine without a defect (every kill, every invariant), the
#: cheap seeded-defect runs, and the crash matrix of the order machine on SQLite.
CONFIRM_TESTS = (
    "-x -q -n 2 -p no:randomly -p no:cacheprovider"
    " tests/checking/test_seeded_defects.py::test_without_a_defect_every_kill_keeps_every_invariant"
    " tests/checking/test_seeded_defects.py::test_a_worker_that_starts_effects_past_its_lease_runs_one_a_second_time"
    " tests/checking/test_seeded_defects.py::test_an_effect_that_ignores_its_idempotency_key_breaks_idempotent_keys"
    " tests/durable/test_crash_matrix_order.py::test_every_point_of_the_order_machine_is_killed_and_every_invariant_holds"
)

CMP_FLIP: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.Lt: ast.GtE,
    ast.GtE: ast.Lt,
    ast.Gt: ast.LtE,
    ast.LtE: ast.Gt,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
}
#: A call statement whose callee's last name contains one of these is a ``drop_call``
#: candidate: it writes, closes, notifies, releases, fences or announces something.
EFFECTFUL_VERBS = (
    "write", "close", "notify", "emit", "release", "cancel", "commit", "clear", "set",
    "halt", "stop", "drop", "mark", "announce", "record", "refresh", "check", "fence",
    "heartbeat", "retire", "park", "fail", "finish", "settle", "wake", "post", "put",
    "send", "signal", "renew", "expire", "arm", "report", "forget", "remove", "install",
    "register", "react", "deliver", "fire", "schedule", "refuse", "lease", "claim",
)  # fmt: skip
LOGGING_NAMES = {"log", "logger", "_log", "logging", "warnings"}
SKIPPED_FUNCTIONS = {"__repr__", "__str__", "__format__", "__rich_repr__"}
#: A sample is drawn from mutants in functions whose qualified name matches this (the
#: engine's checks: fences, refusals, signals, effects, cancel, recovery, leases ...);
#: ``--focus ''`` samples from every mutant.
FOCUS = (
    "fence|lease|refus|signal|cancel|recover|announce|claim|effect|park|resol|inbox"
    "|deadline|timer|heartbeat|takeover|close|commit|expire|stale|spec|schema"
)


@dataclass(frozen=True)
class Mutant:
    """One mutation: ``id`` is ``file:line:col:op`` (plus ``#n`` for the n-th operand or
    operator at that place); ``start``/``end`` are character offsets into the file's text
    and ``replacement`` the text put there."""

    id: str
    path: str
    line: int
    op: str
    function: str
    original: str
    replacement: str
    start: int
    end: int


def _offsets(text: str) -> list[int]:
    """The character offset at which each line (1-based index - 1) starts."""
    starts = [0]
    for line in text.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    return starts


class _Finder(ast.NodeVisitor):
    def __init__(self, path: str, text: str) -> None:
        self.path = path
        self.text = text
        self.lines = text.splitlines(keepends=True)
        self.starts = _offsets(text)
        self.function: list[str] = []
        self.found: list[Mutant] = []

    # -- positions ---------------------------------------------------------------
    def _pos(self, line: int, col_bytes: int) -> int:
        prefix = self.lines[line - 1].encode("utf-8")[:col_bytes].decode("utf-8")
        return self.starts[line - 1] + len(prefix)

    def _span(self, node: ast.AST) -> tuple[int, int]:
        start = self._pos(node.lineno, node.col_offset)  # type: ignore[attr-defined]
        end = self._pos(node.end_lineno, node.end_col_offset)  # type: ignore[attr-defined]
        return start, end

    def _add(self, node: ast.AST, op: str, start: int, end: int, replacement: str) -> None:
        original = self.text[start:end]
        base = f"{self.path}:{node.lineno}:{node.col_offset}:{op}"  # type: ignore[attr-defined]
        same = sum(1 for m in self.found if m.id.split("#")[0] == base)
        self.found.append(
            Mutant(
                id=f"{base}#{same}" if same else base,
                path=self.path,
                line=node.lineno,  # type: ignore[attr-defined]
                op=op,
                function=".".join(self.function) or "<module>",
                original=original,
                replacement=replacement,
                start=start,
                end=end,
            )
        )

    # -- what is skipped ---------------------------------------------------------
    def _visit_function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        if node.name in SKIPPED_FUNCTIONS:
            return
        self.function.append(node.name)
        self.generic_visit(node)
        self.function.pop()

    visit_FunctionDef = _visit_function
    visit_AsyncFunctionDef = _visit_function

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.function.append(node.name)
        self.generic_visit(node)
        self.function.pop()

    def visit_Assert(self, node: ast.Assert) -> None:
        return

    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        return

    # -- operators ---------------------------------------------------------------
    def visit_Compare(self, node: ast.Compare) -> None:
        start, end = self._span(node)
        for index, cmp in enumerate(node.ops):
            flipped = CMP_FLIP.get(type(cmp))
            if flipped is None:
                continue
            copy = ast.Compare(
                left=node.left,
                ops=[flipped() if i == index else o for i, o in enumerate(node.ops)],
                comparators=node.comparators,
            )
            self._add(node, "cmp", start, end, f"({ast.unparse(copy)})")
        self.generic_visit(node)

    def visit_BoolOp(self, node: ast.BoolOp) -> None:
        start, end = self._span(node)
        op = "drop_and" if isinstance(node.op, ast.And) else "drop_or"
        word = " and " if isinstance(node.op, ast.And) else " or "
        for index in range(len(node.values)):
            kept = [v for i, v in enumerate(node.values) if i != index]
            parts = [self.text.__getitem__(slice(*self._span(v))) for v in kept]
            self._add(node, op, start, end, "(" + word.join(f"({p})" for p in parts) + ")")
        self.generic_visit(node)

    def _negate(self, node: ast.If | ast.While | ast.IfExp) -> None:
        test = node.test
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and type(test.ops[0]) in CMP_FLIP:
            return  # the same as flipping its comparison (``cmp``)
        start, end = self._span(node.test)
        self._add(node.test, "negate", start, end, f"(not ({self.text[start:end]}))")

    def visit_If(self, node: ast.If) -> None:
        if ast.unparse(node.test) in {"TYPE_CHECKING", "typing.TYPE_CHECKING"}:
            return
        self._negate(node)
        last = node.body[-1]
        guard = None
        if isinstance(last, ast.Raise):
            guard = "raise_guard"
        elif isinstance(last, ast.Return) and not node.orelse:
            guard = "return_guard"
        if guard is not None:
            first = node.body[0]
            start = self._pos(first.lineno, first.col_offset)
            end = self._span(last)[1]
            self._add(first, guard, start, end, "pass")
        self.generic_visit(node)

    def visit_While(self, node: ast.While) -> None:
        self._negate(node)
        self.generic_visit(node)

    def visit_IfExp(self, node: ast.IfExp) -> None:
        self._negate(node)
        self.generic_visit(node)

    def visit_Expr(self, node: ast.Expr) -> None:
        call = node.value
        if isinstance(call, ast.Await):
            call = call.value
        if not isinstance(call, ast.Call):
            return
        func = call.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        owner = ast.unparse(func.value) if isinstance(func, ast.Attribute) else ""
        if owner.split(".")[-1] in LOGGING_NAMES or "crash_point" in name:
            return
        if any(verb in name.lower() for verb in EFFECTFUL_VERBS):
            start, end = self._span(node)
            self._add(node, "drop_call", start, end, "pass")
        self.generic_visit(node)


def target_files(root: Path) -> list[Path]:
    """The files mutated, under ``root``, in a stable order."""
    files: list[Path] = []
    for pattern in TARGETS:
        files.extend(sorted(root.glob(pattern)))
    return [f for f in files if f.name != "__init__.py"]


def find_mutants(root: Path) -> list[Mutant]:
    """Every mutant of :data:`TARGETS` under ``root``, in file and line order."""
    mutants: list[Mutant] = []
    for file in target_files(root):
        text = file.read_text(encoding="utf-8")
        finder = _Finder(str(file.relative_to(root)), text)
        finder.visit(ast.parse(text))
        mutants.extend(sorted(finder.found, key=lambda m: (m.start, m.id)))
    return mutants


@dataclass
class Result:
    """The verdict on one mutant, as stored in the results file."""

    id: str
    op: str
    function: str
    original: str
    replacement: str
    verdict: str
    stage: str
    seconds: float
    failing: list[str]
    detail: str = ""


class Restorer:
    """Puts a mutated file back as it was — its text and its times — on exit from the
    ``with`` block, whatever ends it (SIGTERM is turned into ``KeyboardInterrupt``)."""

    def __init__(self, file: Path) -> None:
        self.file = file
        self.text = file.read_bytes()
        self.stat = file.stat()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.file.write_bytes(self.text)
        os.utime(self.file, ns=(self.stat.st_atime_ns, self.stat.st_mtime_ns))


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _env(root: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(root / "src"), str(root), env.get("PYTHONPATH", "")) if p
    )
    env.setdefault("PHRONOMY_TEST_TIME_SCALE", "3")
    return env


def _check_imports(root: Path) -> None:
    """Make sure the tests and every process they start import the library from
    ``root``, else refuse to run (an installed copy would make every mutant survive).

    The tests' own subprocesses (the crash helpers) set ``PYTHONPATH`` to the checkout
    alone; for a checkout other than the installed one, a link ``root/phronomy_fsm`` →
    ``src/phronomy_fsm`` makes that path find the mutated sources too."""
    link = root / "phronomy_fsm"
    if not link.exists() and _imported_from(root, {"PYTHONPATH": str(root)}) != root / "src":
        link.symlink_to(Path("src") / "phronomy_fsm", target_is_directory=True)
    for extra in ({}, {"PYTHONPATH": str(root)}):
        found = _imported_from(root, extra)
        if found not in (root / "src", root):
            raise SystemExit(f"the tests would import the library from {found}, not {root}")


def _imported_from(root: Path, extra: dict[str, str]) -> Path:
    """The folder above the ``phronomy_fsm`` a child process in ``root`` imports."""
    found = subprocess.run(
        [sys.executable, "-c", "import phronomy_fsm as p; print(p.__file__)"],
        cwd=root,
        env={**_env(root), **extra},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    return Path(found).parent.parent


def run_pytest(root: Path, args: list[str], cap_seconds: float) -> tuple[str, list[str], float]:
    """Run pytest with ``args`` in ``root`` under a wall-clock cap: ``("passed" | "failed"
    | "timeout", failing test ids, seconds)``. The whole process group is killed at the
    cap (and on Ctrl-C)."""
    with tempfile.TemporaryDirectory(prefix="mutate-") as tmp:
        report = Path(tmp) / "junit.xml"
        command = [sys.executable, "-m", "pytest", *args, f"--junitxml={report}"]
        began = time.monotonic()
        proc = subprocess.Popen(
            command,
            cwd=root,
            env=_env(root),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            code = proc.wait(timeout=cap_seconds)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return "timeout", [], time.monotonic() - began
        except BaseException:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
        seconds = time.monotonic() - began
        if code == 0:
            return "passed", [], seconds
        return "failed", _failing(report, root), seconds


def _failing(report: Path, root: Path) -> list[str]:
    """The ids of the failed or erroring tests in a junit report."""
    if not report.exists():
        return []
    ids: list[str] = []
    for case in ET.parse(report).getroot().iter("testcase"):
        if case.find("failure") is None and case.find("error") is None:
            continue
        module = case.get("classname", "")
        parts = module.split(".")
        # classname is dotted module (plus class); rebuild a node id
        path_parts: list[str] = []
        for i in range(len(parts), 0, -1):
            candidate = "/".join(parts[:i]) + ".py"
            if (root / candidate).exists():
                path_parts = [candidate, *parts[i:]]
                break
        if not path_parts:
            continue
        ids.append("::".join([*path_parts, case.get("name", "")]))
    return ids


def judge(
    root: Path, mutant: Mutant, stages: list[tuple[str, str]], cap: float, *, recheck: bool = True
) -> Result:
    """Apply ``mutant`` under ``root``, run the stages in order until one fails, run the
    failing tests once more on the mutant (``recheck``: a failure that does not repeat
    is load, ``flaky_kill``), restore the file, and re-run the failing tests on the
    clean file."""
    file = root / mutant.path
    with Restorer(file) as saved:
        text = saved.text.decode("utf-8")
        mutated = text[: mutant.start] + mutant.replacement + text[mutant.end :]
        if text[mutant.start : mutant.end] != mutant.original:
            return _result(mutant, "invalid", "", 0.0, [], "the file changed since listing")
        try:
            compile(mutated, str(file), "exec")
        except SyntaxError as error:
            return _result(mutant, "invalid", "", 0.0, [], str(error))
        file.write_text(mutated, encoding="utf-8")
        total = 0.0
        outcome, failing, stage = "passed", [], ""
        for stage, args in stages:
            outcome, failing, seconds = run_pytest(root, shlex.split(args), cap)
            total += seconds
            if outcome != "passed":
                break
        if recheck and outcome == "failed" and failing:
            repeat, _, _ = run_pytest(root, ["-q", "-p", "no:randomly", *failing], cap)
            if repeat == "passed":
                return _result(mutant, "flaky_kill", stage, total, failing, "passed when run again")
    # the file is clean again here
    if outcome == "passed":
        return _result(mutant, "survived", stage, total, [])
    if outcome == "timeout":
        return _result(mutant, "timeout", stage, total, [])
    if not failing:
        return _result(mutant, "killed", stage, total, [], "pytest failed with no test id")
    again, still, _ = run_pytest(root, ["-q", "-p", "no:randomly", *failing], cap)
    if again == "passed":
        return _result(mutant, "killed", stage, total, failing)
    return _result(
        mutant, "clean_failure", stage, total, failing, f"on clean code: {again} {still}"
    )


def _result(
    mutant: Mutant, verdict: str, stage: str, seconds: float, failing: list[str], detail: str = ""
) -> Result:
    return Result(
        id=mutant.id,
        op=mutant.op,
        function=mutant.function,
        original=mutant.original,
        replacement=mutant.replacement,
        verdict=verdict,
        stage=stage,
        seconds=round(seconds, 1),
        failing=failing,
        detail=detail,
    )


def _load(out: Path) -> dict[str, dict[str, object]]:
    if out.exists():
        return {r["id"]: r for r in json.loads(out.read_text())["results"]}
    return {}


def _save(out: Path, results: dict[str, dict[str, object]], meta: dict[str, object]) -> None:
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps({**meta, "results": list(results.values())}, indent=2) + "\n")
    tmp.replace(out)


def summarize(results: list[dict[str, object]]) -> str:
    """A table of verdicts, then every survivor, timeout and clean failure."""
    counts: dict[str, int] = {}
    for r in results:
        counts[str(r["verdict"])] = counts.get(str(r["verdict"]), 0) + 1
    lines = [f"{len(results)} mutants: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))]
    for r in results:
        if r["verdict"] != "killed":
            lines.append(
                f"  {r['verdict']:<13} {r['id']}  [{r['function']}]\n"
                f"      {str(r['original'])[:90]!r} -> {str(r['replacement'])[:90]!r}"
            )
    return "\n".join(lines)


def _select(mutants: list[Mutant], args: argparse.Namespace) -> Iterator[Mutant]:
    chosen = mutants
    if args.op:
        chosen = [m for m in chosen if m.op in args.op]
    if args.file:
        chosen = [m for m in chosen if any(m.path.endswith(f) for f in args.file)]
    if getattr(args, "focus", ""):
        focus = re.compile(args.focus, re.IGNORECASE)
        chosen = [m for m in chosen if focus.search(m.function)]
    if getattr(args, "ids", None):
        by_id = {m.id: m for m in mutants}
        missing = [i for i in args.ids if i not in by_id]
        if missing:
            raise SystemExit(f"unknown mutant id(s): {', '.join(missing)}")
        return iter([by_id[i] for i in args.ids])
    if getattr(args, "sample", None):
        rng = random.Random(args.seed)
        chosen = rng.sample(chosen, min(args.sample, len(chosen)))
        chosen.sort(key=lambda m: (m.path, m.start))
    return iter(chosen)


def _recheck(args: argparse.Namespace) -> int:
    """``recheck OUT``: for each ``killed`` result of a run without the recheck, apply
    the mutant again and run only its failing tests; a pass there makes it a
    ``flaky_kill`` (the kill was load, not the mutant)."""
    root = args.root.resolve()
    _check_imports(root)
    signal.signal(signal.SIGTERM, _raise_interrupt)
    by_id = {m.id: m for m in find_mutants(root)}
    data = json.loads(args.out.read_text())
    results = {r["id"]: r for r in data.pop("results")}
    try:
        for r in results.values():
            if r["verdict"] != "killed" or not r["failing"] or r.get("rechecked"):
                continue
            ids = " ".join(shlex.quote(i) for i in r["failing"])
            again = judge(
                root, by_id[r["id"]], [("recheck", f"-q -p no:randomly {ids}")],
                args.cap_seconds, recheck=False,
            )  # fmt: skip
            r["rechecked"] = again.verdict
            if again.verdict == "survived":
                r["verdict"], r["detail"] = "flaky_kill", "its failing tests pass on it"
            _save(args.out, results, data)
            print(f"{r['verdict']:<13} {r['id']}", flush=True)
    except KeyboardInterrupt:
        print("interrupted; every file is restored", file=sys.stderr)
        return 130
    print(summarize(list(results.values())))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("list", "run", "show"):
        p = sub.add_parser(name)
        p.add_argument("--root", type=Path, default=ROOT, help="the checkout to mutate")
        p.add_argument("--op", action="append", help="only this operator (repeatable)")
        p.add_argument("--file", action="append", help="only files ending so (repeatable)")
        p.add_argument("--focus", default="", help=f"only functions matching (e.g. {FOCUS!r})")
        if name == "show":
            p.add_argument("ids", nargs="+")
        if name == "run":
            p.add_argument("--ids", nargs="+", help="run these mutant ids")
            p.add_argument("--sample", type=int, help="a random sample of N mutants")
            p.set_defaults(focus=FOCUS)
            p.add_argument("--seed", type=int, default=22)
            p.add_argument("--out", type=Path, default=Path("/tmp/mutation-durable.json"))
            p.add_argument("--tests", default=QUICK_TESTS, help="pytest arguments, stage 1")
            p.add_argument(
                "--confirm-tests", default=CONFIRM_TESTS, help="pytest arguments, stage 2 ('' none)"
            )
            p.add_argument("--cap-seconds", type=float, default=600.0, help="per stage")
            p.add_argument("--again", action="store_true", help="re-run ids already in --out")
    p = sub.add_parser("summary")
    p.add_argument("out", type=Path)
    p = sub.add_parser("recheck", help="run each killed mutant's failing tests again on it")
    p.add_argument("out", type=Path)
    p.add_argument("--root", type=Path, default=ROOT, help="the checkout to mutate")
    p.add_argument("--cap-seconds", type=float, default=600.0)
    args = parser.parse_args(argv)

    if args.command == "summary":
        print(summarize(list(_load(args.out).values())))
        return 0
    if args.command == "recheck":
        return _recheck(args)
    root = args.root.resolve()
    mutants = find_mutants(root)
    if args.command == "list":
        for m in _select(mutants, args):
            print(f"{m.id}  [{m.function}]  {m.original[:60]!r} -> {m.replacement[:60]!r}")
        print(f"{sum(1 for _ in _select(mutants, args))} mutants", file=sys.stderr)
        return 0
    if args.command == "show":
        args.ids = args.ids
        for m in _select(mutants, args):
            print(json.dumps(asdict(m), indent=2))
        return 0

    _check_imports(root)
    signal.signal(signal.SIGTERM, _raise_interrupt)
    stages = [("quick", args.tests)]
    if args.confirm_tests:
        stages.append(("confirm", args.confirm_tests))
    results = _load(args.out)
    meta = {"root": str(root), "stages": stages, "seed": args.seed, "sample": args.sample}
    selected = list(_select(mutants, args))
    try:
        for n, mutant in enumerate(selected, 1):
            if mutant.id in results and not args.again:
                continue
            result = judge(root, mutant, stages, args.cap_seconds)
            results[mutant.id] = asdict(result)
            _save(args.out, results, meta)
            print(
                f"[{n}/{len(selected)}] {result.verdict:<13} {result.seconds:7.1f}s"
                f" {result.stage:<7} {mutant.id}",
                flush=True,
            )
    except KeyboardInterrupt:
        print("interrupted; every file is restored", file=sys.stderr)
        return 130
    finally:
        _save(args.out, results, meta)
    print(summarize([results[m.id] for m in selected if m.id in results]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
