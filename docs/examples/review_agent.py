"""A custom agent flow of your own, durable (docs/getting-started.md, "Example: a review agent").

Two machines: ``docs/examples/review_agent.yaml`` (plan with an LLM call, run the plan's
tools, review with an LLM call, a person approves, send) and
``docs/examples/review_tool.yaml`` (one tool call, run as a child execution). Their
generated tables are checked in under ``docs/examples/machines/`` (a test keeps them
fresh); regenerate them with ``phronomy-fsm generate docs/examples/review_agent.yaml
docs/examples/review_tool.yaml --out docs/examples/machines``.

The LLM is a :class:`~phronomy_fsm.agent.ScriptedProvider` (deterministic: the same
request always gets the same answer), or an
:class:`~phronomy_fsm.agent.OpenAICompatibleProvider` when ``PHRONOMY_LLM_MODEL`` (or
``OPENAI_MODEL``) is set — it then reads ``PHRONOMY_LLM_BASE_URL`` and
``PHRONOMY_LLM_API_KEY`` too.

The effects and the application's own records, in a folder beside the database
(``agent.db`` → ``agent-effects/``):

- ``llm_calls.jsonl``: every LLM answer, by the call's idempotency key. Both LLM calls
  are ``at_most_once`` (a repeated call is paid twice and may answer differently);
  after a crash an operator hands back the recorded answer, or retries a call that
  provably never answered;
- ``tickets.jsonl``: the ``open_ticket`` tool (side effects, ``idempotent`` by key);
  ``lookup_order`` only reads (``pure``);
- ``sent.jsonl``: the replies sent (``at_most_once``).

Run it (``--help`` lists the options)::

    python docs/examples/review_agent.py run t-1 --request "Order A1 arrived broken." \\
        --person approve --db agent.db
    python docs/examples/review_agent.py run t-2 --request "Where is order B7?" --db agent.db
    python docs/examples/review_agent.py signal t-2 approve --db agent.db
    python docs/examples/review_agent.py run --db agent.db --operator

``create_app`` is the application factory of the operator tools and the crash harness
(``--app docs.examples.review_agent:create_app``).
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import jsonschema_rs  # a dependency of phronomy-fsm: the example needs no extra

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # machines/ (generated) and durable_service.py
    sys.path.insert(0, str(HERE))

from durable_service import PERSON_CHOICES, JsonLines, printing_listener, serve, truthful_answer
from machines import review_agent, review_tool

from phronomy_fsm.agent import (
    AnthropicProvider,
    LLMRequest,
    Message,
    OpenAICompatibleProvider,
    Provider,
    Reply,
    ScriptedProvider,
)
from phronomy_fsm.agent.types import ToolSpec
from phronomy_fsm.durable import (
    BarrierRecords,
    ChildStart,
    DurableEvent,
    DurableRuntime,
    ExecutionRecord,
    ExecutionStatus,
    Machine,
    send_signal,
)
from phronomy_fsm.durable.app import Answer, DurableApp, EffectEntry, Scenario
from phronomy_fsm.errors import PhronomyError
from phronomy_fsm.store import SqliteBarrierStore

AGENT = review_agent.MACHINE
TOOL = review_tool.MACHINE

PLANNER_PROMPT = (
    "You are a customer-support agent. Decide which tools to call to answer the "
    "customer's message, and call them; call none if no tool helps."
)
REVIEWER_PROMPT = (
    "You review a support agent's work. From the customer's message and the tool "
    "results, write the reply to send to the customer: short, correct, polite."
)


# ------------------------------------------------------------------ the contexts


@attrs.define
class ReviewTask:
    """The context of one review-agent execution (JSON at every commit:
    ``docs/semantics.md``, "The context").

    ``messages`` is the conversation in the OpenAI chat format (the planner's
    instructions, the customer's message, the planner's tool calls, one tool message
    per result, the reviewer's reply); ``plan`` the planner's tool calls (``id``,
    ``name``, ``arguments`` as the JSON text the LLM wrote); ``tool_results`` one
    entry per finished tool execution (``id``, ``name``, ``status``, ``content``);
    ``draft`` the reply the reviewer wrote (a person may edit it when approving).
    ``task_id`` is the execution id the example starts the task under (the effects'
    records name it).
    """

    task_id: str
    request: str
    customer: str
    messages: list[dict[str, Any]] = attrs.Factory(list)
    plan: list[dict[str, Any]] = attrs.Factory(list)
    tool_results: list[dict[str, Any]] = attrs.Factory(list)
    draft: str | None = None
    decision: dict[str, Any] | None = None
    delivery: dict[str, Any] | None = None
    errors: list[str] = attrs.Factory(list)


@attrs.define
class ToolRun:
    """The context of one tool execution: the task it belongs to, the call as the
    planner wrote it, then its outcome (``status`` ``ok`` or ``error``; ``content`` the
    result as JSON text, or the error message — either is what the reviewer sees)."""

    task_id: str
    call_id: str
    name: str
    arguments: str
    status: str = "pending"
    content: str | None = None


# ------------------------------------------------------------------ the outside world


@attrs.frozen
class ExampleTool:
    """A tool the planner may call: its JSON-schema ``parameters``, whether it has
    ``side_effects`` (then it runs behind a barrier, ``idempotent``; otherwise it is a
    ``pure`` read), and ``run(arguments, key, task_id)`` on a worker (``key`` is the
    effect's idempotency key, ``None`` for a read). It returns JSON data."""

    name: str
    description: str
    parameters: dict[str, Any]
    side_effects: bool
    run: Callable[[dict[str, Any], str | None, str], Any]

    def spec(self) -> ToolSpec:
        """What the LLM is told about the tool."""
        return ToolSpec(self.name, self.description, self.parameters)


ORDERS = {
    "A1": {"item": "kettle", "status": "delivered", "amount_cents": 2500},
    "B7": {"item": "toaster", "status": "in transit", "amount_cents": 4200},
}


class AgentEffects:
    """The example's outside world as files (see the module docstring).

    Args:
        folder: where the records live.
        provider: the LLM (used by both LLM calls).
    """

    def __init__(self, folder: Path, provider: Provider) -> None:
        self.folder = folder
        self.provider = provider
        self.llm_calls = JsonLines(folder / "llm_calls.jsonl")
        self.tickets = JsonLines(folder / "tickets.jsonl")
        self.sent = JsonLines(folder / "sent.jsonl")
        self.ledgers = (self.llm_calls, self.tickets, self.sent)
        self.tools = {
            tool.name: tool
            for tool in (
                ExampleTool(
                    "lookup_order",
                    "Look an order up by its id (read only).",
                    {
                        "type": "object",
                        "properties": {"order_id": {"type": "string"}},
                        "required": ["order_id"],
                        "additionalProperties": False,
                    },
                    False,
                    self.lookup_order,
                ),
                ExampleTool(
                    "open_ticket",
                    "Open a support ticket about an order (once per call).",
                    {
                        "type": "object",
                        "properties": {
                            "order_id": {"type": "string"},
                            "summary": {"type": "string"},
                        },
                        "required": ["order_id", "summary"],
                        "additionalProperties": False,
                    },
                    True,
                    self.open_ticket,
                ),
            )
        }

    @classmethod
    def beside(cls, db_path: str | os.PathLike[str], provider: Provider) -> AgentEffects:
        """The effects of the store at ``db_path``: ``<folder>/<stem>-effects/``."""
        path = Path(db_path).resolve()
        return cls(path.parent / f"{path.stem}-effects", provider)

    # the tools

    def lookup_order(self, arguments: dict[str, Any], key: str | None, task_id: str) -> Any:
        """Read an order (LookupError for an unknown one: the error is the result)."""
        order_id = arguments["order_id"]
        if order_id not in ORDERS:
            raise LookupError(f"no order {order_id}")
        return {"order_id": order_id, **ORDERS[order_id]}

    def open_ticket(self, arguments: dict[str, Any], key: str | None, task_id: str) -> Any:
        """Open a ticket once per idempotency key (a repeated call returns the first)."""
        assert key is not None, "open_ticket has side effects: it runs with its key"
        result = {"ticket_id": f"TK-{key[-8:]}", "order_id": arguments["order_id"]}
        return self.tickets.once(
            key,
            lambda: {
                "execution_id": task_id,
                "effect": "act_tool",
                "kind": "idempotent",
                "key": key,
                "attempt": 1,
                "result": result,
                "summary": arguments["summary"],
            },
        )

    def run_tool(self, call: ToolRun, key: str | None) -> Any:
        """Run ``call``'s tool with the LLM's arguments, validated against its schema.

        Raises:
            LookupError: no such tool. ValueError: arguments that are not a JSON
                object matching the schema. Whatever the tool raises.
        """
        name = call.name
        tool = self.tools.get(name)
        if tool is None:
            raise LookupError(f"unknown tool {name!r}; known: {', '.join(sorted(self.tools))}")
        try:
            arguments = json.loads(call.arguments or "{}")
            jsonschema_rs.validate(tool.parameters, arguments)
        except ValueError as exc:  # bad JSON, or jsonschema_rs.ValidationError
            raise ValueError(f"bad arguments for {name}: {str(exc).splitlines()[0]}") from exc
        return tool.run(arguments, key, call.task_id)

    # the LLM calls and the send

    def call_llm(
        self,
        *,
        execution_id: str,
        effect: str,
        key: str,
        attempt: int,
        messages: list[dict[str, Any]],
        tools: Sequence[ToolSpec] = (),
    ) -> dict[str, Any]:
        """One LLM call under idempotency key ``key`` (sent as the call's id, and so
        as the ``Idempotency-Key`` header by the OpenAI-compatible provider); the
        answer is recorded in ``llm_calls.jsonl`` before it is returned.

        Returns ``{"content", "tool_calls": [{"id", "name", "arguments"}], "model"}``.
        Raises what the provider raises (``LLMError``), recording nothing.
        """
        request = LLMRequest(key, tuple(Message.from_json(m) for m in messages), tuple(tools))
        response = self.provider.complete(request)
        result = {
            "content": response.content,
            "tool_calls": [
                {"id": c.id, "name": c.name, "arguments": c.arguments_json}
                for c in response.tool_calls
            ],
            "model": response.model,
        }
        return self.llm_calls.record(
            execution_id=execution_id,
            effect=effect,
            kind="at_most_once",
            key=key,
            attempt=attempt,
            result=result,
        )

    def send(self, key: str, attempt: int, execution_id: str, to: str, text: str) -> dict[str, Any]:
        """Send the reply (not deduplicated: every call is a message)."""
        result = {"message_id": f"r-{key[-12:]}-{attempt}", "to": to}
        self.sent.append(
            {
                "execution_id": execution_id,
                "effect": "send_reply",
                "kind": "at_most_once",
                "key": key,
                "attempt": attempt,
                "result": result,
                "text": text,
            }
        )
        return result

    def effects(self) -> list[EffectEntry]:
        """Every effect that happened, as the crash harness reads them."""
        return [entry for ledger in self.ledgers for entry in ledger.effects()]


# ------------------------------------------------------------------ the hooks


class AgentHooks(review_agent.Hooks):
    """The review agent's hooks (the generated ``Hooks`` Protocol), on the loop thread.

    The LLM calls and the send are offload hooks: they snapshot what the work needs
    and return it; the work runs on a worker with ``octx.idempotency_key``. The
    ``start_tools`` barrier hook adds the tool executions to the barrier's commit; the
    other barriers (``plan``, ``review``, ``send``) need no hook.

    Args:
        effects: the outside world.
    """

    def __init__(self, effects: AgentEffects) -> None:
        self.effects = effects

    # actions and guards

    def open_conversation(self, ctx: ReviewTask, payload: Any) -> None:
        """Entry of ``starting``: the planner's instructions and the customer's message."""
        ctx.messages = [
            {"role": "system", "content": PLANNER_PROMPT},
            {"role": "user", "content": ctx.request},
        ]

    def has_tool_calls(self, ctx: ReviewTask, payload: dict[str, Any]) -> bool:
        """Guard on ``planned``: the planner called tools."""
        return bool(payload.get("tool_calls"))

    def remember_plan(self, ctx: ReviewTask, payload: dict[str, Any]) -> None:
        """``planned``: the planner's message joins the conversation; its tool calls
        are the plan."""
        ctx.plan = list(payload["tool_calls"])
        ctx.messages.append(_assistant(payload))

    def more_tools_pending(self, ctx: ReviewTask, payload: dict[str, Any]) -> bool:
        """Guard on ``tool_finished``: results are still missing after this one."""
        return len(ctx.tool_results) + 1 < len(ctx.plan)

    def remember_tool_result(self, ctx: ReviewTask, payload: dict[str, Any]) -> None:
        """``tool_finished``: a tool execution's final context becomes a tool message
        (a tool execution that did not finish ``completed`` is an error result)."""
        run = payload["context"]
        status, content = run["status"], run["content"]
        if payload["status"] != ExecutionStatus.COMPLETED.value:
            status, content = "error", f"the tool execution ended {payload['status']}"
        ctx.tool_results.append(
            {"id": run["call_id"], "name": run["name"], "status": status, "content": content}
        )
        ctx.messages.append(
            {
                "role": "tool",
                "tool_call_id": run["call_id"],
                "name": run["name"],
                "content": content,
            }
        )

    def remember_draft(self, ctx: ReviewTask, payload: dict[str, Any]) -> None:
        """``reviewed``: the reviewer's reply is the draft."""
        ctx.draft = payload.get("content") or ""
        ctx.messages.append(_assistant(payload))

    def remember_decision(self, ctx: ReviewTask, payload: Any) -> None:
        """``approve`` / ``reject``: the person's signal; ``text`` replaces the draft."""
        ctx.decision = dict(payload) if isinstance(payload, dict) else {"payload": payload}
        if isinstance(ctx.decision.get("text"), str):
            ctx.draft = ctx.decision["text"]

    def remember_delivery(self, ctx: ReviewTask, payload: dict[str, Any]) -> None:
        """``sent``: what the mail system returned."""
        ctx.delivery = payload

    def remember_error(self, ctx: ReviewTask, payload: Any) -> None:
        """A failure outcome: keep what went wrong, as text."""
        ctx.errors.append(f"{type(payload).__name__}: {payload}")

    # the barrier that starts the tools

    def start_tools(self, ctx: ReviewTask, payload: Any) -> BarrierRecords:
        """Barrier ``start_tools``: one child execution of ``review_tool`` per planned
        call, committed with the plan; each signals ``tool_finished`` when it ends."""
        return BarrierRecords(
            children=tuple(
                ChildStart(
                    TOOL,
                    ToolRun(ctx.task_id, call["id"], call["name"], call["arguments"]),
                    notify_event="tool_finished",
                    labels={"tool": call["name"]},
                )
                for call in ctx.plan
            )
        )

    # effects

    def call_planner(self, ctx: ReviewTask, payload: Any) -> Callable[[Any], dict[str, Any]]:
        """``planning`` (at_most_once): the planner sees the tools."""
        effects, messages = self.effects, [dict(m) for m in ctx.messages]
        tools = [t.spec() for t in effects.tools.values()]
        execution_id = ctx.task_id

        def work(octx: Any) -> dict[str, Any]:  # after the `plan` commit
            return effects.call_llm(
                execution_id=execution_id,
                effect="call_planner",
                key=octx.idempotency_key,
                attempt=octx.effect.attempt,
                messages=messages,
                tools=tools,
            )

        return work

    def call_reviewer(self, ctx: ReviewTask, payload: Any) -> Callable[[Any], dict[str, Any]]:
        """``reviewing`` (at_most_once): the reviewer sees the conversation under its own
        instructions, without tools."""
        effects = self.effects
        messages = [{"role": "system", "content": REVIEWER_PROMPT}, *ctx.messages[1:]]
        execution_id = ctx.task_id

        def work(octx: Any) -> dict[str, Any]:  # after the `review` commit
            return effects.call_llm(
                execution_id=execution_id,
                effect="call_reviewer",
                key=octx.idempotency_key,
                attempt=octx.effect.attempt,
                messages=messages,
            )

        return work

    def send_reply(self, ctx: ReviewTask, payload: Any) -> Callable[[Any], dict[str, Any]]:
        """``sending`` (at_most_once): the approved draft goes to the customer."""
        effects, to, text = self.effects, ctx.customer, ctx.draft or ""
        execution_id = ctx.task_id

        def work(octx: Any) -> dict[str, Any]:  # after the `send` commit
            return effects.send(octx.idempotency_key, octx.effect.attempt, execution_id, to, text)

        return work


class ToolHooks(review_tool.Hooks):
    """The tool machine's hooks: the guard choosing the path, the two offload hooks
    (``read_tool`` pure, ``act_tool`` idempotent) and the actions keeping the outcome.

    Args:
        effects: the outside world (its tools).
    """

    def __init__(self, effects: AgentEffects) -> None:
        self.effects = effects

    def has_side_effects(self, ctx: ToolRun, payload: Any) -> bool:
        """A known tool with side effects runs behind the ``tool_call`` barrier."""
        tool = self.effects.tools.get(ctx.name)
        return tool is not None and tool.side_effects

    def read_tool(self, ctx: ToolRun, payload: Any) -> Callable[[], Any]:
        """``reading`` (pure): no key needed; run again after a crash."""
        effects, call = self.effects, attrs.evolve(ctx)
        return lambda: effects.run_tool(call, None)

    def act_tool(self, ctx: ToolRun, payload: Any) -> Callable[[Any], Any]:
        """``acting`` (idempotent): the tool gets the effect's idempotency key."""
        effects, call = self.effects, attrs.evolve(ctx)
        return lambda octx: effects.run_tool(call, octx.idempotency_key)

    def remember_result(self, ctx: ToolRun, payload: Any) -> None:
        """The tool returned: its result, as JSON text."""
        ctx.status, ctx.content = "ok", json.dumps(payload, sort_keys=True)

    def remember_error(self, ctx: ToolRun, payload: Any) -> None:
        """The tool failed: the error is the result the reviewer sees."""
        ctx.status, ctx.content = "error", f"{type(payload).__name__}: {payload}"


def _assistant(answer: Mapping[str, Any]) -> dict[str, Any]:
    """The assistant message of an LLM answer, in the OpenAI chat format."""
    message: dict[str, Any] = {"role": "assistant", "content": answer.get("content")}
    if answer.get("tool_calls"):
        message["tool_calls"] = [
            {
                "id": c["id"],
                "type": "function",
                "function": {"name": c["name"], "arguments": c["arguments"]},
            }
            for c in answer["tool_calls"]
        ]
    return message


def task_context(task_id: str, request: str) -> ReviewTask:
    """A new task's context; its reply goes to ``<task_id>@example.invalid`` (the
    example starts each task under ``task_id`` as its execution id)."""
    return ReviewTask(task_id, request, f"{task_id}@example.invalid")


def agent_machines(effects: AgentEffects) -> tuple[Machine, Machine]:
    """The two machines for the durable runtime (register both: the agent starts tool
    executions): ``review_agent`` (``declined`` finishes ``cancelled``, ``failed``
    ``failed``) and ``review_tool`` (``failed`` finishes ``failed``)."""
    return (
        Machine(
            review_agent.TABLE,
            AgentHooks(effects),
            context_type=ReviewTask,
            final_status={"declined": ExecutionStatus.CANCELLED, "failed": ExecutionStatus.FAILED},
        ),
        Machine(
            review_tool.TABLE,
            ToolHooks(effects),
            context_type=ToolRun,
            final_status={"failed": ExecutionStatus.FAILED},
        ),
    )


# ------------------------------------------------------------------ the LLM


def scripted_provider() -> ScriptedProvider:
    """A deterministic LLM for tests and the demo: the answer depends only on the
    request, so a replayed call gets the same answer in any process.

    The planner (first answer of a conversation) looks up every order id it sees
    (``A1``, ``B7``...) and opens a ticket when the message says "broken"; the reviewer
    (second answer) writes a reply from the tool results.
    """

    def plan(request: LLMRequest, index: int) -> Reply:
        text = next(m.content or "" for m in reversed(request.messages) if m.role == "user")
        calls: list[tuple[str, Any]] = []
        for order_id in dict.fromkeys(re.findall(r"\b[A-Z]\d+\b", text)):
            calls.append(("lookup_order", {"order_id": order_id}))
            if "broken" in text.lower():
                calls.append(("open_ticket", {"order_id": order_id, "summary": text[:200]}))
        return Reply(tool_calls=tuple(calls)) if calls else Reply(content="No tool helps here.")

    def review(request: LLMRequest, index: int) -> Reply:
        facts = []
        for message in request.messages:
            if message.role == "tool":
                facts.append(f"{message.name}: {message.content}")
        body = " ".join(facts) if facts else "Thank you for your message."
        return Reply(content=f"Hello, here is what we found. {body}")

    return ScriptedProvider([plan, review])


def provider_from_env(environ: Mapping[str, str] | None = None) -> Provider:
    """The LLM of the example: an Anthropic Messages provider when
    ``PHRONOMY_ANTHROPIC_MODEL`` (or ``ANTHROPIC_MODEL``) is set in ``environ`` (default
    ``os.environ``), configured from ``PHRONOMY_ANTHROPIC_BASE_URL`` and
    ``PHRONOMY_ANTHROPIC_API_KEY`` (or ``ANTHROPIC_API_KEY``) there too; else an
    OpenAI-compatible provider when ``PHRONOMY_LLM_MODEL`` (or ``OPENAI_MODEL``) is set,
    configured from ``PHRONOMY_LLM_BASE_URL`` and ``PHRONOMY_LLM_API_KEY`` (or their
    ``OPENAI_`` forms); else :func:`scripted_provider` (``docs/agent.md``, "The
    Anthropic provider").

    Raises:
        ConfigurationError: the configuration is incomplete (e.g. no API key for a
            server that is not on localhost).
    """
    env = os.environ if environ is None else environ

    def first(*names: str) -> str | None:
        return next((env[n].strip() for n in names if env.get(n, "").strip()), None)

    anthropic_model = first("PHRONOMY_ANTHROPIC_MODEL", "ANTHROPIC_MODEL")
    if anthropic_model is not None:
        return AnthropicProvider(
            base_url=first("PHRONOMY_ANTHROPIC_BASE_URL"),
            api_key=first("PHRONOMY_ANTHROPIC_API_KEY", "ANTHROPIC_API_KEY"),
            model=anthropic_model,
        )
    model = first("PHRONOMY_LLM_MODEL", "OPENAI_MODEL")
    if model is None:
        return scripted_provider()
    return OpenAICompatibleProvider(
        base_url=first("PHRONOMY_LLM_BASE_URL", "OPENAI_BASE_URL"),
        api_key=first("PHRONOMY_LLM_API_KEY", "OPENAI_API_KEY"),
        model=model,
    )


# ------------------------------------------------------------------ the application


def operator_answer(record: ExecutionRecord, effects: AgentEffects) -> Answer:
    """What a truthful operator answers for an execution in ``recovery_required``: the
    subject effect's key looked up in the LLM call log, the tickets and the sent
    replies — ``succeeded`` with the recorded result when found (a recorded LLM answer
    is handed back: no second, paid call), ``retry`` when not
    (:func:`durable_service.truthful_answer`)."""
    return truthful_answer(record, effects.ledgers)


def build_app(db_path: str, provider: Provider) -> DurableApp:
    """The application with an explicit ``provider`` (see :func:`create_app`)."""
    effects = AgentEffects.beside(db_path, provider)

    def start(*tasks: tuple[str, str]) -> Callable[[Any], list[str]]:
        def run(runtime: Any) -> list[str]:
            for task_id, request in tasks:
                runtime.start(AGENT, task_context(task_id, request), execution_id=task_id)
            return [task_id for task_id, _ in tasks]

        return run

    def person(event: str | None) -> Callable[[ExecutionRecord], Answer | None]:
        def answer(record: ExecutionRecord) -> Answer | None:
            if event is None or record.state != "awaiting_approval":
                return None
            return Answer(event=event, payload={"by": "harness"})

        return answer

    return DurableApp(
        machines=agent_machines(effects),
        scenarios={
            "approved": Scenario(start(("task-a", "Order A1 arrived broken.")), person("approve")),
            "rejected": Scenario(start(("task-r", "Where is order B7?")), person("reject")),
            "no_tools": Scenario(start(("task-n", "Thanks, all good!")), person("approve")),
            "two_tasks": Scenario(
                start(("task-1", "Where is order B7?"), ("task-2", "Is C3 on its way?")),
                person("approve"),
            ),
        },
        operator=lambda record: operator_answer(record, effects),
        effects=effects.effects,
        applied_signals=applied_signals,
    )


def applied_signals(record: ExecutionRecord) -> list[Any]:
    """The signals whose change a task's stored context holds, for the interleaving
    checker (``DurableApp.applied_signals``): a person's decision, kept whole by
    :meth:`AgentHooks.remember_decision` (a tool's completion is a child's signal, not
    one a person sends)."""
    decision = record.context.get("decision") if isinstance(record.context, dict) else None
    return [decision] if decision else []


def create_app(db_path: str) -> DurableApp:
    """The application factory (``--app docs.examples.review_agent:create_app``): both
    machines with their effects beside ``db_path``, the LLM of
    :func:`provider_from_env`, the crash harness's scenarios and the truthful
    :func:`operator_answer`."""
    return build_app(db_path, provider_from_env())


# ------------------------------------------------------------------ the command line


def describe(record: ExecutionRecord) -> str:
    """One line about a task as stored: status, state, the tools it ran, the reply."""
    ctx = record.context if isinstance(record.context, dict) else {}
    facts = [f"{r['name']} {r['status']}" for r in ctx.get("tool_results", [])]
    if ctx.get("delivery"):
        facts.append(f"sent {ctx['delivery']['message_id']}")
    facts += ctx.get("errors", [])
    line = f"task {record.execution_id}: {record.status.value} in {record.state}"
    line += f" ({'; '.join(facts)})" if facts else ""
    if ctx.get("draft"):
        line += f"\n  reply: {ctx['draft']}"
    return line


def main(argv: Sequence[str] | None = None) -> int:
    """The command line (``--help``). Exit codes: 0 done, 1 gave up waiting (the tasks
    live on in the store), 2 usage, 3 a task waits for an operator (run again with
    ``--operator``)."""
    parser = argparse.ArgumentParser(description="A durable review agent (phronomy_fsm example).")
    sub = parser.add_subparsers(dest="command", required=True)
    run_cmd = sub.add_parser("run", help="start a task, resume every unfinished one, drive them")
    run_cmd.add_argument("task_id", nargs="?", help="start this task (its execution id)")
    run_cmd.add_argument(
        "--request", default="Order A1 arrived broken.", help="the customer's message"
    )
    run_cmd.add_argument("--db", required=True, help="the SQLite store")
    run_cmd.add_argument(
        "--person",
        choices=PERSON_CHOICES,
        default="later",
        help="how a person answers a reply waiting for approval: approve, reject, nobody or "
        "later (exit; answer with the signal command)",
    )
    run_cmd.add_argument(
        "--operator", action="store_true", help="resolve parked tasks from the logs"
    )
    run_cmd.add_argument("--timeout-seconds", type=float, default=60.0)
    signal_cmd = sub.add_parser("signal", help="a person answers a waiting task, from any process")
    signal_cmd.add_argument("task_id")
    signal_cmd.add_argument("decision", choices=("approve", "reject"))
    signal_cmd.add_argument("--text", help="with approve: send this text instead of the draft")
    signal_cmd.add_argument("--db", required=True)
    args = parser.parse_args(argv)

    if args.command == "signal":  # writes to the task's durable inbox; any process may
        payload = {"by": "person", **({"text": args.text} if args.text else {})}
        with SqliteBarrierStore(args.db) as store:
            try:
                sent = send_signal(store, args.task_id, args.decision, payload)
            except PhronomyError as exc:
                print(f"error: {exc}", file=sys.stderr)
                return 1
        print(f"task {args.task_id}: {args.decision} recorded (signal {sent.signal_id})")
        return 0

    effects = AgentEffects.beside(args.db, provider_from_env())
    events: queue.SimpleQueue[DurableEvent] = queue.SimpleQueue()
    store = SqliteBarrierStore(args.db)
    machines = agent_machines(effects)
    with DurableRuntime(store, machines=machines, listeners=[printing_listener(events)]) as runtime:
        if args.task_id is not None:
            context = task_context(args.task_id, args.request)
            if not runtime.start(AGENT, context, execution_id=args.task_id).created:
                print(f"task {args.task_id} exists already")
        for execution_id, status in runtime.recover().claimed:
            print(f"{execution_id}: recovered ({status})")
        code = serve(
            runtime,
            person=args.person,
            person_states={"awaiting_approval"},
            operator=(lambda record: operator_answer(record, effects)) if args.operator else None,
            events=events,
            timeout_seconds=args.timeout_seconds,
        )
    for record in store.list_records(machine=AGENT):
        print(describe(record))
    store.close()
    if code == 3:
        print("a task waits for an operator: run again with --operator", file=sys.stderr)
    elif code == 1:
        print(f"gave up after {args.timeout_seconds:g} s; run again to resume", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
