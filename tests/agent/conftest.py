"""Fixtures for agent tests: a real SQLite store in tmp_path and an agent runtime on it."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from phronomy_fsm.agent import AgentEvent, AgentRuntime, Message, Tool
from phronomy_fsm.agent.journal import MESSAGE_KINDS
from phronomy_fsm.durable.records import ExecutionRecord
from phronomy_fsm.errors import StorageError
from phronomy_fsm.store import SqliteBarrierStore
from phronomy_fsm.testing.deadlines import scaled_seconds


@pytest.fixture
def store(tmp_path: Any) -> Iterator[SqliteBarrierStore]:
    s = SqliteBarrierStore(tmp_path / "agents.db")
    yield s
    s.close()


@pytest.fixture
def runtime(store: SqliteBarrierStore) -> Iterator[AgentRuntime]:
    rt = AgentRuntime(store, max_workers=8)
    yield rt
    rt.close(timeout_seconds=5)


class Events:
    """A listener recording events, with a way to wait for one."""

    def __init__(self) -> None:
        self.events: list[AgentEvent] = []
        self._cond = threading.Condition()

    def __call__(self, event: AgentEvent) -> None:
        with self._cond:
            self.events.append(event)
            self._cond.notify_all()

    def types(self) -> list[str]:
        return [e.type.value for e in self.events]

    def wait_for(self, type_: str, timeout: float = 10.0, count: int = 1) -> Any:
        timeout = scaled_seconds(timeout)  # a hang limit, scaled to this machine
        with self._cond:
            ok = self._cond.wait_for(
                lambda: sum(e.type == type_ for e in self.events) >= count, timeout
            )
            assert ok, f"no {type_!r} event within {timeout} s; got {self.types()}"
            return [e for e in self.events if e.type == type_][count - 1]


@pytest.fixture
def events() -> Events:
    return Events()


def make_tool(
    name: str = "lookup",
    *,
    requires_approval: bool = False,
    fn: Any = None,
    log: list | None = None,
    effect: str = "at_most_once",
) -> Tool:
    calls = log if log is not None else []

    def default(arguments: Any, context: Any) -> Any:
        calls.append((arguments, context.idempotency_key))
        return {"ok": True, "echo": arguments}

    return Tool(
        name,
        fn or default,
        f"{name} tool",
        {
            "type": "object",
            "properties": {"q": {"type": "string"}},
            "required": ["q"],
            "additionalProperties": False,
        },
        requires_approval=requires_approval,
        effect=effect,
    )


#: A commit named ``tool_call:<barrier>`` in a :class:`LostResponses` plan is one of a
#: tool call's own commits, any other name one of the agent execution's.
TOOL_CALL = "tool_call:"


class LostResponses:
    """The faults: for each ``(commit, failing)`` of ``plan``, in order, the next commit
    of that barrier by an agent execution (by a tool call for ``tool_call:<barrier>``)
    is written but its response is lost (the store's fault seam raises after COMMIT
    returned); when ``failing``, reading it back fails too, and so do the next
    ``failing_reads`` reads (of an execution, or read-backs of a commit): the engine
    then fails closed and recovers the execution from the store once it can read it.
    ``fired`` lists the commits whose response was lost, in order."""

    def __init__(
        self, store: Any, plan: tuple[tuple[str, bool], ...], *, failing_reads: int = 3
    ) -> None:
        self.store = store
        self.failing_reads = failing_reads
        self.plan = list(plan)
        self.fired: list[str] = []
        self._unreadable: set[int] = set()
        self._reads_to_fail = 0
        self._lock = threading.Lock()
        self._reconcile = store.reconcile
        self._load_record = store.load_record
        store.install_fault_hook(self.hook)
        store.reconcile = self.reconcile
        store.load_record = self.load_record

    def hook(self, point: str, commits: tuple[Any, ...]) -> None:
        if point != "committed":
            return
        with self._lock:
            if not self.plan:
                return
            name, failing = self.plan[0]
            machine, barrier = (
                ("tool_call", name.removeprefix(TOOL_CALL))
                if name.startswith(TOOL_CALL)
                else ("agent_session", name)
            )
            commit = next(
                (c for c in commits if c.barrier == barrier and c.execution.machine == machine),
                None,
            )
            if commit is None:
                return
            self.plan.pop(0)
            self.fired.append(name)
            if failing:
                self._unreadable.add(id(commit))
                self._reads_to_fail = self.failing_reads
        raise ConnectionResetError("injected: the COMMIT response was lost")

    def reconcile(self, commit: Any) -> str:
        with self._lock:
            first = id(commit) in self._unreadable  # its first read-back fails
            self._unreadable.discard(id(commit))
        if first or self._read_fails():
            raise StorageError("injected: the read-back failed")
        return self._reconcile(commit)  # type: ignore[no-any-return]

    def load_record(self, execution_id: str) -> ExecutionRecord:
        if self._read_fails():
            raise StorageError(f"injected: reading {execution_id} failed")
        return self._load_record(execution_id)  # type: ignore[no-any-return]

    def _read_fails(self) -> bool:
        """Whether this read fails (one of the ``failing_reads``)."""
        with self._lock:
            failing = self._reads_to_fail > 0
            self._reads_to_fail -= failing
        return failing


def barrier_names(store: Any, execution_id: str) -> list[str]:
    """The commits of an execution, in revision order."""
    return [b.barrier for b in store.barrier_log(execution_id)]


def journal_kinds(store: Any, execution_id: str) -> list[str]:
    return [e.kind for e in store.journal_entries(execution_id)]


def conversation_problems(messages: list[Any], *, open_end: bool = False) -> list[str]:
    """What an OpenAI-compatible chat API would refuse in ``messages`` (Message
    objects): the order must be system?, user, then assistant turns, where an assistant
    message with tool calls is followed by exactly one tool message per call (any order)
    and a tool message answers only such a call, once. ``open_end``: the last tool
    calls may be unanswered (an execution that failed there). Empty when legal."""
    problems: list[str] = []
    pending: set[str] = set()
    previous = None
    for i, m in enumerate(messages):
        if m.role == "system":
            if i != 0:
                problems.append(f"#{i}: a system message after the start")
        elif m.role == "tool":
            if m.tool_call_id not in pending:
                problems.append(f"#{i}: tool message for {m.tool_call_id!r} answers no open call")
            pending.discard(m.tool_call_id)
        else:
            if pending:
                problems.append(f"#{i}: {m.role} message while {sorted(pending)} are unanswered")
                pending = set()
            if m.role == "assistant":
                if previous == "assistant":
                    problems.append(f"#{i}: two assistant messages in a row")
                pending = {c.id for c in m.tool_calls}
            elif m.role == "user" and previous == "user":
                problems.append(f"#{i}: two user messages in a row")
        previous = m.role
    if pending and not open_end:
        problems.append(f"end: {sorted(pending)} are unanswered")
    return problems


def journaled_messages(store: Any, execution_id: str) -> list[Message]:
    """The conversation an execution journaled when it finished, read from the store."""
    return [
        Message.from_json(e.data["message"])
        for e in store.journal_entries(execution_id)
        if e.kind in MESSAGE_KINDS
    ]


def assert_stored_conversations_are_legal(store: Any, agent_id: str) -> None:
    """Every finished execution of ``agent_id`` journaled its conversation exactly once
    (a legal chat: :func:`conversation_problems`), and the history later executions
    are sent — the completed ones' messages, in order — is legal too."""
    from phronomy_fsm.agent.journal import history

    for record in store.list_records(machine="agent_session", exclusive_key=agent_id):
        kinds = journal_kinds(store, record.execution_id)
        if record.is_finished:
            assert kinds.count("input_received") == 1, (record.execution_id, kinds)
            messages = journaled_messages(store, record.execution_id)
            open_end = record.status.value != "completed" or record.state == "handed_off"
            problems = conversation_problems(messages, open_end=open_end)
            assert problems == [], (record.execution_id, record.state, problems)
        else:
            assert kinds == [], (record.execution_id, kinds)
    assert conversation_problems(history(store, agent_id)) == []


class StrictProvider:
    """A ScriptedProvider that, like an OpenAI-compatible API, refuses a request whose
    conversation is illegal (:func:`conversation_problems`) with an LLMError."""

    def __init__(self, script: list[Any]) -> None:
        from phronomy_fsm.agent import ScriptedProvider

        self.inner = ScriptedProvider(script)
        self.requests = self.inner.requests

    def complete(self, request: Any, **kwargs: Any) -> Any:
        from phronomy_fsm.errors import LLMError

        problems = conversation_problems(list(request.messages))
        if problems:
            self.inner.requests.append(request)
            raise LLMError(f"400: invalid conversation: {problems}")
        return self.inner.complete(request, **kwargs)
