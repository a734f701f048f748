"""Budgets of agent executions: what one execution may spend, and what it has spent.

An agent may give its executions limits (:class:`Budget`): total tokens, LLM calls,
tool calls and a cost in US dollars priced from a table of per-model prices
(:class:`ModelPrice`). This module owns the arithmetic, and nothing else: what an
execution has spent (:func:`spent_of`, summed from the per-call facts its durable
context keeps — the ``llm_call_recorded`` facts of the journal — so the counts survive
a crash and a takeover exactly), whether its next call would pass a limit
(:func:`refusal`), and whether a person's extension is acceptable
(:func:`check_extension`). It works on the context as stored (JSON), so an operator's
process checks an extension against the store exactly as the running process checks the
next call. The rules are in ``docs/agent.md``, "Budgets"; the ``agent_session`` hooks
(``checking_budget``, ``budget_exhausted``) apply them.

Must not: read a store, draw ids, or change a context.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from typing import Any

import attrs

from phronomy_fsm.errors import BudgetError, ConfigurationError

#: The limits a budget may set, in the order they are checked before an LLM call.
LIMITS = ("max_llm_calls", "max_tokens", "max_cost_usd", "max_tool_calls")

#: Limits counted in whole units (the others are US dollars).
INTEGER_LIMITS = frozenset({"max_tokens", "max_llm_calls", "max_tool_calls"})

#: The key of a price table's entry for models it does not name.
ANY_MODEL = "*"


class BudgetPolicy(enum.StrEnum):
    """What an execution does when its next call would pass a limit
    (``on_budget_exhausted``): ``fail`` (it ends ``failed`` with
    :class:`~phronomy_fsm.errors.BudgetExhaustedError`) or ``wait`` (it waits, durably,
    in ``budget_exhausted`` until a person extends the budget)."""

    FAIL = "fail"
    WAIT = "wait"


@attrs.frozen
class ModelPrice:
    """The price of one model, in US dollars per million tokens: ``input_usd_per_million``
    for prompt tokens, ``output_usd_per_million`` for completion tokens (both ≥ 0)."""

    input_usd_per_million: float
    output_usd_per_million: float


def _positive(name: str, value: Any) -> int | float:
    if name in INTEGER_LIMITS:
        if type(value) is not int or value < 1:
            raise ValueError(f"{name} must be an int ≥ 1, got {value!r}")
        return value
    if type(value) not in (int, float) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a finite number of US dollars > 0, got {value!r}")
    return float(value)


@attrs.frozen
class Budget:
    """The limits of each execution of an agent (``None``: no limit), and the price
    table its cost is computed from (``docs/agent.md``, "Budgets").

    Attributes:
        max_tokens: prompt plus completion tokens of all its LLM calls, as the provider
            reported them.
        max_llm_calls: LLM calls made.
        max_tool_calls: tool calls started (each a ``tool_call`` child execution).
        max_cost_usd: US dollars, each LLM call priced by its model in ``prices``.
        prices: model name → :class:`ModelPrice` (or a pair ``(input, output)`` of
            US dollars per million tokens); the entry ``"*"`` prices any model not
            named.
    """

    max_tokens: int | None = None
    max_llm_calls: int | None = None
    max_tool_calls: int | None = None
    max_cost_usd: float | None = None
    prices: Mapping[str, Any] = attrs.field(factory=dict)

    def checked(self) -> Budget:
        """This budget with its prices as :class:`ModelPrice` objects.

        Raises:
            ConfigurationError: a limit that is not a positive int (a positive finite
                number for ``max_cost_usd``), a malformed price, or ``max_cost_usd``
                without any price.
        """
        for name in LIMITS:
            value = getattr(self, name)
            if value is not None:
                try:
                    _positive(name, value)
                except ValueError as exc:
                    raise ConfigurationError(f"budget: {exc}") from None
        if not isinstance(self.prices, Mapping):
            raise ConfigurationError(f"budget: prices must be a mapping, got {self.prices!r}")
        prices: dict[str, ModelPrice] = {}
        for model, price in self.prices.items():
            if isinstance(price, ModelPrice):
                pair: Any = (price.input_usd_per_million, price.output_usd_per_million)
            else:
                pair = price
            if (
                not isinstance(model, str)
                or not isinstance(pair, (tuple, list))
                or len(pair) != 2
                or not all(type(p) in (int, float) and math.isfinite(p) and p >= 0 for p in pair)
            ):
                raise ConfigurationError(
                    f"budget: the price of {model!r} must be a ModelPrice or a pair (input, "
                    "output) of US dollars per million tokens, each ≥ 0; got {price!r}"
                )
            prices[model] = ModelPrice(float(pair[0]), float(pair[1]))
        if self.max_cost_usd is not None and not prices:
            raise ConfigurationError(
                "budget: max_cost_usd needs prices: model name -> ModelPrice(input, output) "
                'in US dollars per million tokens ("*" for any model)'
            )
        return attrs.evolve(self, prices=prices)

    def limits(self) -> dict[str, int | float | None]:
        """The limits by name (:data:`LIMITS`)."""
        return {name: getattr(self, name) for name in LIMITS}


def budget_state(budget: Budget | None, policy: BudgetPolicy) -> dict[str, Any] | None:
    """What an execution's context keeps of its agent's budget when it starts: ``{
    "limits", "prices": {model: [input, output]}, "on_exhausted"}``, or None without a
    budget. Extensions change ``limits`` there, so they outlive the configuration."""
    if budget is None:
        return None
    return {
        "limits": budget.limits(),
        "prices": {
            model: [p.input_usd_per_million, p.output_usd_per_million]
            for model, p in sorted(budget.prices.items())
        },
        "on_exhausted": policy.value,
    }


def call_cost(
    state: Mapping[str, Any] | None, model: Any, usage: Mapping[str, Any]
) -> float | None:
    """The US dollars of one LLM call of ``model`` with ``usage`` (``prompt_tokens``,
    ``completion_tokens``) under ``state``'s prices; None when no price applies."""
    prices = (state or {}).get("prices") or {}
    price = prices.get(model) if isinstance(model, str) else None
    if price is None:
        price = prices.get(ANY_MODEL)
    if price is None:
        return None
    prompt = int(usage.get("prompt_tokens") or 0)
    completion = int(usage.get("completion_tokens") or 0)
    return (prompt * float(price[0]) + completion * float(price[1])) / 1_000_000


@attrs.frozen
class Spent:
    """What an execution has spent: ``tokens`` (prompt + completion), ``llm_calls``
    (announced, answered or not), ``tool_calls`` (started), ``cost_usd`` (of the calls
    with a price) and ``unpriced_model`` (a model of a call that has no price, or None)."""

    tokens: int = 0
    llm_calls: int = 0
    tool_calls: int = 0
    cost_usd: float = 0.0
    unpriced_model: str | None = None

    def of(self, limit: str) -> int | float:
        """The amount spent of ``limit``."""
        return {
            "max_tokens": self.tokens,
            "max_llm_calls": self.llm_calls,
            "max_tool_calls": self.tool_calls,
            "max_cost_usd": self.cost_usd,
        }[limit]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (cost rounded to a millionth of a dollar)."""
        return {
            "tokens": self.tokens,
            "llm_calls": self.llm_calls,
            "tool_calls": self.tool_calls,
            "cost_usd": round(self.cost_usd, 6),
        }


def spent_of(ctx: Mapping[str, Any]) -> Spent:
    """What the execution whose context is ``ctx`` (as stored: JSON) has spent,
    summed from its per-call facts (``llm_responses``: usage and cost of each
    answered call), its announced LLM calls and its started tool calls."""
    tokens = 0
    cost = 0.0
    unpriced = None
    state = ctx.get("budget")
    for fact in ctx.get("llm_responses") or ():
        usage = fact.get("usage") or {}
        tokens += int(usage.get("prompt_tokens") or 0) + int(usage.get("completion_tokens") or 0)
        price = fact.get("cost_usd")
        if price is None:
            price = call_cost(state, fact.get("model"), usage)
        if price is None:
            unpriced = str(fact.get("model"))
        else:
            cost += float(price)
    return Spent(
        tokens=tokens,
        llm_calls=int(ctx.get("llm_calls") or 0),
        tool_calls=int(ctx.get("tool_calls_started") or 0),
        cost_usd=cost,
        unpriced_model=unpriced,
    )


@attrs.frozen
class Refusal:
    """Why the next call is not made: ``limit`` would be passed — ``spent`` of it was
    spent, ``allowed`` is its value — by ``call`` (``llm_call`` or ``tool_calls``,
    ``calls`` of them); ``unpriced_model`` when a call's model has no price (no
    extension helps: the execution fails)."""

    limit: str
    spent: int | float
    allowed: int | float
    call: str
    calls: int = 1
    unpriced_model: str | None = None

    def message(self) -> str:
        """One sentence for people: the limit, the spent amount and the limit."""
        if self.unpriced_model is not None:
            return (
                f"max_cost_usd: model {self.unpriced_model!r} has no price in the agent's "
                'budget prices; add it (or a "*" entry)'
            )
        what = (
            "the next LLM call"
            if self.call == "llm_call"
            else f"{self.calls} tool call{'s' if self.calls != 1 else ''}"
        )
        spent = round(self.spent, 6) if isinstance(self.spent, float) else self.spent
        return f"{self.limit} exhausted: spent {spent} of {self.allowed}; {what} would pass it"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (kept in the context while the execution waits)."""
        return {
            "limit": self.limit,
            "spent": round(self.spent, 6) if isinstance(self.spent, float) else self.spent,
            "allowed": self.allowed,
            "call": self.call,
            "calls": self.calls,
        }


def pending_tool_calls(ctx: Mapping[str, Any]) -> int:
    """The tool calls of the current answer authorized to start (JSON context)."""
    return sum(1 for t in ctx.get("tools") or () if t.get("status") == "authorized")


def refusal(ctx: Mapping[str, Any]) -> Refusal | None:
    """Whether the execution's next call would pass a limit (``docs/agent.md``,
    "Budgets"). The next call is its authorized tool calls when it has some, else its
    next LLM call. A batch of ``n`` tool calls is refused when ``started + n`` would be
    more than ``max_tool_calls``; an LLM call when the calls made already reach
    ``max_llm_calls``, the tokens spent already reach ``max_tokens`` or the dollars
    spent already reach ``max_cost_usd`` (the next call's own tokens are not known
    before it is made, so one call may end above the token or cost limit; none starts
    at or above it). ``None``: nothing is refused."""
    state = ctx.get("budget")
    if not isinstance(state, Mapping):
        return None
    limits = state.get("limits") or {}
    spent = spent_of(ctx)
    batch = pending_tool_calls(ctx)
    if batch:
        allowed = limits.get("max_tool_calls")
        if allowed is not None and spent.tool_calls + batch > allowed:
            return Refusal("max_tool_calls", spent.tool_calls, allowed, "tool_calls", batch)
        return None
    for name in ("max_llm_calls", "max_tokens", "max_cost_usd"):
        allowed = limits.get(name)
        if allowed is None:
            continue
        if name == "max_cost_usd" and spent.unpriced_model is not None:
            return Refusal(name, spent.cost_usd, allowed, "llm_call", 1, spent.unpriced_model)
        if spent.of(name) >= allowed:
            return Refusal(name, spent.of(name), allowed, "llm_call")
    return None


def check_extension_limits(raw: Any) -> dict[str, int | float]:
    """The limits of an extension, checked: a non-empty mapping of limit names
    (:data:`LIMITS`) to positive ints (a positive finite number for ``max_cost_usd``).

    Raises:
        BudgetError: ``reason`` ``bad_arguments``, naming what is wrong.
    """
    if not isinstance(raw, Mapping) or not raw:
        raise BudgetError(
            f"an extension names at least one new limit ({', '.join(LIMITS)}), got {raw!r}",
            reason="bad_arguments",
        )
    out: dict[str, int | float] = {}
    for name, value in raw.items():
        if name not in LIMITS:
            raise BudgetError(
                f"unknown limit {name!r}; the limits are {', '.join(LIMITS)}",
                reason="bad_arguments",
            )
        try:
            out[name] = _positive(name, value)
        except ValueError as exc:
            raise BudgetError(str(exc), reason="bad_arguments") from None
    return out


def check_extension(
    ctx: Mapping[str, Any],
    limits: Mapping[str, int | float],
    *,
    execution_id: str | None = None,
) -> None:
    """Refuse an extension (checked by :func:`check_extension_limits`) that the
    waiting execution whose stored context is ``ctx`` cannot take: a limit lowered,
    or new limits under which its next call would still be refused. ``execution_id``
    is named in the error.

    Raises:
        BudgetError: ``reason`` ``lowers_limit`` or ``not_enough``.
    """
    state = ctx.get("budget") if isinstance(ctx.get("budget"), Mapping) else {}
    current = dict((state or {}).get("limits") or {})
    for name, value in limits.items():
        old = current.get(name)
        if old is not None and value < old:
            raise BudgetError(
                f"execution {execution_id}: {name} {value} is lower than the current limit "
                f"{old}; an extension only raises limits; nothing was written",
                execution_id=execution_id,
                reason="lowers_limit",
            )
    after = {**ctx, "budget": {**(state or {}), "limits": {**current, **limits}}}
    still = refusal(after)
    if still is not None:
        raise BudgetError(
            f"execution {execution_id}: with these limits the waiting call is still "
            f"refused ({still.message()}); raise {still.limit}; nothing was written",
            execution_id=execution_id,
            reason="not_enough",
            limit=still.limit,
            spent=still.spent,
            allowed=still.allowed,
        )


__all__ = [
    "ANY_MODEL",
    "INTEGER_LIMITS",
    "LIMITS",
    "Budget",
    "BudgetPolicy",
    "ModelPrice",
    "Refusal",
    "Spent",
    "budget_state",
    "call_cost",
    "check_extension",
    "check_extension_limits",
    "pending_tool_calls",
    "refusal",
    "spent_of",
]
