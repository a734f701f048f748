"""The agent's code names its machines' states and events through the generated enums.

A state or event written as a string literal in a comparison or an ``emit``/``post``
call would survive the renaming of that state in ``fsm_specs/`` unnoticed by the
validator and by mypy; through ``agent_session.State``/``Event`` (and ``tool_call``'s)
the renaming breaks the import or the type check instead (docs/agent.md, "The machines").
"""

from __future__ import annotations

import ast
from pathlib import Path

import phronomy_fsm
from phronomy_fsm.generated import agent_session, tool_call

PACKAGE = Path(phronomy_fsm.__file__).parent
#: the packages that act on the agent's executions by state or event name
CHECKED = ("agent", "console", "operator", "tracing")
NAMES = {
    str(member)
    for machine in (agent_session, tool_call)
    for enum in (machine.State, machine.Event)
    for member in enum
} | {agent_session.MACHINE, tool_call.MACHINE}
CALLS = {"emit", "post", "signal", "post_authorized"}
#: literals that are equal to a state or event name but mean something else
ALLOWED = {
    # the kind of an audit record (the approval's history), not the event
    ("agent/approvals.py", "approval_decided"),
    # operator.AgentView.kind: which of an agent's executions a view describes
    ("console/presenters.py", "tool_call"),
}


def _literals(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, text) of every string literal compared with something, or passed as the
    first argument of an ``emit``/``post``/``signal`` call."""
    found = []
    for node in ast.walk(tree):
        operands: list[ast.expr] = []
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            for op in node.comparators:  # `x in ("a", "b")`
                if isinstance(op, ast.Tuple | ast.List | ast.Set):
                    operands.extend(op.elts)
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in CALLS:
                operands = list(node.args[:2])
        for operand in operands:
            if isinstance(operand, ast.Constant) and isinstance(operand.value, str):
                found.append((operand.lineno, operand.value))
    return found


def test_no_state_or_event_name_is_written_as_a_string() -> None:
    offenders = []
    for package in CHECKED:
        for path in sorted((PACKAGE / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for line, text in _literals(tree):
                if text in NAMES and (str(path.relative_to(PACKAGE)), text) not in ALLOWED:
                    offenders.append(f"{path.relative_to(PACKAGE)}:{line}: {text!r}")
    assert offenders == [], "use the generated State/Event enums (or MACHINE):\n" + "\n".join(
        offenders
    )


def test_the_check_sees_a_literal_comparison() -> None:
    tree = ast.parse(
        'if record.state != "awaiting_approval":\n    pass\nx.emit("tool_finished", p)'
    )
    assert [text for _, text in _literals(tree)] == ["awaiting_approval", "tool_finished"]
