"""The agent application of the crash-injection matrix (``python tools/crash_matrix.py``).

:func:`create_app` builds, with :func:`phronomy_fsm.agent.app.agent_app`, a
:class:`~phronomy_fsm.durable.app.DurableApp` whose agents cover what an agent execution
can do — a plain answer, tools without approval (``pure``, ``at_most_once`` and
``idempotent``), two tool rounds, a tool needing approval (approved, rejected, decided
item by item), a tool that raises, a handoff to a second agent, LLM calls that may be
re-sent (``llm_resend="resend"``), a cancel, an execution deadline, a structured
answer re-asked once (``output_type``), a budget that runs out, waits and is extended
by a person, and the tools of an MCP server (:mod:`phronomy_fsm.testing.mcp_server`,
started over stdio for each call: read-only, idempotent and neither) — one agent per
scenario, so the harness's runs do not meet.

The outside world keeps its own record beside the store (``<db stem>-effects/``), one
fsynced JSON line per effect (:class:`~docs.examples.durable_service.JsonLines`):

- ``llm.jsonl``: every LLM call the deterministic provider answered, by its
  ``llm_call_id`` (effect ``call_llm``, the agent's kind, the engine's attempt, the
  request's messages and the answer);
- ``tools.jsonl``: every tool call by its idempotency key (the tool invocation id, which
  is also its ``tool_call`` execution's id): ``at_most_once`` tools once per call,
  ``idempotent`` ones recognising a repeated key (``replayed``), ``pure`` ones too (a
  read changes nothing), and a raising tool with its error; the MCP server writes its
  own calls there too, by the ids the call sends in its ``_meta``.

The operator (:func:`operator_answer`) answers truthfully from those records; a scenario's
person approves, rejects or decides per item; the scenario's ``drive`` does what the
application does by itself — start a handoff's target once the handoff is committed
(as loading the target agent does, ``Agent.load``), cancel an execution. The agent
invariants the harness checks on top of the generic ones are in
:mod:`agent_crash_checks`. ``docs/operations.md`` ("The crash-injection matrix").
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs

from docs.examples.durable_service import JsonLines
from phronomy_fsm.agent import (
    Authorization,
    Budget,
    LLMRequest,
    LLMResponse,
    Reply,
    ScriptedProvider,
    Tool,
    ToolCallView,
    ToolContext,
)
from phronomy_fsm.agent.app import agent_app, start_execution
from phronomy_fsm.agent.config import AgentConfig, LLMResend
from phronomy_fsm.agent.ids import handoff_target_execution_id
from phronomy_fsm.agent.mcp import McpServer, McpToolInfo
from phronomy_fsm.agent.providers import OUTPUT_RETRY_PREFIX
from phronomy_fsm.agent.session_hooks import AgentSessionHooks
from phronomy_fsm.durable.app import Answer, DurableApp, EffectEntry, Scenario
from phronomy_fsm.durable.codec import json_data
from phronomy_fsm.durable.operations import request_cancel
from phronomy_fsm.durable.records import ExecutionRecord, ExecutionStatus
from phronomy_fsm.errors import AgentBusyError, PhronomyError
from phronomy_fsm.generated import agent_session
from phronomy_fsm.runtime.session import OffloadContext
from phronomy_fsm.store.open import open_store

#: The input of the invoke the checks make after a run (the LLM answers it plainly).
AGAIN = "once more, after the recovery"
#: The system prompt of every agent (so the checks see where the history starts).
SYSTEM_PROMPT = "You are a test agent of the crash matrix."
#: Seconds an execution of the ``deadline`` scenario may take (it waits for a person
#: who never answers).
DEADLINE_SECONDS = 2.0


# ------------------------------------------------------------------ the outside world


class Effects:
    """The application's own record of what happened outside (module docstring).

    Args:
        folder: where ``llm.jsonl`` and ``tools.jsonl`` live.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.llm = JsonLines(folder / "llm.jsonl")
        self.tools = JsonLines(folder / "tools.jsonl")

    @classmethod
    def beside(cls, db_path: str) -> Effects:
        """The records of the store at ``db_path``: ``<folder>/<stem>-effects/``."""
        path = Path(db_path).resolve()
        return cls(path.parent / f"{path.stem}-effects")

    def entries(self) -> list[EffectEntry]:
        """Every effect as the crash harness reads them (a raising tool's call
        counts: it was made)."""
        return [
            EffectEntry(
                e["execution_id"] or "", e["effect"], e["kind"], e["key"], e["attempt"], e["result"]
            )
            for ledger in (self.llm, self.tools)
            for e in ledger.entries()
        ]


_current = threading.local()


@contextmanager
def _llm_effect(execution_id: str, attempt: int) -> Iterator[None]:
    """Tell the provider, on the worker running the call, which execution and attempt
    it serves (an LLM request names only its call id)."""
    _current.effect = (execution_id, attempt)
    try:
        yield
    finally:
        _current.effect = None


class LedgerSessionHooks(AgentSessionHooks):
    """The agent's own ``agent_session`` hooks, with the LLM call's execution id and
    attempt handed to the provider's record (nothing else differs)."""

    def call_llm(self, ctx: Any, payload: Any) -> Any:
        """:meth:`AgentSessionHooks.call_llm`, its work run under :func:`_llm_effect`."""
        work = super().call_llm(ctx, payload)
        execution_id = ctx.execution_id

        def run(octx: OffloadContext) -> LLMResponse:
            attempt = octx.effect.attempt if octx.effect is not None else 1
            with _llm_effect(execution_id, attempt):
                return work(octx)  # type: ignore[no-any-return]

        return run


def last_user_text(request: LLMRequest) -> str:
    """The text of the request's last user message."""
    return next((m.content or "" for m in reversed(request.messages) if m.role == "user"), "")


class LedgerProvider:
    """A deterministic LLM (a :class:`ScriptedProvider`) that records every call it
    answers in ``ledger`` before returning the answer, under its ``llm_call_id``.

    Args:
        agent_id: the agent it answers for.
        script: the scripted answers of one execution, by call index; an execution
            whose input is :data:`AGAIN` gets ``again`` instead.
        ledger: the LLM call record.
        kind: the kind of the agent's LLM calls (``at_most_once``, or ``idempotent``
            under ``llm_resend="resend"``).
        again: the answer to :data:`AGAIN` (:func:`again_answer`).
    """

    def __init__(
        self, agent_id: str, script: Sequence[Reply], ledger: JsonLines, kind: str, again: str
    ) -> None:
        self.agent_id = agent_id
        self.ledger = ledger
        self.kind = kind

        def step(index: int) -> Callable[[LLMRequest, int], Reply]:
            def answer(request: LLMRequest, _index: int) -> Reply:
                if last_user_text(request) == AGAIN:
                    return Reply(content=again)
                return script[index]

            return answer

        self.inner = ScriptedProvider([step(i) for i in range(len(script))])

    def complete(self, request: LLMRequest, **options: Any) -> LLMResponse:
        """Answer from the script, record the call, return the answer."""
        response = self.inner.complete(request, **options)
        execution_id, attempt = getattr(_current, "effect", None) or (None, 1)
        self.ledger.append(
            {
                "execution_id": execution_id,
                "agent_id": self.agent_id,
                "effect": "call_llm",
                "kind": self.kind,
                "key": request.llm_call_id,
                "attempt": attempt,
                "call_index": _call_index(request),
                "messages": [m.to_json() for m in request.messages],
                "result": response.to_json(),
            }
        )
        return response


def _call_index(request: LLMRequest) -> int:
    """The index of the call in its execution: assistant messages after the last user
    message that is not a re-ask for valid output (as :class:`ScriptedProvider`
    counts)."""
    count = 0
    for message in reversed(request.messages):
        if message.role == "user" and not (message.content or "").startswith(OUTPUT_RETRY_PREFIX):
            break
        count += message.role == "assistant"
    return count


def mcp_server(effects: Effects) -> McpServer:
    """The MCP server of the ``mcp_tools`` scenario, recording into ``tools.jsonl``
    (its tools get the prefix ``mcp_``)."""
    command = [sys.executable, "-m", "phronomy_fsm.testing.mcp_server"]
    args = [*command[1:], "--ledger", str(effects.tools.path)]
    return McpServer.stdio(command[0], args, prefix="mcp_", timeout_seconds=60)


def _mcp_listing(server: McpServer) -> list[McpToolInfo]:
    """The test server's tools, listed once per version of its source and kept in the
    temporary folder (every process of the matrix builds every agent: listing in each
    would start the server once more per run)."""
    from phronomy_fsm.testing import mcp_server as source

    digest = hashlib.sha256(Path(str(source.__file__)).read_bytes()).hexdigest()[:16]
    kept = Path(tempfile.gettempdir()) / f"phronomy-crash-mcp-listing-{digest}.json"
    try:
        return [McpToolInfo.from_json(i) for i in json.loads(kept.read_text())]
    except (OSError, ValueError, PhronomyError):
        pass
    listing = list(server.list_tools())
    partial = kept.with_suffix(f".{os.getpid()}.tmp")
    partial.write_text(json.dumps([i.to_json() for i in listing]))
    os.replace(partial, kept)  # whole or not at all, whoever writes it last
    return listing


def make_tools(effects: Effects) -> dict[str, Tool]:
    """The tools the agents may use, each recording its calls in ``tools.jsonl``: the
    application's own and the MCP server's (:func:`mcp_server`)."""
    ledger = effects.tools
    schema = {
        "type": "object",
        "properties": {"item": {"type": "string"}},
        "required": ["item"],
        "additionalProperties": False,
    }

    def record(context: ToolContext, name: str, kind: str, **entry: Any) -> None:
        ledger.append(
            {
                "execution_id": context.tool_invocation_id,
                "parent_execution_id": context.execution_id,
                "agent_id": context.agent_id,
                "effect": "execute_tool",
                "tool": name,
                "kind": kind,
                "key": context.idempotency_key,
                "attempt": context.attempt,
                **entry,
            }
        )

    def once(name: str, kind: str) -> Callable[[Any, ToolContext], Any]:
        def run(arguments: Any, context: ToolContext) -> Any:  # an at_most_once side effect
            result = {"tool": name, "item": arguments["item"], "done": True}
            record(context, name, kind, arguments=arguments, result=result)
            return result

        return run

    def ticket(arguments: Any, context: ToolContext) -> Any:  # deduplicates by key
        with ledger.locked():
            first = ledger.find(context.idempotency_key)
            result = (
                first["result"]
                if first is not None
                else {"ticket": f"TK-{context.idempotency_key[-8:]}", "item": arguments["item"]}
            )
            record(
                context,
                "open_ticket",
                "idempotent",
                arguments=arguments,
                result=result,
                replayed=first is not None,
            )
        return result

    def lookup(arguments: Any, context: ToolContext) -> Any:  # a read
        result = {"item": arguments["item"], "in_stock": 3}
        record(context, "lookup", "pure", arguments=arguments, result=result)
        return result

    def flaky(arguments: Any, context: ToolContext) -> Any:
        error = f"RuntimeError: the {arguments['item']} service is down"
        record(context, "flaky", "at_most_once", arguments=arguments, result=None, error=error)
        raise RuntimeError(f"the {arguments['item']} service is down")

    server = mcp_server(effects)
    return {
        tool.name: tool
        for tool in (
            *server.tools(_mcp_listing(server)),
            Tool("lookup", lookup, "Read an item's stock.", schema, effect="pure"),
            Tool("charge", once("charge", "at_most_once"), "Charge for an item.", schema),
            Tool("open_ticket", ticket, "Open a ticket (idempotent).", schema, effect="idempotent"),
            Tool("flaky", flaky, "A tool that always raises.", schema),
            Tool(
                "send_email",
                once("send_email", "at_most_once"),
                "Send an e-mail (a person approves it).",
                schema,
                requires_approval=True,
            ),
        )
    }


# ------------------------------------------------------------------ the agents


@attrs.frozen
class AgentDef:
    """One agent of the application: its id, the script of its LLM, its tools (names
    of :func:`make_tools`), more :meth:`AgentConfig.build` options, and its answer to
    :data:`AGAIN` when it is not the default of :func:`again_answer`."""

    agent_id: str
    script: tuple[Reply, ...]
    tools: tuple[str, ...] = ()
    options: Mapping[str, Any] = attrs.field(factory=dict)
    again: str | None = None


def again_answer(agent: AgentDef) -> str:
    """What ``agent``'s LLM answers to :data:`AGAIN` (``"<agent id> answers
    again."`` unless the agent says otherwise)."""
    return agent.again if agent.again is not None else f"{agent.agent_id} answers again."


@attrs.frozen
class Stock:
    """The structured answer of the ``output_retry`` scenario's agent."""

    item: str
    count: int


def _calls(*calls: tuple[str, str]) -> Reply:
    return Reply(tool_calls=tuple((name, {"item": item}) for name, item in calls))


def trim(text: str) -> str:
    """An input filter (so that the ``filter_input`` offload runs)."""
    return text.strip()


def sign(text: str) -> str:
    """An output filter (so that the ``filter_output`` offload runs)."""
    return f"{text} -- the crash matrix"


def ask_for_e_mails(view: ToolCallView) -> Authorization:
    """An approval policy (so that the ``authorize_tools`` offload runs): a person
    approves every e-mail."""
    if view.tool_name == "send_email":
        return Authorization.REQUIRE_APPROVAL
    return Authorization.ALLOW


#: The agents, by agent id.
AGENTS: dict[str, AgentDef] = {
    a.agent_id: a
    for a in (
        AgentDef(
            "a-plain",
            (Reply("Hello from the plain agent."),),
            options={"input_filters": (trim,), "output_filters": (sign,)},
        ),
        AgentDef("a-cycle", (_calls(("charge", "book")), Reply("Charged."))),
        AgentDef(
            "a-parallel",
            (
                _calls(("lookup", "pen"), ("charge", "pen"), ("open_ticket", "pen")),
                Reply("Three tools ran."),
            ),
        ),
        AgentDef(
            "a-rounds",
            (_calls(("lookup", "cup")), _calls(("charge", "cup")), Reply("Two rounds.")),
        ),
        AgentDef("a-approve", (_calls(("send_email", "invoice")), Reply("Sent."))),
        AgentDef("a-reject", (_calls(("send_email", "spam")), Reply("Not sent."))),
        AgentDef(
            "a-items",
            (_calls(("send_email", "first"), ("send_email", "second")), Reply("One of two.")),
            options={"approval_policy": ask_for_e_mails},
        ),
        AgentDef("a-raises", (_calls(("flaky", "billing")), Reply("The tool failed."))),
        AgentDef(
            "a-triage",
            (Reply(tool_calls=(("to_specialist", {"message": "please take over"}),)),),
            options={"handoffs": {"to_specialist": "a-specialist"}},
        ),
        AgentDef("a-specialist", (Reply("The specialist answers."),)),
        AgentDef(
            "a-resend",
            (_calls(("open_ticket", "mug")), Reply("Ticket opened.")),
            options={"llm_resend": "resend"},
        ),
        AgentDef("a-idempotent", (_calls(("open_ticket", "lamp")), Reply("Ticket opened."))),
        AgentDef("a-cancel", (_calls(("send_email", "never")), Reply("unreachable"))),
        AgentDef("a-deadline", (_calls(("send_email", "late")), Reply("unreachable"))),
        AgentDef(
            "a-structured",
            (Reply("three pens, I think"), Reply('{"item": "pen", "count": 3}')),
            options={"output_type": Stock, "output_retries": 1},
            again='{"item": "again", "count": 0}',
        ),
        AgentDef(
            "a-budget",
            (_calls(("lookup", "hat")), _calls(("charge", "hat")), Reply("Within budget.")),
            options={"budget": Budget(max_llm_calls=1), "on_budget_exhausted": "wait"},
        ),
        AgentDef(
            "a-mcp",
            (
                _calls(("mcp_stock", "desk"), ("mcp_open_ticket", "desk"), ("mcp_charge", "desk")),
                Reply("The MCP tools ran."),
            ),
        ),
    )
}


def agent_options(agent: AgentDef, effects: Effects, tools: Mapping[str, Tool]) -> dict[str, Any]:
    """The keyword arguments of ``AgentConfig.build`` / ``Agent.load`` for ``agent``
    (with its recording provider)."""
    resend = LLMResend(agent.options.get("llm_resend", LLMResend.ASK_OPERATOR))
    kind = "idempotent" if resend is LLMResend.RESEND else "at_most_once"
    return {
        "provider": LedgerProvider(
            agent.agent_id, agent.script, effects.llm, kind, again_answer(agent)
        ),
        "tools": [tools[name] for name in _tool_names(agent)],
        "system_prompt": SYSTEM_PROMPT,
        **agent.options,
    }


def _tool_names(agent: AgentDef) -> list[str]:
    names: list[str] = []
    for reply in agent.script:
        for name, _arguments in reply.tool_calls:
            if name not in names and name not in agent.options.get("handoffs", {}):
                names.append(name)
    return names


def agent_configs(effects: Effects) -> list[AgentConfig]:
    """The configuration of every agent, recording into ``effects``."""
    tools = make_tools(effects)
    configs = []
    for agent in AGENTS.values():
        options = agent_options(agent, effects, tools)
        provider = options.pop("provider")
        configs.append(AgentConfig.build(agent.agent_id, provider, **options))
    return configs


# ------------------------------------------------------------------ the scenarios


def execution_id_of(scenario: str) -> str:
    """The fixed id of a scenario's execution."""
    return f"x-{scenario}"


def starter(
    scenario: str, agent_id: str, *, timeout_seconds: float | None = None
) -> Callable[[Any], list[str]]:
    """A scenario's ``start``: one execution of ``agent_id`` under a fixed id."""

    def start(runtime: Any) -> list[str]:
        eid, _created = start_execution(
            runtime,
            agent_id,
            f"Scenario {scenario}: do your job.",
            execution_id=execution_id_of(scenario),
            timeout_seconds=timeout_seconds,
        )
        return [eid]

    return start


def approval(decide: Callable[[list[str]], Any]) -> Callable[[ExecutionRecord], Answer | None]:
    """A person answering an execution waiting for approval: ``decide(items)`` gives
    ``True``/``False`` (the whole request) or ``{item: bool}`` (each item)."""

    def on_waiting(record: ExecutionRecord) -> Answer | None:
        if record.machine != agent_session.MACHINE or record.state != agent_session.State.SUSPENDED:
            return None
        ctx = json_data(record.context)
        request = (ctx.get("approval") or {}) if isinstance(ctx, dict) else {}
        verdict = decide(list(request.get("items", ())))
        payload = {
            "request_id": request.get("request_id"),
            "approved": verdict if isinstance(verdict, bool) else False,
            "decisions": None if isinstance(verdict, bool) else verdict,
            "by": "crash-harness",
        }
        return Answer(event="approval_decided", payload=payload)

    return on_waiting


def budget_extension(limits: Mapping[str, int]) -> Callable[[ExecutionRecord], Answer | None]:
    """A person extending the budget of an execution waiting in ``budget_exhausted``
    to ``limits`` (the ``budget_extended`` signal for its pending request)."""

    def on_waiting(record: ExecutionRecord) -> Answer | None:
        if (
            record.machine != agent_session.MACHINE
            or record.state != agent_session.State.BUDGET_EXHAUSTED
        ):
            return None
        ctx = json_data(record.context)
        request = (ctx.get("budget_request") or {}) if isinstance(ctx, dict) else {}
        payload = {
            "request_id": request.get("request_id"),
            "limits": dict(limits),
            "by": "crash-harness",
        }
        return Answer(event="budget_extended", payload=payload)

    return on_waiting


def start_pending_handoffs(runtime: Any) -> None:
    """What loading a handoff's target agent does (``Agent.load``): start each
    committed handoff whose target execution was never started, under its derived id
    (a ``drive`` of the harness)."""
    store = runtime.store
    for record in store.list_records(
        machine=agent_session.MACHINE, state=agent_session.State.HANDED_OFF.value
    ):
        ctx = json_data(record.context)
        handoff = (ctx.get("handoff") if isinstance(ctx, dict) else None) or {}
        target = handoff.get("target_execution_id")
        if not target or target != handoff_target_execution_id(
            record.execution_id, str(handoff.get("target_agent_id"))
        ):
            continue
        try:
            start_execution(
                runtime,
                str(handoff["target_agent_id"]),
                handoff.get("message") or "",
                execution_id=target,
            )
        except AgentBusyError:
            continue  # its current execution finishes first


def cancel_when_waiting(execution_id: str) -> Callable[[Any], None]:
    """A ``drive`` that cancels ``execution_id`` once it waits for approval (the
    cancel is a durable request, sent once)."""

    def drive(runtime: Any) -> None:
        try:
            record = runtime.store.load_record(execution_id)
        except PhronomyError:
            return
        if record.status is ExecutionStatus.WAITING:
            request_cancel(
                runtime.store,
                execution_id,
                reason="cancelled by the crash harness",
                signal_id=f"{execution_id}-cancel",
                sender="crash-harness",
            )
            runtime.notify(execution_id)

    return drive


def _approve_first_only(items: list[str]) -> dict[str, bool]:
    return {item: i == 0 for i, item in enumerate(items)}


def scenarios() -> dict[str, Scenario]:
    """The harness's scenarios, by name (module docstring)."""
    approve = approval(lambda items: True)
    return {
        "plain_answer": Scenario(starter("plain_answer", "a-plain")),
        "tool_cycle": Scenario(starter("tool_cycle", "a-cycle")),
        "parallel_tools": Scenario(starter("parallel_tools", "a-parallel")),
        "two_rounds": Scenario(starter("two_rounds", "a-rounds")),
        "approval_granted": Scenario(starter("approval_granted", "a-approve"), approve),
        "approval_rejected": Scenario(
            starter("approval_rejected", "a-reject"), approval(lambda items: False)
        ),
        "approval_items": Scenario(
            starter("approval_items", "a-items"), approval(_approve_first_only)
        ),
        "tool_raises": Scenario(starter("tool_raises", "a-raises")),
        "handoff": Scenario(starter("handoff", "a-triage"), drive=start_pending_handoffs),
        "llm_resend": Scenario(starter("llm_resend", "a-resend")),
        "idempotent_tool": Scenario(starter("idempotent_tool", "a-idempotent")),
        "cancel": Scenario(
            starter("cancel", "a-cancel"), drive=cancel_when_waiting(execution_id_of("cancel"))
        ),
        "deadline": Scenario(starter("deadline", "a-deadline", timeout_seconds=DEADLINE_SECONDS)),
        "output_retry": Scenario(starter("output_retry", "a-structured")),
        "budget_wait": Scenario(
            starter("budget_wait", "a-budget"), budget_extension({"max_llm_calls": 3})
        ),
        "mcp_tools": Scenario(starter("mcp_tools", "a-mcp")),
    }


# ------------------------------------------------------------------ the operator


def operator_answer(record: ExecutionRecord, effects: Effects) -> Answer | None:
    """What an operator who checks the outside world answers for ``record`` (in
    ``recovery_required``).

    The subject is an LLM call (the agent execution's pending ``llm_call_id``) or a tool
    call (its ``tool_call`` execution, whose id is the tool's key). Recorded, it
    happened: ``succeeded`` with the recorded answer or result (``failed`` with its
    error for a tool that raised). Not recorded, it provably did not happen — the
    record is written by the call itself — so ``retry`` when allowed, else
    ``not_performed``. An execution that cannot be resumed at all ends ``failed``.
    """
    info = record.recovery
    if info is None:
        return None
    allowed = {str(getattr(o, "value", o)) for o in info.allowed_outcomes}
    subject = info.subject
    if subject is None:
        return Answer(outcome="failed", error=info.reason)
    ctx = json_data(record.context)
    ctx = ctx if isinstance(ctx, dict) else {}
    if subject.effect == "call_llm":
        entry = effects.llm.find(str(ctx.get("pending_llm_call_id")))
    else:
        entry = effects.tools.find(record.execution_id)
    if entry is not None and entry.get("error") and "failed" in allowed:
        return Answer(outcome="failed", error=str(entry["error"]))
    if entry is not None and "succeeded" in allowed:
        return Answer(outcome="succeeded", result=entry["result"])
    if entry is None and "retry" in allowed:
        return Answer(outcome="retry")
    if entry is None and "not_performed" in allowed:
        return Answer(outcome="not_performed")
    return Answer(outcome="failed", error="the operator cannot tell what happened")


# ------------------------------------------------------------------ the application


def create_app(db_path: str) -> DurableApp:
    """The application factory (``--app tools.agent_crash_app:create_app``): every agent
    of :data:`AGENTS` (registered in the store, their histories read from it) with its
    LLM and tools recording beside ``db_path``, the scenarios, the truthful operator
    and the record of effects."""
    effects = Effects.beside(db_path)
    store = open_store(db_path)
    try:
        for agent_id in AGENTS:
            store.register_agent(agent_id)  # what Agent.create does
        app = agent_app(
            store,
            agent_configs(effects),
            scenarios=scenarios(),
            operator=lambda record: operator_answer(record, effects),
            effects=effects.entries,
        )
    finally:
        store.close()
    session, *others = app.machines
    hooks = LedgerSessionHooks(session.hooks.directory)
    return attrs.evolve(app, machines=(attrs.evolve(session, hooks=hooks), *others))


__all__ = [
    "AGAIN",
    "AGENTS",
    "AgentDef",
    "Effects",
    "LedgerProvider",
    "Stock",
    "again_answer",
    "agent_configs",
    "agent_options",
    "create_app",
    "operator_answer",
    "scenarios",
]
